package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/journal/internal/rowcodec"
)

// SQL of Prune. prunePick locks one batch of prunable VMs, found through
// the index gpuprov_vms_state_ended, skipping rows another transaction
// holds (a Create replacing the VM, an Acquire): those are left for the
// next Prune. The deletes go through gpuprov_events_vm, the attempts'
// primary key, the VMs' primary key and gpuprov_blocks_until. Volumes go
// in batches of their own, after the VMs': a volume's row does not depend
// on a VM's.
const (
	prunePick = `SELECT name FROM ` + vmsTable + `
		WHERE state IN ('` + string(journal.StateDeleted) + `', '` + string(journal.StateFailed) + `') AND ended_at < $1
			AND (owner = '' OR lease_expiry IS NULL OR lease_expiry <= ` + dbNow + `)
		LIMIT $2 FOR UPDATE SKIP LOCKED`
	pruneEvents   = "DELETE FROM " + eventsTable + " WHERE vm = ANY($1)"
	pruneAttempts = "DELETE FROM " + attemptsTable + " WHERE vm = ANY($1)"
	pruneRows     = "DELETE FROM " + vmsTable + " WHERE name = ANY($1)"
	pruneBlocks   = `DELETE FROM ` + blocksTable + ` WHERE key IN (SELECT key FROM ` + blocksTable + `
		WHERE until IS NULL OR until <= $1 LIMIT $2 FOR UPDATE SKIP LOCKED)`
	// pruneVolumes removes one batch of the volumes deleted before $1,
	// found through gpuprov_volumes_state_ended, skipping rows another
	// transaction holds (a Create replacing the volume).
	pruneVolumes = `DELETE FROM ` + volumesTable + ` WHERE name IN (SELECT name FROM ` + volumesTable + `
		WHERE state = '` + string(journal.VolumeDeleted) + `' AND ended_at < $1 LIMIT $2 FOR UPDATE SKIP LOCKED)`
)

var _ journal.Pruner = (*DB)(nil)

// Prune removes what the journal no longer needs: see journal.Pruner. A
// VM's lease is live or not by the database's clock, as Acquire judges it
// (journal.LeaseClock), whatever opts.Now says; opts.Now bounds the blocks,
// whose times are the callers'. Each batch is one transaction holding row
// locks on the batch's rows only, so Commits and lease calls of every
// replica go on beside it, and replicas pruning at once share the work
// instead of waiting for each other (rows locked by another transaction are
// skipped). A batch the server aborts as a deadlock is run again, up to five
// times. The COMMIT runs detached from ctx (for up to 30s), so a batch's
// outcome is known and counted; if the connection breaks during COMMIT the
// batch may have been removed without being counted.
//
// The space of deleted rows is reclaimed by autovacuum and reused for new
// rows; Prune runs no VACUUM.
func (d *DB) Prune(ctx context.Context, opts journal.PruneOptions) (journal.PruneResult, error) {
	return rowcodec.Prune(ctx, opts, func(ctx context.Context, batch int, res *journal.PruneResult) (int, error) {
		return d.pruneVMBatch(ctx, opts, batch, res)
	}, func(ctx context.Context, batch int) (int, error) {
		return d.pruneExec(ctx, pruneVolumes, rowcodec.CmpTime(opts.Before), batch)
	}, func(ctx context.Context, batch int) (int, error) {
		return d.pruneExec(ctx, pruneBlocks, rowcodec.CmpTime(opts.Now), batch)
	}, d.errorf)
}

// pruneExec runs one batch's DELETE as one statement (its own transaction)
// and returns the number of rows it removed.
func (d *DB) pruneExec(ctx context.Context, q string, args ...any) (int, error) {
	tag, err := d.pool.Exec(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	return int(tag.RowsAffected()), nil
}

// pruneVMBatch removes one batch of at most batch VMs, with their attempts
// and events, in one transaction; once it has committed it adds what it
// removed to res and returns the number of VMs.
func (d *DB) pruneVMBatch(ctx context.Context, opts journal.PruneOptions, batch int, res *journal.PruneResult) (int, error) {
	for try := 1; ; try++ {
		r, err := d.pruneOnce(ctx, opts, batch)
		if err == nil {
			res.VMs, res.Attempts, res.Events = res.VMs+r.VMs, res.Attempts+r.Attempts, res.Events+r.Events
			return r.VMs, nil
		}
		if try < maxTries && retryable(err) && ctx.Err() == nil {
			continue
		}
		return 0, err
	}
}

// pruneOnce runs one batch: lock the VMs, delete their events, attempts
// and rows (one pipelined round trip), commit.
func (d *DB) pruneOnce(ctx context.Context, opts journal.PruneOptions, batch int) (journal.PruneResult, error) {
	var r journal.PruneResult
	tx, err := d.pool.Begin(ctx)
	if err != nil {
		return r, err
	}
	committed := false
	defer func() {
		if !committed {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			_ = tx.Rollback(rctx) // the batch's error says what went wrong; a failed rollback closes the conn
			cancel()
		}
	}()
	rows, err := tx.Query(ctx, prunePick, rowcodec.CmpTime(opts.Before), batch)
	if err != nil {
		return r, err
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(names) == 0 {
		return r, err
	}
	b := &pgx.Batch{}
	for _, q := range []string{pruneEvents, pruneAttempts, pruneRows} {
		b.Queue(q, names)
	}
	br := tx.SendBatch(ctx, b)
	for _, n := range []*int{&r.Events, &r.Attempts, &r.VMs} {
		tag, err := br.Exec()
		if err != nil {
			_ = br.Close() // the delete's error is the one to report
			return journal.PruneResult{}, err
		}
		*n = int(tag.RowsAffected())
	}
	if err := br.Close(); err != nil {
		return journal.PruneResult{}, err
	}
	if err := ctx.Err(); err != nil {
		return journal.PruneResult{}, err
	}
	// From here on the outcome must be learnt, not abandoned: detach.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commitTimeout)
	defer cancel()
	if err := tx.Commit(cctx); err != nil {
		if retryable(err) {
			return journal.PruneResult{}, err
		}
		return journal.PruneResult{}, fmt.Errorf("COMMIT failed; whether the batch was removed is unknown: %w", err)
	}
	committed = true
	return r, nil
}
