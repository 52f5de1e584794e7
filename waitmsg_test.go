package gpuprov_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/journal"
)

// TestWaitingMessageKeepsItsSize: a VM that waits through 1,000 re-plans
// without an attempt of its own (no offer under its price cap, and it asked
// to wait for new offers) says the same thing each time: the waiting line,
// its LastError and the launch's error do not nest the previous round's
// text.
func TestWaitingMessageKeepsItsSize(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	var mu sync.Mutex
	var sizes []int
	e.p = e.provisioner(e.j, gpuprov.WithCapacityPoll(time.Second), gpuprov.WithEvents(func(ev gpuprov.Event) {
		if ev.Type == gpuprov.EvWaiting && ev.VM == "second" {
			mu.Lock()
			sizes = append(sizes, len(ev.Message))
			mu.Unlock()
		}
	}))
	req := h100("second")
	req.MaxPricePerHour, req.WaitForCapacity, req.WaitForOffers = 0.5, true, true
	req.Timeout = 1000*time.Second + 500*time.Millisecond
	_, err := e.p.Launch(ctx, req)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("launch: %v; want its deadline", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(sizes) < 1000 {
		t.Fatalf("%d waiting lines; want one per re-plan, 1,000", len(sizes))
	}
	for i, n := range sizes {
		if n > sizes[0]+16 { // the next try's time may print a digit more
			t.Fatalf("waiting line %d is %d bytes; the first was %d: it grows", i, n, sizes[0])
		}
	}
	row, gerr := e.j.GetVM(ctx, "second")
	if gerr != nil {
		t.Fatal(gerr)
	}
	if n := strings.Count(row.LastError, "no offers for"); n > 1 {
		t.Errorf("LastError nests %d rounds: %.300s…", n, row.LastError)
	}
	if len(err.Error()) > 2*sizes[0] {
		t.Errorf("the launch's error is %d bytes; the waiting line is %d", len(err.Error()), sizes[0])
	}
}

// TestWaitingForCapacityThatCannotExist: a request whose filters leave no
// offer at all (a price cap below every offer, a region nobody has) fails
// at once with ErrNoOffers naming the filter, whether or not it asked to
// wait; with WaitForOffers too it waits, and says what for.
func TestWaitingForCapacityThatCannotExist(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		set  func(r *gpuprov.Request)
		want string
	}{
		{"price cap", func(r *gpuprov.Request) { r.MaxPricePerHour = 0.5 }, "none under $0.50/h"},
		{"region", func(r *gpuprov.Request) { r.Regions = []string{"mars-1"} }, "mars-1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			req := h100("typo")
			req.WaitForCapacity, req.Timeout = true, 12*time.Hour
			tc.set(&req)
			start := e.clk.Now()
			_, err := e.p.Launch(ctx, req)
			if !errors.Is(err, gpuprov.ErrNoOffers) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("launch: %v; want ErrNoOffers naming %s", err, tc.want)
			}
			if took := e.clk.Now().Sub(start); took > time.Minute {
				t.Errorf("failed after %v of waiting; want at once", took)
			}
			if row, _ := e.j.GetVM(ctx, "typo"); row.State != journal.StateFailed {
				t.Errorf("ended %s; want failed", row.State)
			}

			waiting := make(chan string, 1)
			e.p = e.provisioner(e.j, gpuprov.WithEvents(func(ev gpuprov.Event) {
				if ev.Type == gpuprov.EvWaiting {
					select {
					case waiting <- ev.Message:
					default:
					}
				}
			}))
			req.Name, req.WaitForOffers, req.Timeout = "patient", true, time.Hour
			_, err = e.p.Launch(ctx, req)
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("launch waiting for offers: %v; want its deadline", err)
			}
			if msg := <-waiting; !strings.Contains(msg, "waiting for new offers") {
				t.Errorf("waiting line %q does not say it waits for new offers", msg)
			}
		})
	}
	e := newEnv(t)
	req := h100("confused")
	req.WaitForOffers = true
	var re *gpuprov.RequestError
	if _, err := e.p.Launch(ctx, req); !errors.As(err, &re) || re.Field != "wait_for_offers" {
		t.Errorf("WaitForOffers without WaitForCapacity: %v; want a RequestError", err)
	}
}

// TestCapacityPollIsNotFlooredByThePlanCache: with WithCapacityPoll(1s), a
// waiting VM sees an offer that appears while it waits at its next poll,
// not once the shared plan (kept 20 s) expires.
func TestCapacityPollIsNotFlooredByThePlanCache(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	var appeared time.Time
	var once sync.Once
	e.p = e.provisioner(e.j, gpuprov.WithCapacityPoll(time.Second), gpuprov.WithEvents(func(ev gpuprov.Event) {
		if ev.Type == gpuprov.EvWaiting {
			once.Do(func() {
				cheap := e.fake("b").Offers[0]
				cheap.PricePerHour = 1.00
				e.fake("b").SetOffers(cheap)
				appeared = e.clk.Now()
			})
		}
	}))
	req := h100("bargain")
	req.MaxPricePerHour, req.WaitForCapacity, req.WaitForOffers, req.Timeout = 1.50, true, true, time.Hour
	vm, err := e.p.Launch(ctx, req)
	if err != nil {
		t.Fatalf("launch: %v", err)
	}
	if vm.Provider != "b" {
		t.Fatalf("launched on %s", vm.Provider)
	}
	_, hist, err := e.p.History(ctx, "bargain")
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range hist {
		if ev.Type == gpuprov.EvAttempt {
			if wait := ev.Time.Sub(appeared); wait > 2*time.Second {
				t.Errorf("the first attempt came %v after the offer appeared; want within a 1 s poll", wait)
			}
			break
		}
	}
}
