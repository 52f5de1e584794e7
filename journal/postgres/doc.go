// Package postgres is the journal backend for many provisioner processes on
// many machines: one PostgreSQL database shared by every replica, written
// through github.com/jackc/pgx/v5. Importing it registers the URL schemes
// "postgres" and "postgresql" with the journal package:
//
//	import _ "github.com/org/gpuprov/journal/postgres"
//
//	j, err := journal.Open(ctx, "postgres://gpuprov@db.internal:5432/gpuprov?sslmode=verify-full")
//
// The URL is pgx's (libpq's) connection URL: every libpq parameter works,
// and so do PGPASSWORD, PGSSLMODE, ~/.pgpass and the other PG* variables.
// search_path=<schema> in the URL puts the journal in that schema; pool
// sizes (pool_max_conns, ...) and connect_timeout override this package's
// defaults. Messages name the database as the URL without its password and
// query (DB.Name); the password never appears in an error. Its semantics are
// journal.Journal's, checked by the same conformance kit as the SQLite
// backend's, with the same storage decisions: times are BIGINT unix
// nanoseconds (exact round trips; timestamptz keeps microseconds), JSON is
// TEXT byte for byte (not jsonb, which reorders keys), a zero time or an
// empty JSON is NULL.
//
// # Locks
//
// Every lock this package takes is transaction-scoped: row locks, and one
// pg_advisory_xact_lock around migrations. None outlives the statement or
// transaction that takes it, none is session-level, so the backend works
// behind a transaction-pooling pooler such as PgBouncer (with an older
// PgBouncer, add default_query_exec_mode=exec to the URL: pgx's prepared
// statement cache needs protocol-level prepared statement support), and a
// replica that dies holding a lock holds it no longer than its connection
// lives.
//
//   - Migrations: Open reads the schema version without writing; when it
//     is behind, the migrations run in one transaction (PostgreSQL DDL is
//     transactional) that starts with pg_advisory_xact_lock. Replicas
//     opening a new journal at once queue on that lock; the first creates
//     the tables and the installation id (once, in gpuprov_meta), the
//     others find the version current when their turn comes. The version
//     is one row per applied migration in gpuprov_schema_version.
//   - Leases: Acquire is one conditional UPDATE (WHERE owner is free, ours,
//     dead, or its expiry <= now); two replicas acquiring at once serialize
//     on the row lock and the loser re-evaluates the condition against the
//     winner's write, so never both win. Updates are conditional on owner
//     and version. Renew first extends every lease whose row nobody has
//     locked at that instant (SKIP LOCKED), then the rest, so one slow
//     transaction cannot hold back a heartbeat; Acquire, Renew and Release
//     run on a small pool of their own (LeaseConns), never behind Commits.
//   - Event Seq: a sequence is not enough, because transactions can commit
//     out of the order their sequence numbers were drawn in, and a reader
//     following the log with After would skip an event that commits late.
//     Each Commit with events takes its Seqs from a one-row counter
//     (gpuprov_event_seq) with an UPDATE in the same transaction; the row
//     lock holds until commit, so appends are serialized and Seq order is
//     commit order. The append and the COMMIT go to the server in one round
//     trip (a pipelined batch) to keep the lock short.
//
// # Databases it refuses
//
// Open creates the journal in the connection's current schema when that
// schema has no tables, and refuses, writing nothing, a schema with other
// tables and no journal (ErrNotJournal: a database of another program), a
// journal written by a newer gpuprov (ErrNewerSchema) and a search_path
// naming no existing schema (ErrNoSchema). Wrong credentials, an unknown
// database and an unreachable server fail in Open with an error that says
// so. Every table is named gpuprov_*.
//
// # Clocks
//
// Lease times are the callers' (the engine's clock), as in every backend:
// replicas on several machines must keep their clocks in step (NTP) to
// well within a lease's length.
package postgres
