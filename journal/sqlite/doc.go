// Package sqlite is the embedded journal backend: one SQLite database file,
// written through modernc.org/sqlite (pure Go, no cgo). Importing it
// registers the URL scheme "sqlite" with the journal package:
//
//	import _ "github.com/org/gpuprov/journal/sqlite"
//
//	j, err := journal.Open(ctx, "sqlite:/var/lib/gpuprov/journal.db")
//
// The accepted URL forms are "sqlite:/abs/path.db", "sqlite:relative.db"
// (resolved against the working directory when opened) and
// "sqlite:///abs/path.db". The location is a file path taken verbatim: no
// percent-decoding, no query parameters. [Open] takes a plain path and
// bypasses the registry.
//
// # Durability and concurrency
//
// Every connection runs in WAL mode with synchronous=FULL, foreign keys on
// and a busy timeout of [BusyTimeout]: a Commit is on stable storage when it
// returns. Writes from one *DB are serialized in the process, and concurrent
// Commits are grouped: one writer goroutine commits the Steps waiting for it
// in one transaction, so one sync to disk serves them all, each Step in its
// own savepoint, so each still succeeds or fails alone. Writes from several
// processes on one file are serialized by SQLite's write lock (transactions
// begin IMMEDIATE, so a writer waits for the lock instead of failing on a
// lock upgrade). Acquire, Renew and Release are single conditional UPDATE
// statements, so two processes never both win a lease.
// Many processes on one machine may share a file; a file on a network file
// system is not supported (SQLite's locking does not hold there).
//
// # Clocks
//
// Lease times are the callers': Acquire, Renew and a Step's Create store the
// expiry they are given, and Acquire and Prune judge a lease by the now they
// are given. The backend does not implement journal.LeaseClock, on
// purpose: the processes that share a file all run on its one host (a file
// on a network file system is not supported) and read that host's clock, so
// there is no second clock to disagree with, and tests drive leases with
// exact times from an injected clock.
//
// # Members
//
// The backend implements journal.Members for processes on one host sharing
// the file: one row per process in the members table (its accounts as a
// JSON array, its expiry on the callers' clock). Beat writes the row and
// counts the live rows per account in one write transaction; Leave deletes
// the row. A process that dies without leaving drops out of the counts when
// its row expires; the row itself stays (a few bytes) until the same member
// beats or leaves again.
//
// # Per-offer history
//
// The backend implements journal.OfferHistory (schema version 5): the
// counters of each offer in the offer_stats table (one row per offer key)
// and its histogram of the time to ready in offer_ready (one row per offer
// and bucket used), each added to by an upsert in the transaction of the
// Step whose Outcomes report it. OfferStats reads both in one statement.
// Prune leaves both alone.
//
// # Volumes
//
// The backend implements journal.Volumes (schema version 6): one row per
// volume name in the volumes table, written by a Step's Volumes in its
// transaction. A volume update is one conditional UPDATE (its ID, its
// Version, and no move from one VM to another: journal.VolumeWrite), and
// writers are serialized, so of attaches of one volume to different VMs
// exactly one succeeds. Prune removes the volumes deleted before its
// Before in batches of their own (one DELETE each), after the VMs'.
//
// # Files
//
// A new database file is created with mode 0600 before SQLite opens it;
// SQLite gives its -wal and -shm files the mode of the database file. The
// parent directory must exist. A file that is not a SQLite database, a
// SQLite database that is not a gpuprov journal, and a journal written by a
// newer gpuprov are refused with an error naming the file, and are never
// modified.
//
// # Storage
//
// Times are stored as integer unix nanoseconds (UTC), so they round-trip
// exactly; a zero time is stored as NULL and reads back as the zero time.
// Times outside the range of unix nanoseconds (before 1678 or after 2262)
// are refused. JSON fields are stored as TEXT, byte for byte; an empty
// json.RawMessage (nil or not) is stored as NULL and reads back as nil, and
// a non-empty one must be valid JSON (Attempt.Acceptance included, the GPU
// acceptance result, which the journal stores and does not interpret).
// Attempt.InstanceIDs is stored as a JSON array; an empty slice reads back
// as nil.
package sqlite
