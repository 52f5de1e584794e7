package gpuprov

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/org/gpuprov/gpu"
	"github.com/org/gpuprov/provider"
)

// ErrInvalidRequest is matched (errors.Is) by every *RequestError: the
// request was rejected before anything was journaled or created.
var ErrInvalidRequest = errors.New("gpuprov: invalid request")

// RequestError names the field of a Request that is wrong and why.
type RequestError struct {
	Field   string
	Problem string
}

func (e *RequestError) Error() string {
	return fmt.Sprintf("invalid request: %s: %s", e.Field, e.Problem)
}

// Is makes errors.Is(err, ErrInvalidRequest) true.
func (e *RequestError) Is(target error) bool { return target == ErrInvalidRequest }

// Request is what a caller needs for one VM. Only Name and GPU (or GPUs)
// are required.
type Request struct {
	// Name identifies the VM in the journal and on every cloud resource
	// (gpuprov-<name>): lowercase letters, digits and dashes, starting with a
	// letter or digit, not ending with a dash, at most 50 characters — the
	// rules every supported cloud's labels and names accept.
	Name string `json:"name"`
	// GPU is a canonical GPU name or alias ("H100-80GB", "h100", ...).
	// Set GPU or GPUs, not both.
	GPU string `json:"gpu"`
	// GPUCount is the number of GPUs on the machine; default 1. With GPUs,
	// it is the count of each alternative that gives none.
	GPUCount int `json:"gpu_count"`
	// GPUs names alternative GPUs instead of GPU: the launch plans the
	// offers of every alternative (each with its own count) across the
	// providers and tries them in GPUOrder, so that a stockout of one model
	// moves to the next model's offers within the same launch. Each name is
	// canonicalized as GPU is; an unknown one, or an alternative given
	// twice (the same GPU and count), is a RequestError naming its position
	// ("gpus[1]"). The ready VM reports the GPU of the offer it runs on, and
	// its acceptance checks that GPU. A cluster's nodes (ClusterRequest.Node)
	// cannot have alternatives.
	GPUs []GPUChoice `json:"gpus,omitempty"`
	// GPUOrder orders the offers of GPUs' alternatives: GPUOrderPrice (the
	// default) ranks them all together by Rank, GPUOrderGiven tries every
	// offer of the first alternative (in Rank's order) before the second's.
	GPUOrder        GPUOrder            `json:"gpu_order,omitempty"`
	MinGPUMemoryGB  int                 `json:"min_gpu_memory_gb,omitempty"`
	MaxPricePerHour float64             `json:"max_price_per_hour,omitempty"` // USD per hour for the machine; 0: no limit
	Spot            provider.SpotPolicy `json:"spot,omitempty"`
	// Providers restricts the launch to these provider names; empty: all.
	Providers []string `json:"providers,omitempty"`
	// Regions restricts the launch to these regions; empty: all.
	Regions []string `json:"regions,omitempty"`
	// Zones restricts the launch to these zones; empty: all. (A cluster
	// placed in one zone pins each node's Providers, Regions and Zones.)
	Zones []string `json:"zones,omitempty"`
	// Timeout bounds the whole launch, measured on the Provisioner's clock
	// (the caller's context bounds it too); 0 means DefaultTimeout.
	Timeout time.Duration `json:"timeout,omitempty"`
	// MaxOffers bounds how many offers are tried; 0 means the
	// Provisioner's default.
	MaxOffers int `json:"max_offers,omitempty"`
	// SSHUser is the login user where the cloud lets gpuprov choose it.
	SSHUser string `json:"ssh_user,omitempty"`
	// OpenPorts are inbound ports the VM's own firewall opens besides SSH.
	OpenPorts []provider.Port `json:"open_ports,omitempty"`
	// SourceRanges are the networks (CIDRs) that may connect to SSH and
	// OpenPorts; empty: each provider's configured source_ranges, else
	// provider.DefaultSourceRanges (anywhere). With ranges, OpenPorts also
	// admit the VM's peers behind the same firewall on its cloud (a
	// cluster's nodes), and a provider that cannot restrict who connects
	// (provider.FeatureSourceRanges) is not planned.
	SourceRanges []string `json:"source_ranges,omitempty"`
	// Image overrides the providers' default image.
	Image string `json:"image,omitempty"`

	// MinVCPUs and MinMemoryGB are what the job needs of the machine
	// besides its GPUs: offers with fewer vCPUs or less memory (or that do
	// not say) are not planned. 0: any.
	MinVCPUs    int     `json:"min_vcpus,omitempty"`
	MinMemoryGB float64 `json:"min_memory_gb,omitempty"`
	// DiskGB is the boot disk the job needs, in GB: providers that size
	// disks create it this large; on the others, only offers whose fixed
	// disk is as large are planned. 0: the provider's default.
	DiskGB int `json:"disk_gb,omitempty"`
	// Labels are put on every resource of the VM (instance, disk,
	// firewall, key, where the cloud labels them) beside gpuprov's
	// identity. They must fit the strictest cloud's rules
	// (provider.ValidateUserLabels): keys of 2 to 55 lowercase letters,
	// digits and '-', values of at most 63 lowercase letters, digits, '_'
	// and '-', at most 40 labels. A
	// provider that cannot label its resources is not planned.
	Labels map[string]string `json:"labels,omitempty"`

	// WaitForCapacity keeps the launch going when every offer is blocked
	// or tried: instead of failing, the VM waits (state waiting, its next
	// try journaled) until the earliest block on a planned offer expires or
	// a plan refresh shows an offer it has not tried, then tries again,
	// until Timeout. Each round of tries is bounded by MaxOffers. While it
	// waits, the only cloud calls are plan refreshes, at most one per
	// WithCapacityPoll interval (default 1 minute) plus one per block that
	// expires. Set a Timeout that fits the wait (hours, for scarce GPUs).
	//
	// Waiting is for capacity that exists and is out or blocked: when the
	// request's filters (price cap, regions, GPU, memory, ...) leave no
	// offer at all, and no provider's Plan failed, the launch fails at
	// once with ErrNoOffers naming the filter that emptied the plan,
	// unless WaitForOffers is set too.
	WaitForCapacity bool `json:"wait_for_capacity,omitempty"`
	// WaitForOffers, with WaitForCapacity, also waits while no offer fits
	// the request at all, for offers that may appear later (a marketplace
	// listing, a price that drops under the cap); the waiting line says
	// so. Without WaitForCapacity it is refused.
	WaitForOffers bool `json:"wait_for_offers,omitempty"`
	// TTL deletes the VM once it has been ready this long, whether or not
	// the launching process still runs: the expiry is journaled, and every
	// Provisioner that runs Reap (or Recover, or WithReaper) on the journal
	// enforces it. 0: no limit.
	TTL time.Duration `json:"ttl,omitempty"`
	// MaxCost deletes the VM once its bill reaches this many USD: every
	// attempt that made an instance (a machine that booted and failed
	// costs money) and the ready machine from its create, in each cloud's
	// billing increments, as Costs counts it (docs/cost.md); enforced as
	// TTL is. 0: no limit.
	MaxCost float64 `json:"max_cost,omitempty"`

	// Acceptance tunes the GPU acceptance phase (after connect, before
	// bootstrap; see docs/gpu-acceptance.md), which the Provisioner runs
	// on every machine it reaches over SSH unless built
	// WithoutAcceptance. The zero value runs the default checks.
	Acceptance Acceptance `json:"acceptance,omitzero"`

	// Reserved says whether the launch uses capacity the account already
	// holds (an AWS On-Demand Capacity Reservation, a GCP reservation, an
	// Azure capacity reservation group, the sim's reservations): "" (the
	// default) plans the open reservations that fit ahead of every offer
	// that bills on top, since their marginal price is zero; "require"
	// plans reserved capacity only; "forbid" none (a job that must not take
	// a slot another counts on). A reservation that is full is tried last,
	// at its list price (a cloud may launch beyond it as ordinary capacity),
	// and, when it refuses, blocks only itself.
	Reserved provider.ReservedPolicy `json:"reserved,omitempty"`
	// Reservation names one reservation to launch into (a targeted one is
	// planned only when named). One that no configured provider has, that
	// is for another shape or zone, or that has ended is an error at plan
	// time naming it; nothing else is planned.
	Reservation string `json:"reservation,omitempty"`
	// FlexStart, when positive, asks for queued capacity (GCP's
	// flex-start, the sim's flex queue) that runs for at most this long:
	// the create waits in the cloud's queue (phase queued, journaled, so
	// Recover goes on waiting after a crash) until the cloud finds capacity
	// or Timeout ends the launch, and the cloud deletes the machine this
	// long after it starts. gpuprov deletes it a little earlier (a tenth of
	// the run, at most 10 minutes), through its teardown, as it does with a
	// TTL. Only providers that can queue are planned; set a Timeout that
	// fits the queue.
	FlexStart time.Duration `json:"flex_start,omitempty"`
	// Block, when set, buys a capacity block (an AWS Capacity Block for
	// ML, the sim's blocks) and launches into it: see BlockRequest. It is
	// the opt-in to a purchase that is paid upfront and not refunded.
	Block *BlockRequest `json:"block,omitempty"`

	// OnInterruption says what a notice that a ready spot VM is about to
	// be interrupted leads to, besides its event and the caller's hook
	// (WithInterruptionHandler), in whichever process watches the VM
	// (WithReaper; see docs/interruptions.md): "" (the default) nothing
	// more; ReplaceWhenReady launches a replacement at once, under the
	// VM's name, on another offer (the interrupted one is blocked for
	// spot), and deletes the interrupted machine when the replacement is
	// ready; ReplaceAtReclaim launches it at once too but keeps the
	// interrupted machine until the cloud reclaims it (or its notice's
	// time passes). A preemption seen without a notice is replaced the
	// same way. A rebalance recommendation (a risk, not a reclaim) never
	// replaces. Spot "any" lets the replacement go on-demand when no spot
	// offer is left. Spot VMs only.
	OnInterruption InterruptionPolicy `json:"on_interruption,omitempty"`

	// Volumes are persistent volumes the VM mounts (see VolumeRequest and
	// docs/volumes.md): each is created on the first launch that names it,
	// in the zone of that launch's offer, and a later launch naming it is
	// planned only where it can attach. Every provider planned must have
	// volumes (provider.VolumeManager), the journal must keep them
	// (journal.Volumes), and the machine is reached over SSH to mount them.
	Volumes []VolumeRequest `json:"volumes,omitempty"`

	// IdleTimeout, when positive, deletes the ready VM once its GPUs have
	// been idle this long: every GPU's utilization under IdleBelow at
	// each sample, which whatever process runs the reaper (WithReaper,
	// `gpuprov recover --watch`) takes over SSH once per reaper interval
	// (see docs/idle.md). 0: never.
	IdleTimeout time.Duration `json:"idle_timeout,omitempty"`
	// IdleBelow is the utilization, in percent, under which a GPU counts
	// as idle; 0: DefaultIdleBelow.
	IdleBelow int `json:"idle_below,omitempty"`
	// BusyCommand, when set, runs on the machine at each idle sample (as
	// the login user, in a shell): exit 0 says the machine is busy
	// whatever its GPUs show (a job downloading its data). It is a remote
	// command line: never put a secret in it.
	BusyCommand string `json:"busy_command,omitempty"`

	// Rank orders the planned offers: RankPrice (list price, the default)
	// or RankExpectedCost (the expected cost of a usable machine, from the
	// journal's per-offer history; see Expectation).
	Rank Rank `json:"rank,omitempty"`
	// RankHorizon is how long the machine is expected to run, for
	// RankExpectedCost; 0: the TTL, else DefaultRankHorizon.
	RankHorizon time.Duration `json:"rank_horizon,omitempty"`
}

// GPUChoice is one alternative of Request.GPUs: a GPU and how many of it
// the machine has.
type GPUChoice struct {
	// GPU is a canonical GPU name or alias, as Request.GPU.
	GPU string `json:"gpu"`
	// Count is the number of GPUs of this model on the machine, 1 to 64;
	// 0: the request's GPUCount (default 1).
	Count int `json:"count,omitempty"`
}

// String is the choice as gpuprov prints it: "A100-80GB×2".
func (c GPUChoice) String() string { return fmt.Sprintf("%s×%d", c.GPU, c.Count) }

// GPUOrder is Request.GPUOrder.
type GPUOrder string

// The orders of a request's GPU alternatives.
const (
	// GPUOrderPrice ranks the offers of every alternative together, by
	// the request's Rank (cheapest first by default).
	GPUOrderPrice GPUOrder = ""
	// GPUOrderGiven tries the alternatives in the order the request gives
	// them: every offer of the first before any of the second.
	GPUOrderGiven GPUOrder = "given"
)

// Alternatives returns the GPU choices r accepts, in the order given: its
// GPUs, else GPU×GPUCount. A count left 0 is GPUCount's, and a GPUCount
// left 0 is 1. Names are as r has them (canonical once r was launched or
// planned: VM.Request is).
func (r Request) Alternatives() []GPUChoice {
	def := max(r.GPUCount, 1)
	if len(r.GPUs) == 0 {
		return []GPUChoice{{GPU: r.GPU, Count: def}}
	}
	out := make([]GPUChoice, len(r.GPUs))
	for i, c := range r.GPUs {
		out[i] = GPUChoice{GPU: c.GPU, Count: cmp.Or(c.Count, def)}
	}
	return out
}

// alternativesText is the request's GPUs as its messages name them:
// "H100-80GB×1", "H100-80GB×1 or A100-80GB×2".
func (r *Request) alternativesText() string {
	var parts []string
	for _, c := range r.Alternatives() {
		parts = append(parts, c.String())
	}
	return strings.Join(parts, " or ")
}

// alternative returns r for one of its GPU choices alone: what the
// providers are asked for that choice.
func (r *Request) alternative(c GPUChoice) Request {
	one := *r
	one.GPU, one.GPUCount, one.GPUs, one.GPUOrder = c.GPU, c.Count, nil, GPUOrderPrice
	return one
}

// VolumeRequest is one persistent volume of a Request.
type VolumeRequest struct {
	// Name names the volume in the journal, as VM names go (lowercase
	// letters, digits and dashes, at most 50 characters); the cloud's
	// resource is provider.VolumeResourceName(name), gpuprov--<name> (on
	// Lambda and RunPod, whose volumes carry no labels, with the
	// installation's mark added),
	// labelled with the installation where the cloud has labels.
	Name string `json:"name"`
	// SizeGB is the size of a volume that does not exist yet; for one
	// that does, 0 or its size.
	SizeGB int `json:"size_gb,omitempty"`
	// MountPath is where the machine mounts it: an absolute, clean path,
	// not "/".
	MountPath string `json:"mount_path"`
	// DeleteWithVM deletes the volume when the VM is deleted; by default
	// it is kept for the next VM that names it.
	DeleteWithVM bool `json:"delete_with_vm,omitempty"`
}

// InterruptionPolicy is Request.OnInterruption.
type InterruptionPolicy string

// The interruption policies.
const (
	// ReplaceWhenReady: replace at the notice; delete the interrupted
	// machine once the replacement is ready.
	ReplaceWhenReady InterruptionPolicy = "replace"
	// ReplaceAtReclaim: replace at the notice; keep the interrupted
	// machine until the cloud reclaims it.
	ReplaceAtReclaim InterruptionPolicy = "replace-at-reclaim"
)

// BlockRequest is a request's opt-in to buying a capacity block: capacity
// for a fixed window, paid upfront for the whole window, not refunded. The
// launch plans the providers' block offerings (provider.BlockSeller) of
// Duration and Count that start within StartWithin, cheapest first, leaves
// out those whose fee passes MaxUpfrontUSD, journals the purchase before it
// sends it (phase purchase), waits for the block's start (phase
// block-start), and launches into it. A purchase is sent at most once per
// attempt, and once a block is bought the launch uses that block or fails
// (saying which block stays bought): it never buys a second. The VM's
// leash ends before the block reclaims its instances.
type BlockRequest struct {
	// Duration is the window's length (AWS sells whole days).
	Duration time.Duration `json:"duration"`
	// Count is the instances the block holds; default 1. The launch uses
	// one; launch more VMs into it with Request.Reservation.
	Count int `json:"count,omitempty"`
	// StartWithin bounds how long after the plan the block may start; 0:
	// any start the clouds sell. The request's Timeout must cover it: the
	// launch waits for the start.
	StartWithin time.Duration `json:"start_within,omitempty"`
	// MaxUpfrontUSD is the most the block may cost, in USD: required.
	MaxUpfrontUSD float64 `json:"max_upfront_usd"`
}

// Acceptance is a request's say in its GPU acceptance phase.
type Acceptance struct {
	// Skip turns the phase off for this request: the machine is ready
	// once connected (and bootstrapped) without its GPUs being looked at.
	Skip bool `json:"skip,omitempty"`
	// DCGM, 1 or 2, also runs `dcgmi diag -r DCGM` where the machine has
	// DCGM (a level it cannot run is reported as skipped, not failed): one
	// more SSH command; -r 2 takes a minute or two.
	DCGM int `json:"dcgm,omitempty"`
	// Command, when set, runs last on the machine (as the login user, in
	// a shell) and must exit 0 for the machine to be accepted: a short
	// test of the caller's own (a matmul, an NCCL all-reduce). Its output
	// is not journaled; its exit status and last line are. It is a remote
	// command line: never put a secret in it.
	Command string `json:"command,omitempty"`
	// Ignore names checks (gpu.Checks) whose failures only warn for this
	// request, for example "link" on a cloud whose VMs report a narrower
	// PCIe link than the board's.
	Ignore []string `json:"ignore,omitempty"`
}

// MaxAcceptanceCommand is the longest Acceptance.Command accepted.
const MaxAcceptanceCommand = 4096

// MaxFlexStart is the longest Request.FlexStart accepted; each cloud
// bounds it further (GCP: 7 days).
const MaxFlexStart = 30 * 24 * time.Hour

// DefaultIdleBelow is the GPU utilization, in percent, under which a GPU
// counts as idle for Request.IdleTimeout.
const DefaultIdleBelow = 5

// DefaultTimeout bounds a launch whose Request has no Timeout.
const DefaultTimeout = 20 * time.Minute

// MaxNameLength is the longest VM name every cloud accepts once prefixed.
const MaxNameLength = 50

var nameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`)

// ValidateName reports whether name can name a VM (or a cluster).
func ValidateName(name string) error {
	switch {
	case name == "":
		return &RequestError{"name", "empty"}
	case len(name) > MaxNameLength:
		return &RequestError{"name", fmt.Sprintf("%q is %d characters; at most %d", name, len(name), MaxNameLength)}
	case !nameRE.MatchString(name):
		return &RequestError{"name", fmt.Sprintf("%q: use lowercase letters, digits and dashes, starting and ending with a letter or digit", name)}
	}
	return nil
}

// Validate checks r as Launch would, against the configured provider names,
// without touching a journal or a cloud: callers (a CLI, a scheduler's API)
// can reject bad input before they open anything. It returns a *RequestError.
func (r Request) Validate(providers []string) error {
	known := make(map[string]bool, len(providers))
	for _, p := range providers {
		known[p] = true
	}
	return r.normalize(known)
}

// normalize validates r, fills defaults and canonicalizes the GPU name. known
// lists the configured provider names.
func (r *Request) normalize(known map[string]bool) error {
	if len(known) == 0 {
		return &RequestError{"providers", "no provider is configured"}
	}
	if err := ValidateName(r.Name); err != nil {
		return err
	}
	if err := r.normalizeGPUs(); err != nil {
		return err
	}
	if r.MinGPUMemoryGB < 0 {
		return &RequestError{"min_gpu_memory_gb", "negative"}
	}
	if r.MaxPricePerHour < 0 || math.IsNaN(r.MaxPricePerHour) || math.IsInf(r.MaxPricePerHour, 0) {
		return &RequestError{"max_price_per_hour", fmt.Sprintf("%v is not a price", r.MaxPricePerHour)}
	}
	switch r.Spot {
	case provider.OnDemand, provider.SpotOnly, provider.SpotOrOnDemand:
	default:
		return &RequestError{"spot", fmt.Sprintf("%q: want \"\" (on-demand), \"spot\" or \"any\"", r.Spot)}
	}
	for _, p := range r.Providers {
		if !known[p] {
			return &RequestError{"providers", fmt.Sprintf("%q is not configured (configured: %v)", p, sortedKeys(known))}
		}
	}
	if r.Timeout < 0 {
		return &RequestError{"timeout", "negative"}
	}
	if r.Timeout == 0 {
		r.Timeout = DefaultTimeout
	}
	if r.MaxOffers < 0 {
		return &RequestError{"max_offers", "negative"}
	}
	if r.MinVCPUs < 0 || r.MinVCPUs > 4096 {
		return &RequestError{"min_vcpus", fmt.Sprintf("%d is not between 0 and 4096", r.MinVCPUs)}
	}
	if r.MinMemoryGB < 0 || math.IsNaN(r.MinMemoryGB) || math.IsInf(r.MinMemoryGB, 0) {
		return &RequestError{"min_memory_gb", fmt.Sprintf("%v is not an amount of GB", r.MinMemoryGB)}
	}
	if r.DiskGB < 0 || r.DiskGB > 65536 {
		return &RequestError{"disk_gb", fmt.Sprintf("%d is not between 0 and 65536", r.DiskGB)}
	}
	if err := provider.ValidateUserLabels(r.Labels); err != nil {
		return &RequestError{"labels", err.Error()}
	}
	if r.TTL < 0 {
		return &RequestError{"ttl", "negative"}
	}
	if r.MaxCost < 0 || math.IsNaN(r.MaxCost) || math.IsInf(r.MaxCost, 0) {
		return &RequestError{"max_cost", fmt.Sprintf("%v is not an amount of USD", r.MaxCost)}
	}
	for _, p := range r.OpenPorts {
		if p.Number < 1 || p.Number > 65535 || (p.Protocol != "tcp" && p.Protocol != "udp") {
			return &RequestError{"open_ports", fmt.Sprintf("%v: want 1-65535 and tcp or udp", p)}
		}
	}
	if r.WaitForOffers && !r.WaitForCapacity {
		return &RequestError{"wait_for_offers", "needs wait_for_capacity: it says what else to wait for"}
	}
	if err := provider.ValidateSourceRanges(r.SourceRanges); err != nil {
		return &RequestError{"source_ranges", err.Error()}
	}
	switch r.Rank {
	case RankPrice, RankExpectedCost:
	case "price":
		r.Rank = RankPrice
	default:
		return &RequestError{"rank", fmt.Sprintf("%q: want \"price\" (the default) or %q", r.Rank, RankExpectedCost)}
	}
	if r.RankHorizon < 0 {
		return &RequestError{"rank_horizon", "negative"}
	}
	if err := r.validateBlock(); err != nil {
		return err
	}
	if r.FlexStart < 0 || r.FlexStart > MaxFlexStart {
		return &RequestError{"flex_start", fmt.Sprintf("%v is not between 0 and %v", r.FlexStart, MaxFlexStart)}
	}
	if r.FlexStart > 0 && r.Spot == provider.SpotOnly {
		return &RequestError{"flex_start", "queued capacity is not spot: ask for one or the other"}
	}
	if err := r.validateVolumes(); err != nil {
		return err
	}
	if r.IdleTimeout < 0 {
		return &RequestError{"idle_timeout", "negative"}
	}
	if r.IdleBelow < 0 || r.IdleBelow > 100 {
		return &RequestError{"idle_below", fmt.Sprintf("%d is not a percentage (0 to 100)", r.IdleBelow)}
	}
	if (r.IdleBelow != 0 || r.BusyCommand != "") && r.IdleTimeout == 0 {
		return &RequestError{"idle_timeout", "idle_below and busy_command need an idle_timeout"}
	}
	if len(r.BusyCommand) > MaxAcceptanceCommand {
		return &RequestError{"busy_command", fmt.Sprintf("%d bytes; at most %d", len(r.BusyCommand), MaxAcceptanceCommand)}
	}
	switch r.OnInterruption {
	case "", ReplaceWhenReady, ReplaceAtReclaim:
	default:
		return &RequestError{"on_interruption", fmt.Sprintf("%q: want \"\" (notice and hook only), %q or %q", r.OnInterruption, ReplaceWhenReady, ReplaceAtReclaim)}
	}
	if r.OnInterruption != "" && r.Spot == provider.OnDemand {
		return &RequestError{"on_interruption", fmt.Sprintf("%q: only spot VMs are watched for interruptions: ask for spot (\"spot\" or \"any\")", r.OnInterruption)}
	}
	if !r.Reserved.Valid() {
		return &RequestError{"reserved", fmt.Sprintf("%q: want \"\" (prefer), %q or %q", r.Reserved, provider.RequireReserved, provider.ForbidReserved)}
	}
	if r.Reservation != "" {
		if r.Reserved == provider.ForbidReserved {
			return &RequestError{"reservation", fmt.Sprintf("%q is named while reserved is %q", r.Reservation, r.Reserved)}
		}
		if len(r.Reservation) > 256 || strings.ContainsFunc(r.Reservation, func(c rune) bool { return c <= ' ' || c == 0x7f }) {
			return &RequestError{"reservation", fmt.Sprintf("%q is not a reservation id or name", r.Reservation)}
		}
	}
	return r.Acceptance.validate()
}

// normalizeGPUs checks and canonicalizes GPU, GPUCount, GPUs and GPUOrder,
// and resolves each alternative's count.
func (r *Request) normalizeGPUs() error {
	if len(r.GPUs) == 0 {
		if r.GPU == "" {
			return &RequestError{"gpu", fmt.Sprintf("empty (known: %s)", strings.Join(provider.GPUNames(), ", "))}
		}
		canon, err := provider.CanonicalGPU(r.GPU)
		if err != nil {
			return &RequestError{"gpu", err.Error()}
		}
		r.GPU = canon
	} else if r.GPU != "" {
		return &RequestError{"gpus", fmt.Sprintf("set with gpu %q: name one GPU in gpu, or every alternative in gpus", r.GPU)}
	}
	if r.GPUCount == 0 {
		r.GPUCount = 1
	}
	if r.GPUCount < 0 || r.GPUCount > 64 {
		return &RequestError{"gpu_count", fmt.Sprintf("%d is not between 1 and 64", r.GPUCount)}
	}
	if len(r.GPUs) > 0 {
		gpus := make([]GPUChoice, 0, len(r.GPUs)) // the caller's slice stays as given
		for i, c := range r.GPUs {
			field := fmt.Sprintf("gpus[%d]", i)
			if c.GPU == "" {
				return &RequestError{field, fmt.Sprintf("empty GPU (known: %s)", strings.Join(provider.GPUNames(), ", "))}
			}
			canon, err := provider.CanonicalGPU(c.GPU)
			if err != nil {
				return &RequestError{field, err.Error()}
			}
			c.GPU, c.Count = canon, cmp.Or(c.Count, r.GPUCount)
			if c.Count < 0 || c.Count > 64 {
				return &RequestError{field + ".count", fmt.Sprintf("%d is not between 1 and 64", c.Count)}
			}
			if j := slices.Index(gpus, c); j >= 0 {
				return &RequestError{field, fmt.Sprintf("%s is gpus[%d] already", c, j)}
			}
			gpus = append(gpus, c)
		}
		r.GPUs = gpus
	}
	switch r.GPUOrder {
	case GPUOrderPrice, GPUOrderGiven:
	case "price":
		r.GPUOrder = GPUOrderPrice
	default:
		return &RequestError{"gpu_order", fmt.Sprintf("%q: want \"price\" (the default) or %q", r.GPUOrder, GPUOrderGiven)}
	}
	return nil
}

func (r *Request) validateBlock() error {
	if r.Block == nil {
		return nil
	}
	cp := *r.Block // the caller's, which the default count must not change
	r.Block = &cp
	b := r.Block
	switch {
	case b.Duration <= 0:
		return &RequestError{"block.duration", fmt.Sprintf("%v: want a positive window such as 24h", b.Duration)}
	case !(b.MaxUpfrontUSD > 0) || math.IsInf(b.MaxUpfrontUSD, 0):
		return &RequestError{"block.max_upfront_usd", fmt.Sprintf("%v: a block is paid upfront and not refunded; name the most it may cost, in USD", b.MaxUpfrontUSD)}
	case b.Count < 0 || b.Count > 64:
		return &RequestError{"block.count", fmt.Sprintf("%d is not between 1 and 64", b.Count)}
	case b.StartWithin < 0:
		return &RequestError{"block.start_within", "negative"}
	case b.StartWithin > 0 && r.Timeout > 0 && b.StartWithin >= r.Timeout:
		return &RequestError{"block.start_within", fmt.Sprintf("%v: the timeout (%v) must cover the wait for the block's start", b.StartWithin, r.Timeout)}
	case r.Spot != provider.OnDemand:
		return &RequestError{"block", "a block is not spot capacity: ask for one or the other"}
	case r.FlexStart > 0:
		return &RequestError{"block", "a block is not queued capacity: ask for flex_start or a block"}
	case r.Reservation != "" || r.Reserved == provider.RequireReserved:
		return &RequestError{"block", "a request that buys a block launches into it: drop reservation/reserved, or drop the block"}
	}
	if b.Count == 0 {
		b.Count = 1
	}
	return nil
}

func (a *Acceptance) validate() error {
	if a.DCGM < 0 || a.DCGM > 2 {
		return &RequestError{"acceptance.dcgm", fmt.Sprintf("%d: want 0 (none), 1 or 2 (dcgmi diag -r 1 or -r 2)", a.DCGM)}
	}
	if len(a.Command) > MaxAcceptanceCommand {
		return &RequestError{"acceptance.command", fmt.Sprintf("%d bytes; at most %d", len(a.Command), MaxAcceptanceCommand)}
	}
	if strings.ContainsRune(a.Command, 0) {
		return &RequestError{"acceptance.command", "contains a NUL byte"}
	}
	for _, c := range a.Ignore {
		if !slices.Contains(gpu.Checks, c) {
			return &RequestError{"acceptance.ignore", fmt.Sprintf("%q is not a check (checks: %s)", c, strings.Join(gpu.Checks, ", "))}
		}
	}
	return nil
}

func (r *Request) resources() *provider.ResourceRequest {
	rr := &provider.ResourceRequest{
		GPU: r.GPU, GPUCount: r.GPUCount, MinGPUMemoryGB: r.MinGPUMemoryGB,
		MaxPricePerHour: r.MaxPricePerHour, Spot: r.Spot, Regions: r.Regions, Image: r.Image,
		MinVCPUs: r.MinVCPUs, MinMemoryGB: r.MinMemoryGB, DiskGB: r.DiskGB, Zones: r.Zones,
		Reserved: r.Reserved, Reservation: r.Reservation, FlexStart: r.FlexStart,
	}
	if r.Block != nil {
		rr.Block = &provider.BlockQuery{Count: r.Block.Count, Duration: r.Block.Duration}
	}
	return rr
}

// validateVolumes checks the request's volumes on their own (the journal
// and the providers are checked when the launch starts and plans).
func (r *Request) validateVolumes() error {
	names, paths := map[string]bool{}, map[string]bool{}
	for i, v := range r.Volumes {
		field := fmt.Sprintf("volumes[%d]", i)
		if err := ValidateName(v.Name); err != nil {
			return &RequestError{field + ".name", fmt.Sprintf("%q: %s", v.Name, err.(*RequestError).Problem)}
		}
		switch {
		case names[v.Name]:
			return &RequestError{field + ".name", fmt.Sprintf("%q is named twice", v.Name)}
		case v.SizeGB < 0:
			return &RequestError{field + ".size_gb", "negative"}
		case !path.IsAbs(v.MountPath) || path.Clean(v.MountPath) != v.MountPath || v.MountPath == "/":
			return &RequestError{field + ".mount_path", fmt.Sprintf("%q: want an absolute, clean path other than /", v.MountPath)}
		case strings.ContainsFunc(v.MountPath, func(c rune) bool { return c <= ' ' || c == 0x7f }):
			return &RequestError{field + ".mount_path", fmt.Sprintf("%q holds a space or a control character", v.MountPath)}
		case paths[v.MountPath]:
			return &RequestError{field + ".mount_path", fmt.Sprintf("%q is used twice", v.MountPath)}
		}
		names[v.Name], paths[v.MountPath] = true, true
	}
	if len(r.Volumes) > 0 && r.OnInterruption != "" {
		// A zonal volume attaches to one machine: the replacement could
		// not mount it while the interrupted machine holds it.
		return &RequestError{"on_interruption", fmt.Sprintf("%q with volumes: a volume attaches to one machine at a time, so a replacement cannot start before the interrupted machine is gone (not supported yet)", r.OnInterruption)}
	}
	return nil
}
