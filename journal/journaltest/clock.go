package journaltest

import (
	"testing"
	"time"

	"github.com/org/gpuprov/journal"
)

// leaseClock is how the kit writes and checks a journal's leases. A backend
// that keeps the caller's clock stores the kit's times (t0 and at(...)) as
// given, and the kit asserts them exactly. A backend with a
// journal.LeaseClock starts every lease at its own now, which the kit cannot
// set: there the kit writes leases as lengths (an "expired" lease is one
// whose length is already over, a "live" one is long) and bounds each
// expiry the journal grants by LeaseNow readings taken before and after the
// call that granted it. No test sleeps either way.
type leaseClock struct {
	lc journal.LeaseClock // nil: the caller's clock
}

// clockOf returns how j grants leases.
func clockOf(j journal.Journal) leaseClock {
	lc, _ := j.(journal.LeaseClock)
	return leaseClock{lc: lc}
}

// own reports whether the journal grants leases by its own clock.
func (c leaseClock) own() bool { return c.lc != nil }

// lease sets v's lease: owner, ending d after the kit's now (t0), for a
// Create. On the caller's clock that is at(d); a journal with a LeaseClock
// measures the lease from v.CreatedAt and starts it at its own now, so
// there LeaseExpiry is v.CreatedAt + d.
func (c leaseClock) lease(v *journal.VM, owner string, d time.Duration) {
	v.Owner = owner
	if c.own() {
		v.LeaseExpiry = v.CreatedAt.Add(d)
	} else {
		v.LeaseExpiry = at(d)
	}
}

// live returns the length of a lease meant to be live at the kit's next
// call: d on the caller's clock, where the kit hits its boundary to the
// nanosecond, and at least an hour on the journal's own clock, which moves
// on between two calls.
func (c leaseClock) live(d time.Duration) time.Duration {
	if c.own() {
		return max(d, time.Hour)
	}
	return d
}

// span is when a call may have read the journal's clock: [from, to].
type span struct{ from, to time.Time }

// around runs f, one call that grants leases and is given now, and returns
// when it may have read the clock it grants them by: exactly now on the
// caller's clock; between LeaseNow readings before and after f on the
// journal's own.
func (c leaseClock) around(t *testing.T, now time.Time, f func()) span {
	t.Helper()
	if !c.own() {
		f()
		return span{now, now}
	}
	from := c.now(t)
	f()
	return span{from, c.now(t)}
}

// now reads the journal's clock.
func (c leaseClock) now(t *testing.T) time.Time {
	t.Helper()
	n, err := c.lc.LeaseNow(ctx)
	if err != nil {
		t.Fatalf("LeaseNow: %v", err)
	}
	return n
}

// check fails t unless got is the expiry of a lease of length d granted
// within s: exactly s.from + d on the caller's clock (s.from == s.to), in
// [s.from + d, s.to + d] on the journal's own.
func (s span) check(t *testing.T, what string, got time.Time, d time.Duration) {
	t.Helper()
	lo, hi := s.from.Add(d), s.to.Add(d)
	if got.Before(lo) || got.After(hi) {
		if lo.Equal(hi) {
			t.Errorf("%s: expiry %s, want %s (a lease of %v from %s)", what, got.Format(time.RFC3339Nano), lo.Format(time.RFC3339Nano), d, s.from.Format(time.RFC3339Nano))
			return
		}
		t.Errorf("%s: expiry %s, want a lease of %v from the journal's clock in [%s, %s]: between %s and %s",
			what, got.Format(time.RFC3339Nano), d, s.from.Format(time.RFC3339Nano), s.to.Format(time.RFC3339Nano),
			lo.Format(time.RFC3339Nano), hi.Format(time.RFC3339Nano))
	}
}
