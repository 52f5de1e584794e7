package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"

	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/journal/internal/rowcodec"
)

// SQL of Prune. pruneVMs picks one batch of prunable VMs through the index
// vms_state_ended; the deletes go through events_vm, the attempts' primary
// key and the VMs' primary key, and pruneBlocks through blocks_until.
// Volumes go in batches of their own, after the VMs': a volume's row does
// not depend on a VM's.
var (
	pruneVMs = `SELECT name FROM vms
		WHERE state IN ('` + string(journal.StateDeleted) + `', '` + string(journal.StateFailed) + `') AND ended_at < ?1
			AND (owner = '' OR lease_expiry IS NULL OR lease_expiry <= ?2)
		LIMIT ?3`
	pruneEvents   = "DELETE FROM events WHERE vm IN (SELECT value FROM json_each(?))"
	pruneAttempts = "DELETE FROM attempts WHERE vm IN (SELECT value FROM json_each(?))"
	pruneRows     = "DELETE FROM vms WHERE name IN (SELECT value FROM json_each(?))"
	pruneBlocks   = "DELETE FROM blocks WHERE key IN (SELECT key FROM blocks WHERE until IS NULL OR until <= ? LIMIT ?)"
	// pruneVolumes removes one batch of the volumes deleted before ?1,
	// found through volumes_state_ended.
	pruneVolumes = `DELETE FROM volumes WHERE name IN (SELECT name FROM volumes
		WHERE state = '` + string(journal.VolumeDeleted) + `' AND ended_at < ?1 LIMIT ?2)`
)

var _ journal.Pruner = (*DB)(nil)

// Prune removes what the journal no longer needs: see journal.Pruner. Each
// batch is one write transaction (BEGIN IMMEDIATE, synchronous=FULL) taken
// in turn with this process's commit groups, so a Commit waits for at most
// one batch; other processes on the file wait for the write lock as they
// would for any writer.
//
// The file does not shrink: SQLite keeps the freed pages and fills them
// with the rows written next, so a journal pruned regularly stays at the
// size of what its retention keeps. Prune runs no VACUUM, which would
// rewrite the whole file under the write lock (every Commit of every
// process waiting for it); to give the space back to the file system,
// stop the processes using the file and run `sqlite3 journal.db VACUUM`
// (see docs/journal.md for measured figures).
func (d *DB) Prune(ctx context.Context, opts journal.PruneOptions) (journal.PruneResult, error) {
	return rowcodec.Prune(ctx, opts, func(ctx context.Context, batch int, res *journal.PruneResult) (int, error) {
		return d.pruneVMBatch(ctx, opts, batch, res)
	}, func(ctx context.Context, batch int) (int, error) {
		return d.pruneExec(ctx, pruneVolumes, rowcodec.CmpTime(opts.Before), batch)
	}, func(ctx context.Context, batch int) (int, error) {
		return d.pruneExec(ctx, pruneBlocks, rowcodec.CmpTime(opts.Now), batch)
	}, d.errorf)
}

// pruneExec runs one batch's DELETE in its own write transaction and
// returns the number of rows it removed.
func (d *DB) pruneExec(ctx context.Context, q string, args ...any) (int, error) {
	var n int64
	err := d.writeTx(ctx, func(tx *sql.Tx) error {
		r, err := tx.ExecContext(ctx, q, args...)
		if err == nil {
			n, err = r.RowsAffected()
		}
		return err
	})
	return int(n), err
}

// pruneVMBatch removes one batch of at most batch VMs, with their attempts
// and events, in one transaction; once it has committed it adds what it
// removed to res and returns the number of VMs.
func (d *DB) pruneVMBatch(ctx context.Context, opts journal.PruneOptions, batch int, res *journal.PruneResult) (int, error) {
	var vms, attempts, events int64
	err := d.writeTx(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, pruneVMs, rowcodec.CmpTime(opts.Before), rowcodec.CmpTime(opts.Now), batch)
		if err != nil {
			return err
		}
		var names []string
		for rows.Next() {
			var n string
			if err := rows.Scan(&n); err != nil {
				_ = rows.Close() // the Scan error is the one to report
				return err
			}
			names = append(names, n)
		}
		if err := rows.Close(); err != nil {
			return err
		}
		if len(names) == 0 {
			return nil
		}
		list, err := json.Marshal(names)
		if err != nil {
			return err
		}
		for _, del := range []struct {
			sql string
			n   *int64
		}{{pruneEvents, &events}, {pruneAttempts, &attempts}, {pruneRows, &vms}} {
			r, err := tx.ExecContext(ctx, del.sql, string(list))
			if err != nil {
				return err
			}
			if *del.n, err = r.RowsAffected(); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	res.VMs, res.Attempts, res.Events = res.VMs+int(vms), res.Attempts+int(attempts), res.Events+int(events)
	return int(vms), nil
}
