package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/journal/internal/rowcodec"
)

// dbNow is the database's clock in unix nanoseconds, as the journal
// stores times: clock_timestamp(), the time when it is evaluated (not now(),
// the start of the transaction), in whole microseconds, which is all a
// timestamptz holds. extract(epoch ...) is numeric (exact) since
// PostgreSQL 14; on older servers it is a double, off by at most a quarter
// of a microsecond at today's epoch, and the cast to bigint rounds to the
// nearest microsecond, which is then exact.
const dbNow = `((extract(epoch from clock_timestamp()) * 1000000)::bigint * 1000)`

var _ journal.LeaseClock = (*DB)(nil)

// LeaseNow returns the database's clock: the "now" by which Acquire, Renew,
// a Step's Create, Prune and Beat grant and compare leases, in whole
// microseconds. It implements journal.LeaseClock.
func (d *DB) LeaseNow(ctx context.Context) (time.Time, error) {
	var n int64
	if err := d.lpool.QueryRow(ctx, "SELECT "+dbNow).Scan(&n); err != nil {
		return time.Time{}, d.errorf("read the database's clock: %w", err)
	}
	return time.Unix(0, n).UTC(), nil
}

// leaseLength returns the length of the lease a caller asks for, expiry −
// now on its own clock, which the database grants from its clock: nil (no
// lease, stored as NULL) for a zero expiry.
func leaseLength(now, expiry time.Time) (*int64, error) {
	if expiry.IsZero() {
		return nil, nil
	}
	if now.IsZero() {
		return nil, errors.New("zero now: a lease's length is expiry − now")
	}
	n := int64(expiry.Sub(now))
	return &n, nil
}

// acquireVM takes the lease in one conditional UPDATE: free, already ours,
// expired by the database's clock (a NULL expiry is expired), or held by a
// dead owner; the new expiry is the database's clock plus the length asked
// ($2). Two processes acquiring at once serialize on the row lock, and the
// second re-checks the condition against the first one's write (READ
// COMMITTED re-evaluates an UPDATE's WHERE on the newest row version, the
// clock included), so never both win. The row lock lasts one statement's
// transaction: no lock outlives a call.
const acquireVM = `UPDATE ` + vmsTable + ` SET owner = $1, lease_expiry = ` + dbNow + ` + $2
	WHERE name = $3 AND (owner = '' OR owner = $1 OR lease_expiry IS NULL OR lease_expiry <= ` + dbNow + `
		OR owner = ANY($4))
	RETURNING ` + rowcodec.VMCols

// Acquire makes owner the lease holder of the VM named name for expiry −
// now, measured on the database's clock (see journal.LeaseClock), and
// returns the VM as stored, its LeaseExpiry on that clock; see
// journal.Journal. A lease is live while the database's clock is before its
// expiry: at its expiry it may be taken over. The caller's now is used only
// for the length, so replicas whose clocks disagree never both drive a VM.
// Acquire fails with journal.ErrNotFound for an unknown VM, with a
// *journal.LeasedError when a live owner holds the lease, and with an error
// for an empty owner or a zero now. It changes neither Version nor any other
// field.
func (d *DB) Acquire(ctx context.Context, name, owner string, now, expiry time.Time, dead ...string) (journal.VM, error) {
	if owner == "" {
		return journal.VM{}, d.errorf("acquire VM %s: empty owner", name)
	}
	length, err := leaseLength(now, expiry)
	if err != nil {
		return journal.VM{}, d.errorf("acquire VM %s: %w", name, err)
	}
	if err := ctx.Err(); err != nil {
		return journal.VM{}, d.errorf("acquire VM %s as %s: %w", name, owner, err)
	}
	if dead == nil {
		dead = []string{}
	}
	// The lease may change between the failed UPDATE and the read that
	// says who holds it; when the read finds it free after all, try again.
	for try := 0; ; try++ {
		v, err := codec.ScanVM(d.lpool.QueryRow(ctx, acquireVM, owner, length, name, dead))
		if err == nil {
			return v, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return journal.VM{}, d.errorf("acquire VM %s as %s: %w", name, owner, err)
		}
		le := &journal.LeasedError{VM: name}
		var (
			lease *int64
			at    int64
		)
		err = d.lpool.QueryRow(ctx, "SELECT owner, lease_expiry, "+dbNow+" FROM "+vmsTable+" WHERE name = $1", name).Scan(&le.Owner, &lease, &at)
		if errors.Is(err, pgx.ErrNoRows) {
			return journal.VM{}, d.errorf("acquire VM %s as %s: %w", name, owner, journal.ErrNotFound)
		}
		if err != nil {
			return journal.VM{}, d.errorf("acquire VM %s as %s: %w", name, owner, err)
		}
		le.Expiry = rowcodec.GoTime(lease)
		taken := le.Owner != "" && le.Owner != owner && lease != nil && *lease > at
		for _, o := range dead {
			taken = taken && le.Owner != o
		}
		if taken || try >= 3 {
			return journal.VM{}, d.errorf("acquire VM %s as %s: %w", name, owner, error(le))
		}
	}
}

// renewFree extends the leases whose rows no transaction holds at this
// instant; renewRest waits for the others (rows an in-flight Commit of the
// owner has locked). Both are conditional on the owner, and set the
// expiry to the database's clock when each row is written plus the length
// asked ($1).
const (
	renewFree = `WITH free AS (SELECT name FROM ` + vmsTable + ` WHERE owner = $2 AND name = ANY($3)
			FOR NO KEY UPDATE SKIP LOCKED)
		UPDATE ` + vmsTable + ` v SET lease_expiry = ` + dbNow + ` + $1 FROM free WHERE v.name = free.name RETURNING v.name`
	renewRest = `UPDATE ` + vmsTable + ` SET lease_expiry = ` + dbNow + ` + $1 WHERE owner = $2 AND name = ANY($3) RETURNING name`
)

// Renew extends the leases owner holds on names to the database's clock
// plus expiry − now (see journal.LeaseClock) and returns, in the order
// given, the names whose lease owner does not hold (unknown names
// included). It changes no other field. It runs on the handle's lease
// connections, so a heartbeat never queues behind Commits for a connection,
// and it first extends every lease whose row is not locked at that instant
// (SKIP LOCKED), so one row held by a slow transaction cannot hold back
// the others' renewal; the locked ones are extended when their
// transactions end.
func (d *DB) Renew(ctx context.Context, owner string, now, expiry time.Time, names []string) ([]string, error) {
	if owner == "" {
		return nil, d.errorf("renew: empty owner")
	}
	if len(names) == 0 {
		return nil, nil
	}
	length, err := leaseLength(now, expiry)
	if err != nil {
		return nil, d.errorf("renew: %w", err)
	}
	held := make(map[string]bool, len(names))
	renew := func(q string, names []string) error {
		rows, err := d.lpool.Query(ctx, q, length, owner, names)
		if err != nil {
			return err
		}
		renewed, err := pgx.CollectRows(rows, pgx.RowTo[string])
		for _, n := range renewed {
			held[n] = true
		}
		return err
	}
	if err := renew(renewFree, names); err != nil {
		return nil, d.errorf("renew leases of %s: %w", owner, err)
	}
	var rest []string
	for _, n := range names {
		if !held[n] {
			rest = append(rest, n)
		}
	}
	if len(rest) > 0 {
		if err := renew(renewRest, rest); err != nil {
			return nil, d.errorf("renew leases of %s: %w", owner, err)
		}
	}
	var lost []string
	for _, n := range names {
		if !held[n] {
			lost = append(lost, n)
		}
	}
	return lost, nil
}

// Release frees the lease on the VM named name if owner holds it; otherwise,
// for an unknown VM too, it does nothing and returns nil. It changes no
// other field.
func (d *DB) Release(ctx context.Context, name, owner string) error {
	if owner == "" {
		return nil // an empty owner holds no lease
	}
	_, err := d.lpool.Exec(ctx, "UPDATE "+vmsTable+" SET owner = '', lease_expiry = NULL WHERE name = $1 AND owner = $2", name, owner)
	if err != nil {
		return d.errorf("release VM %s as %s: %w", name, owner, err)
	}
	return nil
}
