package journaltest

import (
	"testing"

	"github.com/org/gpuprov/journal"
)

// bare is a journal that keeps no per-offer history.
type bare struct{ journal.Journal }

// TestKillableWithoutHistory: over a journal that keeps no history,
// Killable's OfferStats reports none, as the engine reads a journal
// without one, rather than an error.
func TestKillableWithoutHistory(t *testing.T) {
	k := &Killable{Journal: bare{}, Dead: func() bool { return false }}
	got, err := k.OfferStats(ctx)
	if err != nil || len(got) != 0 {
		t.Errorf("OfferStats = %v, %v; want none", got, err)
	}
}
