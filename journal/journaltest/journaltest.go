// Package journaltest is the conformance kit for journal.Journal backends:
// the executable form of the contract documented in package journal. Every
// backend runs it from its own tests:
//
//	func TestConformance(t *testing.T) {
//		journaltest.Run(t, func(t *testing.T) journal.Journal {
//			j, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "j.db"))
//			if err != nil {
//				t.Fatal(err)
//			}
//			return j
//		})
//	}
//
// RunOpener takes an Opener whose optional Reopen opens a second handle on
// the same store, which adds the tests that need one: Installation and data
// survive a reopen, and two handles (as two processes would hold) never both
// win a lease or lose an update.
//
// Where package journal leaves a detail open, the kit decides it, and every
// backend must agree (the decisions are listed here and in the tests):
//
//   - Records read back normalized: non-zero times are in UTC without a
//     monotonic reading and equal to the time written to the nanosecond (a
//     PostgreSQL backend stores BIGINT unix nanoseconds, not timestamptz,
//     which keeps microseconds); zero times stay zero; an empty
//     json.RawMessage (nil or not) reads back nil; a non-empty one reads
//     back byte for byte (json or text columns, not jsonb, which reorders);
//     an empty InstanceIDs reads back nil.
//   - A non-empty JSON field that is not valid JSON fails the Step, which
//     writes nothing.
//   - Create writes the lease fields it is given (a process can create a
//     VM it already holds); Update never does.
//   - An Update of an unknown VM and an Attempt of an unknown VM fail the
//     Step with journal.ErrNotFound.
//   - The fields Commit sets in a Step (Create.Version, Update.Version,
//     Update.LeaseExpiry, Events[i].Seq) are set only when it succeeds.
//   - An empty Step commits as a no-op.
//   - A lease is live while now is before its expiry: at its expiry it can
//     be taken; a zero expiry is always expired. Acquire by the holder
//     moves the expiry to the one given, earlier or later.
//   - On a backend with a journal.LeaseClock, "now" is the backend's clock
//     and a lease is granted as a length (expiry − now, LeaseExpiry −
//     CreatedAt for a Create) from it; a Create writes the expiry it stored
//     back into Create.LeaseExpiry. The kit checks each granted expiry
//     against LeaseNow readings taken before and after the call, and writes
//     an expired lease as a length already over and a live one as a long
//     one; on the caller's clock it checks the exact times.
//   - Acquire, Renew and Release change neither Version nor any field but
//     the lease fields; Update as the stored owner succeeds even if the
//     lease has expired, as long as no one took it over.
//   - Renew reports lost names in the order given, unknown names included.
//     Release of an unknown VM, or by a non-holder, returns nil.
//   - A Block replaces the stored one of its Key unless its Until is
//     earlier; Blocks(now) returns those with Until strictly after now, in
//     any order. Attempts of an unknown VM is empty, not an error.
//   - Events(After) never misses an event: a reader following the log with
//     After sees every event once, even while others commit.
//   - A Commit or Acquire on a cancelled context fails with an error
//     wrapping the context's error and writes nothing.
//   - The per-offer history (journal.OfferHistory) is optional: its tests
//     skip a journal that does not implement it. An outcome with an unknown
//     kind, an empty OfferKey, a zero At or a negative Elapsed fails its
//     Step, which writes nothing; an offer's Updated is the latest At of
//     its outcomes, whatever the order they were committed in; the
//     percentiles are within a factor √journal.ReadyBucketRatio of the
//     nearest-rank ones.
//   - Pruning (journal.Pruner) is optional: the Prune tests skip a journal
//     that does not implement it. A VM ending exactly at Before, or with a
//     zero EndedAt, is kept; a block whose Until is zero is expired.
//   - Volumes (journal.Volumes) are optional: their tests skip a journal
//     that does not implement it. A volume update is conditional on the
//     stored ID as well as the Version (an update of a replaced
//     incarnation is ErrConflict); a refused volume write leaves the
//     Step's Versions untouched; a volume whose VM names a VM that Prune
//     removes keeps its row; a deleted volume with a zero EndedAt, or one
//     ending exactly at Before, is kept.
//   - Members (journal.Members) is optional too. Beat answers an entry for
//     every account it is given, an account listed twice counting once; a
//     caller whose own row is not live (its expiry not after its now) does
//     not count itself; Leave of a member with no row returns nil.
package journaltest

import (
	"sync"
	"testing"

	"github.com/org/gpuprov/journal"
)

// Opener opens the journals the kit tests.
type Opener struct {
	// Open returns a new, empty journal, a store of its own. It fails t if
	// it cannot. Required.
	Open func(t *testing.T) journal.Journal
	// Reopen, if not nil, returns another handle on the store j was opened
	// on, as another process would open it. The kit calls it while j is
	// open (and uses both handles at once) and after closing j.
	Reopen func(t *testing.T, j journal.Journal) journal.Journal
}

// Run runs the conformance tests that need no second handle, each as a
// subtest, on journals from open. The kit closes every journal it is given
// when the subtest ends.
func Run(t *testing.T, open func(t *testing.T) journal.Journal) {
	RunOpener(t, Opener{Open: open})
}

// RunOpener runs every conformance test, each as a subtest; the ones that
// need Reopen are skipped when it is nil. The kit closes every journal it
// is given when the subtest ends.
func RunOpener(t *testing.T, o Opener) {
	if o.Open == nil {
		t.Fatal("journaltest: Opener.Open is nil")
	}
	tests := []struct {
		name   string
		reopen bool
		run    func(*testing.T, *harness)
	}{
		{"CreateGet", false, testCreateGet},
		{"CreateExists", false, testCreateExists},
		{"CreateReplacesTerminal", false, testCreateReplacesTerminal},
		{"ListVMs", false, testListVMs},
		{"Update", false, testUpdate},
		{"UpdateFailures", false, testUpdateFailures},
		{"StepAtomicity", false, testStepAtomicity},
		{"EmptyStep", false, testEmptyStep},
		{"Attempts", false, testAttempts},
		{"Events", false, testEvents},
		{"Blocks", false, testBlocks},
		{"Acquire", false, testAcquire},
		{"AcquireThenUpdate", false, testAcquireThenUpdate},
		{"Renew", false, testRenew},
		{"Release", false, testRelease},
		{"ReleaseLeaseWithUpdate", false, testReleaseLeaseWithUpdate},
		{"RoundTrip", false, testRoundTrip},
		{"InvalidJSON", false, testInvalidJSON},
		{"CanceledContext", false, testCanceledContext},
		{"Installation", false, testInstallation},
		{"ConcurrentAcquire", false, testConcurrentAcquire},
		{"ConcurrentUpdates", false, testConcurrentUpdates},
		{"ConcurrentEvents", false, testConcurrentEvents},
		{"Prune", false, testPrune},
		{"PruneBatches", false, testPruneBatches},
		{"PruneEmpty", false, testPruneEmpty},
		{"PruneCanceled", false, testPruneCanceled},
		{"PruneBesideWrites", false, testPruneBesideWrites},
		{"Members", false, testMembers},
		{"OfferHistory", false, testOfferHistory},
		{"OfferHistoryRefusals", false, testOfferHistoryRefusals},
		{"OfferHistoryConcurrent", false, testOfferHistoryConcurrent},
		{"OfferHistoryPrune", false, testOfferHistoryPrune},
		{"OfferHistoryKillable", false, testOfferHistoryKillable},
		{"OfferHistoryReopen", true, testOfferHistoryReopen},
		{"VolumeCreateGet", false, testVolumeCreateGet},
		{"VolumeCreateExists", false, testVolumeCreateExists},
		{"VolumeUpdate", false, testVolumeUpdate},
		{"VolumeAttachOnce", false, testVolumeAttachOnce},
		{"VolumeStepAtomicity", false, testVolumeStepAtomicity},
		{"VolumeList", false, testVolumeList},
		{"VolumeConcurrentAttach", false, testVolumeConcurrentAttach},
		{"VolumePrune", false, testVolumePrune},
		{"Reopen", true, testReopen},
		{"TwoHandles", true, testTwoHandles},
		{"MembersTwoHandles", true, testMembersTwoHandles},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.reopen && o.Reopen == nil {
				t.Skip("Opener.Reopen is nil")
			}
			tc.run(t, &harness{t: t, o: o, open: map[journal.Journal]bool{}})
		})
	}
}

// harness opens journals for one subtest and closes them at its end.
type harness struct {
	t    *testing.T
	o    Opener
	mu   sync.Mutex
	open map[journal.Journal]bool
}

// journal opens a new, empty journal.
func (h *harness) journal() journal.Journal {
	h.t.Helper()
	return h.track(h.o.Open(h.t))
}

// reopen opens another handle on j's store.
func (h *harness) reopen(j journal.Journal) journal.Journal {
	h.t.Helper()
	return h.track(h.o.Reopen(h.t, j))
}

func (h *harness) track(j journal.Journal) journal.Journal {
	h.t.Helper()
	if j == nil {
		h.t.Fatal("journaltest: the Opener returned a nil journal")
	}
	h.mu.Lock()
	h.open[j] = true
	h.mu.Unlock()
	h.t.Cleanup(func() { h.close(j) })
	return j
}

// close closes j unless it was closed already, and fails the test on error.
func (h *harness) close(j journal.Journal) {
	h.mu.Lock()
	open := h.open[j]
	h.open[j] = false
	h.mu.Unlock()
	if open {
		if err := j.Close(); err != nil {
			h.t.Errorf("Close: %v", err)
		}
	}
}
