// Package pgtest gives tests a private PostgreSQL server: initdb into a
// temporary folder, pg_ctl start on a free loopback port, a fresh schema
// (or database) per test, and pg_ctl stop at the end. One server is shared
// by a whole test binary: start it from TestMain with Main.
//
//	func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }
//
//	func TestSomething(t *testing.T) {
//		url := pgtest.Require(t).NewSchema(t) // postgres://...?search_path=t_...
//		j, err := postgres.Open(ctx, url)
//		...
//	}
//
// When the environment variable GPUPROV_TEST_POSTGRES holds a URL, that
// server is used instead (each test gets a schema of its own there, dropped
// at its end). When no server can be had, Require skips the test with the
// reason, or fails it when the environment variable CI is set, so a CI
// machine never passes by skipping.
//
// As root, initdb and the server run as the postgres system user (initdb
// refuses root). The server keeps fsync on: the journal's durability is
// what is under test.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// EnvURL names the environment variable that points the tests at an
// existing server instead of a private one.
const EnvURL = "GPUPROV_TEST_POSTGRES"

// Server is a PostgreSQL server tests create schemas and databases in.
type Server struct {
	// URL is a superuser URL of the server's "postgres" database, password
	// included.
	URL string
	// Password is the superuser's password ("" for an external server whose
	// URL carries none).
	Password string

	dir, bin, data string // private servers only
	external       bool
	mu             sync.Mutex
	n              int
}

var (
	shared    *Server
	sharedErr error
)

// Main starts the shared server (unless GPUPROV_TEST_POSTGRES is set), runs
// the tests and stops the server; it returns m.Run's exit code. A server
// that fails to start is not fatal here: Require reports it per test.
func Main(m *testing.M) int {
	if u := os.Getenv(EnvURL); u != "" {
		shared = &Server{URL: u, external: true}
		if pu, err := url.Parse(u); err == nil {
			shared.Password, _ = pu.User.Password()
		}
	} else {
		shared, sharedErr = Start()
	}
	code := m.Run()
	if shared != nil {
		if err := shared.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: stopping the server: %v\n", err)
		}
	}
	return code
}

// Require returns the shared server, or ends t: a skip naming why there is
// none, or, when the environment variable CI is set, a failure.
func Require(t testing.TB) *Server {
	t.Helper()
	if shared != nil {
		return shared
	}
	reason := "pgtest.Main did not run (call it from TestMain)"
	if sharedErr != nil {
		reason = sharedErr.Error()
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("no PostgreSQL server for the tests (CI is set, so this fails instead of skipping): %s", reason)
	}
	t.Skipf("no PostgreSQL server (set %s to a server's URL, or install the PostgreSQL server binaries): %s", EnvURL, reason)
	return nil
}

// binDir finds the PostgreSQL server binaries: the newest
// /usr/lib/postgresql/*/bin with initdb, else initdb on PATH.
func binDir() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	sort.Slice(dirs, func(i, k int) bool { return version(dirs[i]) > version(dirs[k]) })
	if len(dirs) > 0 {
		return filepath.Dir(dirs[0]), nil
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), nil
	}
	return "", errors.New("no initdb in /usr/lib/postgresql/*/bin or on PATH (Debian: apt-get install postgresql)")
}

func version(initdb string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(initdb))))
	return v
}

// Start initializes and starts a private server on a free loopback port. Its
// superuser "postgres" logs in over TCP with a random password (SCRAM); the
// server's Unix socket lives in its temporary folder.
func Start() (*Server, error) {
	bin, err := binDir()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "gpuprov-pg-")
	if err != nil {
		return nil, err
	}
	s := &Server{dir: dir, bin: bin, data: filepath.Join(dir, "data"), Password: randomHex(12)}
	if err := s.start(); err != nil {
		_ = os.RemoveAll(dir) // the start error is the one to report
		return nil, err
	}
	return s, nil
}

func (s *Server) start() error {
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return fmt.Errorf("running as root and there is no postgres user to run the server as: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(s.dir, uid, gid); err != nil {
			return err
		}
	}
	pwfile := filepath.Join(s.dir, "pw")
	if err := os.WriteFile(pwfile, []byte(s.Password+"\n"), 0o600); err != nil {
		return err
	}
	if err := s.chownToPostgres(pwfile); err != nil {
		return err
	}
	out, err := s.run("initdb", "-D", s.data, "-U", "postgres", "--pwfile="+pwfile, "--auth-local=trust",
		"--auth-host=scram-sha-256", "--no-sync", "-E", "UTF8", "--locale=C")
	_ = os.Remove(pwfile) // read by initdb; nothing to lose
	if err != nil {
		return fmt.Errorf("initdb: %w\n%s", err, out)
	}
	var lastErr error
	for try := 0; try < 5; try++ {
		port, err := freePort()
		if err != nil {
			return err
		}
		opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=on -c max_connections=300", port, s.dir)
		out, err := s.run("pg_ctl", "-D", s.data, "-o", opts, "-l", filepath.Join(s.dir, "log"), "-w", "-t", "60", "start")
		if err == nil {
			s.URL = fmt.Sprintf("postgres://postgres:%s@127.0.0.1:%d/postgres?sslmode=disable", s.Password, port)
			return nil
		}
		log, _ := os.ReadFile(filepath.Join(s.dir, "log"))
		lastErr = fmt.Errorf("pg_ctl start: %w\n%s\n%s", err, out, log)
	}
	return lastErr
}

func (s *Server) chownToPostgres(path string) error {
	if os.Geteuid() != 0 {
		return nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return err
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return os.Chown(path, uid, gid)
}

// run runs a server binary, as the postgres user when this process is root.
func (s *Server) run(name string, args ...string) ([]byte, error) {
	path := filepath.Join(s.bin, name)
	var cmd *exec.Cmd
	if os.Geteuid() == 0 {
		cmd = exec.Command("runuser", append([]string{"-u", "postgres", "--", path}, args...)...)
	} else {
		cmd = exec.Command(path, args...)
	}
	cmd.Dir = s.dir
	return cmd.CombinedOutput()
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on supported platforms
	return hex.EncodeToString(b)
}

// Stop stops a private server and removes its folder; for an external
// server it does nothing.
func (s *Server) Stop() error {
	if s.external {
		return nil
	}
	out, err := s.run("pg_ctl", "-D", s.data, "-m", "fast", "-w", "stop")
	if err != nil {
		return fmt.Errorf("pg_ctl stop: %w\n%s", err, out)
	}
	return os.RemoveAll(s.dir)
}

// Exec runs statements on the server's postgres database as the superuser.
func (s *Server) Exec(ctx context.Context, stmts ...string) error {
	return s.ExecURL(ctx, s.URL, stmts...)
}

// ExecURL runs statements on the database of u.
func (s *Server) ExecURL(ctx context.Context, u string, stmts ...string) error {
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		return fmt.Errorf("pgtest: connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for _, st := range stmts {
		if _, err := conn.Exec(ctx, st); err != nil {
			return fmt.Errorf("pgtest: %s: %w", st, err)
		}
	}
	return nil
}

// name returns a new unique identifier with prefix.
func (s *Server) name(prefix string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n++
	return fmt.Sprintf("%s_%d_%s", prefix, s.n, randomHex(3))
}

// WithParam returns u with the query parameter k set to v.
func WithParam(u, k, v string) string {
	pu, err := url.Parse(u)
	if err != nil {
		return u
	}
	q := pu.Query()
	q.Set(k, v)
	pu.RawQuery = q.Encode()
	return pu.String()
}

// NewSchema creates an empty schema and returns the server's URL with
// search_path set to it: a journal store of its own, cheap to make. On an
// external server the schema is dropped when t ends.
func (s *Server) NewSchema(t testing.TB) string {
	t.Helper()
	name := s.name("t")
	ctx := context.Background()
	if err := s.Exec(ctx, "CREATE SCHEMA "+name); err != nil {
		t.Fatal(err)
	}
	if s.external {
		t.Cleanup(func() {
			if err := s.Exec(context.Background(), "DROP SCHEMA "+name+" CASCADE"); err != nil {
				t.Errorf("dropping schema %s: %v", name, err)
			}
		})
	}
	return WithParam(s.URL, "search_path", name)
}

// NewDatabase creates an empty database and returns its URL; on an external
// server it is dropped when t ends. Databases cost more than schemas
// (CREATE DATABASE copies a template and checkpoints).
func (s *Server) NewDatabase(t testing.TB) string {
	t.Helper()
	name := s.name("db")
	ctx := context.Background()
	if err := s.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	if s.external {
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := s.Exec(ctx, "DROP DATABASE "+name+" WITH (FORCE)"); err != nil {
				t.Errorf("dropping database %s: %v", name, err)
			}
		})
	}
	pu, _ := url.Parse(s.URL)
	pu.Path = "/" + name
	return pu.String()
}

// Owner returns the URL u with its user and password replaced.
func Owner(u, user, password string) string {
	pu, err := url.Parse(u)
	if err != nil {
		return u
	}
	if password == "" {
		pu.User = url.User(user)
	} else {
		pu.User = url.UserPassword(user, password)
	}
	return pu.String()
}
