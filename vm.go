package gpuprov

import (
	"encoding/json"
	"time"

	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/provider"
)

// State is a VM's state; see journal.VMState for the life cycle.
type State = journal.VMState

// The states of a VM.
const (
	StatePending      = journal.StatePending
	StateProvisioning = journal.StateProvisioning
	StateWaiting      = journal.StateWaiting
	StateReady        = journal.StateReady
	StateDeleting     = journal.StateDeleting
	StateDeleted      = journal.StateDeleted
	StateFailed       = journal.StateFailed
)

// Event is one transition of a VM, as journaled and handed to sinks.
type Event = journal.Event

// Event types.
const (
	EvLaunch        = "launch"          // a launch was requested
	EvPlan          = "plan"            // offers planned
	EvPlanError     = "plan-error"      // a provider's Plan failed; it is skipped
	EvAttempt       = "attempt"         // an attempt on an offer starts
	EvPhase         = "phase"           // an attempt enters a phase
	EvRetry         = "retry"           // a transient error; the step is retried
	EvCreateSent    = "create-sent"     // a create request is about to be sent
	EvCreated       = "created"         // the instance id is known (returned or adopted)
	EvAdopted       = "adopted"         // an instance that landed without a recorded id was found
	EvDuplicate     = "duplicate"       // a second instance of the VM was found and is deleted
	EvHostKeyPinned = "host-key-pinned" // first contact pinned the host key
	EvAccepted      = "accepted"        // the machine passed GPU acceptance (one-line summary)
	EvRejected      = "rejected"        // the machine failed GPU acceptance (what was wrong, one line)
	EvPreempted     = "preempted"       // a ready VM's instance was reclaimed (seen by Health); its offer's history counts it
	EvFailure       = "failure"         // an attempt failed with an error kind
	EvBlocked       = "blocked"         // an offer, zone, region or provider was blocked
	EvTeardown      = "teardown"        // an attempt's teardown starts
	EvTornDown      = "torn-down"       // an attempt's instances are confirmed gone
	EvTeardownError = "teardown-error"  // a teardown could not finish
	EvQueued        = "queued"          // the instance waits in the cloud's queue for capacity (its vendor status)
	EvReady         = "ready"           // the VM is ready
	EvFailed        = "failed"          // the launch failed; all it started is gone
	EvDeleting      = "deleting"        // deletion of the VM starts
	EvDeleted       = "deleted"         // the VM and everything it had are gone
	EvRecovered     = "recovered"       // a process took the VM over to resume it
)

// Error kinds. Event.ErrorKind, VM.LastErrorKind and Attempt.ErrorKind hold
// one of these names: a provider.ErrorKind's (transient, capacity, quota,
// unavailable, failed, invalid-request, credentials), or one of the
// engine's own below. ErrorKinds lists them all.
const (
	// KindCanceled: the caller cancelled (context.Canceled).
	KindCanceled = "canceled"
	// KindDeadline: Request.Timeout or the caller's deadline passed
	// (context.DeadlineExceeded).
	KindDeadline = "deadline"
	// KindNoOffers: no offer was left to try (ErrNoOffers,
	// ErrOffersExhausted).
	KindNoOffers = "no-offers"
	// KindConnect, KindAccept, KindBootstrap and KindJoin: the phase of
	// that name failed on a running instance (a connect or acceptance
	// failure moves to the next offer; a bootstrap or join failure aborts
	// with ErrAborted).
	KindConnect   = PhaseConnect
	KindAccept    = PhaseAccept
	KindBootstrap = PhaseBootstrap
	KindJoin      = PhaseJoin
)

// ErrorKinds returns every name an ErrorKind field may hold, provider kinds
// first.
func ErrorKinds() []string {
	var out []string
	for k := provider.Failed; k <= provider.Credentials; k++ {
		out = append(out, k.String())
	}
	return append(out, KindCanceled, KindDeadline, KindNoOffers, KindConnect, KindAccept, KindBootstrap, KindJoin)
}

// VM is a VM as the journal knows it.
type VM struct {
	Name         string            `json:"name"`
	Cluster      string            `json:"cluster,omitempty"`
	State        State             `json:"state"`
	Phase        string            `json:"phase,omitempty"`
	Attempt      int               `json:"attempt"`
	Provider     string            `json:"provider,omitempty"`
	Location     provider.Location `json:"location"`
	InstanceType string            `json:"instance_type,omitempty"`
	GPU          string            `json:"gpu,omitempty"`
	GPUCount     int               `json:"gpu_count,omitempty"`
	Spot         bool              `json:"spot,omitempty"`
	PricePerHour float64           `json:"price_per_hour,omitempty"`
	// Reservation is the reservation the VM was launched into, if any
	// (provider.Offer.Reservation): capacity the account pays for whether
	// it is used or not, so the VM adds nothing to the bill at
	// PricePerHour, which is what its slot bills.
	Reservation   string                `json:"reservation,omitempty"`
	InstanceID    string                `json:"instance_id,omitempty"`
	SSH           *provider.SSHEndpoint `json:"ssh,omitempty"`
	HostKey       string                `json:"host_key,omitempty"`
	Owner         string                `json:"owner,omitempty"`
	LeaseExpiry   time.Time             `json:"lease_expiry,omitzero"`
	LastError     string                `json:"last_error,omitempty"`
	LastErrorKind string                `json:"last_error_kind,omitempty"`
	CreatedAt     time.Time             `json:"created_at"`
	ReadyAt       time.Time             `json:"ready_at,omitzero"`
	EndedAt       time.Time             `json:"ended_at,omitzero"`
	// NextTry is when a waiting VM (Request.WaitForCapacity) tries its
	// offers again.
	NextTry time.Time `json:"next_try,omitzero"`
	// ExpiresAt is when a ready VM is deleted by its TTL or cost cap
	// (Request.TTL, MaxCost), whichever comes first; zero: never.
	ExpiresAt time.Time `json:"expires_at,omitzero"`
	Request   Request   `json:"request"`
	// Interruptions are the VM's interruptions so far (spot VMs watched
	// by a reaper: see Request.OnInterruption), oldest first.
	Interruptions []Interrupted `json:"interruptions,omitempty"`
}

// Cost returns what the VM's ready machine has cost so far at its price
// per hour: from ready until it ended, or until now while it runs. The
// bill (every attempt that made an instance, in the cloud's increments) is
// Provisioner.Costs'.
func (v *VM) Cost(now time.Time) float64 {
	if v.ReadyAt.IsZero() {
		return 0
	}
	end := now
	if !v.EndedAt.IsZero() {
		end = v.EndedAt
	}
	if end.Before(v.ReadyAt) {
		return 0
	}
	return end.Sub(v.ReadyAt).Hours() * v.PricePerHour
}

func vmFromRow(r journal.VM) *VM {
	v := &VM{
		Name: r.Name, Cluster: r.Cluster, State: r.State, Phase: r.Phase, Attempt: r.Attempt,
		Provider: r.Provider, Location: provider.Location{Region: r.Region, Zone: r.Zone},
		PricePerHour: r.PricePerHour, InstanceID: r.InstanceID, HostKey: r.HostKey,
		Owner: r.Owner, LeaseExpiry: r.LeaseExpiry, LastError: r.LastError, LastErrorKind: r.LastErrorKind,
		CreatedAt: r.CreatedAt, ReadyAt: r.ReadyAt, EndedAt: r.EndedAt, NextTry: r.NextTry, ExpiresAt: r.ExpiresAt,
	}
	if r.SSHHost != "" {
		v.SSH = &provider.SSHEndpoint{Host: r.SSHHost, Port: r.SSHPort, User: r.SSHUser}
	}
	var o provider.Offer
	if len(r.Offer) > 0 && json.Unmarshal(r.Offer, &o) == nil {
		v.InstanceType, v.GPU, v.GPUCount, v.Spot = o.InstanceType, o.GPU, o.GPUCount, o.Spot
	}
	if o.Reservation != nil {
		v.Reservation = o.Reservation.ID
	}
	// A request that does not parse leaves the zero Request: the row is
	// still shown, and the engine reports the problem when it drives it.
	_ = json.Unmarshal(r.Request, &v.Request)
	var jr struct {
		Interruptions []Interrupted `json:"interruptions"`
	}
	if json.Unmarshal(r.Request, &jr) == nil {
		v.Interruptions = jr.Interruptions
	}
	return v
}
