package simserver

import (
	"cmp"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"time"
)

// Reservation is capacity an account holds, as a hyperscaler's capacity
// reservation is: Count instances of the offer OfferID (on-demand), paid
// for whether used or not. A create that names it (reservation_id) launches
// into it while it has room, whatever the offer's stock and the account's
// quotas; it counts against neither. A create that does not name it never
// takes its room.
type Reservation struct {
	ID      string `json:"id" toml:"id"`
	OfferID string `json:"offer_id" toml:"offer_id"`
	Count   int    `json:"count" toml:"count"`
	// Targeted says only a create that names it may use it; an open one
	// is for any launch of its shape (in the sim, too, only a create
	// naming it lands in it: Targeted is what its listing says).
	Targeted bool `json:"targeted,omitempty" toml:"targeted,omitempty"`
	// EndsAt is when it ends (zero: never); from then on a create naming
	// it is refused with reservation_ended, and its listing says "ended".
	EndsAt time.Time `json:"ends_at,omitzero" toml:"ends_at,omitempty"`
	// Reclaims, with EndsAt, makes it end like an AWS Capacity Block: the
	// cloud deletes the instances still in it this long before EndsAt
	// (event run_ended). Zero: they outlive it.
	Reclaims Duration `json:"reclaims,omitempty" toml:"reclaims,omitempty"`
	// StartsAt, when set, is when it starts: a create naming it before
	// then is refused with reservation_not_started (a bought block).
	StartsAt time.Time `json:"starts_at,omitzero" toml:"starts_at,omitempty"`
	// Labels are a bought block's, from its purchase.
	Labels map[string]string `json:"labels,omitempty" toml:"labels,omitempty"`
}

// BlockOffering is capacity the cloud sells ahead for a fixed window, paid
// upfront, as an AWS Capacity Block for ML offering is: Count instances of
// the offer OfferID from StartIn after the server started, for Duration.
// POST block-purchases buys it once: it becomes a targeted reservation of
// the account, labelled as the purchase asks, that starts and ends with
// the window and deletes its instances Reclaims before its end.
type BlockOffering struct {
	ID         string   `json:"id" toml:"id"`
	OfferID    string   `json:"offer_id" toml:"offer_id"`
	Count      int      `json:"count" toml:"count"`
	StartIn    Duration `json:"start_in,omitempty" toml:"start_in,omitempty"`
	Duration   Duration `json:"duration" toml:"duration"`
	UpfrontFee float64  `json:"upfront_fee" toml:"upfront_fee"`
	Reclaims   Duration `json:"reclaims,omitempty" toml:"reclaims,omitempty"`
}

// BlockOfferingView is an offering as GET block-offerings lists it.
type BlockOfferingView struct {
	ID           string    `json:"id"`
	OfferID      string    `json:"offer_id"`
	Region       string    `json:"region"`
	Zone         string    `json:"zone,omitempty"`
	InstanceType string    `json:"instance_type"`
	GPU          string    `json:"gpu"`
	GPUCount     int       `json:"gpu_count"`
	Count        int       `json:"count"`
	Start        time.Time `json:"start"`
	End          time.Time `json:"end"`
	UpfrontFee   float64   `json:"upfront_fee"`
	Reclaims     Duration  `json:"reclaims,omitempty"`
}

// Quota is a limit on the GPUs an account may run in a region: those of
// one GPU model, or of every model when GPU is empty. Instances that are
// not terminated count, reserved ones excepted. A create that would pass
// it is refused with quota_exceeded; GET quotas reads it beforehand.
type Quota struct {
	Region string `json:"region" toml:"region"`
	GPU    string `json:"gpu,omitempty" toml:"gpu,omitempty"`
	Limit  int    `json:"limit" toml:"limit"`
}

// ReservationView is a reservation as GET reservations lists it.
type ReservationView struct {
	Reservation
	Region       string `json:"region"`
	Zone         string `json:"zone,omitempty"`
	InstanceType string `json:"instance_type"`
	GPU          string `json:"gpu"`
	GPUCount     int    `json:"gpu_count"`
	// InUse counts the instances in it that are not terminated.
	InUse int `json:"in_use"`
	// State is "active", or "ended" once EndsAt has passed.
	State string `json:"state"`
}

// QuotaView is a quota as GET quotas lists it.
type QuotaView struct {
	Quota
	Name  string `json:"name"` // "gpus" or "gpus-<GPU>"
	Unit  string `json:"unit"` // "gpus"
	Usage int    `json:"usage"`
}

// Error codes of a create into a reservation.
const (
	CodeReservationFull       = "reservation_full"
	CodeReservationEnded      = "reservation_ended"
	CodeReservationNotStarted = "reservation_not_started"
)

func validateCapacity(c *CloudConfig, offers map[string]bool) error {
	ids := map[string]bool{}
	for _, r := range c.Reservations {
		switch {
		case r.ID == "" || ids[r.ID]:
			return fmt.Errorf("simserver: cloud %s: empty or duplicate reservation id %q", c.Name, r.ID)
		case !offers[r.OfferID]:
			return fmt.Errorf("simserver: cloud %s: reservation %s: unknown offer %q", c.Name, r.ID, r.OfferID)
		case r.Count < 1:
			return fmt.Errorf("simserver: cloud %s: reservation %s: count %d, want at least 1", c.Name, r.ID, r.Count)
		}
		ids[r.ID] = true
		for _, of := range c.Offers {
			if of.ID == r.OfferID && of.Spot {
				return fmt.Errorf("simserver: cloud %s: reservation %s: offer %s is spot; reservations hold on-demand capacity", c.Name, r.ID, r.OfferID)
			}
		}
	}
	bids := map[string]bool{}
	for _, b := range c.BlockOfferings {
		switch {
		case b.ID == "" || bids[b.ID]:
			return fmt.Errorf("simserver: cloud %s: empty or duplicate block offering id %q", c.Name, b.ID)
		case !offers[b.OfferID]:
			return fmt.Errorf("simserver: cloud %s: block offering %s: unknown offer %q", c.Name, b.ID, b.OfferID)
		case b.Count < 1 || b.Duration <= 0 || b.StartIn < 0 || b.UpfrontFee < 0 || b.Reclaims < 0 || b.Reclaims >= b.Duration:
			return fmt.Errorf("simserver: cloud %s: block offering %s: want a count of 1 or more, a positive duration longer than reclaims, no negative start_in or fee", c.Name, b.ID)
		}
		bids[b.ID] = true
	}
	for _, q := range c.Quotas {
		if q.Region == "" || q.Limit < 0 {
			return fmt.Errorf("simserver: cloud %s: quota %+v: want a region and a limit of 0 or more", c.Name, q)
		}
	}
	return nil
}

func (c *cloud) reservation(id string) *Reservation {
	for i := range c.cfg.Reservations {
		if c.cfg.Reservations[i].ID == id {
			return &c.cfg.Reservations[i]
		}
	}
	for i := range c.bought {
		if c.bought[i].ID == id {
			return &c.bought[i]
		}
	}
	return nil
}

// reservations returns the configured reservations and the bought blocks.
func (c *cloud) reservations() []Reservation {
	return append(slices.Clone(c.cfg.Reservations), c.bought...)
}

// reservationInUse counts the instances of reservation id that are not
// terminated (settled by the caller).
func (c *cloud) reservationInUse(id string) int {
	n := 0
	for _, in := range c.instances {
		if in.ReservationID == id && in.Status != StatusTerminated {
			n++
		}
	}
	return n
}

// quotaUsage counts the GPUs of q's region and model that instances not
// terminated and not reserved hold.
func (c *cloud) quotaUsage(q *Quota) int {
	n := 0
	for _, in := range c.instances {
		if in.Region == q.Region && (q.GPU == "" || q.GPU == in.GPU) && in.ReservationID == "" && in.Status != StatusTerminated {
			n += in.GPUCount
		}
	}
	return n
}

// admitReserved is admit for a create naming reservation id.
func (c *cloud) admitReserved(id string, of *Offer, now time.Time) *apiError {
	r := c.reservation(id)
	switch {
	case r == nil:
		return errorf(http.StatusBadRequest, CodeInvalidRequest, "unknown reservation %q", id)
	case r.OfferID != of.ID:
		return errorf(http.StatusBadRequest, CodeInvalidRequest, "reservation %s holds offer %s, not %s", id, r.OfferID, of.ID)
	case !r.EndsAt.IsZero() && !now.Before(r.EndsAt):
		return errorf(http.StatusConflict, CodeReservationEnded, "reservation %s ended at %s", id, r.EndsAt.UTC().Format(time.RFC3339))
	case now.Before(r.StartsAt):
		return errorf(http.StatusConflict, CodeReservationNotStarted, "reservation %s starts at %s", id, r.StartsAt.UTC().Format(time.RFC3339))
	}
	if n := c.reservationInUse(id); n >= r.Count {
		return errorf(http.StatusConflict, CodeReservationFull, "reservation %s is full: %d of %d in use", id, n, r.Count)
	}
	return nil
}

// admitQuota refuses a create that would pass a quota of its region.
func (c *cloud) admitQuota(of *Offer) *apiError {
	for i := range c.cfg.Quotas {
		q := &c.cfg.Quotas[i]
		if q.Region != of.Region || (q.GPU != "" && q.GPU != of.GPU) {
			continue
		}
		if used := c.quotaUsage(q); used+of.GPUCount > q.Limit {
			what := "GPUs"
			if q.GPU != "" {
				what = q.GPU + " GPUs"
			}
			return errorf(http.StatusForbidden, CodeQuotaExceeded, "quota of %d %s in region %s: %d in use, %s needs %d", q.Limit, what, q.Region, used, of.InstanceType, of.GPUCount)
		}
	}
	return nil
}

func (s *Server) listReservations(c *cloud, r *http.Request, _ []byte, now time.Time) (int, any, *apiError) {
	s.settleAll(c)
	q := r.URL.Query()
	region := q.Get("region")
	want, aerr := labelFilter(q["label"], "label")
	if aerr != nil {
		return 0, nil, aerr
	}
	out := []ReservationView{}
	for _, res := range c.reservations() {
		of := c.offers[res.OfferID]
		if region != "" && of.Region != region {
			continue
		}
		if !labelsMatch(res.Labels, want, nil) {
			continue
		}
		v := ReservationView{Reservation: res, Region: of.Region, Zone: of.Zone, InstanceType: of.InstanceType,
			GPU: of.GPU, GPUCount: of.GPUCount, InUse: c.reservationInUse(res.ID), State: "active"}
		switch {
		case !res.EndsAt.IsZero() && !now.Before(res.EndsAt):
			v.State = "ended"
		case now.Before(res.StartsAt):
			v.State = "scheduled"
		}
		out = append(out, v)
	}
	return http.StatusOK, map[string][]ReservationView{"reservations": out}, nil
}

func (s *Server) listQuotas(c *cloud, r *http.Request, _ []byte, _ time.Time) (int, any, *apiError) {
	s.settleAll(c)
	region := r.URL.Query().Get("region")
	out := []QuotaView{}
	for _, q := range c.cfg.Quotas {
		if region != "" && q.Region != region {
			continue
		}
		name := "gpus"
		if q.GPU != "" {
			name += "-" + q.GPU
		}
		out = append(out, QuotaView{Quota: q, Name: name, Unit: "gpus", Usage: c.quotaUsage(&q)})
	}
	slices.SortFunc(out, func(a, b QuotaView) int {
		return cmp.Or(cmp.Compare(a.Region, b.Region), cmp.Compare(a.Name, b.Name))
	})
	return http.StatusOK, map[string][]QuotaView{"quotas": out}, nil
}

// blockWindow is when offering b's window starts and ends: StartIn after
// the server started, or, for a StartIn of zero, at now (it starts when
// bought).
func (c *cloud) blockWindow(b *BlockOffering, now time.Time) (time.Time, time.Time) {
	start := c.started.Add(b.StartIn.Std())
	if b.StartIn == 0 {
		start = now
	}
	return start, start.Add(b.Duration.Std())
}

func (s *Server) listBlockOfferings(c *cloud, r *http.Request, _ []byte, now time.Time) (int, any, *apiError) {
	q := r.URL.Query()
	var dur time.Duration
	if v := q.Get("duration"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return 0, nil, errorf(http.StatusBadRequest, CodeInvalidRequest, "duration %q: want a positive Go duration such as 24h", v)
		}
		dur = d
	}
	count := 0
	if v := q.Get("count"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return 0, nil, errorf(http.StatusBadRequest, CodeInvalidRequest, "count %q: want 1 or more", v)
		}
		count = n
	}
	var before time.Time
	if v := q.Get("start_before"); v != "" {
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			return 0, nil, errorf(http.StatusBadRequest, CodeInvalidRequest, "start_before %q: want RFC 3339", v)
		}
		before = t
	}
	out := []BlockOfferingView{}
	for i := range c.cfg.BlockOfferings {
		b := &c.cfg.BlockOfferings[i]
		start, end := c.blockWindow(b, now)
		of := c.offers[b.OfferID]
		switch {
		case c.sold[b.ID], start.Before(now), dur > 0 && b.Duration.Std() != dur, count > 0 && b.Count != count,
			!before.IsZero() && start.After(before), q.Get("region") != "" && q.Get("region") != of.Region:
			continue
		}
		out = append(out, BlockOfferingView{ID: b.ID, OfferID: b.OfferID, Region: of.Region, Zone: of.Zone,
			InstanceType: of.InstanceType, GPU: of.GPU, GPUCount: of.GPUCount, Count: b.Count, Start: start, End: end,
			UpfrontFee: b.UpfrontFee, Reclaims: b.Reclaims})
	}
	return http.StatusOK, map[string][]BlockOfferingView{"block_offerings": out}, nil
}

type blockPurchase struct {
	OfferingID string            `json:"offering_id"`
	Labels     map[string]string `json:"labels"`
}

func (s *Server) purchaseBlock(c *cloud, _ *http.Request, body []byte, now time.Time) (int, any, *apiError) {
	var req blockPurchase
	if err := decode(body, &req); err != nil {
		return 0, nil, err
	}
	var b *BlockOffering
	for i := range c.cfg.BlockOfferings {
		if c.cfg.BlockOfferings[i].ID == req.OfferingID {
			b = &c.cfg.BlockOfferings[i]
		}
	}
	if b == nil {
		return 0, nil, errorf(http.StatusBadRequest, CodeInvalidRequest, "unknown block offering %q", req.OfferingID)
	}
	start, end := c.blockWindow(b, now)
	if c.sold[b.ID] || start.Before(now) {
		return 0, nil, errorf(http.StatusConflict, CodeOutOfCapacity, "block offering %s is no longer sold", b.ID)
	}
	if c.faults.InsufficientFunds {
		return 0, nil, errorf(http.StatusPaymentRequired, CodeInsufficientFunds, "account balance is insufficient to buy block %s", b.ID)
	}
	c.counter++
	res := Reservation{ID: fmt.Sprintf("cb-%08d", c.counter), OfferID: b.OfferID, Count: b.Count, Targeted: true,
		StartsAt: start, EndsAt: end, Reclaims: b.Reclaims, Labels: maps.Clone(req.Labels)}
	c.bought = append(c.bought, res)
	c.sold[b.ID] = true
	c.stats.BlocksBought++
	s.save()
	of := c.offers[res.OfferID]
	return http.StatusCreated, ReservationView{Reservation: res, Region: of.Region, Zone: of.Zone, InstanceType: of.InstanceType,
		GPU: of.GPU, GPUCount: of.GPUCount, State: "scheduled"}, nil
}
