package provider

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// Reservation is capacity the account already holds and pays for whether it
// is used or not: an AWS On-Demand Capacity Reservation, a GCP reservation,
// an Azure capacity reservation, the sim's reservations. An offer that
// launches into one carries it (Offer.Reservation); its marginal price is
// zero, so the core ranks it ahead of every offer that bills on top.
type Reservation struct {
	// ID is the cloud's id or name of the reservation, as a user names it
	// in Request.Reservation ("cr-0123456789abcdef0", a GCP reservation
	// name, an Azure capacity reservation group's name).
	ID string `json:"id"`
	// Targeted says only a launch that names the reservation may use it
	// (AWS "targeted", GCP specificReservationRequired, every Azure
	// capacity reservation group); the core plans such an offer only for a
	// request that names it. An open one is used by any launch that fits.
	Targeted bool `json:"targeted,omitempty"`
	// Total is how many instances the reservation holds; Free how many more
	// can be launched into it when it was read.
	Total int `json:"total"`
	Free  int `json:"free"`
	// Ends is when the reservation ends; zero: when it is cancelled.
	Ends time.Time `json:"ends,omitzero"`
	// Reclaims, when positive, says the cloud terminates the instances
	// still in the reservation this long before Ends (an AWS Capacity
	// Block: 30 minutes); zero: they outlive it as ordinary capacity. The
	// core's leash on a VM in it ends a margin earlier, so the VM is
	// deleted by gpuprov, not killed.
	Reclaims time.Duration `json:"reclaims,omitempty"`
}

// Full reports whether no instance can be launched into r now.
func (r *Reservation) Full() bool { return r.Free <= 0 }

// Ended reports whether r has ended at now.
func (r *Reservation) Ended(now time.Time) bool { return !r.Ends.IsZero() && !now.Before(r.Ends) }

// String renders r as a user reads it: "cr-1 (2 of 4 free, ends 2026-12-31T00:00Z)".
func (r *Reservation) String() string {
	s := fmt.Sprintf("%s (%d of %d free", r.ID, r.Free, r.Total)
	if !r.Ends.IsZero() {
		s += ", ends " + r.Ends.UTC().Format("2006-01-02T15:04Z")
	}
	return s + ")"
}

// ReservedPolicy says whether a request uses capacity the account holds.
type ReservedPolicy string

const (
	// PreferReserved plans the account's open reservations (and the one the
	// request names) ahead of capacity that bills on top, and the rest
	// after them. It is the default.
	PreferReserved ReservedPolicy = ""
	// RequireReserved plans reserved capacity only.
	RequireReserved ReservedPolicy = "require"
	// ForbidReserved plans no reserved capacity: a launch that must not
	// take a slot another job counts on.
	ForbidReserved ReservedPolicy = "forbid"
)

// Valid reports whether p is one of the policies.
func (p ReservedPolicy) Valid() bool {
	return p == PreferReserved || p == RequireReserved || p == ForbidReserved
}

// MarginalPrice is what launching on o adds to the bill per hour: nothing for
// capacity the account already pays for (a reservation with room), else its
// price. A full reservation counts at its price: where the cloud launches
// beyond what is reserved (an Azure capacity reservation group does), the
// machine bills as ordinary capacity, and a price cap must see that.
func (o *Offer) MarginalPrice() float64 {
	if o.Reservation != nil && !o.Reservation.Full() {
		return 0
	}
	return o.PricePerHour
}

// QuotaReader is implemented by providers that can read the account's
// quotas before trying: AWS Service Quotas, GCP's regions.get quotas,
// Azure's per-family usage, the sim's quota endpoint. The core reads it
// after Plan, once per region of the offers, caches the answer for minutes,
// and leaves out the offers whose quota cannot fit one more instance, saying
// which quota in the plan, the no-offers error and `gpuprov offers`. It must
// not mutate. An error (an account that may not read its quotas) leaves the
// region's offers in, as if the provider could not tell.
type QuotaReader interface {
	// Quotas returns the quotas that bound launches in region, those
	// counted across every region (GCP's GPUS_ALL_REGIONS) with an empty
	// Region.
	Quotas(ctx context.Context, region string) ([]QuotaLimit, error)
}

// QuotaUnit is what a quota counts.
type QuotaUnit string

const (
	QuotaVCPUs     QuotaUnit = "vCPUs"
	QuotaGPUs      QuotaUnit = "GPUs"
	QuotaInstances QuotaUnit = "instances"
)

// QuotaLimit is one limit of the account and what of it is used.
type QuotaLimit struct {
	// Name is the quota as the cloud's console names it, with its code:
	// "Running On-Demand P instances (L-417A185B)", "NVIDIA_H100_GPUS".
	Name string `json:"name"`
	// What says, for a user, which offers draw on it: "P instances",
	// "H100-80GB GPUs", "standardNCadsH100v5Family".
	What string `json:"what"`
	// Region is where it counts; empty: every region together.
	Region string    `json:"region,omitempty"`
	Unit   QuotaUnit `json:"unit"`
	// Limit is the quota; Usage what is in use, where the cloud says
	// (AWS Service Quotas gives the limit only: Usage is 0 and UsageKnown
	// false).
	Limit      float64 `json:"limit"`
	Usage      float64 `json:"usage,omitempty"`
	UsageKnown bool    `json:"usage_known,omitempty"`
	// Families, GPUs restrict the offers it covers to those of these
	// Offer.Family values or canonical GPU names; empty: every offer.
	Families []string `json:"families,omitempty"`
	GPUs     []string `json:"gpus,omitempty"`
	// Spot: the quota covers Spot offers only; OnDemand: on-demand only;
	// neither: both.
	Spot     bool `json:"spot,omitempty"`
	OnDemand bool `json:"on_demand,omitempty"`
}

// Covers reports whether launching o draws on q. Reserved capacity draws on
// no quota: the reservation was counted when it was made; nor does a
// capacity block, which is bought for its window (gpuprov does not count
// it, and leaves the cloud to refuse the purchase if it must).
func (q *QuotaLimit) Covers(o *Offer) bool {
	if o.Reservation != nil || o.Block != nil || (q.Spot && !o.Spot) || (q.OnDemand && o.Spot) {
		return false
	}
	if q.Region != "" && q.Region != o.Location.Region {
		return false
	}
	if len(q.Families) > 0 && !contains(q.Families, o.Family) {
		return false
	}
	if len(q.GPUs) > 0 && !contains(q.GPUs, o.GPU) {
		return false
	}
	return true
}

// Need is how much of q one instance of o takes.
func (q *QuotaLimit) Need(o *Offer) float64 {
	switch q.Unit {
	case QuotaVCPUs:
		return float64(o.VCPUs)
	case QuotaGPUs:
		return float64(o.GPUCount)
	default:
		return 1
	}
}

// Fits reports whether one more instance of o fits in q (an offer q does
// not cover always fits).
func (q *QuotaLimit) Fits(o *Offer) bool {
	return !q.Covers(o) || q.Limit-q.Usage >= q.Need(o)
}

// Shortfall says why o does not fit in q, as the plan and errors show it:
// what is free of what one instance needs, "quota 0 of 192 vCPUs for P
// instances in us-east-1 (Running On-Demand P instances (L-417A185B))".
func (q *QuotaLimit) Shortfall(o *Offer) string {
	where := "in " + o.Location.Region
	if q.Region == "" {
		where = "across all regions"
	}
	name := q.Name
	if q.UsageKnown {
		name += fmt.Sprintf(": limit %s, %s in use", num(q.Limit), num(q.Usage))
	}
	return fmt.Sprintf("quota %s of %s %s for %s %s (%s)", num(max(q.Limit-q.Usage, 0)), num(q.Need(o)), q.Unit, q.What, where, name)
}

func num(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

// Block is capacity sold ahead for a fixed window and paid upfront: an AWS
// Capacity Block for ML offering, the sim's block offerings. An offer that
// carries one (Offer.Block) is bought before it is launched into: the core
// buys it only for a request that opts in with a price cap, journals the
// purchase before it is sent, and launches into the bought block at its
// start.
type Block struct {
	// Offering is the cloud's id of the offering.
	Offering string `json:"offering"`
	// Count is how many instances the block holds.
	Count int `json:"count"`
	// Start and End bound the window; instances run in it only.
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
	// UpfrontFee is what the block costs, in USD, paid at purchase for the
	// whole window and every instance; it is not refunded.
	UpfrontFee float64 `json:"upfront_fee"`
}

// BlockQuery is what a request asks of block offerings.
type BlockQuery struct {
	// Count is the instances the block must hold (the cloud's offerings
	// are for a count: AWS's InstanceCount); default 1.
	Count int `json:"count"`
	// Duration is the window's length.
	Duration time.Duration `json:"duration"`
	// StartBefore bounds the window's start; zero: as late as the cloud
	// sells.
	StartBefore time.Time `json:"start_before,omitzero"`
}

// BlockSeller is implemented by providers that sell capacity blocks. The
// core calls BlockOfferings to plan a request that asks for a block
// (Request.Block), PurchaseBlock once per attempt, journaled before it is
// sent, and FindBlock when it must know whether a purchase landed (a lost
// answer, a crash between the purchase and its record): a purchase is
// never sent twice for one attempt.
type BlockSeller interface {
	// BlockOfferings returns the offerings that fit req's GPU, count,
	// regions and zones and q, each as an Offer with Block set (its
	// location, instance type and shape; PricePerHour the list price of
	// one instance, where known) and what PurchaseBlock needs in Detail.
	// It must not mutate.
	BlockOfferings(ctx context.Context, req *ResourceRequest, q BlockQuery) ([]Offer, error)
	// PurchaseBlock buys offer.Block, labelled with spec's identity (as a
	// create labels an instance: spec.Labels()), and returns the offer that
	// launches into the bought block: Block kept, Reservation set (its id,
	// Targeted, Total and Free the block's count, Ends its end, Reclaims),
	// Detail what Create needs. A sold-out offering is Capacity; an
	// unknown outcome (timeout, 5xx) is Transient, and the core then asks
	// FindBlock, never PurchaseBlock again.
	PurchaseBlock(ctx context.Context, offer *Offer, spec *InstanceSpec) (Offer, error)
	// FindBlock returns what PurchaseBlock would have returned for the
	// block bought for spec's VM and attempt (by its labels) in offer's
	// region, or nil when there is none.
	FindBlock(ctx context.Context, offer *Offer, spec *InstanceSpec) (*Offer, error)
}
