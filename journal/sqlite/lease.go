package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"time"

	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/journal/internal/rowcodec"
)

// acquireVM takes the lease in one conditional statement: free, already
// ours, expired (a zero expiry is expired), or held by a dead owner.
const acquireVM = `UPDATE vms SET owner = ?1, lease_expiry = ?2
	WHERE name = ?3 AND (owner = '' OR owner = ?1 OR lease_expiry IS NULL OR lease_expiry <= ?4
		OR owner IN (SELECT value FROM json_each(?5)))
	RETURNING ` + rowcodec.VMCols

// Acquire makes owner the lease holder of the VM named name until expiry and
// returns the VM as stored; see journal.Journal. A lease is live while now is
// before its expiry: at its expiry it may be taken over. Acquire fails with
// journal.ErrNotFound for an unknown VM, with a *journal.LeasedError when a
// live owner holds the lease, and with an error for an empty owner. It
// changes neither Version nor any other field.
func (d *DB) Acquire(ctx context.Context, name, owner string, now, expiry time.Time, dead ...string) (journal.VM, error) {
	if owner == "" {
		return journal.VM{}, d.errorf("acquire VM %s: empty owner", name)
	}
	exp, err := rowcodec.Time("expiry", expiry)
	if err != nil {
		return journal.VM{}, d.errorf("acquire VM %s: %w", name, err)
	}
	deadJSON, err := json.Marshal(append([]string{}, dead...))
	if err != nil {
		return journal.VM{}, d.errorf("acquire VM %s: %w", name, err)
	}
	var v journal.VM
	err = d.writeTx(ctx, func(tx *sql.Tx) error {
		var err error
		v, err = codec.ScanVM(tx.QueryRowContext(ctx, acquireVM, owner, exp, name, rowcodec.CmpTime(now), string(deadJSON)))
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		le := &journal.LeasedError{VM: name}
		var lease *int64
		err = tx.QueryRowContext(ctx, "SELECT owner, lease_expiry FROM vms WHERE name = ?", name).Scan(&le.Owner, &lease)
		if errors.Is(err, sql.ErrNoRows) {
			return journal.ErrNotFound
		}
		if err != nil {
			return err
		}
		le.Expiry = rowcodec.GoTime(lease)
		return le
	})
	if err != nil {
		return journal.VM{}, d.errorf("acquire VM %s as %s: %w", name, owner, err)
	}
	return v, nil
}

// Renew extends to expiry the leases owner holds on names, in one
// statement, and returns, in the order given, the names whose lease owner
// does not hold (unknown names included). It changes no other field.
func (d *DB) Renew(ctx context.Context, owner string, now, expiry time.Time, names []string) ([]string, error) {
	if owner == "" {
		return nil, d.errorf("renew: empty owner")
	}
	if len(names) == 0 {
		return nil, nil
	}
	exp, err := rowcodec.Time("expiry", expiry)
	if err != nil {
		return nil, d.errorf("renew: %w", err)
	}
	namesJSON, err := json.Marshal(names)
	if err != nil {
		return nil, d.errorf("renew: %w", err)
	}
	held := map[string]bool{}
	err = d.writeTx(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, `UPDATE vms SET lease_expiry = ?
			WHERE owner = ? AND name IN (SELECT value FROM json_each(?)) RETURNING name`, exp, owner, string(namesJSON))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var n string
			if err := rows.Scan(&n); err != nil {
				return err
			}
			held[n] = true
		}
		return rows.Err()
	})
	if err != nil {
		return nil, d.errorf("renew leases of %s: %w", owner, err)
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
	err := d.writeTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "UPDATE vms SET owner = '', lease_expiry = NULL WHERE name = ? AND owner = ?", name, owner)
		return err
	})
	if err != nil {
		return d.errorf("release VM %s as %s: %w", name, owner, err)
	}
	return nil
}
