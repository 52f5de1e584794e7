package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/org/gpuprov/journal"
	msqlite "modernc.org/sqlite" // also registers the database/sql driver "sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// BusyTimeout is how long a statement waits for another process's write
// lock before failing with SQLITE_BUSY.
const BusyTimeout = 10 * time.Second

// maxConns bounds the connection pool. Writes use one connection at a time;
// the others serve concurrent reads.
const maxConns = 8

// header is the first 16 bytes of every SQLite database file.
var header = []byte("SQLite format 3\x00")

func init() {
	journal.Register("sqlite", func(ctx context.Context, u string) (journal.Journal, error) {
		path, err := parseURL(u)
		if err != nil {
			return nil, err
		}
		db, err := Open(ctx, path)
		if err != nil {
			return nil, err // not db: a nil *DB in an interface is not nil
		}
		return db, nil
	})
}

// parseURL returns the file path of a "sqlite:" URL.
func parseURL(u string) (string, error) {
	loc, ok := strings.CutPrefix(u, "sqlite:")
	if !ok {
		return "", fmt.Errorf("journal/sqlite: %q is not a sqlite: URL", u)
	}
	if rest, ok := strings.CutPrefix(loc, "//"); ok {
		if !strings.HasPrefix(rest, "/") {
			return "", fmt.Errorf("journal/sqlite: %q names a host; want sqlite:/abs/path.db, sqlite:///abs/path.db or sqlite:relative.db", u)
		}
		loc = rest
	}
	if strings.ContainsAny(loc, "?#") {
		return "", fmt.Errorf("journal/sqlite: %q: query parameters and fragments are not supported; the location is a plain file path", u)
	}
	if loc == "" {
		return "", fmt.Errorf("journal/sqlite: %q names no file", u)
	}
	return loc, nil
}

// DB is a journal in one SQLite database file. It implements journal.Journal
// and is safe for concurrent use by many goroutines and, on one machine, by
// many processes.
type DB struct {
	path         string
	db           *sql.DB
	stmts        *stmts
	installation string
	// wsem serializes this process's writes, so they queue here (in order,
	// cancellable) instead of sleeping in SQLite's busy handler.
	wsem chan struct{}
	// reqs queues Commits for the writer goroutine, which runs until stop
	// is closed and then closes writerDone.
	reqs       chan *commitReq
	stop       chan struct{}
	writerDone chan struct{}
	received   atomic.Int64 // groups the writer started (took a first Step for), for tests
	batches    atomic.Int64 // groups the writer committed, for tests
	closeOnce  sync.Once
	closeErr   error
}

var _ journal.Journal = (*DB)(nil)

// Open opens the journal in the SQLite database file at path, creating the
// file (mode 0600) and its schema when it does not exist, and migrating an
// older schema. The parent directory must exist. Open refuses, without
// modifying the file or creating any beside it (no -wal, no -shm), a file
// that is not a SQLite database
// (ErrNotDatabase), a SQLite database that is not a gpuprov journal
// (ErrNotJournal) and a journal with a newer schema (ErrNewerSchema). Every
// error names the file. The caller must Close the DB.
func Open(ctx context.Context, path string) (*DB, error) {
	if path == "" {
		return nil, errors.New("journal/sqlite: empty path")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("journal/sqlite: %s: %w", path, err)
	}
	d, err := open(ctx, abs)
	if err != nil {
		return nil, fmt.Errorf("journal/sqlite: %s: %w", abs, withDirHint(err, abs))
	}
	return d, nil
}

func open(ctx context.Context, path string) (*DB, error) {
	if err := checkDir(filepath.Dir(path)); err != nil {
		return nil, err
	}
	created, err := createFile(path)
	if err != nil {
		return nil, err
	}
	if !created {
		if err := checkExisting(ctx, path); err != nil {
			return nil, err
		}
	}
	db, err := sql.Open("sqlite", dsn(path, false))
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(maxConns)
	db.SetMaxIdleConns(maxConns)
	id, err := setup(ctx, db)
	if err != nil {
		_ = db.Close() // the setup error is the one to report
		return nil, err
	}
	st, err := prepareStmts(ctx, db)
	if err != nil {
		_ = db.Close() // the prepare error is the one to report
		return nil, err
	}
	d := &DB{
		path: path, db: db, installation: id, stmts: st,
		wsem:       make(chan struct{}, 1),
		reqs:       make(chan *commitReq, maxBatch),
		stop:       make(chan struct{}),
		writerDone: make(chan struct{}),
	}
	go d.writer()
	return d, nil
}

// setup puts the database in WAL mode and migrates its schema, on one
// connection, and returns the installation id. WAL mode is a property of the
// file, so every connection opened later uses it.
func setup(ctx context.Context, db *sql.DB) (string, error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return "", err
	}
	defer conn.Close() // back to the pool; nothing to lose
	if err := setWAL(ctx, conn); err != nil {
		return "", err
	}
	return migrate(ctx, conn)
}

// setWAL switches the database to WAL mode. Switching needs a moment alone
// with the file, and SQLite answers SQLITE_BUSY at once, without its busy
// handler, while another connection opens or closes it: so retry, for up to
// BusyTimeout.
func setWAL(ctx context.Context, conn *sql.Conn) error {
	deadline := time.Now().Add(BusyTimeout)
	wait := time.Millisecond
	for {
		var mode string
		err := conn.QueryRowContext(ctx, "PRAGMA journal_mode = WAL").Scan(&mode)
		var se *msqlite.Error
		if err == nil && !strings.EqualFold(mode, "wal") {
			return fmt.Errorf("cannot use WAL mode (journal_mode is %q); is it on a network file system?", mode)
		}
		if err == nil || !errors.As(err, &se) || se.Code()&0xff != sqlite3.SQLITE_BUSY || time.Now().After(deadline) {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		wait = min(2*wait, 50*time.Millisecond)
	}
}

// dsn is the modernc DSN for path: a file: URI (so any byte of the path is
// safe) with the pragmas every pooled connection runs when it opens. WAL
// mode is not among them: setup sets it once for the file.
func dsn(path string, readOnly bool) string {
	u := url.URL{Scheme: "file", Path: filepath.ToSlash(path)}
	q := fmt.Sprintf("_pragma=busy_timeout(%d)", BusyTimeout.Milliseconds())
	if readOnly {
		return u.String() + "?mode=ro&" + q
	}
	return u.String() + "?" + q +
		"&_pragma=synchronous(FULL)&_pragma=foreign_keys(1)&_txlock=immediate"
}

// checkDir says clearly when the parent directory is missing or not one.
func checkDir(dir string) error {
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("directory %s does not exist", dir)
	case err != nil:
		return fmt.Errorf("directory %s: %w", dir, err)
	case !fi.IsDir():
		return fmt.Errorf("%s is not a directory", dir)
	}
	return nil
}

// createFile creates path with mode 0600 if it does not exist, and reports
// whether it did. An empty file counts as created: SQLite sees a new
// database in it.
func createFile(path string) (bool, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err == nil {
		// The umask may have taken bits away; it cannot have added any, but
		// set the mode exactly anyway.
		err = f.Chmod(0o600)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return false, fmt.Errorf("create: %w", err)
		}
		return true, nil
	}
	if !errors.Is(err, fs.ErrExist) {
		return false, fmt.Errorf("create: %w", err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return false, err
	}
	if !fi.Mode().IsRegular() {
		return false, fmt.Errorf("not a regular file (%s)", fi.Mode())
	}
	return fi.Size() == 0, nil
}

// checkExisting refuses, without writing to it, a non-empty file that is not
// a gpuprov journal this code can open.
func checkExisting(ctx context.Context, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	buf := make([]byte, len(header))
	_, err = io.ReadFull(f, buf)
	_ = f.Close() // read-only: closing cannot lose anything
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("read header: %w", err)
	}
	if !bytes.Equal(buf, header) {
		return fmt.Errorf("%w (its first bytes are %q, want %q)", ErrNotDatabase, bytes.TrimRight(buf, "\x00"), header)
	}
	ro := dsn(path, true)
	if _, err := os.Lstat(path + "-wal"); errors.Is(err, fs.ErrNotExist) {
		// Without a -wal file the main file holds the whole database, so
		// read it as immutable: a read-only open of a WAL-mode database
		// would otherwise create -wal and -shm files next to a file that
		// may be refused (and that may not even be ours to touch).
		ro += "&immutable=1"
	}
	db, err := sql.Open("sqlite", ro)
	if err != nil {
		return err
	}
	defer db.Close() // read-only: closing cannot lose anything
	_, err = inspect(ctx, db)
	return err
}

// withDirHint adds a hint to SQLite's terse SQLITE_CANTOPEN ("unable to
// open database file"), which for a file that exists most often means the
// directory is not writable: WAL mode creates files next to the database.
func withDirHint(err error, path string) error {
	var se *msqlite.Error
	if errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_CANTOPEN {
		return fmt.Errorf("%w (can this process create files in %s?)", err, filepath.Dir(path))
	}
	return err
}

// Path returns the absolute path of the database file.
func (d *DB) Path() string { return d.path }

// Installation returns the id created with the journal: 16 hex digits,
// never changing.
func (d *DB) Installation() string { return d.installation }

// Close closes the database: it lets the group being committed finish, fails
// the Commits still queued, and waits for the calls in progress to release
// their connections. Calls after Close fail; calling it again returns the
// first result.
func (d *DB) Close() error {
	d.closeOnce.Do(func() {
		close(d.stop)
		<-d.writerDone
		d.stmts.close()
		if err := d.db.Close(); err != nil {
			d.closeErr = d.errorf("close: %w", err)
		}
	})
	return d.closeErr
}

// errorf formats an error naming the file. An error that says the file
// cannot be written now (see unwritable) also wraps journal.ErrUnreachable,
// and its text says "journal unreachable".
func (d *DB) errorf(format string, args ...any) error {
	for _, a := range args {
		if err, ok := a.(error); ok && unwritable(err) {
			return fmt.Errorf("journal/sqlite: %s: %w: "+format, append([]any{d.path, journal.ErrUnreachable}, args...)...)
		}
	}
	return fmt.Errorf("journal/sqlite: %s: "+format, append([]any{d.path}, args...)...)
}

// unwritable reports whether err says the disk, not the request, is at
// fault, a state that may pass: SQLITE_FULL ("database or disk is full")
// and SQLITE_IOERR with its extended codes (a read or write the operating
// system failed), per SQLite's result codes (sqlite.org/rescode.html), and
// ENOSPC or EIO from the operating system itself. A busy database, a
// corrupt file or a constraint is not.
func unwritable(err error) bool {
	var se *msqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff {
		case sqlite3.SQLITE_FULL, sqlite3.SQLITE_IOERR:
			return true
		}
		return false
	}
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EIO)
}

// lockWrite takes this process's write lock, or fails when ctx ends first.
func (d *DB) lockWrite(ctx context.Context) error {
	select {
	case d.wsem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (d *DB) unlockWrite() { <-d.wsem }
