package gpuprov_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/journal/sqlite"
	"github.com/org/gpuprov/provider"
	pt "github.com/org/gpuprov/provider/providertest"
)

// readOutage makes every Observe and List of f fail Transient (as
// DescribeInstances answering 503 would) while it is on.
func readOutage(f *pt.Fake) *atomic.Bool {
	var on atomic.Bool
	down := func(*pt.Call) bool { return on.Load() }
	f.Script(
		&pt.Rule{Op: pt.OpObserve, Match: down, Err: pe(provider.Transient, "DescribeInstances: HTTP 503")},
		&pt.Rule{Op: pt.OpList, Match: down, Err: pe(provider.Transient, "DescribeInstances: HTTP 503")},
	)
	return &on
}

// firstDelete returns when the first Delete naming id was sent.
func firstDelete(t *testing.T, f *pt.Fake, id string) time.Time {
	t.Helper()
	for _, c := range f.Calls(pt.OpDelete) {
		for _, x := range c.IDs {
			if x == id && c.Err == nil {
				return c.At
			}
		}
	}
	t.Fatalf("no Delete of %s was sent", id)
	return time.Time{}
}

// With the cloud's read API down for a whole teardown, the instance the
// journal knows is deleted anyway, in the first seconds; the VM stays
// deleting with an error that says what is unconfirmed, and a Delete or a
// Recover after the outage confirms it gone.
func TestTeardownDeletesKnownInstanceWhileTheReadAPIIsDown(t *testing.T) {
	for _, listing := range []bool{true, false} {
		for _, finish := range []string{"delete", "recover"} {
			name := map[bool]string{true: "list", false: "observe"}[listing] + "/" + finish
			t.Run(name, func(t *testing.T) {
				e := newEnv(t)
				if !listing {
					e.observeOnly = true
					e.p.Close()
					e.p = e.provisioner(e.j)
				}
				ctx := context.Background()
				vm, err := e.p.Launch(ctx, h100("outage"))
				if err != nil {
					t.Fatal(err)
				}
				a := e.fake("a")
				outage := readOutage(a)
				outage.Store(true)
				start := e.clk.Now()
				err = e.p.Delete(ctx, "outage")
				if !errors.Is(err, gpuprov.ErrTeardownIncomplete) {
					t.Fatalf("Delete during a read outage: %v, want ErrTeardownIncomplete", err)
				}
				if at := firstDelete(t, a, vm.InstanceID); at.Sub(start) > 5*time.Second {
					t.Fatalf("the known instance's Delete was sent %v into the teardown; want within seconds", at.Sub(start))
				}
				if len(e.live()) != 0 {
					t.Fatalf("instance still running after the teardown gave up: %+v", e.live())
				}
				if !strings.Contains(err.Error(), vm.InstanceID) || !strings.Contains(err.Error(), "HTTP 503") {
					t.Fatalf("the error must name the unconfirmed instance and the outage: %v", err)
				}
				row, err := e.j.GetVM(ctx, "outage")
				if err != nil {
					t.Fatal(err)
				}
				if row.State != journal.StateDeleting || !strings.Contains(row.LastError, "not confirmed gone") {
					t.Fatalf("VM ended %s (%q); want deleting with the unconfirmed teardown as its error", row.State, row.LastError)
				}

				outage.Store(false)
				switch finish {
				case "delete":
					if err := e.p.Delete(ctx, "outage"); err != nil {
						t.Fatalf("Delete after the outage: %v", err)
					}
				case "recover":
					db2, err := sqlite.Open(ctx, e.path)
					if err != nil {
						t.Fatal(err)
					}
					defer db2.Close()
					rep, err := e.provisioner(db2).Recover(ctx)
					if err != nil || rep.Resumed["outage"] != nil {
						t.Fatalf("Recover after the outage: %v %+v", err, rep)
					}
				}
				if row := e.assertClean("outage"); row.State != journal.StateDeleted {
					t.Fatalf("after the outage the VM is %s, want deleted", row.State)
				}
			})
		}
	}
}

// laggingCloud answers the first look at a VM with an error and every later
// one with an empty listing, as a cloud whose read API fails and then lags
// does.
type laggingCloud struct {
	*pt.Fake
	on    atomic.Bool
	mu    sync.Mutex
	looks int
}

func (l *laggingCloud) look() ([]provider.Observed, error, bool) {
	if !l.on.Load() {
		return nil, nil, false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.looks++
	if l.looks == 1 {
		return nil, pe(provider.Transient, "HTTP 500"), true
	}
	return nil, nil, true
}

func (l *laggingCloud) Observe(ctx context.Context, loc provider.Location, vm string) ([]provider.Observed, error) {
	if obs, err, lying := l.look(); lying {
		return obs, err
	}
	return l.Fake.Observe(ctx, loc, vm)
}

func (l *laggingCloud) List(ctx context.Context, loc provider.Location) ([]provider.Observed, error) {
	if obs, err, lying := l.look(); lying {
		return obs, err
	}
	return l.Fake.List(ctx, loc)
}

// The first look of a teardown fails and the next shows a lagging, empty
// listing: the instance the journal knows is deleted all the same.
func TestTeardownDeletesKnownInstanceBehindALaggingListing(t *testing.T) {
	for _, listing := range []bool{true, false} {
		t.Run(map[bool]string{true: "list", false: "observe"}[listing], func(t *testing.T) {
			e := newEnv(t)
			lc := &laggingCloud{Fake: e.fake("a")}
			var a provider.CloudProvider = lc
			if !listing {
				a = noList{lc}
			}
			p, err := gpuprov.New(e.j, gpuprov.WithClock(e.clk), gpuprov.WithBackoff(100*time.Millisecond, 5*time.Second, 1),
				gpuprov.WithProvider(a, e.fake("b")))
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			ctx := context.Background()
			vm, err := p.Launch(ctx, h100("lag"))
			if err != nil {
				t.Fatal(err)
			}
			e.clk.Advance(time.Hour) // ready for an hour, then deleted
			lc.on.Store(true)
			if err := p.Delete(ctx, "lag"); err != nil {
				t.Fatal(err)
			}
			lc.mu.Lock()
			looks := lc.looks
			lc.mu.Unlock()
			if looks < 2 {
				t.Fatalf("the teardown looked %d times; the lagging listing was never consulted", looks)
			}
			firstDelete(t, lc.Fake, vm.InstanceID)
			if row := e.assertClean("lag"); row.State != journal.StateDeleted {
				t.Fatalf("VM %s", row.State)
			}
		})
	}
}

// One failed look late in a long teardown costs one short backoff, not the
// longest: the teardown backs off on consecutive failures, not on the
// number of looks so far.
func TestTeardownBacksOffOnConsecutiveFailuresOnly(t *testing.T) {
	e := newEnv(t)
	e.p.Close()
	e.p = e.provisioner(e.j, gpuprov.WithBackoff(time.Second, 30*time.Second, 7))
	ctx := context.Background()
	if _, err := e.p.Launch(ctx, h100("slow")); err != nil {
		t.Fatal(err)
	}
	a := e.fake("a")
	a.DeleteTime = 20 * time.Second
	var looks atomic.Int32
	tenth := func(*pt.Call) bool { return looks.Add(1) == 10 }
	a.Script(
		&pt.Rule{Op: pt.OpObserve, Match: tenth, Err: pe(provider.Transient, "HTTP 500")},
		&pt.Rule{Op: pt.OpList, Match: tenth, Err: pe(provider.Transient, "HTTP 500")},
	)
	start := e.clk.Now()
	if err := e.p.Delete(ctx, "slow"); err != nil {
		t.Fatal(err)
	}
	// 20 s of deletion polled every second, plus at most one first backoff
	// (≤ 1 s) and a poll interval of slack.
	if took := e.clk.Now().Sub(start); took > 23*time.Second {
		t.Fatalf("teardown took %v with one failed look; want about 20 s", took)
	}
	if looks.Load() < 10 {
		t.Fatalf("only %d looks: the failure was never injected", looks.Load())
	}
}
