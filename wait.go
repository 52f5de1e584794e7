package gpuprov

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/org/gpuprov/journal"
)

// EvWaiting marks a launch that waits for capacity (Request.WaitForCapacity):
// every offer is blocked or tried. The message says how many offers are
// blocked, the cheapest one's price and when the next try is due.
const EvWaiting = "waiting"

// DefaultCapacityPoll is how often a waiting VM refreshes its plan when no
// block on its offers expires sooner.
const DefaultCapacityPoll = time.Minute

// minCapacityWait keeps a wait whose earliest block has just expired (or is
// about to) from spinning on plans.
const minCapacityWait = time.Second

// WithCapacityPoll sets how often a VM waiting for capacity refreshes its
// plan (default DefaultCapacityPoll). Besides these refreshes it tries
// again when a block on one of its offers expires; it makes no other cloud
// call while it waits. Each refresh is a plan made after the wait began,
// not one the plan cache (WithPlanCache) still holds, so a poll shorter
// than the cache's TTL is honoured.
func WithCapacityPoll(d time.Duration) Option {
	return func(p *Provisioner) {
		if d <= 0 {
			p.pending = append(p.pending, fmt.Errorf("gpuprov: WithCapacityPoll(%v): want a positive interval", d))
			return
		}
		p.capacityPoll = d
	}
}

// waitForCapacity is what a launch that asked to wait does instead of failing
// for want of offers (why): it journals the VM waiting with its next try,
// sleeps until then, and starts a new round of tries in which every offer
// not blocked is eligible again. The next try is the earliest expiry of a
// block on a planned offer, or the next plan refresh, whichever comes
// first. Waiting ends only with the launch's deadline or its cancellation,
// and then there is nothing to tear down: every attempt was torn down
// before the VM started waiting.
func (d *driver) waitForCapacity(ctx context.Context, why error) error {
	now := d.now()
	next := now.Add(d.p.capacityPoll)
	blocked, cheapest := 0, 0.0
	if res := d.plan; res != nil {
		for i := range res.Offers {
			o := &res.Offers[i]
			b, ok := blockedBy(o, res.blocks)
			if !ok {
				continue
			}
			if blocked == 0 || o.PricePerHour < cheapest {
				cheapest = o.PricePerHour
			}
			blocked++
			if b.Until.Before(next) {
				next = b.Until
			}
		}
	}
	if next.Before(now.Add(minCapacityWait)) {
		next = now.Add(minCapacityWait)
	}
	reason := strings.TrimPrefix(why.Error(), "gpuprov: ")
	summary := fmt.Sprintf("%d offers blocked", blocked)
	switch {
	case d.plan.noneFit(): // only with WaitForOffers
		summary = "no offer fits the request yet, waiting for new offers too"
	case blocked > 0:
		summary += ", cheapest " + usd(cheapest) + "/h"
	}
	msg := fmt.Sprintf("waiting for capacity: %s, next try at %s: %s", summary, next.UTC().Format(time.RFC3339), reason)
	ev := journal.Event{Type: EvWaiting, Message: msg, ErrorKind: errorKindName(why)}
	entering := d.row.State != journal.StateWaiting
	d.row.State, d.row.Phase, d.row.NextTry = journal.StateWaiting, "", next
	d.row.LastError, d.row.LastErrorKind = reason, ev.ErrorKind
	// A wait may last hours: what earlier attempts owe is cleaned up
	// before it, not after.
	paid, err := d.payOwed(ctx, nil)
	if err != nil {
		if len(paid) > 0 {
			d.pending = &journal.Step{Attempts: paid}
		}
		return d.stuck(ctx, fmt.Errorf("cleaning up after an earlier attempt: %w", err))
	}
	st := &journal.Step{Update: &d.row, Attempts: paid}
	if entering {
		// One journaled event per wait; the refreshes that find nothing
		// new move NextTry and tell the sinks only.
		st.Events = []journal.Event{ev}
	}
	if err := d.commit(ctx, st); err != nil {
		return err
	}
	if !entering {
		ev.Time, ev.VM, ev.Owner = d.now(), d.row.Name, d.p.owner
		d.p.emit([]journal.Event{ev})
	}
	return d.sleepUntilNextTry(ctx)
}

// sleepUntilNextTry sleeps until the waiting VM's journaled next try and
// opens a new round of tries. Cancelled or out of time, it ends the launch.
func (d *driver) sleepUntilNextTry(ctx context.Context) error {
	d.planSince = d.now()
	if wait := d.row.NextTry.Sub(d.now()); wait > 0 {
		if err := d.p.clock.Sleep(ctx, wait); err != nil {
			cause := context.Cause(ctx)
			if cause == nil {
				cause = err
			}
			return d.fail(ctx, fmt.Errorf("%w while waiting for capacity (%s)", cause, d.row.LastError))
		}
	}
	clear(d.tried) // a new round: offers tried before are eligible again once unblocked
	return nil
}

// expiry is when a VM of req must be deleted: its TTL counted from
// ttlFrom, or capEnd, when its billed cost reaches MaxCost (zero: none),
// whichever comes first; zero when neither applies.
func expiry(req *Request, ttlFrom, capEnd time.Time) time.Time {
	var at time.Time
	if req.TTL > 0 {
		at = ttlFrom.Add(req.TTL)
	}
	if !capEnd.IsZero() && (at.IsZero() || capEnd.Before(at)) {
		at = capEnd
	}
	return at
}
