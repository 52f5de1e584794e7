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
//     dead, or its expiry <= the database's clock; see Clocks); two
//     replicas acquiring at once serialize
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
//   - Members (journal.Members): one row per replica in gpuprov_members,
//     its accounts a TEXT[]. Beat upserts the row and counts the live rows
//     per account in one round trip, on the lease connections; Leave
//     deletes the row. A replica that dies without leaving drops out of the
//     counts when its row expires; the row stays until that member beats or
//     leaves again.
//   - Per-offer history (journal.OfferHistory, schema version 5): the
//     counters of each offer in gpuprov_offer_stats (one row per offer
//     key) and its histogram of the time to ready in gpuprov_offer_ready
//     (one row per offer and bucket used), each added to by an INSERT … ON
//     CONFLICT DO UPDATE in the transaction of the Step whose Outcomes
//     report it, so concurrent replicas never lose a count; a Step locks
//     its offers' rows in key order, so two never deadlock on them.
//     OfferStats reads both tables in one statement (one snapshot). Prune
//     leaves both alone.
//   - Volumes (journal.Volumes, schema version 6): one row per volume name
//     in gpuprov_volumes. A volume update is one conditional UPDATE (its ID,
//     its Version, and no move from one VM to another: journal.VolumeWrite);
//     replicas updating one volume at once serialize on its row lock and
//     each re-checks the condition against the row the other wrote, so of
//     attaches of one volume to different VMs exactly one succeeds. A
//     Create locks a deleted row it replaces (FOR UPDATE); two Creates of a
//     new name: one gets journal.ErrExists from the primary key. Prune
//     removes the volumes deleted before its Before in batches of their own
//     (one DELETE each, FOR UPDATE SKIP LOCKED), after the VMs'.
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
// Leases are granted and compared by the database's clock, not the
// callers' (DB implements journal.LeaseClock): clock_timestamp(), the time
// when the statement runs (not now(), its transaction's start), in whole
// microseconds. A caller's now and expiry give only a length, expiry − now.
// Acquire and Renew set a lease's expiry to the database's clock plus that
// length, a Step's Create with an Owner holds its lease for LeaseExpiry −
// CreatedAt from it (and writes the stored expiry back into
// Create.LeaseExpiry), and Acquire and Prune take a lease for expired when
// its expiry is not after the database's clock; Beat does the same for the
// members' rows. So replicas whose clocks disagree, by any amount, never
// both drive a VM, and a lease lapses one TTL after its last renewal as the
// database counts time. Expiries come back on the database's clock: compare
// them with LeaseNow, never with a replica's own clock (the engine fences
// its cloud calls by its monotonic clock from the last renewal the journal
// confirmed). The expiry is stored as BIGINT nanoseconds,
// (extract(epoch from clock_timestamp()) * 1000000)::bigint * 1000 plus the
// length, so the length keeps its nanoseconds. Every other time (a block's
// Until, a VM's Deadline, Prune's Before and its Now for blocks) is the
// caller's, stored as given.
package postgres
