package journaltest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/org/gpuprov/journal"
)

// The kit's pruning world: t0 is now, and VMs that ended more than a day
// before it are old enough to go.
var (
	pruneBefore = at(-24 * time.Hour)
	longAgo     = at(-48 * time.Hour)
)

// pruner returns j as a journal.Pruner, or skips the test for a backend
// that does not implement it (pruning is optional).
func pruner(t *testing.T, j journal.Journal) journal.Pruner {
	t.Helper()
	p, ok := j.(journal.Pruner)
	if !ok {
		t.Skipf("%T does not implement journal.Pruner", j)
	}
	return p
}

// ended returns a VM named name in state that ended at end.
func ended(name string, state journal.VMState, end time.Time) journal.VM {
	v := newVM(name)
	v.State, v.Phase, v.EndedAt = state, "", end
	return v
}

// seed commits v with two attempts and three events, as a launch leaves
// them, in one Step.
func seed(t *testing.T, j journal.Journal, v journal.VM) {
	t.Helper()
	commit(t, j, &journal.Step{
		Create:   &v,
		Attempts: []journal.Attempt{newAttempt(v.Name, 1), newAttempt(v.Name, 2)},
		Events:   []journal.Event{newEvent(v.Name, "launch"), newEvent(v.Name, "attempt"), newEvent(v.Name, "end")},
	})
}

// record is everything a journal holds of one VM.
type record struct {
	VM       journal.VM
	Attempts []journal.Attempt
	Events   []journal.Event
}

// recordOf reads what j holds of the VM named name; VM is zero when j has
// no such VM.
func recordOf(t *testing.T, j journal.Journal, name string) record {
	t.Helper()
	var r record
	v, err := j.GetVM(ctx, name)
	switch {
	case err == nil:
		r.VM = v
	case !errors.Is(err, journal.ErrNotFound):
		t.Fatalf("GetVM(%s): %v", name, err)
	}
	if r.Attempts, err = j.Attempts(ctx, name); err != nil {
		t.Fatalf("Attempts(%s): %v", name, err)
	}
	if r.Events, err = j.Events(ctx, journal.EventQuery{VM: name}); err != nil {
		t.Fatalf("Events(%s): %v", name, err)
	}
	return r
}

// gone fails the test unless j holds nothing of the VM named name.
func gone(t *testing.T, j journal.Journal, name string) {
	t.Helper()
	if r := recordOf(t, j, name); r.VM.Name != "" || len(r.Attempts) > 0 || len(r.Events) > 0 {
		t.Errorf("after Prune the journal still holds of %s: VM %q (%s), %d attempts, %d events; want nothing",
			name, r.VM.Name, r.VM.State, len(r.Attempts), len(r.Events))
	}
}

// testPrune: Prune removes the VMs that ended before Before, with their
// attempts and events, and the blocks that ended by Now; it keeps every
// other VM intact, whatever its state, end or lease, and the live blocks.
// Seqs are not reused, a pruned name can be created again, and a second
// Prune finds nothing to do.
func testPrune(t *testing.T, h *harness) {
	j := h.journal()
	p := pruner(t, j)

	c := clockOf(j)
	// withLease gives v a lease ending d after Now (on a journal with a
	// LeaseClock, after its own now: see leaseClock).
	withLease := func(v journal.VM, owner string, d time.Duration) journal.VM {
		c.lease(&v, owner, d)
		return v
	}
	removed := []journal.VM{
		ended("old-deleted", journal.StateDeleted, longAgo),
		ended("old-failed", journal.StateFailed, longAgo),
		ended("just-before", journal.StateDeleted, pruneBefore.Add(-time.Nanosecond)),
		// A lease that has expired at Now is held by no one.
		withLease(ended("lease-expired", journal.StateDeleted, longAgo), "gone-owner", -time.Minute),
		withLease(ended("lease-ends-now", journal.StateFailed, longAgo), "gone-owner", 0),
	}
	kept := []journal.VM{
		ended("recent-deleted", journal.StateDeleted, at(-time.Hour)),
		ended("ended-at-before", journal.StateDeleted, pruneBefore),
		ended("no-end-time", journal.StateDeleted, time.Time{}),
		withLease(ended("leased", journal.StateDeleted, longAgo), "o1", c.live(time.Nanosecond)),
	}
	// Active and ready VMs stay whatever their EndedAt says.
	for _, s := range []journal.VMState{journal.StatePending, journal.StateProvisioning, journal.StateWaiting,
		journal.StateReady, journal.StateDeleting} {
		kept = append(kept, ended("old-"+string(s), s, longAgo))
	}
	// Interleave them, so the events of kept and removed VMs alternate.
	for i := range max(len(removed), len(kept)) {
		if i < len(removed) {
			seed(t, j, removed[i])
		}
		if i < len(kept) {
			seed(t, j, kept[i])
		}
	}
	// Events of a VM the journal does not hold are not Prune's.
	commit(t, j, &journal.Step{Events: []journal.Event{newEvent("no-such-vm", "orphan")}})
	zero := newBlock("zero-until", time.Time{})
	live := newBlock("live", at(time.Nanosecond))
	commit(t, j, &journal.Step{Blocks: []journal.Block{
		newBlock("expired", at(-time.Hour)), newBlock("ends-now", t0), zero, live,
	}})

	before := map[string]record{}
	for _, v := range kept {
		before[v.Name] = recordOf(t, j, v.Name)
	}
	orphans := recordOf(t, j, "no-such-vm").Events
	all, err := j.Events(ctx, journal.EventQuery{})
	if err != nil {
		t.Fatal(err)
	}
	lastSeq := all[len(all)-1].Seq

	res, err := p.Prune(ctx, journal.PruneOptions{Before: pruneBefore, Now: t0})
	if err != nil {
		t.Fatalf("Prune: %v", err)
	}
	want := journal.PruneResult{VMs: len(removed), Attempts: 2 * len(removed), Events: 3 * len(removed), Blocks: 3}
	if res != want {
		t.Errorf("Prune = %+v, want %+v", res, want)
	}
	for _, v := range removed {
		gone(t, j, v.Name)
	}
	for _, v := range kept {
		equal(t, "what the journal holds of "+v.Name+" after Prune", recordOf(t, j, v.Name), before[v.Name])
	}
	equal(t, "events of a VM the journal does not hold, after Prune", recordOf(t, j, "no-such-vm").Events, orphans)
	bs, err := j.Blocks(ctx, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "blocks after Prune", bs, []journal.Block{live})

	// Seqs are never reused: a reader following the log misses nothing.
	s := &journal.Step{Events: []journal.Event{newEvent("recent-deleted", "after-prune")}}
	commit(t, j, s)
	if s.Events[0].Seq <= lastSeq {
		t.Errorf("an event committed after Prune got Seq %d, want it after the last one before Prune (%d)", s.Events[0].Seq, lastSeq)
	}
	// A pruned name is free.
	again := create(t, j, newVM("old-deleted"))
	if again.State != journal.StatePending {
		t.Errorf("VM created under a pruned name is %s, want pending", again.State)
	}

	res, err = p.Prune(ctx, journal.PruneOptions{Before: pruneBefore, Now: t0})
	if err != nil || res != (journal.PruneResult{}) {
		t.Errorf("second Prune = %+v, %v; want nothing removed, nil", res, err)
	}
}

// testPruneBatches: whatever the batch size, Prune goes on batch after
// batch until everything that should go is gone (blocks too).
func testPruneBatches(t *testing.T, h *harness) {
	const vms, blocks = 10, 7
	for _, batch := range []int{3, 1, 5, 10, 11, 0, -1} {
		t.Run(fmt.Sprint("Batch=", batch), func(t *testing.T) {
			j := h.journal()
			p := pruner(t, j)
			for i := range vms {
				seed(t, j, ended(fmt.Sprintf("vm-%02d", i), journal.StateDeleted, longAgo))
			}
			seed(t, j, ended("vm-ready", journal.StateReady, time.Time{}))
			var bs []journal.Block
			for i := range blocks {
				bs = append(bs, newBlock(fmt.Sprintf("k%d", i), at(-time.Duration(i+1)*time.Minute)))
			}
			commit(t, j, &journal.Step{Blocks: bs})
			keep := recordOf(t, j, "vm-ready")

			res, err := p.Prune(ctx, journal.PruneOptions{Before: pruneBefore, Now: t0, Batch: batch})
			if err != nil {
				t.Fatalf("Prune: %v", err)
			}
			if want := (journal.PruneResult{VMs: vms, Attempts: 2 * vms, Events: 3 * vms, Blocks: blocks}); res != want {
				t.Errorf("Prune with Batch %d = %+v, want %+v", batch, res, want)
			}
			for i := range vms {
				gone(t, j, fmt.Sprintf("vm-%02d", i))
			}
			equal(t, "the ready VM after Prune", recordOf(t, j, "vm-ready"), keep)
			if left, err := j.Blocks(ctx, time.Time{}); err != nil || len(left) != 0 {
				t.Errorf("blocks after Prune: %v, %v; want none", left, err)
			}
		})
	}
}

// testPruneEmpty: Prune of an empty journal, and Prune with zero options
// of a full one, remove nothing and succeed.
func testPruneEmpty(t *testing.T, h *harness) {
	j := h.journal()
	p := pruner(t, j)
	if res, err := p.Prune(ctx, journal.PruneOptions{Before: pruneBefore, Now: t0}); err != nil || res != (journal.PruneResult{}) {
		t.Errorf("Prune of an empty journal = %+v, %v; want nothing, nil", res, err)
	}
	seed(t, j, ended("old-deleted", journal.StateDeleted, longAgo))
	commit(t, j, &journal.Step{Blocks: []journal.Block{newBlock("expired", at(-time.Hour)), newBlock("zero", time.Time{})}})
	before := snap(t, j, "old-deleted")
	if res, err := p.Prune(ctx, journal.PruneOptions{}); err != nil || res != (journal.PruneResult{}) {
		t.Errorf("Prune with zero options = %+v, %v; want nothing removed (zero Before and Now), nil", res, err)
	}
	equal(t, "journal after Prune with zero options", snap(t, j, "old-deleted"), before)
}

// testPruneCanceled: Prune on a cancelled context removes nothing; a
// context cancelled while Prune works stops it between batches, and what
// it reports is exactly what it removed, each VM wholly or not at all.
func testPruneCanceled(t *testing.T, h *harness) {
	t.Run("before", func(t *testing.T) {
		j := h.journal()
		p := pruner(t, j)
		seed(t, j, ended("old-deleted", journal.StateDeleted, longAgo))
		commit(t, j, &journal.Step{Blocks: []journal.Block{newBlock("expired", at(-time.Hour))}})
		before := snap(t, j, "old-deleted")
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		res, err := p.Prune(cctx, journal.PruneOptions{Before: pruneBefore, Now: t0})
		if !errors.Is(err, context.Canceled) || res != (journal.PruneResult{}) {
			t.Errorf("Prune on a cancelled context = %+v, %v; want nothing, an error wrapping context.Canceled", res, err)
		}
		equal(t, "journal after a cancelled Prune", snap(t, j, "old-deleted"), before)
	})

	t.Run("during", func(t *testing.T) {
		const vms = 200
		j := h.journal()
		p := pruner(t, j)
		name := func(i int) string { return fmt.Sprintf("vm-%03d", i) }
		seedConcurrently(t, j, vms, func(i int) journal.VM { return ended(name(i), journal.StateDeleted, longAgo) })

		// Cancel as soon as the first batch shows.
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		var (
			wg       sync.WaitGroup
			watchErr error
		)
		wg.Go(func() {
			defer cancel()
			for cctx.Err() == nil {
				left, err := j.ListVMs(ctx, journal.ListOptions{States: []journal.VMState{journal.StateDeleted}})
				if err != nil {
					watchErr = err
					return
				}
				if len(left) < vms {
					return
				}
			}
		})
		res, err := p.Prune(cctx, journal.PruneOptions{Before: pruneBefore, Now: t0, Batch: 1})
		cancel()
		wg.Wait()
		if watchErr != nil {
			t.Fatal(watchErr)
		}
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Fatalf("Prune cancelled while it works: %v, want an error wrapping context.Canceled", err)
		}
		left := 0
		for i := range vms {
			r := recordOf(t, j, name(i))
			switch {
			case r.VM.Name == "" && len(r.Attempts) == 0 && len(r.Events) == 0:
			case r.VM.Name != "" && len(r.Attempts) == 2 && len(r.Events) == 3:
				left++
			default:
				t.Errorf("after a cancelled Prune %s is half there: VM %q, %d attempts, %d events", name(i), r.VM.Name, len(r.Attempts), len(r.Events))
			}
		}
		if n := vms - left; res != (journal.PruneResult{VMs: n, Attempts: 2 * n, Events: 3 * n}) {
			t.Errorf("cancelled Prune reports %+v; it removed %d VMs (%d attempts, %d events)", res, n, 2*n, 3*n)
		}
		if err == nil && left > 0 {
			t.Errorf("Prune returned nil with %d prunable VMs left", left)
		}
		t.Logf("cancelled after removing %d of %d VMs (err %v)", vms-left, vms, err)
	})
}

// seedConcurrently seeds n VMs made by mk from several goroutines, so the
// backend can group the commits.
func seedConcurrently(t *testing.T, j journal.Journal, n int, mk func(i int) journal.VM) {
	t.Helper()
	const workers = 8
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				v := mk(i)
				err := j.Commit(ctx, &journal.Step{
					Create:   &v,
					Attempts: []journal.Attempt{newAttempt(v.Name, 1), newAttempt(v.Name, 2)},
					Events:   []journal.Event{newEvent(v.Name, "launch"), newEvent(v.Name, "attempt"), newEvent(v.Name, "end")},
				})
				if err != nil {
					errs[w] = err
					return
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("seeding %d VMs: %v", n, err)
	}
}

// testPruneBesideWrites: Prune in small batches while other goroutines
// create VMs under the names being pruned (replacing the ended VMs), drive
// new VMs through their steps and follow the event log. No write fails, a
// VM created meanwhile keeps everything it wrote, the reader sees Seqs
// increase, and what was prunable and not re-created is gone after a last
// Prune.
func testPruneBesideWrites(t *testing.T, h *harness) {
	const (
		old      = 60 // ended VMs old-00..old-59
		recreate = 30 // old-00..old-29 are created again while Prune runs
		writers  = 3
		steps    = 8
	)
	j := h.journal()
	p := pruner(t, j)
	oldName := func(i int) string { return fmt.Sprintf("old-%02d", i) }
	seedConcurrently(t, j, old, func(i int) journal.VM { return ended(oldName(i), journal.StateDeleted, longAgo) })

	var (
		writersWG, prunerWG sync.WaitGroup
		mu                  sync.Mutex
		errs                []error
		fail                = func(err error) { mu.Lock(); errs = append(errs, err); mu.Unlock() }
		done                = make(chan struct{}) // closed when the writers are done
		start               = make(chan struct{})
		newEvent            = func(vm, typ string) journal.Event { e := newEvent(vm, typ); e.Message = "new " + typ; return e }
		pruned              journal.PruneResult
	)
	// Prune, in batches of two, until the writers are done.
	prunerWG.Go(func() {
		<-start
		for {
			res, err := p.Prune(ctx, journal.PruneOptions{Before: pruneBefore, Now: t0, Batch: 2})
			if err != nil {
				fail(fmt.Errorf("calling Prune: %w", err))
				return
			}
			pruned.VMs += res.VMs
			select {
			case <-done:
				return
			default:
			}
		}
	})
	// Re-create half of the old names, each with an attempt and an event.
	writersWG.Go(func() {
		<-start
		for i := range recreate {
			v := newVM(oldName(i))
			v.ID, v.Owner, v.LeaseExpiry = "id-new-"+v.Name, "o-new", at(time.Hour)
			a := newAttempt(v.Name, 1)
			a.Token = "tok-new-" + v.Name
			if err := j.Commit(ctx, &journal.Step{Create: &v, Attempts: []journal.Attempt{a}, Events: []journal.Event{newEvent(v.Name, "created")}}); err != nil {
				fail(fmt.Errorf("create %s again: %w", v.Name, err))
			}
		}
	})
	// Drive new VMs through their steps.
	for w := range writers {
		writersWG.Go(func() {
			<-start
			v := newVM(fmt.Sprintf("live-%d", w))
			v.Owner, v.LeaseExpiry = "o-live", at(time.Hour)
			if err := j.Commit(ctx, &journal.Step{Create: &v, Events: []journal.Event{newEvent(v.Name, "created")}}); err != nil {
				fail(err)
				return
			}
			for k := range steps {
				v.Phase = fmt.Sprint("step-", k)
				a := newAttempt(v.Name, k+1)
				if err := j.Commit(ctx, &journal.Step{Update: &v, Attempts: []journal.Attempt{a}, Events: []journal.Event{newEvent(v.Name, v.Phase)}}); err != nil {
					fail(fmt.Errorf("step %d of %s: %w", k, v.Name, err))
					return
				}
			}
		})
	}
	// Follow the log: Seqs only increase, whatever Prune removes.
	var follower sync.WaitGroup
	follower.Go(func() {
		var after int64
		for {
			finished := false
			select {
			case <-done:
				finished = true
			default:
			}
			es, err := j.Events(ctx, journal.EventQuery{After: after})
			if err != nil {
				fail(err)
				return
			}
			for _, e := range es {
				if e.Seq <= after {
					fail(fmt.Errorf("the follower read Seq %d after %d", e.Seq, after))
					return
				}
				after = e.Seq
			}
			if finished {
				return
			}
		}
	})
	close(start)
	writersWG.Wait()
	close(done)
	prunerWG.Wait()
	follower.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}

	// What was written beside the Prune is whole.
	for i := range recreate {
		r := recordOf(t, j, oldName(i))
		if r.VM.ID != "id-new-"+oldName(i) || r.VM.State != journal.StatePending {
			t.Errorf("%s created again beside Prune: VM %+v, want the new pending one", oldName(i), r.VM)
			continue
		}
		if len(r.Attempts) != 1 || r.Attempts[0].Token != "tok-new-"+oldName(i) {
			t.Errorf("%s created again beside Prune has attempts %+v, want only its new one", oldName(i), r.Attempts)
		}
		if n := countMessage(r.Events, "new created"); n != 1 {
			t.Errorf("%s created again beside Prune has %d of its new event, want 1", oldName(i), n)
		}
	}
	for w := range writers {
		r := recordOf(t, j, fmt.Sprintf("live-%d", w))
		if len(r.Attempts) != steps || len(r.Events) != steps+1 || r.VM.Phase != fmt.Sprint("step-", steps-1) {
			t.Errorf("live-%d driven beside Prune: phase %q, %d attempts, %d events; want step-%d, %d, %d",
				w, r.VM.Phase, len(r.Attempts), len(r.Events), steps-1, steps, steps+1)
		}
	}
	// A last Prune takes whatever the busy ones left.
	res, err := p.Prune(ctx, journal.PruneOptions{Before: pruneBefore, Now: t0, Batch: 2})
	if err != nil {
		t.Fatal(err)
	}
	for i := recreate; i < old; i++ {
		gone(t, j, oldName(i))
	}
	if total := pruned.VMs + res.VMs; total < old-recreate || total > old {
		t.Errorf("the Prunes removed %d VMs in all; want between %d and %d", total, old-recreate, old)
	}
}

// countMessage counts the events with message msg.
func countMessage(es []journal.Event, msg string) int {
	n := 0
	for _, e := range es {
		if e.Message == msg {
			n++
		}
	}
	return n
}
