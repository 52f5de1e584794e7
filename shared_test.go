package gpuprov_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/clock"
	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/provider"
	pt "github.com/org/gpuprov/provider/providertest"
)

// The region's shared side resource is made once for every VM there, is
// kept while any of them lives, and goes a grace after the last one.
func TestSharedResourceGoesWithTheLastVM(t *testing.T) {
	e := newEnv(t)
	e.useShared()
	p := e.provisioner(e.j)
	ctx := context.Background()
	names := []string{"s1", "s2", "s3"}
	for _, n := range names {
		if _, err := p.Launch(ctx, h100(n)); err != nil {
			t.Fatal(err)
		}
	}
	sf := e.shared["a"]
	if got := sf.Made(); got != 1 {
		t.Fatalf("shared resources made: %d, want 1 for three VMs in one region", got)
	}
	for i, n := range names {
		if err := p.Delete(ctx, n); err != nil {
			t.Fatal(err)
		}
		if got := sf.Shared(); !slices.Equal(got, []string{"us-east"}) {
			t.Fatalf("after deleting %d of %d VMs: shared in %v, want [us-east] (kept for the grace)", i+1, len(names), got)
		}
	}
	e.clk.Advance(gpuprov.DefaultSharedGrace - time.Second)
	if got := sf.Shared(); !slices.Equal(got, []string{"us-east"}) {
		t.Fatalf("a second before the grace ends: shared in %v, want [us-east]", got)
	}
	e.clk.Advance(time.Second)
	pt.WaitFor(t, "the shared resource is removed after the grace", func() bool { return len(sf.Shared()) == 0 })
	if n := sf.DeletedInUse(); n != 0 {
		t.Fatalf("%d removals while an instance was live", n)
	}
}

// A VM that comes to the region within the grace uses the shared resource
// the last one left: it is not made again, and its removal waits for the
// new VM.
func TestSharedResourceKeptForTheNextVM(t *testing.T) {
	e := newEnv(t)
	e.useShared()
	p := e.provisioner(e.j)
	ctx := context.Background()
	if _, err := p.Launch(ctx, h100("first")); err != nil {
		t.Fatal(err)
	}
	if err := p.Delete(ctx, "first"); err != nil {
		t.Fatal(err)
	}
	e.clk.Advance(gpuprov.DefaultSharedGrace / 2)
	if _, err := p.Launch(ctx, h100("next")); err != nil {
		t.Fatal(err)
	}
	sf := e.shared["a"]
	if got := sf.Made(); got != 1 {
		t.Fatalf("shared resources made: %d, want 1 (the next VM uses the one kept)", got)
	}
	e.clk.Advance(2 * gpuprov.DefaultSharedGrace)
	if got := sf.Shared(); !slices.Equal(got, []string{"us-east"}) {
		t.Fatalf("with the next VM live, past the first grace: shared in %v, want [us-east]", got)
	}
	if err := p.Delete(ctx, "next"); err != nil {
		t.Fatal(err)
	}
	e.clk.Advance(gpuprov.DefaultSharedGrace)
	pt.WaitFor(t, "the shared resource is removed a grace after the next VM", func() bool { return len(sf.Shared()) == 0 })
	if n := sf.DeletedInUse(); n != 0 {
		t.Fatalf("%d removals while an instance was live", n)
	}
}

// Close removes at once the shared resources waiting out their grace, so
// that a process which ends properly leaves none; a grace of 0 removes
// them with the last VM's teardown.
func TestSharedResourceRemovedAtCloseOrWithNoGrace(t *testing.T) {
	for _, tc := range []struct {
		name  string
		grace []gpuprov.Option
		close bool
	}{
		{name: "close", close: true},
		{name: "grace 0", grace: []gpuprov.Option{gpuprov.WithSharedGrace(0)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.useShared()
			p := e.provisioner(e.j, tc.grace...)
			ctx := context.Background()
			if _, err := p.Launch(ctx, h100("only")); err != nil {
				t.Fatal(err)
			}
			if err := p.Delete(ctx, "only"); err != nil {
				t.Fatal(err)
			}
			if tc.close {
				if err := p.Close(); err != nil {
					t.Fatal(err)
				}
			}
			if got := e.shared["a"].Shared(); len(got) != 0 {
				t.Fatalf("shared in %v, want none", got)
			}
		})
	}
}

func TestSharedGraceMustNotBeNegative(t *testing.T) {
	e := newEnv(t)
	_, err := gpuprov.New(e.j, gpuprov.WithSharedGrace(-time.Second))
	if err == nil || !strings.Contains(err.Error(), "WithSharedGrace(-1s)") {
		t.Fatalf("New with a negative grace: %v, want an error naming WithSharedGrace", err)
	}
}

// A create that finds the shared resource gone (another process removed
// it after this VM's Prepare) prepares again and creates on the same
// offer: no failover, no block.
func TestCreateFindsSharedResourceGone(t *testing.T) {
	e := newEnv(t)
	e.useShared()
	sf := e.shared["a"]
	sf.GoneAtCreate = 1
	p := e.provisioner(e.j)
	vm, err := p.Launch(context.Background(), h100("gone"))
	if err != nil {
		t.Fatal(err)
	}
	if vm.Attempt != 1 || vm.Location.Zone != "us-east-1a" {
		t.Fatalf("ready on attempt %d in %s, want attempt 1 in us-east-1a", vm.Attempt, vm.Location.Zone)
	}
	if got := sf.Made(); got != 2 {
		t.Fatalf("shared resources made: %d, want 2 (again after it was removed)", got)
	}
	if got := len(e.fake("a").Calls(pt.OpPrepare)); got != 2 {
		t.Fatalf("%d Prepare calls, want 2", got)
	}
	_, evs, err := p.History(context.Background(), "gone")
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, ev := range evs {
		found = found || ev.Type == gpuprov.EvRetry && strings.Contains(ev.Message, "prepared again")
		if ev.Type == gpuprov.EvBlocked {
			t.Fatalf("blocked: %s", ev.Message)
		}
	}
	if !found {
		t.Fatal("no event says the attempt prepared again")
	}
}

// Failover in place: the next offer is in the same provider and zone (the
// on-demand twin of a stocked-out spot offer), so the teardown skips its
// Cleanup and the next attempt its Prepare; the cleanup owed is paid when
// the VM is deleted.
func TestFailoverInPlace(t *testing.T) {
	clk := clock.NewFake(t0)
	defer clk.AutoAdvance()()
	spot := pt.Offer("us-east", "us-east-1a", "h100.1", "H100-80GB", 1, 1.00)
	spot.Spot = true
	a := pt.NewFake("a", clk, spot, pt.Offer("us-east", "us-east-1a", "h100.1", "H100-80GB", 1, 2.00))
	e := newEnvWith(t, clk, []*pt.Fake{a})
	a.Script(&pt.Rule{Op: pt.OpCreate, Match: func(c *pt.Call) bool { return strings.HasSuffix(c.Offer, "|spot") },
		Err: pe(provider.Capacity, "no spot capacity")})
	req := h100("inplace")
	req.Spot = provider.SpotOrOnDemand
	vm, err := e.p.Launch(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if vm.Attempt != 2 {
		t.Fatalf("ready on attempt %d, want 2", vm.Attempt)
	}
	if n := len(a.Calls(pt.OpPrepare)); n != 1 {
		t.Fatalf("%d Prepare calls, want 1 (the second attempt uses the first's)", n)
	}
	if n := len(a.Calls(pt.OpCleanup)); n != 0 {
		t.Fatalf("%d Cleanup calls during the launch, want 0", n)
	}
	as, _, err := e.p.History(context.Background(), "inplace")
	if err != nil {
		t.Fatal(err)
	}
	if as[0].State != journal.AttemptTornDown || as[0].CleanedUp {
		t.Fatalf("attempt 1: %s, cleaned up %v; want torn down with its cleanup owed", as[0].State, as[0].CleanedUp)
	}
	if err := e.p.Delete(context.Background(), "inplace"); err != nil {
		t.Fatal(err)
	}
	e.assertClean("inplace")
	if side := e.side(); len(side) != 0 {
		t.Fatalf("side resources left after delete: %v", side)
	}
}

// A stockout stops the queue: VMs waiting for the account's turn to create
// on the offer that the first VM found stocked out leave the queue and go
// to the next offer, without sending a create to the blocked one.
//
// On the wall clock: a fake clock that jumps to the next turn as soon as
// every goroutine waits would grant the queued creates while the first
// failure is still being journaled; at 10 calls a second the engine has
// 100 ms per turn to see the block (it takes about a millisecond).
func TestStockoutStopsTheQueue(t *testing.T) {
	clk := clock.NewFake(t0) // the fakes' clock: instant boots and deletes
	fakes := standardFakes(clk)
	a := fakes[0]
	a.Caps.RequestsPerSecond, a.Caps.Burst = 10, 1
	a.Caps.PollInterval = 100 * time.Millisecond
	a.Script(&pt.Rule{Op: pt.OpCreate, Match: func(c *pt.Call) bool { return c.Location.Zone == "us-east-1a" },
		Err: pe(provider.Capacity, "no capacity")})
	e := newEnvWith(t, clk, fakes, gpuprov.WithClock(clock.Real))
	reqs := make([]gpuprov.Request, 8)
	for i := range reqs {
		reqs[i] = h100("q" + string(rune('0'+i)))
		reqs[i].Providers = []string{"a"}
	}
	for _, r := range e.p.LaunchMany(context.Background(), reqs) {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		if r.VM.Location.Zone != "us-east-1b" {
			t.Fatalf("%s ready in %s, want us-east-1b", r.VM.Name, r.VM.Location.Zone)
		}
	}
	var stocked []string
	for _, c := range a.Calls(pt.OpCreate) {
		if c.Location.Zone == "us-east-1a" {
			stocked = append(stocked, c.VM)
		}
	}
	if len(stocked) != 1 {
		t.Fatalf("creates sent to the stocked-out offer: %v, want the first VM's only", stocked)
	}
}

// A process killed while a region's shared side resource waits out its
// grace leaves it in the cloud, and no VM of the journal is left there to
// take it down: CleanupShared (which `down --all` and Sweep run) removes
// it from another process, and leaves, without an error, one that a live
// instance uses (the cloud refuses to remove it).
func TestCleanupSharedRemovesWhatAKilledProcessLeft(t *testing.T) {
	e := newEnv(t)
	e.useShared()
	sf := e.shared["a"]
	sf.RefuseInUse = true
	ctx := context.Background()
	// What the killed process left: its Prepare made the region's shared
	// resource, and no VM of the journal uses it. (Made by hand: a killed
	// Provisioner's grace would still run on the test's auto-advancing
	// clock.)
	o := sf.Offers[0]
	if _, err := sf.Prepare(ctx, &o, &provider.InstanceSpec{VM: "gone", Installation: sf.Installation, Attempt: 1}); err != nil {
		t.Fatal(err)
	}
	if got := sf.Shared(); !slices.Equal(got, []string{"us-east"}) {
		t.Fatalf("before: shared in %v, want [us-east]", got)
	}
	p := e.provisioner(e.j)
	if err := p.CleanupShared(ctx); err != nil {
		t.Fatal(err)
	}
	if got := sf.Shared(); len(got) != 0 {
		t.Fatalf("after CleanupShared: shared in %v, want none", got)
	}
	if _, err := p.Launch(ctx, h100("live")); err != nil {
		t.Fatal(err)
	}
	if err := p.CleanupShared(ctx); err != nil {
		t.Fatalf("CleanupShared with a live instance: %v, want the resource left and no error", err)
	}
	if got := sf.Shared(); !slices.Equal(got, []string{"us-east"}) {
		t.Fatalf("with a live instance: shared in %v, want [us-east] left", got)
	}
}

// TestRecoverRemovesWhatACrashedProcessLeftAfterTheGrace: the shared
// resource a killed process left in a region is removed after the grace
// that starts with Recover (not only by CleanupShared or down --all), and
// at Close when the process ends first; one an instance uses is left.
func TestRecoverRemovesWhatACrashedProcessLeftAfterTheGrace(t *testing.T) {
	for _, closeFirst := range []bool{false, true} {
		e := newEnv(t)
		e.useShared()
		sf := e.shared["a"]
		sf.RefuseInUse = true
		// A listing lag a removal after this process's own deletions
		// would wait out on an in-use answer; what a crashed process left
		// is not waited for.
		sf.Caps.ConsistencyWindow = time.Minute
		ctx := context.Background()
		o := sf.Offers[2] // eu-west: a region this process never visits
		if _, err := sf.Prepare(ctx, &o, &provider.InstanceSpec{VM: "gone", Installation: sf.Installation, Attempt: 1}); err != nil {
			t.Fatal(err)
		}
		p := e.provisioner(e.j)
		if _, err := p.Launch(ctx, h100("live")); err != nil { // us-east, in use
			t.Fatal(err)
		}
		if _, err := p.Recover(ctx); err != nil {
			t.Fatal(err)
		}
		if got := sf.Shared(); !slices.Equal(got, []string{"eu-west", "us-east"}) {
			t.Fatalf("right after Recover: shared in %v, want both (the grace runs)", got)
		}
		if closeFirst {
			start := e.clk.Now()
			p.Close()
			if took := e.clk.Now().Sub(start); took > time.Second {
				t.Errorf("Close took %v of clock time: it waited on a resource in use", took)
			}
		} else {
			e.clk.Advance(gpuprov.DefaultSharedGrace) // timers are not sleeps: AutoAdvance leaves them
			pt.WaitFor(t, "the grace to remove eu-west's", func() bool { return !slices.Contains(sf.Shared(), "eu-west") })
		}
		if got := sf.Shared(); !slices.Equal(got, []string{"us-east"}) {
			t.Fatalf("after the grace (close first: %v): shared in %v, want us-east's only (in use)", closeFirst, got)
		}
		p.Close()
	}
}
