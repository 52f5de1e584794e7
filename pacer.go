package gpuprov

import (
	"container/list"
	"context"
	"math"
	"sync"
	"time"

	"github.com/org/gpuprov/clock"
)

// pacer is an account's token bucket with a queue in front of it. Calls
// take their turn in order, except that listings go first: one listing
// serves every VM polling its location, so a listing stuck behind a
// thousand creates would notice every boot late. A call still waiting whose
// reason went away (its offer was blocked while it waited, see stopper)
// leaves the queue and the next call takes its place, so a stockout frees
// the turns of the calls queued for it instead of wasting them.
//
// Only the call at the front sleeps, for the time until the bucket holds a
// token; the others wait on a channel until they reach the front. Joining,
// leaving and taking a token are O(1), so a queue of ten thousand calls
// costs what a queue of ten does.
type pacer struct {
	clk   clock.Clock
	every time.Duration // the time one token takes to come back
	burst float64
	// base is the account's whole rate and burst; every and burst are
	// this process's share of it (setShare).
	baseEvery time.Duration
	baseBurst float64
	share     int

	mu     sync.Mutex
	tokens float64
	last   time.Time // of the tokens count
	queue  list.List // of *turn: the priority turns first, then the others in order
	prio   int       // how many turns at the front of queue are priority turns
}

// leaver says when a waiting call's reason went away (see stopper): signal
// is closed when it may have, and check returns the error to leave with.
type leaver interface {
	signal() <-chan struct{}
	check(ctx context.Context) error
}

// turn is one call waiting in a pacer's queue.
type turn struct {
	prio bool
	el   *list.Element
	// front is closed when the turn reaches the front of the queue; a
	// turn that a priority turn pushes back gets a new one.
	front chan struct{}
	// wake ends the sleep of the turn at the front, when it is pushed
	// back.
	wake context.CancelFunc
}

func newPacer(clk clock.Clock, perSecond float64, burst int) *pacer {
	pc := &pacer{clk: clk, every: time.Duration(float64(time.Second) / perSecond), burst: float64(burst), share: 1}
	pc.baseEvery, pc.baseBurst = pc.every, pc.burst
	pc.tokens, pc.last = pc.burst, clk.Now()
	return pc
}

// setShare makes the pacer send 1/n of the account's rate, with 1/n of its
// burst (at least one): n processes pace the account (see members.go). The
// tokens that came back so far are counted at the old rate.
func (pc *pacer) setShare(n int) {
	n = max(n, 1)
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if n == pc.share {
		return
	}
	pc.refill(pc.clk.Now())
	pc.share = n
	pc.every = pc.baseEvery * time.Duration(n)
	pc.burst = max(1, math.Floor(pc.baseBurst/float64(n)))
	pc.tokens = min(pc.tokens, pc.burst)
}

// refill adds the tokens that came back since the last count. pc.mu is
// held.
func (pc *pacer) refill(now time.Time) {
	if d := now.Sub(pc.last); d > 0 {
		pc.tokens = min(pc.burst, pc.tokens+float64(d)/float64(pc.every))
		pc.last = now
	}
}

// wait returns when the call may be made, or with ctx's cause, or with the
// error of stop (nil: never stopped) once stop says the call's reason went
// away. prio puts the call ahead of every call that is not a priority one.
func (pc *pacer) wait(ctx context.Context, prio bool, stop leaver) error {
	pc.mu.Lock()
	pc.refill(pc.clk.Now())
	if pc.queue.Len() == 0 && pc.tokens >= 1 {
		pc.tokens--
		pc.mu.Unlock()
		return nil
	}
	t := &turn{prio: prio, front: make(chan struct{})}
	old := pc.queue.Front()
	switch {
	case !prio:
		t.el = pc.queue.PushBack(t)
	case pc.prio == 0:
		t.el = pc.queue.PushFront(t)
	default:
		last := pc.queue.Front()
		for range pc.prio - 1 {
			last = last.Next()
		}
		t.el = pc.queue.InsertAfter(t, last)
	}
	if prio {
		pc.prio++
	}
	if pc.queue.Front() == t.el {
		if old != nil {
			// Pushed back by a priority turn: it waits again.
			ot := old.Value.(*turn)
			ot.front = make(chan struct{})
			if ot.wake != nil {
				ot.wake()
			}
		}
		close(t.front)
	}
	pc.mu.Unlock()

	for {
		pc.mu.Lock()
		front := t.front
		pc.mu.Unlock()
		var blocked <-chan struct{}
		if stop != nil {
			blocked = stop.signal()
		}
		select {
		case <-front:
		case <-ctx.Done():
			pc.leave(t)
			return context.Cause(ctx)
		case <-blocked:
			if err := stop.check(ctx); err != nil {
				pc.leave(t)
				return err
			}
			continue
		}
		pc.mu.Lock()
		if pc.queue.Front() != t.el {
			pc.mu.Unlock() // pushed back since: wait for the new front channel
			continue
		}
		pc.refill(pc.clk.Now())
		if pc.tokens >= 1 {
			pc.tokens--
			pc.remove(t)
			pc.mu.Unlock()
			return nil
		}
		d := time.Duration((1 - pc.tokens) * float64(pc.every))
		sctx, cancel := context.WithCancel(ctx)
		t.wake = cancel
		pc.mu.Unlock()
		_ = pc.clk.Sleep(sctx, d) // ended early when pushed back or ctx ends
		pc.mu.Lock()
		t.wake = nil
		pc.mu.Unlock()
		cancel()
		if err := context.Cause(ctx); err != nil {
			pc.leave(t)
			return err
		}
		if stop != nil {
			if err := stop.check(ctx); err != nil {
				pc.leave(t)
				return err
			}
		}
	}
}

// leave takes t out of the queue without a token.
func (pc *pacer) leave(t *turn) {
	pc.mu.Lock()
	pc.remove(t)
	pc.mu.Unlock()
}

// remove takes t out of the queue and hands the front to the next turn.
// pc.mu is held.
func (pc *pacer) remove(t *turn) {
	wasFront := pc.queue.Front() == t.el
	pc.queue.Remove(t.el)
	if t.prio {
		pc.prio--
	}
	if wasFront {
		if next := pc.queue.Front(); next != nil {
			close(next.Value.(*turn).front)
		}
	}
}
