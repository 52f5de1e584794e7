package gpuprov_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/provider"
	pt "github.com/org/gpuprov/provider/providertest"
)

// Every way a launch ends matches a sentinel a caller can branch on, and
// every error kind the events carry is one ErrorKinds documents.
func TestLaunchEndsMatchSentinelsAndDocumentedKinds(t *testing.T) {
	for _, tc := range []struct {
		name   string
		setup  func(e *env) []gpuprov.Option
		req    func(r *gpuprov.Request)
		cancel bool
		want   []error
		kind   string // the VM's LastErrorKind
	}{
		{name: "no offers under the cap", req: func(r *gpuprov.Request) { r.MaxPricePerHour = 0.5 },
			want: []error{gpuprov.ErrNoOffers}, kind: gpuprov.KindNoOffers},
		{name: "every offer fails", setup: func(e *env) []gpuprov.Option {
			for _, f := range e.fakes {
				f.Script(&pt.Rule{Op: pt.OpCreate, Err: pe(provider.Capacity, "sold out")})
			}
			return nil
		}, want: []error{gpuprov.ErrNoOffers, provider.Capacity}, kind: gpuprov.KindNoOffers},
		{name: "the bound on offers", setup: func(e *env) []gpuprov.Option {
			e.fake("a").Script(&pt.Rule{Op: pt.OpCreate, Err: pe(provider.Failed, "internal error")})
			return nil
		}, req: func(r *gpuprov.Request) { r.MaxOffers = 2 },
			want: []error{gpuprov.ErrOffersExhausted, provider.Failed}, kind: gpuprov.KindNoOffers},
		{name: "deadline", setup: func(e *env) []gpuprov.Option {
			for _, f := range e.fakes {
				f.BootTime = 2 * time.Hour
			}
			return nil
		}, req: func(r *gpuprov.Request) { r.Timeout = time.Minute },
			want: []error{context.DeadlineExceeded}, kind: gpuprov.KindDeadline},
		{name: "cancelled", cancel: true, want: []error{context.Canceled}, kind: gpuprov.KindCanceled},
		{name: "credentials", setup: func(e *env) []gpuprov.Option {
			e.fake("a").Script(&pt.Rule{Op: pt.OpCreate, Err: pe(provider.Credentials, "token revoked")})
			return nil
		}, want: []error{gpuprov.ErrAborted, provider.Credentials}, kind: "credentials"},
		{name: "bootstrap fails", setup: func(e *env) []gpuprov.Option {
			fn := newFakeNodes()
			fn.failBoot["vm"] = true
			return []gpuprov.Option{gpuprov.WithConnector(fn), gpuprov.WithBootstrapper(fn)}
		}, want: []error{gpuprov.ErrAborted}, kind: gpuprov.KindBootstrap},
		{name: "connect fails on every offer", setup: func(e *env) []gpuprov.Option {
			fn := newFakeNodes()
			fn.failConn["vm"] = 1000
			return []gpuprov.Option{gpuprov.WithConnector(fn), gpuprov.WithPhaseTimeouts(time.Minute, time.Minute)}
		}, req: func(r *gpuprov.Request) { r.MaxOffers = 2 },
			want: []error{gpuprov.ErrOffersExhausted}, kind: gpuprov.KindNoOffers},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			var opts []gpuprov.Option
			if tc.setup != nil {
				opts = tc.setup(e)
			}
			parked := &parkedConnector{in: make(chan struct{})}
			if tc.cancel {
				opts = append(opts, gpuprov.WithConnector(parked))
			}
			p := e.provisioner(e.j, opts...)
			req := h100("vm")
			if tc.req != nil {
				tc.req(&req)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.cancel {
				go func() { <-parked.in; cancel() }() // cancelled while it connects
			}
			_, err := p.Launch(ctx, req)
			for _, w := range tc.want {
				if !errors.Is(err, w) {
					t.Errorf("launch error %v does not match %v", err, w)
				}
			}
			row := e.assertClean("vm")
			if row.State != journal.StateFailed || row.LastErrorKind != tc.kind {
				t.Errorf("VM %s with kind %q, want failed with %q", row.State, row.LastErrorKind, tc.kind)
			}
			evs, err := e.j.Events(context.Background(), journal.EventQuery{})
			if err != nil {
				t.Fatal(err)
			}
			for _, ev := range evs {
				if ev.ErrorKind != "" && !slices.Contains(gpuprov.ErrorKinds(), ev.ErrorKind) {
					t.Errorf("event %s carries kind %q, which ErrorKinds does not list", ev, ev.ErrorKind)
				}
			}
		})
	}
}

// Every kind an event carries is a documented one, beyond launches too: a
// cluster whose node fails, a placed cluster that moves, a teardown that
// cannot finish and its Recover, a reaped VM, a swept orphan, in the journal
// and in what the sinks see.
func TestEveryEventKindIsDocumented(t *testing.T) {
	var mu sync.Mutex
	var sunk []gpuprov.Event
	sink := gpuprov.WithEvents(func(ev gpuprov.Event) { mu.Lock(); sunk = append(sunk, ev); mu.Unlock() })
	e := newEnv(t)
	fn := newFakeNodes()
	fn.failBoot["c-1"] = true
	p := e.provisioner(e.j, sink, gpuprov.WithConnector(fn), gpuprov.WithBootstrapper(fn), gpuprov.WithJoiner(fn))
	ctx := context.Background()

	if _, err := p.LaunchCluster(ctx, gpuprov.ClusterRequest{Name: "c", Nodes: 2, Node: h100("")}); err == nil {
		t.Fatal("a cluster whose node fails its bootstrap launched")
	}
	e.fake("a").Script(&pt.Rule{Op: pt.OpCreate, Match: func(c *pt.Call) bool { return c.VM == "z-1" && c.Location.Zone == "us-east-1a" },
		Err: pe(provider.Capacity, "none"), Times: 1})
	if _, err := p.LaunchCluster(ctx, gpuprov.ClusterRequest{Name: "z", Nodes: 2, Node: h100(""), Placement: gpuprov.PlacementSameZone}); err != nil {
		t.Fatalf("placed cluster: %v", err)
	}
	leashed := h100("leashed")
	leashed.TTL = time.Hour
	if _, err := p.Launch(ctx, leashed); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Launch(ctx, h100("stuck")); err != nil {
		t.Fatal(err)
	}
	var outage atomic.Bool
	outage.Store(true)
	e.fake("a").Script(&pt.Rule{Op: pt.OpDelete, Match: func(c *pt.Call) bool { return c.VM == "stuck" && outage.Load() }, Err: pe(provider.Transient, "HTTP 503")})
	if err := p.Delete(ctx, "stuck"); !errors.Is(err, gpuprov.ErrTeardownIncomplete) {
		t.Fatalf("delete through an outage: %v", err)
	}
	outage.Store(false)
	e.clk.Advance(2 * time.Hour)
	if _, err := p.Recover(ctx); err != nil { // finishes stuck, reaps leashed
		t.Fatal(err)
	}
	o := e.fake("a").Offers[0]
	if _, err := e.fake("a").Create(ctx, &o, nil, &provider.InstanceSpec{VM: "orphan", Installation: e.j.Installation(), Attempt: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Sweep(ctx, gpuprov.SweepOptions{Delete: true, Grace: gpuprov.NoGrace}); err != nil {
		t.Fatal(err)
	}

	evs, err := e.j.Events(ctx, journal.EventQuery{})
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	kinds := map[string]int{}
	for _, ev := range append(evs, sunk...) {
		if ev.ErrorKind == "" {
			continue
		}
		kinds[ev.ErrorKind]++
		if !slices.Contains(gpuprov.ErrorKinds(), ev.ErrorKind) {
			t.Errorf("event %s carries kind %q, which ErrorKinds does not list", ev, ev.ErrorKind)
		}
	}
	for _, want := range []string{gpuprov.KindBootstrap, provider.Capacity.String(), gpuprov.KindDeadline} {
		if kinds[want] == 0 {
			t.Errorf("no event of kind %s: the scenario did not run as meant (kinds seen %v)", want, kinds)
		}
	}
}
