package gpuprov_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/provider"
	pt "github.com/org/gpuprov/provider/providertest"
)

// stockoutEverywhere makes the first n creates on every fake fail with a
// stockout, as a cloud with no capacity left answers.
func stockoutEverywhere(fakes []*pt.Fake, n int) {
	for _, f := range fakes {
		f.Script(&pt.Rule{Op: pt.OpCreate, Err: pe(provider.Capacity, "no capacity"), Times: n})
	}
}

// TestWaitForCapacity: every offer stocks out; a launch that asks to wait
// does not fail but waits, journaled as waiting with its next try, making no
// cloud call but plan refreshes (at most one per poll interval and one per
// expiring block), and becomes ready once a block expires and capacity is
// back.
func TestWaitForCapacity(t *testing.T) {
	e := newEnv(t, gpuprov.WithCapacityPoll(time.Minute))
	// "a" has three offers and "b" one: each stocks out once, so round one
	// ends with all four blocked (10 minutes, the Capacity default).
	e.fake("a").Script(&pt.Rule{Op: pt.OpCreate, Err: pe(provider.Capacity, "no capacity"), Times: 3})
	e.fake("b").Script(&pt.Rule{Op: pt.OpCreate, Err: pe(provider.Capacity, "no capacity"), Times: 1})
	var sawWaiting journal.VM
	e.p = e.provisioner(e.j, gpuprov.WithCapacityPoll(time.Minute), gpuprov.WithEvents(func(ev gpuprov.Event) {
		if ev.Type == gpuprov.EvWaiting && sawWaiting.Name == "" {
			sawWaiting, _ = e.j.GetVM(context.Background(), ev.VM)
		}
	}))
	req := h100("patient")
	req.WaitForCapacity, req.Timeout = true, 3*time.Hour
	vm, err := e.p.Launch(context.Background(), req)
	if err != nil {
		t.Fatalf("launch: %v", err)
	}
	row := e.assertClean("patient")
	if vm.State != gpuprov.StateReady || row.Attempt != 5 {
		t.Fatalf("ended %s after %d attempts; want ready on attempt 5 (4 stockouts, then capacity)", vm.State, row.Attempt)
	}
	if sawWaiting.State != journal.StateWaiting || sawWaiting.NextTry.IsZero() {
		t.Fatalf("while waiting the journal had state %s, next try %v; want waiting with a next try", sawWaiting.State, sawWaiting.NextTry)
	}
	if !strings.Contains(sawWaiting.LastError, "no offers") {
		t.Errorf("waiting reason %q does not say there are no offers", sawWaiting.LastError)
	}

	_, hist, err := e.p.History(context.Background(), "patient")
	if err != nil {
		t.Fatal(err)
	}
	var waitAt, retryAt time.Time
	for _, ev := range hist {
		switch {
		case ev.Type == gpuprov.EvWaiting:
			if !waitAt.IsZero() {
				t.Errorf("second journaled waiting event %q: refreshes that find nothing must not journal one each", ev.Message)
			}
			waitAt = ev.Time
			if !strings.Contains(ev.Message, "4 offers blocked, cheapest $2.00/h") {
				t.Errorf("waiting event %q does not say how many offers are blocked and the cheapest price", ev.Message)
			}
		case ev.Type == gpuprov.EvAttempt && !waitAt.IsZero() && retryAt.IsZero():
			retryAt = ev.Time
		}
	}
	if waitAt.IsZero() || retryAt.IsZero() {
		t.Fatalf("no waiting event followed by an attempt in %v", hist)
	}
	// The first block (on the first offer's stockout) expires 10 minutes
	// after it was written: no retry may start before then.
	if wait := retryAt.Sub(waitAt); wait < 9*time.Minute || wait > 11*time.Minute {
		t.Errorf("retried %v after the wait began; want about the 10-minute Capacity block", wait)
	}
	plans := 0
	for _, f := range e.fakes {
		for _, c := range f.Calls() {
			if c.At.After(waitAt) && c.At.Before(retryAt) {
				if c.Op != pt.OpPlan {
					t.Errorf("%s called %s at %v while waiting; only plan refreshes are allowed", f.Name(), c.Op, c.At)
				}
				plans++
			}
		}
	}
	t.Logf("waited %v with %d plan calls", retryAt.Sub(waitAt), plans)
	// Documented bound: one plan refresh per poll interval and one per
	// expiring block, on each of the two providers.
	if bound := 2 * (int(retryAt.Sub(waitAt)/time.Minute) + 1 + 4); plans > bound || plans == 0 {
		t.Errorf("%d plan calls while waiting %v; want between 1 and %d", plans, retryAt.Sub(waitAt), bound)
	}
}

// TestWaitForCapacityEndsAtTheDeadline: with no capacity ever, a waiting
// launch fails at its deadline with nothing left and an error that says it
// waited.
func TestWaitForCapacityEndsAtTheDeadline(t *testing.T) {
	e := newEnv(t)
	stockoutEverywhere(e.fakes, 0)
	req := h100("forever")
	req.WaitForCapacity, req.Timeout = true, 45*time.Minute
	start := e.clk.Now()
	_, err := e.p.Launch(context.Background(), req)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "while waiting for capacity") {
		t.Fatalf("launch: %v; want the deadline, while waiting for capacity", err)
	}
	if took := e.clk.Now().Sub(start); took < 45*time.Minute || took > 46*time.Minute {
		t.Errorf("gave up after %v; want the 45-minute deadline", took)
	}
	row := e.assertClean("forever")
	if row.State != journal.StateFailed {
		t.Fatalf("ended %s", row.State)
	}
	// Four offers, blocked 10 minutes at a time over 45 minutes: several
	// rounds, each trying every offer once its block expired.
	creates := 0
	for _, f := range e.fakes {
		creates += len(f.Calls(pt.OpCreate))
	}
	t.Logf("%d creates in 45 minutes", creates)
	if creates < 8 || creates > 24 {
		t.Errorf("%d creates in 45 minutes; want a round of 4 about every 10 minutes", creates)
	}
}

// TestWaitingVMIsCancelledOrDeletedAtOnce: cancelling the launch of a
// waiting VM, or deleting it, ends it at once with no cloud call: every
// attempt was torn down before it began to wait.
func TestWaitingVMIsCancelledOrDeletedAtOnce(t *testing.T) {
	t.Run("cancel", func(t *testing.T) {
		e := newEnv(t)
		stockoutEverywhere(e.fakes, 0)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var callsAtCancel int
		e.p = e.provisioner(e.j, gpuprov.WithEvents(func(ev gpuprov.Event) {
			if ev.Type == gpuprov.EvWaiting && callsAtCancel == 0 {
				callsAtCancel = e.cloudCalls()
				cancel()
			}
		}))
		req := h100("impatient")
		req.WaitForCapacity, req.Timeout = true, 24*time.Hour
		start := e.clk.Now()
		_, err := e.p.Launch(ctx, req)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("launch: %v; want canceled", err)
		}
		if took := e.clk.Now().Sub(start); took > 5*time.Minute {
			t.Errorf("a cancelled wait took %v of clock time", took)
		}
		if n := e.cloudCalls(); n != callsAtCancel {
			t.Errorf("%d cloud calls after the cancel", n-callsAtCancel)
		}
		if row := e.assertClean("impatient"); row.State != journal.StateFailed {
			t.Fatalf("ended %s; want failed", row.State)
		}
	})
	t.Run("delete", func(t *testing.T) {
		e := newEnv(t)
		stockoutEverywhere(e.fakes, 0)
		waiting := make(chan struct{})
		e.p = e.provisioner(e.j, gpuprov.WithEvents(func(ev gpuprov.Event) {
			if ev.Type == gpuprov.EvWaiting {
				select {
				case <-waiting:
				default:
					close(waiting)
				}
			}
		}))
		req := h100("unwanted")
		req.WaitForCapacity, req.Timeout = true, 1000*time.Hour
		launched := make(chan error, 1)
		go func() { _, err := e.p.Launch(context.Background(), req); launched <- err }()
		<-waiting
		deletes := len(e.fake("a").Calls(pt.OpDelete)) + len(e.fake("b").Calls(pt.OpDelete))
		if err := e.p.Delete(context.Background(), "unwanted"); err != nil {
			t.Fatalf("delete: %v", err)
		}
		if err := <-launched; err == nil {
			t.Fatal("the launch of a deleted waiting VM succeeded")
		}
		if n := len(e.fake("a").Calls(pt.OpDelete)) + len(e.fake("b").Calls(pt.OpDelete)); n != deletes {
			t.Errorf("deleting a waiting VM sent %d instance deletes; there was nothing to delete", n-deletes)
		}
		// Delete cancels the launch under way in this process, which ends
		// it (failed, canceled), as for a VM still provisioning.
		if row := e.assertClean("unwanted"); !row.State.Terminal() || row.LastErrorKind != gpuprov.KindCanceled {
			t.Fatalf("ended %s (%s); want over, canceled", row.State, row.LastErrorKind)
		}
	})
}

// cloudCalls counts every call the env's fakes received.
func (e *env) cloudCalls() int {
	n := 0
	for _, f := range e.fakes {
		n += len(f.Calls())
	}
	return n
}

// TestRequestRefusesBadLimits: negative TTL and MaxCost are refused before
// anything is journaled.
func TestRequestRefusesBadLimits(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct {
		set   func(r *gpuprov.Request)
		field string
	}{
		{func(r *gpuprov.Request) { r.TTL = -time.Second }, "ttl"},
		{func(r *gpuprov.Request) { r.MaxCost = -1 }, "max_cost"},
	} {
		req := h100("limited")
		tc.set(&req)
		_, err := e.p.Launch(context.Background(), req)
		var re *gpuprov.RequestError
		if !errors.As(err, &re) || re.Field != tc.field {
			t.Errorf("launch: %v; want a RequestError on %s", err, tc.field)
		}
	}
	if _, err := e.j.GetVM(context.Background(), "limited"); !errors.Is(err, journal.ErrNotFound) {
		t.Errorf("a refused request was journaled: %v", err)
	}
}
