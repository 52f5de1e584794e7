// Package clock is the time source of everything in gpuprov that waits, so
// that tests hand the engine a fake clock and never sleep for real seconds.
//
// Real is the wall clock. Fake is a manual clock for tests; with
// AutoAdvance it jumps to the earliest pending sleep, so a 20-minute boot
// timeout runs in milliseconds:
//
//	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
//	defer clk.AutoAdvance()()
//	p, err := gpuprov.New(j, gpuprov.WithClock(clk), ...)
//
// A caller may also implement Clock itself (Now, NewTimer, Sleep).
package clock

import (
	"context"
	"time"
)

// Clock tells the time and makes timers.
type Clock interface {
	Now() time.Time
	// NewTimer returns a timer that fires once, d from now.
	NewTimer(d time.Duration) Timer
	// Sleep waits d, or until ctx ends (returning ctx's error with its cause).
	Sleep(ctx context.Context, d time.Duration) error
}

// Timer is a one-shot timer.
type Timer interface {
	C() <-chan time.Time
	// Stop prevents the timer from firing; it reports whether it stopped it.
	Stop() bool
}

// Real is the wall clock.
var Real Clock = realClock{}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

func (realClock) Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return context.Cause(ctx)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time { return r.t.C }
func (r realTimer) Stop() bool          { return r.t.Stop() }

// WithDeadline returns a context that is cancelled, with cause
// context.DeadlineExceeded, when c reaches deadline, or when parent ends.
// With the real clock it is context.WithDeadline.
func WithDeadline(parent context.Context, c Clock, deadline time.Time) (context.Context, context.CancelFunc) {
	if _, ok := c.(realClock); ok {
		return context.WithDeadline(parent, deadline)
	}
	ctx, cancel := context.WithCancelCause(parent)
	if af, ok := c.(interface {
		AfterFunc(time.Duration, func()) Timer
	}); ok {
		t := af.AfterFunc(deadline.Sub(c.Now()), func() { cancel(context.DeadlineExceeded) })
		return ctx, func() { t.Stop(); cancel(context.Canceled) }
	}
	t := c.NewTimer(deadline.Sub(c.Now()))
	done := make(chan struct{})
	go func() {
		select {
		case <-t.C():
			cancel(context.DeadlineExceeded)
		case <-ctx.Done():
		case <-done:
		}
		t.Stop()
	}()
	return ctx, func() { close(done); cancel(context.Canceled) }
}
