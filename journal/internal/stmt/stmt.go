// Package stmt builds the SQL statements both journal backends run on the
// tables they share, from a small description of each backend's dialect. It
// is the one place that writes a VM, attempt, event, block or volume statement, so a
// backend keeps only what its database does differently: the placeholder
// syntax, its table names, whether it locks rows, how it orders text, how it
// passes a list, and whether it grants leases by its own clock.
//
// The column lists come from package rowcodec, and the arguments of every
// statement here are rowcodec.Codec's values in that order.
//
//	var sql = stmt.New(stmt.Dialect{Param: stmt.Dollar, Prefix: "gpuprov_", LockRow: " FOR UPDATE"})
//
//	v, err := codec.ScanVM(pool.QueryRow(ctx, sql.GetVM, name))
package stmt

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/journal/internal/rowcodec"
)

// Dialect is what a backend's SQL does differently. The zero value of an
// optional field is SQLite's behaviour.
type Dialect struct {
	// Param returns the placeholder of the n-th argument, from 1. Required.
	// Statements use an argument more than once, so the placeholder must
	// name its position (Numbered, Dollar).
	Param func(n int) string
	// Prefix is put before every table name: "gpuprov_" makes vms
	// gpuprov_vms.
	Prefix string
	// LockRow ends the SELECT that reads the VM a Create may replace
	// (" FOR UPDATE"); empty where writers are serialized anyway.
	LockRow string
	// Collate follows ORDER BY of a text column, so names sort by their
	// bytes (` COLLATE "C"`); empty where that is the default.
	Collate string
	// In returns a condition that col is one of vals, whose arguments start
	// at position n, and those arguments. Nil: "col IN (p, p, ...)", one
	// argument per value.
	In func(col string, n int, vals []string) (string, []any)
	// Now is an SQL expression of the database's clock in unix nanoseconds.
	// When set, the backend grants leases by it (journal.LeaseClock): a
	// Create with an Owner stores the lease as Now plus its length (see
	// Statements.InsertVM). Empty: leases are stored as the caller gives them.
	Now string
}

// Numbered is SQLite's placeholder of the n-th argument: ?n.
func Numbered(n int) string { return "?" + strconv.Itoa(n) }

// Dollar is PostgreSQL's placeholder of the n-th argument: $n.
func Dollar(n int) string { return "$" + strconv.Itoa(n) }

// Any is PostgreSQL's In: "col = ANY($n)" with the values as one array.
func Any(col string, n int, vals []string) (string, []any) {
	return col + " = ANY(" + Dollar(n) + ")", []any{vals}
}

// Statements are the statements of one dialect. Each takes the arguments
// its comment names, in order.
type Statements struct {
	d Dialect

	// Table names.
	VMs, Attempts, Events, Blocks, Volumes string

	// InsertVM inserts a VM at Version 1 and returns its lease_expiry:
	// rowcodec.Codec.CreateArgs; with Dialect.Now, one argument more, the
	// lease's length, and CreateArgs' lease_expiry is NULL when the length
	// is given: the stored expiry is Now plus the length.
	InsertVM string
	// UpdateVM writes every column but the lease columns, conditional on
	// owner and version, and returns the new version and lease_expiry:
	// VMArgs without the name, then name, owner, version, and a bool that
	// frees the lease in the same statement.
	UpdateVM string
	// VMState reads the state of the VM named $1, locking its row where
	// the dialect locks rows.
	VMState string
	// VMOwnerVersion reads the owner and version of the VM named $1.
	VMOwnerVersion string
	// VMExists returns a row if the VM named $1 exists.
	VMExists string
	// DeleteAttempts and DeleteVM remove a VM's attempts and its row ($1).
	DeleteAttempts, DeleteVM string
	// UpsertAttempt writes an attempt by (vm, n): AttemptArgs.
	UpsertAttempt string
	// UpsertBlock writes a block by key unless its until is earlier than
	// the stored one's (a zero until is the earliest of all): BlockArgs.
	UpsertBlock string
	// LiftBlock removes the block of key $1 made before $2.
	LiftBlock string

	// InsertVolume inserts a volume at version 1: rowcodec.Codec.VolumeArgs.
	InsertVolume string
	// UpdateVolume writes every column of a volume but version, conditional
	// on its id and version and on not moving it from one VM to another
	// (journal.VolumeWrite), and returns the new version: VolumeArgs
	// without the name, then name, id, version.
	UpdateVolume string
	// VolumeState reads the state of the volume named $1, locking its row
	// where the dialect locks rows.
	VolumeState string
	// VolumeIDVersionVM reads the id, version and VM of the volume named $1.
	VolumeIDVersionVM string
	// DeleteVolume removes the row of the volume named $1.
	DeleteVolume string
	// GetVolume reads the volume named $1.
	GetVolume string

	// UpsertMember writes the row of member $1 (journal.Members): its
	// accounts $2, as the backend stores a list, and its expiry $3, or,
	// with Dialect.Now, Now plus the length $3.
	UpsertMember string
	// DeleteMember removes the row of member $1.
	DeleteMember string

	// GetVM reads the VM named $1.
	GetVM string
	// ListAttempts reads the attempts of the VM named $1, ordered by n.
	ListAttempts string
	// LiveBlocks reads the blocks whose until is after $1, ordered by key.
	LiveBlocks string

	// UpsertOfferStats adds one outcome to its offer's counters
	// (offerstat.Increment.Stats): offer key, provider, region, zone,
	// instance type, spot, the six counts, wasted nanoseconds, and the
	// outcome's time (unix nanoseconds; the row keeps the latest).
	UpsertOfferStats string
	// UpsertOfferReady adds one to bucket $2 of offer $1's histogram.
	UpsertOfferReady string
	// ListOfferStats reads the history whole, in one statement (one
	// snapshot): each offer's counters joined with each bucket of its
	// histogram (offerstat.Scan); an offer with no bucket has one row with
	// a NULL bucket and count.
	ListOfferStats string
}

// offerStatsCols are the columns of the per-offer counters, as
// UpsertOfferStats and ListOfferStats take them.
var offerStatsCols = []string{"offer_key", "provider", "region", "zone", "instance_type", "spot",
	"created", "ready", "acceptance_failed", "stockouts", "preempted", "failed", "wasted", "updated"}

// New builds the statements of d.
func New(d Dialect) *Statements {
	if d.In == nil {
		d.In = func(col string, n int, vals []string) (string, []any) {
			ps, args := make([]string, len(vals)), make([]any, len(vals))
			for i, v := range vals {
				ps[i], args[i] = d.Param(n+i), v
			}
			return col + " IN (" + strings.Join(ps, ", ") + ")", args
		}
	}
	s := &Statements{d: d, VMs: d.Prefix + "vms", Attempts: d.Prefix + "attempts", Events: d.Prefix + "events",
		Blocks: d.Prefix + "blocks", Volumes: d.Prefix + "volumes"}
	p := d.Param

	create := rowcodec.VMCreateCols
	values := params(p, 1, len(create))
	if d.Now != "" {
		// lease_expiry is the last column: the given expiry, or Now plus
		// the length that follows it.
		n := len(create)
		values = params(p, 1, n-1) + ", COALESCE(" + p(n) + ", " + d.Now + " + " + p(n+1) + ")"
	}
	s.InsertVM = "INSERT INTO " + s.VMs + " (" + strings.Join(create, ", ") + ", version) VALUES (" + values + ", 1) RETURNING lease_expiry"

	write := rowcodec.VMWriteCols[1:]
	n := len(write)
	release := p(n + 4)
	s.UpdateVM = "UPDATE " + s.VMs + " SET " + assign(p, write, 1) + ", version = version + 1" +
		", owner = CASE WHEN " + release + " THEN '' ELSE owner END" +
		", lease_expiry = CASE WHEN " + release + " THEN NULL ELSE lease_expiry END" +
		" WHERE name = " + p(n+1) + " AND owner = " + p(n+2) + " AND version = " + p(n+3) +
		" RETURNING version, lease_expiry"
	s.VMState = "SELECT state FROM " + s.VMs + " WHERE name = " + p(1) + d.LockRow
	s.VMOwnerVersion = "SELECT owner, version FROM " + s.VMs + " WHERE name = " + p(1)
	s.VMExists = "SELECT 1 FROM " + s.VMs + " WHERE name = " + p(1)
	s.DeleteAttempts = "DELETE FROM " + s.Attempts + " WHERE vm = " + p(1)
	s.DeleteVM = "DELETE FROM " + s.VMs + " WHERE name = " + p(1)
	s.UpsertAttempt = upsert(p, s.Attempts, rowcodec.Split(rowcodec.AttemptCols), 2)
	s.UpsertBlock = upsert(p, s.Blocks, rowcodec.Split(rowcodec.BlockCols), 1) +
		" WHERE " + s.Blocks + ".until IS NULL OR excluded.until >= " + s.Blocks + ".until"
	s.LiftBlock = "DELETE FROM " + s.Blocks + " WHERE key = " + p(1) + " AND created_at < " + p(2)

	vcols := rowcodec.Split(rowcodec.VolumeWriteCols)
	s.InsertVolume = "INSERT INTO " + s.Volumes + " (" + strings.Join(vcols, ", ") + ", version) VALUES (" +
		params(p, 1, len(vcols)) + ", 1)"
	vwrite := vcols[1:]
	vn := len(vwrite)
	vm := p(1 + slices.Index(vwrite, "vm"))
	s.UpdateVolume = "UPDATE " + s.Volumes + " SET " + assign(p, vwrite, 1) + ", version = version + 1" +
		" WHERE name = " + p(vn+1) + " AND id = " + p(vn+2) + " AND version = " + p(vn+3) +
		" AND (vm = '' OR " + vm + " = '' OR vm = " + vm + ") RETURNING version"
	s.VolumeState = "SELECT state FROM " + s.Volumes + " WHERE name = " + p(1) + d.LockRow
	s.VolumeIDVersionVM = "SELECT id, version, vm FROM " + s.Volumes + " WHERE name = " + p(1)
	s.DeleteVolume = "DELETE FROM " + s.Volumes + " WHERE name = " + p(1)
	s.GetVolume = "SELECT " + rowcodec.VolumeCols + " FROM " + s.Volumes + " WHERE name = " + p(1)

	expiry := p(3)
	if d.Now != "" {
		expiry = d.Now + " + " + p(3)
	}
	s.UpsertMember = "INSERT INTO " + d.Prefix + "members (member, accounts, expiry) VALUES (" + p(1) + ", " + p(2) + ", " + expiry + ")" +
		" ON CONFLICT (member) DO UPDATE SET accounts = excluded.accounts, expiry = excluded.expiry"
	s.DeleteMember = "DELETE FROM " + d.Prefix + "members WHERE member = " + p(1)

	s.GetVM = "SELECT " + rowcodec.VMCols + " FROM " + s.VMs + " WHERE name = " + p(1)
	s.ListAttempts = "SELECT " + rowcodec.AttemptCols + " FROM " + s.Attempts + " WHERE vm = " + p(1) + " ORDER BY n"
	s.LiveBlocks = "SELECT " + rowcodec.BlockCols + " FROM " + s.Blocks + " WHERE until > " + p(1) + " ORDER BY key" + d.Collate

	stats, ready := d.Prefix+"offer_stats", d.Prefix+"offer_ready"
	var add []string
	for _, c := range offerStatsCols[6:13] {
		add = append(add, c+" = "+stats+"."+c+" + excluded."+c)
	}
	s.UpsertOfferStats = "INSERT INTO " + stats + " (" + strings.Join(offerStatsCols, ", ") + ") VALUES (" +
		params(p, 1, len(offerStatsCols)) + ") ON CONFLICT (offer_key) DO UPDATE SET " + strings.Join(add, ", ") +
		", updated = CASE WHEN " + stats + ".updated IS NULL OR excluded.updated > " + stats + ".updated" +
		" THEN excluded.updated ELSE " + stats + ".updated END"
	s.UpsertOfferReady = "INSERT INTO " + ready + " (offer_key, bucket, n) VALUES (" + p(1) + ", " + p(2) + ", 1)" +
		" ON CONFLICT (offer_key, bucket) DO UPDATE SET n = " + ready + ".n + 1"
	var cols []string
	for _, c := range offerStatsCols {
		cols = append(cols, "s."+c)
	}
	s.ListOfferStats = "SELECT " + strings.Join(cols, ", ") + ", r.bucket, r.n FROM " + stats + " s LEFT JOIN " + ready +
		" r ON r.offer_key = s.offer_key"
	return s
}

// Step returns the statements a Step runs, each once: a backend that
// prepares statements prepares these.
func (s *Statements) Step() []string {
	return []string{s.InsertVM, s.UpdateVM, s.VMState, s.VMOwnerVersion, s.VMExists, s.DeleteAttempts,
		s.DeleteVM, s.UpsertAttempt, s.UpsertBlock, s.LiftBlock, s.UpsertOfferStats, s.UpsertOfferReady,
		s.InsertVolume, s.UpdateVolume, s.VolumeState, s.VolumeIDVersionVM, s.DeleteVolume}
}

// ListVolumes returns the query of journal.Volumes.ListVolumes for opts and
// its arguments.
func (s *Statements) ListVolumes(opts journal.VolumeListOptions) (query string, args []any) {
	var where []string
	if opts.Live {
		where = append(where, "state <> '"+string(journal.VolumeDeleted)+"'")
	}
	if opts.VM != "" {
		args = append(args, opts.VM)
		where = append(where, "vm = "+s.d.Param(len(args)))
	}
	query = "SELECT " + rowcodec.VolumeCols + " FROM " + s.Volumes
	if len(where) > 0 {
		query += " WHERE " + strings.Join(where, " AND ")
	}
	return query + " ORDER BY name" + s.d.Collate, args
}

// ListVMs returns the query of journal.Journal.ListVMs for opts and its
// arguments; none is true when opts matches no VM whatever the journal
// holds (Live with only terminal States), and the query need not run.
func (s *Statements) ListVMs(opts journal.ListOptions) (query string, args []any, none bool) {
	var where []string
	states := opts.WantedStates()
	if states != nil && len(states) == 0 {
		return "", nil, true
	}
	if len(states) > 0 {
		vals := make([]string, len(states))
		for i, st := range states {
			vals[i] = string(st)
		}
		cond, a := s.d.In("state", len(args)+1, vals)
		where, args = append(where, cond), append(args, a...)
	}
	if opts.Cluster != "" {
		args = append(args, opts.Cluster)
		where = append(where, "cluster = "+s.d.Param(len(args)))
	}
	query = "SELECT " + rowcodec.VMCols + " FROM " + s.VMs
	if len(where) > 0 {
		query += " WHERE " + strings.Join(where, " AND ")
	}
	return query + " ORDER BY name" + s.d.Collate, args, false
}

// ListEvents returns the query of journal.Journal.Events for q and its
// arguments. A Limit of 0 or less is no limit.
func (s *Statements) ListEvents(q journal.EventQuery) (query string, args []any) {
	args = []any{q.After}
	query = "SELECT " + rowcodec.EventCols + " FROM " + s.Events + " WHERE seq > " + s.d.Param(1)
	if q.VM != "" {
		args = append(args, q.VM)
		query += " AND vm = " + s.d.Param(len(args))
	}
	query += " ORDER BY seq"
	if q.Limit > 0 {
		args = append(args, q.Limit)
		query += " LIMIT " + s.d.Param(len(args))
	}
	return query, args
}

// params returns the placeholders of n arguments from the one at from.
func params(p func(int) string, from, n int) string {
	ps := make([]string, n)
	for i := range ps {
		ps[i] = p(from + i)
	}
	return strings.Join(ps, ", ")
}

// assign returns "col = p, ..." for cols, arguments from the one at from.
func assign(p func(int) string, cols []string, from int) string {
	parts := make([]string, len(cols))
	for i, c := range cols {
		parts[i] = c + " = " + p(from+i)
	}
	return strings.Join(parts, ", ")
}

// upsert returns an INSERT of every column of table that, on a conflict of
// its first key columns, replaces the others with the new values.
func upsert(p func(int) string, table string, cols []string, key int) string {
	set := make([]string, 0, len(cols)-key)
	for _, c := range cols[key:] {
		set = append(set, c+" = excluded."+c)
	}
	return fmt.Sprintf("INSERT INTO %s (%s) VALUES (%s) ON CONFLICT (%s) DO UPDATE SET %s",
		table, strings.Join(cols, ", "), params(p, 1, len(cols)), strings.Join(cols[:key], ", "), strings.Join(set, ", "))
}
