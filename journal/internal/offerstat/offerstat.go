// Package offerstat holds what the two SQL backends do alike to keep the
// per-offer history (journal.OfferHistory): the histogram of the time to
// ready, and the conversion of a Step's outcomes into the counter and
// bucket increments the statements of package stmt add in one transaction.
//
// The histogram has fixed, log-spaced buckets: bucket 0 holds every time
// under one second, bucket i ≥ 1 the times in [r^(i−1), r^i) seconds with
// r = journal.ReadyBucketRatio, and the last bucket everything longer. A
// quantile is read as the geometric middle of the bucket that holds it, so
// it is within a factor √r of the true value for times between one second
// and the last bucket's lower edge (about 20 hours).
package offerstat

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/org/gpuprov/journal"
)

// Buckets is the number of histogram buckets.
const Buckets = 48

// Bucket returns the bucket of d.
func Bucket(d time.Duration) int {
	s := d.Seconds()
	if s < 1 {
		return 0
	}
	b := 1 + int(math.Floor(math.Log(s)/math.Log(journal.ReadyBucketRatio)))
	return min(b, Buckets-1)
}

// middle is the time a quantile that falls in bucket b is read as.
func middle(b int) time.Duration {
	if b == 0 {
		return 500 * time.Millisecond
	}
	lo := math.Pow(journal.ReadyBucketRatio, float64(b-1))
	return time.Duration(lo * math.Sqrt(journal.ReadyBucketRatio) * float64(time.Second))
}

// Quantile returns the q-quantile (0 < q ≤ 1) of the histogram counts
// (bucket → count), or 0 for an empty one.
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
			return middle(b)
		}
	}
	return middle(bs[len(bs)-1])
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
// an empty offer key, a negative Elapsed or a zero time, with an error
// naming it (and nothing is written).
func Increments(outs []journal.Outcome) ([]Increment, error) {
	var incs []Increment
	for i, o := range outs {
		switch {
		case !o.Kind.Valid():
			return nil, fmt.Errorf("outcome %d (%s): unknown kind %q", i, o.OfferKey, o.Kind)
		case o.OfferKey == "":
			return nil, fmt.Errorf("outcome %d: empty offer key", i)
		case o.Elapsed < 0:
			return nil, fmt.Errorf("outcome %d (%s): negative elapsed %v", i, o.OfferKey, o.Elapsed)
		case o.At.IsZero():
			return nil, errors.New("outcome " + fmt.Sprint(i) + " (" + o.OfferKey + "): zero At")
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
	return incs, nil
}

// Row is one row of stmt.Statements.ListOfferStats, or of ListOfferReady
// (Key, Bucket and N set).
type Row struct {
	Stats  journal.OfferStats
	Key    string
	Bucket int
	N      int64
}

// Scanner is a row as database/sql and pgx both scan it.
type Scanner interface{ Scan(dest ...any) error }

// ScanStats reads a row of ListOfferStats.
func ScanStats(s Scanner) (Row, error) {
	var (
		r                    Row
		wasted               int64
		updated              *int64
		created, ready       int64
		accFailed, stockouts int64
		preempted, failed    int64
	)
	st := &r.Stats
	err := s.Scan(&st.OfferKey, &st.Provider, &st.Region, &st.Zone, &st.InstanceType, &st.Spot,
		&created, &ready, &accFailed, &stockouts, &preempted, &failed, &wasted, &updated)
	if err != nil {
		return r, err
	}
	st.Created, st.Ready, st.AcceptanceFailed, st.Stockouts, st.Preempted, st.Failed = created, ready, accFailed, stockouts, preempted, failed
	st.Wasted = time.Duration(wasted)
	if updated != nil {
		st.Updated = time.Unix(0, *updated).UTC()
	}
	return r, nil
}

// ScanReady reads a row of ListOfferReady.
func ScanReady(s Scanner) (Row, error) {
	var r Row
	err := s.Scan(&r.Key, &r.Bucket, &r.N)
	return r, err
}

// Merge builds the history from the rows of both queries: each offer's
// counters with the percentiles of its histogram.
func Merge(stats, ready []Row) map[string]journal.OfferStats {
	hist := map[string]map[int]int64{}
	for _, r := range ready {
		if hist[r.Key] == nil {
			hist[r.Key] = map[int]int64{}
		}
		hist[r.Key][r.Bucket] += r.N
	}
	out := make(map[string]journal.OfferStats, len(stats))
	for _, r := range stats {
		s := r.Stats
		s.ReadyP50, s.ReadyP90 = Quantile(hist[s.OfferKey], 0.5), Quantile(hist[s.OfferKey], 0.9)
		out[s.OfferKey] = s
	}
	return out
}
