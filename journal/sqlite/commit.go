package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/org/gpuprov/journal/internal/rowcodec"
	"github.com/org/gpuprov/journal/internal/step"
	"github.com/org/gpuprov/journal/internal/stmt"
)

// sqlStmts are the statements of the tables this backend shares with the
// PostgreSQL one (see package stmt), in SQLite's dialect.
var sqlStmts = stmt.New(stmt.Dialect{Param: stmt.Numbered})

// runner prepares and applies Steps (see package step). SQLite serializes
// writers, so a Create never races another on a new name.
var runner = &step.Runner{Codec: codec, SQL: sqlStmts, NoRows: sql.ErrNoRows}

// insertEvent appends one event; SQLite assigns its Seq (AUTOINCREMENT, so
// a Seq is never reused).
var insertEvent = "INSERT INTO events (" + rowcodec.EventWriteCols + ") VALUES (" + placeholders(len(rowcodec.Split(rowcodec.EventWriteCols))) + ")"

// stmts are the statements Steps run, prepared once (database/sql prepares
// them again on each connection that first uses them): parsing SQL is most
// of a Step's CPU time otherwise.
type stmts struct {
	bySQL                          map[string]*sql.Stmt
	savepoint, rollbackTo, release *sql.Stmt
}

func prepareStmts(ctx context.Context, db *sql.DB) (*stmts, error) {
	st := &stmts{bySQL: map[string]*sql.Stmt{}}
	for _, q := range append(sqlStmts.Step(), insertEvent, "SAVEPOINT step", "ROLLBACK TO step", "RELEASE step") {
		s, err := db.PrepareContext(ctx, q)
		if err != nil {
			st.close()
			return nil, fmt.Errorf("prepare %q: %w", q, err)
		}
		st.bySQL[q] = s
	}
	st.savepoint, st.rollbackTo, st.release = st.bySQL["SAVEPOINT step"], st.bySQL["ROLLBACK TO step"], st.bySQL["RELEASE step"]
	return st, nil
}

// close closes the prepared statements.
func (st *stmts) close() {
	for _, s := range st.bySQL {
		_ = s.Close() // closing a statement frees memory; there is nothing to lose
	}
}

// txStmts binds prepared statements to one transaction, once each. It is
// the step.Tx of a Step's statements.
type txStmts struct {
	ctx   context.Context
	tx    *sql.Tx
	st    *stmts
	bound map[*sql.Stmt]*sql.Stmt
}

func newTxStmts(ctx context.Context, tx *sql.Tx, st *stmts) *txStmts {
	return &txStmts{ctx: ctx, tx: tx, st: st, bound: map[*sql.Stmt]*sql.Stmt{}}
}

// Exec runs the prepared statement of query.
func (q *txStmts) Exec(query string, args ...any) error {
	_, err := q.exec(q.prepared(query), args...)
	return err
}

// QueryRow runs the prepared statement of query.
func (q *txStmts) QueryRow(query string, args ...any) rowcodec.Scanner {
	return q.stmt(q.prepared(query)).QueryRowContext(q.ctx, args...)
}

func (q *txStmts) exec(s *sql.Stmt, args ...any) (sql.Result, error) {
	return q.stmt(s).ExecContext(q.ctx, args...)
}

// prepared returns the statement prepareStmts prepared for query; a query
// it did not prepare is a bug.
func (q *txStmts) prepared(query string) *sql.Stmt {
	s, ok := q.st.bySQL[query]
	if !ok {
		panic("journal/sqlite: statement not prepared: " + query)
	}
	return s
}

func (q *txStmts) stmt(s *sql.Stmt) *sql.Stmt {
	b, ok := q.bound[s]
	if !ok {
		b = q.tx.StmtContext(q.ctx, s)
		q.bound[s] = b
	}
	return b
}

// apply runs the Step's statements in q's transaction: Create, Update,
// Attempts, Blocks, Lifts (package step), then Events. On error the caller
// must roll back what it ran.
func apply(q *txStmts, p *step.Prepared) (step.Result, error) {
	r, err := runner.Apply(q, p)
	if err != nil {
		return r, err
	}
	for i, args := range p.Events {
		res, err := q.exec(q.prepared(insertEvent), args...)
		var seq int64
		if err == nil {
			seq, err = res.LastInsertId()
		}
		if err != nil {
			e := &p.Step.Events[i]
			return r, fmt.Errorf("event %d (%s of VM %s): %w", i, e.Type, e.VM, err)
		}
		r.Seqs = append(r.Seqs, seq)
	}
	return r, nil
}

// placeholders returns n comma-separated question marks.
func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}
