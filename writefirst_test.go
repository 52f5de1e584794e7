package gpuprov_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/provider"
	pt "github.com/org/gpuprov/provider/providertest"
)

// commitLog is a journal that notes, for each commit, the attempts it
// wrote and a count the test takes at that moment; dead makes commits fail.
type commitLog struct {
	journal.Journal
	count func() int
	dead  atomic.Bool

	mu    sync.Mutex
	steps []loggedStep
}

type loggedStep struct {
	count    int
	attempts []journal.Attempt
}

func (c *commitLog) Commit(ctx context.Context, s *journal.Step) error {
	if c.dead.Load() {
		return errors.New("disk gone")
	}
	c.mu.Lock()
	c.steps = append(c.steps, loggedStep{c.count(), append([]journal.Attempt(nil), s.Attempts...)})
	c.mu.Unlock()
	return c.Journal.Commit(ctx, s)
}

// at returns the steps committed while the count was n.
func (c *commitLog) at(n int) []loggedStep {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []loggedStep
	for _, s := range c.steps {
		if s.count == n {
			out = append(out, s)
		}
	}
	return out
}

func attemptIn(s loggedStep, n int, state journal.AttemptState, phase string) bool {
	for _, a := range s.attempts {
		if a.N == n && a.State == state && a.Phase == phase {
			return true
		}
	}
	return false
}

func stockoutIn1a(e *env) {
	e.fake("a").Script(&pt.Rule{Op: pt.OpCreate, Match: func(c *pt.Call) bool { return c.Location.Zone == "us-east-1a" },
		Err: pe(provider.Capacity, "InsufficientInstanceCapacity"), Times: 1})
}

// A failover whose next Prepare sends no request (an adapter whose side
// resources are shared and already made) costs one journal write between
// the refused create and the next one: the failure, the teardown, the new
// attempt and its create intent, together.
func TestFailoverWithAQuietPrepareWritesOnce(t *testing.T) {
	e := newEnv(t)
	e.p.Close()
	e.usePaced(true)
	stockoutIn1a(e)
	creates := func() int { return len(e.fake("a").Calls(pt.OpCreate)) }
	cl := &commitLog{Journal: e.j, count: creates}
	e.p = e.provisioner(cl)
	vm, err := e.p.Launch(context.Background(), h100("train"))
	if err != nil {
		t.Fatal(err)
	}
	if vm.Location.Zone != "us-east-1b" || vm.Attempt != 2 {
		t.Fatalf("ready in %s after %d attempts", vm.Location, vm.Attempt)
	}
	between := cl.at(1) // after the refused create, before the next
	if len(between) != 1 {
		t.Fatalf("%d journal writes between the refused create and the next, want 1", len(between))
	}
	w := between[0]
	if !attemptIn(w, 1, journal.AttemptTornDown, "create") || !attemptIn(w, 2, journal.AttemptActive, "create") {
		t.Fatalf("the one write holds %+v; want attempt 1 torn down and attempt 2's create intent", w.attempts)
	}
	e.assertClean("train")
}

// A Prepare that does send a request finds the new attempt journaled
// before its first request goes out.
func TestAttemptIsJournaledBeforeItsPrepareSends(t *testing.T) {
	e := newEnv(t)
	e.p.Close()
	e.usePaced(false)
	stockoutIn1a(e)
	pf := e.paced["a"]
	cl := &commitLog{Journal: e.j, count: func() int { return pf.SentOf(pt.OpPrepare) }}
	e.p = e.provisioner(cl)
	if _, err := e.p.Launch(context.Background(), h100("train")); err != nil {
		t.Fatal(err)
	}
	var started bool
	for _, s := range cl.at(1) { // after attempt 1's Prepare, before attempt 2's
		started = started || attemptIn(s, 2, journal.AttemptActive, "prepare")
	}
	if !started {
		t.Fatalf("attempt 2 was not journaled before its Prepare's request: writes between the Prepares %+v", cl.at(1))
	}
	e.assertClean("train")
}

// When that write fails, the request is not sent and the launch stops at
// once with the journal's error (no retry: the adapter may have called
// the pacer's error transient).
func TestFailedWriteBeforeAPrepareSendsNothing(t *testing.T) {
	e := newEnv(t)
	e.p.Close()
	e.usePaced(false)
	cl := &commitLog{Journal: e.j, count: func() int { return 0 }}
	e.fake("a").Script(&pt.Rule{Op: pt.OpCreate, Times: 1, Err: pe(provider.Capacity, "InsufficientInstanceCapacity"),
		Match: func(c *pt.Call) bool { cl.dead.Store(true); return c.Location.Zone == "us-east-1a" }})
	pf := e.paced["a"]
	e.p = e.provisioner(cl)
	start := e.clk.Now()
	_, err := e.p.Launch(context.Background(), h100("train"))
	if err == nil || !strings.Contains(err.Error(), "journal write failed") {
		t.Fatalf("launch returned %v, want the journal's failure", err)
	}
	if n := pf.SentOf(pt.OpPrepare); n != 1 {
		t.Fatalf("%d Prepare requests sent, want only attempt 1's", n)
	}
	if waited := e.clk.Now().Sub(start); waited > time.Minute {
		t.Fatalf("the launch went on for %v after the journal died", waited)
	}
}
