package gpuprov

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/provider"
)

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// PlanResult is the offers for a request across every configured provider,
// in the order a launch tries them (cheapest first by default).
type PlanResult struct {
	// Offers are the offers that satisfy the request, blocked ones included.
	// With GPU alternatives (Request.GPUs), the offers of every
	// alternative, each with its GPU and GPUCount, in the request's
	// GPUOrder.
	Offers []provider.Offer
	// Blocked maps an offer key to the block that covers it now.
	Blocked map[string]journal.Block
	// Errors are the providers whose Plan failed; they were skipped.
	Errors map[string]error
	// Explanation says, when Offers is empty, which filter of the request
	// removed the last offers: how many offers of the GPU×count the
	// configured providers have, how many are left after each filter the
	// request sets (provider, region, spot, GPU memory, price cap), and for
	// the filter that left none what was there (the cheapest price under a
	// cap, the regions offered, ...). Empty when there are offers. With GPU
	// alternatives, it says so for each alternative that has no offer,
	// named first ("A100-80GB×2: no configured provider offers ..."),
	// whether or not the others have offers.
	Explanation string
	// History is the journal's per-offer history of the planned offers
	// (by offer key), where the journal keeps one; Expected is what it
	// predicts of each (see Expectation). Offers without history have an
	// Expected entry with Known false.
	History  map[string]journal.OfferStats
	Expected map[string]Expectation
	// Skipped are the offers that satisfy the request but were left out
	// before trying: a quota the provider reported that cannot fit one
	// more instance (provider.QuotaReader), a reservation that has ended.
	Skipped []Skipped

	blocks  map[string]journal.Block // every active block, by key
	now     time.Time                // when the blocks were read
	planned time.Time                // when the providers were asked
}

// maxBlockedShown bounds the blocked offers an error lists.
const maxBlockedShown = 3

// noneFit reports whether the request's filters left no offer at all while
// every provider planned or refused the request outright (InvalidRequest: it
// cannot put labels, restrict sources, ...): there is nothing to wait for,
// only a request to change. A provider whose Plan failed otherwise may have
// offers it could not say.
func (r *PlanResult) noneFit() bool {
	if r == nil || len(r.Offers) > 0 || len(r.Skipped) > 0 {
		return false // a quota frees up, a reservation is renewed
	}
	for _, err := range r.Errors {
		if provider.KindOf(err) != provider.InvalidRequest {
			return false
		}
	}
	return true
}

// errorSummary is what an error about this plan adds after its counts: why
// it is empty, which offers are blocked until when, and which providers'
// Plan failed. It starts with "; " unless empty.
func (r *PlanResult) errorSummary() string {
	var parts []string
	if r.Explanation != "" {
		parts = append(parts, r.Explanation)
	}
	if s := skippedSummary(r.Skipped); s != "" {
		parts = append(parts, s)
	}
	if len(r.Blocked) > 0 {
		var bs []string
		for _, o := range r.Offers {
			b, ok := r.Blocked[o.Key()]
			if !ok {
				continue
			}
			if len(bs) == maxBlockedShown {
				bs = append(bs, fmt.Sprintf("%d more", len(r.Blocked)-maxBlockedShown))
				break
			}
			bs = append(bs, fmt.Sprintf("%s %s %s until %s (%s, %s left)", o.Provider, o.Location, o.InstanceType,
				b.Until.UTC().Format("15:04:05Z"), b.ErrorKind, b.Until.Sub(r.now).Round(time.Second)))
		}
		parts = append(parts, "blocked: "+strings.Join(bs, ", "))
	}
	if len(r.Errors) > 0 {
		var es []string
		for _, name := range slices.Sorted(maps.Keys(r.Errors)) {
			es = append(es, ofProvider(name, r.Errors[name]).Error())
		}
		parts = append(parts, "plan failed on "+strings.Join(es, "; "))
	}
	if len(parts) == 0 {
		return ""
	}
	return "; " + strings.Join(parts, "; ")
}

// ofProvider returns err as an error of the named provider: as it is when it
// is that provider's *provider.Error (which names it already), else with the
// name in front, so that every message names the provider once.
func ofProvider(name string, err error) error {
	if pe, ok := errors.AsType[*provider.Error](err); ok && pe.Provider == name {
		return err
	}
	return fmt.Errorf("%s: %w", name, err)
}

// usd prints a price as a user reads it: cents as usual ($2.50), and every
// digit a smaller or finer price has, up to a millionth ($0.0001, $2.4575),
// so that a cap never prints as "$0.00".
func usd(p float64) string {
	s := strconv.FormatFloat(math.Round(p*1e6)/1e6, 'f', -1, 64)
	whole, frac, _ := strings.Cut(s, ".")
	for len(frac) < 2 {
		frac += "0"
	}
	return "$" + whole + "." + frac
}

// Plan validates req and returns the offers every configured provider has
// for it (for each of its GPU alternatives), in the order Launch would try
// them, with the blocks that currently cover some of them.
// It creates nothing. It fails only if req is invalid or every provider's
// Plan failed.
func (p *Provisioner) Plan(ctx context.Context, req Request) (*PlanResult, error) {
	if req.Name == "" {
		req.Name = "plan"
	}
	if err := req.normalize(p.providerSet()); err != nil {
		return nil, err
	}
	return p.plan(ctx, &req, time.Time{})
}

func (p *Provisioner) providerSet() map[string]bool {
	m := make(map[string]bool, len(p.providers))
	for n := range p.providers {
		m[n] = true
	}
	return m
}

type planCache struct {
	group singleflight.Group
	mu    sync.Mutex
	items map[string]planEntry
}

type planEntry struct {
	offers  []provider.Offer
	skipped []Skipped
	errs    map[string]error
	// reservation, when set, says why the reservation the request names
	// cannot be planned.
	reservation string
	why         string // PlanResult.Explanation
	at          time.Time
	// cacheable: no provider's Plan failed (a refusal for want of a
	// capability is no failure: asking again would not change it).
	cacheable bool
}

// plan plans across providers in parallel, sharing the result with
// concurrent and recent launches of the same resource request (a 1,000-VM
// launch plans once, not 1,000 times). A plan made before since is not
// shared (a VM back from waiting for capacity wants offers newer than its
// wait). The blocklist is read fresh each time. A request with several GPU
// alternatives plans each alternative as a request of its own, in
// parallel and through the same cache, and merges their offers in the
// request's GPUOrder.
func (p *Provisioner) plan(ctx context.Context, req *Request, since time.Time) (*PlanResult, error) {
	names := req.Providers
	if len(names) == 0 {
		names = p.Providers()
	}
	alts := req.Alternatives()
	var entry planEntry
	var everyFailed bool // every provider's Plan failed, for every alternative
	if len(alts) == 1 {
		entry = p.planned(ctx, req, names, since)
		everyFailed = len(entry.errs) == len(names)
	} else {
		entries := make([]planEntry, len(alts))
		var wg sync.WaitGroup
		for i, c := range alts {
			one := req.alternative(c)
			wg.Go(func() { entries[i] = p.planned(ctx, &one, names, since) })
		}
		wg.Wait()
		entry = mergeAlternatives(alts, entries, len(names))
		everyFailed = !slices.ContainsFunc(entries, func(e planEntry) bool { return len(e.errs) < len(names) })
	}
	if entry.reservation != "" {
		return nil, &RequestError{"reservation", entry.reservation}
	}
	if everyFailed && len(names) > 0 {
		var all []error
		for _, n := range names {
			all = append(all, ofProvider(n, entry.errs[n]))
		}
		return nil, fmt.Errorf("gpuprov: every provider's Plan failed: %w", errors.Join(all...))
	}
	blocks, err := p.activeBlocks(ctx)
	if err != nil {
		return nil, &journalError{err}
	}
	offers, misfits, err := p.placeVolumes(ctx, req, entry.offers)
	if err != nil {
		return nil, err
	}
	res := &PlanResult{Offers: offers, Skipped: append(slices.Clip(entry.skipped), misfits...), Errors: entry.errs, Explanation: entry.why,
		Blocked: map[string]journal.Block{}, blocks: map[string]journal.Block{}, now: p.clock.Now(), planned: entry.at}
	for _, b := range blocks {
		res.blocks[b.Key] = b
	}
	for i := range res.Offers {
		if b, ok := blockedBy(&res.Offers[i], res.blocks); ok {
			res.Blocked[res.Offers[i].Key()] = b
		}
	}
	if err := p.rank(ctx, req, res); err != nil {
		return nil, &journalError{err}
	}
	if req.GPUOrder == GPUOrderGiven && len(alts) > 1 {
		res.Offers = slices.Clone(res.Offers)
		slices.SortStableFunc(res.Offers, func(a, b provider.Offer) int {
			return cmp.Compare(alternativeOf(alts, &a), alternativeOf(alts, &b))
		})
	}
	return res, nil
}

// planned returns the plan of a request for one GPU choice: the cached one
// unless older than since or the cache's TTL, else a fresh one, made once
// for every launch asking at the same time.
func (p *Provisioner) planned(ctx context.Context, req *Request, names []string, since time.Time) planEntry {
	keyJSON, _ := json.Marshal(struct { // marshalling plain structs cannot fail
		R *provider.ResourceRequest
		P []string
		L bool          // labels rule out providers that cannot put them
		S bool          // so do source ranges, on providers that cannot restrict them
		B *BlockRequest // a block's start bound and fee cap shape its plan
	}{req.resources(), names, len(req.Labels) > 0, len(req.SourceRanges) > 0, req.Block})
	key := string(keyJSON)

	entry, ok := p.plans.get(key, p.clock.Now(), p.planTTL, since)
	for !ok {
		v, _, _ := p.plans.group.Do(key, func() (any, error) {
			// Shared by every waiting launch, so it must not die with the
			// first caller's context.
			pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			defer cancel()
			e := p.planOnce(pctx, req, names)
			if e.cacheable {
				p.plans.put(key, e)
			}
			return e, nil
		})
		// A flight that began before since is joined, then made again.
		entry, ok = v.(planEntry), !v.(planEntry).at.Before(since)
	}
	return entry
}

// mergeAlternatives merges the plans of a request's GPU alternatives (in
// the request's order) into one: every offer, in the order a single plan
// has them (reservations with room first, then by marginal price); every
// skipped offer; per provider, its failures (labelled with the alternative
// where they differ); the named reservation's problem only when no
// alternative has it; and, for each alternative without an offer, why.
// n is the number of providers planned.
func mergeAlternatives(alts []GPUChoice, entries []planEntry, n int) planEntry {
	m := planEntry{errs: map[string]error{}, at: entries[0].at}
	perProvider := map[string][]error{}
	var why, reservations []string
	for i, e := range entries {
		m.offers = append(m.offers, e.offers...)
		m.skipped = append(m.skipped, e.skipped...)
		if e.at.Before(m.at) {
			m.at = e.at // the oldest: a restock is judged against it
		}
		for name, err := range e.errs {
			perProvider[name] = append(perProvider[name], fmt.Errorf("%s: %w", alts[i], err))
		}
		if e.reservation != "" {
			reservations = append(reservations, fmt.Sprintf("%s: %s", alts[i], e.reservation))
		}
		if len(e.offers) == 0 {
			why = append(why, fmt.Sprintf("%s: %s", alts[i], cmp.Or(e.why, noOffersWhy(e, n))))
		}
	}
	slices.SortStableFunc(m.offers, tryOrder)
	for name, errs := range perProvider {
		m.errs[name] = errs[0]
		if len(errs) == len(alts) && allSame(errs) {
			m.errs[name] = errors.Unwrap(errs[0]) // the same failure whatever the GPU
		} else if len(errs) > 1 {
			m.errs[name] = alternativeErrors(errs)
		}
	}
	if len(reservations) == len(alts) {
		m.reservation = strings.Join(reservations, "; ")
	}
	m.why = strings.Join(why, "; ")
	return m
}

// noOffersWhy says why an alternative's plan without an explanation has no
// offer: its offers were left out, or its providers' Plan failed.
func noOffersWhy(e planEntry, n int) string {
	switch {
	case len(e.skipped) > 0:
		return "every offer is left out"
	case len(e.errs) >= n:
		return "every provider's Plan failed"
	}
	return "no offer"
}

// allSame reports whether every error of errs (each "choice: err") wraps
// an error saying the same.
func allSame(errs []error) bool {
	for _, err := range errs[1:] {
		if errors.Unwrap(err).Error() != errors.Unwrap(errs[0]).Error() {
			return false
		}
	}
	return true
}

// alternativeErrors is one provider's plan failures for several GPU
// alternatives, in one line: "H100-80GB×1: …; A100-80GB×2: …". errors.Is
// and errors.As see each of them.
type alternativeErrors []error

func (e alternativeErrors) Error() string {
	parts := make([]string, len(e))
	for i, err := range e {
		parts[i] = err.Error()
	}
	return strings.Join(parts, "; ")
}

func (e alternativeErrors) Unwrap() []error { return e }

// alternativeOf returns the index of the GPU choice o is an offer of.
func alternativeOf(alts []GPUChoice, o *provider.Offer) int {
	for i, c := range alts {
		if c.GPU == o.GPU && c.Count == o.GPUCount {
			return i
		}
	}
	return len(alts)
}

func (c *planCache) get(key string, now time.Time, ttl time.Duration, since time.Time) (planEntry, bool) {
	if ttl <= 0 {
		return planEntry{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.items[key]
	if !ok || now.Sub(e.at) > ttl || e.at.Before(since) {
		return planEntry{}, false
	}
	return e, true
}

func (c *planCache) put(key string, e planEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.items == nil {
		c.items = map[string]planEntry{}
	}
	c.items[key] = e
}

func (p *Provisioner) planOnce(ctx context.Context, req *Request, names []string) planEntry {
	// Labels the caller asked for must be on every resource, and the
	// sources it restricted its firewall to must be the only ones let in: a
	// provider that cannot do either is left out, and says why.
	var able []string
	refused := map[string]error{}
	for _, n := range names {
		if len(req.Labels) > 0 && !p.providers[n].caps.Labels {
			refused[n] = provider.Errorf(provider.InvalidRequest, n, "plan", "cannot put the request's labels on its resources")
			continue
		}
		if _, ok := p.providers[n].CloudProvider.(provider.BlockSeller); req.Block != nil && !ok {
			refused[n] = provider.Errorf(provider.InvalidRequest, n, "plan", "sells no capacity blocks")
			continue
		}
		if req.FlexStart > 0 && !p.providers[n].caps.FlexStart {
			refused[n] = provider.Errorf(provider.InvalidRequest, n, "plan", "cannot queue a flex-start request")
			continue
		}
		if len(req.SourceRanges) > 0 && !p.providers[n].caps.Supports(provider.FeatureSourceRanges) {
			refused[n] = provider.Errorf(provider.InvalidRequest, n, "plan", "cannot restrict who may connect to the request's source ranges")
			continue
		}
		able = append(able, n)
	}
	var offers []provider.Offer
	var errs map[string]error
	if req.Block != nil {
		offers, errs = p.planBlocks(ctx, req, able)
	} else {
		offers, errs = p.planProviders(ctx, req.resources(), able)
	}
	e := planEntry{errs: errs, at: p.clock.Now(), cacheable: len(errs) == 0}
	maps.Copy(e.errs, refused)
	if len(offers) == 0 && len(e.errs) < len(names) && req.Block == nil {
		e.why = p.explainEmpty(ctx, req)
	}
	if req.Block != nil {
		offers, e.skipped = overFee(offers, req.Block.MaxUpfrontUSD)
		if len(offers) == 0 && len(e.skipped) == 0 && len(e.errs) < len(names) {
			e.why = fmt.Sprintf("no configured provider sells a block of %d × %s×%d for %v", req.Block.Count, req.GPU, req.GPUCount, req.Block.Duration)
			if req.Block.StartWithin > 0 {
				e.why += fmt.Sprintf(" starting within %v", req.Block.StartWithin)
			}
		}
	}
	// Capacity the account holds goes first; what its quotas cannot fit
	// is left out before anything is tried, and says so.
	var ended []Skipped
	offers, ended = placeReservations(offers, e.at)
	e.skipped = append(e.skipped, ended...)
	var over []Skipped
	offers, over = p.fitQuotas(ctx, offers)
	e.offers, e.skipped = offers, append(e.skipped, over...)
	if req.Reservation != "" {
		e.reservation = namedReservation(req, e.offers, e.skipped, e.errs)
	}
	return e
}

// planProviders asks the named providers for offers in parallel (retrying
// Transient errors) and returns those rr accepts, cheapest first, and the
// providers whose Plan failed.
func (p *Provisioner) planProviders(ctx context.Context, rr *provider.ResourceRequest, names []string) ([]provider.Offer, map[string]error) {
	offers, errs := p.planEach(ctx, names,
		func(ctx context.Context, pp *paced) ([]provider.Offer, error) {
			asked := rr
			if pp.caps.DiskSize && rr.DiskGB > 0 {
				// The provider sizes disks: its offers' default disks must
				// not filter the request out before the core raises them.
				r := *rr
				r.DiskGB = 0
				asked = &r
			}
			return pp.Plan(ctx, asked)
		},
		func(pp *paced, o *provider.Offer) bool {
			if pp.caps.DiskSize && o.DiskGB < rr.DiskGB && (o.MaxDiskGB == 0 || rr.DiskGB <= o.MaxDiskGB) {
				o.DiskGB = rr.DiskGB // it creates the disk this large
			}
			return rr.Accepts(o)
		})
	sort.SliceStable(offers, func(i, j int) bool {
		if offers[i].PricePerHour != offers[j].PricePerHour {
			return offers[i].PricePerHour < offers[j].PricePerHour
		}
		return offers[i].Key() < offers[j].Key()
	})
	return offers, errs
}

// planEach runs ask on the named providers in parallel (each through
// planCall) and returns the offers keep accepts (it may amend them), with
// Provider set, and the providers whose call failed.
func (p *Provisioner) planEach(ctx context.Context, names []string, ask func(context.Context, *paced) ([]provider.Offer, error),
	keep func(*paced, *provider.Offer) bool) ([]provider.Offer, map[string]error) {
	var (
		mu     sync.Mutex
		offers []provider.Offer
		errs   = map[string]error{}
		wg     sync.WaitGroup
	)
	for _, name := range names {
		pp := p.providers[name]
		wg.Go(func() {
			got, err := p.planCall(ctx, pp, func(ctx context.Context) ([]provider.Offer, error) { return ask(ctx, pp) })
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs[name] = err
				return
			}
			for _, o := range got {
				if o.Provider == "" {
					o.Provider = name
				}
				if keep(pp, &o) {
					offers = append(offers, o)
				}
			}
		})
	}
	wg.Wait()
	return offers, errs
}

// planCall makes one provider's plan call (Plan, BlockOfferings) through
// its pacer, retrying a Transient error twice with backoff.
func (p *Provisioner) planCall(ctx context.Context, pp *paced, f func(context.Context) ([]provider.Offer, error)) ([]provider.Offer, error) {
	var got []provider.Offer
	var err error
	for n := 0; n < 3; n++ {
		err = pp.call(ctx, "plan", provider.Location{}, func(ctx context.Context) (err error) {
			got, err = f(ctx)
			return err
		})
		if err == nil || provider.KindOf(err) != provider.Transient {
			break
		}
		if serr := p.clock.Sleep(ctx, p.backoff.Delay(n, provider.RetryAfterOf(err))); serr != nil {
			break
		}
	}
	return got, err
}

// explainEmpty says which filter of req left no offer. It plans once more
// with the GPU and count alone, on every configured provider, then applies
// the request's filters one by one, counting what each leaves. It runs only
// for an empty plan, so a working launch pays nothing for it.
func (p *Provisioner) explainEmpty(ctx context.Context, req *Request) string {
	what := fmt.Sprintf("%s×%d", req.GPU, req.GPUCount)
	all, errs := p.planProviders(ctx, &provider.ResourceRequest{GPU: req.GPU, GPUCount: req.GPUCount, Spot: provider.SpotOrOnDemand}, p.Providers())
	failed := ""
	if len(errs) > 0 {
		failed = fmt.Sprintf(" (not counting %s, whose Plan failed)", strings.Join(slices.Sorted(maps.Keys(errs)), ", "))
	}
	if len(all) == 0 {
		return fmt.Sprintf("no configured provider offers %s in any region%s", what, failed)
	}
	type filter struct {
		label string                     // what is left: "in regions x"
		keep  func(*provider.Offer) bool // whether an offer passes
		none  func([]provider.Offer) string
	}
	var filters []filter
	if len(req.Providers) > 0 {
		filters = append(filters, filter{"on providers " + strings.Join(req.Providers, ", "),
			func(o *provider.Offer) bool { return slices.Contains(req.Providers, o.Provider) },
			func(left []provider.Offer) string {
				return "they are on " + distinct(left, func(o *provider.Offer) string { return o.Provider })
			}})
	}
	if len(req.Regions) > 0 {
		filters = append(filters, filter{"in regions " + strings.Join(req.Regions, ", "),
			func(o *provider.Offer) bool { return slices.Contains(req.Regions, o.Location.Region) },
			func(left []provider.Offer) string {
				return "they are in " + distinct(left, func(o *provider.Offer) string { return o.Location.Region })
			}})
	}
	if len(req.Zones) > 0 {
		filters = append(filters, filter{"in zones " + strings.Join(req.Zones, ", "),
			func(o *provider.Offer) bool { return slices.Contains(req.Zones, o.Location.Zone) },
			func(left []provider.Offer) string {
				return "they are in " + distinct(left, func(o *provider.Offer) string { return o.Location.Zone })
			}})
	}
	switch req.Spot {
	case provider.OnDemand:
		filters = append(filters, filter{"on-demand", func(o *provider.Offer) bool { return !o.Spot },
			func([]provider.Offer) string { return "only spot capacity is offered" }})
	case provider.SpotOnly:
		filters = append(filters, filter{"spot", func(o *provider.Offer) bool { return o.Spot },
			func([]provider.Offer) string { return "only on-demand capacity is offered" }})
	}
	if req.MinGPUMemoryGB > 0 {
		filters = append(filters, filter{fmt.Sprintf("with %d GB or more per GPU", req.MinGPUMemoryGB),
			func(o *provider.Offer) bool { return o.GPUMemoryGB >= req.MinGPUMemoryGB },
			func(left []provider.Offer) string {
				most := 0
				for _, o := range left {
					most = max(most, o.GPUMemoryGB)
				}
				return fmt.Sprintf("the most offered is %d GB", most)
			}})
	}
	if req.MinVCPUs > 0 {
		filters = append(filters, filter{fmt.Sprintf("with %d vCPUs or more", req.MinVCPUs),
			func(o *provider.Offer) bool { return o.VCPUs >= req.MinVCPUs },
			func(left []provider.Offer) string {
				most := 0
				for _, o := range left {
					most = max(most, o.VCPUs)
				}
				return fmt.Sprintf("the most offered is %d", most)
			}})
	}
	if req.MinMemoryGB > 0 {
		filters = append(filters, filter{fmt.Sprintf("with %g GB of memory or more", req.MinMemoryGB),
			func(o *provider.Offer) bool { return o.MemoryGB >= req.MinMemoryGB },
			func(left []provider.Offer) string {
				most := 0.0
				for _, o := range left {
					most = max(most, o.MemoryGB)
				}
				return fmt.Sprintf("the most offered is %g GB", most)
			}})
	}
	if req.DiskGB > 0 {
		filters = append(filters, filter{fmt.Sprintf("with a %d GB disk", req.DiskGB),
			func(o *provider.Offer) bool {
				return o.DiskGB >= req.DiskGB || p.providers[o.Provider].caps.DiskSize && (o.MaxDiskGB == 0 || req.DiskGB <= o.MaxDiskGB)
			},
			func(left []provider.Offer) string {
				most := 0
				for _, o := range left {
					most = max(most, o.DiskGB)
				}
				return fmt.Sprintf("the largest disk offered is %d GB", most)
			}})
	}
	if req.MaxPricePerHour > 0 {
		filters = append(filters, filter{"under " + usd(req.MaxPricePerHour) + "/h",
			func(o *provider.Offer) bool { return o.MarginalPrice() <= req.MaxPricePerHour },
			func(left []provider.Offer) string {
				c := left[0] // planProviders sorts cheapest first
				return fmt.Sprintf("the cheapest is %s/h (%s %s %s)", usd(c.PricePerHour), c.Provider, c.Location, c.InstanceType)
			}})
	}
	steps := []string{fmt.Sprintf("%d offers of %s on the configured providers%s", len(all), what, failed)}
	left := all
	for _, f := range filters {
		var kept []provider.Offer
		for i := range left {
			if f.keep(&left[i]) {
				kept = append(kept, left[i])
			}
		}
		if len(kept) == 0 {
			steps = append(steps, fmt.Sprintf("none %s: %s", f.label, f.none(left)))
			return "no offer passes the request's filters: " + strings.Join(steps, ", ")
		}
		steps = append(steps, fmt.Sprintf("%d %s", len(kept), f.label))
		left = kept
	}
	// Every filter the core knows leaves offers: the providers applied
	// something more (an adapter's own refinement) or changed their answer.
	return strings.Join(steps, ", ") + ", yet the providers offered none for the whole request"
}

// distinct lists the distinct values of key over offers, sorted, at most five.
func distinct(offers []provider.Offer, key func(*provider.Offer) string) string {
	set := map[string]bool{}
	for i := range offers {
		set[key(&offers[i])] = true
	}
	vals := slices.Sorted(maps.Keys(set))
	if len(vals) > 5 {
		return strings.Join(vals[:5], ", ") + fmt.Sprintf(" and %d more", len(vals)-5)
	}
	return strings.Join(vals, ", ")
}

// blocksTTL is how long this process reuses a read of the blocklist. Its own
// blocks take effect at once (committing one drops the cached read); those
// of other processes within this delay.
const blocksTTL = time.Second

type blockCache struct {
	mu     sync.Mutex
	at     time.Time
	blocks []journal.Block
	valid  bool
	// own are the blocks this process recorded, by key, until they expire.
	own map[string]journal.Block
	// added is closed, and replaced, each time this process records a
	// block: calls queued for an offer (see stopper) look again then.
	added chan struct{}
	reads singleflight.Group // one journal read at a time
}

// activeBlocks returns the blocks in force now: those of a journal read at
// most blocksTTL old, and this process's own, which take effect at once
// (some are journaled a moment after they are recorded, see teardown).
func (p *Provisioner) activeBlocks(ctx context.Context) ([]journal.Block, error) {
	now := p.clock.Now()
	c := &p.blockCache
	c.mu.Lock()
	fresh := c.valid && now.Sub(c.at) < blocksTTL
	c.mu.Unlock()
	if !fresh {
		_, err, _ := c.reads.Do("", func() (any, error) {
			// Shared by every caller waiting: one giving up must not fail
			// the others.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			blocks, err := p.j.Blocks(rctx, now)
			if err != nil {
				return nil, err
			}
			c.mu.Lock()
			c.at, c.blocks, c.valid = now, blocks, true
			c.mu.Unlock()
			return nil, nil
		})
		if err != nil {
			return nil, err
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	live := make([]journal.Block, 0, len(c.blocks)+len(c.own))
	for _, b := range c.blocks {
		if o, ok := c.own[b.Key]; ok && !o.CreatedAt.Before(b.CreatedAt) {
			continue // this process's newer one, below
		}
		if b.Until.After(now) {
			live = append(live, b)
		}
	}
	for k, b := range c.own {
		switch {
		case !b.Until.After(now):
			delete(c.own, k)
		case !slices.ContainsFunc(live, func(x journal.Block) bool { return x.Key == k }):
			live = append(live, b)
		}
	}
	return live, nil
}

// blocksAdded records blocks this process just made (they take effect at
// once, without a read of the journal) and tells the calls waiting for an
// offer to look again.
func (p *Provisioner) blocksAdded(bs []journal.Block) {
	c := &p.blockCache
	c.mu.Lock()
	if c.own == nil {
		c.own = map[string]journal.Block{}
	}
	for _, b := range bs {
		c.own[b.Key] = b
	}
	if c.added != nil {
		close(c.added)
	}
	c.added = make(chan struct{})
	c.mu.Unlock()
}

// blocksLifted drops the lifted blocks from this process's view of the
// blocklist at once, as the journal did.
func (p *Provisioner) blocksLifted(ls []journal.Lift) {
	c := &p.blockCache
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, l := range ls {
		if b, ok := c.own[l.Key]; ok && b.CreatedAt.Before(l.Before) {
			delete(c.own, l.Key)
		}
		c.blocks = slices.DeleteFunc(slices.Clone(c.blocks), func(b journal.Block) bool {
			return b.Key == l.Key && b.CreatedAt.Before(l.Before)
		})
	}
}

// blockAdded returns a channel closed when this process next records a
// block.
func (p *Provisioner) blockAdded() <-chan struct{} {
	c := &p.blockCache
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.added == nil {
		c.added = make(chan struct{})
	}
	return c.added
}

// blockedNow reports the block that covers o now, if any (from the shared
// read of the blocklist). A failed read counts as not blocked: the create
// then tells.
func (p *Provisioner) blockedNow(ctx context.Context, o *provider.Offer) (journal.Block, bool) {
	blocks, err := p.activeBlocks(ctx)
	if err != nil {
		return journal.Block{}, false
	}
	byKey := make(map[string]journal.Block, len(blocks))
	for _, b := range blocks {
		byKey[b.Key] = b
	}
	return blockedBy(o, byKey)
}
