package simserver

import (
	"fmt"
	"time"
)

// Vendor instance statuses, as the API reports them.
const (
	// StatusQueued: a flex-start create waiting in the cloud's queue for
	// capacity (Timing.FlexQueue), before provisioning.
	StatusQueued       = "queued"
	StatusProvisioning = "provisioning"
	StatusBooting      = "booting"
	StatusRunning      = "running"
	StatusFailed       = "failed"
	StatusStopping     = "stopping"
	StatusPreempted    = "preempted"
	StatusTerminated   = "terminated"
)

// Event types in an instance's history.
const (
	EventCreated         = "created"
	EventBooting         = "booting"
	EventRunning         = "running"
	EventBootFailed      = "boot_failed"
	EventDeleteRequested = "delete_requested"
	EventPreempted       = "preempted"
	EventTerminated      = "terminated"
	EventQueued          = "queued"   // a flex-start create entered the queue
	EventDequeued        = "dequeued" // it found capacity: provisioning starts
	EventRunEnded        = "run_ended"
)

// Instance is an instance as the API returns it (GET instances/{id}) and
// as Server.Instances reports it. Values are copies: changing one changes
// nothing on the server.
type Instance struct {
	// ID is the cloud's id ("i-", 8 digits, 4 hex digits), unique per cloud.
	ID string `json:"id"`
	// Name and Labels are what the create asked for; gpuprov labels every
	// instance with provider.LabelVM and provider.LabelInstallation.
	Name   string            `json:"name"`
	Labels map[string]string `json:"labels"`
	// OfferID is the offer created; Region through Spot are copied from it.
	OfferID      string  `json:"offer_id"`
	Region       string  `json:"region"`
	Zone         string  `json:"zone,omitempty"`
	InstanceType string  `json:"instance_type"`
	GPU          string  `json:"gpu"`
	GPUCount     int     `json:"gpu_count"`
	GPUMemoryGB  int     `json:"gpu_memory_gb"`
	VCPUs        int     `json:"vcpus"`
	MemoryGB     float64 `json:"memory_gb"`
	PricePerHour float64 `json:"price_per_hour"`
	Spot         bool    `json:"spot"`
	// DiskGB is the boot disk's size.
	DiskGB int `json:"disk_gb"`
	// Status is one of the Status constants; StatusMessage says why a
	// failed, preempted or stopping instance is so.
	Status        string `json:"status"`
	StatusMessage string `json:"status_message,omitempty"`
	// SSH is set while the instance runs with an SSH endpoint.
	SSH *SSHInfo `json:"ssh,omitempty"`
	// PublicIP is always 127.0.0.1: the simulator serves loopback only.
	PublicIP string `json:"public_ip,omitempty"`
	// HostKey is the public SSH host key (authorized_keys form).
	HostKey string `json:"host_key,omitempty"`
	// SSHKey and Firewall name the side resources the create attached.
	SSHKey   string `json:"ssh_key,omitempty"`
	Firewall string `json:"firewall,omitempty"`
	// PlacementGroup is the group the create asked for, if any.
	PlacementGroup string `json:"placement_group,omitempty"`
	// ReservationID is the reservation the instance was launched into.
	ReservationID string `json:"reservation_id,omitempty"`
	// MaxRunSeconds, for a flex-start instance, is how long it may run:
	// the cloud deletes it that long after it turned running.
	MaxRunSeconds int `json:"max_run_seconds,omitempty"`
	// HostID is the machine the instance runs on: its offer's Host, else
	// one of four per zone.
	HostID string `json:"host_id,omitempty"`
	// GPUFaults are the GPU faults the instance carries (Faults.GPUFaults
	// drawn at create, and Server.InjectGPUFault).
	GPUFaults []GPUFault `json:"gpu_faults,omitempty"`
	// CreatedAt, UpdatedAt and TerminatedAt are on the server's clock;
	// TerminatedAt is zero until the instance is terminated.
	CreatedAt    time.Time `json:"created_at"`
	UpdatedAt    time.Time `json:"updated_at"`
	TerminatedAt time.Time `json:"terminated_at,omitzero"`
	// Events is the instance's history, oldest first; it stays readable
	// after termination, so a reclaim or a boot failure can be diagnosed.
	Events []Event `json:"events"`
}

// SSHInfo is where a running instance answers SSH: Host:Port, logging in
// as User (the create's ssh_user, else CloudConfig.SSHUser).
type SSHInfo struct {
	Host string `json:"host"`
	Port int    `json:"port"`
	User string `json:"user"`
}

// Event is one entry of an instance's history: when (server clock), which
// of the Event constants, and a human message.
type Event struct {
	At      time.Time `json:"at"`
	Type    string    `json:"type"`
	Message string    `json:"message,omitempty"`
}

// Port is a firewall rule: a port number and "tcp" or "udp", open to the
// firewall's Sources and, with Peers, also to the instances that use the
// firewall, whatever their address (as an AWS security group's rule may
// name the group itself as a source).
type Port struct {
	Number   int    `json:"number"`
	Protocol string `json:"protocol"`
	Peers    bool   `json:"peers,omitempty"`
}

// Firewall is a regional firewall resource (PUT firewalls/{name}): the
// ports it opens, the networks it opens them to (Sources: CIDRs, sorted;
// DefaultSources when the request named none), its labels, and when it
// was created. An instance names it at create; it cannot be deleted while
// such an instance is not terminated. The sim records who may connect and
// reports it (Admits, the admin view) but does not filter connections:
// every SSH endpoint is on loopback.
type Firewall struct {
	Name      string            `json:"name"`
	Region    string            `json:"region"`
	Ports     []Port            `json:"ports"`
	Sources   []string          `json:"sources"`
	Labels    map[string]string `json:"labels,omitempty"`
	CreatedAt time.Time         `json:"created_at"`
}

// SSHKey is an account-wide SSH key resource (PUT ssh-keys/{name}): the
// authorized_keys lines that may log in to an instance that names it.
type SSHKey struct {
	Name       string            `json:"name"`
	PublicKeys []string          `json:"public_keys"`
	Labels     map[string]string `json:"labels,omitempty"`
	CreatedAt  time.Time         `json:"created_at"`
}

// Resources are a cloud's side resources, as Server.SideResources and
// GET /admin/clouds/{cloud}/resources report them; empty lists are
// non-nil.
type Resources struct {
	Firewalls       []Firewall       `json:"firewalls"`
	SSHKeys         []SSHKey         `json:"ssh_keys"`
	PlacementGroups []PlacementGroup `json:"placement_groups"`
}

// PlacementGroup is a regional group (PUT placement-groups/{name}?region=r)
// whose instances the sim keeps in one zone, as a cluster placement group
// keeps them close: a create into a group whose live instances are in
// another zone is refused, and the group cannot be deleted while an
// instance that is not terminated uses it.
type PlacementGroup struct {
	Name      string            `json:"name"`
	Region    string            `json:"region"`
	Labels    map[string]string `json:"labels,omitempty"`
	CreatedAt time.Time         `json:"created_at"`
}

// Stats count what a cloud's API did. Calls and Errors are keyed by call
// kind (list_offers, create_instance, list_instances, get_instance,
// delete_instance, put_firewall, delete_firewall, list_firewalls,
// put_ssh_key, delete_ssh_key, list_ssh_keys, put_placement_group,
// delete_placement_group, list_placement_groups, create_volume,
// list_volumes, get_volume, attach_volume, detach_volume, delete_volume)
// and by error code.
type Stats struct {
	Calls             map[string]int `json:"calls"`
	Errors            map[string]int `json:"errors"`
	RateLimited       int            `json:"rate_limited"`            // 429s sent, token bucket and injected
	Creates           int            `json:"creates"`                 // instances created
	IdempotentReplays int            `json:"idempotent_replays"`      // creates answered with an existing instance or volume
	Deletes           int            `json:"deletes"`                 // delete requests that started a deletion
	BlocksBought      int            `json:"blocks_bought,omitempty"` // block offerings bought
	LostCreates       int            `json:"lost_creates"`            // creates whose response was lost
	Timeouts          int            `json:"timeouts"`                // requests held past the client's timeout
	BootFailures      int            `json:"boot_failures"`
	Preemptions       int            `json:"preemptions"`
}

func (s Stats) clone() Stats {
	c := s
	c.Calls, c.Errors = map[string]int{}, map[string]int{}
	for k, v := range s.Calls {
		c.Calls[k] = v
	}
	for k, v := range s.Errors {
		c.Errors[k] = v
	}
	return c
}

// Error codes of the API; see the package documentation.
const (
	CodeInvalidRequest    = "invalid_request"
	CodeUnknownFirewall   = "unknown_firewall"
	CodeUnauthorized      = "unauthorized"
	CodeInsufficientFunds = "insufficient_funds"
	CodeQuotaExceeded     = "quota_exceeded"
	CodeNotFound          = "not_found"
	CodeOutOfCapacity     = "out_of_capacity"
	CodeConflict          = "conflict"
	CodeVolumeInUse       = "volume_in_use"
	CodeRateLimited       = "rate_limited"
	CodeInternal          = "internal"
	CodeUnavailable       = "unavailable"
	CodeTimeout           = "timeout"
)

// apiError is an error response.
type apiError struct {
	status     int
	code       string
	message    string
	retryAfter time.Duration
	drop       bool // close the connection without a response
}

func (e *apiError) Error() string { return fmt.Sprintf("%d %s: %s", e.status, e.code, e.message) }

func errorf(status int, code, format string, args ...any) *apiError {
	return &apiError{status: status, code: code, message: fmt.Sprintf(format, args...)}
}

type errorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

type createRequest struct {
	OfferID          string            `json:"offer_id"`
	Name             string            `json:"name"`
	Labels           map[string]string `json:"labels"`
	UserData         string            `json:"user_data"`
	IdempotencyToken string            `json:"idempotency_token"`
	SSHUser          string            `json:"ssh_user"`
	SSHKey           string            `json:"ssh_key"`
	Firewall         string            `json:"firewall"`
	// PlacementGroup is a group of the offer's region to create the
	// instance in; empty: none.
	PlacementGroup string `json:"placement_group"`
	// DiskGB sizes the boot disk: at least the offer's, up to
	// MaxDiskGB; 0 means the offer's.
	DiskGB int `json:"disk_gb"`
	// ReservationID launches into the account's reservation of this id
	// (which must hold the offer); empty: ordinary capacity.
	ReservationID string `json:"reservation_id"`
	// MaxRunSeconds, when positive, makes a flex-start create (the offer
	// must have FlexStart): it waits in the queue, not for stock, then
	// runs at most this long.
	MaxRunSeconds int `json:"max_run_seconds"`
}

type placementGroupRequest struct {
	Labels map[string]string `json:"labels"`
}

type firewallRequest struct {
	Ports   []Port            `json:"ports"`
	Sources []string          `json:"sources"`
	Labels  map[string]string `json:"labels"`
}

type sshKeyRequest struct {
	PublicKeys []string          `json:"public_keys"`
	Labels     map[string]string `json:"labels"`
}

type instanceList struct {
	Instances  []Instance `json:"instances"`
	NextCursor string     `json:"next_cursor,omitempty"`
}
