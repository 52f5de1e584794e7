package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/org/gpuprov/journal/internal/schema"
)

// Table names. Every table carries the gpuprov_ prefix, so a journal can
// share a database (or a schema) with other programs' tables without a
// clash; Open still refuses a schema that holds tables but no journal.
const (
	metaTable     = "gpuprov_meta"
	versionTable  = "gpuprov_schema_version"
	vmsTable      = "gpuprov_vms"
	attemptsTable = "gpuprov_attempts"
	eventsTable   = "gpuprov_events"
	seqTable      = "gpuprov_event_seq"
	blocksTable   = "gpuprov_blocks"
	membersTable  = "gpuprov_members"
	volumesTable  = "gpuprov_volumes"
)

// migrateLock is the key of the transaction-scoped advisory lock
// (pg_advisory_xact_lock) that serializes migrations: "gprvmig" in ASCII.
// PostgreSQL frees it when the migrating transaction commits or rolls back,
// so a replica that dies mid-migration cannot leave it held, and it works
// behind a transaction-pooling pooler (PgBouncer), unlike a session lock.
const migrateLock = 0x677072766d6967

// migrations bring the schema from version i to i+1 (see package schema);
// the version is recorded one row per migration in gpuprov_schema_version.
//
// Storage choices, the same as the SQLite backend's: times are BIGINT unix
// nanoseconds (timestamptz keeps only microseconds), JSON is TEXT, byte for
// byte (jsonb reorders keys), a zero time or an empty JSON is NULL.
var migrations = schema.Migrations{
	// 1: the first schema.
	`CREATE TABLE gpuprov_vms (
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
		price_per_hour  DOUBLE PRECISION NOT NULL,
		instance_id     TEXT NOT NULL,
		ssh_host        TEXT NOT NULL,
		ssh_port        INTEGER NOT NULL,
		ssh_user        TEXT NOT NULL,
		host_key        TEXT NOT NULL,
		deadline        BIGINT,
		last_error      TEXT NOT NULL,
		last_error_kind TEXT NOT NULL,
		owner           TEXT NOT NULL,
		lease_expiry    BIGINT,
		version         BIGINT NOT NULL,
		created_at      BIGINT,
		updated_at      BIGINT,
		ready_at        BIGINT,
		ended_at        BIGINT
	);
	CREATE INDEX gpuprov_vms_state ON gpuprov_vms (state);
	CREATE INDEX gpuprov_vms_cluster ON gpuprov_vms (cluster);
	CREATE INDEX gpuprov_vms_owner ON gpuprov_vms (owner);
	CREATE TABLE gpuprov_attempts (
		vm           TEXT NOT NULL REFERENCES gpuprov_vms (name),
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
		instance_ids TEXT[],
		host_key     TEXT NOT NULL,
		create_sent  BIGINT,
		cleaned_up   BOOLEAN NOT NULL,
		error        TEXT NOT NULL,
		error_kind   TEXT NOT NULL,
		started_at   BIGINT,
		ended_at     BIGINT,
		PRIMARY KEY (vm, n)
	);
	CREATE TABLE gpuprov_events (
		seq         BIGINT PRIMARY KEY,
		time        BIGINT,
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
	);
	CREATE INDEX gpuprov_events_vm ON gpuprov_events (vm, seq);
	CREATE TABLE gpuprov_event_seq (
		one  BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (one),
		last BIGINT NOT NULL
	);
	INSERT INTO gpuprov_event_seq (one, last) VALUES (TRUE, 0);
	CREATE TABLE gpuprov_blocks (
		key        TEXT PRIMARY KEY,
		scope      TEXT NOT NULL,
		provider   TEXT NOT NULL,
		error_kind TEXT NOT NULL,
		reason     TEXT NOT NULL,
		until      BIGINT,
		created_at BIGINT
	);
	CREATE INDEX gpuprov_blocks_until ON gpuprov_blocks (until);`,
	// 2: a waiting VM's next try, a ready VM's expiry (Request.TTL, MaxCost).
	`ALTER TABLE gpuprov_vms ADD COLUMN next_try BIGINT;
	ALTER TABLE gpuprov_vms ADD COLUMN expires_at BIGINT;`,
	// 3: Prune finds the VMs that ended before a time by (state, ended_at);
	// the index also serves every lookup by state, so gpuprov_vms_state
	// goes. (CREATE INDEX blocks writes to gpuprov_vms while it builds,
	// inside the migration's transaction: well under a second for a
	// journal of 100,000 VMs.)
	`CREATE INDEX gpuprov_vms_state_ended ON gpuprov_vms (state, ended_at);
	DROP INDEX gpuprov_vms_state;`,
	// 4: the replicas that share the journal and the accounts each paces
	// (journal.Members); expiry is on the database's clock.
	`CREATE TABLE gpuprov_members (
		member   TEXT PRIMARY KEY,
		accounts TEXT[] NOT NULL,
		expiry   BIGINT NOT NULL
	);`,
	// 5: the machine an attempt ran on and its GPU acceptance result; the
	// per-offer history (journal.OfferHistory): counters per offer and a
	// histogram of the time to ready, a row per bucket used.
	`ALTER TABLE gpuprov_attempts ADD COLUMN host TEXT NOT NULL DEFAULT '';
	ALTER TABLE gpuprov_attempts ADD COLUMN acceptance TEXT;
	CREATE TABLE gpuprov_offer_stats (
		offer_key         TEXT PRIMARY KEY,
		provider          TEXT NOT NULL,
		region            TEXT NOT NULL,
		zone              TEXT NOT NULL,
		instance_type     TEXT NOT NULL,
		spot              BOOLEAN NOT NULL,
		created           BIGINT NOT NULL,
		ready             BIGINT NOT NULL,
		acceptance_failed BIGINT NOT NULL,
		stockouts         BIGINT NOT NULL,
		preempted         BIGINT NOT NULL,
		failed            BIGINT NOT NULL,
		wasted            BIGINT NOT NULL,
		updated           BIGINT
	);
	CREATE TABLE gpuprov_offer_ready (
		offer_key TEXT NOT NULL,
		bucket    INTEGER NOT NULL,
		n         BIGINT NOT NULL,
		PRIMARY KEY (offer_key, bucket)
	);`,
	// 6: persistent volumes (journal.Volumes): one row per volume name, a
	// deleted one replaced when its name is used again; Prune finds the
	// deleted ones by (state, ended_at), ListVolumes a VM's by vm.
	`CREATE TABLE gpuprov_volumes (
		name       TEXT PRIMARY KEY,
		id         TEXT NOT NULL,
		cloud_id   TEXT NOT NULL,
		provider   TEXT NOT NULL,
		region     TEXT NOT NULL,
		zone       TEXT NOT NULL,
		size_gb    INTEGER NOT NULL,
		mount_path TEXT NOT NULL,
		keep       BOOLEAN NOT NULL,
		state      TEXT NOT NULL,
		vm         TEXT NOT NULL,
		device     TEXT NOT NULL,
		token      TEXT NOT NULL,
		last_error TEXT NOT NULL,
		version    BIGINT NOT NULL,
		created_at BIGINT,
		updated_at BIGINT,
		ended_at   BIGINT
	);
	CREATE INDEX gpuprov_volumes_state_ended ON gpuprov_volumes (state, ended_at);
	CREATE INDEX gpuprov_volumes_vm ON gpuprov_volumes (vm);`,
}

// schemaVersion is the schema version this package writes and the newest it
// can open. A journal with a newer version is refused, never downgraded.
var schemaVersion = migrations.Version()

// Errors Open returns (wrapped, naming the database) for databases it
// refuses. Nothing is written to a refused database.
var (
	// ErrNotJournal: the schema holds tables but is not a gpuprov journal
	// (a database of another program), or its journal tables are damaged.
	ErrNotJournal = errors.New("not a gpuprov journal")
	// ErrNewerSchema: the journal was written by a newer gpuprov, whose
	// schema this one does not know.
	ErrNewerSchema = errors.New("journal schema is newer than this gpuprov")
	// ErrNoSchema: no schema of the connection's search_path exists, so
	// there is nowhere to create the journal.
	ErrNoSchema = errors.New("no schema to create the journal in")
)

// querier is what classify needs of a pool, a connection or a transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// classify reads, without writing anything, what the connection's current
// schema holds: its journal schema version (0 for a schema with no tables,
// ready to become a journal), or an error saying why it is not a journal
// this code can open. migrate runs it again under its lock, so the verdict
// holds for what it writes.
func classify(ctx context.Context, q querier) (version int, err error) {
	var schema *string
	if err := q.QueryRow(ctx, "SELECT current_schema()").Scan(&schema); err != nil {
		return 0, err
	}
	if schema == nil {
		var path string
		if err := q.QueryRow(ctx, "SHOW search_path").Scan(&path); err != nil {
			return 0, err
		}
		return 0, fmt.Errorf("%w: none of the schemas in search_path (%s) exists; create one (CREATE SCHEMA) or set search_path in the URL", ErrNoSchema, path)
	}
	rows, err := q.Query(ctx, `SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p', 'v', 'm', 'f') ORDER BY c.relname`)
	if err != nil {
		return 0, err
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, err
	}
	has := map[string]bool{}
	for _, t := range tables {
		has[t] = true
	}
	switch {
	case len(tables) == 0:
		return 0, nil
	case !has[metaTable] || !has[versionTable]:
		shown := tables
		if len(shown) > 8 {
			shown = append(shown[:8:8], "…")
		}
		return 0, fmt.Errorf("%w: schema %q holds tables %s and no %s table: a database of another program? Use another database, or another schema (search_path in the URL)",
			ErrNotJournal, *schema, strings.Join(shown, ", "), metaTable)
	}
	var v *int
	if err := q.QueryRow(ctx, "SELECT max(version) FROM "+versionTable).Scan(&v); err != nil {
		return 0, fmt.Errorf("%w: reading its schema version: %v", ErrNotJournal, err)
	}
	if v == nil || *v < 0 {
		return 0, fmt.Errorf("%w: %s is empty", ErrNotJournal, versionTable)
	}
	if err := migrations.Check(*v, ErrNewerSchema); err != nil {
		return 0, err
	}
	return *v, nil
}

// setup brings the schema up to schemaVersion and returns the installation
// id. A journal at the current version is only read. Otherwise the
// migration runs in one transaction (PostgreSQL's DDL is transactional)
// under pg_advisory_xact_lock: replicas opening a new journal at once queue
// on the lock, the first creates everything, and the others find the work
// done when their turn comes. Every lock involved is transaction-scoped.
func setup(ctx context.Context, pool *pgxpool.Pool) (string, error) {
	v, err := classify(ctx, pool)
	if err != nil {
		return "", err
	}
	if v < schemaVersion {
		if err := migrate(ctx, pool); err != nil {
			return "", err
		}
	}
	return installation(ctx, pool)
}

// migrate runs the missing migrations in one transaction under the
// migration lock.
func migrate(ctx context.Context, pool *pgxpool.Pool) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", int64(migrateLock)); err != nil {
			return fmt.Errorf("migrate: lock: %w", err)
		}
		v, err := classify(ctx, tx) // again, under the lock: another replica may have migrated
		if err != nil {
			return err
		}
		now := time.Now().UnixNano()
		if v == 0 {
			id, err := schema.NewInstallation()
			if err != nil {
				return err
			}
			for _, s := range []string{
				"CREATE TABLE " + metaTable + " (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
				"CREATE TABLE " + versionTable + " (version INTEGER PRIMARY KEY, applied_at BIGINT NOT NULL)",
				"INSERT INTO " + versionTable + " (version, applied_at) VALUES (0, " + fmt.Sprint(now) + ")",
				"INSERT INTO " + metaTable + " (key, value) VALUES ('installation', '" + id + "')",
			} {
				if _, err := tx.Exec(ctx, s); err != nil {
					return fmt.Errorf("migrate: create %s: %w", metaTable, err)
				}
			}
		}
		return migrations.Run(v, func(ddl string) error {
			_, err := tx.Exec(ctx, ddl)
			return err
		}, func(v int) error {
			_, err := tx.Exec(ctx, "INSERT INTO "+versionTable+" (version, applied_at) VALUES ($1, $2)", v, now)
			return err
		})
	})
}

// installation reads the installation id the first migration created.
func installation(ctx context.Context, q querier) (string, error) {
	var id string
	err := q.QueryRow(ctx, "SELECT value FROM "+metaTable+" WHERE key = 'installation'").Scan(&id)
	if err != nil {
		return "", fmt.Errorf("%w: reading its installation id: %v", ErrNotJournal, err)
	}
	if id == "" {
		return "", fmt.Errorf("%w: its installation id is empty", ErrNotJournal)
	}
	return id, nil
}
