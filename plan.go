package gpuprov

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/provider"
)

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// PlanResult is the offers for a request across every configured provider,
// cheapest first.
type PlanResult struct {
	// Offers are the offers that satisfy the request, blocked ones included.
	Offers []provider.Offer
	// Blocked maps an offer key to the block that covers it now.
	Blocked map[string]journal.Block
	// Errors are the providers whose Plan failed; they were skipped.
	Errors map[string]error

	blocks map[string]journal.Block // every active block, by key
}

func (r *PlanResult) errorSummary() string {
	if len(r.Errors) == 0 {
		return ""
	}
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(r.Errors)) {
		parts = append(parts, fmt.Sprintf("%s: %v", name, r.Errors[name]))
	}
	return "; plan failed on " + strings.Join(parts, "; ")
}

// Plan validates req and returns the offers every configured provider has
// for it, cheapest first, with the blocks that currently cover some of them.
// It creates nothing. It fails only if req is invalid or every provider's
// Plan failed.
func (p *Provisioner) Plan(ctx context.Context, req Request) (*PlanResult, error) {
	if req.Name == "" {
		req.Name = "plan"
	}
	if err := req.normalize(p.providerSet()); err != nil {
		return nil, err
	}
	return p.plan(ctx, &req)
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
	offers []provider.Offer
	errs   map[string]error
	at     time.Time
}

// plan plans across providers in parallel, sharing the result with
// concurrent and recent launches of the same resource request (a 1,000-VM
// launch plans once, not 1,000 times). The blocklist is read fresh each time.
func (p *Provisioner) plan(ctx context.Context, req *Request) (*PlanResult, error) {
	names := req.Providers
	if len(names) == 0 {
		names = p.Providers()
	}
	keyJSON, _ := json.Marshal(struct { // marshalling plain structs cannot fail
		R *provider.ResourceRequest
		P []string
	}{req.resources(), names})
	key := string(keyJSON)

	entry, ok := p.plans.get(key, p.clock.Now(), p.planTTL)
	if !ok {
		v, _, _ := p.plans.group.Do(key, func() (any, error) {
			// Shared by every waiting launch, so it must not die with the
			// first caller's context.
			pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			defer cancel()
			e := p.planOnce(pctx, req, names)
			if len(e.errs) == 0 {
				p.plans.put(key, e)
			}
			return e, nil
		})
		entry = v.(planEntry)
	}
	if len(entry.errs) == len(names) && len(names) > 0 {
		var all []error
		for _, n := range names {
			all = append(all, fmt.Errorf("%s: %w", n, entry.errs[n]))
		}
		return nil, fmt.Errorf("gpuprov: every provider's Plan failed: %w", errors.Join(all...))
	}
	blocks, err := p.activeBlocks(ctx)
	if err != nil {
		return nil, &journalError{err}
	}
	res := &PlanResult{Offers: entry.offers, Errors: entry.errs, Blocked: map[string]journal.Block{}, blocks: map[string]journal.Block{}}
	for _, b := range blocks {
		res.blocks[b.Key] = b
	}
	for i := range res.Offers {
		if b, ok := blockedBy(&res.Offers[i], res.blocks); ok {
			res.Blocked[res.Offers[i].Key()] = b
		}
	}
	return res, nil
}

func (c *planCache) get(key string, now time.Time, ttl time.Duration) (planEntry, bool) {
	if ttl <= 0 {
		return planEntry{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.items[key]
	if !ok || now.Sub(e.at) > ttl {
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
	rr := req.resources()
	var (
		mu     sync.Mutex
		offers []provider.Offer
		errs   = map[string]error{}
		wg     sync.WaitGroup
	)
	for _, name := range names {
		pp := p.providers[name]
		wg.Go(func() {
			var got []provider.Offer
			var err error
			for n := 0; n < 3; n++ {
				if err = pp.wait(ctx); err != nil {
					break
				}
				got, err = pp.Plan(ctx, rr)
				pp.note(err)
				if err == nil || provider.KindOf(err) != provider.Transient {
					break
				}
				if serr := p.clock.Sleep(ctx, p.backoff.Delay(n, provider.RetryAfterOf(err))); serr != nil {
					break
				}
			}
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
				if rr.Accepts(&o) {
					offers = append(offers, o)
				}
			}
		})
	}
	wg.Wait()
	sort.SliceStable(offers, func(i, j int) bool {
		if offers[i].PricePerHour != offers[j].PricePerHour {
			return offers[i].PricePerHour < offers[j].PricePerHour
		}
		return offers[i].Key() < offers[j].Key()
	})
	return planEntry{offers: offers, errs: errs, at: p.clock.Now()}
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
}

// activeBlocks returns the blocks in force now, from a read at most
// blocksTTL old.
func (p *Provisioner) activeBlocks(ctx context.Context) ([]journal.Block, error) {
	now := p.clock.Now()
	c := &p.blockCache
	c.mu.Lock()
	if c.valid && now.Sub(c.at) < blocksTTL {
		var live []journal.Block
		for _, b := range c.blocks {
			if b.Until.After(now) {
				live = append(live, b)
			}
		}
		c.mu.Unlock()
		return live, nil
	}
	c.mu.Unlock()
	blocks, err := p.j.Blocks(ctx, now)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.at, c.blocks, c.valid = now, blocks, true
	c.mu.Unlock()
	return blocks, nil
}

// dropBlockCache makes the next plan read the blocklist afresh.
func (p *Provisioner) dropBlockCache() {
	p.blockCache.mu.Lock()
	p.blockCache.valid = false
	p.blockCache.mu.Unlock()
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
