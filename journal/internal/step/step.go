// Package step runs a journal.Step on a SQL database, the same way in both
// backends: it checks and converts the whole Step before any database work
// (so a Step with a bad field fails without touching the store), runs its
// Create, Update, Volumes, Attempts, Blocks, Lifts and Outcomes in the backend's transaction
// with the statements of package stmt, and, once the backend has committed,
// writes into the Step what the transaction produced. The backend keeps its
// transaction, its event log (SQLite's autoincrement, PostgreSQL's counter
// row) and its driver.
//
//	r := &step.Runner{Codec: codec, SQL: sql, NoRows: pgx.ErrNoRows}
//	p, err := r.Prepare(s)
//	...                   // BEGIN
//	res, err := r.Apply(tx, p)
//	...                   // append p.Events, COMMIT
//	p.WriteBack(res)
package step

import (
	"errors"
	"fmt"
	"time"

	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/journal/internal/offerstat"
	"github.com/org/gpuprov/journal/internal/rowcodec"
	"github.com/org/gpuprov/journal/internal/stmt"
)

// Tx is the backend's transaction as a Step's statements run on it.
type Tx interface {
	Exec(query string, args ...any) error
	QueryRow(query string, args ...any) rowcodec.Scanner
}

// Runner prepares and applies Steps for one backend.
type Runner struct {
	Codec rowcodec.Codec
	SQL   *stmt.Statements
	// NoRows is the driver's error for a QueryRow that found no row.
	NoRows error
	// Duplicate reports an insert that failed on the VMs' primary key: a
	// concurrent Create of the same new name. Nil where writers are
	// serialized and it cannot happen.
	Duplicate func(error) bool
	// LeaseClock: the backend grants leases by its own clock (the SQL's
	// Dialect.Now), so a Create with an Owner stores its lease as a length.
	LeaseClock bool
}

// Prepared is a Step checked and converted for storage.
type Prepared struct {
	Step *journal.Step
	// Events are the rows of Step.Events (rowcodec.Codec.EventArgs), which
	// the backend appends itself.
	Events [][]any

	create, update   []any
	volumes          [][]any // per Step.Volumes: InsertVolume's or UpdateVolume's arguments
	attempts, blocks [][]any
	outcomes         []offerstat.Increment
	granted          bool // Create's lease is granted by the backend's clock
}

// Result is what a Step's transaction produced.
type Result struct {
	Created  time.Time // Create's stored lease expiry
	Version  int64     // Update's new version
	Lease    time.Time // Update's stored lease expiry
	Released bool      // Update's lease was freed (Step.ReleaseLease)
	Volumes  []int64   // each Step.Volumes' new version, in order
	Seqs     []int64   // the Events' Seq, in order; the backend sets them
}

// Prepare checks s and converts every record of it for storage. A field that
// cannot be stored is an error naming it, and nothing is written.
func (r *Runner) Prepare(s *journal.Step) (*Prepared, error) {
	p := &Prepared{Step: s}
	var err error
	if v := s.Create; v != nil {
		if v.Name == "" {
			return nil, errors.New("create: VM with empty Name")
		}
		if p.create, err = r.Codec.CreateArgs(v); err != nil {
			return nil, fmt.Errorf("create VM %s: %w", v.Name, err)
		}
		if r.LeaseClock {
			if p.create, p.granted, err = lengthArgs(v, p.create); err != nil {
				return nil, fmt.Errorf("create VM %s: %w", v.Name, err)
			}
		}
	}
	if v := s.Update; v != nil {
		args, err := r.Codec.VMArgs(v)
		if err != nil {
			return nil, fmt.Errorf("update VM %s: %w", v.Name, err)
		}
		p.update = append(args[1:], v.Name, v.Owner, v.Version, s.ReleaseLease)
	}
	for i := range s.Volumes {
		w := &s.Volumes[i]
		v := &w.Volume
		if v.Name == "" {
			return nil, fmt.Errorf("volume write %d: empty Name", i)
		}
		if !v.State.Valid() {
			return nil, fmt.Errorf("volume %s: unknown state %q", v.Name, v.State)
		}
		args, err := r.Codec.VolumeArgs(v)
		if err != nil {
			return nil, fmt.Errorf("volume %s: %w", v.Name, err)
		}
		if !w.Create {
			args = append(args[1:], v.Name, v.ID, v.Version)
		}
		p.volumes = append(p.volumes, args)
	}
	for i := range s.Attempts {
		a := &s.Attempts[i]
		args, err := r.Codec.AttemptArgs(a)
		if err != nil {
			return nil, fmt.Errorf("attempt %d of VM %s: %w", a.N, a.VM, err)
		}
		p.attempts = append(p.attempts, args)
	}
	for i := range s.Events {
		e := &s.Events[i]
		args, err := r.Codec.EventArgs(e)
		if err != nil {
			return nil, fmt.Errorf("event %d (%s of VM %s): %w", i, e.Type, e.VM, err)
		}
		p.Events = append(p.Events, args)
	}
	for i := range s.Blocks {
		args, err := r.Codec.BlockArgs(&s.Blocks[i])
		if err != nil {
			return nil, fmt.Errorf("block %s: %w", s.Blocks[i].Key, err)
		}
		p.blocks = append(p.blocks, args)
	}
	if p.outcomes, err = offerstat.Increments(s.Outcomes); err != nil {
		return nil, err
	}
	return p, nil
}

// lengthArgs turns CreateArgs of v into InsertVM's arguments for a backend
// that grants leases by its clock: a lease held (an Owner and a
// LeaseExpiry) becomes its length from CreatedAt, the stored expiry NULL; a
// lease with no owner is stored as given.
func lengthArgs(v *journal.VM, args []any) ([]any, bool, error) {
	if v.Owner == "" || v.LeaseExpiry.IsZero() {
		return append(args, nil), false, nil
	}
	if v.CreatedAt.IsZero() {
		return nil, false, errors.New("a lease (Owner and LeaseExpiry) with a zero CreatedAt: its length is LeaseExpiry − CreatedAt")
	}
	length := int64(v.LeaseExpiry.Sub(v.CreatedAt))
	args[len(args)-1] = nil
	return append(args, length), true, nil
}

// Empty reports whether the Step writes nothing.
func (p *Prepared) Empty() bool {
	return p.create == nil && p.update == nil &&
		len(p.volumes)+len(p.attempts)+len(p.Events)+len(p.blocks)+len(p.Step.Lifts)+len(p.outcomes) == 0
}

// Apply runs the Step's Create, Update, Volumes, Attempts, Blocks, Lifts and
// Outcomes, in that order, in tx; the backend appends the Events. On error the backend must
// roll back what ran.
func (r *Runner) Apply(tx Tx, p *Prepared) (Result, error) {
	var res Result
	if v := p.Step.Create; v != nil {
		var err error
		if res.Created, err = r.create(tx, v.Name, p.create); err != nil {
			return res, err
		}
	}
	if v := p.Step.Update; v != nil {
		var err error
		if res.Version, res.Lease, err = r.update(tx, v, p.update); err != nil {
			return res, err
		}
		res.Released = p.Step.ReleaseLease
	}
	for i, args := range p.volumes {
		w := &p.Step.Volumes[i]
		version := int64(1)
		var err error
		if w.Create {
			err = r.createVolume(tx, w.Volume.Name, args)
		} else {
			version, err = r.updateVolume(tx, &w.Volume, args)
		}
		if err != nil {
			return res, err
		}
		res.Volumes = append(res.Volumes, version)
	}
	checked := map[string]bool{}
	for i, args := range p.attempts {
		a := &p.Step.Attempts[i]
		if !checked[a.VM] {
			var one int
			err := tx.QueryRow(r.SQL.VMExists, a.VM).Scan(&one)
			if errors.Is(err, r.NoRows) {
				err = journal.ErrNotFound
			}
			if err != nil {
				return res, fmt.Errorf("attempt %d of VM %s: %w", a.N, a.VM, err)
			}
			checked[a.VM] = true
		}
		if err := tx.Exec(r.SQL.UpsertAttempt, args...); err != nil {
			return res, fmt.Errorf("attempt %d of VM %s: %w", a.N, a.VM, err)
		}
	}
	for i, args := range p.blocks {
		if err := tx.Exec(r.SQL.UpsertBlock, args...); err != nil {
			return res, fmt.Errorf("block %s: %w", p.Step.Blocks[i].Key, err)
		}
	}
	for _, l := range p.Step.Lifts {
		if err := tx.Exec(r.SQL.LiftBlock, l.Key, rowcodec.CmpTime(l.Before)); err != nil {
			return res, fmt.Errorf("lifting block %s: %w", l.Key, err)
		}
	}
	for _, o := range p.outcomes {
		if err := tx.Exec(r.SQL.UpsertOfferStats, o.Stats...); err != nil {
			return res, fmt.Errorf("offer history of %s: %w", o.Key, err)
		}
		if o.Bucket >= 0 {
			if err := tx.Exec(r.SQL.UpsertOfferReady, o.Key, o.Bucket); err != nil {
				return res, fmt.Errorf("offer history of %s: %w", o.Key, err)
			}
		}
	}
	return res, nil
}

// WriteBack sets in the Step what its committed transaction produced:
// Create.Version (and Create.LeaseExpiry, when the backend granted the lease
// by its clock), Update.Version, Update.LeaseExpiry (and Update.Owner, when
// the lease was freed), each Volumes' Version, and the Events' Seq.
func (p *Prepared) WriteBack(r Result) {
	if v := p.Step.Create; v != nil {
		v.Version = 1
		if p.granted {
			v.LeaseExpiry = r.Created
		}
	}
	if v := p.Step.Update; v != nil {
		v.Version = r.Version
		v.LeaseExpiry = r.Lease
		if r.Released {
			v.Owner = ""
		}
	}
	for i, version := range r.Volumes {
		p.Step.Volumes[i].Volume.Version = version
	}
	for i, seq := range r.Seqs {
		p.Step.Events[i].Seq = seq
	}
}

// createVolume inserts a volume, replacing a deleted one of that name.
func (r *Runner) createVolume(tx Tx, name string, args []any) error {
	var state string
	err := tx.QueryRow(r.SQL.VolumeState, name).Scan(&state)
	switch {
	case err == nil && journal.VolumeState(state) != journal.VolumeDeleted:
		return fmt.Errorf("create volume %s: %w (it is %s)", name, journal.ErrExists, state)
	case err == nil:
		if err := tx.Exec(r.SQL.DeleteVolume, name); err != nil {
			return fmt.Errorf("create volume %s: remove the deleted volume: %w", name, err)
		}
	case !errors.Is(err, r.NoRows):
		return fmt.Errorf("create volume %s: %w", name, err)
	}
	if err := tx.Exec(r.SQL.InsertVolume, args...); err != nil {
		if r.Duplicate != nil && r.Duplicate(err) {
			return fmt.Errorf("create volume %s: %w (created concurrently by another writer)", name, journal.ErrExists)
		}
		return fmt.Errorf("create volume %s: %w", name, err)
	}
	return nil
}

// updateVolume writes a volume conditionally on its id and version and on
// not moving it from one VM to another, and returns the new version. When
// no row matched it reads the volume to say why: ErrNotFound, or
// ErrConflict naming what differed.
func (r *Runner) updateVolume(tx Tx, v *journal.Volume, args []any) (int64, error) {
	var version int64
	err := tx.QueryRow(r.SQL.UpdateVolume, args...).Scan(&version)
	if err == nil {
		return version, nil
	}
	if !errors.Is(err, r.NoRows) {
		return 0, fmt.Errorf("update volume %s: %w", v.Name, err)
	}
	var id, vm string
	err = tx.QueryRow(r.SQL.VolumeIDVersionVM, v.Name).Scan(&id, &version, &vm)
	switch {
	case errors.Is(err, r.NoRows):
		return 0, fmt.Errorf("update volume %s: %w", v.Name, journal.ErrNotFound)
	case err != nil:
		return 0, fmt.Errorf("update volume %s: %w", v.Name, err)
	case id != v.ID:
		return 0, fmt.Errorf("update volume %s: %w (stored incarnation %q, given %q)", v.Name, journal.ErrConflict, id, v.ID)
	case version != v.Version:
		return 0, fmt.Errorf("update volume %s: %w (stored version %d, given %d)", v.Name, journal.ErrConflict, version, v.Version)
	default:
		return 0, fmt.Errorf("update volume %s: %w (attached to VM %s; the update attaches it to VM %s)", v.Name, journal.ErrConflict, vm, v.VM)
	}
}

// create inserts a VM, replacing a terminal one of that name (whose attempts
// go; its events stay), and returns its stored lease expiry.
func (r *Runner) create(tx Tx, name string, args []any) (time.Time, error) {
	var state string
	err := tx.QueryRow(r.SQL.VMState, name).Scan(&state)
	switch {
	case err == nil && !journal.VMState(state).Terminal():
		return time.Time{}, fmt.Errorf("create VM %s: %w (it is %s)", name, journal.ErrExists, state)
	case err == nil:
		if err := tx.Exec(r.SQL.DeleteAttempts, name); err != nil {
			return time.Time{}, fmt.Errorf("create VM %s: remove the %s VM's attempts: %w", name, state, err)
		}
		if err := tx.Exec(r.SQL.DeleteVM, name); err != nil {
			return time.Time{}, fmt.Errorf("create VM %s: remove the %s VM: %w", name, state, err)
		}
	case !errors.Is(err, r.NoRows):
		return time.Time{}, fmt.Errorf("create VM %s: %w", name, err)
	}
	var lease *int64
	if err := tx.QueryRow(r.SQL.InsertVM, args...).Scan(&lease); err != nil {
		if r.Duplicate != nil && r.Duplicate(err) {
			return time.Time{}, fmt.Errorf("create VM %s: %w (created concurrently by another writer)", name, journal.ErrExists)
		}
		return time.Time{}, fmt.Errorf("create VM %s: %w", name, err)
	}
	return rowcodec.GoTime(lease), nil
}

// update writes a VM conditionally on its owner and version, and returns the
// new version and the stored lease expiry. When no row matched it reads the
// VM to say why: ErrNotFound, ErrLeaseLost (checked first), ErrConflict.
func (r *Runner) update(tx Tx, v *journal.VM, args []any) (int64, time.Time, error) {
	var (
		version int64
		lease   *int64
	)
	err := tx.QueryRow(r.SQL.UpdateVM, args...).Scan(&version, &lease)
	if err == nil {
		return version, rowcodec.GoTime(lease), nil
	}
	if !errors.Is(err, r.NoRows) {
		return 0, time.Time{}, fmt.Errorf("update VM %s: %w", v.Name, err)
	}
	var owner string
	err = tx.QueryRow(r.SQL.VMOwnerVersion, v.Name).Scan(&owner, &version)
	switch {
	case errors.Is(err, r.NoRows):
		return 0, time.Time{}, fmt.Errorf("update VM %s: %w", v.Name, journal.ErrNotFound)
	case err != nil:
		return 0, time.Time{}, fmt.Errorf("update VM %s: %w", v.Name, err)
	case owner != v.Owner:
		return 0, time.Time{}, fmt.Errorf("update VM %s as %q: %w (the lease holder is %q)", v.Name, v.Owner, journal.ErrLeaseLost, owner)
	default:
		return 0, time.Time{}, fmt.Errorf("update VM %s: %w (stored version %d, given %d)", v.Name, journal.ErrConflict, version, v.Version)
	}
}
