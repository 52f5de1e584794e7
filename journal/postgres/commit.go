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
	"github.com/org/gpuprov/journal/internal/step"
	"github.com/org/gpuprov/journal/internal/stmt"
)

// sqlStmts are the statements of the tables this backend shares with the
// SQLite one (see package stmt), in PostgreSQL's dialect.
// A Create with an Owner stores its lease as the database's clock plus its
// length (journal.LeaseClock).
var sqlStmts = stmt.New(stmt.Dialect{Param: stmt.Dollar, Prefix: "gpuprov_", LockRow: " FOR UPDATE",
	Collate: ` COLLATE "C"`, In: stmt.Any, Now: dbNow})

// runner prepares and applies Steps (see package step). A Create's SELECT
// ... FOR UPDATE locks an existing row until the transaction ends; a
// concurrent insert of the same new name fails on the primary key, which is
// journal.ErrExists too.
var runner = &step.Runner{Codec: codec, SQL: sqlStmts, NoRows: pgx.ErrNoRows, LeaseClock: true, Duplicate: func(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505" // unique_violation
}}

// appendEvents takes the next n Seqs from the one-row counter and inserts
// the n events with them, in one statement: each parameter is one column
// of the events (see eventArrays). The UPDATE locks the counter row until
// the transaction ends, so appends are serialized and Seq order is commit
// order (see the package documentation).
var appendEvents = appendEventsSQL()

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

// maxTries bounds how often Commit runs a Step whose transaction the server
// aborted as a deadlock or serialization failure (rolled back, so safe to
// run again).
const maxTries = 5

// commitTimeout bounds the COMMIT statement, which runs detached from the
// caller's context (see Commit).
const commitTimeout = 30 * time.Second

// Commit applies s atomically and durably, in one transaction: all of it is
// committed when Commit returns nil, and none of it when it returns an
// error (but see below for a failed COMMIT). The parts run in the order
// Create, Update, Volumes, Attempts, Blocks, Lifts, Outcomes, Events, so a
// Step may create a VM and write its first attempt. Beyond journal.Step:
//
//   - An Update of an unknown VM fails with journal.ErrNotFound; two Creates
//     of one new name racing from two processes: one gets journal.ErrExists
//     (the same for volumes).
//   - Volume updates racing from several replicas serialize on the
//     volume's row lock, and each re-checks its Version and the one-VM
//     rule (journal.VolumeWrite) against the row the winner wrote: of
//     attaches of one volume to different VMs, one succeeds.
//   - An Attempt of a VM the journal does not hold (after the Step's Create)
//     fails the Step with journal.ErrNotFound.
//   - A Block replaces the stored one of its Key unless its Until is earlier.
//   - A non-empty JSON field that is not valid JSON, or a time outside the
//     storable range, fails the Step before anything is sent.
//
// A Create with an Owner and a LeaseExpiry holds its lease for LeaseExpiry −
// CreatedAt from the database's clock (see journal.LeaseClock; a zero
// CreatedAt is refused), and Commit sets Create.LeaseExpiry to the expiry
// stored. The fields Commit sets in s (Create.Version, that
// Create.LeaseExpiry, Update.Version, Update.LeaseExpiry,
// Volumes[i].Volume.Version, Events[i].Seq) are set only when it returns
// nil.
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
	p, err := runner.Prepare(s)
	if err != nil {
		return d.errorf("commit: %w", err)
	}
	if p.Empty() {
		return nil
	}
	for try := 1; ; try++ {
		if err := ctx.Err(); err != nil {
			return d.errorf("commit: %w", err)
		}
		r, err := d.commitOnce(ctx, p)
		if err == nil {
			p.WriteBack(r)
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
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// commitOnce runs the Step in one transaction. Its last round trip sends
// the event append and the COMMIT together (one pipelined batch), so the
// event counter's row lock, which serializes appends, is held for one round
// trip and the commit's flush only.
func (d *DB) commitOnce(ctx context.Context, p *step.Prepared) (step.Result, error) {
	var r step.Result
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
	if r, err = runner.Apply(connTx{ctx, conn}, p); err != nil {
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
	if len(p.Events) > 0 {
		b.Queue(appendEvents, eventArrays(p.Events)...)
	}
	b.Queue("COMMIT")
	br := conn.SendBatch(cctx, b)
	if len(p.Events) > 0 {
		rows, err := br.Query()
		if err == nil {
			r.Seqs, err = pgx.CollectRows(rows, pgx.RowTo[int64])
		}
		if err == nil && len(r.Seqs) != len(p.Events) {
			err = fmt.Errorf("%d Seqs returned", len(r.Seqs))
		}
		if err != nil {
			_ = br.Close() // the append's error is the one to report; the COMMIT was skipped
			return r, fmt.Errorf("append %d events: %w", len(p.Events), err)
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

// connTx runs a Step's statements on a connection inside BEGIN: the
// step.Tx of commitOnce.
type connTx struct {
	ctx  context.Context
	conn dbtx
}

func (t connTx) Exec(query string, args ...any) error {
	_, err := t.conn.Exec(t.ctx, query, args...)
	return err
}

func (t connTx) QueryRow(query string, args ...any) rowcodec.Scanner {
	return t.conn.QueryRow(t.ctx, query, args...)
}
