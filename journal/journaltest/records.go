package journaltest

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/org/gpuprov/journal"
)

// testStepAtomicity: a Step one part of which fails writes none of its
// parts, and sets nothing in the Step; the same Step without the fault
// commits all of them.
func testStepAtomicity(t *testing.T, h *harness) {
	for _, tc := range []struct {
		name  string
		fault func(s *journal.Step)
		want  error // nil: any error
	}{
		{"update conflict", func(s *journal.Step) { s.Update.Version-- }, journal.ErrConflict},
		{"update lease lost", func(s *journal.Step) { s.Update.Owner = "o2" }, journal.ErrLeaseLost},
		{"update of unknown VM", func(s *journal.Step) { s.Update.Name = "vm-nope" }, journal.ErrNotFound},
		{"create over a live VM", func(s *journal.Step) { v := newVM("vm-b"); s.Create = &v }, journal.ErrExists},
		{"attempt of unknown VM", func(s *journal.Step) {
			s.Attempts = append(s.Attempts, newAttempt("vm-nope", 1))
		}, journal.ErrNotFound},
		{"invalid JSON in an attempt", func(s *journal.Step) {
			s.Attempts[len(s.Attempts)-1].Prepared = json.RawMessage(`{"unterminated"`)
		}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := h.journal()
			a := newVM("vm-a")
			a.Owner, a.LeaseExpiry = "o1", at(time.Minute)
			stored := create(t, j, a)
			create(t, j, newVM("vm-b"))
			commit(t, j, &journal.Step{
				Attempts: []journal.Attempt{newAttempt("vm-a", 1)},
				Events:   []journal.Event{newEvent("vm-a", "first")},
				Blocks:   []journal.Block{newBlock("k1", at(time.Hour))},
			})
			before := snap(t, j, "vm-a", "vm-b", "vm-c")

			step := func() *journal.Step {
				u := stored
				u.Phase = "create"
				c := newVM("vm-c")
				a1 := newAttempt("vm-a", 1)
				a1.State = journal.AttemptTornDown
				k1 := newBlock("k1", at(2*time.Hour))
				k1.Reason = "later"
				return &journal.Step{
					Create:   &c,
					Update:   &u,
					Attempts: []journal.Attempt{a1, newAttempt("vm-a", 2), newAttempt("vm-c", 1)},
					Events:   []journal.Event{newEvent("vm-a", "second"), newEvent("vm-c", "created")},
					Blocks:   []journal.Block{k1, newBlock("k2", at(time.Hour))},
				}
			}
			s := step()
			tc.fault(s)
			given := *s
			givenUpdate := *s.Update
			err := j.Commit(ctx, s)
			if err == nil || (tc.want != nil && !errors.Is(err, tc.want)) {
				t.Fatalf("Commit of the faulty Step: err = %v, want %v", err, tc.want)
			}
			equal(t, "journal after the failed Step", snap(t, j, "vm-a", "vm-b", "vm-c"), before)
			equal(t, "Update after the failed Step", *s.Update, givenUpdate)
			if !reflect.DeepEqual(seqs(s.Events), []int64{0, 0}) || !reflect.DeepEqual(s.Events, given.Events) {
				t.Errorf("failed Step has Event Seqs %v, want them untouched (0)", seqs(s.Events))
			}

			// The same Step without its fault commits, every part of it.
			s = step()
			commit(t, j, s)
			after := snap(t, j, "vm-a", "vm-b", "vm-c")
			if len(after.VMs) != 3 || len(after.Attempts["vm-a"]) != 2 || len(after.Attempts["vm-c"]) != 1 ||
				len(after.Events) != 3 || len(after.Blocks) != 2 || after.Blocks[0].Reason != "later" {
				t.Errorf("Step without the fault: journal holds %d VMs, %d+%d attempts, %d events, %d blocks; want 3, 2+1, 3, 2",
					len(after.VMs), len(after.Attempts["vm-a"]), len(after.Attempts["vm-c"]), len(after.Events), len(after.Blocks))
			}
		})
	}
}

// testAttempts: attempts are upserted by (VM, N), wholly replaced, and read
// back per VM ordered by N.
func testAttempts(t *testing.T, h *harness) {
	j := h.journal()
	create(t, j, newVM("vm-a"))
	create(t, j, newVM("vm-b"))
	a1, a2, a3, b1 := newAttempt("vm-a", 1), newAttempt("vm-a", 2), newAttempt("vm-a", 3), newAttempt("vm-b", 1)
	commit(t, j, &journal.Step{Attempts: []journal.Attempt{a3, b1}})
	commit(t, j, &journal.Step{Attempts: []journal.Attempt{a1, a2}})
	got, err := j.Attempts(ctx, "vm-a")
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "Attempts(vm-a)", got, []journal.Attempt{a1, a2, a3})

	// Upsert replaces every field, clearing those now empty.
	a2.State, a2.Phase, a2.Token, a2.Prepared = journal.AttemptTornDown, "teardown", "", nil
	a2.InstanceIDs = []string{"i-1", "i-2"}
	a2.CleanedUp, a2.EndedAt, a2.Error, a2.ErrorKind = true, at(time.Hour), "", ""
	commit(t, j, &journal.Step{Attempts: []journal.Attempt{a2}})
	got, err = j.Attempts(ctx, "vm-a")
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "Attempts(vm-a) after an upsert", got, []journal.Attempt{a1, a2, a3})

	if got, err = j.Attempts(ctx, "vm-b"); err != nil {
		t.Fatal(err)
	}
	equal(t, "Attempts(vm-b)", got, []journal.Attempt{b1})
	if got, err = j.Attempts(ctx, "vm-nope"); err != nil || len(got) != 0 {
		t.Errorf("Attempts of an unknown VM = %v, %v; want none, nil", got, err)
	}
}

// testEvents: Seq is set on commit, increasing in commit order across VMs;
// Events filters by VM, After and Limit and returns Seq order.
func testEvents(t *testing.T, h *harness) {
	j := h.journal()
	s1 := &journal.Step{Events: []journal.Event{newEvent("vm-a", "e1"), newEvent("vm-b", "e2"), newEvent("vm-a", "e3")}}
	commit(t, j, s1)
	s2 := &journal.Step{Events: []journal.Event{newEvent("vm-b", "e4"), newEvent("vm-a", "e5")}}
	commit(t, j, s2)
	all := append(append([]journal.Event{}, s1.Events...), s2.Events...)
	for i, e := range all {
		if e.Seq <= 0 || (i > 0 && e.Seq <= all[i-1].Seq) {
			t.Fatalf("Seqs set by Commit: %v; want positive and increasing in commit order", seqs(all))
		}
	}
	got, err := j.Events(ctx, journal.EventQuery{})
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "Events()", got, all)

	pick := func(idx ...int) []journal.Event {
		out := []journal.Event{}
		for _, i := range idx {
			out = append(out, all[i])
		}
		return out
	}
	for _, tc := range []struct {
		name string
		q    journal.EventQuery
		want []journal.Event
	}{
		{"VM", journal.EventQuery{VM: "vm-a"}, pick(0, 2, 4)},
		{"After", journal.EventQuery{After: all[1].Seq}, pick(2, 3, 4)},
		{"Limit", journal.EventQuery{Limit: 2}, pick(0, 1)},
		{"VM After Limit", journal.EventQuery{VM: "vm-a", After: all[0].Seq, Limit: 1}, pick(2)},
		{"VM After", journal.EventQuery{VM: "vm-b", After: all[1].Seq}, pick(3)},
		{"After the last", journal.EventQuery{After: all[4].Seq}, nil},
		{"unknown VM", journal.EventQuery{VM: "vm-nope"}, nil},
		{"Limit above the count", journal.EventQuery{Limit: 100}, all},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := j.Events(ctx, tc.q)
			if err != nil {
				t.Fatal(err)
			}
			equal(t, "Events", got, tc.want)
		})
	}
}

// testBlocks: blocks are upserted by Key; a later (or equal) Until replaces
// the stored block, an earlier one does not; Blocks(now) returns the blocks
// whose Until is strictly after now.
func testBlocks(t *testing.T, h *harness) {
	j := h.journal()
	k1, k2 := newBlock("k1", at(time.Hour)), newBlock("k2", at(2*time.Hour))
	k2.Scope, k2.Provider, k2.ErrorKind, k2.Reason = "region", "other", "quota", "quota exceeded"
	commit(t, j, &journal.Step{Blocks: []journal.Block{k1, k2}})

	blocks := func(now time.Time) []journal.Block {
		t.Helper()
		bs, err := j.Blocks(ctx, now)
		if err != nil {
			t.Fatal(err)
		}
		sortBlocks(bs)
		return bs
	}
	for _, tc := range []struct {
		name string
		now  time.Time
		want []journal.Block
	}{
		{"both live", t0, []journal.Block{k1, k2}},
		{"zero now", time.Time{}, []journal.Block{k1, k2}},
		{"a nanosecond before k1 ends", at(time.Hour - 1), []journal.Block{k1, k2}},
		{"k1 ends now", at(time.Hour), []journal.Block{k2}},
		{"both ended", at(3 * time.Hour), nil},
	} {
		equal(t, "Blocks at "+tc.name, blocks(tc.now), tc.want)
	}

	later := k1
	later.Until, later.Reason, later.CreatedAt = at(3*time.Hour), "again", at(time.Minute)
	commit(t, j, &journal.Step{Blocks: []journal.Block{later}})
	equal(t, "Blocks after a later block of k1", blocks(t0), []journal.Block{later, k2})

	earlier := k1
	earlier.Until, earlier.Reason = at(30*time.Minute), "shorter"
	commit(t, j, &journal.Step{Blocks: []journal.Block{earlier}})
	equal(t, "Blocks after an earlier block of k1", blocks(t0), []journal.Block{later, k2})

	same := later
	same.Reason = "same until, new reason"
	commit(t, j, &journal.Step{Blocks: []journal.Block{same}})
	equal(t, "Blocks after a block of k1 with the same Until", blocks(t0), []journal.Block{same, k2})

	// A lift removes a block made before its Before, not one made since,
	// and not another key's; lifting a key with no block is no error.
	commit(t, j, &journal.Step{Lifts: []journal.Lift{{Key: "k1", Before: same.CreatedAt}}})
	equal(t, "Blocks after a lift of k1 before it was made", blocks(t0), []journal.Block{same, k2})
	commit(t, j, &journal.Step{Lifts: []journal.Lift{{Key: "k1", Before: at(2 * time.Minute)}, {Key: "none", Before: at(time.Hour)}}})
	equal(t, "Blocks after a lift of k1 after it was made", blocks(t0), []journal.Block{k2})
}
