package journaltest

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/org/gpuprov/journal"
)

// historyOf returns j as a journal.OfferHistory, or skips the test for a
// backend that does not implement it (it is optional).
func historyOf(t *testing.T, j journal.Journal) journal.OfferHistory {
	t.Helper()
	h, ok := j.(journal.OfferHistory)
	if !ok {
		t.Skipf("%T does not implement journal.OfferHistory", j)
	}
	return h
}

func outcome(key string, kind journal.OutcomeKind, elapsed time.Duration, when time.Duration) journal.Outcome {
	return journal.Outcome{OfferKey: key, Provider: "sim", Region: "eu-1", Zone: "eu-1a", InstanceType: "gpu.8x",
		Spot: key == "spot", Kind: kind, Elapsed: elapsed, At: at(when)}
}

func stats(t *testing.T, h journal.OfferHistory) map[string]journal.OfferStats {
	t.Helper()
	s, err := h.OfferStats(ctx)
	if err != nil {
		t.Fatalf("OfferStats: %v", err)
	}
	return s
}

// within reports whether got is within a factor √ReadyBucketRatio of want.
func within(got, want time.Duration) bool {
	f := math.Sqrt(journal.ReadyBucketRatio) * 1.0001
	return float64(got) >= float64(want)/f && float64(got) <= float64(want)*f
}

// testOfferHistory: outcomes add up per offer, across steps; the time to
// ready's median and 90th percentile come within the histogram's bound;
// the failing outcomes add their elapsed time to Wasted; Updated is the
// latest outcome's time.
func testOfferHistory(t *testing.T, h *harness) {
	j := h.journal()
	oh := historyOf(t, j)
	if got := stats(t, oh); len(got) != 0 {
		t.Fatalf("a new journal has history %v", got)
	}
	// 100 ready launches taking 1..100 s (median 50 s, p90 90 s), in
	// steps of ten, each with its create.
	for i := 0; i < 10; i++ {
		var outs []journal.Outcome
		for k := 1; k <= 10; k++ {
			s := time.Duration(i*10+k) * time.Second
			outs = append(outs, outcome("a", journal.OutcomeCreated, 0, s), outcome("a", journal.OutcomeReady, s, s))
		}
		commit(t, j, &journal.Step{Outcomes: outs})
	}
	commit(t, j, &journal.Step{Outcomes: []journal.Outcome{
		outcome("b", journal.OutcomeCreated, 0, time.Hour),
		outcome("b", journal.OutcomeAcceptanceFailed, 3*time.Minute, time.Hour),
		outcome("b", journal.OutcomeCreated, 0, 2*time.Hour),
		outcome("b", journal.OutcomeStockout, time.Second, 2*time.Hour),
		outcome("b", journal.OutcomeCreated, 0, 3*time.Hour),
		outcome("b", journal.OutcomeFailed, 10*time.Minute, 3*time.Hour),
		outcome("b", journal.OutcomeCreated, 0, 4*time.Hour),
		outcome("b", journal.OutcomeReady, 20*time.Minute, 4*time.Hour),
		outcome("b", journal.OutcomePreempted, 5*time.Hour, 9*time.Hour),
	}})
	got := stats(t, oh)
	a, b := got["a"], got["b"]
	if len(got) != 2 || a.Created != 100 || a.Ready != 100 || a.Failed != 0 || a.Wasted != 0 {
		t.Fatalf("history of a = %+v (of %d offers); want 100 created, 100 ready", a, len(got))
	}
	if !within(a.ReadyP50, 50*time.Second) || !within(a.ReadyP90, 90*time.Second) {
		t.Errorf("a: p50 %v, p90 %v; want 50s and 90s within ×%.3f", a.ReadyP50, a.ReadyP90, math.Sqrt(journal.ReadyBucketRatio))
	}
	if a.Provider != "sim" || a.Region != "eu-1" || a.Zone != "eu-1a" || a.InstanceType != "gpu.8x" || a.Spot {
		t.Errorf("a's offer fields: %+v", a)
	}
	if !a.Updated.Equal(at(100 * time.Second)) {
		t.Errorf("a updated %v, want the latest outcome's time %v", a.Updated, at(100*time.Second))
	}
	want := journal.OfferStats{OfferKey: "b", Provider: "sim", Region: "eu-1", Zone: "eu-1a", InstanceType: "gpu.8x",
		Created: 4, Ready: 1, AcceptanceFailed: 1, Stockouts: 1, Preempted: 1, Failed: 1,
		Wasted: 3*time.Minute + time.Second + 10*time.Minute + 5*time.Hour, Updated: at(9 * time.Hour)}
	if !within(b.ReadyP50, 20*time.Minute) || b.ReadyP50 != b.ReadyP90 {
		t.Errorf("b: p50 %v, p90 %v; want both 20m within the bound", b.ReadyP50, b.ReadyP90)
	}
	b.ReadyP50, b.ReadyP90 = 0, 0
	equal(t, "history of b", b, want)
}

// testOfferHistoryRefusals: an outcome of an unknown kind (or without a key
// or time) is refused and nothing of its Step is written; a Step whose
// conditional Update fails counts none of its outcomes.
func testOfferHistoryRefusals(t *testing.T, h *harness) {
	j := h.journal()
	oh := historyOf(t, j)
	v := create(t, j, newVM("vm-a"))
	for _, bad := range []journal.Outcome{
		outcome("a", "exploded", 0, 0),
		outcome("", journal.OutcomeReady, time.Second, 0),
		{OfferKey: "a", Kind: journal.OutcomeReady, Elapsed: time.Second},
		outcome("a", journal.OutcomeFailed, -time.Second, 0),
	} {
		err := j.Commit(ctx, &journal.Step{Events: []journal.Event{newEvent("vm-a", "e")},
			Outcomes: []journal.Outcome{outcome("a", journal.OutcomeCreated, 0, 0), bad}})
		if err == nil {
			t.Errorf("outcome %+v was accepted", bad)
		}
	}
	if evs, err := j.Events(ctx, journal.EventQuery{VM: "vm-a"}); err != nil || len(evs) != 0 {
		t.Errorf("a refused step wrote events %v (%v)", evs, err)
	}
	stale := v
	stale.Version--
	err := j.Commit(ctx, &journal.Step{Update: &stale, Outcomes: []journal.Outcome{outcome("a", journal.OutcomeCreated, 0, 0)}})
	if !errors.Is(err, journal.ErrConflict) {
		t.Fatalf("stale update: %v, want ErrConflict", err)
	}
	if got := stats(t, oh); len(got) != 0 {
		t.Errorf("refused steps left history %v", got)
	}
}

// testOfferHistoryConcurrent: outcomes committed at once from many
// goroutines are all counted, none lost.
func testOfferHistoryConcurrent(t *testing.T, h *harness) {
	j := h.journal()
	oh := historyOf(t, j)
	const goroutines, each = 8, 25
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				key := fmt.Sprintf("k%d", i%3)
				err := j.Commit(ctx, &journal.Step{Outcomes: []journal.Outcome{
					outcome(key, journal.OutcomeCreated, 0, time.Duration(i)*time.Second),
					outcome(key, journal.OutcomeReady, 42*time.Second, time.Duration(i)*time.Second)}})
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var created, ready int64
	for _, s := range stats(t, oh) {
		created += s.Created
		ready += s.Ready
		if !within(s.ReadyP50, 42*time.Second) {
			t.Errorf("%s: p50 %v, want 42s", s.OfferKey, s.ReadyP50)
		}
	}
	if created != goroutines*each || ready != goroutines*each {
		t.Errorf("counted %d created, %d ready; want %d each", created, ready, goroutines*each)
	}
}

// testOfferHistoryReopen: the history outlives the handle, and a second
// handle adds to it.
func testOfferHistoryReopen(t *testing.T, h *harness) {
	j1 := h.journal()
	historyOf(t, j1)
	commit(t, j1, &journal.Step{Outcomes: []journal.Outcome{outcome("a", journal.OutcomeCreated, 0, 0)}})
	j2 := h.reopen(j1)
	commit(t, j2, &journal.Step{Outcomes: []journal.Outcome{outcome("a", journal.OutcomeReady, time.Minute, time.Minute)}})
	got := stats(t, historyOf(t, j1))["a"]
	if got.Created != 1 || got.Ready != 1 || !within(got.ReadyP50, time.Minute) {
		t.Errorf("history after a reopen: %+v", got)
	}
}
