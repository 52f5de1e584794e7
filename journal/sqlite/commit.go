package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/journal/internal/rowcodec"
)

// SQL of the statements a Step runs.
var (
	insertVM = "INSERT INTO vms (" + strings.Join(rowcodec.VMCreateCols, ", ") + ", version) VALUES (" +
		placeholders(len(rowcodec.VMCreateCols)) + ", 1)"
	updateVM = "UPDATE vms SET " + setList(rowcodec.VMWriteCols[1:], "= ?") + ", version = version + 1" +
		" WHERE name = ? AND owner = ? AND version = ? RETURNING version, lease_expiry"
	upsertAttempt = "INSERT INTO attempts (" + rowcodec.AttemptCols + ") VALUES (" + placeholders(len(rowcodec.Split(rowcodec.AttemptCols))) + ")" +
		" ON CONFLICT (vm, n) DO UPDATE SET " + setList(rowcodec.Split(rowcodec.AttemptCols)[2:], "= excluded.%s")
	insertEvent = "INSERT INTO events (" + rowcodec.EventWriteCols + ") VALUES (" + placeholders(len(rowcodec.Split(rowcodec.EventWriteCols))) + ")"
	// A block replaces the stored one unless its Until is earlier (a zero
	// Until is the earliest of all).
	upsertBlock = "INSERT INTO blocks (" + rowcodec.BlockCols + ") VALUES (" + placeholders(len(rowcodec.Split(rowcodec.BlockCols))) + ")" +
		" ON CONFLICT (key) DO UPDATE SET " + setList(rowcodec.Split(rowcodec.BlockCols)[1:], "= excluded.%s") +
		" WHERE blocks.until IS NULL OR excluded.until >= blocks.until"
)

// stmts are the statements Steps run, prepared once (database/sql prepares
// them again on each connection that first uses them): parsing SQL is most
// of a Step's CPU time otherwise.
type stmts struct {
	insertVM, updateVM, vmState, vmOwnerVersion, vmExists, deleteAttempts, deleteVM *sql.Stmt
	upsertAttempt, insertEvent, upsertBlock, savepoint, rollbackTo, release         *sql.Stmt
	releaseLease, liftBlock                                                         *sql.Stmt
}

func prepareStmts(ctx context.Context, db *sql.DB) (*stmts, error) {
	st := &stmts{}
	for _, p := range []struct {
		s   **sql.Stmt
		sql string
	}{
		{&st.insertVM, insertVM},
		{&st.updateVM, updateVM},
		{&st.vmState, "SELECT state FROM vms WHERE name = ?"},
		{&st.vmOwnerVersion, "SELECT owner, version FROM vms WHERE name = ?"},
		{&st.vmExists, "SELECT 1 FROM vms WHERE name = ?"},
		{&st.deleteAttempts, "DELETE FROM attempts WHERE vm = ?"},
		{&st.deleteVM, "DELETE FROM vms WHERE name = ?"},
		{&st.upsertAttempt, upsertAttempt},
		{&st.insertEvent, insertEvent},
		{&st.upsertBlock, upsertBlock},
		{&st.savepoint, "SAVEPOINT step"},
		{&st.rollbackTo, "ROLLBACK TO step"},
		{&st.release, "RELEASE step"},
		{&st.releaseLease, "UPDATE vms SET owner = '', lease_expiry = NULL WHERE name = ?"},
		{&st.liftBlock, "DELETE FROM blocks WHERE key = ? AND created_at < ?"},
	} {
		var err error
		if *p.s, err = db.PrepareContext(ctx, p.sql); err != nil {
			st.close()
			return nil, fmt.Errorf("prepare %q: %w", p.sql, err)
		}
	}
	return st, nil
}

// close closes the prepared statements.
func (st *stmts) close() {
	for _, s := range []*sql.Stmt{st.insertVM, st.updateVM, st.vmState, st.vmOwnerVersion, st.vmExists,
		st.deleteAttempts, st.deleteVM, st.upsertAttempt, st.insertEvent, st.upsertBlock, st.savepoint,
		st.rollbackTo, st.release, st.releaseLease, st.liftBlock} {
		if s != nil {
			_ = s.Close() // closing a statement frees memory; there is nothing to lose
		}
	}
}

// txStmts binds prepared statements to one transaction, once each.
type txStmts struct {
	ctx   context.Context
	tx    *sql.Tx
	bound map[*sql.Stmt]*sql.Stmt
}

func newTxStmts(ctx context.Context, tx *sql.Tx) *txStmts {
	return &txStmts{ctx: ctx, tx: tx, bound: map[*sql.Stmt]*sql.Stmt{}}
}

func (q *txStmts) exec(s *sql.Stmt, args ...any) (sql.Result, error) {
	return q.stmt(s).ExecContext(q.ctx, args...)
}

func (q *txStmts) queryRow(s *sql.Stmt, args ...any) *sql.Row {
	return q.stmt(s).QueryRowContext(q.ctx, args...)
}

func (q *txStmts) stmt(s *sql.Stmt) *sql.Stmt {
	b, ok := q.bound[s]
	if !ok {
		b = q.tx.StmtContext(q.ctx, s)
		q.bound[s] = b
	}
	return b
}

// preparedStep is a Step checked and converted for storage, before any
// database work, so a Step with a bad field fails without touching the file.
type preparedStep struct {
	s        *journal.Step
	create   []any
	update   []any
	attempts [][]any
	events   [][]any
	blocks   [][]any
}

// stepResult is what a Step's transaction produced, written back into the
// Step once the transaction has committed.
type stepResult struct {
	version  int64     // Update's new version
	lease    time.Time // Update's stored lease expiry
	released bool      // Update's lease was freed (Step.ReleaseLease)
	seqs     []int64   // the Events' Seq, in order
}

func prepareStep(s *journal.Step) (*preparedStep, error) {
	p := &preparedStep{s: s}
	var err error
	if v := s.Create; v != nil {
		if v.Name == "" {
			return nil, errors.New("create: VM with empty Name")
		}
		if p.create, err = codec.CreateArgs(v); err != nil {
			return nil, fmt.Errorf("create VM %s: %w", v.Name, err)
		}
	}
	if v := s.Update; v != nil {
		args, err := codec.VMArgs(v)
		if err != nil {
			return nil, fmt.Errorf("update VM %s: %w", v.Name, err)
		}
		p.update = append(args[1:], v.Name, v.Owner, v.Version)
	}
	for i := range s.Attempts {
		a := &s.Attempts[i]
		args, err := codec.AttemptArgs(a)
		if err != nil {
			return nil, fmt.Errorf("attempt %d of VM %s: %w", a.N, a.VM, err)
		}
		p.attempts = append(p.attempts, args)
	}
	for i := range s.Events {
		args, err := codec.EventArgs(&s.Events[i])
		if err != nil {
			return nil, fmt.Errorf("event %d (%s of VM %s): %w", i, s.Events[i].Type, s.Events[i].VM, err)
		}
		p.events = append(p.events, args)
	}
	for i := range s.Blocks {
		args, err := codec.BlockArgs(&s.Blocks[i])
		if err != nil {
			return nil, fmt.Errorf("block %s: %w", s.Blocks[i].Key, err)
		}
		p.blocks = append(p.blocks, args)
	}
	return p, nil
}

// empty reports whether the Step writes nothing.
func (p *preparedStep) empty() bool {
	return p.create == nil && p.update == nil && len(p.attempts)+len(p.events)+len(p.blocks)+len(p.s.Lifts) == 0
}

// apply runs the Step's statements in q's transaction: Create, Update,
// Attempts, Events, Blocks, in that order. On error the caller must roll
// back what it ran.
func (p *preparedStep) apply(q *txStmts, st *stmts) (stepResult, error) {
	var r stepResult
	if v := p.s.Create; v != nil {
		if err := create(q, st, v.Name, p.create); err != nil {
			return r, err
		}
	}
	if v := p.s.Update; v != nil {
		var err error
		if r.version, r.lease, err = update(q, st, v, p.update); err != nil {
			return r, err
		}
		if p.s.ReleaseLease {
			if _, err := q.exec(st.releaseLease, v.Name); err != nil {
				return r, fmt.Errorf("release lease of VM %s: %w", v.Name, err)
			}
			r.lease, r.released = time.Time{}, true
		}
	}
	checked := map[string]bool{}
	for i, args := range p.attempts {
		a := &p.s.Attempts[i]
		if !checked[a.VM] {
			var one int
			err := q.queryRow(st.vmExists, a.VM).Scan(&one)
			if errors.Is(err, sql.ErrNoRows) {
				err = journal.ErrNotFound
			}
			if err != nil {
				return r, fmt.Errorf("attempt %d of VM %s: %w", a.N, a.VM, err)
			}
			checked[a.VM] = true
		}
		if _, err := q.exec(st.upsertAttempt, args...); err != nil {
			return r, fmt.Errorf("attempt %d of VM %s: %w", a.N, a.VM, err)
		}
	}
	for i, args := range p.events {
		res, err := q.exec(st.insertEvent, args...)
		var seq int64
		if err == nil {
			seq, err = res.LastInsertId()
		}
		if err != nil {
			return r, fmt.Errorf("event %d (%s of VM %s): %w", i, p.s.Events[i].Type, p.s.Events[i].VM, err)
		}
		r.seqs = append(r.seqs, seq)
	}
	for i, args := range p.blocks {
		if _, err := q.exec(st.upsertBlock, args...); err != nil {
			return r, fmt.Errorf("block %s: %w", p.s.Blocks[i].Key, err)
		}
	}
	for _, l := range p.s.Lifts {
		if _, err := q.exec(st.liftBlock, l.Key, rowcodec.CmpTime(l.Before)); err != nil {
			return r, fmt.Errorf("lifting block %s: %w", l.Key, err)
		}
	}
	return r, nil
}

// writeBack sets in the Step what its committed transaction produced.
func (p *preparedStep) writeBack(r stepResult) {
	if p.s.Create != nil {
		p.s.Create.Version = 1
	}
	if p.s.Update != nil {
		p.s.Update.Version = r.version
		p.s.Update.LeaseExpiry = r.lease
		if r.released {
			p.s.Update.Owner = ""
		}
	}
	for i, seq := range r.seqs {
		p.s.Events[i].Seq = seq
	}
}

// create inserts a VM, replacing a terminal one of that name (whose attempts
// go; its events stay).
func create(q *txStmts, st *stmts, name string, args []any) error {
	var state string
	err := q.queryRow(st.vmState, name).Scan(&state)
	switch {
	case err == nil && !journal.VMState(state).Terminal():
		return fmt.Errorf("create VM %s: %w (it is %s)", name, journal.ErrExists, state)
	case err == nil:
		if _, err := q.exec(st.deleteAttempts, name); err != nil {
			return fmt.Errorf("create VM %s: remove the %s VM's attempts: %w", name, state, err)
		}
		if _, err := q.exec(st.deleteVM, name); err != nil {
			return fmt.Errorf("create VM %s: remove the %s VM: %w", name, state, err)
		}
	case !errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("create VM %s: %w", name, err)
	}
	if _, err := q.exec(st.insertVM, args...); err != nil {
		return fmt.Errorf("create VM %s: %w", name, err)
	}
	return nil
}

// update writes a VM conditionally on its owner and version, and returns the
// new version and the stored lease expiry.
func update(q *txStmts, st *stmts, v *journal.VM, args []any) (int64, time.Time, error) {
	var (
		version int64
		lease   *int64
	)
	err := q.queryRow(st.updateVM, args...).Scan(&version, &lease)
	if err == nil {
		return version, rowcodec.GoTime(lease), nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return 0, time.Time{}, fmt.Errorf("update VM %s: %w", v.Name, err)
	}
	var owner string
	err = q.queryRow(st.vmOwnerVersion, v.Name).Scan(&owner, &version)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return 0, time.Time{}, fmt.Errorf("update VM %s: %w", v.Name, journal.ErrNotFound)
	case err != nil:
		return 0, time.Time{}, fmt.Errorf("update VM %s: %w", v.Name, err)
	case owner != v.Owner:
		return 0, time.Time{}, fmt.Errorf("update VM %s as %q: %w (the lease holder is %q)", v.Name, v.Owner, journal.ErrLeaseLost, owner)
	default:
		return 0, time.Time{}, fmt.Errorf("update VM %s: %w (stored version %d, given %d)", v.Name, journal.ErrConflict, version, v.Version)
	}
}

// placeholders returns n comma-separated question marks.
func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}

// setList returns "col <assign>, ..." where assign may use %s for the column.
func setList(cols []string, assign string) string {
	parts := make([]string, len(cols))
	for i, c := range cols {
		a := assign
		if strings.Contains(a, "%s") {
			a = fmt.Sprintf(a, c)
		}
		parts[i] = c + " " + a
	}
	return strings.Join(parts, ", ")
}
