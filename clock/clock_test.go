package clock

import (
	"context"
	"errors"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestFakeAdvanceFiresDueTimersInOrder(t *testing.T) {
	f := NewFake(t0)
	a, b := f.NewTimer(2*time.Second), f.NewTimer(time.Second)
	f.Advance(1500 * time.Millisecond)
	select {
	case got := <-b.C():
		if !got.Equal(t0.Add(time.Second)) {
			t.Fatalf("b fired at %v", got)
		}
	default:
		t.Fatal("b did not fire")
	}
	select {
	case <-a.C():
		t.Fatal("a fired early")
	default:
	}
	if !a.Stop() {
		t.Fatal("Stop of a pending timer reported false")
	}
	f.Advance(time.Hour)
	select {
	case <-a.C():
		t.Fatal("stopped timer fired")
	default:
	}
}

func TestAutoAdvanceRunsSleepsButNotDeadlines(t *testing.T) {
	f := NewFake(t0)
	stop := f.AutoAdvance()
	defer stop()
	ctx, cancel := WithDeadline(context.Background(), f, t0.Add(10*time.Minute))
	defer cancel()
	for i := 0; i < 5; i++ {
		if err := f.Sleep(ctx, time.Minute); err != nil {
			t.Fatalf("sleep %d: %v", i, err)
		}
	}
	if got := f.Now().Sub(t0); got != 5*time.Minute {
		t.Fatalf("virtual time moved %v, want 5m", got)
	}
	// Sleeping past the deadline ends the sleep with the deadline's cause.
	err := f.Sleep(ctx, time.Hour)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("sleep past deadline: %v", err)
	}
}

func TestWithDeadlineCancelReleasesWatcher(t *testing.T) {
	f := NewFake(t0)
	ctx, cancel := WithDeadline(context.Background(), f, t0.Add(time.Minute))
	cancel()
	if !errors.Is(context.Cause(ctx), context.Canceled) {
		t.Fatalf("cause %v", context.Cause(ctx))
	}
}
