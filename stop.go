package gpuprov

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/provider"
)

// errOfferBlocked marks the Capacity error of a call that left the pacing
// queue because its offer was blocked while it waited: the block is
// already journaled, so the failure adds none.
var errOfferBlocked = errors.New("offer blocked while waiting for the account's turn")

// stopper stops the calls an attempt queues for its offer once the offer is
// blocked by a block recorded after the attempt started (one from before is
// a block the attempt chose to pass over, a restock seen while waiting for
// capacity). A stockout found by one VM thus frees the turns of every VM
// queued behind it on the same offer, before they spend a call on it.
type stopper struct {
	p     *Provisioner
	offer *provider.Offer
	since time.Time
	// sent says a request went out under the stopper: the account granted
	// a turn (a provider.RequestPacer's request, or a primitive the core
	// paces).
	sent atomic.Bool
}

func (d *driver) stopperFor(o *provider.Offer, a *journal.Attempt) *stopper {
	return &stopper{p: d.p, offer: o, since: a.StartedAt}
}

// signal returns a channel closed when this process records a block.
func (s *stopper) signal() <-chan struct{} { return s.p.blockAdded() }

// check returns a Capacity error wrapping errOfferBlocked when the offer is
// blocked now.
func (s *stopper) check(ctx context.Context) error {
	b, ok := s.p.blockedNow(ctx, s.offer)
	if !ok || b.CreatedAt.Before(s.since) {
		return nil
	}
	return &provider.Error{Kind: provider.Capacity, Provider: s.offer.Provider, Op: "wait",
		Err: fmt.Errorf("%w (%s, %s until %s)", errOfferBlocked, b.Key, b.ErrorKind, b.Until.UTC().Format(time.RFC3339))}
}
