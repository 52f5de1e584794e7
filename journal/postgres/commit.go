package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/journal/internal/rowcodec"
)

// SQL of the statements a Step runs.
var (
	insertVM = "INSERT INTO " + vmsTable + " (" + strings.Join(rowcodec.VMCreateCols, ", ") + ", version) VALUES (" +
		params(1, len(rowcodec.VMCreateCols)) + ", 1)"
	// updateVM writes every column but the lease columns, conditional on
	// owner and version; with $n+4 it frees the lease in the same statement.
	updateVM = "UPDATE " + vmsTable + " SET " + assignments(rowcodec.VMWriteCols[1:], 1) + ", version = version + 1" +
		fmt.Sprintf(", owner = CASE WHEN $%[1]d THEN '' ELSE owner END, lease_expiry = CASE WHEN $%[1]d THEN NULL ELSE lease_expiry END", len(rowcodec.VMWriteCols)+3) +
		fmt.Sprintf(" WHERE name = $%d AND owner = $%d AND version = $%d RETURNING version, lease_expiry", len(rowcodec.VMWriteCols), len(rowcodec.VMWriteCols)+1, len(rowcodec.VMWriteCols)+2)
	upsertAttempt = "INSERT INTO " + attemptsTable + " (" + rowcodec.AttemptCols + ") VALUES (" + params(1, len(rowcodec.Split(rowcodec.AttemptCols))) + ")" +
		" ON CONFLICT (vm, n) DO UPDATE SET " + excludedList(rowcodec.Split(rowcodec.AttemptCols)[2:])
	// A block replaces the stored one unless its Until is earlier (a zero
	// Until is the earliest of all).
	upsertBlock = "INSERT INTO " + blocksTable + " (" + rowcodec.BlockCols + ") VALUES (" + params(1, len(rowcodec.Split(rowcodec.BlockCols))) + ")" +
		" ON CONFLICT (key) DO UPDATE SET " + excludedList(rowcodec.Split(rowcodec.BlockCols)[1:]) +
		" WHERE " + blocksTable + ".until IS NULL OR excluded.until >= " + blocksTable + ".until"
	liftBlock = "DELETE FROM " + blocksTable + " WHERE key = $1 AND created_at < $2"
	// appendEvents takes the next n Seqs from the one-row counter and
	// inserts the n events with them, in one statement: each parameter is
	// one column of the events (see eventArrays). The UPDATE locks the
	// counter row until the transaction ends, so appends are serialized and
	// Seq order is commit order (see the package documentation).
	appendEvents = appendEventsSQL()
)

// appendEventsSQL builds appendEvents from rowcodec.EventWriteCols and the
// Go types of codec.EventArgs, so a new event column needs no change here.
func appendEventsSQL() string {
	cols := rowcodec.Split(rowcodec.EventWriteCols)
	zero, _ := codec.EventArgs(&journal.Event{}) // the zero Event converts without error
	arrays := make([]string, len(zero))
	sel := make([]string, len(zero))
	for i, v := range zero {
		arrays[i] = fmt.Sprintf("$%d::%s[]", i+1, sqlType(v))
		sel[i] = "e." + cols[i]
	}
	return `WITH c AS (UPDATE ` + seqTable + ` SET last = last + cardinality(` + arrays[0] + `) RETURNING last)
		INSERT INTO ` + eventsTable + ` (` + rowcodec.EventCols + `)
		SELECT c.last - cardinality(` + arrays[0] + `) + e.ord, ` + strings.Join(sel, ", ") + `
		FROM c, unnest(` + strings.Join(arrays, ", ") + `)
			WITH ORDINALITY AS e(` + strings.Join(cols, ", ") + `, ord)
		ORDER BY e.ord
		RETURNING seq`
}

// sqlType is the column type of a value of codec.EventArgs.
func sqlType(v any) string {
	switch v.(type) {
	case *int64:
		return "bigint"
	case int:
		return "int"
	case string:
		return "text"
	}
	panic(fmt.Sprintf("journal/postgres: no SQL array type for an event column of Go type %T", v))
}

// eventArrays turns the rows of codec.EventArgs (at least one) into the
// parameters of appendEvents: one typed array per column.
func eventArrays(rows [][]any) []any {
	out := make([]any, len(rows[0]))
	for c := range out {
		switch rows[0][c].(type) {
		case *int64:
			a := make([]*int64, len(rows))
			for r := range rows {
				a[r] = rows[r][c].(*int64)
			}
			out[c] = a
		case int:
			a := make([]int32, len(rows))
			for r := range rows {
				a[r] = int32(rows[r][c].(int))
			}
			out[c] = a
		case string:
			a := make([]string, len(rows))
			for r := range rows {
				a[r] = rows[r][c].(string)
			}
			out[c] = a
		default:
			panic(fmt.Sprintf("journal/postgres: no SQL array type for an event column of Go type %T", rows[0][c]))
		}
	}
	return out
}

// excludedList returns "col = excluded.col, ...".
func excludedList(cols []string) string {
	parts := make([]string, len(cols))
	for i, c := range cols {
		parts[i] = c + " = excluded." + c
	}
	return strings.Join(parts, ", ")
}

// maxTries bounds how often Commit runs a Step whose transaction the server
// aborted as a deadlock or serialization failure (rolled back, so safe to
// run again).
const maxTries = 5

// commitTimeout bounds the COMMIT statement, which runs detached from the
// caller's context (see Commit).
const commitTimeout = 30 * time.Second

// preparedStep is a Step checked and converted for storage, before any
// database work, so a Step with a bad field fails without a round trip.
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
	if v := s.Create; v != nil {
		if v.Name == "" {
			return nil, errors.New("create: VM with empty Name")
		}
		args, err := codec.CreateArgs(v)
		if err != nil {
			return nil, fmt.Errorf("create VM %s: %w", v.Name, err)
		}
		p.create = args
	}
	if v := s.Update; v != nil {
		args, err := codec.VMArgs(v)
		if err != nil {
			return nil, fmt.Errorf("update VM %s: %w", v.Name, err)
		}
		p.update = append(args[1:], v.Name, v.Owner, v.Version, s.ReleaseLease)
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
		e := &s.Events[i]
		args, err := codec.EventArgs(e)
		if err != nil {
			return nil, fmt.Errorf("event %d (%s of VM %s): %w", i, e.Type, e.VM, err)
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

// Commit applies s atomically and durably, in one transaction: all of it is
// committed when Commit returns nil, and none of it when it returns an
// error (but see below for a failed COMMIT). The parts run in the order
// Create, Update, Attempts, Blocks, Events, so a Step may create a VM and
// write its first attempt. Beyond journal.Step:
//
//   - An Update of an unknown VM fails with journal.ErrNotFound; two Creates
//     of one new name racing from two processes: one gets journal.ErrExists.
//   - An Attempt of a VM the journal does not hold (after the Step's Create)
//     fails the Step with journal.ErrNotFound.
//   - A Block replaces the stored one of its Key unless its Until is earlier.
//   - A non-empty JSON field that is not valid JSON, or a time outside the
//     storable range, fails the Step before anything is sent.
//
// The fields Commit sets in s (Create.Version, Update.Version,
// Update.LeaseExpiry, Events[i].Seq) are set only when it returns nil.
//
// ctx bounds every statement but the COMMIT itself, which runs detached
// from ctx (for up to 30s): a caller that gives up while the commit is in
// flight learns its real outcome instead of an ambiguous cancellation. A
// transaction the server aborts as a deadlock or serialization failure is
// run again, up to five times. If the connection breaks during COMMIT the
// outcome is unknown and the error says so; the engine treats it as a
// failed journal write and leaves the VM to Recover.
func (d *DB) Commit(ctx context.Context, s *journal.Step) error {
	if s == nil {
		return d.errorf("commit: nil Step")
	}
	p, err := prepareStep(s)
	if err != nil {
		return d.errorf("commit: %w", err)
	}
	if p.empty() {
		return nil
	}
	for try := 1; ; try++ {
		if err := ctx.Err(); err != nil {
			return d.errorf("commit: %w", err)
		}
		r, err := d.commitOnce(ctx, p)
		if err == nil {
			p.writeBack(r)
			return nil
		}
		if try < maxTries && retryable(err) {
			continue
		}
		return d.errorf("commit: %w", err)
	}
}

// retryable reports a transaction the server rolled back as a deadlock or a
// serialization failure.
func retryable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40P01" || pe.Code == "40001")
}

// dbtx is what a Step's statements run on: a connection inside BEGIN.
type dbtx interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// commitOnce runs the Step in one transaction. Its last round trip sends
// the event append and the COMMIT together (one pipelined batch), so the
// event counter's row lock, which serializes appends, is held for one round
// trip and the commit's flush only.
func (d *DB) commitOnce(ctx context.Context, p *preparedStep) (stepResult, error) {
	var r stepResult
	conn, err := d.pool.Acquire(ctx)
	if err != nil {
		return r, err
	}
	// A connection released inside a failed transaction is closed by the
	// pool rather than reused; the explicit ROLLBACK below keeps it.
	defer conn.Release()
	if _, err := conn.Exec(ctx, "BEGIN"); err != nil {
		return r, err
	}
	committed := false
	defer func() {
		if !committed {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			_, _ = conn.Exec(rctx, "ROLLBACK") // the Step's error says what went wrong; a failed rollback closes the conn
			cancel()
		}
	}()
	if r, err = p.apply(ctx, conn); err != nil {
		if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
			err = fmt.Errorf("%w (%w)", cerr, err)
		}
		return r, err
	}
	if err := ctx.Err(); err != nil {
		return r, err
	}
	// From here on the outcome must be learnt, not abandoned: detach.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commitTimeout)
	defer cancel()
	b := &pgx.Batch{}
	if len(p.events) > 0 {
		b.Queue(appendEvents, eventArrays(p.events)...)
	}
	b.Queue("COMMIT")
	br := conn.SendBatch(cctx, b)
	if len(p.events) > 0 {
		rows, err := br.Query()
		if err == nil {
			r.seqs, err = pgx.CollectRows(rows, pgx.RowTo[int64])
		}
		if err == nil && len(r.seqs) != len(p.events) {
			err = fmt.Errorf("%d Seqs returned", len(r.seqs))
		}
		if err != nil {
			_ = br.Close() // the append's error is the one to report; the COMMIT was skipped
			return r, fmt.Errorf("append %d events: %w", len(p.events), err)
		}
	}
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	switch {
	case err != nil && retryable(err):
		return r, err
	case err != nil:
		return r, fmt.Errorf("COMMIT failed; whether the Step was committed is unknown: %w", err)
	case tag.String() != "COMMIT":
		return r, fmt.Errorf("COMMIT answered %q: the transaction was rolled back", tag.String())
	}
	committed = true
	return r, nil
}

// apply runs the Step's statements but the event append in tx.
func (p *preparedStep) apply(ctx context.Context, tx dbtx) (stepResult, error) {
	var r stepResult
	if v := p.s.Create; v != nil {
		if err := create(ctx, tx, v.Name, p.create); err != nil {
			return r, err
		}
	}
	if v := p.s.Update; v != nil {
		var err error
		if r.version, r.lease, err = update(ctx, tx, v, p.update); err != nil {
			return r, err
		}
		if p.s.ReleaseLease {
			r.lease, r.released = time.Time{}, true
		}
	}
	if len(p.attempts) > 0 {
		if err := checkVMs(ctx, tx, p.s.Attempts); err != nil {
			return r, err
		}
		for i, args := range p.attempts {
			if _, err := tx.Exec(ctx, upsertAttempt, args...); err != nil {
				a := &p.s.Attempts[i]
				return r, fmt.Errorf("attempt %d of VM %s: %w", a.N, a.VM, err)
			}
		}
	}
	for i, args := range p.blocks {
		if _, err := tx.Exec(ctx, upsertBlock, args...); err != nil {
			return r, fmt.Errorf("block %s: %w", p.s.Blocks[i].Key, err)
		}
	}
	for _, l := range p.s.Lifts {
		if _, err := tx.Exec(ctx, liftBlock, l.Key, rowcodec.CmpTime(l.Before)); err != nil {
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
// go; its events stay). The existing row is locked (FOR UPDATE) until the
// transaction ends; a concurrent insert of the same new name fails on the
// primary key, which is ErrExists too.
func create(ctx context.Context, tx dbtx, name string, args []any) error {
	var state string
	err := tx.QueryRow(ctx, "SELECT state FROM "+vmsTable+" WHERE name = $1 FOR UPDATE", name).Scan(&state)
	switch {
	case err == nil && !journal.VMState(state).Terminal():
		return fmt.Errorf("create VM %s: %w (it is %s)", name, journal.ErrExists, state)
	case err == nil:
		if _, err := tx.Exec(ctx, "DELETE FROM "+attemptsTable+" WHERE vm = $1", name); err != nil {
			return fmt.Errorf("create VM %s: remove the %s VM's attempts: %w", name, state, err)
		}
		if _, err := tx.Exec(ctx, "DELETE FROM "+vmsTable+" WHERE name = $1", name); err != nil {
			return fmt.Errorf("create VM %s: remove the %s VM: %w", name, state, err)
		}
	case !errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("create VM %s: %w", name, err)
	}
	if _, err := tx.Exec(ctx, insertVM, args...); err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "23505" { // unique_violation: another transaction created it
			return fmt.Errorf("create VM %s: %w (created concurrently by another writer)", name, journal.ErrExists)
		}
		return fmt.Errorf("create VM %s: %w", name, err)
	}
	return nil
}

// update writes a VM conditionally on its owner and version, and returns the
// new version and the stored lease expiry.
func update(ctx context.Context, tx dbtx, v *journal.VM, args []any) (int64, time.Time, error) {
	var (
		version int64
		lease   *int64
	)
	err := tx.QueryRow(ctx, updateVM, args...).Scan(&version, &lease)
	if err == nil {
		return version, rowcodec.GoTime(lease), nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return 0, time.Time{}, fmt.Errorf("update VM %s: %w", v.Name, err)
	}
	var owner string
	err = tx.QueryRow(ctx, "SELECT owner, version FROM "+vmsTable+" WHERE name = $1", v.Name).Scan(&owner, &version)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return 0, time.Time{}, fmt.Errorf("update VM %s: %w", v.Name, journal.ErrNotFound)
	case err != nil:
		return 0, time.Time{}, fmt.Errorf("update VM %s: %w", v.Name, err)
	case owner != v.Owner:
		return 0, time.Time{}, fmt.Errorf("update VM %s as %q: %w (the lease holder is %q)", v.Name, v.Owner, journal.ErrLeaseLost, owner)
	default:
		return 0, time.Time{}, fmt.Errorf("update VM %s: %w (stored version %d, given %d)", v.Name, journal.ErrConflict, version, v.Version)
	}
}

// checkVMs fails with ErrNotFound if an attempt names a VM the journal does
// not hold. (The foreign key from attempts to VMs holds the VM's key until
// the transaction ends; this check only names the error.)
func checkVMs(ctx context.Context, tx dbtx, as []journal.Attempt) error {
	want := map[string]bool{}
	var names []string
	for _, a := range as {
		if !want[a.VM] {
			want[a.VM] = true
			names = append(names, a.VM)
		}
	}
	rows, err := tx.Query(ctx, "SELECT name FROM "+vmsTable+" WHERE name = ANY($1)", names)
	if err != nil {
		return fmt.Errorf("attempts: %w", err)
	}
	found, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("attempts: %w", err)
	}
	for _, n := range found {
		delete(want, n)
	}
	for _, a := range as {
		if want[a.VM] {
			return fmt.Errorf("attempt %d of VM %s: %w", a.N, a.VM, journal.ErrNotFound)
		}
	}
	return nil
}
