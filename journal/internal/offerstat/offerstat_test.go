package offerstat

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/org/gpuprov/journal"
)

// bound is the documented error of a quantile: a factor √r (with room for
// rounding to the nanosecond).
var bound = math.Sqrt(journal.ReadyBucketRatio) * (1 + 1e-9)

func TestBucket(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want int
	}{
		{0, 0},
		{999 * time.Millisecond, 0},
		{time.Second, 1},
		{1249 * time.Millisecond, 1},
		{1251 * time.Millisecond, 2},
		{time.Minute, 19},      // 1.25^18 ≈ 55.5 s ≤ 60 s < 1.25^19 ≈ 69.4 s
		{24 * time.Hour, 51},   // 1.25^50 ≈ 19.5 h ≤ 24 h < 1.25^51 ≈ 24.3 h
		{25 * time.Hour, 52},   // the last bucket
		{1000 * time.Hour, 52}, // the last bucket
	} {
		if got := Bucket(tc.d); got != tc.want {
			t.Errorf("Bucket(%v) = %d, want %d", tc.d, got, tc.want)
		}
	}
}

// exact is the nearest-rank q-quantile of sorted.
func exact(sorted []time.Duration, q float64) time.Duration {
	return sorted[int(math.Ceil(q*float64(len(sorted))))-1]
}

// TestQuantileBound: for samples spread over 1 s to 24 h, the median and
// the 90th percentile read from the histogram are within a factor √r of
// the exact ones.
func TestQuantileBound(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	worst := 1.0
	for trial := 0; trial < 2000; trial++ {
		n := 1 + rng.IntN(300)
		sample := make([]time.Duration, n)
		counts := map[int]int64{}
		for i := range sample {
			// log-uniform from 1 s to 24 h, and now and then a bucket edge
			s := math.Exp(rng.Float64() * math.Log(86400))
			if rng.IntN(10) == 0 {
				s = math.Pow(journal.ReadyBucketRatio, float64(rng.IntN(51)))
			}
			sample[i] = time.Duration(s * float64(time.Second))
			counts[Bucket(sample[i])]++
		}
		slices.Sort(sample)
		for _, q := range []float64{0.5, 0.9} {
			got, want := Quantile(counts, q), exact(sample, q)
			ratio := math.Max(float64(got)/float64(want), float64(want)/float64(got))
			worst = math.Max(worst, ratio)
			if ratio > bound {
				t.Fatalf("trial %d: q%.1f of %d times = %v, exact %v: off by ×%.4f, bound ×%.4f", trial, q, n, got, want, ratio, bound)
			}
		}
	}
	if worst < 1.05 {
		t.Errorf("the worst error over every trial was ×%.4f: the samples do not exercise the bound", worst)
	}
}

func TestQuantileKnownSample(t *testing.T) {
	// 1..100 s: the median is 50 s, the 90th percentile 90 s.
	counts := map[int]int64{}
	for s := 1; s <= 100; s++ {
		counts[Bucket(time.Duration(s)*time.Second)]++
	}
	for q, want := range map[float64]time.Duration{0.5: 50 * time.Second, 0.9: 90 * time.Second, 1: 100 * time.Second} {
		got := Quantile(counts, q)
		if r := math.Max(float64(got)/float64(want), float64(want)/float64(got)); r > bound {
			t.Errorf("q%.1f = %v, want %v within ×%.3f", q, got, want, bound)
		}
	}
	if got := Quantile(nil, 0.5); got != 0 {
		t.Errorf("quantile of an empty histogram = %v, want 0", got)
	}
}

func TestIncrements(t *testing.T) {
	at := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	o := func(key string, kind journal.OutcomeKind, elapsed time.Duration) journal.Outcome {
		return journal.Outcome{OfferKey: key, Provider: "sim", Kind: kind, Elapsed: elapsed, At: at}
	}
	incs, err := Increments([]journal.Outcome{
		o("b", journal.OutcomeCreated, 0), o("a", journal.OutcomeReady, time.Minute), o("b", journal.OutcomeStockout, time.Second),
	})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, in := range incs {
		keys = append(keys, in.Key)
	}
	// Sorted by key, the outcomes of one key in the order given.
	if !slices.Equal(keys, []string{"a", "b", "b"}) || incs[0].Bucket != Bucket(time.Minute) || incs[1].Bucket != -1 {
		t.Errorf("increments %+v", incs)
	}
	if wasted := incs[2].Stats[12]; wasted != int64(time.Second) {
		t.Errorf("a stockout's wasted time = %v, want 1s", wasted)
	}
	_, err = Increments([]journal.Outcome{o("a", journal.OutcomeCreated, 0), o("a", "vanished", 0)})
	if err == nil || !strings.Contains(err.Error(), `"vanished"`) {
		t.Errorf("an unknown kind: %v, want an error naming it", err)
	}
}

func TestMerge(t *testing.T) {
	st := func(key string, ready int64) journal.OfferStats {
		return journal.OfferStats{OfferKey: key, Ready: ready}
	}
	got := Merge([]Row{
		{Stats: st("a", 3), Bucket: Bucket(10 * time.Second), N: 2},
		{Stats: st("a", 3), Bucket: Bucket(time.Hour), N: 1},
		{Stats: st("b", 0), Bucket: -1},
	})
	if len(got) != 2 || got["a"].Ready != 3 || got["b"].ReadyP50 != 0 {
		t.Fatalf("Merge = %+v", got)
	}
	if a := got["a"]; a.ReadyP50 != Middle(Bucket(10*time.Second)) || a.ReadyP90 != Middle(Bucket(time.Hour)) {
		t.Errorf("a: p50 %v, p90 %v; want the middles of 10 s's and 1 h's buckets", a.ReadyP50, a.ReadyP90)
	}
}
