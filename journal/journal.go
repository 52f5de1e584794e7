// Package journal is gpuprov's durable memory: every VM, every attempt to
// create it, every event of its life, the blocklist of offers that failed, and
// the lease that says which process drives a VM. The engine writes the journal
// before every cloud mutation (write-ahead), so a crash of the calling process
// at any instant leaves enough on disk for Recover to find, adopt or tear down
// whatever the cloud holds.
//
// Journal is an interface; backends register under a URL scheme, the way
// database/sql drivers do, and callers blank-import the one they want:
//
//	import _ "github.com/org/gpuprov/journal/sqlite"
//
//	j, err := journal.Open(ctx, "sqlite:/var/lib/gpuprov/journal.db")
//
// Every backend passes the conformance kit in journal/journaltest, which is
// the executable form of the semantics documented here. Secrets (API keys,
// tokens, private keys) never go into a journal.
//
// Persistent volumes (Volume) are journaled as entities of their own,
// written in the same Steps as the VMs that use them (Step.Volumes), by a
// Journal that implements the optional interface Volumes (both backends
// here do). A Journal without it refuses a Step with Volumes, and the
// engine refuses requests with volumes on it.
//
// Times are the caller's: the engine passes its clock's now and the lease
// expiry it wants, so tests drive leases with an injected clock. A lease is
// a length, expiry − now: a backend shared by several machines (PostgreSQL)
// grants and compares leases by its own clock instead, measuring that length
// from its own now, so that replicas whose clocks disagree never both drive
// a VM (see LeaseClock). A backend on one host (SQLite) keeps the caller's
// clock.
package journal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// Errors callers branch on. Backends return them (wrapped, with context).
var (
	// ErrNotFound: no VM (or volume) with that name.
	ErrNotFound = errors.New("journal: not found")
	// ErrExists: Create named a VM that exists and is not Deleted or Failed,
	// or a volume that exists and is not Deleted.
	ErrExists = errors.New("journal: VM exists")
	// ErrConflict: an update's Version did not match the stored one; someone
	// else wrote the VM (or volume) since it was read. A volume update that
	// would attach the volume to a second VM fails with it too.
	ErrConflict = errors.New("journal: version conflict")
	// ErrLeaseLost: an update's Owner is not the VM's lease holder any more.
	// The caller must stop driving the VM and touch nothing of it.
	ErrLeaseLost = errors.New("journal: lease lost")
	// ErrLeased: Acquire found the lease held by a live owner. The error is
	// a *LeasedError naming the holder.
	ErrLeased = errors.New("journal: VM is leased by another owner")
	// ErrUnreachable: the journal cannot be read or written now — its
	// server does not answer or refused the connection, or its disk is
	// full — and may be later. Whether a write that failed so was committed
	// is unknown. Backends wrap the underlying error with it.
	ErrUnreachable = errors.New("journal unreachable")
)

// LeasedError says who holds a lease. errors.Is(err, ErrLeased) is true.
type LeasedError struct {
	VM     string
	Owner  string
	Expiry time.Time
}

func (e *LeasedError) Error() string {
	return fmt.Sprintf("journal: VM %s is driven by %s (lease until %s)", e.VM, e.Owner, e.Expiry.UTC().Format(time.RFC3339))
}

func (e *LeasedError) Is(target error) bool { return target == ErrLeased }

// VMState is where a VM is in its life.
//
//	pending → provisioning → ready → deleting → deleted
//	            ↕ waiting  ↘ failed (all offers exhausted or aborted, everything torn down)
//
// Waiting is a launch that asked to wait for capacity
// (gpuprov.Request.WaitForCapacity) and found every offer blocked or tried:
// nothing of it runs, and its next try is due at NextTry.
//
// Pending, Provisioning, Waiting and Deleting are active: a process must
// drive them to an end, and Recover picks them up after a crash. A VM whose teardown
// could not finish stays Deleting with its LastError, never Failed.
type VMState string

const (
	StatePending      VMState = "pending"
	StateProvisioning VMState = "provisioning"
	StateWaiting      VMState = "waiting"
	StateReady        VMState = "ready"
	StateDeleting     VMState = "deleting"
	StateDeleted      VMState = "deleted"
	StateFailed       VMState = "failed"
)

// Active reports whether a process must drive the VM to an end.
func (s VMState) Active() bool {
	return s == StatePending || s == StateProvisioning || s == StateWaiting || s == StateDeleting
}

// Terminal reports whether the VM is over (Deleted or Failed): its name may
// be used again.
func (s VMState) Terminal() bool { return s == StateDeleted || s == StateFailed }

// VM is one journaled VM. The engine owns the meaning of Phase and of the
// JSON fields; the journal stores them as given.
type VM struct {
	Name    string          `json:"name"`
	ID      string          `json:"id"`                // unique per incarnation of the name; part of idempotency tokens
	Cluster string          `json:"cluster,omitempty"` // the cluster it belongs to, if any
	Request json.RawMessage `json:"request"`           // the launch request, without secrets
	State   VMState         `json:"state"`
	Phase   string          `json:"phase,omitempty"` // within provisioning: prepare, create, boot, connect, bootstrap, join
	Attempt int             `json:"attempt"`         // the current attempt number, 0 before the first

	Provider     string          `json:"provider,omitempty"`
	Region       string          `json:"region,omitempty"`
	Zone         string          `json:"zone,omitempty"`
	Offer        json.RawMessage `json:"offer,omitempty"`
	PricePerHour float64         `json:"price_per_hour,omitempty"`
	InstanceID   string          `json:"instance_id,omitempty"`
	SSHHost      string          `json:"ssh_host,omitempty"`
	SSHPort      int             `json:"ssh_port,omitempty"`
	SSHUser      string          `json:"ssh_user,omitempty"`
	HostKey      string          `json:"host_key,omitempty"` // pinned public host key of InstanceID (authorized_keys form)

	Deadline      time.Time `json:"deadline,omitzero"` // the launch's absolute deadline; zero: none
	LastError     string    `json:"last_error,omitempty"`
	LastErrorKind string    `json:"last_error_kind,omitempty"`

	Owner       string    `json:"owner,omitempty"` // lease holder; empty: free
	LeaseExpiry time.Time `json:"lease_expiry,omitzero"`
	Version     int64     `json:"version"` // bumped by every write

	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	ReadyAt   time.Time `json:"ready_at,omitzero"`
	EndedAt   time.Time `json:"ended_at,omitzero"` // deleted or failed

	// NextTry is when a waiting VM tries its offers again; zero otherwise.
	NextTry time.Time `json:"next_try,omitzero"`
	// ExpiresAt is when a ready VM is to be deleted, by its TTL or its cost
	// cap, whichever comes first; zero: never.
	ExpiresAt time.Time `json:"expires_at,omitzero"`
}

// AttemptState is where an attempt is.
type AttemptState string

const (
	AttemptActive      AttemptState = "active"       // under way
	AttemptTearingDown AttemptState = "tearing-down" // teardown intent journaled, not confirmed
	AttemptTornDown    AttemptState = "torn-down"    // its instances are confirmed gone
	AttemptSucceeded   AttemptState = "succeeded"    // its instance is the VM's instance
)

// Attempt is one try of one offer for one VM. Attempts are numbered from 1
// per VM and are upserted by (VM, N).
type Attempt struct {
	VM          string          `json:"vm"`
	N           int             `json:"n"`
	Provider    string          `json:"provider"`
	Region      string          `json:"region"`
	Zone        string          `json:"zone,omitempty"`
	OfferKey    string          `json:"offer_key"`
	Offer       json.RawMessage `json:"offer"`
	State       AttemptState    `json:"state"`
	Phase       string          `json:"phase"`
	Token       string          `json:"token,omitempty"`    // the create's idempotency token (not a secret)
	Prepared    json.RawMessage `json:"prepared,omitempty"` // Prepare's private result
	InstanceIDs []string        `json:"instance_ids,omitempty"`
	HostKey     string          `json:"host_key,omitempty"` // public host key injected or pinned for this attempt
	CreateSent  time.Time       `json:"create_sent,omitzero"`
	CleanedUp   bool            `json:"cleaned_up,omitempty"` // Cleanup confirmed for its location
	Error       string          `json:"error,omitempty"`
	ErrorKind   string          `json:"error_kind,omitempty"`
	StartedAt   time.Time       `json:"started_at"`
	EndedAt     time.Time       `json:"ended_at,omitzero"`
	// Host is the cloud's id of the machine the attempt's instance ran on,
	// where the cloud names one (provider.Offer.Host, provider.Observed.Host).
	Host string `json:"host,omitempty"`
	// Acceptance is the GPU acceptance result of the attempt (a
	// gpu.Report), stored as given: the journal does not interpret it.
	Acceptance json.RawMessage `json:"acceptance,omitempty"`
}

// Event is one entry of a VM's audit trail. Seq is assigned by the journal,
// increasing in commit order across all VMs.
type Event struct {
	Seq        int64     `json:"seq"`
	Time       time.Time `json:"time"`
	VM         string    `json:"vm"`
	Attempt    int       `json:"attempt,omitempty"`
	Type       string    `json:"type"`
	Phase      string    `json:"phase,omitempty"`
	Provider   string    `json:"provider,omitempty"`
	Region     string    `json:"region,omitempty"`
	Zone       string    `json:"zone,omitempty"`
	InstanceID string    `json:"instance_id,omitempty"`
	ErrorKind  string    `json:"error_kind,omitempty"`
	Message    string    `json:"message,omitempty"`
	Owner      string    `json:"owner,omitempty"`
}

// String renders the event as one line: time, VM, type, and what of
// attempt, location, phase, error kind and message it has.
func (e Event) String() string {
	var b strings.Builder
	b.WriteString(e.Time.UTC().Format(time.RFC3339))
	b.WriteString(" " + e.VM + " " + e.Type)
	if e.Attempt > 0 {
		fmt.Fprintf(&b, " attempt=%d", e.Attempt)
	}
	if e.Provider != "" {
		b.WriteString(" " + e.Provider)
		if e.Region != "" {
			b.WriteString("/" + e.Region)
		}
		if e.Zone != "" {
			b.WriteString("/" + e.Zone)
		}
	}
	if e.Phase != "" {
		b.WriteString(" phase=" + e.Phase)
	}
	if e.ErrorKind != "" {
		b.WriteString(" kind=" + e.ErrorKind)
	}
	if e.Message != "" {
		b.WriteString(": " + e.Message)
	}
	return b.String()
}

// LogValue implements slog.LogValuer: the event as a group of its set
// fields, so that logger.Info("gpuprov", "event", ev) logs structured keys.
func (e Event) LogValue() slog.Value {
	attrs := []slog.Attr{slog.Time("time", e.Time), slog.String("vm", e.VM), slog.String("type", e.Type)}
	add := func(k, v string) {
		if v != "" {
			attrs = append(attrs, slog.String(k, v))
		}
	}
	if e.Attempt > 0 {
		attrs = append(attrs, slog.Int("attempt", e.Attempt))
	}
	add("provider", e.Provider)
	add("region", e.Region)
	add("zone", e.Zone)
	add("phase", e.Phase)
	add("instance_id", e.InstanceID)
	add("error_kind", e.ErrorKind)
	add("message", e.Message)
	if e.Seq > 0 {
		attrs = append(attrs, slog.Int64("seq", e.Seq))
	}
	return slog.GroupValue(attrs...)
}

// Block is one blocklist entry: offers matching Key are skipped until Until.
// Blocks are upserted by Key; a later Until replaces an earlier one.
type Block struct {
	Key       string    `json:"key"`
	Scope     string    `json:"scope"` // offer, zone, region, provider
	Provider  string    `json:"provider"`
	ErrorKind string    `json:"error_kind"`
	Reason    string    `json:"reason"`
	Until     time.Time `json:"until"`
	CreatedAt time.Time `json:"created_at"`
}

// Step is one atomic, durable journal write: everything in it is committed
// together or not at all, and is on stable storage when Commit returns.
type Step struct {
	// Create inserts a new VM. It fails with ErrExists if a VM of that name
	// exists and is not terminal; a terminal VM of that name is replaced
	// (its attempts are removed; its events stay in the log). Create.Version
	// is set to 1. A backend with a LeaseClock holds a Create's lease (an
	// Owner and a LeaseExpiry) for LeaseExpiry − CreatedAt from its own now,
	// and sets Create.LeaseExpiry to the expiry it stored.
	Create *VM
	// Update writes a VM conditionally: it fails with ErrLeaseLost if the
	// stored Owner differs from Update.Owner, else with ErrConflict if the
	// stored Version differs from Update.Version. On success the stored and
	// the given Version are both incremented. The lease fields are not
	// written by Update (see Acquire, Renew, Release); Update.LeaseExpiry is
	// refreshed from the stored row.
	Update *VM
	// ReleaseLease, with Update, frees the VM's lease in the same write
	// (after the conditional update succeeds): Owner becomes "" and
	// LeaseExpiry zero, in the store and in Update. A driver that ends a VM
	// uses it so that ending and letting go cost one durable write.
	ReleaseLease bool
	// Attempts are upserted by (VM, N).
	Attempts []Attempt
	// Events are appended; their Seq fields are set.
	Events []Event
	// Blocks are upserted by Key.
	Blocks []Block
	// Lifts remove blocks before their Until: each removes the block of its
	// Key if that block was made before Before (a block made since stands).
	// Lifts run after Blocks.
	Lifts []Lift
	// Outcomes are added to the per-offer history (OfferHistory), in the
	// same transaction: a Step whose Update fails counts nothing.
	Outcomes []Outcome
	// Volumes are written in order, in the same transaction (see
	// VolumeWrite): a Step whose Update conflicts writes no volume, and a
	// volume write that fails fails the whole Step. Only a Journal that
	// implements Volumes accepts them; any other refuses a Step with
	// Volumes, writing nothing, with an error wrapping
	// errors.ErrUnsupported.
	Volumes []VolumeWrite
}

// OutcomeKind is what happened to an attempt, as the per-offer history
// counts it.
type OutcomeKind string

// Outcome kinds.
const (
	OutcomeCreated          OutcomeKind = "created"           // a create was sent
	OutcomeReady            OutcomeKind = "ready"             // the attempt ended ready; Elapsed: create → ready
	OutcomeAcceptanceFailed OutcomeKind = "acceptance_failed" // the machine failed GPU acceptance; Elapsed: create → end
	OutcomeStockout         OutcomeKind = "stockout"          // the cloud had no capacity; Elapsed: create → end
	OutcomePreempted        OutcomeKind = "preempted"         // a ready machine was reclaimed; Elapsed: create → reclaim
	OutcomeFailed           OutcomeKind = "failed"            // any other end after a create; Elapsed: create → end
)

// Valid reports whether k is one of the outcome kinds.
func (k OutcomeKind) Valid() bool {
	switch k {
	case OutcomeCreated, OutcomeReady, OutcomeAcceptanceFailed, OutcomeStockout, OutcomePreempted, OutcomeFailed:
		return true
	}
	return false
}

// Outcome is one fact about an attempt on an offer, for the per-offer
// history. Elapsed of every kind but OutcomeCreated and OutcomeReady adds
// to the offer's Wasted time (billed for nothing).
type Outcome struct {
	OfferKey     string        `json:"offer_key"` // provider.Offer.Key()
	Provider     string        `json:"provider"`
	Region       string        `json:"region"`
	Zone         string        `json:"zone,omitempty"`
	InstanceType string        `json:"instance_type"`
	Spot         bool          `json:"spot,omitempty"`
	Kind         OutcomeKind   `json:"kind"`
	Elapsed      time.Duration `json:"elapsed,omitempty"`
	At           time.Time     `json:"at"`
}

// OfferStats is the history of one offer: counts of what its attempts
// came to, and the time from create to ready. It is kept incrementally
// (one row per offer and one per time bucket used), never computed from the
// attempts, and survives Prune.
type OfferStats struct {
	OfferKey         string `json:"offer_key"`
	Provider         string `json:"provider"`
	Region           string `json:"region"`
	Zone             string `json:"zone,omitempty"`
	InstanceType     string `json:"instance_type"`
	Spot             bool   `json:"spot,omitempty"`
	Created          int64  `json:"created"`
	Ready            int64  `json:"ready"`
	AcceptanceFailed int64  `json:"acceptance_failed"`
	Stockouts        int64  `json:"stockouts"`
	Preempted        int64  `json:"preempted"`
	Failed           int64  `json:"failed"`
	// ReadyP50 and ReadyP90 are the median and 90th percentile (nearest
	// rank) of the time from create to ready, read from a histogram of
	// fixed log-spaced buckets (ReadyBucketRatio): each is within a factor
	// of √ReadyBucketRatio (about 12%) of the true value for times between
	// 1 s and 24 h. A time under 1 s reads as 500 ms; one over about 24 h
	// reads as about 27 h. Both are zero when nothing became ready.
	ReadyP50 time.Duration `json:"ready_p50,omitempty"`
	ReadyP90 time.Duration `json:"ready_p90,omitempty"`
	// Wasted is the time billed on attempts that did not end ready
	// (summed Elapsed of the failing outcomes).
	Wasted  time.Duration `json:"wasted,omitempty"`
	Updated time.Time     `json:"updated"`
}

// ReadyBucketRatio is the ratio between the edges of consecutive buckets
// of the histogram of time to ready that OfferStats percentiles are read
// from: a bucket under 1 s, 51 buckets of this ratio from 1 s to about
// 24.3 h, and one for longer times.
const ReadyBucketRatio = 1.25

// OfferHistory is implemented by a Journal that keeps the per-offer
// history (both backends here do; journaltest.Killable passes it through).
// The history is what the Outcomes of committed Steps added, each exactly
// once, kept per OfferKey in the Step's own transaction; it is bounded by
// the number of offers ever tried, and Prune leaves it alone.
type OfferHistory interface {
	// OfferStats returns the whole history, keyed by OfferKey, as of one
	// moment (no Step counted half). An offer no outcome named is absent.
	OfferStats(ctx context.Context) (map[string]OfferStats, error)
}

// Lift removes a block that a later fact contradicts: a stockout block on
// an offer a VM has since become ready on. Only a block whose CreatedAt is
// before Before is removed, so a block made after the fact stands.
type Lift struct {
	Key    string    `json:"key"`
	Before time.Time `json:"before"`
}

// VolumeState is where a persistent volume is in its life, as the journal
// records it.
//
//	creating → available ⇄ attached
//	    ↘          ↓
//	     deleting → deleted
//
// Creating is journaled before the cloud's create is sent (write-ahead), so
// a crash between the two leaves a row that Recover can finish or clean
// up. A volume whose create failed and was cleaned up ends Deleted with its
// LastError. Deleted is the only end: the name may then be used again.
type VolumeState string

const (
	VolumeCreating  VolumeState = "creating"
	VolumeAvailable VolumeState = "available" // made, attached to nothing
	VolumeAttached  VolumeState = "attached"
	VolumeDeleting  VolumeState = "deleting"
	VolumeDeleted   VolumeState = "deleted"
)

// Valid reports whether s is one of the volume states.
func (s VolumeState) Valid() bool {
	switch s {
	case VolumeCreating, VolumeAvailable, VolumeAttached, VolumeDeleting, VolumeDeleted:
		return true
	}
	return false
}

// Volume is one journaled persistent volume: a disk a job's data lives on,
// with a life of its own. It is created once, attached to whichever VM of
// the installation uses it, detached, kept after that VM is deleted (Keep)
// or deleted with it, and deleted.
type Volume struct {
	// Name is the user's name, unique among the journal's volumes that are
	// not Deleted (a Deleted volume's name may be used again, as a VM's).
	Name string `json:"name"`
	// ID is unique per incarnation of the name; part of idempotency tokens.
	ID string `json:"id"`
	// CloudID is the provider's id of the volume, empty until the create
	// answered.
	CloudID  string `json:"cloud_id,omitempty"`
	Provider string `json:"provider"`
	Region   string `json:"region,omitempty"`
	Zone     string `json:"zone,omitempty"`
	SizeGB   int    `json:"size_gb"`
	// MountPath is where the VM's machine mounts it.
	MountPath string `json:"mount_path,omitempty"`
	// Keep: the volume stays when the VM it is attached to is deleted.
	Keep  bool        `json:"keep,omitempty"`
	State VolumeState `json:"state"`
	// VM is the name of the VM the volume is attached to or being attached
	// to; empty: none. A volume is never attached to two VMs: see
	// VolumeWrite.
	VM string `json:"vm,omitempty"`
	// Device is the path the attached volume has on the VM's machine.
	Device string `json:"device,omitempty"`
	// Token is the create's idempotency token (not a secret).
	Token     string `json:"token,omitempty"`
	LastError string `json:"last_error,omitempty"`
	Version   int64  `json:"version"` // bumped by every write

	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	EndedAt   time.Time `json:"ended_at,omitzero"` // deleted
}

// VolumeWrite is one write of a volume in a Step.
//
// With Create, it inserts a new volume at Version 1. It fails with
// ErrExists if a volume of that name exists and is not VolumeDeleted; a
// Deleted volume of that name is replaced.
//
// Otherwise it is a conditional update of the whole row: it fails with
// ErrNotFound if no volume has the name, and with ErrConflict if the
// stored Version differs from Volume.Version or the stored ID from
// Volume.ID (the name was reused since the volume was read). On success
// the stored and the given Version are both incremented.
//
// No volume is attached to two VMs: an update that sets VM to a non-empty
// name fails with ErrConflict when the stored volume's VM is another
// non-empty name, whatever the Versions say. To move a volume, a Step
// detaches it (VM empty) and a later one attaches it. Of launches that
// race to attach one volume, exactly one succeeds.
//
// A write whose Volume has an empty Name or an unknown State fails the
// Step before anything is written.
type VolumeWrite struct {
	Volume Volume `json:"volume"`
	Create bool   `json:"create,omitempty"`
}

// VolumeListOptions filters ListVolumes. Zero fields match everything.
type VolumeListOptions struct {
	// Live keeps only volumes that are not VolumeDeleted.
	Live bool
	// VM keeps only the volumes whose VM is this name.
	VM string
}

// Volumes is implemented by a Journal that keeps persistent volumes (both
// backends here do, from schema version 6). A Journal that does not
// implement it refuses a Step with Volumes (errors.ErrUnsupported, nothing
// written), and the engine refuses a request with volumes on it before it
// journals or sends anything.
type Volumes interface {
	// GetVolume returns the volume named name, or ErrNotFound. A Deleted
	// volume is returned until Prune removes it or a Create replaces it.
	GetVolume(ctx context.Context, name string) (Volume, error)
	// ListVolumes returns the volumes matching opts, ordered by name.
	ListVolumes(ctx context.Context, opts VolumeListOptions) ([]Volume, error)
}

// ListOptions filters ListVMs. Zero fields match everything.
type ListOptions struct {
	// States keeps VMs in any of these states.
	States []VMState
	// Live keeps only VMs that are not over (not deleted or failed):
	// pending, provisioning, waiting, ready and deleting, the ones that may
	// hold a machine or get one. With States, both must hold.
	Live    bool
	Cluster string
}

// WantedStates is the state filter opts asks for, Live folded into States:
// nil means every state; an empty non-nil slice means none. Backends filter
// on it.
func (opts ListOptions) WantedStates() []VMState {
	if !opts.Live {
		return opts.States
	}
	live := []VMState{StatePending, StateProvisioning, StateWaiting, StateReady, StateDeleting}
	if len(opts.States) == 0 {
		return live
	}
	out := []VMState{}
	for _, s := range opts.States {
		if !s.Terminal() && slices.Contains(live, s) {
			out = append(out, s)
		}
	}
	return out
}

// EventQuery filters Events. Events come in Seq order.
type EventQuery struct {
	VM    string // empty: every VM
	After int64  // only Seq > After
	Limit int    // 0: no limit
}

// Journal is the store the engine writes ahead to. Implementations must be
// safe for concurrent use by many goroutines and, for backends that say so,
// by many processes: two processes never both succeed in driving one VM,
// because every VM write is conditional on the lease owner.
type Journal interface {
	// Installation returns the id created when the journal was first made.
	// Every cloud resource carries it, so two journals sharing a cloud
	// account never adopt each other's machines. It never changes.
	Installation() string

	// Commit applies a Step atomically and durably.
	Commit(ctx context.Context, s *Step) error

	// GetVM returns the VM named name, or ErrNotFound.
	GetVM(ctx context.Context, name string) (VM, error)
	// ListVMs returns the VMs matching opts, ordered by name.
	ListVMs(ctx context.Context, opts ListOptions) ([]VM, error)
	// Attempts returns a VM's attempts ordered by N.
	Attempts(ctx context.Context, vm string) ([]Attempt, error)
	// Events returns events matching q in Seq order.
	Events(ctx context.Context, q EventQuery) ([]Event, error)
	// Blocks returns the blocks whose Until is after now.
	Blocks(ctx context.Context, now time.Time) ([]Block, error)

	// Acquire makes owner the lease holder of the VM until expiry, and
	// returns the VM as stored. It succeeds when the lease is free, held by
	// owner already, expired at now, or held by one of dead (owners the
	// caller has proven gone). Otherwise it returns a *LeasedError. Taking
	// over a lease does not change Version. A backend with a LeaseClock
	// reads "now" and "expired" on its own clock and grants expiry − now
	// from it; so does Commit for a Step's Create (its LeaseExpiry −
	// CreatedAt).
	Acquire(ctx context.Context, name, owner string, now, expiry time.Time, dead ...string) (VM, error)
	// Renew extends to expiry the leases owner holds on names, and returns
	// the names whose lease owner no longer holds. now is the caller's
	// clock when it asks: a backend with a LeaseClock extends the leases to
	// its own now plus expiry − now.
	Renew(ctx context.Context, owner string, now, expiry time.Time, names []string) (lost []string, err error)
	// Release frees the lease if owner holds it; otherwise it does nothing.
	Release(ctx context.Context, name, owner string) error

	// Close releases the backend's resources.
	Close() error
}

// LeaseClock is implemented by a backend that grants and compares leases by
// its own clock (a shared database's), not by the times its callers pass:
// Acquire, Renew and a Create measure the lease's length from the caller's
// times and start it at the backend's now; expiries it stores and returns are
// on its clock. LeaseNow reads that clock. The engine never compares such
// an expiry with its own clock: it fences its cloud calls by its monotonic
// clock from the last renewal the journal confirmed (docs/journal.md).
type LeaseClock interface {
	LeaseNow(ctx context.Context) (time.Time, error)
}

// Members is implemented by a backend that several processes share: each
// process beats with its id and the accounts (cloud provider names) it
// paces, and learns how many live processes pace each, so that replicas
// split an account's API rate instead of each sending all of it.
type Members interface {
	// Beat upserts member's row (its accounts, live until expiry) and
	// returns, for each of accounts, the number of members whose row is
	// live at now and lists that account, the caller included. A backend
	// with a LeaseClock judges "live" on its own clock and measures the
	// row's life as expiry − now from it.
	Beat(ctx context.Context, member string, accounts []string, now, expiry time.Time) (live map[string]int, err error)
	// Leave deletes member's row.
	Leave(ctx context.Context, member string) error
}

// Opener opens a journal from its URL (the whole URL, scheme included).
type Opener func(ctx context.Context, url string) (Journal, error)

var (
	mu       sync.RWMutex
	backends = map[string]Opener{}
)

// Register makes a backend available for URLs with the given scheme. Backends
// call it from init. It panics on an empty scheme, a nil opener or a
// duplicate.
func Register(scheme string, open Opener) {
	mu.Lock()
	defer mu.Unlock()
	if scheme == "" || open == nil {
		panic("journal: Register with empty scheme or nil opener")
	}
	if _, dup := backends[scheme]; dup {
		panic("journal: Register called twice for scheme " + scheme)
	}
	backends[scheme] = open
}

// Schemes returns the registered schemes, sorted.
func Schemes() []string {
	mu.RLock()
	defer mu.RUnlock()
	out := make([]string, 0, len(backends))
	for s := range backends {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

// Open opens the journal at url with the backend registered for its scheme
// ("sqlite:/path/to/journal.db", "postgres://...").
func Open(ctx context.Context, url string) (Journal, error) {
	scheme, _, ok := strings.Cut(url, ":")
	if !ok || scheme == "" {
		return nil, fmt.Errorf("journal: %q is not a journal URL (want scheme:location, e.g. sqlite:/path/journal.db)", url)
	}
	mu.RLock()
	open, ok := backends[scheme]
	mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("journal: no backend for scheme %q (registered: %v; did you blank-import it?)", scheme, Schemes())
	}
	return open(ctx, url)
}

// Pruning.

// DefaultPruneBatch is the number of VMs a Prune removes per transaction
// when PruneOptions.Batch is 0.
const DefaultPruneBatch = 500

// PruneOptions says what Prune removes.
type PruneOptions struct {
	// Before: VMs that ended (StateDeleted or StateFailed) with EndedAt before it lose their row, attempts and events.
	// A zero Before removes no VM, and neither does a zero EndedAt. Volumes (Volumes) that are VolumeDeleted with
	// EndedAt before it lose their row likewise.
	Before time.Time
	// Now: blocks whose Until is not after Now are removed. A VM whose lease is live at Now (an Owner and a
	// LeaseExpiry after Now) is kept; a backend with a LeaseClock judges the lease by its own clock instead.
	// A zero Now removes no block.
	Now time.Time
	// Batch bounds the VMs removed per transaction (0: 500), so that a prune never holds the journal's write lock for long and launches go on beside it.
	Batch int
}

// BatchSize is the number of VMs one batch of Prune removes at most: Batch,
// or DefaultPruneBatch when Batch is 0 or negative.
func (o PruneOptions) BatchSize() int {
	if o.Batch <= 0 {
		return DefaultPruneBatch
	}
	return o.Batch
}

// PruneResult counts what Prune removed.
type PruneResult struct{ VMs, Attempts, Events, Blocks, Volumes int }

// Pruner is implemented by journals that can remove what is no longer needed (both backends here do).
//
// Prune removes, with their attempts and every event naming them, the VMs
// that are terminal (StateDeleted or StateFailed), whose EndedAt is not zero
// and before opts.Before, and whose lease is not live at opts.Now; then the
// blocks whose Until is not after opts.Now. It never removes a VM in another
// state, a VM whose lease is live, or an attempt or event of a VM it keeps.
// Events that name no VM the journal holds are left alone. A Journal that
// implements Volumes also removes the volumes that are VolumeDeleted with
// an EndedAt not zero and before opts.Before, after the VMs; it never
// removes a volume in another state.
//
// It works in batches of at most opts.BatchSize() VMs (volumes and blocks likewise),
// each its own short, durable transaction that re-checks the conditions
// above, so Commits, Acquires and reads go on beside it and a VM re-created
// under a pruned name meanwhile is never touched. It goes on until a batch
// removes fewer than BatchSize, checking ctx before each batch. On an error
// (ctx's included, wrapped) it returns what the committed batches removed
// with the error: those removals stand. Seq numbers are never reused, so a
// reader following Events(After) misses nothing.
type Pruner interface {
	Prune(ctx context.Context, opts PruneOptions) (PruneResult, error)
}
