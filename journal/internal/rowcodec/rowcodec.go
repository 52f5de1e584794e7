// Package rowcodec turns journal records (VM, Attempt, Event, Block, Volume) into
// the column values of the tables both SQL backends share, and back. It is
// the one place that knows the column lists and how a field is stored, so a
// new column is added here once; each backend keeps only its dialect: the
// DDL of its migrations, its placeholders, and the one column type the
// drivers store differently, a string list (Lists).
//
// Storage rules, the same for every backend:
//
//   - A time is a BIGINT/INTEGER of unix nanoseconds (UTC), so it round-trips
//     to the nanosecond; the zero time is NULL and reads back as the zero
//     time; a time outside the range of unix nanoseconds (before 1678 or
//     after 2262) is refused with an error naming the field.
//   - A JSON field is TEXT, byte for byte (never jsonb, which reorders keys);
//     an empty json.RawMessage is NULL and reads back nil; a non-empty one
//     must be valid JSON.
//   - A bool is the driver's (SQLite stores 1 or 0).
//
// A backend builds its statements from the column lists and converts with a
// Codec:
//
//	var codec = rowcodec.Codec{Lists: jsonLists{}}
//
//	q := "SELECT " + rowcodec.VMCols + " FROM vms WHERE name = ?"
//	v, err := codec.ScanVM(db.QueryRowContext(ctx, q, name))
//
// Values for writing are plain Go values (nil, int64, string, bool, …) or
// pointers to them (*int64, *string; nil for NULL), which database/sql
// drivers and pgx both take. Scans use pointer destinations (**int64,
// **string), which both accept too.
package rowcodec

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/org/gpuprov/journal"
)

// Column lists, in the order the Scan and Args methods use.
const (
	// VMCols are every column of a VM row.
	VMCols = `name, id, cluster, request, state, phase, attempt, provider, region, zone, offer,
		price_per_hour, instance_id, ssh_host, ssh_port, ssh_user, host_key, deadline, last_error,
		last_error_kind, owner, lease_expiry, version, created_at, updated_at, ready_at, ended_at,
		next_try, expires_at`
	// AttemptCols are every column of an attempt row: the values of
	// Codec.AttemptArgs.
	AttemptCols = `vm, n, provider, region, zone, offer_key, offer, state, phase, token, prepared,
		instance_ids, host_key, create_sent, cleaned_up, error, error_kind, started_at, ended_at,
		host, acceptance`
	// EventCols are every column of an event row; EventWriteCols without
	// seq, which the backend assigns.
	EventCols = `seq, ` + EventWriteCols
	// EventWriteCols are the values of Codec.EventArgs.
	EventWriteCols = `time, vm, attempt, type, phase, provider, region, zone, instance_id,
		error_kind, message, owner`
	// BlockCols are every column of a block row: the values of
	// Codec.BlockArgs.
	BlockCols = `key, scope, provider, error_kind, reason, until, created_at`
	// VolumeCols are every column of a volume row: VolumeWriteCols, then
	// version.
	VolumeCols = VolumeWriteCols + `, version`
	// VolumeWriteCols are the values of Codec.VolumeArgs: every column of
	// a volume row but version, name first.
	VolumeWriteCols = `name, id, cloud_id, provider, region, zone, size_gb, mount_path, keep, state, vm,
		device, token, last_error, created_at, updated_at, ended_at`
)

// VMWriteCols are the values of Codec.VMArgs: every VM column but the lease
// and version columns, name first.
var VMWriteCols = []string{"name", "id", "cluster", "request", "state", "phase", "attempt", "provider",
	"region", "zone", "offer", "price_per_hour", "instance_id", "ssh_host", "ssh_port", "ssh_user",
	"host_key", "deadline", "last_error", "last_error_kind", "created_at", "updated_at", "ready_at", "ended_at",
	"next_try", "expires_at"}

// VMCreateCols are the values of Codec.CreateArgs: VMWriteCols, then the
// lease columns (a Create writes the lease it is given; version is the
// backend's literal 1).
var VMCreateCols = append(append([]string{}, VMWriteCols...), "owner", "lease_expiry")

// Split splits a column list constant into its names.
func Split(cols string) []string {
	f := strings.Split(cols, ",")
	for i := range f {
		f[i] = strings.TrimSpace(f[i])
	}
	return f
}

// Lists is how a driver stores a string list (Attempt.InstanceIDs): the one
// field whose column type the backends do not share (JSON text in SQLite, a
// TEXT[] in PostgreSQL).
type Lists interface {
	// Value returns the column value of ss, which is not empty.
	Value(ss []string) (any, error)
	// Dest returns a scan destination for the column and a function that
	// returns, after the scan, the list it held: nil for NULL or empty.
	Dest() (dest any, list func() ([]string, error))
}

// Codec converts records to column values and back for one driver. The
// zero Codec is not usable: Lists is required.
type Codec struct {
	Lists Lists
}

// Scanner is one row to scan: a *sql.Row, *sql.Rows, pgx.Row or pgx.Rows.
type Scanner interface{ Scan(dest ...any) error }

// ScanVM reads a row of VMCols.
func (Codec) ScanVM(s Scanner) (journal.VM, error) {
	var (
		v                                      journal.VM
		state                                  string
		request, offer                         *string
		deadline, lease, created, updated, rdy *int64
		ended, nextTry, expires                *int64
	)
	err := s.Scan(&v.Name, &v.ID, &v.Cluster, &request, &state, &v.Phase, &v.Attempt, &v.Provider,
		&v.Region, &v.Zone, &offer, &v.PricePerHour, &v.InstanceID, &v.SSHHost, &v.SSHPort, &v.SSHUser,
		&v.HostKey, &deadline, &v.LastError, &v.LastErrorKind, &v.Owner, &lease, &v.Version,
		&created, &updated, &rdy, &ended, &nextTry, &expires)
	if err != nil {
		return journal.VM{}, err
	}
	v.State = journal.VMState(state)
	v.Request, v.Offer = GoJSON(request), GoJSON(offer)
	v.Deadline, v.LeaseExpiry = GoTime(deadline), GoTime(lease)
	v.CreatedAt, v.UpdatedAt, v.ReadyAt, v.EndedAt = GoTime(created), GoTime(updated), GoTime(rdy), GoTime(ended)
	v.NextTry, v.ExpiresAt = GoTime(nextTry), GoTime(expires)
	return v, nil
}

// VMArgs returns the values of VMWriteCols for v. A field that cannot be
// stored (invalid JSON, a time out of range) is an error naming it.
func (Codec) VMArgs(v *journal.VM) ([]any, error) {
	var c conv
	args := []any{v.Name, v.ID, v.Cluster, c.json("VM.Request", v.Request), string(v.State), v.Phase,
		v.Attempt, v.Provider, v.Region, v.Zone, c.json("VM.Offer", v.Offer), v.PricePerHour,
		v.InstanceID, v.SSHHost, v.SSHPort, v.SSHUser, v.HostKey, c.time("VM.Deadline", v.Deadline),
		v.LastError, v.LastErrorKind, c.time("VM.CreatedAt", v.CreatedAt),
		c.time("VM.UpdatedAt", v.UpdatedAt), c.time("VM.ReadyAt", v.ReadyAt),
		c.time("VM.EndedAt", v.EndedAt), c.time("VM.NextTry", v.NextTry), c.time("VM.ExpiresAt", v.ExpiresAt)}
	return args, c.err
}

// CreateArgs returns the values of VMCreateCols for v.
func (cd Codec) CreateArgs(v *journal.VM) ([]any, error) {
	args, err := cd.VMArgs(v)
	if err != nil {
		return nil, err
	}
	var c conv
	args = append(args, v.Owner, c.time("VM.LeaseExpiry", v.LeaseExpiry))
	return args, c.err
}

// ScanAttempt reads a row of AttemptCols.
func (cd Codec) ScanAttempt(s Scanner) (journal.Attempt, error) {
	var (
		a                    journal.Attempt
		state                string
		offer, prepared      *string
		acceptance           *string
		sent, started, ended *int64
	)
	ids, list := cd.Lists.Dest()
	err := s.Scan(&a.VM, &a.N, &a.Provider, &a.Region, &a.Zone, &a.OfferKey, &offer, &state, &a.Phase,
		&a.Token, &prepared, ids, &a.HostKey, &sent, &a.CleanedUp, &a.Error, &a.ErrorKind, &started, &ended,
		&a.Host, &acceptance)
	if err != nil {
		return journal.Attempt{}, err
	}
	a.State = journal.AttemptState(state)
	a.Offer, a.Prepared, a.Acceptance = GoJSON(offer), GoJSON(prepared), GoJSON(acceptance)
	if a.InstanceIDs, err = list(); err != nil {
		return journal.Attempt{}, fmt.Errorf("attempt %s/%d: %w", a.VM, a.N, err)
	}
	a.CreateSent, a.StartedAt, a.EndedAt = GoTime(sent), GoTime(started), GoTime(ended)
	return a, nil
}

// AttemptArgs returns the values of AttemptCols for a.
func (cd Codec) AttemptArgs(a *journal.Attempt) ([]any, error) {
	var c conv
	var ids any
	if len(a.InstanceIDs) > 0 {
		var err error
		ids, err = cd.Lists.Value(a.InstanceIDs)
		c.keep(err)
	}
	args := []any{a.VM, a.N, a.Provider, a.Region, a.Zone, a.OfferKey, c.json("Attempt.Offer", a.Offer),
		string(a.State), a.Phase, a.Token, c.json("Attempt.Prepared", a.Prepared),
		ids, a.HostKey, c.time("Attempt.CreateSent", a.CreateSent),
		a.CleanedUp, a.Error, a.ErrorKind, c.time("Attempt.StartedAt", a.StartedAt),
		c.time("Attempt.EndedAt", a.EndedAt), a.Host, c.json("Attempt.Acceptance", a.Acceptance)}
	return args, c.err
}

// ScanEvent reads a row of EventCols.
func (Codec) ScanEvent(s Scanner) (journal.Event, error) {
	var (
		e journal.Event
		t *int64
	)
	err := s.Scan(&e.Seq, &t, &e.VM, &e.Attempt, &e.Type, &e.Phase, &e.Provider, &e.Region, &e.Zone,
		&e.InstanceID, &e.ErrorKind, &e.Message, &e.Owner)
	e.Time = GoTime(t)
	return e, err
}

// EventArgs returns the values of EventWriteCols for e.
func (Codec) EventArgs(e *journal.Event) ([]any, error) {
	var c conv
	args := []any{c.time("Event.Time", e.Time), e.VM, e.Attempt, e.Type, e.Phase, e.Provider,
		e.Region, e.Zone, e.InstanceID, e.ErrorKind, e.Message, e.Owner}
	return args, c.err
}

// ScanBlock reads a row of BlockCols.
func (Codec) ScanBlock(s Scanner) (journal.Block, error) {
	var (
		b              journal.Block
		until, created *int64
	)
	err := s.Scan(&b.Key, &b.Scope, &b.Provider, &b.ErrorKind, &b.Reason, &until, &created)
	b.Until, b.CreatedAt = GoTime(until), GoTime(created)
	return b, err
}

// BlockArgs returns the values of BlockCols for b.
func (Codec) BlockArgs(b *journal.Block) ([]any, error) {
	var c conv
	args := []any{b.Key, b.Scope, b.Provider, b.ErrorKind, b.Reason, c.time("Block.Until", b.Until),
		c.time("Block.CreatedAt", b.CreatedAt)}
	return args, c.err
}

// ScanVolume reads a row of VolumeCols.
func (Codec) ScanVolume(s Scanner) (journal.Volume, error) {
	var (
		v                       journal.Volume
		state                   string
		created, updated, ended *int64
	)
	err := s.Scan(&v.Name, &v.ID, &v.CloudID, &v.Provider, &v.Region, &v.Zone, &v.SizeGB, &v.MountPath,
		&v.Keep, &state, &v.VM, &v.Device, &v.Token, &v.LastError, &created, &updated, &ended, &v.Version)
	v.State = journal.VolumeState(state)
	v.CreatedAt, v.UpdatedAt, v.EndedAt = GoTime(created), GoTime(updated), GoTime(ended)
	return v, err
}

// VolumeArgs returns the values of VolumeWriteCols for v.
func (Codec) VolumeArgs(v *journal.Volume) ([]any, error) {
	var c conv
	args := []any{v.Name, v.ID, v.CloudID, v.Provider, v.Region, v.Zone, v.SizeGB, v.MountPath, v.Keep,
		string(v.State), v.VM, v.Device, v.Token, v.LastError, c.time("Volume.CreatedAt", v.CreatedAt),
		c.time("Volume.UpdatedAt", v.UpdatedAt), c.time("Volume.EndedAt", v.EndedAt)}
	return args, c.err
}

// The range of times a unix-nanosecond integer can hold.
var (
	minTime = time.Unix(0, math.MinInt64)
	maxTime = time.Unix(0, math.MaxInt64)
)

// Time converts t for storage: nil (NULL) for the zero time, else its unix
// nanoseconds. A time outside the storable range is an error naming field.
func Time(field string, t time.Time) (*int64, error) {
	if t.IsZero() {
		return nil, nil
	}
	if t.Before(minTime) || t.After(maxTime) {
		return nil, fmt.Errorf("%s %s is outside the storable range (%d to %d)", field, t.Format(time.RFC3339Nano), minTime.Year(), maxTime.Year())
	}
	n := t.UnixNano()
	return &n, nil
}

// CmpTime converts t for comparison with stored times: the zero time is
// before every stored time, and times outside the range are clamped.
func CmpTime(t time.Time) int64 {
	switch {
	case t.IsZero(), t.Before(minTime):
		return math.MinInt64
	case t.After(maxTime):
		return math.MaxInt64
	}
	return t.UnixNano()
}

// GoTime converts a stored time back: NULL (nil) is the zero time, anything
// else is in UTC.
func GoTime(n *int64) time.Time {
	if n == nil {
		return time.Time{}
	}
	return time.Unix(0, *n).UTC()
}

// JSON converts a JSON field for storage: nil (NULL) when empty, else its
// text, which must be valid JSON.
func JSON(field string, raw json.RawMessage) (*string, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	if !json.Valid(raw) {
		return nil, fmt.Errorf("%s is not valid JSON", field)
	}
	s := string(raw)
	return &s, nil
}

// GoJSON converts a stored JSON field back: NULL (nil) is nil.
func GoJSON(s *string) json.RawMessage {
	if s == nil {
		return nil
	}
	return json.RawMessage(*s)
}

// conv converts fields for storage and keeps the first error, so a list of
// arguments reads as one expression.
type conv struct{ err error }

func (c *conv) time(field string, t time.Time) *int64 {
	v, err := Time(field, t)
	c.keep(err)
	return v
}

func (c *conv) json(field string, raw json.RawMessage) *string {
	v, err := JSON(field, raw)
	c.keep(err)
	return v
}

func (c *conv) keep(err error) {
	if c.err == nil {
		c.err = err
	}
}

// Prune runs the batches of a journal.Pruner.Prune: VM batches while one
// removes a full batch, then volume batches likewise, then block batches,
// checking ctx before each. vms removes one batch and adds what it removed
// to res; volumes removes one batch of volumes deleted before opts.Before,
// and blocks one batch of expired blocks, and each returns how many.
// errorf wraps an error with the backend's prefix.
func Prune(ctx context.Context, opts journal.PruneOptions,
	vms func(ctx context.Context, batch int, res *journal.PruneResult) (int, error),
	volumes func(ctx context.Context, batch int) (int, error),
	blocks func(ctx context.Context, batch int) (int, error),
	errorf func(format string, a ...any) error,
) (journal.PruneResult, error) {
	var res journal.PruneResult
	batch := opts.BatchSize()
	if !opts.Before.IsZero() {
		before := opts.Before.UTC().Format("2006-01-02T15:04:05Z")
		for {
			if err := ctx.Err(); err != nil {
				return res, errorf("prune: %w", err)
			}
			n, err := vms(ctx, batch, &res)
			if err != nil {
				err = withCause(ctx, err)
				return res, errorf("prune VMs ended before %s: %w", before, err)
			}
			if n < batch {
				break
			}
		}
		for {
			if err := ctx.Err(); err != nil {
				return res, errorf("prune: %w", err)
			}
			n, err := volumes(ctx, batch)
			if err != nil {
				err = withCause(ctx, err)
				return res, errorf("prune volumes deleted before %s: %w", before, err)
			}
			res.Volumes += n
			if n < batch {
				break
			}
		}
	}
	if !opts.Now.IsZero() {
		for {
			if err := ctx.Err(); err != nil {
				return res, errorf("prune: %w", err)
			}
			n, err := blocks(ctx, batch)
			if err != nil {
				err = withCause(ctx, err)
				return res, errorf("prune expired blocks: %w", err)
			}
			res.Blocks += n
			if n < batch {
				break
			}
		}
	}
	return res, nil
}

// withCause adds ctx's error to err when ctx ended and err does not say so
// (database/sql answers "transaction has already been committed or rolled
// back" for a statement of a transaction its context cancelled).
func withCause(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("%w (%w)", cerr, err)
	}
	return err
}
