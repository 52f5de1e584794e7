package journaltest

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/org/gpuprov/journal"
)

// testAcquire: Acquire wins a free lease, its own, an expired one and one
// held by a dead owner, and returns the VM as stored; a live owner's lease
// is a *LeasedError naming it; an unknown VM is ErrNotFound. Only the lease
// fields change.
func testAcquire(t *testing.T, h *harness) {
	for _, tc := range []struct {
		name  string
		owner string        // stored
		lease time.Duration // the stored lease ends this long after the kit's now
		live  bool          // ... and is meant to be live: see leaseClock.live
		zero  bool          // the stored lease has a zero expiry
		dead  []string      // passed to Acquire by "me" at t0
		want  error         // nil: "me" wins
		vm    string        // default vm-a
		until time.Duration // the expiry "me" asks for, from t0
	}{
		{name: "free", owner: "", zero: true},
		{name: "free with a stale expiry", owner: "", lease: time.Hour},
		{name: "own, extended", owner: "me", lease: time.Second, until: time.Hour},
		{name: "own, shortened", owner: "me", lease: time.Hour, until: time.Second},
		{name: "expired", owner: "other", lease: -time.Second},
		{name: "expires now", owner: "other", lease: 0},
		{name: "zero expiry", owner: "other", zero: true},
		{name: "dead owner", owner: "other", lease: time.Hour, dead: []string{"ghost", "other"}},
		{name: "live owner", owner: "other", lease: time.Nanosecond, live: true, want: journal.ErrLeased},
		{name: "live owner, others dead", owner: "other", lease: time.Hour, live: true, dead: []string{"ghost", "me"}, want: journal.ErrLeased},
		{name: "unknown VM", vm: "vm-nope", want: journal.ErrNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := h.journal()
			c := clockOf(j)
			v := newVM("vm-a")
			lease := tc.lease
			if tc.live {
				lease = c.live(lease)
			}
			c.lease(&v, tc.owner, lease)
			if tc.zero {
				v.LeaseExpiry = time.Time{}
			}
			stored := create(t, j, v)
			u := stored
			u.Phase = "boot"
			commit(t, j, &journal.Step{Update: &u}) // Version 2
			stored = getVM(t, j, "vm-a")

			name := "vm-a"
			if tc.vm != "" {
				name = tc.vm
			}
			until := tc.until
			if until == 0 {
				until = time.Minute
			}
			var (
				got journal.VM
				err error
			)
			s := c.around(t, t0, func() { got, err = j.Acquire(ctx, name, "me", t0, at(until), tc.dead...) })
			if tc.want == nil {
				if err != nil {
					t.Fatalf("Acquire: %v, want success", err)
				}
				s.check(t, "lease granted by Acquire", got.LeaseExpiry, until)
				want := stored
				want.Owner, want.LeaseExpiry = "me", got.LeaseExpiry
				equal(t, "VM returned by Acquire", got, want)
				equal(t, "VM stored after Acquire", getVM(t, j, "vm-a"), want)
				return
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("Acquire: err = %v, want %v", err, tc.want)
			}
			if tc.want == journal.ErrLeased {
				var le *journal.LeasedError
				if !errors.As(err, &le) {
					t.Fatalf("Acquire: err = %v (%T), want a *journal.LeasedError", err, err)
				}
				want := v.LeaseExpiry // as given: on the caller's clock, the kit's time
				if c.own() {
					want = stored.LeaseExpiry
				}
				if le.VM != "vm-a" || le.Owner != tc.owner || !le.Expiry.Equal(want) {
					t.Errorf("LeasedError = {VM %q Owner %q Expiry %v}, want {vm-a %q %v}", le.VM, le.Owner, le.Expiry, tc.owner, want)
				}
			}
			equal(t, "VM stored after a failed Acquire", getVM(t, j, "vm-a"), stored)
		})
	}
}

// testAcquireThenUpdate: after a takeover the old owner's Update is
// ErrLeaseLost and the new owner writes with the VM Acquire returned.
func testAcquireThenUpdate(t *testing.T, h *harness) {
	j := h.journal()
	v := newVM("vm-a")
	clockOf(j).lease(&v, "old", -time.Second)
	old := create(t, j, v)

	got, err := j.Acquire(ctx, "vm-a", "new", t0, at(time.Minute))
	if err != nil {
		t.Fatalf("Acquire of an expired lease: %v", err)
	}
	if got.Version != old.Version {
		t.Errorf("Acquire changed Version from %d to %d", old.Version, got.Version)
	}
	old.Phase = "boot"
	if err := j.Commit(ctx, &journal.Step{Update: &old}); !errors.Is(err, journal.ErrLeaseLost) {
		t.Errorf("Update by the old owner after a takeover: err = %v, want ErrLeaseLost", err)
	}
	got.Phase = "connect"
	commit(t, j, &journal.Step{Update: &got})
	if s := getVM(t, j, "vm-a"); s.Phase != "connect" || s.Owner != "new" || s.Version != 2 {
		t.Errorf("after the new owner's Update: Phase %q Owner %q Version %d; want connect, new, 2", s.Phase, s.Owner, s.Version)
	}
}

// testRenew: Renew extends the leases owner holds among names and returns
// the others in the order given; it touches nothing else.
func testRenew(t *testing.T, h *harness) {
	j := h.journal()
	c := clockOf(j)
	stored := map[string]journal.VM{}
	for _, l := range []struct {
		name, owner string
		lease       time.Duration
	}{
		{"vm-a", "o1", time.Minute},
		{"vm-b", "o1", -time.Minute}, // expired, but nobody took it: still o1's
		{"vm-c", "o1", time.Minute},  // not named: untouched
		{"vm-d", "o2", time.Minute},
		{"vm-e", "", 0},
	} {
		v := newVM(l.name)
		if l.owner != "" {
			c.lease(&v, l.owner, l.lease)
		}
		stored[l.name] = create(t, j, v)
	}
	var (
		lost []string
		err  error
	)
	s := c.around(t, at(0), func() {
		lost, err = j.Renew(ctx, "o1", at(0), at(10*time.Minute), []string{"vm-e", "vm-a", "vm-d", "vm-b", "vm-zz"})
	})
	if err != nil {
		t.Fatalf("Renew: %v", err)
	}
	if want := []string{"vm-e", "vm-d", "vm-zz"}; !reflect.DeepEqual(lost, want) {
		t.Errorf("Renew lost %q, want %q", lost, want)
	}
	for name, v := range stored {
		got := getVM(t, j, name)
		if name == "vm-a" || name == "vm-b" {
			s.check(t, "lease of "+name+" renewed", got.LeaseExpiry, 10*time.Minute)
			v.LeaseExpiry = got.LeaseExpiry
		}
		equal(t, "VM after Renew", got, v)
	}

	lost, err = j.Renew(ctx, "o1", at(0), at(20*time.Minute), nil)
	if err != nil || len(lost) != 0 {
		t.Errorf("Renew of no names = %q, %v; want none, nil", lost, err)
	}
}

// testRelease: Release frees a lease its owner holds and does nothing
// otherwise; the former owner's writes are then ErrLeaseLost.
func testRelease(t *testing.T, h *harness) {
	j := h.journal()
	v := newVM("vm-a")
	v.Owner, v.LeaseExpiry = "o1", at(time.Hour)
	stored := create(t, j, v)

	for _, c := range []struct{ name, owner string }{{"vm-a", "o2"}, {"vm-nope", "o1"}} {
		if err := j.Release(ctx, c.name, c.owner); err != nil {
			t.Errorf("Release(%s, %s) by a non-holder: %v, want nil", c.name, c.owner, err)
		}
	}
	equal(t, "VM after a non-holder's Release", getVM(t, j, "vm-a"), stored)

	if err := j.Release(ctx, "vm-a", "o1"); err != nil {
		t.Fatalf("Release by the holder: %v", err)
	}
	want := stored
	want.Owner, want.LeaseExpiry = "", time.Time{}
	equal(t, "VM after Release", getVM(t, j, "vm-a"), want)

	stored.Phase = "boot"
	if err := j.Commit(ctx, &journal.Step{Update: &stored}); !errors.Is(err, journal.ErrLeaseLost) {
		t.Errorf("Update by the releasing owner: err = %v, want ErrLeaseLost", err)
	}
	if _, err := j.Acquire(ctx, "vm-a", "o2", t0, at(time.Minute)); err != nil {
		t.Errorf("Acquire of a released lease before its old expiry: %v", err)
	}
}

// testReleaseLeaseWithUpdate: a Step with ReleaseLease frees the lease in the
// same write as its Update, in the store and in the Step; a Step whose Update
// fails frees nothing.
func testReleaseLeaseWithUpdate(t *testing.T, h *harness) {
	j := h.journal()
	v := newVM("vm-a")
	v.Owner, v.LeaseExpiry = "o1", at(time.Hour)
	stored := create(t, j, v)

	stale := stored
	stale.Version--
	if err := j.Commit(ctx, &journal.Step{Update: &stale, ReleaseLease: true}); !errors.Is(err, journal.ErrConflict) {
		t.Fatalf("stale Update with ReleaseLease: err = %v, want ErrConflict", err)
	}
	equal(t, "VM after a failed releasing Update", getVM(t, j, "vm-a"), stored)

	stored.State = journal.StateReady
	commit(t, j, &journal.Step{Update: &stored, ReleaseLease: true})
	if stored.Owner != "" || !stored.LeaseExpiry.IsZero() || stored.Version != 2 {
		t.Errorf("Step's VM after ReleaseLease: Owner %q LeaseExpiry %v Version %d; want \"\", zero, 2", stored.Owner, stored.LeaseExpiry, stored.Version)
	}
	equal(t, "VM after ReleaseLease", getVM(t, j, "vm-a"), stored)
	if _, err := j.Acquire(ctx, "vm-a", "o2", t0, at(time.Minute)); err != nil {
		t.Errorf("Acquire after ReleaseLease: %v", err)
	}
}
