package gpuprov

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/provider"
)

// Rank is how a launch orders the offers it plans.
type Rank string

const (
	// RankPrice orders offers by list price per hour, cheapest first (the
	// default).
	RankPrice Rank = ""
	// RankExpectedCost orders offers by the expected cost of a usable
	// machine over the request's horizon, from the journal's per-offer
	// history (see Expectation): an offer that often fails acceptance,
	// stocks out or boots slowly ranks after one that works at a
	// slightly higher price.
	RankExpectedCost Rank = "expected-cost"
)

// DefaultRankHorizon is the time a machine is expected to run, for
// RankExpectedCost, when the request has no RankHorizon and no TTL.
const DefaultRankHorizon = time.Hour

// DefaultExpectedBoot is the time to ready assumed for an offer with no
// ready launch in its history (and no other offer of its provider with one).
const DefaultExpectedBoot = 5 * time.Minute

// Expectation is what the per-offer history predicts of a launch on an
// offer:
//
//	p      = (ready + 1) / (created + 1)          the chance a create ends ready
//	                                              (an offer never tried counts as sure)
//	T      = median create → ready of the offer   (else of its provider, else DefaultExpectedBoot)
//	W      = time billed per failed attempt       (wasted / failures; else T)
//	E[T]   = T + W × (1 − p) / p                  expected time to a usable machine
//	cost   = price × (E[T] + horizon)             expected cost of the machine over the horizon
//
// (1 − p) / p is the expected number of failures before a success when
// each create succeeds with probability p. The horizon (Request.RankHorizon,
// else its TTL, else DefaultRankHorizon) keeps a minute of boot from
// outweighing a cheaper hourly price over the run.
type Expectation struct {
	Success     float64       `json:"success"`       // p
	TimeToReady time.Duration `json:"time_to_ready"` // E[T]
	CostUSD     float64       `json:"cost_usd"`      // price × (E[T] + horizon)
	// Known is false when the journal holds no history of the offer.
	Known bool `json:"known"`
}

// expect computes the expectation for offer o from its stats s, with
// boot the time to ready to assume where s has none.
func expect(o *provider.Offer, s journal.OfferStats, ok bool, boot, horizon time.Duration) Expectation {
	p := float64(s.Ready+1) / float64(s.Created+1)
	p = min(p, 1)
	t := boot
	if s.Ready > 0 && s.ReadyP50 > 0 {
		t = s.ReadyP50
	}
	w := t
	if failed := s.Created - s.Ready; failed > 0 && s.Wasted > 0 {
		w = s.Wasted / time.Duration(failed)
	}
	et := t + time.Duration(float64(w)*(1-p)/p)
	return Expectation{Success: p, TimeToReady: et, CostUSD: o.MarginalPrice() * (et + horizon).Hours(), Known: ok && s.Created > 0}
}

// history caches the journal's per-offer history for planTTL: one read
// serves every launch planned meanwhile.
type history struct {
	mu    sync.Mutex
	at    time.Time
	stats map[string]journal.OfferStats
}

// offerHistory returns the per-offer history, or nil when the journal keeps
// none.
func (p *Provisioner) offerHistory(ctx context.Context) (map[string]journal.OfferStats, error) {
	oh, ok := p.j.(journal.OfferHistory)
	if !ok {
		return nil, nil
	}
	p.hist.mu.Lock()
	defer p.hist.mu.Unlock()
	now := p.clock.Now()
	if p.hist.stats != nil && now.Sub(p.hist.at) < p.planTTL {
		return p.hist.stats, nil
	}
	stats, err := oh.OfferStats(ctx)
	if err != nil {
		return nil, fmt.Errorf("offer history: %w", err)
	}
	p.hist.stats, p.hist.at = stats, now
	return stats, nil
}

// rank fills res.History and res.Expected from the journal's history and,
// for RankExpectedCost, orders res.Offers by expected cost (ties by price,
// then key).
func (p *Provisioner) rank(ctx context.Context, req *Request, res *PlanResult) error {
	stats, err := p.offerHistory(ctx)
	if err != nil {
		return err
	}
	if stats == nil {
		return nil
	}
	horizon := cmp.Or(req.RankHorizon, req.TTL, DefaultRankHorizon)
	boots := providerBoots(stats)
	res.History, res.Expected = map[string]journal.OfferStats{}, map[string]Expectation{}
	for i := range res.Offers {
		o := &res.Offers[i]
		s, ok := stats[o.Key()]
		if ok {
			res.History[o.Key()] = s
		}
		res.Expected[o.Key()] = expect(o, s, ok, cmp.Or(boots[o.Provider], DefaultExpectedBoot), horizon)
	}
	if req.Rank != RankExpectedCost {
		return nil
	}
	res.Offers = slices.Clone(res.Offers) // the plan cache shares the slice
	slices.SortStableFunc(res.Offers, func(a, b provider.Offer) int {
		return cmp.Or(cmp.Compare(tryClass(&a), tryClass(&b)), cmp.Compare(res.Expected[a.Key()].CostUSD, res.Expected[b.Key()].CostUSD),
			cmp.Compare(a.MarginalPrice(), b.MarginalPrice()), cmp.Compare(a.Key(), b.Key()))
	})
	return nil
}

// providerBoots is, per provider, the median of its offers' median times
// to ready: the boot assumed for its offers without a ready launch yet.
func providerBoots(stats map[string]journal.OfferStats) map[string]time.Duration {
	per := map[string][]time.Duration{}
	for _, s := range stats {
		if s.Ready > 0 && s.ReadyP50 > 0 {
			per[s.Provider] = append(per[s.Provider], s.ReadyP50)
		}
	}
	out := make(map[string]time.Duration, len(per))
	for name, ds := range per {
		slices.Sort(ds)
		out[name] = ds[len(ds)/2]
	}
	return out
}

// outcome is what attempt a adds to its offer's history (journal.Outcome):
// nothing for an attempt that sent no create (the offer was not tried).
func (d *driver) outcome(a *journal.Attempt, kind journal.OutcomeKind) []journal.Outcome {
	if a.CreateSent.IsZero() {
		return nil
	}
	var o provider.Offer
	_ = jsonUnmarshal(a.Offer, &o) // the engine wrote it; a zero offer only loses the type and spot in the history
	out := journal.Outcome{OfferKey: a.OfferKey, Provider: a.Provider, Region: a.Region, Zone: a.Zone,
		InstanceType: o.InstanceType, Spot: o.Spot, Kind: kind, At: d.now()}
	if kind != journal.OutcomeCreated {
		out.Elapsed = max(d.now().Sub(a.CreateSent), 0)
	}
	return []journal.Outcome{out}
}
