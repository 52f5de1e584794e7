package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/journal/internal/member"
)

var _ journal.Members = (*DB)(nil)

// countOthers counts, for each account of $1, the members other than $2
// whose row is live by the database's clock and lists it.
const countOthers = `SELECT a, count(o.member) FROM unnest($1::text[]) AS a
	LEFT JOIN ` + membersTable + ` o ON o.member <> $2 AND a = ANY(o.accounts) AND o.expiry > ` + dbNow + `
	GROUP BY a`

// Beat writes member's row, live for expiry − now from the database's clock
// (journal.LeaseClock, as for leases), and returns, for each of accounts,
// how many members whose row is live by that clock list it, member
// included (when expiry is after now); see journal.Members. The write and
// the count go in one round trip, as one transaction, on the handle's lease
// connections, so a beat never waits behind Commits.
func (d *DB) Beat(ctx context.Context, name string, accounts []string, now, expiry time.Time) (map[string]int, error) {
	accounts, err := member.Check(name, accounts, expiry)
	if err != nil {
		return nil, d.errorf("%w", err)
	}
	length, err := leaseLength(now, expiry)
	if err != nil {
		return nil, d.errorf("beat as %s: %w", name, err)
	}
	b := &pgx.Batch{}
	b.Queue(sqlStmts.UpsertMember, name, accounts, length)
	b.Queue(countOthers, accounts, name)
	br := d.lpool.SendBatch(ctx, b)
	counts := map[string]int{}
	_, err = br.Exec()
	if err == nil {
		var rows pgx.Rows
		if rows, err = br.Query(); err == nil {
			var (
				a string
				n int
			)
			_, err = pgx.ForEachRow(rows, []any{&a, &n}, func() error {
				counts[a] = n
				if *length > 0 {
					counts[a]++ // the caller's own row, live
				}
				return nil
			})
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, d.errorf("beat as %s: %w", name, err)
	}
	return member.Live(accounts, counts), nil
}

// Leave deletes member's row; see journal.Members.
func (d *DB) Leave(ctx context.Context, name string) error {
	if _, err := d.lpool.Exec(ctx, sqlStmts.DeleteMember, name); err != nil {
		return d.errorf("leave as %s: %w", name, err)
	}
	return nil
}
