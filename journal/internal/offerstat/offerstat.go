// Package offerstat holds what the two SQL backends do alike to keep the
// per-offer history (journal.OfferHistory): the histogram of the time to
// ready, and the conversion of a Step's outcomes into the counter and
// bucket increments the statements of package stmt add in one transaction.
//
// The histogram has fixed, log-spaced buckets: bucket 0 holds every time
// under one second, bucket i ≥ 1 the times in [r^(i−1), r^i) seconds with
// r = journal.ReadyBucketRatio, and the last bucket, whose lower edge is
// r^(Buckets−2) s (about 24.3 hours), everything longer. A quantile is read
// as the geometric middle of the bucket that holds it, so it is within a
// factor √r of the true value for times between one second and 24 hours.
package offerstat

import (
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/org/gpuprov/journal"
)

// Buckets is the number of histogram buckets: bucket 0 (under 1 s), then
// 51 buckets of ratio journal.ReadyBucketRatio from 1 s to r^51 s ≈ 24.3 h,
// and one for everything longer. Raising it later keeps every stored
// bucket's meaning except the last one's.
const Buckets = 53

// Bucket returns the bucket of d.
func Bucket(d time.Duration) int {
	s := d.Seconds()
	if s < 1 {
		return 0
	}
	b := 1 + int(math.Floor(math.Log(s)/math.Log(journal.ReadyBucketRatio)))
	return min(b, Buckets-1)
}

// Middle is the time a quantile that falls in bucket b is read as: the
// geometric middle of its edges; 500 ms for bucket 0; for the last bucket,
// which has no upper edge, the same point above its lower edge (a time at
// least that long may read low).
func Middle(b int) time.Duration {
	if b <= 0 {
		return 500 * time.Millisecond
	}
	lo := math.Pow(journal.ReadyBucketRatio, float64(min(b, Buckets-1)-1))
	return time.Duration(lo * math.Sqrt(journal.ReadyBucketRatio) * float64(time.Second))
}

// Quantile returns the q-quantile (0 < q ≤ 1) of the histogram counts
// (bucket → count), the nearest-rank one, or 0 for an empty histogram.
func Quantile(counts map[int]int64, q float64) time.Duration {
	var total int64
	bs := make([]int, 0, len(counts))
	for b, n := range counts {
		total += n
		bs = append(bs, b)
	}
	if total == 0 {
		return 0
	}
	sort.Ints(bs)
	rank := int64(math.Ceil(q * float64(total)))
	var seen int64
	for _, b := range bs {
		seen += counts[b]
		if seen >= rank {
			return Middle(b)
		}
	}
	return Middle(bs[len(bs)-1])
}

// Increment is one outcome as the statements add it: the counters of
// stmt.Statements.UpsertOfferStats, and a bucket of the time to ready
// (-1: none).
type Increment struct {
	Stats  []any
	Bucket int
	Key    string
}

// Increments converts a Step's outcomes, refusing one with an unknown kind,
// an empty offer key, a negative Elapsed or a zero At with an error naming
// it (and then nothing of the Step is written). The increments come ordered
// by offer key, so that two transactions that both touch several offers
// lock their rows in the same order and never deadlock each other.
func Increments(outs []journal.Outcome) ([]Increment, error) {
	var incs []Increment
	for i, o := range outs {
		switch {
		case !o.Kind.Valid():
			return nil, fmt.Errorf("outcome %d (%s): unknown kind %q", i, o.OfferKey, o.Kind)
		case o.OfferKey == "":
			return nil, fmt.Errorf("outcome %d (%s): empty offer key", i, o.Kind)
		case o.Elapsed < 0:
			return nil, fmt.Errorf("outcome %d (%s %s): negative elapsed %v", i, o.OfferKey, o.Kind, o.Elapsed)
		case o.At.IsZero():
			return nil, fmt.Errorf("outcome %d (%s %s): zero At", i, o.OfferKey, o.Kind)
		}
		var c [6]int64 // created, ready, acceptance_failed, stockouts, preempted, failed
		var wasted time.Duration
		bucket := -1
		switch o.Kind {
		case journal.OutcomeCreated:
			c[0] = 1
		case journal.OutcomeReady:
			c[1], bucket = 1, Bucket(o.Elapsed)
		case journal.OutcomeAcceptanceFailed:
			c[2], wasted = 1, o.Elapsed
		case journal.OutcomeStockout:
			c[3], wasted = 1, o.Elapsed
		case journal.OutcomePreempted:
			c[4], wasted = 1, o.Elapsed
		case journal.OutcomeFailed:
			c[5], wasted = 1, o.Elapsed
		}
		incs = append(incs, Increment{Key: o.OfferKey, Bucket: bucket, Stats: []any{
			o.OfferKey, o.Provider, o.Region, o.Zone, o.InstanceType, o.Spot,
			c[0], c[1], c[2], c[3], c[4], c[5], int64(wasted), o.At.UTC().UnixNano()}})
	}
	sort.SliceStable(incs, func(a, b int) bool { return incs[a].Key < incs[b].Key })
	return incs, nil
}

// Row is one row of stmt.Statements.ListOfferStats: an offer's counters
// and one bucket of its histogram (Bucket -1 and N 0 for an offer with
// none).
type Row struct {
	Stats  journal.OfferStats
	Bucket int
	N      int64
}

// Scanner is a row as database/sql and pgx both scan it.
type Scanner interface{ Scan(dest ...any) error }

// Scan reads a row of ListOfferStats.
func Scan(s Scanner) (Row, error) {
	var (
		r                    Row
		wasted               int64
		updated              *int64
		created, ready       int64
		accFailed, stockouts int64
		preempted, failed    int64
		bucket, n            *int64
	)
	st := &r.Stats
	err := s.Scan(&st.OfferKey, &st.Provider, &st.Region, &st.Zone, &st.InstanceType, &st.Spot,
		&created, &ready, &accFailed, &stockouts, &preempted, &failed, &wasted, &updated, &bucket, &n)
	if err != nil {
		return r, err
	}
	st.Created, st.Ready, st.AcceptanceFailed, st.Stockouts, st.Preempted, st.Failed = created, ready, accFailed, stockouts, preempted, failed
	st.Wasted = time.Duration(wasted)
	if updated != nil {
		st.Updated = time.Unix(0, *updated).UTC()
	}
	r.Bucket = -1
	if bucket != nil && n != nil {
		r.Bucket, r.N = int(*bucket), *n
	}
	return r, nil
}

// Merge builds the history from the rows of ListOfferStats: each offer's
// counters with the percentiles of its histogram.
func Merge(rows []Row) map[string]journal.OfferStats {
	hist := map[string]map[int]int64{}
	out := map[string]journal.OfferStats{}
	for _, r := range rows {
		k := r.Stats.OfferKey
		if _, seen := out[k]; !seen {
			out[k], hist[k] = r.Stats, map[int]int64{}
		}
		if r.Bucket >= 0 {
			hist[k][r.Bucket] += r.N
		}
	}
	for k, s := range out {
		s.ReadyP50, s.ReadyP90 = Quantile(hist[k], 0.5), Quantile(hist[k], 0.9)
		out[k] = s
	}
	return out
}
