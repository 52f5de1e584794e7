package journaltest

import (
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/org/gpuprov/journal"
)

// volumesOf returns j as a journal.Volumes, or skips the test for a backend
// that does not implement it (volumes are optional).
func volumesOf(t *testing.T, j journal.Journal) journal.Volumes {
	t.Helper()
	vs, ok := j.(journal.Volumes)
	if !ok {
		t.Skipf("%T does not implement journal.Volumes", j)
	}
	return vs
}

// newVolume returns an available volume named name with every field set
// but VM and Device.
func newVolume(name string) journal.Volume {
	return journal.Volume{
		Name:      name,
		ID:        "vol-id-" + name,
		CloudID:   "cloud-" + name,
		Provider:  "sim",
		Region:    "eu-1",
		Zone:      "eu-1a",
		SizeGB:    500,
		MountPath: "/data/" + name,
		Keep:      true,
		State:     journal.VolumeAvailable,
		Token:     "tok-" + name,
		LastError: "attach: busy",
		CreatedAt: at(-time.Minute),
		UpdatedAt: at(-time.Second),
	}
}

// createVolume commits the creation of v and returns it as stored.
func createVolume(t *testing.T, j journal.Journal, v journal.Volume) journal.Volume {
	t.Helper()
	s := &journal.Step{Volumes: []journal.VolumeWrite{{Volume: v, Create: true}}}
	commit(t, j, s)
	if got := s.Volumes[0].Volume.Version; got != 1 {
		t.Fatalf("create volume %s: Version of the Step's volume is %d after Commit, want 1", v.Name, got)
	}
	return getVolume(t, j, v.Name)
}

// getVolume returns the stored volume and fails the test if there is none.
func getVolume(t *testing.T, j journal.Journal, name string) journal.Volume {
	t.Helper()
	v, err := volumesOf(t, j).GetVolume(ctx, name)
	if err != nil {
		t.Fatalf("GetVolume(%s): %v", name, err)
	}
	return v
}

// updateVolume commits v as an update and returns the error.
func updateVolume(j journal.Journal, v journal.Volume) error {
	return j.Commit(ctx, &journal.Step{Volumes: []journal.VolumeWrite{{Volume: v}}})
}

// attach returns v attached to vm.
func attach(v journal.Volume, vm string) journal.Volume {
	v.State, v.VM, v.Device = journal.VolumeAttached, vm, "/dev/disk/by-id/"+v.CloudID
	return v
}

// testVolumeCreateGet: a created volume reads back as written, at Version
// 1, every field kept; an unknown name is ErrNotFound.
func testVolumeCreateGet(t *testing.T, h *harness) {
	j := h.journal()
	vs := volumesOf(t, j)
	want := newVolume("data")
	want.State, want.CloudID = journal.VolumeCreating, ""
	got := createVolume(t, j, want)
	want.Version = 1
	equal(t, "created volume", got, want)
	checkUTC(t, got)
	if _, err := vs.GetVolume(ctx, "nope"); !errors.Is(err, journal.ErrNotFound) {
		t.Errorf("GetVolume of an unknown name: %v, want ErrNotFound", err)
	}
	// Every field written by an update reads back too.
	u := got
	u.CloudID, u.State, u.VM, u.Device, u.Keep = "cloud-x", journal.VolumeAttached, "vm-a", "/dev/sdb", false
	u.LastError, u.UpdatedAt, u.EndedAt = "", at(time.Nanosecond), at(time.Hour)
	if err := updateVolume(j, u); err != nil {
		t.Fatal(err)
	}
	u.Version = 2
	equal(t, "updated volume", getVolume(t, j, "data"), u)
}

// testVolumeCreateExists: creating a name held by a volume that is not
// deleted fails with ErrExists, whatever its state, and changes nothing; a
// deleted one's name is used again, by a new incarnation at Version 1.
func testVolumeCreateExists(t *testing.T, h *harness) {
	j := h.journal()
	for _, st := range []journal.VolumeState{journal.VolumeCreating, journal.VolumeAvailable, journal.VolumeAttached, journal.VolumeDeleting} {
		name := "vol-" + string(st)
		v := newVolume(name)
		v.State = st
		stored := createVolume(t, j, v)
		again := newVolume(name)
		again.ID = "other"
		s := &journal.Step{Volumes: []journal.VolumeWrite{{Volume: again, Create: true}}}
		if err := j.Commit(ctx, s); !errors.Is(err, journal.ErrExists) {
			t.Errorf("create over a %s volume: %v, want ErrExists", st, err)
		}
		if s.Volumes[0].Volume.Version != 0 {
			t.Errorf("a failed create set the Step's Version to %d", s.Volumes[0].Volume.Version)
		}
		equal(t, "volume after a refused create", getVolume(t, j, name), stored)
	}

	// A deleted volume's name is free: the create replaces it.
	v := getVolume(t, j, "vol-available")
	v.State, v.LastError, v.EndedAt = journal.VolumeDeleted, "create failed: quota", at(time.Minute)
	if err := updateVolume(j, v); err != nil {
		t.Fatal(err)
	}
	reborn := newVolume("vol-available")
	reborn.ID, reborn.State, reborn.SizeGB, reborn.Keep = "vol-id-2", journal.VolumeCreating, 50, false
	got := createVolume(t, j, reborn)
	reborn.Version = 1
	equal(t, "volume created under a deleted one's name", got, reborn)

	// The old incarnation's update, at the new one's Version, is refused.
	v.Version = 1
	v.State, v.EndedAt = journal.VolumeAvailable, time.Time{}
	if err := updateVolume(j, v); !errors.Is(err, journal.ErrConflict) {
		t.Errorf("update of a replaced incarnation: %v, want ErrConflict", err)
	}
	equal(t, "volume after the old incarnation's update", getVolume(t, j, "vol-available"), reborn)
}

// testVolumeUpdate: an update at the stored Version and ID succeeds and
// bumps Version in the store and in the Step; a stale Version fails with
// ErrConflict, an unknown name with ErrNotFound, and neither writes.
func testVolumeUpdate(t *testing.T, h *harness) {
	j := h.journal()
	v := createVolume(t, j, newVolume("data"))
	v.State, v.CloudID = journal.VolumeAvailable, "cloud-new"
	s := &journal.Step{Volumes: []journal.VolumeWrite{{Volume: v}}}
	commit(t, j, s)
	if s.Volumes[0].Volume.Version != 2 {
		t.Errorf("Version of the Step's volume after the update: %d, want 2", s.Volumes[0].Volume.Version)
	}
	stored := getVolume(t, j, "data")
	if stored.Version != 2 || stored.CloudID != "cloud-new" {
		t.Errorf("stored volume after the update: %+v; want Version 2, CloudID cloud-new", stored)
	}

	stale := stored
	stale.Version, stale.SizeGB = 1, 9
	s = &journal.Step{Volumes: []journal.VolumeWrite{{Volume: stale}}}
	if err := j.Commit(ctx, s); !errors.Is(err, journal.ErrConflict) {
		t.Errorf("update at a stale Version: %v, want ErrConflict", err)
	}
	if s.Volumes[0].Volume.Version != 1 {
		t.Errorf("a failed update set the Step's Version to %d, want it untouched (1)", s.Volumes[0].Volume.Version)
	}
	unknown := newVolume("nope")
	if err := updateVolume(j, unknown); !errors.Is(err, journal.ErrNotFound) {
		t.Errorf("update of an unknown volume: %v, want ErrNotFound", err)
	}
	equal(t, "volume after the refused updates", getVolume(t, j, "data"), stored)
}

// testVolumeAttachOnce: a volume attached to VM a cannot be attached to VM
// b, even at the current Version, and the refusal changes nothing; an
// update that leaves it on a succeeds; once detached it attaches to b.
func testVolumeAttachOnce(t *testing.T, h *harness) {
	j := h.journal()
	v := createVolume(t, j, newVolume("data"))
	if err := updateVolume(j, attach(v, "a")); err != nil {
		t.Fatalf("attach to a: %v", err)
	}
	onA := getVolume(t, j, "data")
	if onA.VM != "a" || onA.State != journal.VolumeAttached || onA.Version != 2 {
		t.Fatalf("after the attach to a: %+v", onA)
	}
	for _, state := range []journal.VolumeState{journal.VolumeAttached, journal.VolumeAvailable} {
		toB := attach(onA, "b")
		toB.State = state
		if err := updateVolume(j, toB); !errors.Is(err, journal.ErrConflict) {
			t.Errorf("attach to b (state %s) of a volume attached to a, at the current Version: %v, want ErrConflict", state, err)
		}
		equal(t, "volume after the refused attach to b", getVolume(t, j, "data"), onA)
	}

	// An update that keeps it on a is no move.
	same := onA
	same.Device = "/dev/sdc"
	if err := updateVolume(j, same); err != nil {
		t.Fatalf("update that keeps the volume on a: %v", err)
	}
	// Detach, then attach to b.
	detached := getVolume(t, j, "data")
	detached.State, detached.VM, detached.Device = journal.VolumeAvailable, "", ""
	if err := updateVolume(j, detached); err != nil {
		t.Fatalf("detach from a: %v", err)
	}
	if err := updateVolume(j, attach(getVolume(t, j, "data"), "b")); err != nil {
		t.Fatalf("attach to b after the detach: %v", err)
	}
	if got := getVolume(t, j, "data"); got.VM != "b" || got.Version != 5 {
		t.Errorf("after the detach and the attach to b: VM %q, Version %d; want b, 5", got.VM, got.Version)
	}
}

// testVolumeStepAtomicity: volume writes are in their Step's transaction:
// a Step whose VM update conflicts writes none of its volumes (and sets no
// Version in them), a Step whose volume write fails writes none of its
// other parts, and the same Steps without the fault write everything.
func testVolumeStepAtomicity(t *testing.T, h *harness) {
	j := h.journal()
	vm := newVM("vm-a")
	vm.Owner, vm.LeaseExpiry = "o1", at(time.Hour)
	storedVM := create(t, j, vm)
	storedVol := createVolume(t, j, newVolume("data"))
	before := snap(t, j, "vm-a")
	volsBefore := listVolumes(t, j, journal.VolumeListOptions{})

	step := func() *journal.Step {
		u := storedVM
		u.Phase = "attach"
		return &journal.Step{
			Update: &u,
			Volumes: []journal.VolumeWrite{
				{Volume: newVolume("scratch"), Create: true},
				{Volume: attach(storedVol, "vm-a")},
			},
			Events: []journal.Event{newEvent("vm-a", "volume-attach")},
		}
	}
	for _, tc := range []struct {
		name  string
		fault func(s *journal.Step)
	}{
		{"VM update conflicts", func(s *journal.Step) { s.Update.Version-- }},
		{"volume update conflicts", func(s *journal.Step) { s.Volumes[1].Volume.Version++ }},
		{"volume create exists", func(s *journal.Step) { s.Volumes[0].Volume.Name = "data" }},
		{"volume with an unknown state", func(s *journal.Step) { s.Volumes[0].Volume.State = "melted" }},
		{"volume without a name", func(s *journal.Step) { s.Volumes[1].Volume.Name = "" }},
	} {
		s := step()
		tc.fault(s)
		given := make([]journal.VolumeWrite, len(s.Volumes))
		copy(given, s.Volumes)
		if err := j.Commit(ctx, s); err == nil {
			t.Errorf("%s: the Step committed", tc.name)
			continue
		}
		equal(t, tc.name+": journal after the failed Step", snap(t, j, "vm-a"), before)
		equal(t, tc.name+": volumes after the failed Step", listVolumes(t, j, journal.VolumeListOptions{}), volsBefore)
		if !reflect.DeepEqual(s.Volumes, given) {
			t.Errorf("%s: the failed Step's volumes were changed: %+v, given %+v", tc.name, s.Volumes, given)
		}
	}

	s := step()
	commit(t, j, s)
	if s.Volumes[0].Volume.Version != 1 || s.Volumes[1].Volume.Version != 2 || s.Update.Version != storedVM.Version+1 {
		t.Errorf("Versions after the Step: volumes %d, %d, VM %d; want 1, 2, %d",
			s.Volumes[0].Volume.Version, s.Volumes[1].Volume.Version, s.Update.Version, storedVM.Version+1)
	}
	if got := getVolume(t, j, "data"); got.VM != "vm-a" || got.Version != 2 {
		t.Errorf("volume after the Step: VM %q, Version %d; want vm-a, 2", got.VM, got.Version)
	}
	if got := getVolume(t, j, "scratch"); got.Version != 1 {
		t.Errorf("volume created by the Step: Version %d, want 1", got.Version)
	}
	if got := getVM(t, j, "vm-a"); got.Phase != "attach" {
		t.Errorf("VM after the Step: phase %q, want attach", got.Phase)
	}
}

// listVolumes lists j's volumes matching opts.
func listVolumes(t *testing.T, j journal.Journal, opts journal.VolumeListOptions) []journal.Volume {
	t.Helper()
	vs, err := volumesOf(t, j).ListVolumes(ctx, opts)
	if err != nil {
		t.Fatalf("ListVolumes(%+v): %v", opts, err)
	}
	return vs
}

// volumeNames returns the names of vs.
func volumeNames(vs []journal.Volume) []string {
	out := []string{}
	for _, v := range vs {
		out = append(out, v.Name)
	}
	return out
}

// testVolumeList: ListVolumes filters by Live and by VM, both together,
// and orders by name (bytes: upper case first).
func testVolumeList(t *testing.T, h *harness) {
	j := h.journal()
	if got := listVolumes(t, j, journal.VolumeListOptions{}); len(got) != 0 {
		t.Fatalf("a new journal lists volumes %v", volumeNames(got))
	}
	for _, tc := range []struct {
		name  string
		state journal.VolumeState
		vm    string
	}{
		{"b-on-x", journal.VolumeAttached, "x"},
		{"B-on-x-deleted", journal.VolumeDeleted, "x"},
		{"a-free", journal.VolumeAvailable, ""},
		{"c-on-y", journal.VolumeAttached, "y"},
		{"d-creating", journal.VolumeCreating, ""},
		{"e-deleted", journal.VolumeDeleted, ""},
		{"f-deleting-on-x", journal.VolumeDeleting, "x"},
	} {
		v := newVolume(tc.name)
		v.State, v.VM = tc.state, tc.vm
		createVolume(t, j, v)
	}
	for _, tc := range []struct {
		opts journal.VolumeListOptions
		want []string
	}{
		{journal.VolumeListOptions{}, []string{"B-on-x-deleted", "a-free", "b-on-x", "c-on-y", "d-creating", "e-deleted", "f-deleting-on-x"}},
		{journal.VolumeListOptions{Live: true}, []string{"a-free", "b-on-x", "c-on-y", "d-creating", "f-deleting-on-x"}},
		{journal.VolumeListOptions{VM: "x"}, []string{"B-on-x-deleted", "b-on-x", "f-deleting-on-x"}},
		{journal.VolumeListOptions{VM: "x", Live: true}, []string{"b-on-x", "f-deleting-on-x"}},
		{journal.VolumeListOptions{VM: "nobody"}, []string{}},
	} {
		got := listVolumes(t, j, tc.opts)
		if !reflect.DeepEqual(volumeNames(got), tc.want) {
			t.Errorf("ListVolumes(%+v) = %v, want %v", tc.opts, volumeNames(got), tc.want)
		}
	}
	all := listVolumes(t, j, journal.VolumeListOptions{})
	equal(t, "listed volume", all[1], getVolume(t, j, "a-free"))
}

// testVolumeConcurrentAttach: goroutines race to attach one volume each to
// its own VM, retrying on a stale Version: exactly one wins, and every
// other's attach at the winner's Version is refused by the one-VM rule.
func testVolumeConcurrentAttach(t *testing.T, h *harness) {
	j := h.journal()
	volumesOf(t, j)
	createVolume(t, j, newVolume("data"))
	const goroutines = 8
	won := make([]bool, goroutines)
	errs := make([]error, goroutines)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := fmt.Sprintf("vm-%d", g)
			<-start
			for try := 0; try < 100; try++ {
				v, err := j.(journal.Volumes).GetVolume(ctx, "data")
				if err != nil {
					errs[g] = err
					return
				}
				taken := v.VM != ""
				err = updateVolume(j, attach(v, mine))
				switch {
				case err == nil && taken:
					errs[g] = fmt.Errorf("%s attached the volume attached to %s", mine, v.VM)
					return
				case err == nil:
					won[g] = true
					return
				case !errors.Is(err, journal.ErrConflict):
					errs[g] = err
					return
				case taken:
					return // refused by the one-VM rule: lost
				}
			}
			errs[g] = fmt.Errorf("%s: 100 conflicts in a row", mine)
		}()
	}
	close(start)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	winner := ""
	for g, w := range won {
		if w {
			if winner != "" {
				t.Fatalf("both %s and vm-%d attached the volume", winner, g)
			}
			winner = fmt.Sprintf("vm-%d", g)
		}
	}
	if winner == "" {
		t.Fatal("no attach won")
	}
	if got := getVolume(t, j, "data"); got.VM != winner || got.Version != 2 {
		t.Errorf("volume after the race: VM %q, Version %d; want %s, 2 (one write)", got.VM, got.Version, winner)
	}
}

// testVolumePrune: Prune removes the volumes deleted before Before, and
// keeps those deleted at or after it, those without an EndedAt and those
// in any other state; a pruned name can be created again, and a second
// Prune finds nothing.
func testVolumePrune(t *testing.T, h *harness) {
	j := h.journal()
	volumesOf(t, j)
	p := pruner(t, j)
	mk := func(name string, state journal.VolumeState, end time.Time) journal.Volume {
		v := newVolume(name)
		v.State, v.EndedAt = state, end
		return v
	}
	removed := []journal.Volume{
		mk("old-deleted", journal.VolumeDeleted, longAgo),
		mk("just-before", journal.VolumeDeleted, pruneBefore.Add(-time.Nanosecond)),
		mk("old-deleted-2", journal.VolumeDeleted, longAgo),
	}
	kept := []journal.Volume{
		mk("recent-deleted", journal.VolumeDeleted, at(-time.Hour)),
		mk("ended-at-before", journal.VolumeDeleted, pruneBefore),
		mk("no-end-time", journal.VolumeDeleted, time.Time{}),
	}
	for _, s := range []journal.VolumeState{journal.VolumeCreating, journal.VolumeAvailable, journal.VolumeAttached, journal.VolumeDeleting} {
		kept = append(kept, mk("old-"+string(s), s, longAgo))
	}
	for _, v := range append(append([]journal.Volume{}, removed...), kept...) {
		createVolume(t, j, v)
	}
	// A VM that is pruned does not take its volume's row with it.
	vm := ended("vm-gone", journal.StateDeleted, longAgo)
	seed(t, j, vm)
	onVM := mk("was-on-vm-gone", journal.VolumeAvailable, time.Time{})
	createVolume(t, j, onVM)
	kept = append(kept, onVM)
	before := map[string]journal.Volume{}
	for _, v := range kept {
		before[v.Name] = getVolume(t, j, v.Name)
	}

	res, err := p.Prune(ctx, journal.PruneOptions{Before: pruneBefore, Now: t0, Batch: 2})
	if err != nil {
		t.Fatalf("Prune: %v", err)
	}
	if res.Volumes != len(removed) || res.VMs != 1 {
		t.Errorf("Prune = %+v, want %d volumes and 1 VM removed", res, len(removed))
	}
	for _, v := range removed {
		if _, err := j.(journal.Volumes).GetVolume(ctx, v.Name); !errors.Is(err, journal.ErrNotFound) {
			t.Errorf("volume %s after Prune: %v, want ErrNotFound", v.Name, err)
		}
	}
	for _, v := range kept {
		equal(t, "volume "+v.Name+" after Prune", getVolume(t, j, v.Name), before[v.Name])
	}
	createVolume(t, j, newVolume("old-deleted"))

	res, err = p.Prune(ctx, journal.PruneOptions{Before: pruneBefore, Now: t0})
	if err != nil || res != (journal.PruneResult{}) {
		t.Errorf("second Prune = %+v, %v; want nothing removed, nil", res, err)
	}
	// A zero Before removes no volume.
	v := getVolume(t, j, "old-deleted")
	v.State, v.EndedAt = journal.VolumeDeleted, longAgo
	if err := updateVolume(j, v); err != nil {
		t.Fatal(err)
	}
	if res, err := p.Prune(ctx, journal.PruneOptions{Now: t0}); err != nil || res.Volumes != 0 {
		t.Errorf("Prune with a zero Before = %+v, %v; want no volume removed", res, err)
	}
}
