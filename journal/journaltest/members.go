package journaltest

import (
	"reflect"
	"testing"
	"time"

	"github.com/org/gpuprov/journal"
)

// membersOf returns j as a journal.Members, or skips the test for a backend
// that does not implement it (it is optional).
func membersOf(t *testing.T, j journal.Journal) journal.Members {
	t.Helper()
	m, ok := j.(journal.Members)
	if !ok {
		t.Skipf("%T does not implement journal.Members", j)
	}
	return m
}

// beater beats as members of one or more handles on a store and checks the
// answers. Every beat is at the kit's now (t0); a row lives d after it,
// measured on the journal's clock when it has a LeaseClock.
type beater struct {
	t *testing.T
	c leaseClock
}

func (b beater) beat(m journal.Members, member string, accounts []string, d time.Duration, want map[string]int) {
	b.t.Helper()
	live, err := m.Beat(ctx, member, accounts, t0, at(d))
	if err != nil {
		b.t.Fatalf("Beat(%s, %q): %v", member, accounts, err)
	}
	if !reflect.DeepEqual(live, want) {
		b.t.Errorf("Beat(%s, %q, a row of %v) = %v, want %v", member, accounts, d, live, want)
	}
}

// testMembers: Beat counts, per account it is given, the members whose row
// is live and lists it, the caller included; a row whose expiry passed, a
// member's old accounts and a member that left are not counted.
func testMembers(t *testing.T, h *harness) {
	j := h.journal()
	m := membersOf(t, j)
	b := beater{t: t, c: clockOf(j)}
	long := b.c.live(time.Minute)

	b.beat(m, "m1", []string{"a", "b"}, long, map[string]int{"a": 1, "b": 1})
	b.beat(m, "m2", []string{"c", "b"}, long, map[string]int{"b": 2, "c": 1})
	b.beat(m, "m1", []string{"a", "b"}, long, map[string]int{"a": 1, "b": 2})
	// An account listed twice counts once; one nobody else paces counts the
	// caller.
	b.beat(m, "m1", []string{"b", "a", "b", "z"}, long, map[string]int{"a": 1, "b": 2, "z": 1})

	// m2's row expires (a length already over): it is no longer counted,
	// not even by m2.
	b.beat(m, "m2", []string{"b", "c"}, -time.Second, map[string]int{"b": 1, "c": 0})
	b.beat(m, "m1", []string{"a", "b"}, long, map[string]int{"a": 1, "b": 1})
	if !b.c.own() {
		// On the caller's clock the boundary is exact: a row is live while
		// now is before its expiry.
		b.beat(m, "m2", []string{"b"}, 0, map[string]int{"b": 1})
		b.beat(m, "m2", []string{"b"}, time.Nanosecond, map[string]int{"b": 2})
	}

	// m2 comes back with other accounts: its old ones no longer count it.
	b.beat(m, "m2", []string{"c"}, long, map[string]int{"c": 1})
	b.beat(m, "m1", []string{"a", "b", "c"}, long, map[string]int{"a": 1, "b": 1, "c": 2})

	// Leave removes the row at once, whatever its expiry; leaving twice, or
	// as a member that never beat, does nothing.
	for _, name := range []string{"m1", "m1", "never-beat"} {
		if err := m.Leave(ctx, name); err != nil {
			t.Fatalf("Leave(%s): %v", name, err)
		}
	}
	b.beat(m, "m2", []string{"a", "c"}, long, map[string]int{"a": 1, "c": 1})

	b.beat(m, "m3", nil, long, map[string]int{})
	if _, err := m.Beat(ctx, "", []string{"a"}, t0, at(long)); err == nil {
		t.Error("Beat with an empty member succeeded")
	}
}

// testMembersTwoHandles: members beating through two handles on one store,
// as two processes would, count each other.
func testMembersTwoHandles(t *testing.T, h *harness) {
	j1 := h.journal()
	m1 := membersOf(t, j1)
	m2 := membersOf(t, h.reopen(j1))
	b := beater{t: t, c: clockOf(j1)}
	long := b.c.live(time.Minute)
	b.beat(m1, "p1", []string{"a", "b"}, long, map[string]int{"a": 1, "b": 1})
	b.beat(m2, "p2", []string{"b"}, long, map[string]int{"b": 2})
	b.beat(m1, "p1", []string{"a", "b"}, long, map[string]int{"a": 1, "b": 2})
	if err := m2.Leave(ctx, "p2"); err != nil {
		t.Fatal(err)
	}
	b.beat(m1, "p1", []string{"a", "b"}, long, map[string]int{"a": 1, "b": 1})
}
