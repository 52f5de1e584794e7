package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"time"

	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/journal/internal/member"
	"github.com/org/gpuprov/journal/internal/rowcodec"
)

var _ journal.Members = (*DB)(nil)

// countMembers counts, for each account of the JSON list ?2, the members
// whose row is live at ?1 and lists it.
const countMembers = `SELECT a.value, count(DISTINCT m.member) FROM members m, json_each(m.accounts) a
	WHERE m.expiry > ?1 AND a.value IN (SELECT value FROM json_each(?2)) GROUP BY a.value`

// Beat writes member's row, live until expiry by the callers' clock (this
// backend has no journal.LeaseClock: every process on the file reads the
// same host's clock), and returns, for each of accounts, how many members
// whose row is live at now list it, member included; see journal.Members.
// The write and the count are one write transaction.
func (d *DB) Beat(ctx context.Context, name string, accounts []string, now, expiry time.Time) (map[string]int, error) {
	accounts, err := member.Check(name, accounts, expiry)
	if err != nil {
		return nil, d.errorf("%w", err)
	}
	exp, err := rowcodec.Time("expiry", expiry)
	if err != nil {
		return nil, d.errorf("beat as %s: %w", name, err)
	}
	list, err := json.Marshal(accounts)
	if err != nil {
		return nil, d.errorf("beat as %s: %w", name, err)
	}
	counts := map[string]int{}
	err = d.writeTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, sqlStmts.UpsertMember, name, string(list), exp); err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, countMembers, rowcodec.CmpTime(now), string(list))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				a string
				n int
			)
			if err := rows.Scan(&a, &n); err != nil {
				return err
			}
			counts[a] = n
		}
		return rows.Err()
	})
	if err != nil {
		return nil, d.errorf("beat as %s: %w", name, err)
	}
	return member.Live(accounts, counts), nil
}

// Leave deletes member's row; see journal.Members.
func (d *DB) Leave(ctx context.Context, name string) error {
	err := d.writeTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, sqlStmts.DeleteMember, name)
		return err
	})
	if err != nil {
		return d.errorf("leave as %s: %w", name, err)
	}
	return nil
}
