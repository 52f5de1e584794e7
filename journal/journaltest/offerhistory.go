package journaltest

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
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
	// b's latest outcome comes first: Updated is the latest At, not the
	// last one written.
	commit(t, j, &journal.Step{Outcomes: []journal.Outcome{
		outcome("b", journal.OutcomePreempted, 5*time.Hour, 9*time.Hour),
		outcome("b", journal.OutcomeCreated, 0, time.Hour),
		outcome("b", journal.OutcomeAcceptanceFailed, 3*time.Minute, time.Hour),
		outcome("b", journal.OutcomeCreated, 0, 2*time.Hour),
		outcome("b", journal.OutcomeStockout, time.Second, 2*time.Hour),
		outcome("b", journal.OutcomeCreated, 0, 3*time.Hour),
		outcome("b", journal.OutcomeFailed, 10*time.Minute, 3*time.Hour),
		outcome("b", journal.OutcomeCreated, 0, 4*time.Hour),
		outcome("b", journal.OutcomeReady, 20*time.Minute, 4*time.Hour),
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
// or time, or with a negative Elapsed) is refused, the error naming an
// unknown kind, and nothing of its Step is written; a Step whose conditional
// Update fails (ErrConflict, ErrLeaseLost) counts none of its outcomes.
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
		u := v
		u.Phase = "boot"
		err := j.Commit(ctx, &journal.Step{Update: &u, Attempts: []journal.Attempt{newAttempt("vm-a", 1)},
			Events: []journal.Event{newEvent("vm-a", "e")}, Blocks: []journal.Block{newBlock("blk", at(time.Hour))},
			Outcomes: []journal.Outcome{outcome("a", journal.OutcomeCreated, 0, 0), bad}})
		if err == nil {
			t.Errorf("outcome %+v was accepted", bad)
		} else if bad.Kind == "exploded" && !strings.Contains(err.Error(), `"exploded"`) {
			t.Errorf("the refusal of an unknown kind does not name it: %v", err)
		}
	}
	stale := v
	stale.Version--
	err := j.Commit(ctx, &journal.Step{Update: &stale, Outcomes: []journal.Outcome{outcome("a", journal.OutcomeCreated, 0, 0)}})
	if !errors.Is(err, journal.ErrConflict) {
		t.Fatalf("stale update: %v, want ErrConflict", err)
	}
	thief := v
	thief.Owner = "someone-else"
	err = j.Commit(ctx, &journal.Step{Update: &thief, Outcomes: []journal.Outcome{outcome("a", journal.OutcomeReady, time.Second, 0)}})
	if !errors.Is(err, journal.ErrLeaseLost) {
		t.Fatalf("update by a non-owner: %v, want ErrLeaseLost", err)
	}
	if got := stats(t, oh); len(got) != 0 {
		t.Errorf("refused steps left history %v", got)
	}
	if got := recordOf(t, j, "vm-a"); got.VM.Version != v.Version || got.VM.Phase != v.Phase || len(got.Attempts)+len(got.Events) != 0 {
		t.Errorf("refused steps wrote the VM %+v, %d attempts, %d events", got.VM, len(got.Attempts), len(got.Events))
	}
	if bs, err := j.Blocks(ctx, t0); err != nil || len(bs) != 0 {
		t.Errorf("refused steps wrote blocks %v (%v)", bs, err)
	}
	// The same outcome with an Update that holds counts, with the rest of
	// its Step.
	u := v
	u.Phase = "boot"
	commit(t, j, &journal.Step{Update: &u, Outcomes: []journal.Outcome{outcome("a", journal.OutcomeCreated, 0, 0)}})
	if got := stats(t, oh)["a"]; got.Created != 1 || getVM(t, j, "vm-a").Phase != "boot" {
		t.Errorf("a step whose update holds: history %+v", got)
	}
}

// testOfferHistoryPrune: pruning the VMs whose attempts made the history
// leaves the history as it was.
func testOfferHistoryPrune(t *testing.T, h *harness) {
	j := h.journal()
	oh := historyOf(t, j)
	p := pruner(t, j)
	for i, kind := range []journal.OutcomeKind{journal.OutcomeReady, journal.OutcomeStockout, journal.OutcomeAcceptanceFailed} {
		v := ended(fmt.Sprintf("vm-%d", i), journal.StateDeleted, longAgo)
		commit(t, j, &journal.Step{Create: &v, Attempts: []journal.Attempt{newAttempt(v.Name, 1)},
			Events: []journal.Event{newEvent(v.Name, "end")},
			Outcomes: []journal.Outcome{outcome("a", journal.OutcomeCreated, 0, -50*time.Hour),
				outcome("a", kind, 2*time.Minute, -49*time.Hour)}})
	}
	before := stats(t, oh)
	res, err := p.Prune(ctx, journal.PruneOptions{Before: pruneBefore, Now: t0})
	if err != nil || res.VMs != 3 {
		t.Fatalf("Prune = %+v, %v; want 3 VMs removed", res, err)
	}
	after := stats(t, oh)
	equal(t, "history after Prune", after, before)
	if a := after["a"]; a.Created != 3 || a.Ready != 1 || a.Stockouts != 1 || a.AcceptanceFailed != 1 || a.Wasted != 4*time.Minute {
		t.Errorf("history after Prune: %+v", a)
	}
}

// testOfferHistoryKillable: Killable passes the history through, so the
// engine reaches it through the wrapper, and it reads after the kill; a
// Step refused by the kill counts nothing.
func testOfferHistoryKillable(t *testing.T, h *harness) {
	inner := h.journal()
	historyOf(t, inner)
	var dead atomic.Bool
	var j journal.Journal = &Killable{Journal: inner, Dead: dead.Load}
	oh, ok := j.(journal.OfferHistory)
	if !ok {
		t.Fatal("Killable hides journal.OfferHistory")
	}
	commit(t, j, &journal.Step{Outcomes: []journal.Outcome{outcome("a", journal.OutcomeCreated, 0, 0)}})
	dead.Store(true)
	err := j.Commit(ctx, &journal.Step{Outcomes: []journal.Outcome{outcome("a", journal.OutcomeReady, time.Second, 0)}})
	if !errors.Is(err, ErrKilled) {
		t.Fatalf("Commit after the kill: %v, want ErrKilled", err)
	}
	if got := stats(t, oh)["a"]; got.Created != 1 || got.Ready != 0 {
		t.Errorf("history through Killable after the kill: %+v; want 1 created, 0 ready", got)
	}
}

// testOfferHistoryConcurrent: outcomes committed at once from many
// goroutines, two offers a Step in differing orders, are all counted, none
// lost, and no Step fails.
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
				// Two offers a Step, in an order that differs between
				// goroutines: no Step waits on another forever.
				k1, k2 := fmt.Sprintf("k%d", i%3), fmt.Sprintf("k%d", (i+1)%3)
				if g%2 == 1 {
					k1, k2 = k2, k1
				}
				when := time.Duration(i) * time.Second
				err := j.Commit(ctx, &journal.Step{Outcomes: []journal.Outcome{
					outcome(k1, journal.OutcomeCreated, 0, when), outcome(k1, journal.OutcomeReady, 42*time.Second, when),
					outcome(k2, journal.OutcomeCreated, 0, when), outcome(k2, journal.OutcomeReady, 42*time.Second, when)}})
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
	if created != 2*goroutines*each || ready != 2*goroutines*each {
		t.Errorf("counted %d created, %d ready; want %d each", created, ready, 2*goroutines*each)
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
