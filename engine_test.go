package gpuprov_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/provider"
	pt "github.com/org/gpuprov/provider/providertest"
)

func TestLaunchPicksTheCheapestOfferAndIsReady(t *testing.T) {
	e := newEnv(t)
	vm, err := e.p.Launch(context.Background(), h100("train"))
	if err != nil {
		t.Fatal(err)
	}
	if vm.State != gpuprov.StateReady || vm.Provider != "a" || vm.Location.Zone != "us-east-1a" || vm.PricePerHour != 2.00 {
		t.Fatalf("got %+v", vm)
	}
	if vm.SSH == nil || vm.InstanceID == "" {
		t.Fatalf("ready VM without instance or endpoint: %+v", vm)
	}
	e.assertClean("train")
	want := []string{gpuprov.EvLaunch, gpuprov.EvAttempt, gpuprov.EvPhase, gpuprov.EvCreateSent, gpuprov.EvPhase, gpuprov.EvCreated, gpuprov.EvReady}
	if got := e.eventTypes("train"); !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
	// The journal's event log matches what the sink saw.
	evs, err := e.j.Events(context.Background(), journal.EventQuery{VM: "train"})
	if err != nil || len(evs) != len(want) {
		t.Fatalf("journal events %d (%v), want %d", len(evs), err, len(want))
	}
	// The create carried the identity and a token derived from the VM.
	creates := e.fake("a").Calls(pt.OpCreate)
	if len(creates) != 1 || creates[0].VM != "train" || creates[0].Token == "" {
		t.Fatalf("creates %+v", creates)
	}
}

func TestRequestValidationCreatesNothing(t *testing.T) {
	e := newEnv(t)
	cases := []struct {
		name string
		req  gpuprov.Request
		want string
	}{
		{"upper-case name", gpuprov.Request{Name: "Train", GPU: "H100"}, "name"},
		{"underscore", gpuprov.Request{Name: "a_b", GPU: "H100"}, "name"},
		{"trailing dash", gpuprov.Request{Name: "ab-", GPU: "H100"}, "name"},
		{"too long", gpuprov.Request{Name: strings.Repeat("a", 51), GPU: "H100"}, "at most 50"},
		{"empty name", gpuprov.Request{GPU: "H100"}, "name: empty"},
		{"unknown GPU lists known", gpuprov.Request{Name: "x", GPU: "TPU-V5"}, "known: A10, A100-40GB"},
		{"GPU typo suggests the nearest", gpuprov.Request{Name: "x", GPU: "H1OO"}, `gpu: unknown GPU "H1OO": did you mean H100-80GB?`},
		{"negative count", gpuprov.Request{Name: "x", GPU: "L4", GPUCount: -1}, "gpu_count"},
		{"NaN price", gpuprov.Request{Name: "x", GPU: "L4", MaxPricePerHour: nan()}, "max_price_per_hour"},
		{"bad spot", gpuprov.Request{Name: "x", GPU: "L4", Spot: "maybe"}, "spot"},
		{"unknown provider", gpuprov.Request{Name: "x", GPU: "L4", Providers: []string{"aws"}}, `"aws" is not configured`},
		{"bad port", gpuprov.Request{Name: "x", GPU: "L4", OpenPorts: []provider.Port{{Number: 70000, Protocol: "tcp"}}}, "open_ports"},
		{"replacement of an on-demand VM", gpuprov.Request{Name: "x", GPU: "L4", OnInterruption: gpuprov.ReplaceWhenReady},
			"on_interruption: \"replace\": only spot VMs are watched"},
		{"negative idle timeout", gpuprov.Request{Name: "x", GPU: "L4", IdleTimeout: -time.Minute}, "idle_timeout: negative"},
		{"idle threshold over 100%", gpuprov.Request{Name: "x", GPU: "L4", IdleTimeout: time.Hour, IdleBelow: 150}, "idle_below: 150 is not a percentage"},
		{"busy command without a timeout", gpuprov.Request{Name: "x", GPU: "L4", BusyCommand: "true"}, "idle_below and busy_command need an idle_timeout"},
		{"unknown interruption policy", gpuprov.Request{Name: "x", GPU: "L4", Spot: provider.SpotOnly, OnInterruption: "restart"},
			`on_interruption: "restart": want "" (notice and hook only), "replace" or "replace-at-reclaim"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := e.p.Launch(context.Background(), c.req)
			if !errors.Is(err, gpuprov.ErrInvalidRequest) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want ErrInvalidRequest mentioning %q", err, c.want)
			}
		})
	}
	if vms, _ := e.j.ListVMs(context.Background(), journal.ListOptions{}); len(vms) != 0 {
		t.Fatalf("invalid requests journaled %d VMs", len(vms))
	}
	for _, f := range e.fakes {
		if calls := f.Calls(); len(calls) != 0 {
			t.Fatalf("invalid requests reached %s: %+v", f.Name(), calls)
		}
	}
}

func nan() float64 { z := 0.0; return z / z }

func TestDuplicateNameIsRefused(t *testing.T) {
	e := newEnv(t)
	if _, err := e.p.Launch(context.Background(), h100("dup")); err != nil {
		t.Fatal(err)
	}
	if _, err := e.p.Launch(context.Background(), h100("dup")); !errors.Is(err, journal.ErrExists) {
		t.Fatalf("second launch of a ready name: %v", err)
	}
	if n := len(e.live()); n != 1 {
		t.Fatalf("%d instances after a refused duplicate", n)
	}
}

// TestPolicy drives every ErrorKind through every primitive and asserts what
// the core does: retry, tear down, block (and at which scope), or abort.
func TestPolicy(t *testing.T) {
	type want struct {
		state    journal.VMState
		provider string // where the VM ended ready ("" for failed)
		zone     string
		errIs    error
		blocks   []string // block keys expected
		creates  int      // create calls on fake a
		deletes  bool     // whether fake a saw a delete
	}
	firstOffer := func(c *pt.Call) bool { return c.Location.Zone == "us-east-1a" }
	cases := []struct {
		name  string
		rules []*pt.Rule
		want  want
	}{
		// prepare
		{"prepare transient retried", []*pt.Rule{{Op: pt.OpPrepare, Err: pe(provider.Transient, "503"), Times: 2}},
			want{state: journal.StateReady, provider: "a", zone: "us-east-1a", creates: 1}},
		{"prepare capacity next offer", []*pt.Rule{{Op: pt.OpPrepare, Match: firstOffer, Err: pe(provider.Capacity, "no stock")}},
			want{state: journal.StateReady, provider: "a", zone: "us-east-1b", blocks: []string{"offer:a|us-east|us-east-1a|h100.1|od"}, creates: 1}},
		{"prepare quota blocks region", []*pt.Rule{{Op: pt.OpPrepare, Match: firstOffer, Err: pe(provider.Quota, "vcpu limit")}},
			want{state: journal.StateReady, provider: "a", zone: "eu-west-1a", blocks: []string{"region:a|us-east"}, creates: 1}},
		{"prepare unavailable blocks offer", []*pt.Rule{{Op: pt.OpPrepare, Match: firstOffer, Err: pe(provider.Unavailable, "no such image")}},
			want{state: journal.StateReady, provider: "a", zone: "us-east-1b", blocks: []string{"offer:a|us-east|us-east-1a|h100.1|od"}, creates: 1}},
		{"prepare invalid aborts", []*pt.Rule{{Op: pt.OpPrepare, Err: pe(provider.InvalidRequest, "bad zone")}},
			want{state: journal.StateFailed, errIs: gpuprov.ErrAborted}},
		{"prepare credentials aborts and blocks provider", []*pt.Rule{{Op: pt.OpPrepare, Err: pe(provider.Credentials, "401")}},
			want{state: journal.StateFailed, errIs: gpuprov.ErrAborted, blocks: []string{"provider:a"}}},
		{"prepare unclassified is failed", []*pt.Rule{{Op: pt.OpPrepare, Match: firstOffer, Err: errors.New("boom")}},
			want{state: journal.StateReady, provider: "a", zone: "us-east-1b", blocks: []string{"offer:a|us-east|us-east-1a|h100.1|od"}, creates: 1}},
		// create
		{"create transient retried", []*pt.Rule{{Op: pt.OpCreate, Err: pe(provider.Transient, "timeout"), Times: 1}},
			want{state: journal.StateReady, provider: "a", zone: "us-east-1a", creates: 2}},
		// The fake honours tokens: the replay is answered with the
		// instance that landed (one instance, checked by assertClean).
		{"create lost response replayed with its token", []*pt.Rule{{Op: pt.OpCreate, Err: pe(provider.Transient, "response lost"), Times: 1, Land: true}},
			want{state: journal.StateReady, provider: "a", zone: "us-east-1a", creates: 2}},
		{"create capacity next offer", []*pt.Rule{{Op: pt.OpCreate, Match: firstOffer, Err: pe(provider.Capacity, "InsufficientInstanceCapacity")}},
			want{state: journal.StateReady, provider: "a", zone: "us-east-1b", blocks: []string{"offer:a|us-east|us-east-1a|h100.1|od"}, creates: 2}},
		{"create capacity with zone scope", []*pt.Rule{{Op: pt.OpCreate, Match: firstOffer,
			Err: &provider.Error{Kind: provider.Capacity, Op: "create", Provider: "a", Err: errors.New("zone exhausted"), Block: provider.ScopeZone}}},
			want{state: journal.StateReady, provider: "a", zone: "us-east-1b", blocks: []string{"zone:a|us-east|us-east-1a"}, creates: 2}},
		{"create quota everywhere on a fails over to b", []*pt.Rule{{Op: pt.OpCreate, Match: func(c *pt.Call) bool { return strings.HasPrefix(c.Offer, "a|") }, Err: pe(provider.Quota, "limit")}},
			want{state: journal.StateReady, provider: "b", blocks: []string{"region:a|us-east", "region:a|eu-west"}, creates: 2}},
		{"create failed tears down and next", []*pt.Rule{{Op: pt.OpCreate, Match: firstOffer, Err: pe(provider.Failed, "internal"), Land: true}},
			want{state: journal.StateReady, provider: "a", zone: "us-east-1b", blocks: []string{"offer:a|us-east|us-east-1a|h100.1|od"}, creates: 2, deletes: true}},
		{"capacity that landed anyway is still torn down", []*pt.Rule{{Op: pt.OpCreate, Match: firstOffer, Err: pe(provider.Capacity, "none"), Land: true}},
			want{state: journal.StateReady, provider: "a", zone: "us-east-1b", blocks: []string{"offer:a|us-east|us-east-1a|h100.1|od"}, creates: 2, deletes: true}},
		{"create invalid aborts", []*pt.Rule{{Op: pt.OpCreate, Err: pe(provider.InvalidRequest, "bad ami")}},
			want{state: journal.StateFailed, errIs: gpuprov.ErrAborted, creates: 1}},
		{"create credentials aborts", []*pt.Rule{{Op: pt.OpCreate, Err: pe(provider.Credentials, "expired")}},
			want{state: journal.StateFailed, errIs: gpuprov.ErrAborted, blocks: []string{"provider:a"}, creates: 1}},
		// observe while booting
		{"observe transient keeps polling", []*pt.Rule{{Op: pt.OpObserve, Err: pe(provider.Transient, "429"), Times: 3}},
			want{state: journal.StateReady, provider: "a", zone: "us-east-1a", creates: 1}},
		{"observe failed tears down and next", []*pt.Rule{{Op: pt.OpObserve, Match: firstOffer, Err: pe(provider.Failed, "weird"), Times: 1}},
			want{state: journal.StateReady, provider: "a", zone: "us-east-1b", blocks: []string{"offer:a|us-east|us-east-1a|h100.1|od"}, creates: 2, deletes: true}},
		{"observe credentials aborts but still tears down", []*pt.Rule{{Op: pt.OpObserve, Err: pe(provider.Credentials, "revoked"), Times: 1}},
			want{state: journal.StateFailed, errIs: gpuprov.ErrAborted, blocks: []string{"provider:a"}, creates: 1, deletes: true}},
		// delete and cleanup during a teardown (caused by a capacity stockout after a landed create)
		{"delete transient during teardown retried", []*pt.Rule{
			{Op: pt.OpCreate, Match: firstOffer, Err: pe(provider.Failed, "?"), Land: true},
			{Op: pt.OpDelete, Err: pe(provider.Transient, "throttled"), Times: 2}},
			want{state: journal.StateReady, provider: "a", zone: "us-east-1b", blocks: []string{"offer:a|us-east|us-east-1a|h100.1|od"}, creates: 2, deletes: true}},
		{"cleanup transient retried", []*pt.Rule{
			{Op: pt.OpPrepare, Match: firstOffer, Err: pe(provider.Capacity, "none")},
			{Op: pt.OpCleanup, Err: pe(provider.Transient, "throttled"), Times: 2}},
			want{state: journal.StateReady, provider: "a", zone: "us-east-1b", blocks: []string{"offer:a|us-east|us-east-1a|h100.1|od"}, creates: 1}},
	}
	for _, observeOnly := range []bool{false, true} {
		for _, c := range cases {
			name := c.name + " (shared listing)"
			if observeOnly {
				name = c.name + " (observe per VM)"
			}
			t.Run(name, func(t *testing.T) {
				e := newEnv(t)
				if observeOnly {
					e.observeOnly = true
					e.p = e.provisioner(e.j)
				}
				var rules []*pt.Rule
				for _, r := range c.rules {
					r := *r // rules count their uses: each run gets fresh ones
					rules = append(rules, &r)
					if r.Op == pt.OpObserve {
						// The engine looks through List where the cloud has it.
						l := r
						l.Op = pt.OpList
						rules = append(rules, &l)
					}
				}
				e.fake("a").Script(rules...)
				vm, err := e.p.Launch(context.Background(), h100("vm"))
				if c.want.errIs != nil {
					if !errors.Is(err, c.want.errIs) {
						t.Fatalf("err %v, want %v", err, c.want.errIs)
					}
				} else if err != nil {
					t.Fatalf("launch: %v", err)
				}
				row := e.assertClean("vm")
				if row.State != c.want.state {
					t.Fatalf("state %s, want %s", row.State, c.want.state)
				}
				if c.want.state == journal.StateReady && (vm.Provider != c.want.provider || vm.Location.Zone != c.want.zone) {
					t.Fatalf("ready on %s/%s, want %s/%s", vm.Provider, vm.Location.Zone, c.want.provider, c.want.zone)
				}
				blocks, err := e.j.Blocks(context.Background(), e.clk.Now())
				if err != nil {
					t.Fatal(err)
				}
				var keys []string
				for _, b := range blocks {
					keys = append(keys, b.Key)
				}
				slices.Sort(keys)
				wantKeys := slices.Sorted(slices.Values(c.want.blocks))
				if !slices.Equal(keys, wantKeys) {
					t.Fatalf("blocks %v, want %v", keys, wantKeys)
				}
				if n := len(e.fake("a").Calls(pt.OpCreate)); n != c.want.creates {
					t.Fatalf("%d creates on a, want %d", n, c.want.creates)
				}
				if got := len(e.fake("a").Calls(pt.OpDelete)) > 0; got != c.want.deletes {
					t.Fatalf("deletes on a: %v, want %v", got, c.want.deletes)
				}
				lists, observes := len(e.fake("a").Calls(pt.OpList)), len(e.fake("a").Calls(pt.OpObserve))
				if observeOnly && lists != 0 || !observeOnly && observes != 0 {
					t.Fatalf("%d lists and %d observes on a with observeOnly=%v", lists, observes, observeOnly)
				}
			})
		}
	}
}

// A teardown that cannot finish leaves the VM deleting, with the error, and
// the live instance visible; Delete later finishes it.
func TestTeardownThatCannotFinishStaysDeleting(t *testing.T) {
	e := newEnv(t)
	e.fake("a").Script(
		&pt.Rule{Op: pt.OpCreate, Err: pe(provider.Failed, "?"), Land: true, Times: 1},
		&pt.Rule{Op: pt.OpDelete, Err: pe(provider.Credentials, "revoked"), Times: 1},
	)
	_, err := e.p.Launch(context.Background(), h100("stuck"))
	if !errors.Is(err, gpuprov.ErrTeardownIncomplete) {
		t.Fatalf("err %v, want ErrTeardownIncomplete", err)
	}
	row, _ := e.j.GetVM(context.Background(), "stuck")
	if row.State != journal.StateDeleting || !strings.Contains(row.LastError, "revoked") {
		t.Fatalf("row %s %q", row.State, row.LastError)
	}
	if n := len(e.live()); n != 1 {
		t.Fatalf("%d live instances; the one the teardown could not delete must still be there", n)
	}
	if err := e.p.Delete(context.Background(), "stuck"); err != nil {
		t.Fatal(err)
	}
	e.assertClean("stuck")
}

func TestTeardownOnCancel(t *testing.T) {
	e := newEnv(t)
	e.fake("a").BootTime = 10 * time.Minute
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := e.provisioner(e.j, gpuprov.WithEvents(func(ev gpuprov.Event) {
		if ev.Type == gpuprov.EvCreated {
			cancel() // Ctrl-C while the instance boots
		}
	}))
	_, err := p.Launch(ctx, h100("cancelled"))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}
	row := e.assertClean("cancelled")
	if row.State != journal.StateFailed {
		t.Fatalf("state %s", row.State)
	}
	if len(e.fake("a").Calls(pt.OpDelete)) == 0 || len(e.fake("a").Calls(pt.OpCleanup)) == 0 {
		t.Fatal("no delete or cleanup after cancel")
	}
}

func TestTeardownOnDeadline(t *testing.T) {
	e := newEnv(t)
	for _, f := range e.fakes {
		f.BootTime = 2 * time.Hour
	}
	req := h100("late")
	req.Timeout = 5 * time.Minute
	start := e.clk.Now()
	_, err := e.p.Launch(context.Background(), req)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v, want DeadlineExceeded", err)
	}
	if took := e.clk.Now().Sub(start); took < 5*time.Minute || took > 20*time.Minute {
		t.Fatalf("gave up after %v of fake time, want about 5m plus teardown", took)
	}
	e.assertClean("late")
}

func TestBootTimeoutFailsOverAndBootFailureToo(t *testing.T) {
	e := newEnv(t)
	a := e.fake("a")
	a.FailBoot("a|us-east|us-east-1a|h100.1|od")
	a.Caps.BootTimeout = 3 * time.Minute
	vm, err := e.p.Launch(context.Background(), h100("boots"))
	if err != nil {
		t.Fatal(err)
	}
	if vm.Location.Zone != "us-east-1b" {
		t.Fatalf("ready in %s, want the next offer after a boot failure", vm.Location.Zone)
	}
	e.assertClean("boots")
}

func TestNoOffersAndTheBound(t *testing.T) {
	e := newEnv(t)
	req := h100("cheap")
	req.MaxPricePerHour = 1
	if _, err := e.p.Launch(context.Background(), req); !errors.Is(err, gpuprov.ErrNoOffers) {
		t.Fatalf("err %v, want ErrNoOffers", err)
	}
	e.assertClean("cheap")

	e2 := newEnv(t)
	for _, f := range e2.fakes {
		f.Script(&pt.Rule{Op: pt.OpCreate, Err: pe(provider.Capacity, "none")})
	}
	req = h100("bounded")
	req.MaxOffers = 2
	_, err := e2.p.Launch(context.Background(), req)
	if !errors.Is(err, gpuprov.ErrOffersExhausted) {
		t.Fatalf("err %v, want ErrOffersExhausted", err)
	}
	if n := len(e2.fake("a").Calls(pt.OpCreate)) + len(e2.fake("b").Calls(pt.OpCreate)); n != 2 {
		t.Fatalf("%d creates, want the bound of 2", n)
	}
	e2.assertClean("bounded")
}

// A block recorded by one launch makes the next launch skip the offer
// without calling the cloud.
func TestBlocklistIsSharedAndExpires(t *testing.T) {
	e := newEnv(t, gpuprov.WithBlockTTL(provider.Capacity, 10*time.Minute))
	e.fake("a").Script(&pt.Rule{Op: pt.OpCreate, Match: func(c *pt.Call) bool { return c.Location.Zone == "us-east-1a" }, Err: pe(provider.Capacity, "none"), Times: 1})
	if _, err := e.p.Launch(context.Background(), h100("first")); err != nil {
		t.Fatal(err)
	}
	before := len(e.fake("a").Calls(pt.OpPrepare))
	vm, err := e.p.Launch(context.Background(), h100("second"))
	if err != nil {
		t.Fatal(err)
	}
	if vm.Location.Zone != "us-east-1b" || len(e.fake("a").Calls(pt.OpPrepare)) != before+1 {
		t.Fatalf("second launch went to %s; the blocked offer must be skipped without a call", vm.Location.Zone)
	}
	e.clk.Advance(11 * time.Minute)
	vm, err = e.p.Launch(context.Background(), h100("third"))
	if err != nil {
		t.Fatal(err)
	}
	if vm.Location.Zone != "us-east-1a" {
		t.Fatalf("after the block expired the cheapest offer must be tried again, got %s", vm.Location.Zone)
	}
}

func TestDeleteTearsEverythingDown(t *testing.T) {
	e := newEnv(t)
	e.fake("a").DeleteTime = 30 * time.Second
	if _, err := e.p.Launch(context.Background(), h100("gone")); err != nil {
		t.Fatal(err)
	}
	if err := e.p.Delete(context.Background(), "gone"); err != nil {
		t.Fatal(err)
	}
	row := e.assertClean("gone")
	if row.State != journal.StateDeleted {
		t.Fatalf("state %s", row.State)
	}
	if err := e.p.Delete(context.Background(), "gone"); err != nil {
		t.Fatalf("deleting a deleted VM: %v", err)
	}
	if err := e.p.Delete(context.Background(), "never"); !errors.Is(err, gpuprov.ErrNotFound) {
		t.Fatalf("deleting an unknown VM: %v", err)
	}
	// The name can be used again, with a new identity and token.
	if _, err := e.p.Launch(context.Background(), h100("gone")); err != nil {
		t.Fatal(err)
	}
	creates := e.fake("a").Calls(pt.OpCreate)
	if len(creates) != 2 || creates[0].Token == creates[1].Token {
		t.Fatalf("a reused name must get a fresh idempotency token: %+v", creates)
	}
}

func TestHealthAndSweep(t *testing.T) {
	e := newEnv(t)
	vm, err := e.p.Launch(context.Background(), h100("healthy"))
	if err != nil {
		t.Fatal(err)
	}
	d, err := e.p.Health(context.Background(), "healthy")
	if err != nil || d.Verdict() != provider.Healthy {
		t.Fatalf("health %v %+v", err, d)
	}
	e.fake("a").Preempt(vm.InstanceID)
	d, err = e.p.Health(context.Background(), "healthy")
	if err != nil || d.Verdict() != provider.Gone {
		t.Fatalf("after preemption: %v %s %+v", err, d.Verdict(), d)
	}

	// An instance of this installation that no VM owns is an orphan once
	// older than the grace period.
	a := e.fake("a")
	spec := &provider.InstanceSpec{VM: "stray", Installation: e.j.Installation(), Attempt: 1}
	o := a.Offers[0]
	if _, err := a.Create(context.Background(), &o, nil, spec); err != nil {
		t.Fatal(err)
	}
	orphans, err := e.p.Sweep(context.Background(), gpuprov.SweepOptions{Grace: time.Minute})
	if err != nil || len(orphans) != 0 {
		t.Fatalf("a fresh instance is within the grace period: %v %+v", err, orphans)
	}
	e.clk.Advance(2 * time.Minute)
	orphans, err = e.p.Sweep(context.Background(), gpuprov.SweepOptions{Grace: time.Minute})
	if err != nil || len(orphans) != 1 || orphans[0].VM != "stray" || orphans[0].Deleted {
		t.Fatalf("dry run: %v %+v", err, orphans)
	}
	orphans, err = e.p.Sweep(context.Background(), gpuprov.SweepOptions{Grace: time.Minute, Delete: true})
	if err != nil || len(orphans) != 1 || !orphans[0].Deleted {
		t.Fatalf("delete: %v %+v", err, orphans)
	}
	for _, in := range e.live() {
		if in.VM == "stray" {
			t.Fatal("orphan still live after sweep --delete")
		}
	}
}

// If the cloud holds two instances of one VM anyway, the boot keeps one and
// deletes the other.
func TestDuplicateInstanceIsDeleted(t *testing.T) {
	e := newEnv(t)
	a := e.fake("a")
	a.BootTime = 20 * time.Second
	p := e.provisioner(e.j, gpuprov.WithEvents(func(ev gpuprov.Event) {
		if ev.Type == gpuprov.EvCreated && ev.VM == "twin" {
			// A stray second machine with the same identity appears.
			o := a.Offers[0]
			spec := &provider.InstanceSpec{VM: "twin", Installation: e.j.Installation(), Attempt: 99}
			if _, err := a.Create(context.Background(), &o, nil, spec); err != nil {
				t.Error(err)
			}
		}
	}))
	if _, err := p.Launch(context.Background(), h100("twin")); err != nil {
		t.Fatal(err)
	}
	e.assertClean("twin")
	if !slices.Contains(e.eventTypes("twin"), gpuprov.EvDuplicate) {
		t.Fatalf("no duplicate event: %v", e.eventTypes("twin"))
	}
}

// VMs booting in one location share one List call per poll instead of one
// Observe call each.
func TestPollingIsSharedPerLocation(t *testing.T) {
	e := newEnv(t)
	a := e.fake("a")
	a.BootTime = 10 * time.Second // ten polls at the fake's 1s interval
	var reqs []gpuprov.Request
	for i := range 40 {
		r := h100(fmt.Sprintf("fleet-%d", i))
		r.Providers = []string{"a"}
		reqs = append(reqs, r)
	}
	for _, res := range e.p.LaunchMany(context.Background(), reqs) {
		if res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	lists, observes := len(a.Calls(pt.OpList)), len(a.Calls(pt.OpObserve))
	if observes != 0 || lists > 40 {
		t.Fatalf("40 VMs booting 10 polls each made %d List and %d Observe calls; want at most 40 Lists (one per poll, not per VM)", lists, observes)
	}
	t.Logf("40 VMs × 10 polls: %d List calls", lists)
}

// A Grace of NoGrace reports an orphan however young it is; a zero Grace is
// the documented default, not zero.
func TestSweepNoGrace(t *testing.T) {
	e := newEnv(t)
	a := e.fake("a")
	spec := &provider.InstanceSpec{VM: "young", Installation: e.j.Installation(), Attempt: 1}
	o := a.Offers[0]
	if _, err := a.Create(context.Background(), &o, nil, spec); err != nil {
		t.Fatal(err)
	}
	e.clk.Advance(time.Second)
	orphans, err := e.p.Sweep(context.Background(), gpuprov.SweepOptions{})
	if err != nil || len(orphans) != 0 {
		t.Fatalf("zero Grace must mean DefaultSweepGrace (%s): %v %+v", gpuprov.DefaultSweepGrace, err, orphans)
	}
	orphans, err = e.p.Sweep(context.Background(), gpuprov.SweepOptions{Grace: gpuprov.NoGrace})
	if err != nil || len(orphans) != 1 || orphans[0].VM != "young" {
		t.Fatalf("NoGrace: a one-second-old orphan must be reported: %v %+v", err, orphans)
	}
}

// A create whose answer was lost (it landed) is sent again at once with
// the same token on a cloud that honours tokens, and the cloud's answer to
// the replay is the instance that landed: no wait for the listing lag.
// Without tokens the core only observes, until the instance shows in the
// listing, and adopts it. Either way one machine.
func TestLostCreateIsReplayedWithItsTokenOrObserved(t *testing.T) {
	for _, tokens := range []bool{true, false} {
		t.Run(fmt.Sprintf("tokens=%v", tokens), func(t *testing.T) {
			e := newEnv(t)
			a := e.fake("a")
			a.Idempotent = tokens
			a.ListLag, a.Caps.ConsistencyWindow = 20*time.Second, 25*time.Second
			e.p = e.provisioner(e.j) // the capabilities are read as it is built
			a.Script(&pt.Rule{Op: pt.OpCreate, Err: pe(provider.Transient, "response lost"), Times: 1, Land: true})
			start := e.clk.Now()
			if _, err := e.p.Launch(context.Background(), h100("vm")); err != nil {
				t.Fatal(err)
			}
			e.assertClean("vm")
			var took time.Duration // launch → the instance journaled
			e.mu.Lock()
			for _, ev := range e.events {
				if ev.VM == "vm" && (ev.Type == gpuprov.EvCreated || ev.Type == gpuprov.EvAdopted) {
					took = ev.Time.Sub(start)
				}
			}
			e.mu.Unlock()
			adopted := slices.Contains(e.eventTypes("vm"), gpuprov.EvAdopted)
			creates := len(a.Calls(pt.OpCreate))
			if tokens {
				if creates != 2 || adopted || took >= a.ListLag {
					t.Fatalf("%d creates, adopted %v, instance known after %v; want the create replayed at once (2 creates, no adoption, before the %v lag)", creates, adopted, took, a.ListLag)
				}
				return
			}
			if creates != 1 || !adopted || took < a.ListLag {
				t.Fatalf("%d creates, adopted %v, instance known after %v; want the instance observed and adopted after the %v lag, no resend", creates, adopted, took, a.ListLag)
			}
		})
	}
}
