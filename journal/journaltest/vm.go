package journaltest

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/org/gpuprov/journal"
)

// testCreateGet: Create stores every field as given (its lease fields too;
// on a journal with a LeaseClock, the lease as a length from its clock,
// written back into Create.LeaseExpiry) with Version 1, and GetVM reads it
// back; an unknown name is ErrNotFound.
func testCreateGet(t *testing.T, h *harness) {
	j := h.journal()
	c := clockOf(j)
	v := newVM("vm-a")
	v.Owner, v.LeaseExpiry = "host1/42/start", at(time.Minute)
	v.Version = 77 // Create sets it to 1 whatever it was
	s := &journal.Step{Create: &v}
	span := c.around(t, v.CreatedAt, func() { commit(t, j, s) })
	if v.Version != 1 {
		t.Errorf("after Commit, Create.Version = %d, want 1", v.Version)
	}
	span.check(t, "Create.LeaseExpiry after Commit", v.LeaseExpiry, at(time.Minute).Sub(v.CreatedAt))
	equal(t, "GetVM after Create", getVM(t, j, "vm-a"), v)

	if _, err := j.GetVM(ctx, "vm-nope"); !errors.Is(err, journal.ErrNotFound) {
		t.Errorf("GetVM of an unknown VM: err = %v, want ErrNotFound", err)
	}
	if _, err := j.GetVM(ctx, ""); !errors.Is(err, journal.ErrNotFound) {
		t.Errorf("GetVM of the empty name: err = %v, want ErrNotFound", err)
	}
}

// testCreateExists: Create of a name whose VM is not terminal fails with
// ErrExists, and the Step writes nothing.
func testCreateExists(t *testing.T, h *harness) {
	for _, state := range []journal.VMState{journal.StatePending, journal.StateProvisioning, journal.StateReady, journal.StateDeleting} {
		t.Run(string(state), func(t *testing.T) {
			j := h.journal()
			v := newVM("vm-a")
			v.State = state
			create(t, j, v)
			commit(t, j, &journal.Step{Attempts: []journal.Attempt{newAttempt("vm-a", 1)}})
			before := snap(t, j, "vm-a")

			again := newVM("vm-a")
			again.ID = "id-second"
			s := &journal.Step{
				Create:   &again,
				Attempts: []journal.Attempt{newAttempt("vm-a", 2)},
				Events:   []journal.Event{newEvent("vm-a", "created")},
				Blocks:   []journal.Block{newBlock("k", at(time.Hour))},
			}
			err := j.Commit(ctx, s)
			if !errors.Is(err, journal.ErrExists) {
				t.Fatalf("Create over a %s VM: err = %v, want ErrExists", state, err)
			}
			equal(t, "journal after the failed Step", snap(t, j, "vm-a"), before)
			if again.Version != 0 || s.Events[0].Seq != 0 {
				t.Errorf("failed Step was written back: Create.Version %d, Events[0].Seq %d; want 0, 0", again.Version, s.Events[0].Seq)
			}
		})
	}
}

// testCreateReplacesTerminal: Create of a name whose VM is Deleted or Failed
// replaces it: the new VM starts at Version 1, the old attempts are gone,
// the old events stay.
func testCreateReplacesTerminal(t *testing.T, h *harness) {
	for _, state := range []journal.VMState{journal.StateDeleted, journal.StateFailed} {
		t.Run(string(state), func(t *testing.T) {
			j := h.journal()
			v := create(t, j, newVM("vm-a"))
			create(t, j, newVM("vm-b"))
			v.State, v.EndedAt = state, at(time.Minute)
			commit(t, j, &journal.Step{
				Update:   &v,
				Attempts: []journal.Attempt{newAttempt("vm-a", 1), newAttempt("vm-a", 2), newAttempt("vm-b", 1)},
				Events:   []journal.Event{newEvent("vm-a", "ended"), newEvent("vm-b", "other")},
			})
			oldEvents, err := j.Events(ctx, journal.EventQuery{})
			if err != nil {
				t.Fatal(err)
			}

			n := newVM("vm-a")
			n.ID, n.Phase = "id-second", "prepare"
			commit(t, j, &journal.Step{Create: &n, Events: []journal.Event{newEvent("vm-a", "created")}})
			got := getVM(t, j, "vm-a")
			equal(t, "the replacing VM", got, n)
			if got.Version != 1 {
				t.Errorf("replacing VM has Version %d, want 1", got.Version)
			}
			if as, err := j.Attempts(ctx, "vm-a"); err != nil || len(as) != 0 {
				t.Errorf("attempts of the replaced VM: %d, %v; want none", len(as), err)
			}
			if as, err := j.Attempts(ctx, "vm-b"); err != nil || len(as) != 1 {
				t.Errorf("attempts of another VM: %d, %v; want 1, untouched", len(as), err)
			}
			events, err := j.Events(ctx, journal.EventQuery{})
			if err != nil {
				t.Fatal(err)
			}
			if len(events) != len(oldEvents)+1 || !reflect.DeepEqual(events[:len(oldEvents)], oldEvents) {
				t.Errorf("events after replacing: %v, want the old %v and one more", seqs(events), seqs(oldEvents))
			}
		})
	}
}

// testListVMs: ListVMs orders by name and filters by any of States, by Live
// (not deleted or failed) and by Cluster; zero options match everything.
func testListVMs(t *testing.T, h *harness) {
	j := h.journal()
	all := map[string]journal.VM{}
	for _, c := range []struct {
		name    string
		state   journal.VMState
		cluster string
	}{
		{"vm-c", journal.StateReady, "k1"},
		{"vm-a", journal.StatePending, ""},
		{"vm-e", journal.StateProvisioning, "k1"},
		{"vm-b", journal.StateDeleting, "k1"},
		{"vm-d", journal.StateFailed, "k2"},
		{"vm-f", journal.StateDeleted, ""},
	} {
		v := newVM(c.name)
		v.State, v.Cluster = c.state, c.cluster
		all[c.name] = create(t, j, v)
	}
	got, err := j.ListVMs(ctx, journal.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := []journal.VM{all["vm-a"], all["vm-b"], all["vm-c"], all["vm-d"], all["vm-e"], all["vm-f"]}
	equal(t, "ListVMs()", got, want)

	active := []journal.VMState{journal.StatePending, journal.StateProvisioning, journal.StateDeleting}
	for _, tc := range []struct {
		name string
		opts journal.ListOptions
		want []string
	}{
		{"active states", journal.ListOptions{States: active}, []string{"vm-a", "vm-b", "vm-e"}},
		{"one state", journal.ListOptions{States: []journal.VMState{journal.StateReady}}, []string{"vm-c"}},
		{"terminal states", journal.ListOptions{States: []journal.VMState{journal.StateFailed, journal.StateDeleted}}, []string{"vm-d", "vm-f"}},
		{"state with no VM", journal.ListOptions{States: []journal.VMState{"no-such-state"}}, []string{}},
		{"cluster", journal.ListOptions{Cluster: "k1"}, []string{"vm-b", "vm-c", "vm-e"}},
		{"cluster and states", journal.ListOptions{Cluster: "k1", States: []journal.VMState{journal.StateReady, journal.StateDeleting}}, []string{"vm-b", "vm-c"}},
		{"cluster with no VM", journal.ListOptions{Cluster: "k9"}, []string{}},
		{"live", journal.ListOptions{Live: true}, []string{"vm-a", "vm-b", "vm-c", "vm-e"}},
		{"live and states", journal.ListOptions{Live: true, States: []journal.VMState{journal.StateReady, journal.StateFailed}}, []string{"vm-c"}},
		{"live and only terminal states", journal.ListOptions{Live: true, States: []journal.VMState{journal.StateFailed}}, []string{}},
		{"live in a cluster", journal.ListOptions{Live: true, Cluster: "k2"}, []string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := j.ListVMs(ctx, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(names(got), tc.want) {
				t.Errorf("ListVMs(%+v) = %v, want %v", tc.opts, names(got), tc.want)
			}
			for _, v := range got {
				equal(t, "listed "+v.Name, v, all[v.Name])
			}
		})
	}
}

// testUpdate: a successful Update writes every non-lease field, increments
// the stored and the given Version, leaves the lease fields alone and
// refreshes Update.LeaseExpiry from the stored row.
func testUpdate(t *testing.T, h *harness) {
	j := h.journal()
	v := newVM("vm-a")
	v.Owner, v.LeaseExpiry = "o1", at(time.Minute)
	stored := create(t, j, v)
	create(t, j, newVM("vm-b"))

	u := stored
	u.State, u.Phase, u.Attempt = journal.StateReady, "join", 2
	u.Cluster, u.Request, u.Offer = "c2", nil, []byte(`[1,2]`)
	u.PricePerHour, u.InstanceID, u.SSHHost, u.SSHPort = 3.25, "i-new", "203.0.113.9", 22
	u.Deadline, u.ReadyAt, u.UpdatedAt = time.Time{}, at(2*time.Minute), at(2*time.Minute)
	u.LastError, u.LastErrorKind = "", ""
	u.LeaseExpiry = at(99 * time.Hour) // ignored by Update
	commit(t, j, &journal.Step{Update: &u})
	if u.Version != 2 {
		t.Errorf("after Update, the given Version = %d, want 2", u.Version)
	}
	if !u.LeaseExpiry.Equal(stored.LeaseExpiry) {
		t.Errorf("after Update, the given LeaseExpiry = %v, want the stored %v", u.LeaseExpiry, stored.LeaseExpiry)
	}
	want := u
	want.LeaseExpiry = stored.LeaseExpiry
	equal(t, "VM after Update", getVM(t, j, "vm-a"), want)

	u.Phase = "again"
	commit(t, j, &journal.Step{Update: &u})
	if got := getVM(t, j, "vm-a"); got.Version != 3 || u.Version != 3 || got.Phase != "again" {
		t.Errorf("second Update: stored Version %d Phase %q, given Version %d; want 3, again, 3", got.Version, got.Phase, u.Version)
	}
	wantB := newVM("vm-b")
	wantB.Version = 1
	equal(t, "the other VM", getVM(t, j, "vm-b"), wantB)

	// A VM nobody leases is updated with an empty Owner.
	b := getVM(t, j, "vm-b")
	b.Phase = "boot"
	commit(t, j, &journal.Step{Update: &b})
	if b.Version != 2 {
		t.Errorf("Update of an unleased VM: Version %d, want 2", b.Version)
	}

	// Update checks the owner, not the clock: an expired lease nobody took
	// over still lets its holder write.
	e := newVM("vm-expired")
	e.Owner, e.LeaseExpiry = "o1", at(-time.Hour)
	ev := create(t, j, e)
	ev.Phase = "boot"
	if err := j.Commit(ctx, &journal.Step{Update: &ev}); err != nil {
		t.Errorf("Update by the holder of an expired lease: %v, want success", err)
	}
}

// testUpdateFailures: ErrLeaseLost when the owner differs (checked before
// the version), else ErrConflict when the version differs, ErrNotFound for
// an unknown VM; a failed Update changes nothing, not even the given VM.
func testUpdateFailures(t *testing.T, h *harness) {
	for _, tc := range []struct {
		name        string
		storedOwner string
		owner       string
		version     int64 // relative to the stored one
		vm          string
		want        error
	}{
		{"other owner", "o1", "o2", 0, "vm-a", journal.ErrLeaseLost},
		{"lease released", "", "o1", 0, "vm-a", journal.ErrLeaseLost},
		{"no owner on a leased VM", "o1", "", 0, "vm-a", journal.ErrLeaseLost},
		{"stale version", "o1", "o1", -1, "vm-a", journal.ErrConflict},
		{"version from the future", "o1", "o1", +1, "vm-a", journal.ErrConflict},
		{"stale version, unleased", "", "", -1, "vm-a", journal.ErrConflict},
		{"owner checked before version", "o1", "o2", -1, "vm-a", journal.ErrLeaseLost},
		{"unknown VM", "o1", "o1", 0, "vm-nope", journal.ErrNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := h.journal()
			v := newVM("vm-a")
			v.Owner, v.LeaseExpiry = tc.storedOwner, at(time.Minute)
			stored := create(t, j, v)
			u := stored
			u.Phase = "after-update"
			commit(t, j, &journal.Step{Update: &u}) // stored Version 2
			stored = getVM(t, j, "vm-a")

			u = stored
			u.Name, u.Owner, u.Version, u.Phase = tc.vm, tc.owner, stored.Version+tc.version, "lost"
			given := u
			err := j.Commit(ctx, &journal.Step{Update: &u})
			if !errors.Is(err, tc.want) {
				t.Fatalf("Update: err = %v, want %v", err, tc.want)
			}
			for _, other := range []error{journal.ErrLeaseLost, journal.ErrConflict, journal.ErrNotFound, journal.ErrExists} {
				if other != tc.want && errors.Is(err, other) {
					t.Errorf("Update: err = %v is also %v", err, other)
				}
			}
			equal(t, "the VM given to the failed Update", u, given)
			equal(t, "the stored VM after the failed Update", getVM(t, j, "vm-a"), stored)
		})
	}
}

// testEmptyStep: a Step with nothing in it commits and changes nothing.
func testEmptyStep(t *testing.T, h *harness) {
	j := h.journal()
	create(t, j, newVM("vm-a"))
	before := snap(t, j, "vm-a")
	commit(t, j, &journal.Step{})
	equal(t, "journal after an empty Step", snap(t, j, "vm-a"), before)
}
