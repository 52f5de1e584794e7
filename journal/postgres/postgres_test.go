package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/journal/journaltest"
	"github.com/org/gpuprov/journal/postgres"
	"github.com/org/gpuprov/journal/postgres/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

var ctx = context.Background()

// open opens the journal at u and fails t on error.
func open(t *testing.T, u string) *postgres.DB {
	t.Helper()
	db, err := postgres.Open(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	return db
}

func TestConformance(t *testing.T) {
	srv := pgtest.Require(t)
	urls := map[journal.Journal]string{}
	var mu sync.Mutex
	journaltest.RunOpener(t, journaltest.Opener{
		Open: func(t *testing.T) journal.Journal {
			u := srv.NewSchema(t)
			db := open(t, u)
			mu.Lock()
			urls[db] = u
			mu.Unlock()
			return db
		},
		Reopen: func(t *testing.T, j journal.Journal) journal.Journal {
			mu.Lock()
			u := urls[j]
			mu.Unlock()
			db := open(t, u)
			mu.Lock()
			urls[db] = u
			mu.Unlock()
			return db
		},
	})
}

// TestOpenThroughRegistry: both schemes reach the backend.
func TestOpenThroughRegistry(t *testing.T) {
	srv := pgtest.Require(t)
	u := srv.NewSchema(t)
	for _, scheme := range []string{"postgres", "postgresql"} {
		j, err := journal.Open(ctx, scheme+strings.TrimPrefix(u, "postgres"))
		if err != nil {
			t.Fatalf("%s: %v", scheme, err)
		}
		if j.Installation() == "" {
			t.Errorf("%s: empty installation", scheme)
		}
		j.Close()
	}
}

// TestOpenRefuses: what cannot be a journal is refused with an error that
// names the database and says why, never shows the password, and writes
// nothing.
func TestOpenRefuses(t *testing.T) {
	srv := pgtest.Require(t)
	if srv.Password == "" {
		t.Skip("the server's URL carries no password; the credential cases need one")
	}
	for _, tc := range []struct {
		name    string
		url     func(t *testing.T) string
		want    error // nil: any
		message string
	}{
		{"wrong password", func(t *testing.T) string {
			return pgtest.Owner(srv.NewSchema(t), "postgres", "not-the-"+srv.Password)
		}, nil, "check the user and the password"},
		{"unknown user", func(t *testing.T) string {
			return pgtest.Owner(srv.NewSchema(t), "nobody", srv.Password)
		}, nil, "check the user and the password"},
		{"unreachable server", func(t *testing.T) string {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			port := l.Addr().(*net.TCPAddr).Port
			l.Close() // nobody listens there now
			return fmt.Sprintf("postgres://postgres:%s@127.0.0.1:%d/postgres?connect_timeout=2", srv.Password, port)
		}, nil, "cannot connect"},
		{"unknown database", func(t *testing.T) string {
			return strings.Replace(srv.URL, "/postgres?", "/no_such_db?", 1)
		}, nil, "create the database first"},
		{"another program's tables", func(t *testing.T) string {
			u := srv.NewSchema(t)
			if err := srv.ExecURL(ctx, u, "CREATE TABLE users (id INT PRIMARY KEY, name TEXT)", "INSERT INTO users VALUES (1, 'ada')"); err != nil {
				t.Fatal(err)
			}
			return u
		}, postgres.ErrNotJournal, "holds tables users and no gpuprov_meta table"},
		{"a newer journal", func(t *testing.T) string {
			u := srv.NewSchema(t)
			open(t, u).Close()
			if err := srv.ExecURL(ctx, u, "INSERT INTO gpuprov_schema_version VALUES (99, 0)"); err != nil {
				t.Fatal(err)
			}
			return u
		}, postgres.ErrNewerSchema, "schema version 99"},
		{"no schema", func(t *testing.T) string {
			return pgtest.WithParam(srv.URL, "search_path", "no_such_schema")
		}, postgres.ErrNoSchema, "none of the schemas in search_path"},
		{"not a postgres URL", func(t *testing.T) string {
			return "mysql://root:" + srv.Password + "@localhost/db"
		}, nil, "not a postgres:// or postgresql:// URL"},
		{"bad parameter", func(t *testing.T) string {
			return srv.URL + "&sslmode=bogus"
		}, nil, "sslmode"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := tc.url(t)
			before := snapshot(t, srv, u)
			_, err := postgres.Open(ctx, u)
			if err == nil {
				t.Fatal("Open succeeded")
			}
			msg := err.Error()
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Errorf("err = %v, want %v", err, tc.want)
			}
			// Only a server that does not answer is unreachable: the
			// other refusals will not pass by waiting.
			down := tc.name == "unreachable server"
			if errors.Is(err, journal.ErrUnreachable) != down || strings.Contains(msg, "journal unreachable") != down {
				t.Errorf("err = %q: errors.Is(err, journal.ErrUnreachable) = %v, want %v, and the text saying so",
					msg, errors.Is(err, journal.ErrUnreachable), down)
			}
			if !strings.Contains(msg, tc.message) {
				t.Errorf("err = %q, want it to say %q", msg, tc.message)
			}
			if strings.Contains(msg, srv.Password) {
				t.Errorf("the error shows the password: %q", msg)
			}
			if strings.Contains(msg, "\n") {
				t.Errorf("err = %q, want one line (a log line, a CLI's message)", msg)
			}
			if !strings.HasPrefix(msg, "journal/postgres: ") {
				t.Errorf("err = %q, want it to start with journal/postgres: and name the database", msg)
			}
			var ce *pgconn.ConnectError
			if errors.As(err, &ce) {
				t.Errorf("the error chain holds a *pgconn.ConnectError, whose Config has the password")
			}
			if after := snapshot(t, srv, u); after != before {
				t.Errorf("Open wrote to the database:\nbefore %s\nafter  %s", before, after)
			}
		})
	}
}

// snapshot describes the tables of the schema u names and their row
// counts, or "" when u cannot be read as the superuser.
func snapshot(t *testing.T, srv *pgtest.Server, u string) string {
	t.Helper()
	db, err := pgxConnect(pgtest.Owner(u, "postgres", srv.Password))
	if err != nil {
		return ""
	}
	defer db.Close(ctx)
	rows, err := db.Query(ctx, `SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = current_schema() AND c.relkind = 'r' ORDER BY 1`)
	if err != nil {
		return ""
	}
	var names []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	rows.Close()
	var b strings.Builder
	for _, name := range names {
		var n int64
		if err := db.QueryRow(ctx, "SELECT count(*) FROM "+name).Scan(&n); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s:%d ", name, n)
	}
	return b.String()
}

// TestConcurrentFirstOpen: replicas opening one new journal at once all
// succeed, with one installation id and one schema.
func TestConcurrentFirstOpen(t *testing.T) {
	srv := pgtest.Require(t)
	u := srv.NewSchema(t)
	const n = 8
	ids := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			db, err := postgres.Open(ctx, u)
			if err != nil {
				errs[i] = err
				return
			}
			ids[i] = db.Installation()
			db.Close()
		})
	}
	close(start)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if id != ids[0] {
			t.Fatalf("installation ids differ: %q", ids)
		}
	}
	db := open(t, u)
	defer db.Close()
	if db.Installation() != ids[0] {
		t.Errorf("installation after reopen %q, want %q", db.Installation(), ids[0])
	}
}

// TestSeparateDatabase: a journal in a database of its own (the common
// deployment), created on the default search_path.
func TestSeparateDatabase(t *testing.T) {
	srv := pgtest.Require(t)
	u := srv.NewDatabase(t)
	db := open(t, u)
	defer db.Close()
	if strings.Contains(db.Name(), srv.Password) || strings.Contains(db.Name(), "?") {
		t.Errorf("Name() = %q shows the password or the query", db.Name())
	}
	v := journal.VM{Name: "vm-a", State: journal.StatePending, CreatedAt: time.Unix(0, 1)}
	if err := db.Commit(ctx, &journal.Step{Create: &v}); err != nil {
		t.Fatal(err)
	}
}

// TestErrorsNameTheDatabase: a runtime error names the database and never
// the password.
func TestErrorsNameTheDatabase(t *testing.T) {
	srv := pgtest.Require(t)
	db := open(t, srv.NewSchema(t))
	defer db.Close()
	_, err := db.GetVM(ctx, "vm-nope")
	if !errors.Is(err, journal.ErrNotFound) || !strings.Contains(err.Error(), db.Name()) || strings.Contains(err.Error(), srv.Password) {
		t.Errorf("GetVM of an unknown VM: %v; want ErrNotFound naming %s and not the password", err, db.Name())
	}
}
