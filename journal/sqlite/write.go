package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/journal/internal/step"
)

// maxBatch bounds how many Steps one transaction commits together.
const maxBatch = 256

// errClosed is returned by calls on a closed DB.
var errClosed = errors.New("journal is closed")

// commitReq is one Commit waiting for the writer.
type commitReq struct {
	ctx   context.Context
	p     *step.Prepared
	state atomic.Int32 // reqQueued, then reqTaken by the writer or reqAbandoned by the caller
	res   step.Result
	err   error
	done  chan struct{} // closed when res and err are final
}

const (
	reqQueued int32 = iota
	reqTaken
	reqAbandoned
)

// Commit applies s atomically and durably: all of it is on disk when Commit
// returns nil, and none of it when it returns an error. See journal.Step
// for the meaning of each part. The parts run in the order Create, Update,
// Volumes, Attempts, Blocks, Lifts, Outcomes, Events, so a Step may create
// a VM and write its first attempt. Beyond journal.Step:
//
//   - An Update of an unknown VM fails with journal.ErrNotFound.
//   - An Attempt of a VM the journal does not hold (after the Step's Create)
//     fails the Step with journal.ErrNotFound.
//   - A Block replaces the stored one of its Key unless its Until is earlier.
//   - A non-empty JSON field that is not valid JSON, or a time outside the
//     storable range, fails the Step before anything is written.
//
// The fields Commit sets in s (Create.Version, Update.Version,
// Update.LeaseExpiry, Volumes[i].Volume.Version, Events[i].Seq) are set
// only when it returns nil.
//
// Concurrent Commits are grouped: one writer goroutine commits the Steps
// waiting for it in one transaction (one sync to disk), each Step inside its
// own savepoint, so a Step that fails (ErrConflict, say) is rolled back alone
// and the others commit. A failure of the transaction itself (an I/O error,
// a lock held by another process past BusyTimeout) fails every Step of the
// group. ctx bounds the wait for the writer; once the writer has started on
// the Step, Commit waits for its outcome.
func (d *DB) Commit(ctx context.Context, s *journal.Step) error {
	if s == nil {
		return d.errorf("commit: nil Step")
	}
	p, err := runner.Prepare(s)
	if err != nil {
		return d.errorf("commit: %w", err)
	}
	if p.Empty() {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return d.errorf("commit: %w", err)
	}
	r := &commitReq{ctx: ctx, p: p, done: make(chan struct{})}
	select {
	case d.reqs <- r:
	case <-ctx.Done():
		return d.errorf("commit: %w", ctx.Err())
	case <-d.stop:
		return d.errorf("commit: %w", errClosed)
	}
	select {
	case <-r.done:
	case <-ctx.Done():
		if r.state.CompareAndSwap(reqQueued, reqAbandoned) {
			return d.errorf("commit: %w", ctx.Err())
		}
		<-r.done // the writer has it: its outcome is on its way
	case <-d.writerDone:
		// Queued after the writer's last look at the queue.
		if r.state.CompareAndSwap(reqQueued, reqAbandoned) {
			return d.errorf("commit: %w", errClosed)
		}
		<-r.done // closed before writerDone was
	}
	if r.err != nil {
		return d.errorf("commit: %w", r.err)
	}
	p.WriteBack(r.res)
	return nil
}

// writer commits the queued Steps, in groups, until stop is closed. Close
// waits for it.
func (d *DB) writer() {
	defer close(d.writerDone)
	for {
		var first *commitReq
		select {
		case first = <-d.reqs:
		case <-d.stop:
			d.failQueued()
			return
		}
		d.received.Add(1)
		// Steps that arrive while the write lock is busy join the group.
		_ = d.lockWrite(context.Background()) // cannot fail without a deadline
		batch := []*commitReq{first}
	drain:
		for len(batch) < maxBatch {
			select {
			case r := <-d.reqs:
				batch = append(batch, r)
			default:
				break drain
			}
		}
		d.commitBatch(batch)
		d.unlockWrite()
	}
}

// failQueued fails the Steps still queued when the DB closes.
func (d *DB) failQueued() {
	for {
		select {
		case r := <-d.reqs:
			if r.state.CompareAndSwap(reqQueued, reqTaken) {
				r.err = errClosed
			}
			close(r.done)
		default:
			return
		}
	}
}

// commitBatch applies each Step of batch in its own savepoint of one
// transaction, commits, and reports each Step's outcome. A Step is taken
// from its caller only when its turn comes, so a caller whose context ends
// while the transaction waits for another process's lock can still give up.
// The caller holds the write lock.
func (d *DB) commitBatch(batch []*commitReq) {
	d.batches.Add(1)
	var taken []*commitReq
	take := func(r *commitReq) bool {
		if r.state.CompareAndSwap(reqQueued, reqTaken) {
			taken = append(taken, r)
			return true
		}
		close(r.done) // abandoned: nobody waits for it
		return false
	}
	defer func() {
		for _, r := range taken {
			close(r.done)
		}
	}()
	// Statements run on a context that is never cancelled: interrupting a
	// statement can roll back the whole transaction, every Step of the group
	// with it. Each Step's own context is checked before it starts.
	ctx := context.Background()
	conn, err := d.db.Conn(ctx)
	var tx *sql.Tx
	if err == nil {
		defer conn.Close()
		tx, err = conn.BeginTx(ctx, nil)
	}
	if err != nil {
		for _, r := range batch {
			if take(r) {
				r.err = err
			}
		}
		return
	}
	q := newTxStmts(ctx, tx, d.stmts)
	var applied []*commitReq
	for _, r := range batch {
		if !take(r) {
			continue
		}
		if r.err = r.ctx.Err(); r.err != nil {
			continue
		}
		if _, err := q.exec(d.stmts.savepoint); err != nil {
			d.abortBatch(tx, batch, taken, fmt.Errorf("savepoint: %w", err))
			return
		}
		r.res, r.err = apply(q, r.p)
		if r.err != nil {
			if _, err := q.exec(d.stmts.rollbackTo); err != nil {
				// SQLite rolled back the whole transaction on r's error.
				d.abortBatch(tx, batch, taken, fmt.Errorf("transaction aborted by another step's error (%v): %w", r.err, err))
				return
			}
		} else {
			applied = append(applied, r)
		}
		if _, err := q.exec(d.stmts.release); err != nil {
			d.abortBatch(tx, batch, taken, fmt.Errorf("release savepoint: %w", err))
			return
		}
	}
	if len(applied) == 0 {
		_ = tx.Rollback() // nothing was written
		return
	}
	if err := tx.Commit(); err != nil {
		rollbackOpen(ctx, conn)
		for _, r := range applied {
			r.err = fmt.Errorf("transaction: %w", err)
		}
	}
}

// rollbackOpen rolls back what a failed COMMIT may have left open on conn.
// SQLite keeps the transaction open after some failures of COMMIT (a full
// disk, an I/O error, a busy lock: "applications should respond to these
// errors by explicitly issuing a ROLLBACK", sqlite.org/lang_transaction.html),
// and database/sql would hand the connection, still inside it, to the next
// caller: its reads would see that transaction's snapshot from then on, and
// its writes would fail. Where SQLite rolled back already, the ROLLBACK
// fails harmlessly.
func rollbackOpen(ctx context.Context, conn *sql.Conn) {
	_, _ = conn.ExecContext(ctx, "ROLLBACK")
}

// abortBatch rolls tx back and fails every Step of the group with err: the
// ones taken already, and the ones not yet taken unless their caller gave up.
// commitBatch's deferred loop reports them.
func (d *DB) abortBatch(tx *sql.Tx, batch, taken []*commitReq, err error) {
	_ = tx.Rollback() // err says what went wrong; a failed rollback loses nothing more
	for _, r := range taken {
		r.err = err
	}
	for _, r := range batch {
		if r.state.CompareAndSwap(reqQueued, reqTaken) {
			r.err = err
			close(r.done)
		}
	}
}

// writeTx runs f in a write transaction (BEGIN IMMEDIATE) under this
// process's write lock, and commits it when f returns nil.
func (d *DB) writeTx(ctx context.Context, f func(*sql.Tx) error) error {
	if err := d.lockWrite(ctx); err != nil {
		return err
	}
	defer d.unlockWrite()
	conn, err := d.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := f(tx); err != nil {
		_ = tx.Rollback() // f's error says what went wrong; the rollback cannot lose data
		return err
	}
	if err := tx.Commit(); err != nil {
		rollbackOpen(context.WithoutCancel(ctx), conn)
		return err
	}
	return nil
}
