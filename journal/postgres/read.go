package postgres

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/journal/internal/rowcodec"
)

// GetVM returns the VM named name, or an error wrapping journal.ErrNotFound.
func (d *DB) GetVM(ctx context.Context, name string) (journal.VM, error) {
	v, err := codec.ScanVM(d.pool.QueryRow(ctx, "SELECT "+rowcodec.VMCols+" FROM "+vmsTable+" WHERE name = $1", name))
	if errors.Is(err, pgx.ErrNoRows) {
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
	var (
		where []string
		args  []any
	)
	if states := opts.WantedStates(); states != nil {
		opts.States = states
		if len(states) == 0 {
			return []journal.VM{}, nil
		}
	}
	if len(opts.States) > 0 {
		states := make([]string, len(opts.States))
		for i, s := range opts.States {
			states[i] = string(s)
		}
		args = append(args, states)
		where = append(where, "state = ANY($"+strconv.Itoa(len(args))+")")
	}
	if opts.Cluster != "" {
		args = append(args, opts.Cluster)
		where = append(where, "cluster = $"+strconv.Itoa(len(args)))
	}
	q := "SELECT " + rowcodec.VMCols + " FROM " + vmsTable
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	vms, err := query(ctx, d, q+" ORDER BY name COLLATE \"C\"", args, codec.ScanVM)
	if err != nil {
		return nil, d.errorf("list VMs: %w", err)
	}
	return vms, nil
}

// Attempts returns the attempts of the VM named vm, ordered by N; none (and
// no error) for a VM the journal does not hold.
func (d *DB) Attempts(ctx context.Context, vm string) ([]journal.Attempt, error) {
	as, err := query(ctx, d, "SELECT "+rowcodec.AttemptCols+" FROM "+attemptsTable+" WHERE vm = $1 ORDER BY n", []any{vm}, codec.ScanAttempt)
	if err != nil {
		return nil, d.errorf("attempts of VM %s: %w", vm, err)
	}
	return as, nil
}

// Events returns the events matching q in Seq order. A negative Limit is
// treated as no limit. Because Seqs are handed out in commit order (see the
// package documentation), a reader following the log with After never
// misses an event that commits later.
func (d *DB) Events(ctx context.Context, q journal.EventQuery) ([]journal.Event, error) {
	s := "SELECT " + rowcodec.EventCols + " FROM " + eventsTable + " WHERE seq > $1"
	args := []any{q.After}
	if q.VM != "" {
		args = append(args, q.VM)
		s += " AND vm = $" + strconv.Itoa(len(args))
	}
	s += " ORDER BY seq"
	if q.Limit > 0 {
		args = append(args, q.Limit)
		s += " LIMIT $" + strconv.Itoa(len(args))
	}
	es, err := query(ctx, d, s, args, codec.ScanEvent)
	if err != nil {
		return nil, d.errorf("events: %w", err)
	}
	return es, nil
}

// Blocks returns the blocks whose Until is after now, ordered by Key.
func (d *DB) Blocks(ctx context.Context, now time.Time) ([]journal.Block, error) {
	bs, err := query(ctx, d, "SELECT "+rowcodec.BlockCols+" FROM "+blocksTable+" WHERE until > $1 ORDER BY key COLLATE \"C\"", []any{rowcodec.CmpTime(now)}, codec.ScanBlock)
	if err != nil {
		return nil, d.errorf("blocks: %w", err)
	}
	return bs, nil
}

// query runs q and scans every row with scan.
func query[T any](ctx context.Context, d *DB, q string, args []any, scan func(rowcodec.Scanner) (T, error)) ([]T, error) {
	rows, err := d.pool.Query(ctx, q, args...)
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
