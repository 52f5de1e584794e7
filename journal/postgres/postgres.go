package postgres

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/org/gpuprov/journal"
)

// Pool limits applied unless the URL sets them (pool_max_conns,
// pool_max_conn_lifetime, pool_max_conn_idle_time, connect_timeout).
const (
	// DefaultMaxConns bounds the connections one journal handle opens. A
	// Commit holds one connection for one transaction; the engine's
	// concurrency beyond it waits in the pool, not in the server.
	DefaultMaxConns = 16
	// DefaultConnectTimeout bounds dialing and authenticating one
	// connection.
	DefaultConnectTimeout = 10 * time.Second
	// LeaseConns is the size of the second, small pool that serves
	// Acquire, Renew and Release, so a heartbeat never waits for a
	// connection behind a queue of Commits.
	LeaseConns             = 2
	defaultMaxConnLifetime = 30 * time.Minute
	defaultMaxConnIdleTime = 5 * time.Minute
)

func init() {
	open := func(ctx context.Context, u string) (journal.Journal, error) {
		db, err := Open(ctx, u)
		if err != nil {
			return nil, err // not db: a nil *DB in an interface is not nil
		}
		return db, nil
	}
	journal.Register("postgres", open)
	journal.Register("postgresql", open)
}

// DB is a journal in a PostgreSQL database. It implements journal.Journal
// and is safe for concurrent use by many goroutines, and by many processes
// on many machines sharing the database.
type DB struct {
	name         string        // the URL without password or query: for messages
	password     string        // scrubbed from every message
	pool         *pgxpool.Pool // Commits and reads
	lpool        *pgxpool.Pool // Acquire, Renew, Release: never behind Commits
	installation string
}

var _ journal.Journal = (*DB)(nil)

// Open opens the journal in the PostgreSQL database named by rawURL
// ("postgres://user@host:5432/db?sslmode=verify-full", or "postgresql://").
// It creates the journal's tables when the connection's current schema has
// none, and migrates an older journal. It refuses, writing nothing, a schema
// that holds another program's tables (ErrNotJournal), a journal with a
// newer schema (ErrNewerSchema) and a search_path naming no existing schema
// (ErrNoSchema). Wrong credentials and an unreachable server fail here, not
// on first use. Every error names the database, never the password. The
// caller must Close the DB.
func Open(ctx context.Context, rawURL string) (*DB, error) {
	name, err := describe(rawURL)
	if err != nil {
		return nil, err
	}
	cfg, err := pgxpool.ParseConfig(rawURL)
	if err != nil {
		return nil, fmt.Errorf("journal/postgres: %s: %w", name, redact(err, passwordIn(rawURL)))
	}
	d := &DB{name: name, password: cfg.ConnConfig.Password}
	applyDefaults(cfg, rawURL)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, d.errorf("%w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, d.errorf("cannot connect: %w%s", err, hint(err))
	}
	id, err := setup(ctx, pool)
	if err != nil {
		pool.Close()
		return nil, d.errorf("%w", err)
	}
	lcfg := cfg.Copy()
	lcfg.MaxConns, lcfg.MinConns = LeaseConns, 0
	lpool, err := pgxpool.NewWithConfig(ctx, lcfg)
	if err != nil {
		pool.Close()
		return nil, d.errorf("%w", err)
	}
	d.pool, d.lpool, d.installation = pool, lpool, id
	return d, nil
}

// applyDefaults sets the pool limits the URL leaves unset.
func applyDefaults(cfg *pgxpool.Config, rawURL string) {
	q := url.Values{}
	if u, err := url.Parse(rawURL); err == nil {
		q = u.Query()
	}
	if !q.Has("pool_max_conns") {
		cfg.MaxConns = DefaultMaxConns
	}
	if !q.Has("pool_max_conn_lifetime") {
		cfg.MaxConnLifetime = defaultMaxConnLifetime
	}
	if !q.Has("pool_max_conn_idle_time") {
		cfg.MaxConnIdleTime = defaultMaxConnIdleTime
	}
	if !q.Has("connect_timeout") && cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = DefaultConnectTimeout
	}
	if cfg.ConnConfig.RuntimeParams["application_name"] == "" {
		cfg.ConnConfig.RuntimeParams["application_name"] = "gpuprov"
	}
}

// describe returns how messages name the database of rawURL: scheme, user,
// hosts and database, without password or query.
func describe(rawURL string) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		// url's error quotes the URL, password and all: say less.
		return "", errors.New("journal/postgres: not a postgres:// or postgresql:// URL (want postgres://user@host:5432/database)")
	}
	n := url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path}
	if u.User != nil {
		n.User = url.User(u.User.Username())
	}
	return n.String(), nil
}

// passwordIn returns the password rawURL carries in its user info or its
// password parameter, or "".
func passwordIn(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return ""
	}
	if p, ok := u.User.Password(); ok && p != "" {
		return p
	}
	return u.Query().Get("password")
}

// redacted is a driver error whose text had the password scrubbed out. It
// keeps only the parts of the chain that hold no secret (a server error, a
// context error): pgx's connect and parse errors carry the configuration,
// password included, so they are not reachable through it.
type redacted struct {
	msg   string
	cause error
}

func (e *redacted) Error() string { return e.msg }
func (e *redacted) Unwrap() error { return e.cause }

// redact returns err with password scrubbed from its text; errors that may
// carry the connection's configuration are cut from the chain.
func redact(err error, password string) error {
	if err == nil {
		return nil
	}
	var ce *pgconn.ConnectError
	var pe *pgconn.ParseConfigError
	risky := errors.As(err, &ce) || errors.As(err, &pe)
	msg := err.Error()
	if password != "" && strings.Contains(msg, password) {
		msg = strings.ReplaceAll(msg, password, "xxxxx")
		risky = true
	}
	if !risky {
		return err
	}
	r := &redacted{msg: oneLine(msg)}
	var srv *pgconn.PgError
	switch {
	case errors.As(err, &srv):
		r.cause = srv
	case errors.Is(err, context.Canceled):
		r.cause = context.Canceled
	case errors.Is(err, context.DeadlineExceeded):
		r.cause = context.DeadlineExceeded
	}
	return r
}

// oneLine joins the lines of a connect error (pgx puts each host and
// fallback it tried on a line of its own, often the same line twice) into
// one, each distinct line once, so a log line or a CLI's message stays one.
func oneLine(msg string) string {
	head, rest, ok := strings.Cut(msg, "\n")
	if !ok {
		return msg
	}
	var seen []string
	for _, l := range strings.Split(rest, "\n") {
		if l = strings.TrimSpace(l); l != "" && !slices.Contains(seen, l) {
			seen = append(seen, l)
		}
	}
	return strings.TrimSuffix(strings.TrimSpace(head), ":") + ": " + strings.Join(seen, "; ")
}

// hint explains the connect failures operators meet most.
func hint(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "28P01", "28000":
			return " (check the user and the password: in the URL, PGPASSWORD or ~/.pgpass)"
		case "3D000":
			return " (create the database first: CREATE DATABASE ...)"
		}
	}
	return ""
}

// errorf formats an error naming the database, with the password scrubbed
// from every wrapped driver error. An error that says the server cannot be
// reached now (see unreachable) also wraps journal.ErrUnreachable, and its
// text says "journal unreachable".
func (d *DB) errorf(format string, args ...any) error {
	down := false
	for i, a := range args {
		if err, ok := a.(error); ok {
			down = down || unreachable(err)
			args[i] = redact(err, d.password)
		}
	}
	if down {
		return fmt.Errorf("journal/postgres: %s: %w: "+format, append([]any{d.name, journal.ErrUnreachable}, args...)...)
	}
	return fmt.Errorf("journal/postgres: %s: "+format, append([]any{d.name}, args...)...)
}

// Name returns the database as messages name it: the URL without password
// or query parameters.
func (d *DB) Name() string { return d.name }

// Installation returns the id created with the journal: 16 hex digits,
// never changing.
func (d *DB) Installation() string { return d.installation }

// Close closes the connection pool, waiting for the calls in progress to
// return their connections. Calls after Close fail.
func (d *DB) Close() error {
	d.pool.Close()
	d.lpool.Close()
	return nil
}
