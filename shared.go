package gpuprov

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/provider"
)

// Shared side resources (provider.SharedCleaner): a firewall every VM of
// the installation in a region uses. Removing one is safe only when no
// instance uses it; the cloud refusing to delete a resource in use is what
// guarantees that across processes, and a create that finds it gone makes
// it again (provider.ErrSharedGone). Within a process, the Provisioner
// keeps the set of its VMs holding an attempt in each region, so that it
// asks to remove a region's shared resources only when the last of them is
// torn down, instead of after every teardown; and it asks only after a
// grace (WithSharedGrace), so that a VM arriving in the region soon after,
// the next in a queue or one failing over there, uses them instead of
// making them again. Close runs the removals still waiting; a process that
// ends without Close leaves them to a later teardown there, or to Sweep.

// DefaultSharedGrace is how long a region's shared side resources outlive
// the Provisioner's last VM there (WithSharedGrace).
const DefaultSharedGrace = time.Minute

// WithSharedGrace sets how long a region's shared side resources (see
// provider.SharedCleaner) are kept after the last VM of this Provisioner
// there is gone, for the next VM to use; default DefaultSharedGrace. 0
// removes them as soon as the last VM's teardown ends. Close removes the
// ones still waiting.
func WithSharedGrace(d time.Duration) Option {
	return func(p *Provisioner) {
		if d < 0 {
			p.pending = append(p.pending, fmt.Errorf("gpuprov: WithSharedGrace(%s): the grace must not be negative", d))
			return
		}
		p.sharedGrace = d
	}
}

// holdShared records that attempt a of vm may have side resources in its
// region that include the shared ones (its Prepare is about to run, or ran,
// and it is not torn down and cleaned up). Holds are per attempt, so that
// two attempts of one VM in a region hold it twice.
func (pp *paced) holdShared(a *journal.Attempt) {
	if _, ok := pp.CloudProvider.(provider.SharedCleaner); !ok {
		return
	}
	pp.mu.Lock()
	defer pp.mu.Unlock()
	if pp.shared == nil {
		pp.shared = map[string]map[string]struct{}{}
	}
	if pp.shared[a.Region] == nil {
		pp.shared[a.Region] = map[string]struct{}{}
	}
	pp.shared[a.Region][holder(a)] = struct{}{}
	if stop, ok := pp.linger[a.Region]; ok {
		// The removal waiting out its grace is called off.
		close(stop)
		delete(pp.linger, a.Region)
	}
}

// releaseShared ends attempt a's hold and reports whether no attempt of
// this process holds its region any more.
func (pp *paced) releaseShared(a *journal.Attempt) (last bool) {
	if _, ok := pp.CloudProvider.(provider.SharedCleaner); !ok {
		return false
	}
	pp.mu.Lock()
	defer pp.mu.Unlock()
	delete(pp.shared[a.Region], holder(a))
	if len(pp.shared[a.Region]) == 0 {
		delete(pp.shared, a.Region)
		return true
	}
	return false
}

func holder(a *journal.Attempt) string { return fmt.Sprintf("%s#%d", a.VM, a.N) }

// cleanupShared asks the provider to remove its shared side resources in
// loc (every region for a zero Location). With settle, a resource the cloud
// says is in use is asked for again, with backoff, for as long as the
// cloud's listing may lag behind it (ConsistencyWindow, plus a poll): this
// process's own instances were confirmed gone by a listing, and the cloud
// may not be done with them yet. Past that (at once without settle: what a
// crashed process left, where this one deleted nothing) it is another VM
// using it: it is left, and not an error; the next teardown there, or
// Sweep, removes it. Other transient errors are retried like every
// teardown step, on a context detached from the caller's and bounded by
// the provider's DeleteTimeout.
func (p *Provisioner) cleanupShared(ctx context.Context, pp *paced, loc provider.Location, settle bool) error {
	sc, ok := pp.CloudProvider.(provider.SharedCleaner)
	if !ok {
		return nil
	}
	ctx, cancel := detached(ctx, p, pp.caps.DeleteTimeout)
	defer cancel()
	until := p.clock.Now()
	if settle {
		until = until.Add(pp.caps.ConsistencyWindow + pp.caps.PollInterval)
	}
	for n := 0; ; n++ {
		err := pp.call(ctx, "cleanup-shared", loc, func(ctx context.Context) error { return sc.CleanupShared(ctx, loc) })
		if err == nil || provider.KindOf(err) != provider.Transient || context.Cause(ctx) != nil {
			return err
		}
		wait := p.backoff.Delay(n, provider.RetryAfterOf(err))
		if errors.Is(err, provider.ErrInUse) && p.clock.Now().Add(wait).After(until) {
			p.log.Debug("shared side resources left in use", "provider", pp.Name(), "location", loc, "err", err)
			return nil
		}
		if err := p.clock.Sleep(ctx, wait); err != nil {
			return err
		}
	}
}

// unholdShared ends attempt a's hold on its region once its side resources
// are settled (cleaned up, or never made) and, when it was the last hold of
// this process there, removes the region's shared side resources after the
// grace, best effort: one that is left costs nothing and is removed by a
// later teardown or by Sweep.
func (d *driver) unholdShared(ctx context.Context, pp *paced, a *journal.Attempt) {
	if pp.releaseShared(a) {
		d.p.lingerShared(ctx, pp, a.Region)
	}
}

// lingerShared removes the shared side resources of region once the grace
// has passed with no hold there, or at Close; at once when the grace is 0
// or the Provisioner is closed. A removal already waiting for the region
// is left to run.
func (p *Provisioner) lingerShared(ctx context.Context, pp *paced, region string) {
	p.mu.Lock()
	closed := p.closed
	if !closed && p.sharedGrace > 0 {
		p.lingering.Add(1) // under p.mu: Close's Wait starts after closed is set
	}
	p.mu.Unlock()
	if closed || p.sharedGrace <= 0 {
		p.removeShared(ctx, pp, region)
		return
	}
	if _, ok := pp.CloudProvider.(provider.SharedCleaner); !ok {
		p.lingering.Done()
		return
	}
	pp.mu.Lock()
	if _, ok := pp.linger[region]; ok || len(pp.shared[region]) > 0 {
		pp.mu.Unlock()
		p.lingering.Done()
		return
	}
	stop := make(chan struct{})
	if pp.linger == nil {
		pp.linger = map[string]chan struct{}{}
	}
	pp.linger[region] = stop
	pp.mu.Unlock()
	t := p.clock.NewTimer(p.sharedGrace)
	go func() {
		defer p.lingering.Done()
		select {
		case <-stop: // a VM came: holdShared called it off
			t.Stop()
			return
		case <-t.C():
		case <-p.closing:
			t.Stop()
		}
		pp.mu.Lock()
		mine := pp.linger[region] == stop
		if mine {
			delete(pp.linger, region)
		}
		pp.mu.Unlock()
		if mine {
			p.removeShared(context.Background(), pp, region)
		}
	}()
}

// allRegions, as the region of lingerShared, stands for every region of
// the provider (CleanupShared of a zero Location): what a crashed process
// left, in regions this one may never visit. A VM of this process arriving
// in a region does not call it off; the cloud refuses to remove what an
// instance uses, and a create that finds its shared resource gone makes it
// again (provider.ErrSharedGone).
const allRegions = ""

// removeShared removes the shared side resources of region (every region:
// allRegions), logging what is left.
func (p *Provisioner) removeShared(ctx context.Context, pp *paced, region string) {
	if err := p.cleanupShared(ctx, pp, provider.Location{Region: region}, region != allRegions); err != nil {
		p.log.Warn("shared side resources left", "provider", pp.Name(), "region", region, "err", err)
	}
}

// Failover in place. The teardown of a failed attempt leaves its cleanup
// owed (CleanedUp false) when the launch goes on: the next attempt, when it
// is in the same provider and location, uses the same side resources, so
// cleaning them up only to make them again would cost calls and time.

// sameLocation reports whether attempts a and b are in one provider and
// location.
func sameLocation(a, b *journal.Attempt) bool {
	return a.Provider == b.Provider && a.Region == b.Region && a.Zone == b.Zone
}

// payOwed cleans up every owed attempt that next (nil: none) is not in the
// location of, and returns the attempts it marked cleaned up, to journal.
// A cleanup that fails is returned as the error, with the attempts cleaned
// up before it.
func (d *driver) payOwed(ctx context.Context, next *journal.Attempt) ([]journal.Attempt, error) {
	if (d.intent != nil || d.pending != nil) && slices.ContainsFunc(d.owed, func(o *journal.Attempt) bool { return next == nil || !sameLocation(o, next) }) {
		// A cleanup is a mutation: the attempt it is for must be journaled
		// torn down first.
		if err := d.commit(ctx, &journal.Step{}); err != nil {
			return nil, err
		}
	}
	var done []journal.Attempt
	var keep []*journal.Attempt
	for i, o := range d.owed {
		if next != nil && sameLocation(o, next) {
			keep = append(keep, o)
			continue
		}
		if err := d.cleanupAttempt(ctx, o); err != nil {
			d.owed = append(keep, d.owed[i:]...)
			return done, err
		}
		done = append(done, *o)
	}
	d.owed = keep
	for i := range done {
		if pp, ok := d.p.providers[done[i].Provider]; ok {
			d.unholdShared(ctx, pp, &done[i])
		}
	}
	return done, nil
}

// cleanupAttempt runs the Cleanup attempt a owes, on a context detached
// from the caller's and bounded by the provider's DeleteTimeout, and marks
// it cleaned up.
func (d *driver) cleanupAttempt(ctx context.Context, a *journal.Attempt) error {
	pp, ok := d.p.providers[a.Provider]
	if !ok {
		return provider.Errorf(provider.Credentials, a.Provider, "teardown", "provider %q is not configured in this process; configure it to clean up attempt %d", a.Provider, a.N)
	}
	dctx, cancel := detached(ctx, d.p, pp.caps.DeleteTimeout)
	defer cancel()
	loc := provider.Location{Region: a.Region, Zone: a.Zone}
	if err := d.retry(dctx, pp, a, "cleanup", func(ctx context.Context) error { return pp.Cleanup(ctx, loc, d.row.Name) }); err != nil {
		return err
	}
	a.CleanedUp = true
	return nil
}
