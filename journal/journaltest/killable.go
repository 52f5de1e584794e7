package journaltest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/org/gpuprov/journal"
)

// ErrKilled is what a Killable journal's writes fail with once it is dead.
var ErrKilled = errors.New("journaltest: process killed")

// Killable simulates, for engine tests, the death of the process that
// writes through it: once Dead reports true every write (Commit, Acquire,
// Renew, Release) fails with ErrKilled, as if the process had died just
// before it, and the leases it held are left as a dead process leaves them:
// not renewed, not released. Reads still work (they change nothing).
//
// Of the optional interfaces it passes journal.OfferHistory and
// journal.Volumes through and hides the others (journal.LeaseClock,
// journal.Members, journal.Pruner).
type Killable struct {
	journal.Journal
	Dead func() bool
}

// Commit implements journal.Journal.
func (k *Killable) Commit(ctx context.Context, s *journal.Step) error {
	if k.Dead() {
		return ErrKilled
	}
	return k.Journal.Commit(ctx, s)
}

// Acquire implements journal.Journal.
func (k *Killable) Acquire(ctx context.Context, name, owner string, now, expiry time.Time, dead ...string) (journal.VM, error) {
	if k.Dead() {
		return journal.VM{}, ErrKilled
	}
	return k.Journal.Acquire(ctx, name, owner, now, expiry, dead...)
}

// Renew implements journal.Journal.
func (k *Killable) Renew(ctx context.Context, owner string, now, expiry time.Time, names []string) ([]string, error) {
	if k.Dead() {
		return nil, ErrKilled
	}
	return k.Journal.Renew(ctx, owner, now, expiry, names)
}

// Release implements journal.Journal.
func (k *Killable) Release(ctx context.Context, name, owner string) error {
	if k.Dead() {
		return ErrKilled
	}
	return k.Journal.Release(ctx, name, owner)
}

// OfferStats implements journal.OfferHistory by passing the wrapped
// journal's history through, so an engine handed a Killable ranks offers
// by it; it is a read and works after the kill too. Over a journal that
// keeps no history it returns none (a nil map and no error), which the
// engine reads as it reads a journal without one.
func (k *Killable) OfferStats(ctx context.Context) (map[string]journal.OfferStats, error) {
	oh, ok := k.Journal.(journal.OfferHistory)
	if !ok {
		return nil, nil
	}
	return oh.OfferStats(ctx)
}

// GetVolume implements journal.Volumes by passing the wrapped journal's
// volumes through (a read: it works after the kill too). Over a journal
// that keeps none it fails with an error wrapping errors.ErrUnsupported,
// as that journal refuses a Step with volumes.
func (k *Killable) GetVolume(ctx context.Context, name string) (journal.Volume, error) {
	vj, ok := k.Journal.(journal.Volumes)
	if !ok {
		return journal.Volume{}, fmt.Errorf("journaltest: the wrapped journal keeps no volumes: %w", errors.ErrUnsupported)
	}
	return vj.GetVolume(ctx, name)
}

// ListVolumes implements journal.Volumes as GetVolume does.
func (k *Killable) ListVolumes(ctx context.Context, opts journal.VolumeListOptions) ([]journal.Volume, error) {
	vj, ok := k.Journal.(journal.Volumes)
	if !ok {
		return nil, fmt.Errorf("journaltest: the wrapped journal keeps no volumes: %w", errors.ErrUnsupported)
	}
	return vj.ListVolumes(ctx, opts)
}
