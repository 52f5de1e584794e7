package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/journal/internal/offerstat"
	"github.com/org/gpuprov/journal/internal/rowcodec"
)

// GetVM returns the VM named name, or an error wrapping journal.ErrNotFound.
func (d *DB) GetVM(ctx context.Context, name string) (journal.VM, error) {
	v, err := codec.ScanVM(d.db.QueryRowContext(ctx, sqlStmts.GetVM, name))
	if errors.Is(err, sql.ErrNoRows) {
		return journal.VM{}, d.errorf("VM %s: %w", name, journal.ErrNotFound)
	}
	if err != nil {
		return journal.VM{}, d.errorf("get VM %s: %w", name, err)
	}
	return v, nil
}

// ListVMs returns the VMs matching opts, ordered by name. No match is an
// empty result, not an error.
func (d *DB) ListVMs(ctx context.Context, opts journal.ListOptions) ([]journal.VM, error) {
	q, args, none := sqlStmts.ListVMs(opts)
	if none {
		return []journal.VM{}, nil
	}
	vms, err := query(ctx, d.db, q, args, codec.ScanVM)
	if err != nil {
		return nil, d.errorf("list VMs: %w", err)
	}
	return vms, nil
}

// Attempts returns the attempts of the VM named vm, ordered by N; none (and
// no error) for a VM the journal does not hold.
func (d *DB) Attempts(ctx context.Context, vm string) ([]journal.Attempt, error) {
	as, err := query(ctx, d.db, sqlStmts.ListAttempts, []any{vm}, codec.ScanAttempt)
	if err != nil {
		return nil, d.errorf("attempts of VM %s: %w", vm, err)
	}
	return as, nil
}

// Events returns the events matching q in Seq order. A negative Limit is
// treated as no limit.
func (d *DB) Events(ctx context.Context, q journal.EventQuery) ([]journal.Event, error) {
	s, args := sqlStmts.ListEvents(q)
	es, err := query(ctx, d.db, s, args, codec.ScanEvent)
	if err != nil {
		return nil, d.errorf("events: %w", err)
	}
	return es, nil
}

// Blocks returns the blocks whose Until is after now, ordered by Key.
func (d *DB) Blocks(ctx context.Context, now time.Time) ([]journal.Block, error) {
	bs, err := query(ctx, d.db, sqlStmts.LiveBlocks, []any{rowcodec.CmpTime(now)}, codec.ScanBlock)
	if err != nil {
		return nil, d.errorf("blocks: %w", err)
	}
	return bs, nil
}

// query runs q and scans every row with scan.
func query[T any](ctx context.Context, db *sql.DB, q string, args []any, scan func(rowcodec.Scanner) (T, error)) ([]T, error) {
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// OfferStats implements journal.OfferHistory. It reads the history in
// one statement, so the counters and the percentiles are of one moment.
func (d *DB) OfferStats(ctx context.Context) (map[string]journal.OfferStats, error) {
	rows, err := query(ctx, d.db, sqlStmts.ListOfferStats, nil, func(s rowcodec.Scanner) (offerstat.Row, error) { return offerstat.Scan(s) })
	if err != nil {
		return nil, d.errorf("offer history: %w", err)
	}
	return offerstat.Merge(rows), nil
}

var _ journal.Volumes = (*DB)(nil)

// GetVolume implements journal.Volumes: the volume named name, or an error
// wrapping journal.ErrNotFound.
func (d *DB) GetVolume(ctx context.Context, name string) (journal.Volume, error) {
	v, err := codec.ScanVolume(d.db.QueryRowContext(ctx, sqlStmts.GetVolume, name))
	if errors.Is(err, sql.ErrNoRows) {
		return journal.Volume{}, d.errorf("volume %s: %w", name, journal.ErrNotFound)
	}
	if err != nil {
		return journal.Volume{}, d.errorf("get volume %s: %w", name, err)
	}
	return v, nil
}

// ListVolumes implements journal.Volumes: the volumes matching opts,
// ordered by name. No match is an empty result, not an error.
func (d *DB) ListVolumes(ctx context.Context, opts journal.VolumeListOptions) ([]journal.Volume, error) {
	q, args := sqlStmts.ListVolumes(opts)
	vs, err := query(ctx, d.db, q, args, codec.ScanVolume)
	if err != nil {
		return nil, d.errorf("list volumes: %w", err)
	}
	return vs, nil
}
