package simserver

import (
	"cmp"
	"fmt"
	"net/http"
	"slices"
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
	CodeReservationFull  = "reservation_full"
	CodeReservationEnded = "reservation_ended"
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
	return nil
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
	region := r.URL.Query().Get("region")
	out := []ReservationView{}
	for _, res := range c.cfg.Reservations {
		of := c.offers[res.OfferID]
		if region != "" && of.Region != region {
			continue
		}
		v := ReservationView{Reservation: res, Region: of.Region, Zone: of.Zone, InstanceType: of.InstanceType,
			GPU: of.GPU, GPUCount: of.GPUCount, InUse: c.reservationInUse(res.ID), State: "active"}
		if !res.EndsAt.IsZero() && !now.Before(res.EndsAt) {
			v.State = "ended"
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
