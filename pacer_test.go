package gpuprov

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/org/gpuprov/clock"
	pt "github.com/org/gpuprov/provider/providertest"
)

// grant records the fake time at which each named call was let through.
type grants struct {
	mu  sync.Mutex
	at  map[string]time.Time
	seq []string // in the order recorded
}

func (g *grants) add(name string, t time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.at[name] = t
	g.seq = append(g.seq, name)
}

func (g *grants) len() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.seq)
}

// queued starts a call named name on pc and waits until it is in the
// queue (or granted).
func queued(t *testing.T, pc *pacer, g *grants, wg *sync.WaitGroup, name string, prio bool, stop leaver, errs chan<- error) {
	t.Helper()
	before := pc.len()
	wg.Go(func() {
		err := pc.wait(context.Background(), prio, stop)
		if err != nil {
			errs <- err
			return
		}
		g.add(name, pc.clk.Now())
	})
	pt.WaitFor(t, name+" joins the queue", func() bool { return pc.len() != before })
}

func (pc *pacer) len() int {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	return pc.queue.Len()
}

// A listing that joins a queue of creates goes before all of them but the
// one already at its turn; the rate holds throughout.
func TestPacerListingsGoFirst(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	pc := newPacer(clk, 10, 1) // a call every 100 ms
	start := clk.Now()
	if err := pc.wait(context.Background(), false, nil); err != nil { // the burst
		t.Fatal(err)
	}
	g := &grants{at: map[string]time.Time{}}
	var wg sync.WaitGroup
	errs := make(chan error, 10)
	for _, n := range []string{"c1", "c2", "c3", "c4"} {
		queued(t, pc, g, &wg, n, false, nil, errs)
	}
	queued(t, pc, g, &wg, "list", true, nil, errs)
	// The clock moves a turn at a time, once the call at the front sleeps
	// for its token, and again only when that call's grant is recorded:
	// each grant is recorded at the fake time it was made (moved on by
	// AutoAdvance, the clock could pass the next turn before a goroutine
	// read it).
	for i := range 5 {
		pt.WaitFor(t, "the front call sleeps for its token", func() bool { return clk.Sleeping() > 0 })
		clk.Advance(100 * time.Millisecond)
		pt.WaitFor(t, "the front call's grant is recorded", func() bool { return g.len() > i })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// By the fake time of each grant: the goroutines may record them in
	// another order.
	want := []string{"list", "c1", "c2", "c3", "c4"}
	if len(g.at) != len(want) {
		t.Fatalf("grants %v, want %v", g.seq, want)
	}
	for i, n := range want {
		if got, at := g.at[n].Sub(start), time.Duration(i+1)*100*time.Millisecond; got != at {
			t.Errorf("%s granted at +%v, want +%v (one call per 100 ms)", n, got, at)
		}
	}
}

type testLeaver struct {
	ch   chan struct{}
	mu   sync.Mutex
	gone bool
}

func (l *testLeaver) signal() <-chan struct{} { return l.ch }
func (l *testLeaver) check(context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.gone {
		return errOfferBlocked
	}
	return nil
}

// Calls that leave the queue (their offer was blocked) give their turns to
// the calls behind them: the last call goes at the second slot, not the
// fourth.
func TestPacerLeavingFreesTheTurn(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	pc := newPacer(clk, 10, 1)
	start := clk.Now()
	if err := pc.wait(context.Background(), false, nil); err != nil {
		t.Fatal(err)
	}
	g := &grants{at: map[string]time.Time{}}
	var wg sync.WaitGroup
	errs := make(chan error, 10)
	blocked := &testLeaver{ch: make(chan struct{})}
	queued(t, pc, g, &wg, "a", false, nil, errs)
	queued(t, pc, g, &wg, "b1", false, blocked, errs)
	queued(t, pc, g, &wg, "b2", false, blocked, errs)
	queued(t, pc, g, &wg, "c", false, nil, errs)
	blocked.mu.Lock()
	blocked.gone = true
	blocked.mu.Unlock()
	close(blocked.ch)
	pt.WaitFor(t, "only the 2 calls not blocked are queued", func() bool { return pc.len() <= 2 })
	stop := clk.AutoAdvance()
	wg.Wait()
	stop()
	close(errs)
	left := 0
	for err := range errs {
		if !errors.Is(err, errOfferBlocked) {
			t.Fatal(err)
		}
		left++
	}
	if left != 2 {
		t.Fatalf("%d calls left the queue, want 2", left)
	}
	if got := g.at["c"].Sub(start); got != 200*time.Millisecond {
		t.Fatalf("c granted at +%v, want +200ms (the turns of b1 and b2 freed)", got)
	}
}

// A cancelled call leaves the queue at once and takes no token.
func TestPacerCancelledCallLeaves(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	pc := newPacer(clk, 10, 1)
	if err := pc.wait(context.Background(), false, nil); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- pc.wait(ctx, false, nil) }()
	for pc.len() == 0 {
		time.Sleep(100 * time.Microsecond)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("wait: %v, want context.Canceled", err)
	}
	if n := pc.len(); n != 0 {
		t.Fatalf("%d calls queued after the cancel", n)
	}
	clk.Advance(100 * time.Millisecond)
	if err := pc.wait(context.Background(), false, nil); err != nil {
		t.Fatal(err)
	}
	if pc.tokens >= 1 {
		t.Fatalf("%.2f tokens left, want the one that came back spent", pc.tokens)
	}
}
