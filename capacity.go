package gpuprov

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/org/gpuprov/provider"
)

// DefaultQuotaTTL is how long a provider's quotas, once read, serve every
// plan of the Provisioner (WithQuotaCache changes it).
const DefaultQuotaTTL = 5 * time.Minute

// WithQuotaCache sets how long quotas read from a provider.QuotaReader are
// reused; 0 reads them for every plan that is not itself cached.
func WithQuotaCache(ttl time.Duration) Option { return func(p *Provisioner) { p.quotaTTL = ttl } }

// Skipped is an offer the plan left out before trying it, and why: a quota
// that cannot fit one more instance, a reservation that has ended.
type Skipped struct {
	Offer  provider.Offer `json:"offer"`
	Reason string         `json:"reason"`
}

// quotaCache holds, per provider and region, the quotas last read.
type quotaCache struct {
	group singleflight.Group
	mu    sync.Mutex
	items map[string]quotaEntry
}

type quotaEntry struct {
	limits []provider.QuotaLimit
	err    error
	at     time.Time
}

// quotas returns the quotas of provider name in region, read at most once
// per quotaTTL (concurrent plans share one read). A read that failed is
// kept as long, so an account that may not read its quotas is not asked at
// every plan; the caller then plans as if the cloud could not tell.
func (p *Provisioner) quotas(ctx context.Context, name, region string) ([]provider.QuotaLimit, error) {
	pp := p.providers[name]
	qr, ok := pp.CloudProvider.(provider.QuotaReader)
	if !ok {
		return nil, nil
	}
	key := name + "|" + region
	now := p.clock.Now()
	c := &p.quotaCache
	c.mu.Lock()
	e, ok := c.items[key]
	c.mu.Unlock()
	if ok && now.Sub(e.at) < p.quotaTTL {
		return e.limits, e.err
	}
	v, _, _ := c.group.Do(key, func() (any, error) {
		var e quotaEntry
		e.err = pp.call(ctx, "quotas", provider.Location{Region: region}, func(ctx context.Context) (err error) {
			e.limits, err = qr.Quotas(ctx, region)
			return err
		})
		e.at = p.clock.Now()
		if p.quotaTTL > 0 && ctx.Err() == nil {
			c.mu.Lock()
			if c.items == nil {
				c.items = map[string]quotaEntry{}
			}
			c.items[key] = e
			c.mu.Unlock()
		}
		return e, nil
	})
	e = v.(quotaEntry)
	return e.limits, e.err
}

// fitQuotas leaves out the offers whose provider's quotas cannot fit one
// more instance, reading each provider's quotas once per region of its
// offers, in parallel. Reserved offers draw on no quota
// (provider.QuotaLimit.Covers). A region whose quotas could not be read
// keeps its offers.
func (p *Provisioner) fitQuotas(ctx context.Context, offers []provider.Offer) ([]provider.Offer, []Skipped) {
	type where struct{ name, region string }
	read := map[where][]provider.QuotaLimit{}
	for _, o := range offers {
		w := where{o.Provider, o.Location.Region}
		if o.Reservation != nil || o.Block != nil {
			continue // draws on no quota: nothing to read for it
		}
		if _, ok := p.providers[o.Provider].CloudProvider.(provider.QuotaReader); ok {
			read[w] = nil
		}
	}
	if len(read) == 0 {
		return offers, nil
	}
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	// The reads write into read: range over its keys, not the map.
	for _, w := range slices.Collect(maps.Keys(read)) {
		wg.Go(func() {
			limits, err := p.quotas(ctx, w.name, w.region)
			if err != nil {
				p.log.Debug("quotas not read; planning as if unknown", "provider", w.name, "region", w.region, "err", err)
				return
			}
			mu.Lock()
			read[w] = limits
			mu.Unlock()
		})
	}
	wg.Wait()
	var kept []provider.Offer
	var skipped []Skipped
	for _, o := range offers {
		reason := ""
		for i := range read[where{o.Provider, o.Location.Region}] {
			if q := &read[where{o.Provider, o.Location.Region}][i]; !q.Fits(&o) {
				reason = q.Shortfall(&o)
				break
			}
		}
		if reason != "" {
			skipped = append(skipped, Skipped{Offer: o, Reason: reason})
			continue
		}
		kept = append(kept, o)
	}
	return kept, skipped
}

// placeReservations orders offers as a launch tries them: reservations with
// room first (they add nothing to the bill), then every other offer by
// marginal price, then full reservations, which may have room again by the
// time they are tried. Reservations that have ended are left out.
func placeReservations(offers []provider.Offer, now time.Time) ([]provider.Offer, []Skipped) {
	var kept []provider.Offer
	var skipped []Skipped
	for _, o := range offers {
		if o.Reservation != nil && o.Reservation.Ended(now) {
			skipped = append(skipped, Skipped{Offer: o, Reason: fmt.Sprintf("reservation %s ended at %s", o.Reservation.ID, o.Reservation.Ends.UTC().Format(time.RFC3339))})
			continue
		}
		kept = append(kept, o)
	}
	slices.SortStableFunc(kept, tryOrder)
	return kept, skipped
}

// tryOrder is the order a plan tries its offers in, before any ranking:
// reservations with room first, then by marginal price, list price and key.
func tryOrder(a, b provider.Offer) int {
	return cmp.Or(cmp.Compare(tryClass(&a), tryClass(&b)), cmp.Compare(a.MarginalPrice(), b.MarginalPrice()),
		cmp.Compare(a.PricePerHour, b.PricePerHour), cmp.Compare(a.Key(), b.Key()))
}

// tryClass is the group an offer is tried in: 0 for a reservation with
// room, 1 for an offer that bills on top, 2 for a full reservation.
func tryClass(o *provider.Offer) int {
	switch {
	case o.Reservation == nil:
		return 1
	case o.Reservation.Full():
		return 2
	}
	return 0
}

// namedReservation checks a request that names a reservation against its
// plan: the reservation must be among the offers (or have been left out
// for a reason the error gives), else the providers' own refusals naming
// it, or the fact that none has it, make the error. It returns "" when the
// plan holds it, or when a provider's Plan failed for another reason (the
// reservation may be there).
func namedReservation(req *Request, offers []provider.Offer, skipped []Skipped, errs map[string]error) string {
	name := req.Reservation
	for _, o := range offers {
		if o.Reservation != nil && o.Reservation.ID == name {
			return ""
		}
	}
	for _, s := range skipped {
		if s.Offer.Reservation != nil && s.Offer.Reservation.ID == name {
			return fmt.Sprintf("%s (%s %s)", s.Reason, s.Offer.Provider, s.Offer.Location)
		}
	}
	var refusals []string
	for _, n := range slices.Sorted(maps.Keys(errs)) {
		err := errs[n]
		if provider.KindOf(err) != provider.InvalidRequest {
			return ""
		}
		if strings.Contains(err.Error(), name) {
			refusals = append(refusals, ofProvider(n, err).Error())
		}
	}
	if len(refusals) > 0 {
		return strings.Join(refusals, "; ")
	}
	return fmt.Sprintf("%q: no configured provider holds a reservation of that name that fits %s×%d", name, req.GPU, req.GPUCount)
}

// skippedSummary groups the skipped offers' reasons for an error or a
// plan's explanation: "left out: quota 0 of 192 vCPUs ... (aws us-east-1:
// 3 offers)".
func skippedSummary(skipped []Skipped) string {
	if len(skipped) == 0 {
		return ""
	}
	type group struct {
		reason string
		where  string
		n      int
	}
	var gs []*group
	for _, s := range skipped {
		where := s.Offer.Provider + " " + s.Offer.Location.Region
		i := slices.IndexFunc(gs, func(g *group) bool { return g.reason == s.Reason && g.where == where })
		if i < 0 {
			gs = append(gs, &group{reason: s.Reason, where: where})
			i = len(gs) - 1
		}
		gs[i].n++
	}
	parts := make([]string, 0, len(gs))
	for _, g := range gs {
		n := "1 offer"
		if g.n > 1 {
			n = fmt.Sprintf("%d offers", g.n)
		}
		parts = append(parts, fmt.Sprintf("%s (%s: %s)", g.reason, g.where, n))
	}
	return "left out: " + strings.Join(parts, "; ")
}
