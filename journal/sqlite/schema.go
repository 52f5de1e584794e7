package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"

	msqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/org/gpuprov/journal/internal/schema"
)

// metaTable names the table that marks a database as a gpuprov journal. It
// holds the schema version and the installation id.
const metaTable = "gpuprov_meta"

// applicationID is written to the SQLite header (PRAGMA application_id) of
// every journal: "gprv" in ASCII. A database carrying another non-zero id
// belongs to another program.
const applicationID = 0x67707276

// migrations bring the schema from version i to i+1 (see package schema).
var migrations = schema.Migrations{
	// 1: the first schema.
	`CREATE TABLE vms (
		name            TEXT PRIMARY KEY,
		id              TEXT NOT NULL,
		cluster         TEXT NOT NULL,
		request         TEXT,
		state           TEXT NOT NULL,
		phase           TEXT NOT NULL,
		attempt         INTEGER NOT NULL,
		provider        TEXT NOT NULL,
		region          TEXT NOT NULL,
		zone            TEXT NOT NULL,
		offer           TEXT,
		price_per_hour  REAL NOT NULL,
		instance_id     TEXT NOT NULL,
		ssh_host        TEXT NOT NULL,
		ssh_port        INTEGER NOT NULL,
		ssh_user        TEXT NOT NULL,
		host_key        TEXT NOT NULL,
		deadline        INTEGER,
		last_error      TEXT NOT NULL,
		last_error_kind TEXT NOT NULL,
		owner           TEXT NOT NULL,
		lease_expiry    INTEGER,
		version         INTEGER NOT NULL,
		created_at      INTEGER,
		updated_at      INTEGER,
		ready_at        INTEGER,
		ended_at        INTEGER
	) STRICT;
	CREATE INDEX vms_state ON vms (state);
	CREATE INDEX vms_cluster ON vms (cluster);
	CREATE TABLE attempts (
		vm           TEXT NOT NULL REFERENCES vms (name),
		n            INTEGER NOT NULL,
		provider     TEXT NOT NULL,
		region       TEXT NOT NULL,
		zone         TEXT NOT NULL,
		offer_key    TEXT NOT NULL,
		offer        TEXT,
		state        TEXT NOT NULL,
		phase        TEXT NOT NULL,
		token        TEXT NOT NULL,
		prepared     TEXT,
		instance_ids TEXT,
		host_key     TEXT NOT NULL,
		create_sent  INTEGER,
		cleaned_up   INTEGER NOT NULL,
		error        TEXT NOT NULL,
		error_kind   TEXT NOT NULL,
		started_at   INTEGER,
		ended_at     INTEGER,
		PRIMARY KEY (vm, n)
	) STRICT;
	CREATE TABLE events (
		seq         INTEGER PRIMARY KEY AUTOINCREMENT,
		time        INTEGER,
		vm          TEXT NOT NULL,
		attempt     INTEGER NOT NULL,
		type        TEXT NOT NULL,
		phase       TEXT NOT NULL,
		provider    TEXT NOT NULL,
		region      TEXT NOT NULL,
		zone        TEXT NOT NULL,
		instance_id TEXT NOT NULL,
		error_kind  TEXT NOT NULL,
		message     TEXT NOT NULL,
		owner       TEXT NOT NULL
	) STRICT;
	CREATE INDEX events_vm ON events (vm, seq);
	CREATE TABLE blocks (
		key        TEXT PRIMARY KEY,
		scope      TEXT NOT NULL,
		provider   TEXT NOT NULL,
		error_kind TEXT NOT NULL,
		reason     TEXT NOT NULL,
		until      INTEGER,
		created_at INTEGER
	) STRICT;
	CREATE INDEX blocks_until ON blocks (until);`,
	// 2: a waiting VM's next try, a ready VM's expiry (Request.TTL, MaxCost).
	`ALTER TABLE vms ADD COLUMN next_try INTEGER;
	ALTER TABLE vms ADD COLUMN expires_at INTEGER;`,
	// 3: Prune finds the VMs that ended before a time by (state, ended_at);
	// the index also serves every lookup by state, so vms_state goes.
	`CREATE INDEX vms_state_ended ON vms (state, ended_at);
	DROP INDEX vms_state;`,
	// 4: the processes that share the file and the accounts each paces
	// (journal.Members); accounts is a JSON array of names.
	`CREATE TABLE members (
		member   TEXT PRIMARY KEY,
		accounts TEXT NOT NULL,
		expiry   INTEGER NOT NULL
	) STRICT;`,
	// 5: the machine an attempt ran on and its GPU acceptance result; the
	// per-offer history (journal.OfferHistory): counters per offer and a
	// histogram of the time to ready, a row per bucket used.
	`ALTER TABLE attempts ADD COLUMN host TEXT NOT NULL DEFAULT '';
	ALTER TABLE attempts ADD COLUMN acceptance TEXT;
	CREATE TABLE offer_stats (
		offer_key         TEXT PRIMARY KEY,
		provider          TEXT NOT NULL,
		region            TEXT NOT NULL,
		zone              TEXT NOT NULL,
		instance_type     TEXT NOT NULL,
		spot              INTEGER NOT NULL,
		created           INTEGER NOT NULL,
		ready             INTEGER NOT NULL,
		acceptance_failed INTEGER NOT NULL,
		stockouts         INTEGER NOT NULL,
		preempted         INTEGER NOT NULL,
		failed            INTEGER NOT NULL,
		wasted            INTEGER NOT NULL,
		updated           INTEGER
	) STRICT;
	CREATE TABLE offer_ready (
		offer_key TEXT NOT NULL,
		bucket    INTEGER NOT NULL,
		n         INTEGER NOT NULL,
		PRIMARY KEY (offer_key, bucket)
	) STRICT;`,
	// 6: persistent volumes (journal.Volumes): one row per volume name, a
	// deleted one replaced when its name is used again; Prune finds the
	// deleted ones by (state, ended_at), ListVolumes a VM's by vm.
	`CREATE TABLE volumes (
		name       TEXT PRIMARY KEY,
		id         TEXT NOT NULL,
		cloud_id   TEXT NOT NULL,
		provider   TEXT NOT NULL,
		region     TEXT NOT NULL,
		zone       TEXT NOT NULL,
		size_gb    INTEGER NOT NULL,
		mount_path TEXT NOT NULL,
		keep       INTEGER NOT NULL,
		state      TEXT NOT NULL,
		vm         TEXT NOT NULL,
		device     TEXT NOT NULL,
		token      TEXT NOT NULL,
		last_error TEXT NOT NULL,
		version    INTEGER NOT NULL,
		created_at INTEGER,
		updated_at INTEGER,
		ended_at   INTEGER
	) STRICT;
	CREATE INDEX volumes_state_ended ON volumes (state, ended_at);
	CREATE INDEX volumes_vm ON volumes (vm);`,
}

// schemaVersion is the schema version this package writes and the newest it
// can open. A journal with a newer version is refused, never downgraded.
var schemaVersion = migrations.Version()

// inspect reads, without writing anything, what an existing database is:
// its schema version if it is a gpuprov journal (0 for a database with no
// tables, ready to become one), or an error saying why it is not one.
func inspect(ctx context.Context, db *sql.DB) (int, error) {
	v, _, err := classify(ctx, db)
	return v, err
}

// classify reads what the database q reads is: whether it has the meta
// table, and its schema version (0 without one). A database of another
// program, and a journal newer than this code, are errors. migrate runs it
// again inside its write transaction, so the verdict holds for what it
// writes.
func classify(ctx context.Context, q queryer) (version int, hasMeta bool, err error) {
	var appID int64
	if err := q.QueryRowContext(ctx, "PRAGMA application_id").Scan(&appID); err != nil {
		return 0, false, unreadable(err)
	}
	rows, err := q.QueryContext(ctx, "SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY name")
	if err != nil {
		return 0, false, unreadable(err)
	}
	var tables []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			_ = rows.Close() // the Scan error is the one to report
			return 0, false, unreadable(err)
		}
		tables = append(tables, name)
		hasMeta = hasMeta || name == metaTable
	}
	if err := rows.Close(); err != nil {
		return 0, false, unreadable(err)
	}
	if appID != 0 && appID != applicationID {
		return 0, false, fmt.Errorf("%w: a SQLite database of another program (application_id %#x)", ErrNotJournal, appID)
	}
	if !hasMeta {
		if len(tables) > 0 {
			return 0, false, fmt.Errorf("%w: a SQLite database with tables %q and no %s table", ErrNotJournal, tables, metaTable)
		}
		return 0, false, nil
	}
	v, err := readVersion(ctx, q)
	if err != nil {
		return 0, false, err
	}
	if err := migrations.Check(v, ErrNewerSchema); err != nil {
		return 0, false, err
	}
	return v, true, nil
}

// unreadable describes an error reading an existing file as a database:
// SQLite's "not a database" and "malformed" are ErrNotDatabase.
func unreadable(err error) error {
	var se *msqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff {
		case sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_CORRUPT:
			return fmt.Errorf("%w (SQLite cannot read it: %v)", ErrNotDatabase, err)
		case sqlite3.SQLITE_CANTOPEN:
			return fmt.Errorf("cannot open it: %w", err)
		}
	}
	return fmt.Errorf("cannot read it as a SQLite database: %w", err)
}

// queryer is what classify needs of a *sql.DB or *sql.Tx.
type queryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// readVersion returns the schema version stored in the meta table.
func readVersion(ctx context.Context, q queryer) (int, error) {
	var s string
	err := q.QueryRowContext(ctx, "SELECT value FROM "+metaTable+" WHERE key = 'schema_version'").Scan(&s)
	if err != nil {
		return 0, fmt.Errorf("%w: reading its schema version: %v", ErrNotJournal, err)
	}
	v, err := strconv.Atoi(s)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("%w: its schema version %q is not a number", ErrNotJournal, s)
	}
	return v, nil
}

// migrate brings the schema up to schemaVersion in one transaction and
// returns the installation id, creating it with the first migration. Two
// processes migrating one new file at once serialize on the write lock; the
// second finds the work done.
func migrate(ctx context.Context, conn *sql.Conn) (string, error) {
	tx, err := conn.BeginTx(ctx, nil) // BEGIN IMMEDIATE (see dsn)
	if err != nil {
		return "", fmt.Errorf("migrate: %w", err)
	}
	defer tx.Rollback() // a no-op after Commit; on the error paths, the error returned says more
	v, hasMeta, err := classify(ctx, tx)
	if err != nil {
		return "", err
	}
	if !hasMeta {
		id, err := schema.NewInstallation()
		if err != nil {
			return "", fmt.Errorf("migrate: %w", err)
		}
		stmts := []string{
			"PRAGMA application_id = " + strconv.Itoa(applicationID),
			"CREATE TABLE " + metaTable + " (key TEXT PRIMARY KEY, value TEXT NOT NULL) STRICT",
			"INSERT INTO " + metaTable + " (key, value) VALUES ('schema_version', '0'), ('installation', '" + id + "')",
		}
		for _, s := range stmts {
			if _, err := tx.ExecContext(ctx, s); err != nil {
				return "", fmt.Errorf("migrate: create %s: %w", metaTable, err)
			}
		}
	}
	err = migrations.Run(v, func(ddl string) error {
		_, err := tx.ExecContext(ctx, ddl)
		return err
	}, func(v int) error {
		_, err := tx.ExecContext(ctx, "UPDATE "+metaTable+" SET value = ? WHERE key = 'schema_version'", strconv.Itoa(v))
		return err
	})
	if err != nil {
		return "", err
	}
	var id string
	if err := tx.QueryRowContext(ctx, "SELECT value FROM "+metaTable+" WHERE key = 'installation'").Scan(&id); err != nil {
		return "", fmt.Errorf("%w: reading its installation id: %v", ErrNotJournal, err)
	}
	if id == "" {
		return "", fmt.Errorf("%w: its installation id is empty", ErrNotJournal)
	}
	if err := tx.Commit(); err != nil {
		return "", fmt.Errorf("migrate: commit: %w", err)
	}
	return id, nil
}

// Errors Open returns (wrapped, naming the file) for files it refuses.
var (
	// ErrNotDatabase: the file is not a SQLite database (its header is not
	// SQLite's). The file was not modified.
	ErrNotDatabase = errors.New("not a SQLite database")
	// ErrNotJournal: the file is a SQLite database but not a gpuprov
	// journal. The file was not modified.
	ErrNotJournal = errors.New("not a gpuprov journal")
	// ErrNewerSchema: the journal was written by a newer gpuprov, whose
	// schema this one does not know. The file was not modified.
	ErrNewerSchema = errors.New("journal schema is newer than this gpuprov")
)
