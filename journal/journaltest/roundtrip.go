package journaltest

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/org/gpuprov/journal"
)

// testRoundTrip: records read back exactly as written, normalized: JSON
// byte for byte, empty JSON and lists as nil, times to the nanosecond in
// UTC, zero times zero.
func testRoundTrip(t *testing.T, h *harness) {
	j := h.journal()
	zone := time.FixedZone("UTC+5:30", 5*3600+1800)
	odd := json.RawMessage("{ \"b\" : 1,\n  \"a\": [1, 2.50, \"\u00e9\\u00e9\"], \"z\":null }")
	for _, tc := range []struct {
		name string
		set  func(v *journal.VM, a *journal.Attempt)
	}{
		{"as written", func(*journal.VM, *journal.Attempt) {}},
		{"JSON kept byte for byte", func(v *journal.VM, a *journal.Attempt) {
			v.Request, v.Offer, a.Offer, a.Prepared = odd, json.RawMessage(`null`), json.RawMessage(` "s" `), json.RawMessage(`[]`)
			a.Acceptance = odd
		}},
		{"nil JSON", func(v *journal.VM, a *journal.Attempt) {
			v.Request, v.Offer, a.Offer, a.Prepared, a.Acceptance = nil, nil, nil, nil, nil
		}},
		{"empty JSON reads back nil", func(v *journal.VM, a *journal.Attempt) {
			v.Request, v.Offer, a.Offer, a.Prepared = json.RawMessage{}, json.RawMessage{}, json.RawMessage{}, json.RawMessage{}
			a.Acceptance = json.RawMessage{}
		}},
		{"zero times", func(v *journal.VM, a *journal.Attempt) {
			v.Deadline, v.CreatedAt, v.UpdatedAt, v.ReadyAt, v.EndedAt, v.LeaseExpiry = time.Time{}, time.Time{}, time.Time{}, time.Time{}, time.Time{}, time.Time{}
			v.NextTry, v.ExpiresAt = time.Time{}, time.Time{}
			a.CreateSent, a.StartedAt, a.EndedAt = time.Time{}, time.Time{}, time.Time{}
		}},
		{"times in another zone", func(v *journal.VM, a *journal.Attempt) {
			v.Deadline, v.ReadyAt, v.LeaseExpiry = at(time.Nanosecond).In(zone), at(time.Hour+1).In(zone), at(3).In(zone)
			v.NextTry, v.ExpiresAt = at(11).In(zone), at(8*time.Hour+13).In(zone)
			a.CreateSent, a.StartedAt, a.EndedAt = at(7).In(zone), at(5).In(zone), at(-1).In(zone)
		}},
		{"times with a monotonic reading", func(v *journal.VM, a *journal.Attempt) {
			now := time.Now()
			v.CreatedAt, v.LeaseExpiry, a.StartedAt, a.CreateSent = now, now.Add(time.Minute), now, now.Add(1)
		}},
		{"far times", func(v *journal.VM, a *journal.Attempt) {
			v.Deadline = time.Date(2261, 12, 31, 23, 59, 59, 999999999, time.UTC)
			v.CreatedAt = time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC) // unix 0 is not the zero time
			a.StartedAt = time.Date(1900, 1, 1, 0, 0, 0, 1, time.UTC)
			a.CreateSent = time.Date(1677, 9, 22, 0, 0, 0, 0, time.UTC)
		}},
		{"empty and nil lists", func(v *journal.VM, a *journal.Attempt) { a.InstanceIDs = []string{} }},
		{"lists and odd strings", func(v *journal.VM, a *journal.Attempt) {
			a.InstanceIDs = []string{"i-1", "i,2", `i"3`, "ü"}
			v.LastError = "line 1\nline 2\t'quoted' \"double\" \\ é 😀"
			v.PricePerHour, v.SSHPort, v.Attempt = 0.1+0.2, 65535, 1<<30
			a.CleanedUp, a.Host = true, "host/rack 7, \"ü\"\n"
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, a := newVM("vm-a"), newAttempt("vm-a", 1)
			v.Owner = "o1"
			tc.set(&v, &a)
			ev := newEvent("vm-a", "e")
			ev.Time = a.StartedAt
			b := newBlock("k-"+tc.name, at(time.Hour))
			b.CreatedAt = a.CreateSent
			// Commit through a fresh Step each time, and the VM through
			// Update too, so both write paths are covered.
			s := &journal.Step{Create: &v, Attempts: []journal.Attempt{a}, Events: []journal.Event{ev}, Blocks: []journal.Block{b}}
			commit(t, j, s)
			ev = s.Events[0]
			got := getVM(t, j, "vm-a")
			equal(t, "VM", got, v)
			checkUTC(t, got)
			if as, err := j.Attempts(ctx, "vm-a"); err != nil || len(as) != 1 {
				t.Fatalf("Attempts: %d, %v", len(as), err)
			} else {
				equal(t, "Attempt", as[0], a)
				checkUTC(t, as[0])
			}

			stored := got
			stored.Phase, stored.LeaseExpiry = "update", time.Time{}
			tc.set(&stored, &a)
			commit(t, j, &journal.Step{Update: &stored})
			want := stored
			want.LeaseExpiry = got.LeaseExpiry
			equal(t, "VM after Update", getVM(t, j, "vm-a"), want)

			es, err := j.Events(ctx, journal.EventQuery{After: ev.Seq - 1, Limit: 1})
			if err != nil || len(es) != 1 {
				t.Fatalf("Events: %d, %v", len(es), err)
			}
			equal(t, "Event", es[0], ev)
			checkUTC(t, es[0])

			// Make room for the next case: vm-a becomes replaceable.
			stored.State = journal.StateDeleted
			commit(t, j, &journal.Step{Update: &stored})
		})
	}
	bs, err := j.Blocks(ctx, t0)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bs {
		checkUTC(t, b)
	}
}

// checkUTC fails the test if a non-zero time of rec is not in UTC.
func checkUTC(t *testing.T, rec any) {
	t.Helper()
	var times []time.Time
	switch r := rec.(type) {
	case journal.VM:
		times = []time.Time{r.Deadline, r.LeaseExpiry, r.CreatedAt, r.UpdatedAt, r.ReadyAt, r.EndedAt}
	case journal.Attempt:
		times = []time.Time{r.CreateSent, r.StartedAt, r.EndedAt}
	case journal.Event:
		times = []time.Time{r.Time}
	case journal.Block:
		times = []time.Time{r.Until, r.CreatedAt}
	}
	for _, tm := range times {
		if !tm.IsZero() && tm.Location() != time.UTC {
			t.Errorf("%T has a time in %v, want UTC", rec, tm.Location())
		}
	}
}

// testInvalidJSON: a Step with a non-empty JSON field that is not JSON
// fails and writes nothing.
func testInvalidJSON(t *testing.T, h *harness) {
	j := h.journal()
	for _, tc := range []struct {
		name string
		set  func(v *journal.VM, a *journal.Attempt)
	}{
		{"VM.Request", func(v *journal.VM, a *journal.Attempt) { v.Request = json.RawMessage(`{"a":`) }},
		{"VM.Offer", func(v *journal.VM, a *journal.Attempt) { v.Offer = json.RawMessage(`nope`) }},
		{"Attempt.Offer", func(v *journal.VM, a *journal.Attempt) { a.Offer = json.RawMessage(`{} {}`) }},
		{"Attempt.Prepared", func(v *journal.VM, a *journal.Attempt) { a.Prepared = json.RawMessage(` `) }},
		{"Attempt.Acceptance", func(v *journal.VM, a *journal.Attempt) { a.Acceptance = json.RawMessage(`{"ok":tru`) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, a := newVM("vm-"+tc.name), newAttempt("vm-"+tc.name, 1)
			tc.set(&v, &a)
			if err := j.Commit(ctx, &journal.Step{Create: &v, Attempts: []journal.Attempt{a}}); err == nil {
				t.Fatal("Commit of invalid JSON succeeded")
			}
			if _, err := j.GetVM(ctx, v.Name); !errors.Is(err, journal.ErrNotFound) {
				t.Errorf("GetVM after the failed Step: %v, want ErrNotFound", err)
			}
		})
	}
}

// testCanceledContext: Commit and Acquire on a cancelled context fail with
// the context's error and write nothing.
func testCanceledContext(t *testing.T, h *harness) {
	j := h.journal()
	v := create(t, j, newVM("vm-a"))
	before := snap(t, j, "vm-a")
	cctx, cancel := context.WithCancel(ctx)
	cancel()

	u := v
	u.Phase = "boot"
	err := j.Commit(cctx, &journal.Step{Update: &u, Events: []journal.Event{newEvent("vm-a", "e")}, Attempts: []journal.Attempt{newAttempt("vm-a", 1)}})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Commit on a cancelled context: err = %v, want context.Canceled", err)
	}
	if _, err := j.Acquire(cctx, "vm-a", "o1", t0, at(time.Minute)); !errors.Is(err, context.Canceled) {
		t.Errorf("Acquire on a cancelled context: err = %v, want context.Canceled", err)
	}
	equal(t, "journal after cancelled calls", snap(t, j, "vm-a"), before)
}

// testInstallation: Installation is non-empty, stable, and differs between
// two journals.
func testInstallation(t *testing.T, h *harness) {
	j1, j2 := h.journal(), h.journal()
	id := j1.Installation()
	if id == "" {
		t.Fatal("Installation is empty")
	}
	create(t, j1, newVM("vm-a"))
	if again := j1.Installation(); again != id {
		t.Errorf("Installation changed from %q to %q", id, again)
	}
	if other := j2.Installation(); other == id {
		t.Errorf("two new journals share the installation id %q", id)
	}
}

// testReopen: a store reopened after Close holds everything written, its
// Installation is unchanged, and Seq keeps increasing.
func testReopen(t *testing.T, h *harness) {
	j := h.journal()
	id := j.Installation()
	v := newVM("vm-a")
	v.Owner, v.LeaseExpiry = "o1", at(time.Minute)
	s := &journal.Step{
		Create:   &v,
		Attempts: []journal.Attempt{newAttempt("vm-a", 1)},
		Events:   []journal.Event{newEvent("vm-a", "e1")},
		Blocks:   []journal.Block{newBlock("k1", at(time.Hour))},
	}
	commit(t, j, s)
	before := snap(t, j, "vm-a")
	h.close(j)

	r := h.reopen(j)
	if got := r.Installation(); got != id {
		t.Errorf("Installation after reopen = %q, want %q", got, id)
	}
	equal(t, "journal after reopen", snap(t, r, "vm-a"), before)
	s2 := &journal.Step{Events: []journal.Event{newEvent("vm-a", "e2")}}
	commit(t, r, s2)
	if s2.Events[0].Seq <= s.Events[0].Seq {
		t.Errorf("Seq after reopen = %d, want more than %d", s2.Events[0].Seq, s.Events[0].Seq)
	}
}
