package provider

import (
	"context"
	"crypto/sha256"
	"encoding/base32"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// CloudProvider is one cloud account as the core sees it. Implementations must
// be safe for concurrent use: the core drives many VMs at once through one
// provider. Every method takes a context and must return promptly when it is
// done; none may block beyond a single API round trip, except the bounded
// operation wait documented on Create.
type CloudProvider interface {
	// Name returns the provider id recorded on every VM row (the id it was
	// registered under, or the instance name given in its config).
	Name() string

	// Capabilities reports what the cloud cannot do and how the core should
	// pace and bound its waits. It must be cheap and constant.
	Capabilities() Capabilities

	// BindInstallation hands the provider the journal's installation id,
	// which it must tag every resource with and filter Observe and List on.
	// The core calls it once, before any other call (gpuprov.New does). It
	// sets the id when the provider has none, accepts the id it already
	// has, and returns an error naming both when it was built with another:
	// a provider filtering on another id than the one the core stamps on
	// every create would lose sight of what it created and leak it. The
	// helper BindInstallation is the usual body.
	BindInstallation(id string) error

	// Plan returns the offers that satisfy req, cheapest first. It must not
	// create anything. An offer carries in Detail whatever Create needs.
	// A request the cloud can never satisfy returns no offers and no error.
	Plan(ctx context.Context, req *ResourceRequest) ([]Offer, error)

	// Prepare makes the per-VM side resources an instance in offer's
	// location needs (firewall rules, key registration, image resolution)
	// and returns private JSON that the core journals and hands to Create.
	// It must be idempotent per (spec.VM, offer location): calling it again
	// after a crash or for a second attempt in the same location adopts what
	// exists. It must not create the instance.
	Prepare(ctx context.Context, offer *Offer, spec *InstanceSpec) (json.RawMessage, error)

	// Create sends one create request and returns the instance id. It must
	// label everything it creates with spec's identity (tags, labels, or the
	// name gpuprov-<vm>) so that Observe can find it even when the response
	// is lost, and must pass spec.IdempotencyToken where the cloud has such a
	// token. It must not retry and must not wait for the instance to run; a
	// bounded wait on an operation whose result carries the error is allowed.
	// An error that leaves it unknown whether the instance landed (timeout,
	// lost response, 5xx) must be Transient: the core resolves it by
	// observing, never by blind resending.
	Create(ctx context.Context, offer *Offer, prepared json.RawMessage, spec *InstanceSpec) (id string, err error)

	// Observe returns every non-terminated instance in loc that carries the
	// identity of vm in this installation. Broken instances must be reported
	// with status Failed, not filtered out. No instance is an empty slice and
	// a nil error.
	Observe(ctx context.Context, loc Location, vm string) ([]Observed, error)

	// Delete requests the deletion of ids, which belong to vm in loc. Unknown
	// or already deleted ids are success. It must not wait for the instances
	// to go: the core polls Observe.
	Delete(ctx context.Context, loc Location, vm string, ids []string) error

	// Cleanup deletes the per-VM side resources Prepare made in loc. It must be
	// idempotent and must never touch resources shared with other VMs (shared
	// keys, VPCs, account-wide firewall rules). A dependency still shutting
	// down is Transient.
	Cleanup(ctx context.Context, loc Location, vm string) error
}

// Diagnoser is implemented by providers that can explain an instance's health
// beyond its status: vendor status checks, scheduled events, why a recently
// terminated instance went away. Diagnose is read-only and must report
// instances terminated recently too, so that a reclaim is attributed.
type Diagnoser interface {
	Diagnose(ctx context.Context, loc Location, vm, instanceID string) (Diagnosis, error)
}

// BindInstallation is the usual body of CloudProvider.BindInstallation
// for an adapter whose installation id is *current.
func BindInstallation(current *string, id string) error {
	switch *current {
	case "":
		*current = id
		return nil
	case id:
		return nil
	}
	return fmt.Errorf("built for installation %q, not the journal's %q", *current, id)
}

// Lister is implemented by providers that can list, in one call per location,
// every non-terminated instance carrying a gpuprov identity of this
// installation. The core uses it to coalesce polling of many VMs and to find
// orphans ([Observed.VM] must be set). A zero Location means every location
// the provider is configured for. List must not mutate.
type Lister interface {
	List(ctx context.Context, loc Location) ([]Observed, error)
}

// NameLister is implemented by Listers that can filter a listing on VM
// names on the cloud's side (a tag or label filter with several values).
// The core then polls with ListNamed, naming only the VMs it is waiting on
// (booting, or being looked for after a create whose answer was lost), so
// that a listing's size follows those VMs and not the whole fleet, unless
// listing everything took no more calls (or, for a provider that does not
// pace its own requests, found no more instances) the last time: one
// List then answers every VM waiting.
//
// ListNamed returns, in loc (a zero Location: every location, as List),
// every non-terminated instance of this installation whose gpuprov VM
// identity is one of vms, whatever its status, with [Observed.VM] set:
// exactly what List would return, less the instances of other VMs. It must
// never omit one that List would return: the core takes a VM missing from
// the answer for "nothing there", and may create it again. Where the
// cloud's filter is not exact (a prefix match, a name rather than the
// label), the adapter filters the answer again; where the cloud cannot
// filter at all, the adapter should not implement NameLister. It must not
// mutate. vms holds between 1 and [MaxListNames] distinct names (the core
// splits a larger set over several calls); an adapter whose API takes
// fewer values per filter splits further itself. Listing lag is as List's:
// the core allows for it with Capabilities.ConsistencyWindow.
//
// A wrapper that embeds a provider and overrides List must override
// ListNamed too (or hide it): the core prefers ListNamed.
type NameLister interface {
	ListNamed(ctx context.Context, loc Location, vms []string) ([]Observed, error)
}

// MaxListNames is the most VM names the core passes to one
// NameLister.ListNamed call. A hundred names of at most 50 characters, with
// their gpuprov- prefix and a query key each, keep a GET under the 8 KiB
// request line most HTTP servers accept.
const MaxListNames = 100

// Location is where an offer or instance lives. Zone is empty for clouds that
// place instances by region only.
type Location struct {
	Region string `json:"region"`
	Zone   string `json:"zone,omitempty"`
}

// String renders the location as region or region/zone.
func (l Location) String() string {
	if l.Zone == "" {
		return l.Region
	}
	return l.Region + "/" + l.Zone
}

// IsZero reports whether l names no location.
func (l Location) IsZero() bool { return l.Region == "" && l.Zone == "" }

// SpotPolicy says whether a request accepts spot (preemptible) capacity.
type SpotPolicy string

const (
	// OnDemand accepts on-demand capacity only. It is the default.
	OnDemand SpotPolicy = ""
	// SpotOnly accepts spot capacity only.
	SpotOnly SpotPolicy = "spot"
	// SpotOrOnDemand accepts either, cheapest first.
	SpotOrOnDemand SpotPolicy = "any"
)

// ResourceRequest is what a caller needs, as handed to Plan. GPU is a
// canonical GPU name (see [LookupGPU]); the core canonicalizes aliases before
// calling Plan.
type ResourceRequest struct {
	GPU             string     `json:"gpu"`
	GPUCount        int        `json:"gpu_count"`
	MinGPUMemoryGB  int        `json:"min_gpu_memory_gb,omitempty"`
	MaxPricePerHour float64    `json:"max_price_per_hour,omitempty"` // 0: no limit
	Spot            SpotPolicy `json:"spot,omitempty"`
	Regions         []string   `json:"regions,omitempty"` // empty: the provider's configured regions
	// Zones restricts offers to these zones; empty: any. A cluster placed
	// in one zone pins its nodes here.
	Zones []string `json:"zones,omitempty"`
	// Image is the request's image override (empty: the provider's
	// default). A provider that cannot run it offers nothing, and says why
	// in Plan's error.
	Image string `json:"image,omitempty"`
	// MinVCPUs and MinMemoryGB are what the job needs of the machine
	// besides its GPUs; DiskGB the boot disk size it needs. 0: any. An
	// offer that does not say its vCPUs, memory or disk does not meet a
	// minimum. Accepts checks them, so an adapter need not.
	MinVCPUs    int     `json:"min_vcpus,omitempty"`
	MinMemoryGB float64 `json:"min_memory_gb,omitempty"`
	DiskGB      int     `json:"disk_gb,omitempty"`
	// Reserved says whether reserved capacity is planned (see
	// ReservedPolicy); Reservation names one reservation to launch into:
	// the adapter plans it whatever its targeting, and returns an
	// InvalidRequest error naming it when it belongs to another shape or
	// zone or has ended (one it does not know: no offer, no error).
	Reserved    ReservedPolicy `json:"reserved,omitempty"`
	Reservation string         `json:"reservation,omitempty"`
	// FlexStart, when positive, asks for queued capacity (GCP's
	// flex-start, the sim's flex queue): the cloud holds the create in its
	// queue until it finds capacity, then runs the instance for at most
	// this long and deletes it. Only a provider whose Capabilities.FlexStart
	// is true is asked; it returns only offers that queue, each with
	// MaxRunDuration set to FlexStart.
	FlexStart time.Duration `json:"flex_start,omitempty"`
	// Block, when set, asks for a capacity block (BlockSeller): the core
	// plans with BlockOfferings instead of Plan.
	Block *BlockQuery `json:"block,omitempty"`
}

// Accepts reports whether o satisfies r in the fields every cloud shares
// (GPU, count, memory, price, spot, region). Adapters may use it to filter
// their catalog.
func (r *ResourceRequest) Accepts(o *Offer) bool {
	if r.GPU != "" && o.GPU != r.GPU {
		return false
	}
	if r.GPUCount > 0 && o.GPUCount != r.GPUCount {
		return false
	}
	if r.MinGPUMemoryGB > 0 && o.GPUMemoryGB < r.MinGPUMemoryGB {
		return false
	}
	if r.MaxPricePerHour > 0 && o.MarginalPrice() > r.MaxPricePerHour {
		return false
	}
	if (r.Block != nil) != (o.Block != nil) {
		return false // a block is asked for, and bought, only explicitly
	}
	if o.Block == nil && !r.acceptsReservation(o) {
		return false
	}
	if (r.FlexStart > 0) != (o.MaxRunDuration > 0) {
		return false
	}
	switch r.Spot {
	case OnDemand:
		if o.Spot {
			return false
		}
	case SpotOnly:
		if !o.Spot {
			return false
		}
	}
	if o.VCPUs < r.MinVCPUs || o.MemoryGB < r.MinMemoryGB || o.DiskGB < r.DiskGB {
		return false
	}
	if len(r.Zones) > 0 && !slices.Contains(r.Zones, o.Location.Zone) {
		return false
	}
	if len(r.Regions) > 0 {
		found := false
		for _, reg := range r.Regions {
			if reg == o.Location.Region {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// acceptsReservation applies Reserved and Reservation: a targeted
// reservation only for the request that names it, a named one alone.
func (r *ResourceRequest) acceptsReservation(o *Offer) bool {
	res := o.Reservation
	switch {
	case r.Reservation != "":
		return res != nil && res.ID == r.Reservation
	case res == nil:
		return r.Reserved != RequireReserved
	default:
		return r.Reserved != ForbidReserved && !res.Targeted
	}
}

// Offer is one way a provider can satisfy a request.
type Offer struct {
	Provider     string   `json:"provider"`
	Location     Location `json:"location"`
	InstanceType string   `json:"instance_type"`
	GPU          string   `json:"gpu"` // canonical name
	GPUCount     int      `json:"gpu_count"`
	GPUMemoryGB  int      `json:"gpu_memory_gb"` // per GPU
	VCPUs        int      `json:"vcpus,omitempty"`
	MemoryGB     float64  `json:"memory_gb,omitempty"`
	PricePerHour float64  `json:"price_per_hour"` // USD for the whole instance
	Spot         bool     `json:"spot,omitempty"`
	// Family is the cloud's quota family of InstanceType (EC2's "p5",
	// Azure's "standardNCadsH100v5Family"), where the cloud counts quota
	// per family; empty: none. A ScopeFamily block covers the offers of
	// one family in a region.
	Family string `json:"family,omitempty"`
	// DiskGB is the boot disk the instance gets, in GB; 0: unknown. A
	// provider whose Capabilities.DiskSize is true creates the disk with
	// this size, which the core raises to the request's DiskGB.
	DiskGB int `json:"disk_gb,omitempty"`
	// MaxDiskGB, on a provider that sizes disks, is the largest boot disk
	// the offer takes; 0: no limit the adapter knows of.
	MaxDiskGB int `json:"max_disk_gb,omitempty"`
	// InStock says the cloud's own listing showed capacity for this offer
	// when it was planned (a marketplace's stock, a region listed with
	// capacity, the sim's availability); false: unknown or none. A launch
	// waiting for capacity tries a stocked-out offer again as soon as a
	// fresh plan shows it in stock, without waiting out its block.
	InStock bool `json:"in_stock,omitempty"`
	// Host is the cloud's id of the one machine the offer is on, where
	// an offer is a machine (a marketplace's: Vast.ai's machine id); empty
	// where the cloud picks the machine at create. A ScopeHost block (a
	// machine that failed GPU acceptance) covers the offers of its host.
	Host string `json:"host,omitempty"`
	// Reservation, when set, is the reservation the offer launches into
	// (PricePerHour is still what the reservation bills per instance; the
	// offer's MarginalPrice is zero). A full or ended reservation is a
	// Create error of kind Unavailable: it blocks this offer only, not the
	// shape's on-demand offers.
	Reservation *Reservation `json:"reservation,omitempty"`
	// MaxRunDuration, when positive, marks an offer that queues (a
	// flex-start offer): the create waits in the cloud's queue, reported
	// by Observe with Queued set, and the cloud deletes the instance this
	// long after it starts running. The core counts the queue against the
	// launch's deadline, not the boot timeout, and ends the VM's leash
	// before the cloud's.
	MaxRunDuration time.Duration `json:"max_run_duration,omitempty"`
	// Block, when set, is a capacity block the offer launches into once
	// bought (BlockSeller); with Reservation set too, it is bought.
	Block *Block `json:"block,omitempty"`
	// Billing is how the offer's instance time is billed; nil: the
	// provider's Capabilities.Billing (the core records that one with
	// each attempt, so the journal alone can count the bill).
	Billing *Billing `json:"billing,omitempty"`
	// Detail is the adapter's private data for Create (vendor ids such as an
	// image, a socket or a data center id). The core journals it as is.
	Detail json.RawMessage `json:"detail,omitempty"`
}

// Key identifies the offer for the blocklist and for "already tried":
// provider, location, instance type and spot, and the reservation it
// launches into, if any.
func (o *Offer) Key() string {
	spot := "od"
	if o.Spot {
		spot = "spot"
	}
	k := fmt.Sprintf("%s|%s|%s|%s|%s", o.Provider, o.Location.Region, o.Location.Zone, o.InstanceType, spot)
	if o.Reservation != nil {
		k += "|res:" + o.Reservation.ID
	}
	if o.MaxRunDuration > 0 {
		k += "|flex"
	}
	if o.Block != nil {
		k += "|block:" + o.Block.Offering
	}
	return k
}

// InstanceSpec is what Prepare and Create need beyond the offer. It carries
// the VM identity every resource must be labelled with.
type InstanceSpec struct {
	// VM is the gpuprov VM name: lowercase, [a-z0-9-], at most 50 characters.
	VM string
	// Installation is the id of the journal that owns the VM; every resource
	// carries it beside the VM name, and Observe and List filter on it.
	Installation string
	// Attempt is the attempt number of this create, from 1.
	Attempt int
	// IdempotencyToken is derived from (installation, VM, attempt): a retried
	// or replayed create of the same attempt carries the same token.
	IdempotencyToken string
	// SSHUser is the login user the core will use, when the cloud lets the
	// caller choose it.
	SSHUser string
	// AuthorizedKeys are OpenSSH authorized_keys lines to install for SSHUser.
	AuthorizedKeys []string
	// HostKey, when set, is an SSH host key generated by gpuprov for this VM,
	// to be injected through user-data (cloud-init) where the cloud takes
	// user-data. Its private half is a secret: never log or persist it.
	HostKey *HostKey
	// OpenPorts are inbound ports the VM's own firewall must open besides
	// SSH (for example 6443/tcp and 51820/udp for a cross-cloud cluster).
	OpenPorts []Port
	// SourceRanges are the networks (CIDRs, validated with
	// ValidateSourceRanges) that may connect to SSH and OpenPorts, as the
	// request gave them; empty: the provider's configured ranges, else
	// DefaultSourceRanges (see SourcesFor). Where sources are restricted,
	// OpenPorts also admit the instances behind the same shared firewall
	// (a security group's own members, a firewall's target tag, the
	// adapter's virtual network), so that a cluster's nodes on one cloud
	// reach each other. A provider that cannot restrict who connects lists
	// FeatureSourceRanges as unsupported.
	SourceRanges []string
	// Image overrides the provider's default image.
	Image string
	// UserLabels are the caller's labels (Request.Labels), valid under
	// ValidateUserLabels. A provider whose Capabilities.Labels is true puts
	// them on every resource it makes, beside the identity labels; the core
	// gives none to a provider that cannot.
	UserLabels map[string]string
	// PlacementGroup names the placement group (PlacementGrouper) the
	// instance must be created in, for a compact cluster; empty: none.
	PlacementGroup string
	// Volumes are the persistent volumes the instance is created with, on
	// a provider whose volumes attach at create
	// (VolumeLimits.AttachAtCreate); empty elsewhere. Each is made and
	// claimed for the VM before the create (VolumeManager.CreateVolume).
	Volumes []VolumeMount
}

// Labels returns the labels every resource of the VM carries: the caller's
// (UserLabels) and the identity labels, which win.
func (s *InstanceSpec) Labels() map[string]string {
	m := make(map[string]string, len(s.UserLabels)+2)
	for k, v := range s.UserLabels {
		m[k] = v
	}
	m[LabelVM], m[LabelInstallation] = s.VM, s.Installation
	return m
}

// Identity labels. Their values fit every cloud's label rules.
const (
	LabelVM           = "gpuprov"
	LabelInstallation = "gpuprov-installation"
	// LabelCluster names the cluster a placement group belongs to.
	LabelCluster = "gpuprov-cluster"
	// LabelVolume is "true" on every persistent volume (VolumeManager),
	// beside LabelVM (the volume's name) and LabelInstallation. It tells
	// a volume from a VM's own disks, which carry the VM's identity
	// labels too: a volume named like a VM is never that VM's disk.
	LabelVolume = "gpuprov-volume"
)

// ResourceName is the name every per-VM resource (instance, key, firewall)
// takes where the cloud names resources: gpuprov-<vm>.
func ResourceName(vm string) string { return "gpuprov-" + vm }

// InstallationMark is a short mark of an installation (5 lowercase base32
// characters of its SHA-256) that a resource's name carries where the
// cloud keeps no labels to tell installations apart (Lambda's keys and
// file systems, RunPod's network volumes).
func InstallationMark(installation string) string {
	sum := sha256.Sum256([]byte(installation))
	return strings.ToLower(base32.StdEncoding.EncodeToString(sum[:]))[:5]
}

// VolumeResourceName is the name of a persistent volume's cloud resource
// (VolumeSpec.Name) where the cloud names resources: gpuprov--<volume>.
// It is not ResourceName, whose names a VM's own resources take, so that
// a volume's never collides with one of them: a GCP instance's boot disk
// is named like the instance, gpuprov-<vm>, which would keep a VM and a
// volume of one name out of one zone; an Azure VM's OS disk is
// gpuprov-<vm>-<attempt>-osdisk, the name a volume "<vm>-1-osdisk" would
// take. VM and volume names start with a letter or a digit (never a
// hyphen), so no VM's resource name has two hyphens after "gpuprov": no
// name of this form is any VM's.
func VolumeResourceName(volume string) string { return "gpuprov--" + volume }

// HostKey is an SSH host key pair generated by gpuprov for one VM.
type HostKey struct {
	// PrivatePEM is the OpenSSH PEM private key, for user-data only.
	PrivatePEM string `json:"-"`
	// Public is the authorized_keys form ("ssh-ed25519 AAAA..."), which the
	// core pins.
	Public string `json:"public"`
}

// Port is an inbound port to open: a number and "tcp" or "udp".
type Port struct {
	Number   int    `json:"number"`
	Protocol string `json:"protocol"`
}

func (p Port) String() string { return fmt.Sprintf("%d/%s", p.Number, p.Protocol) }

// InstanceStatus is an instance's status, normalized across clouds.
type InstanceStatus string

const (
	// StatusPending: requested, booting, or running but not yet reachable
	// (including "active but still installing").
	StatusPending InstanceStatus = "pending"
	// StatusRunning: running; SSH is set once the instance can be reached.
	StatusRunning InstanceStatus = "running"
	// StatusStopping: shutting down or being deleted.
	StatusStopping InstanceStatus = "stopping"
	// StatusFailed: broken (boot failure, host error, preempted but still listed).
	StatusFailed InstanceStatus = "failed"
	// StatusTerminated: gone; Observe does not return these, Diagnose may.
	StatusTerminated InstanceStatus = "terminated"
	// StatusUnknown: a vendor status the adapter cannot map.
	StatusUnknown InstanceStatus = "unknown"
)

// SSHEndpoint is where the core reaches an instance over SSH.
type SSHEndpoint struct {
	Host string `json:"host"`
	Port int    `json:"port"`
	User string `json:"user"`
}

// Address returns host:port.
func (e SSHEndpoint) Address() string { return fmt.Sprintf("%s:%d", e.Host, e.Port) }

// Observed is one instance as Observe or List sees it.
type Observed struct {
	ID           string         `json:"id"`
	VM           string         `json:"vm,omitempty"` // the identity found on the instance
	Status       InstanceStatus `json:"status"`
	SSH          *SSHEndpoint   `json:"ssh,omitempty"` // nil until reachable
	PublicIP     string         `json:"public_ip,omitempty"`
	PrivateIP    string         `json:"private_ip,omitempty"`
	Location     Location       `json:"location"`
	InstanceType string         `json:"instance_type,omitempty"`
	Created      time.Time      `json:"created"`
	VendorStatus string         `json:"vendor_status,omitempty"`
	// Host is the cloud's id of the machine the instance runs on, where
	// the cloud exposes one; empty otherwise.
	Host string `json:"host,omitempty"`
	// Queued says the instance (status pending) waits in the cloud's
	// queue for capacity, as a flex-start create does; VendorStatus says
	// the cloud's own word for it. The core's boot timeout starts when it
	// leaves the queue.
	Queued bool `json:"queued,omitempty"`
	// Notice is an interruption the cloud's API announces for the
	// instance (a pod's DisruptionTarget condition), where it does; nil
	// otherwise. Clouds whose machines hear of it from their metadata
	// server implement NoticeWatcher instead.
	Notice *Notice `json:"notice,omitempty"`
}

// Feature is something a cloud may not support.
type Feature string

const (
	FeatureSpot     Feature = "spot"
	FeatureUserData Feature = "user-data" // cloud-init: host key injection
	// FeatureIdempotencyToken: a Create sent again with the same
	// InstanceSpec (its IdempotencyToken, or a name derived from it) is
	// answered with the instance the first one made, if it landed, and
	// never makes a second. The core then sends a create whose answer may
	// have been lost again at once, instead of observing for the
	// ConsistencyWindow first. An adapter that cannot promise it lists the
	// feature as unsupported.
	FeatureIdempotencyToken Feature = "idempotency-token"
	FeatureFirewall         Feature = "per-vm-firewall" // OpenPorts is honoured
	FeatureZones            Feature = "zones"           // locations have zones
	// FeatureSourceRanges: the firewall admits only
	// InstanceSpec.SourceRanges (or the provider's configured ranges) to
	// SSH and OpenPorts. A request that restricts its sources is not
	// planned on a provider that cannot.
	FeatureSourceRanges Feature = "source-ranges"
)

// Capabilities says what a cloud cannot do and how the core paces it. Zero
// durations mean "use the core's default".
type Capabilities struct {
	Unsupported []Feature
	// Billing is how the cloud bills an instance's time (its increment and
	// minimum, with its pricing page); the zero value bills per second
	// without a minimum.
	Billing Billing
	// BootTimeout bounds the wait from create to running with SSH.
	BootTimeout time.Duration
	// DeleteTimeout bounds a teardown: delete, wait until gone, cleanup.
	DeleteTimeout time.Duration
	// PollInterval is how often the core calls Observe while waiting.
	PollInterval time.Duration
	// ConsistencyWindow is how long a new instance may be missing from
	// Observe after Create returned; "nothing there" counts only after it.
	ConsistencyWindow time.Duration
	// RequestsPerSecond and Burst size the core's token bucket for this
	// account's API calls; zero means unlimited.
	RequestsPerSecond float64
	Burst             int
	// DiskSize says Create sizes the boot disk to Offer.DiskGB. Without
	// it, a request for a disk is met only by offers whose fixed DiskGB is
	// large enough.
	DiskSize bool
	// Labels says Prepare and Create put InstanceSpec.UserLabels on every
	// resource they make. Without it, a request with labels is not planned
	// on the provider.
	Labels bool
	// ListAll says the provider is a Lister whose List of a zero Location
	// (every location) costs about one request per page, whatever the
	// number of regions and zones: the core then polls every location of
	// the account with one listing instead of one per location.
	ListAll bool
	// CompactPlacement says the provider implements PlacementGrouper and
	// Create honours InstanceSpec.PlacementGroup. Without it, a compact
	// cluster is not planned on the provider.
	CompactPlacement bool
	// FlexStart says Plan answers a ResourceRequest.FlexStart with offers
	// that queue (Offer.MaxRunDuration) and Observe reports a queued
	// instance (Observed.Queued). Without it, a flex-start request is not
	// planned on the provider.
	FlexStart bool
}

// PlacementGrouper is a provider that can place a cluster's instances close
// together (an AWS cluster placement group, a GCP compact placement policy,
// the sim's placement groups). The group is a per-cluster side resource: the
// core ensures it before each node's Prepare, hands its name to Create in
// InstanceSpec.PlacementGroup, and deletes it once the cluster's last node
// in the location is torn down.
type PlacementGrouper interface {
	// EnsurePlacementGroup makes the group name in loc's region with
	// labels (the installation and cluster identity, the caller's labels),
	// or adopts it when it exists; idempotent.
	EnsurePlacementGroup(ctx context.Context, loc Location, name string, labels map[string]string) error
	// DeletePlacementGroup deletes the group name in loc's region. A group
	// that is gone is success; one that instances still use is an error
	// matching ErrInUse.
	DeletePlacementGroup(ctx context.Context, loc Location, name string) error
}

// ErrInUse is matched (errors.Is) by a DeletePlacementGroup error for a
// group that instances still use, and by a VolumeManager error for a
// volume attached to another instance (attach) or to any (delete).
var ErrInUse = errors.New("still in use")

// PlacementGroupName is the name of cluster's placement group:
// gpuprov-<cluster>.
func PlacementGroupName(cluster string) string { return "gpuprov-" + cluster }

// Supports reports whether f is not listed as unsupported.
func (c Capabilities) Supports(f Feature) bool {
	for _, u := range c.Unsupported {
		if u == f {
			return false
		}
	}
	return true
}
