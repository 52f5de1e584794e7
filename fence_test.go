package gpuprov_test

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/clock"
	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/journal/sqlite"
	"github.com/org/gpuprov/provider"
	pt "github.com/org/gpuprov/provider/providertest"
)

// cutOff is a journal whose lease renewals fail while cut is set: the
// heartbeat of a process that cannot reach the journal (a database
// failover, a partition, a paused process).
type cutOff struct {
	journal.Journal
	cut atomic.Bool
}

var errUnreachable = errors.New("journal unreachable (test)")

func (c *cutOff) Renew(ctx context.Context, owner string, now, expiry time.Time, names []string) ([]string, error) {
	if c.cut.Load() {
		return nil, errUnreachable
	}
	return c.Journal.Renew(ctx, owner, now, expiry, names)
}

// slowAccount paces the fake's API at one request per 100 s after a burst
// of two: a create waits for its turn long after its intent is journaled.
type slowAccount struct{ *pt.Fake }

func (s slowAccount) Capabilities() provider.Capabilities {
	c := s.Fake.Capabilities()
	c.RequestsPerSecond, c.Burst = 0.01, 2
	return c
}

// fenceWorld is two replicas, a and b, on one SQLite journal and one cloud
// without idempotency tokens (Lambda, RunPod, Vast.ai are such clouds),
// on a clock the test moves by hand. a's account is slow (slowAccount) and
// its lease renewals can be cut.
type fenceWorld struct {
	t    *testing.T
	clk  *clock.Fake
	f    *pt.Fake
	j    journal.Journal
	aj   *cutOff
	a, b *gpuprov.Provisioner
}

func newFenceWorld(t *testing.T) *fenceWorld {
	return newFenceWorldWith(t, func(f *pt.Fake) provider.CloudProvider { return slowAccount{f} })
}

// newFenceWorldWith builds a fenceWorld whose replica a uses the cloud
// through aCloud, with aOpts.
func newFenceWorldWith(t *testing.T, aCloud func(*pt.Fake) provider.CloudProvider, aOpts ...gpuprov.Option) *fenceWorld {
	t.Helper()
	clk := clock.NewFake(t0)
	db, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "journal.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	f := pt.NewFake("a", clk, pt.Offer("us-east", "us-east-1a", "h100.1", "H100-80GB", 1, 2.00))
	f.Idempotent = false
	f.Installation = db.Installation()
	w := &fenceWorld{t: t, clk: clk, f: f, j: db, aj: &cutOff{Journal: db}}
	newP := func(j journal.Journal, owner string, cp provider.CloudProvider, opts ...gpuprov.Option) *gpuprov.Provisioner {
		p, err := gpuprov.New(j, append([]gpuprov.Option{gpuprov.WithClock(clk), gpuprov.WithOwner(owner), gpuprov.WithProvider(cp),
			gpuprov.WithLeaseTTL(30 * time.Second), gpuprov.WithBackoff(100*time.Millisecond, time.Second, 1)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		return p
	}
	w.a = newP(w.aj, "replica-a", aCloud(f), aOpts...)
	w.b = newP(db, "replica-b", f)
	return w
}

// until polls cond (in real time, bounded) while the replicas' goroutines
// run to their next wait on the fake clock.
func (w *fenceWorld) until(what string, cond func() bool) {
	w.t.Helper()
	for end := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(end) {
			w.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func (w *fenceWorld) vm() journal.VM {
	w.t.Helper()
	v, err := w.j.GetVM(context.Background(), "train")
	if err != nil {
		w.t.Fatal(err)
	}
	return v
}

// launchUntilCreateWaits starts replica a's launch and returns once its
// create intent is journaled and the create waits for the account's turn.
func (w *fenceWorld) launchUntilCreateWaits(ctx context.Context) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := w.a.Launch(ctx, gpuprov.Request{Name: "train", GPU: "H100", Timeout: time.Hour})
		done <- err
	}()
	w.until("a's create to wait for its turn", func() bool {
		v, err := w.j.GetVM(context.Background(), "train")
		return err == nil && v.Phase == gpuprov.PhaseCreate && w.clk.Sleeping() > 0
	})
	return done
}

// takeOver cuts a's renewals, lets a's lease lapse, and has replica b
// take the VM over and make it ready while a's create still waits.
func (w *fenceWorld) takeOver(ctx context.Context) {
	w.aj.cut.Store(true)
	w.clk.Advance(31 * time.Second) // a's heartbeats fail; its lease (30 s) lapses
	if _, err := w.b.RecoverInBackground(ctx); err != nil {
		w.t.Fatalf("b's Recover: %v", err)
	}
	w.until("b to drive the VM", func() bool { return w.vm().Owner == "replica-b" })
	for i := 0; i < 60 && w.vm().State != journal.StateReady; i++ {
		w.clk.Advance(time.Second) // b's polls; a's turn is 100 s away
		time.Sleep(time.Millisecond)
	}
	if v := w.vm(); v.State != journal.StateReady || v.Owner != "" && v.Owner != "replica-b" {
		w.t.Fatalf("after b's takeover: state %s owner %q, want ready, b", v.State, v.Owner)
	}
	if creates := w.f.Calls(pt.OpCreate); len(creates) != 1 {
		w.t.Fatalf("b sent %d creates, want 1: %+v", len(creates), creates)
	}
}

// A replica whose renewals fail while its create waits for its turn sends
// no create once another replica has taken the VM over: when the journal
// answers again it says the lease is lost, and the first replica stops.
// Without the fence, a sends its create at its turn: a second machine with
// the VM's identity, owned by nobody, on a cloud without tokens.
func TestExpiredLeaseSendsNoCreate(t *testing.T) {
	w := newFenceWorld(t)
	ctx := context.Background()
	done := w.launchUntilCreateWaits(ctx)
	w.takeOver(ctx)

	w.aj.cut.Store(false)           // the journal answers a again
	w.clk.Advance(70 * time.Second) // a's turn comes
	var err error
	w.until("a's launch to end", func() bool {
		select {
		case err = <-done:
			return true
		default:
			return false
		}
	})
	if !errors.Is(err, journal.ErrLeaseLost) {
		t.Errorf("a's Launch: %v, want ErrLeaseLost", err)
	}
	if creates := w.f.Calls(pt.OpCreate); len(creates) != 1 {
		t.Errorf("%d creates sent, want 1 (b's): %+v", len(creates), creates)
	}
	if live := w.f.Live(); len(live) != 1 {
		t.Errorf("%d instances live, want 1: %+v", len(live), live)
	}
	if v := w.vm(); v.State != journal.StateReady {
		t.Errorf("VM %s after a stopped, want ready", v.State)
	}
}

// While the journal stays unreachable, a's create does not go out at its
// turn: it waits for the journal, and ends with an error naming it when
// the launch runs out of time.
func TestUnconfirmedLeaseWaitsForTheJournal(t *testing.T) {
	w := newFenceWorld(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := w.launchUntilCreateWaits(ctx)
	w.takeOver(ctx)

	w.clk.Advance(70 * time.Second) // a's turn comes; the journal still does not answer
	w.until("a to wait for the journal or send", func() bool { return w.clk.Sleeping() > 0 || len(w.f.Calls(pt.OpCreate)) > 1 })
	for range 5 {
		w.clk.Advance(10 * time.Second)
		time.Sleep(time.Millisecond)
	}
	if creates := w.f.Calls(pt.OpCreate); len(creates) != 1 {
		t.Errorf("%d creates sent while a's lease was unconfirmed, want 1 (b's)", len(creates))
	}
	cancel()
	var err error
	w.until("a's launch to end", func() bool {
		select {
		case err = <-done:
			return true
		default:
			return false
		}
	})
	if err == nil || !errors.Is(err, errUnreachable) {
		t.Errorf("a's Launch: %v, want the journal's error", err)
	}
	if live := w.f.Live(); len(live) != 1 {
		t.Errorf("%d instances live, want 1: %+v", len(live), live)
	}
}

// gatedBootstrap runs one command, says when its context ends, waits for
// the test to open gate (like a step that finishes what it started), then
// tries a second command.
type gatedBootstrap struct {
	in, cancelled, gate chan struct{}
	second              chan error
}

func (b *gatedBootstrap) Bootstrap(ctx context.Context, n gpuprov.Node, c gpuprov.Conn) error {
	if _, _, err := c.Run(ctx, "step 1"); err != nil {
		return err
	}
	close(b.in)
	<-ctx.Done()
	close(b.cancelled)
	<-b.gate
	_, _, err := c.Run(ctx, "step 2")
	b.second <- err
	return err
}

// A lease the journal reports lost ends the driver at once: the heartbeat's
// answer cancels it, its next remote command is refused, and it tears
// nothing down (the new owner drives the VM).
func TestLostLeaseStopsTheDriver(t *testing.T) {
	nodes := newFakeNodes()
	boot := &gatedBootstrap{in: make(chan struct{}), cancelled: make(chan struct{}), gate: make(chan struct{}), second: make(chan error, 1)}
	w := newFenceWorldWith(t, func(f *pt.Fake) provider.CloudProvider { return f },
		gpuprov.WithConnector(nodes), gpuprov.WithBootstrapper(boot))
	ctx := context.Background()
	done := make(chan error, 1)
	go func() {
		_, err := w.a.Launch(ctx, gpuprov.Request{Name: "train", GPU: "H100", Timeout: time.Hour})
		done <- err
	}()
	w.until("a's bootstrap to start", func() bool {
		select {
		case <-boot.in:
			return true
		default:
			w.clk.Advance(100 * time.Millisecond) // a's boot polls
			return false
		}
	})
	// b takes the VM over (it proved a dead, say): a's lease is gone.
	if _, err := w.j.Acquire(ctx, "train", "replica-b", w.clk.Now(), w.clk.Now().Add(time.Minute), "replica-a"); err != nil {
		t.Fatal(err)
	}
	w.clk.Advance(10 * time.Second) // a's heartbeat
	w.until("the heartbeat's answer to cancel a's driver", func() bool {
		select {
		case <-boot.cancelled:
			return true
		default:
			return false
		}
	})
	close(boot.gate)
	if err := <-boot.second; !errors.Is(err, journal.ErrLeaseLost) {
		t.Errorf("a's second remote command: %v, want refused with ErrLeaseLost", err)
	}
	var err error
	w.until("a's launch to end", func() bool {
		select {
		case err = <-done:
			return true
		default:
			return false
		}
	})
	if !errors.Is(err, journal.ErrLeaseLost) {
		t.Errorf("a's Launch: %v, want ErrLeaseLost", err)
	}
	nodes.mu.Lock()
	log := slices.Clone(nodes.log)
	nodes.mu.Unlock()
	if slices.Contains(log, "train: run step 2") || !slices.Contains(log, "train: run step 1") {
		t.Errorf("remote commands %q, want step 1 only", log)
	}
	if dels := w.f.Calls(pt.OpDelete); len(dels) != 0 {
		t.Errorf("a tore down after losing its lease: %+v", dels)
	}
	if v := w.vm(); v.Owner != "replica-b" {
		t.Errorf("VM owner %q, want replica-b", v.Owner)
	}
}
