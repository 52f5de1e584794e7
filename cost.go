package gpuprov

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/provider"
)

// AttemptCost is what one attempt's instance billed, or bills so far: the
// time from its create's acceptance until its teardown confirmed it gone
// (now, while it runs), in its cloud's billing increments and minimum
// (provider.Billing), at its offer's price. Every attempt whose create
// made an instance counts, the ones that failed after booting too; one
// refused by the cloud made none and counts nothing.
type AttemptCost struct {
	VM           string            `json:"vm"`
	Attempt      int               `json:"attempt"`
	Provider     string            `json:"provider"`
	Location     provider.Location `json:"location"`
	InstanceType string            `json:"instance_type,omitempty"`
	Spot         bool              `json:"spot,omitempty"`
	InstanceIDs  []string          `json:"instance_ids"`
	// From and To bound the billed window: the create was sent, the
	// instances were confirmed gone (or now, while Running).
	From    time.Time `json:"from"`
	To      time.Time `json:"to"`
	Running bool      `json:"running,omitempty"`
	// Outcome is what the attempt came to: ready (its VM's machine),
	// failed (with the error kind) or replaced (an interrupted machine).
	Outcome string `json:"outcome"`
	// PricePerHour is what the machine bills per hour: the offer's price,
	// or nothing in a reservation with room, which the account pays
	// anyway (provider.Offer.MarginalPrice).
	PricePerHour float64          `json:"price_per_hour"`
	Billing      provider.Billing `json:"billing"`
	// Billed is the time billed (the window rounded up to the increment,
	// at least the minimum), USD what it costs; within CostOptions.Since,
	// both count only what billed after it.
	Billed time.Duration `json:"billed_ns"`
	USD    float64       `json:"usd"`
}

// CostOptions filters Costs.
type CostOptions struct {
	// Since, when set, counts only what billed after it: attempts whose
	// window ended before are left out, and one that began before counts
	// its billed time less what it had billed by then.
	Since time.Time
}

// Costs returns what every attempt of the journal's VMs billed, or bills
// so far, oldest first: the bill as the clouds count it, failed attempts
// included (see AttemptCost and docs/cost.md). It reads the journal only.
// A VM pruned from the journal (Prune), or an earlier VM of a name used
// again, is not in it.
func (p *Provisioner) Costs(ctx context.Context, opts CostOptions) ([]AttemptCost, error) {
	rows, err := p.j.ListVMs(ctx, journal.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("gpuprov: cost: listing VMs: %w", err)
	}
	now := p.clock.Now()
	var out []AttemptCost
	for _, row := range rows {
		if !opts.Since.IsZero() && row.State.Terminal() && row.EndedAt.Before(opts.Since) {
			continue
		}
		as, err := p.j.Attempts(ctx, row.Name)
		if err != nil {
			return nil, fmt.Errorf("gpuprov: cost: attempts of VM %s: %w", row.Name, err)
		}
		for i := range as {
			if c, ok := p.attemptCost(row, &as[i], now); ok && c.clip(opts.Since) {
				out = append(out, c)
			}
		}
	}
	slices.SortFunc(out, func(a, b AttemptCost) int {
		return cmp.Or(a.From.Compare(b.From), strings.Compare(a.VM, b.VM), a.Attempt-b.Attempt)
	})
	return out, nil
}

// attemptCost is the cost of attempt a of row, if it made an instance.
func (p *Provisioner) attemptCost(row journal.VM, a *journal.Attempt, now time.Time) (AttemptCost, bool) {
	if a.CreateSent.IsZero() || len(a.InstanceIDs) == 0 {
		return AttemptCost{}, false
	}
	var o provider.Offer
	_ = jsonUnmarshal(a.Offer, &o) // the engine wrote it; a zero offer bills at a zero price, per second
	c := AttemptCost{VM: a.VM, Attempt: a.N, Provider: a.Provider, Location: provider.Location{Region: a.Region, Zone: a.Zone},
		InstanceType: o.InstanceType, Spot: o.Spot, InstanceIDs: a.InstanceIDs, From: a.CreateSent, PricePerHour: o.PricePerHour}
	c.PricePerHour = o.MarginalPrice()
	if o.Block != nil {
		c.PricePerHour = 0 // a capacity block is paid upfront, for its whole window
	}
	switch {
	case o.Billing != nil:
		c.Billing = *o.Billing
	case p.providers[a.Provider] != nil: // journaled before offers carried it
		c.Billing = p.providers[a.Provider].caps.Billing
	}
	if a.State == journal.AttemptTornDown {
		c.To = a.EndedAt
	} else {
		c.To, c.Running = now, true
	}
	switch {
	case a.State == journal.AttemptSucceeded && a.N == row.Attempt && row.State == journal.StateReady:
		c.Outcome = "ready"
	case a.N == row.Attempt && a.Error == "" && (row.State == journal.StateDeleted || row.State == journal.StateDeleting):
		c.Outcome = "deleted"
	case a.Error != "":
		c.Outcome = "failed: " + a.ErrorKind
	case a.N < row.Attempt:
		c.Outcome = "replaced"
	default:
		c.Outcome = string(row.State)
	}
	c.Billed = c.Billing.Billed(c.To.Sub(c.From))
	c.USD = c.Billed.Hours() * c.PricePerHour
	return c, true
}

// clip counts only what c billed after since; false: nothing.
func (c *AttemptCost) clip(since time.Time) bool {
	if since.IsZero() || !c.From.Before(since) {
		return true
	}
	if !c.To.After(since) {
		return false
	}
	before := c.Billing.Billed(since.Sub(c.From))
	c.Billed = max(c.Billed-before, 0)
	c.USD = c.Billed.Hours() * c.PricePerHour
	return true
}

// billedSoFar is what the attempts of d's VM before cur billed: a failed
// attempt that booted costs money, and MaxCost caps the whole bill.
func (d *driver) billedSoFar(ctx context.Context, cur *journal.Attempt) float64 {
	rctx, cancel := journalCall(ctx)
	as, err := d.p.j.Attempts(rctx, d.row.Name)
	cancel()
	if err != nil {
		return 0 // the cap then counts this machine alone, as before
	}
	now, sum := d.now(), 0.0
	for i := range as {
		if as[i].N == cur.N {
			continue
		}
		if c, ok := d.p.attemptCost(d.row, &as[i], now); ok {
			sum += c.USD
		}
	}
	return sum
}

// capEnd is when the bill of d's VM reaches its MaxCost, a on its way to
// ready: what the earlier attempts billed (a failed attempt that booted
// costs money), then this machine from its create at its price; zero
// without a cap or a price. Already reached: now.
func (d *driver) capEnd(ctx context.Context, a *journal.Attempt, now time.Time) time.Time {
	if d.req.MaxCost <= 0 {
		return time.Time{}
	}
	c, ok := d.p.attemptCost(d.row, a, now)
	if !ok {
		var o provider.Offer
		_ = jsonUnmarshal(a.Offer, &o)
		c = AttemptCost{From: cmp.Or(a.CreateSent, now), PricePerHour: o.MarginalPrice()}
	}
	if c.PricePerHour <= 0 {
		return time.Time{}
	}
	left := d.req.MaxCost - d.billedSoFar(ctx, a)
	if left <= 0 {
		return now
	}
	hours := left / c.PricePerHour
	if hours*float64(time.Hour) > float64(1<<62) {
		return time.Time{} // a cap no VM reaches in its life
	}
	if end := c.From.Add(time.Duration(hours * float64(time.Hour))); end.After(now) {
		return end
	}
	return now
}
