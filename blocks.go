package gpuprov

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/provider"
)

// Phases of an attempt on a capacity block (Request.Block), before
// prepare: the purchase, journaled before it is sent, and the wait for the
// bought block's start.
const (
	PhasePurchase = "purchase"
	// PhasePurchaseSent: the purchase is journaled as sent; a process that
	// takes the attempt over looks for the block and never sends it again.
	PhasePurchaseSent = "purchase-sent"
	PhaseBlockStart   = "block-start"
)

// Events of a block purchase.
const (
	EvBlockPurchase = "block-purchase" // a block purchase is about to be sent (its offering, window, fee)
	EvBlockBought   = "block-bought"   // the block is bought: its reservation id, window, fee
)

// ErrBlockUnknown is matched by the error of a launch whose block purchase
// was sent but whose outcome could not be learnt (no answer, and no block
// labelled for the attempt found afterwards): gpuprov does not send a
// purchase twice, so the launch ends, and the error says what to look for.
var ErrBlockUnknown = errors.New("gpuprov: the outcome of a block purchase is unknown")

// planBlocks asks the named providers (each a provider.BlockSeller) for
// block offerings in parallel, retrying Transient errors, and returns
// those the request accepts, cheapest first, and the providers that failed.
func (p *Provisioner) planBlocks(ctx context.Context, req *Request, names []string) ([]provider.Offer, map[string]error) {
	rr := req.resources()
	q := *rr.Block
	if req.Block.StartWithin > 0 {
		q.StartBefore = p.clock.Now().Add(req.Block.StartWithin)
	}
	offers, errs := p.planEach(ctx, names,
		func(ctx context.Context, pp *paced) ([]provider.Offer, error) {
			return pp.CloudProvider.(provider.BlockSeller).BlockOfferings(ctx, rr, q) // planOnce refused the others
		},
		func(_ *paced, o *provider.Offer) bool {
			return o.Block != nil && rr.Accepts(o) && (q.StartBefore.IsZero() || !o.Block.Start.After(q.StartBefore))
		})
	slices.SortStableFunc(offers, func(a, b provider.Offer) int {
		return cmp.Or(cmp.Compare(a.Block.UpfrontFee, b.Block.UpfrontFee), a.Block.Start.Compare(b.Block.Start), cmp.Compare(a.Key(), b.Key()))
	})
	return offers, errs
}

// overFee leaves out the block offerings that cost more than the cap.
func overFee(offers []provider.Offer, most float64) ([]provider.Offer, []Skipped) {
	var kept []provider.Offer
	var skipped []Skipped
	for _, o := range offers {
		if o.Block.UpfrontFee > most {
			skipped = append(skipped, Skipped{Offer: o, Reason: fmt.Sprintf("block %s costs %s upfront, over the cap of %s", o.Block.Offering, usd(o.Block.UpfrontFee), usd(most))})
			continue
		}
		kept = append(kept, o)
	}
	return kept, skipped
}

// blockBought reports whether attempt a's offer is a block already bought.
func blockBought(a *journal.Attempt) (*provider.Offer, bool) {
	var o provider.Offer
	if jsonUnmarshal(a.Offer, &o) != nil || o.Block == nil || o.Reservation == nil {
		return nil, false
	}
	return &o, true
}

// purchase buys the block of attempt a's offer, once: it looks for a block
// bought for the attempt first when the attempt was taken over, journals
// the purchase (phase purchase, event block-purchase) before sending it,
// and journals the bought block (the offer that launches into it) before
// anything else happens. A purchase whose answer is lost is resolved by
// looking for its block, never by sending it again.
func (d *driver) purchase(ctx context.Context, pp *paced, offer *provider.Offer, a *journal.Attempt, resumed bool) error {
	bs, ok := pp.CloudProvider.(provider.BlockSeller)
	if !ok {
		return provider.Errorf(provider.InvalidRequest, a.Provider, "purchase", "the provider sells no capacity blocks")
	}
	spec := d.spec(a)
	loc := provider.Location{Region: a.Region, Zone: a.Zone}
	find := func() (*provider.Offer, error) {
		var found *provider.Offer
		err := d.retry(ctx, pp, a, "purchase find", func(ctx context.Context) (err error) {
			found, err = bs.FindBlock(ctx, offer, spec)
			return err
		})
		return found, err
	}
	var got *provider.Offer
	if resumed {
		// Taken over: a purchase may have been sent.
		found, err := find()
		if err != nil {
			return err
		}
		if found == nil && a.Phase == PhasePurchaseSent {
			return d.blockUnknown(offer)
		}
		got = found
	}
	if got == nil {
		msg := fmt.Sprintf("buying %s: %d × %s in %s from %s to %s for %s upfront (cap %s); not refunded", offer.Block.Offering,
			offer.Block.Count, offer.InstanceType, offer.Location, offer.Block.Start.UTC().Format(time.RFC3339),
			offer.Block.End.UTC().Format(time.RFC3339), usd(offer.Block.UpfrontFee), usd(d.req.Block.MaxUpfrontUSD))
		if err := d.setPhase(ctx, a, PhasePurchaseSent, d.event(EvBlockPurchase, a, msg)); err != nil {
			return err
		}
		var b provider.Offer
		err := pp.call(ctx, "purchase", loc, func(ctx context.Context) (err error) {
			b, err = bs.PurchaseBlock(ctx, offer, spec)
			return err
		})
		switch {
		case err == nil:
			got = &b
		case provider.KindOf(err) == provider.Transient:
			// It may have landed: look for it over the listing's lag.
			for end := d.now().Add(pp.caps.ConsistencyWindow); got == nil; {
				found, ferr := find()
				if ferr != nil {
					return ferr
				}
				if got = found; got != nil || !d.now().Before(end) {
					break
				}
				if serr := d.p.clock.Sleep(ctx, pp.caps.PollInterval); serr != nil {
					return serr
				}
			}
			if got == nil {
				return errors.Join(d.blockUnknown(offer), err)
			}
		default:
			return err // definitive: nothing was bought
		}
	}
	if got.Reservation == nil || got.Block == nil {
		return d.blockUnknown(offer)
	}
	raw, err := json.Marshal(got)
	if err != nil {
		return fmt.Errorf("gpuprov: encoding the bought block's offer: %w", err)
	}
	*offer = *got
	a.Offer, d.row.Offer = raw, raw
	next := PhasePrepare
	if got.Block.Start.After(d.now()) {
		next = PhaseBlockStart
	}
	msg := fmt.Sprintf("block %s bought (offering %s): %d × %s in %s from %s to %s, %s upfront", got.Reservation.ID,
		got.Block.Offering, got.Block.Count, got.InstanceType, got.Location, got.Block.Start.UTC().Format(time.RFC3339),
		got.Block.End.UTC().Format(time.RFC3339), usd(got.Block.UpfrontFee))
	return d.setPhase(ctx, a, next, d.event(EvBlockBought, a, msg))
}

func (d *driver) blockUnknown(offer *provider.Offer) error {
	return fmt.Errorf("%w: offering %s of %s in %s was bought or not; look for a capacity reservation labelled %s=%s (gpuprov does not buy twice)",
		ErrBlockUnknown, offer.Block.Offering, offer.Provider, offer.Location, provider.LabelVM, d.row.Name)
}

// blockStart waits for the bought block of attempt a to start.
func (d *driver) blockStart(ctx context.Context, offer *provider.Offer, a *journal.Attempt) error {
	if offer.Block != nil {
		if wait := offer.Block.Start.Sub(d.now()); wait > 0 {
			if err := d.p.clock.Sleep(ctx, wait); err != nil {
				return err
			}
		}
	}
	return d.setPhase(ctx, a, PhasePrepare)
}
