package postgres_test

import (
	"errors"
	"testing"
	"time"

	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/journal/postgres"
	"github.com/org/gpuprov/journal/postgres/pgtest"
)

// dbNow reads the journal's clock (journal.LeaseClock).
func dbNow(t *testing.T, db *postgres.DB) time.Time {
	t.Helper()
	n, err := db.LeaseNow(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestLeaseNow: LeaseNow is the server's clock_timestamp(), to the
// microsecond, and moves on.
func TestLeaseNow(t *testing.T) {
	srv := pgtest.Require(t)
	db := open(t, srv.NewSchema(t))
	defer db.Close()
	conn, err := pgxConnect(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	read := func() time.Time {
		var ts time.Time
		if err := conn.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&ts); err != nil {
			t.Fatal(err)
		}
		return ts
	}
	last := time.Time{}
	for range 20 {
		before := read()
		n := dbNow(t, db)
		after := read()
		if n.Before(before) || n.After(after) {
			t.Errorf("LeaseNow %s, want it between the server's clock_timestamp() before (%s) and after (%s)",
				n.Format(time.RFC3339Nano), before.Format(time.RFC3339Nano), after.Format(time.RFC3339Nano))
		}
		if n.Nanosecond()%1000 != 0 || n.Location() != time.UTC {
			t.Errorf("LeaseNow %s: want whole microseconds, in UTC", n.Format(time.RFC3339Nano))
		}
		if !n.After(last) {
			t.Errorf("LeaseNow %s after %s: want it to move on", n.Format(time.RFC3339Nano), last.Format(time.RFC3339Nano))
		}
		last = n
	}
}

// TestLeaseLengths: Create, Acquire and Renew grant the length the caller
// asks for (expiry − now on its clock, whatever that clock reads) from the
// database's clock, to the nanosecond: the clock is read in whole
// microseconds, so the nanoseconds of the length stay in the expiry.
func TestLeaseLengths(t *testing.T) {
	srv := pgtest.Require(t)
	db := open(t, srv.NewSchema(t))
	defer db.Close()
	// Callers' clocks far from the server's: only their differences count.
	far := time.Date(2031, 3, 4, 5, 6, 7, 999, time.UTC)
	past := time.Date(2001, 1, 1, 0, 0, 0, 1, time.UTC)
	check := func(what string, before, after, got time.Time, length time.Duration) {
		t.Helper()
		lo, hi := before.Add(length), after.Add(length)
		if got.Before(lo) || got.After(hi) {
			t.Errorf("%s: expiry %s, want in [%s, %s]", what, got.Format(time.RFC3339Nano), lo.Format(time.RFC3339Nano), hi.Format(time.RFC3339Nano))
		}
		if want := int((length%time.Microsecond + time.Microsecond) % time.Microsecond); got.Nanosecond()%1000 != want {
			t.Errorf("%s: expiry %s ends in %d ns, want the length's %d", what, got.Format(time.RFC3339Nano), got.Nanosecond()%1000, want)
		}
	}

	created := time.Hour + 123*time.Nanosecond
	v := journal.VM{Name: "vm-a", State: journal.StatePending, Owner: "o1", CreatedAt: far, LeaseExpiry: far.Add(created)}
	before := dbNow(t, db)
	if err := db.Commit(ctx, &journal.Step{Create: &v}); err != nil {
		t.Fatal(err)
	}
	after := dbNow(t, db)
	stored, err := db.GetVM(ctx, "vm-a")
	if err != nil {
		t.Fatal(err)
	}
	check("Create", before, after, stored.LeaseExpiry, created)
	if !v.LeaseExpiry.Equal(stored.LeaseExpiry) {
		t.Errorf("Create.LeaseExpiry after Commit %v, want the stored %v", v.LeaseExpiry, stored.LeaseExpiry)
	}

	renewed := 90*time.Second + 7*time.Nanosecond
	before = dbNow(t, db)
	if lost, err := db.Renew(ctx, "o1", past, past.Add(renewed), []string{"vm-a"}); err != nil || len(lost) > 0 {
		t.Fatalf("Renew: lost %v, %v", lost, err)
	}
	after = dbNow(t, db)
	if stored, err = db.GetVM(ctx, "vm-a"); err != nil {
		t.Fatal(err)
	}
	check("Renew", before, after, stored.LeaseExpiry, renewed)

	// A length already over grants a lease that has expired: another owner
	// takes it at once.
	before = dbNow(t, db)
	got, err := db.Acquire(ctx, "vm-a", "o1", far, far.Add(-999*time.Nanosecond))
	if err != nil {
		t.Fatal(err)
	}
	after = dbNow(t, db)
	check("Acquire of a length already over", before, after, got.LeaseExpiry, -999*time.Nanosecond)
	before = dbNow(t, db)
	got, err = db.Acquire(ctx, "vm-a", "o2", past, past.Add(time.Minute+1))
	if err != nil {
		t.Fatalf("Acquire of a lease whose length was over: %v", err)
	}
	after = dbNow(t, db)
	check("Acquire", before, after, got.LeaseExpiry, time.Minute+1)

	// A zero now cannot measure a length.
	if _, err := db.Acquire(ctx, "vm-a", "o2", time.Time{}, far); err == nil {
		t.Error("Acquire with a zero now succeeded")
	}
	if _, err := db.Renew(ctx, "o2", time.Time{}, far, []string{"vm-a"}); err == nil {
		t.Error("Renew with a zero now succeeded")
	}
	w := journal.VM{Name: "vm-b", State: journal.StatePending, Owner: "o1", LeaseExpiry: far}
	if err := db.Commit(ctx, &journal.Step{Create: &w}); err == nil {
		t.Error("Create of a lease with a zero CreatedAt succeeded")
	}
}

// skewTTL is the lease length of the clock-skew tests. It is short because
// TestSkewedClocks/takeover waits for a lease to lapse on the database's
// clock, which only real time advances (it polls; nothing sleeps for a
// fixed time), and still many round trips long.
const skewTTL = 300 * time.Millisecond

// skewed is a caller's clock: the real one plus a fixed offset.
type skewed time.Duration

func (s skewed) now() time.Time { return time.Now().Add(time.Duration(s)) }

// The two replicas' clocks: two leases' lengths ahead of the real clock, and
// two behind.
var (
	ahead  = skewed(2 * skewTTL)
	behind = skewed(-2 * skewTTL)
)

func (s skewed) String() string {
	if s > 0 {
		return "ahead"
	}
	return "behind"
}

// TestSkewedClocks: two replicas whose clocks run two TTLs ahead of and
// behind the real one share a journal. Neither takes over the other's live
// lease, a lease is not seen as expired early (not by Prune either), and
// once its holder stops renewing, the other takes it over no earlier than
// one TTL after the last renewal, and soon after. With the callers' clocks
// (the backend before journal.LeaseClock) the one ahead takes the one
// behind's lease at once, and the one behind waits five TTLs for the other's.
func TestSkewedClocks(t *testing.T) {
	srv := pgtest.Require(t)
	pairs := []struct{ holder, other skewed }{{behind, ahead}, {ahead, behind}}
	// Each replica has a handle of its own, as a process would.
	world := func(t *testing.T) map[skewed]*postgres.DB {
		u := srv.NewSchema(t)
		dbs := map[skewed]*postgres.DB{ahead: open(t, u), behind: open(t, u)}
		t.Cleanup(func() { dbs[ahead].Close(); dbs[behind].Close() })
		return dbs
	}
	// leased creates a VM whose lease c holds for skewTTL, as the engine
	// creates one: CreatedAt and LeaseExpiry on the caller's clock.
	leased := func(t *testing.T, db *postgres.DB, c skewed, name string, state journal.VMState) {
		t.Helper()
		now := c.now()
		v := journal.VM{Name: name, State: state, Owner: c.String(), CreatedAt: now, LeaseExpiry: now.Add(skewTTL)}
		if state.Terminal() {
			v.EndedAt = now.Add(-48 * time.Hour)
		}
		if err := db.Commit(ctx, &journal.Step{Create: &v}); err != nil {
			t.Fatal(err)
		}
	}
	acquire := func(db *postgres.DB, c skewed, name string) (journal.VM, error) {
		now := c.now()
		return db.Acquire(ctx, name, c.String(), now, now.Add(skewTTL))
	}
	renew := func(t *testing.T, db *postgres.DB, c skewed, name string) {
		t.Helper()
		now := c.now()
		if lost, err := db.Renew(ctx, c.String(), now, now.Add(skewTTL), []string{name}); err != nil || len(lost) > 0 {
			t.Fatalf("%s's Renew: lost %v, %v", c, lost, err)
		}
	}

	t.Run("live", func(t *testing.T) {
		for _, p := range pairs {
			t.Run("holder "+p.holder.String(), func(t *testing.T) {
				dbs := world(t)
				leased(t, dbs[p.holder], p.holder, "vm-a", journal.StateProvisioning)
				for i := range 3 {
					if i > 0 {
						renew(t, dbs[p.holder], p.holder, "vm-a")
					}
					_, err := acquire(dbs[p.other], p.other, "vm-a")
					var le *journal.LeasedError
					if !errors.As(err, &le) || le.Owner != p.holder.String() {
						t.Fatalf("the replica %s acquired the live lease of the one %s (try %d): %v; want a LeasedError naming %s",
							p.other, p.holder, i, err, p.holder)
					}
					if now := dbNow(t, dbs[p.other]); !le.Expiry.After(now) {
						t.Errorf("LeasedError.Expiry %s is not after the journal's clock %s", le.Expiry.Format(time.RFC3339Nano), now.Format(time.RFC3339Nano))
					}
				}
			})
		}
	})

	t.Run("prune", func(t *testing.T) {
		dbs := world(t)
		leased(t, dbs[behind], behind, "vm-ended", journal.StateDeleted)
		now := ahead.now()
		res, err := dbs[ahead].Prune(ctx, journal.PruneOptions{Before: now, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := dbs[ahead].GetVM(ctx, "vm-ended"); err != nil || res.VMs != 0 {
			t.Errorf("Prune by the replica ahead removed %d VMs (GetVM: %v): it took the live lease of the one behind for expired", res.VMs, err)
		}
	})

	t.Run("takeover", func(t *testing.T) {
		for _, p := range pairs {
			t.Run("holder "+p.holder.String(), func(t *testing.T) {
				dbs := world(t)
				leased(t, dbs[p.holder], p.holder, "vm-a", journal.StateProvisioning)
				// The holder's last renewal; then it stops, as a dead process.
				renewed := dbNow(t, dbs[p.holder])
				renew(t, dbs[p.holder], p.holder, "vm-a")
				last, err := dbs[p.holder].GetVM(ctx, "vm-a")
				if err != nil {
					t.Fatal(err)
				}
				if earliest := renewed.Add(skewTTL); last.LeaseExpiry.Before(earliest) {
					t.Errorf("the last renewal, asked at %s on the journal's clock, holds only until %s, before %s: one TTL after it",
						renewed.Format(time.RFC3339Nano), last.LeaseExpiry.Format(time.RFC3339Nano), earliest.Format(time.RFC3339Nano))
				}
				// Poll until the other replica takes the lease over, for at
				// most three TTLs of real time: the database's clock must
				// pass the lease's expiry.
				deadline := time.Now().Add(3 * skewTTL)
				tick := time.NewTicker(skewTTL / 30)
				defer tick.Stop()
				var (
					before, after time.Time
					got           journal.VM
				)
				for {
					before = dbNow(t, dbs[p.other])
					got, err = acquire(dbs[p.other], p.other, "vm-a")
					after = dbNow(t, dbs[p.other])
					if err == nil {
						break
					}
					if !errors.Is(err, journal.ErrLeased) {
						t.Fatal(err)
					}
					if time.Now().After(deadline) {
						t.Fatalf("the replica %s has not taken over the lease of the one %s, %v after its last renewal (TTL %v): %v",
							p.other, p.holder, time.Since(deadline.Add(-3*skewTTL)), skewTTL, err)
					}
					<-tick.C
				}
				// The takeover ran on the server between before and after,
				// and, with a lease clock, exactly at its lease's start.
				if earliest := renewed.Add(skewTTL); after.Before(earliest) {
					t.Errorf("the replica %s took over by %s on the journal's clock, before %s: one TTL after the last renewal",
						p.other, after.Format(time.RFC3339Nano), earliest.Format(time.RFC3339Nano))
				}
				if start := got.LeaseExpiry.Add(-skewTTL); start.Before(last.LeaseExpiry) {
					t.Errorf("the replica %s's lease starts at %s, before the expiry %s of the one it took over",
						p.other, start.Format(time.RFC3339Nano), last.LeaseExpiry.Format(time.RFC3339Nano))
				}
				if late := before.Sub(last.LeaseExpiry); late > 2*skewTTL {
					t.Errorf("the replica %s took over %v after the lease lapsed, want soon after", p.other, late)
				}
				t.Logf("the replica %s took over %v after the last renewal (TTL %v)", p.other, after.Sub(renewed), skewTTL)
			})
		}
	})
}

// TestMembersSkewedClocks: replicas whose clocks run two TTLs ahead of and
// behind the real one count each other live: a row lives its length from
// the database's clock. On the callers' clocks the one ahead would see the
// one behind's row as expired the moment it was written.
func TestMembersSkewedClocks(t *testing.T) {
	srv := pgtest.Require(t)
	u := srv.NewSchema(t)
	dbs := map[skewed]*postgres.DB{ahead: open(t, u), behind: open(t, u)}
	defer dbs[ahead].Close()
	defer dbs[behind].Close()
	beat := func(c skewed, length time.Duration, want int) {
		t.Helper()
		now := c.now()
		live, err := dbs[c].Beat(ctx, c.String(), []string{"sim"}, now, now.Add(length))
		if err != nil {
			t.Fatal(err)
		}
		if live["sim"] != want {
			t.Errorf("the replica %s counts %d live replicas pacing sim, want %d", c, live["sim"], want)
		}
	}
	beat(behind, skewTTL, 1)
	beat(ahead, skewTTL, 2)
	beat(behind, skewTTL, 2)
	beat(ahead, skewTTL, 2)
	if err := dbs[behind].Leave(ctx, behind.String()); err != nil {
		t.Fatal(err)
	}
	beat(ahead, skewTTL, 1)
}
