package clock

import (
	"container/heap"
	"context"
	"sync"
	"time"
)

// Fake is a manual clock for tests. Time moves only through Advance, or, once
// AutoAdvance is on, whenever a goroutine sleeps: the clock then jumps to the
// earliest pending sleep, so a test of a 20-minute boot timeout runs in
// milliseconds while every wait still lasts its full virtual duration. Timers
// made with NewTimer (deadlines, tickers) never pull time forward by
// themselves; they fire when time passes them.
type Fake struct {
	mu     sync.Mutex
	now    time.Time
	timers timerHeap
	seq    int
	wake   chan struct{}
	stop   chan struct{}
	done   chan struct{}
}

// NewFake returns a fake clock reading t.
func NewFake(t time.Time) *Fake { return &Fake{now: t, wake: make(chan struct{}, 1)} }

type fakeTimer struct {
	f     *Fake
	at    time.Time
	seq   int
	sleep bool
	fn    func() // AfterFunc timers call fn instead of sending on ch
	ch    chan time.Time
	index int // in heap; -1 when fired or stopped
}

func (t *fakeTimer) C() <-chan time.Time { return t.ch }

func (t *fakeTimer) Stop() bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	if t.index < 0 {
		return false
	}
	heap.Remove(&t.f.timers, t.index)
	return true
}

// Now returns the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// NewTimer returns a timer firing when the fake time reaches now+d.
func (f *Fake) NewTimer(d time.Duration) Timer { return f.add(d, false, nil) }

// AfterFunc calls fn, on the goroutine that advances the clock, when the fake
// time reaches now+d. Deadlines made by WithDeadline use it, so a deadline is
// always seen before any sleep due at the same or a later time.
func (f *Fake) AfterFunc(d time.Duration, fn func()) Timer { return f.add(d, false, fn) }

func (f *Fake) add(d time.Duration, sleep bool, fn func()) *fakeTimer {
	f.mu.Lock()
	f.seq++
	t := &fakeTimer{f: f, at: f.now.Add(d), seq: f.seq, sleep: sleep, fn: fn, ch: make(chan time.Time, 1)}
	if d <= 0 {
		t.index = -1
		f.mu.Unlock()
		if fn != nil {
			fn()
		} else {
			t.ch <- t.at
		}
		return t
	}
	defer f.mu.Unlock()
	heap.Push(&f.timers, t)
	if sleep {
		select {
		case f.wake <- struct{}{}:
		default:
		}
	}
	return t
}

// Sleep waits until the fake time has advanced by d, or ctx ends.
func (f *Fake) Sleep(ctx context.Context, d time.Duration) error {
	if err := context.Cause(ctx); err != nil {
		return err
	}
	t := f.add(d, true, nil)
	select {
	case <-t.ch:
	case <-ctx.Done():
		t.Stop()
	}
	// A deadline due no later than the sleep was cancelled first (AfterFunc
	// runs synchronously while advancing), so it wins here.
	return context.Cause(ctx)
}

// Advance moves the fake time forward by d, firing every timer due.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	f.advanceTo(f.now.Add(d))
	f.mu.Unlock()
}

// advanceTo fires, in time order, every timer due by t. f.mu is held on entry
// and exit; it is released around AfterFunc callbacks.
func (f *Fake) advanceTo(t time.Time) {
	for len(f.timers) > 0 && !f.timers[0].at.After(t) {
		tm := heap.Pop(&f.timers).(*fakeTimer)
		if tm.at.After(f.now) {
			f.now = tm.at
		}
		if tm.fn != nil {
			f.mu.Unlock()
			tm.fn()
			f.mu.Lock()
			continue
		}
		tm.ch <- f.now
	}
	if t.After(f.now) {
		f.now = t
	}
}

// AutoAdvance starts moving time to the earliest pending sleep whenever one
// is pending. It returns a function that stops it; call it before the test
// ends.
func (f *Fake) AutoAdvance() (stop func()) {
	f.mu.Lock()
	if f.stop != nil {
		f.mu.Unlock()
		panic("clock: AutoAdvance already on")
	}
	f.stop, f.done = make(chan struct{}), make(chan struct{})
	stopCh, doneCh := f.stop, f.done
	f.mu.Unlock()
	go func() {
		defer close(doneCh)
		for {
			select {
			case <-stopCh:
				return
			case <-f.wake:
			}
			// Let goroutines that were just woken reach their next wait, so
			// that sleeps that are about to start are not skipped over.
			for {
				time.Sleep(50 * time.Microsecond)
				f.mu.Lock()
				next, ok := f.earliestSleep()
				if ok {
					f.advanceTo(next)
				}
				f.mu.Unlock()
				if !ok {
					break
				}
				select {
				case <-stopCh:
					return
				default:
				}
			}
		}
	}()
	return func() {
		close(stopCh)
		<-doneCh
		f.mu.Lock()
		f.stop = nil
		f.mu.Unlock()
	}
}

// Sleeping reports how many Sleep calls are waiting for the fake time. A
// test that advances the time for a goroutine's Sleep waits for it first:
// advanced before the Sleep starts, the time would leave it d later still.
func (f *Fake) Sleeping() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, t := range f.timers {
		if t.sleep {
			n++
		}
	}
	return n
}

func (f *Fake) earliestSleep() (time.Time, bool) {
	var best time.Time
	found := false
	for _, t := range f.timers {
		if t.sleep && (!found || t.at.Before(best)) {
			best, found = t.at, true
		}
	}
	return best, found
}

type timerHeap []*fakeTimer

func (h timerHeap) Len() int { return len(h) }
func (h timerHeap) Less(i, j int) bool {
	if h[i].at.Equal(h[j].at) {
		return h[i].seq < h[j].seq
	}
	return h[i].at.Before(h[j].at)
}
func (h timerHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i]; h[i].index = i; h[j].index = j }
func (h *timerHeap) Push(x any)   { t := x.(*fakeTimer); t.index = len(*h); *h = append(*h, t) }
func (h *timerHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	*h = old[:len(old)-1]
	t.index = -1
	return t
}
