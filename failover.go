package gpuprov

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/org/gpuprov/internal/clock"
	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/provider"
)

// afterFailure applies the failover policy to attempt a's error: tear down
// what the attempt may have started, block what the error says is not
// viable, and either return nil (try the next offer) or the error that ends
// the launch.
//
//	kind / cause             teardown  block                   then
//	Capacity                 yes       offer (or err's scope)   next offer
//	Quota                    yes       region (or err's scope)  next offer
//	Unavailable              if created offer (or err's scope)  next offer
//	Failed (and unknown)     yes       offer (or err's scope)   next offer
//	Transient (out of time)  yes       no                       abort
//	InvalidRequest           yes       no                       abort
//	Credentials              yes       provider                 abort
//	connect failed           yes       no                       next offer
//	bootstrap / join failed  yes       no                       abort
//	caller cancel/deadline   yes       no                       abort
//
// Journal failures and a lost lease stop the driver at once, touching
// nothing: Recover takes it from the journal.
func (d *driver) afterFailure(ctx context.Context, a *journal.Attempt, err error) error {
	if isFatal(err) {
		return err
	}
	kind := provider.KindOf(err)
	var pe *phaseError
	isPhase := errors.As(err, &pe)
	ctxDone := context.Cause(ctx) != nil
	if cause := context.Cause(ctx); ctxDone && !errors.Is(err, cause) {
		err = fmt.Errorf("%w (while: %w)", cause, err)
	}

	a.Error, a.ErrorKind = err.Error(), errorKindName(err)
	d.row.LastError, d.row.LastErrorKind = a.Error, a.ErrorKind
	fe := d.event(EvFailure, a, err.Error())
	fe.ErrorKind = a.ErrorKind
	events := []journal.Event{fe}

	var blocks []journal.Block
	if !ctxDone && !isPhase {
		switch kind {
		case provider.Capacity, provider.Quota, provider.Unavailable, provider.Failed, provider.Credentials:
			var o provider.Offer
			if jerr := jsonUnmarshal(a.Offer, &o); jerr == nil {
				b := d.p.block(&o, kind, provider.ScopeOf(err), err)
				blocks = append(blocks, b)
				be := d.event(EvBlocked, a, fmt.Sprintf("%s until %s", b.Key, b.Until.UTC().Format(time.RFC3339)))
				be.ErrorKind = kind.String()
				events = append(events, be)
			}
		}
	}
	if err := d.teardown(ctx, a, &journal.Step{Update: &d.row, Events: events, Blocks: blocks}); err != nil {
		return d.stuck(ctx, err)
	}
	switch {
	case ctxDone:
		return d.fail(ctx, err)
	case isPhase && pe.phase == PhaseConnect:
		return nil
	case isPhase:
		return d.fail(ctx, fmt.Errorf("%w: %w", ErrAborted, err))
	}
	switch kind {
	case provider.Transient, provider.InvalidRequest, provider.Credentials:
		return d.fail(ctx, fmt.Errorf("%w: %w", ErrAborted, err))
	}
	return nil
}

// definitive kinds say the create did not land.
func definitive(k provider.ErrorKind) bool {
	switch k {
	case provider.Capacity, provider.Quota, provider.Unavailable, provider.InvalidRequest, provider.Credentials:
		return true
	}
	return false
}

// teardown deletes every instance of attempt a, confirms they are gone, then
// cleans up the attempt's side resources; the attempt is marked torn down
// only after that. The intent is journaled first, together with first (the
// failure and its blocks), when given. It runs on a context detached from
// the caller's, bounded by the provider's DeleteTimeout, so that Ctrl-C and
// deadline expiry still clean up.
func (d *driver) teardown(ctx context.Context, a *journal.Attempt, first *journal.Step) error {
	pp, ok := d.p.providers[a.Provider]
	if !ok {
		return provider.Errorf(provider.Credentials, a.Provider, "teardown", "provider %q is not configured in this process; configure it to tear down attempt %d", a.Provider, a.N)
	}
	dctx, cancel := clock.WithDeadline(context.WithoutCancel(ctx), d.p.clock, d.now().Add(pp.caps.DeleteTimeout))
	defer cancel()
	if a.State != journal.AttemptTearingDown {
		a.State = journal.AttemptTearingDown
		st := first
		if st == nil {
			st = &journal.Step{}
		}
		st.Attempts = append(st.Attempts, *a)
		st.Events = append(st.Events, d.event(EvTeardown, a, ""))
		if err := d.commit(ctx, st); err != nil {
			return err
		}
	}
	loc := provider.Location{Region: a.Region, Zone: a.Zone}
	window := pp.caps.ConsistencyWindow
	if k, ok := provider.ParseErrorKind(a.ErrorKind); ok && a.Phase == PhaseCreate && definitive(k) {
		// The cloud said the create did not land: one look is enough, no
		// need to wait out its listing lag (it is still looked at, in case
		// the adapter was wrong).
		window = 0
	}
	if !a.CreateSent.IsZero() {
		requested := map[string]bool{}
		for n := 0; ; n++ {
			obs, err := d.observe(dctx, pp, a)
			if err == nil {
				var del []string
				for _, o := range obs {
					if !requested[o.ID] && o.Status != provider.StatusStopping {
						del = append(del, o.ID)
					}
				}
				if n == 0 {
					// Ids the journal knows are deleted even when the
					// cloud does not list them (yet): deleting an unknown
					// id is success, and a listing that lags must not hide
					// a paid instance.
					for _, id := range a.InstanceIDs {
						if !slices.Contains(del, id) && !slices.ContainsFunc(obs, func(o provider.Observed) bool { return o.ID == id }) {
							del = append(del, id)
						}
					}
				}
				lagOver := !d.now().Before(a.CreateSent.Add(window))
				if len(obs) == 0 && lagOver {
					break
				}
				if len(del) > 0 {
					for _, id := range del {
						if !slices.Contains(a.InstanceIDs, id) {
							a.InstanceIDs = append(a.InstanceIDs, id)
						}
					}
					if err = pp.wait(dctx); err == nil {
						err = pp.Delete(dctx, loc, d.row.Name, del)
						pp.note(err)
					}
					d.seen = d.now() // the next look must see the deletion
					if err == nil {
						for _, id := range del {
							requested[id] = true
						}
					}
				}
			}
			if err != nil && provider.KindOf(err) != provider.Transient {
				return fmt.Errorf("tearing down attempt %d in %s/%s: %w", a.N, a.Provider, loc, err)
			}
			if cerr := context.Cause(dctx); cerr != nil {
				return fmt.Errorf("tearing down attempt %d in %s/%s: instances %v not confirmed gone: %w", a.N, a.Provider, loc, a.InstanceIDs, cerr)
			}
			if err != nil {
				err = d.p.clock.Sleep(dctx, d.p.backoff.Delay(min(n, 6), provider.RetryAfterOf(err)))
			} else {
				err = d.p.clock.Sleep(dctx, pp.caps.PollInterval)
			}
			if err != nil {
				return fmt.Errorf("tearing down attempt %d in %s/%s: instances %v not confirmed gone: %w", a.N, a.Provider, loc, a.InstanceIDs, err)
			}
		}
	}
	if err := d.retry(dctx, pp, a, "cleanup", func(ctx context.Context) error { return pp.Cleanup(ctx, loc, d.row.Name) }); err != nil {
		return fmt.Errorf("cleaning up attempt %d in %s/%s: %w", a.N, a.Provider, loc, err)
	}
	a.State, a.CleanedUp, a.EndedAt = journal.AttemptTornDown, true, d.now()
	if d.row.Attempt == a.N {
		d.row.InstanceID, d.row.SSHHost, d.row.SSHPort = "", "", 0
	}
	ev := d.event(EvTornDown, a, fmt.Sprintf("instances %v gone, side resources cleaned", a.InstanceIDs))
	ev.Time, ev.VM = d.now(), d.row.Name
	d.pending = &journal.Step{Update: &d.row, Attempts: []journal.Attempt{*a}, Events: []journal.Event{ev}}
	return nil
}

// block returns the blocklist entry for a failure of kind on offer o.
func (p *Provisioner) block(o *provider.Offer, kind provider.ErrorKind, scope provider.Scope, cause error) journal.Block {
	now := p.clock.Now()
	ttl := p.blockTTL[kind]
	if ttl == 0 {
		ttl = 10 * time.Minute
	}
	return journal.Block{
		Key: blockKey(o, scope), Scope: scope.String(), Provider: o.Provider, ErrorKind: kind.String(),
		Reason: cause.Error(), Until: now.Add(ttl), CreatedAt: now,
	}
}

// blockKey names what a block of scope covers for offer o.
func blockKey(o *provider.Offer, scope provider.Scope) string {
	switch scope {
	case provider.ScopeProvider:
		return "provider:" + o.Provider
	case provider.ScopeRegion:
		return "region:" + o.Provider + "|" + o.Location.Region
	case provider.ScopeZone:
		return "zone:" + o.Provider + "|" + o.Location.Region + "|" + o.Location.Zone
	default:
		return "offer:" + o.Key()
	}
}

// blockedBy returns the block that covers o, if any.
func blockedBy(o *provider.Offer, blocks map[string]journal.Block) (journal.Block, bool) {
	for _, s := range []provider.Scope{provider.ScopeOffer, provider.ScopeZone, provider.ScopeRegion, provider.ScopeProvider} {
		if b, ok := blocks[blockKey(o, s)]; ok {
			return b, true
		}
	}
	return journal.Block{}, false
}

// nextOffer returns the cheapest planned offer not blocked and not tried.
func (d *driver) nextOffer(ctx context.Context) (*provider.Offer, error) {
	res, err := d.p.plan(ctx, &d.req)
	if err != nil {
		return nil, err
	}
	if len(res.Errors) > 0 {
		var evs []journal.Event
		for name, perr := range res.Errors {
			evs = append(evs, journal.Event{Type: EvPlanError, Provider: name, Message: perr.Error(), ErrorKind: errorKindName(perr)})
		}
		d.p.emit(evs)
	}
	blocked := 0
	for i := range res.Offers {
		o := &res.Offers[i]
		if d.tried[o.Key()] {
			continue
		}
		if _, ok := blockedBy(o, res.blocks); ok {
			blocked++
			continue
		}
		return o, nil
	}
	return nil, fmt.Errorf("%w for %s×%d: %d planned, %d blocked, %d tried%s", ErrNoOffers,
		d.req.GPU, d.req.GPUCount, len(res.Offers), blocked, len(d.tried), res.errorSummary())
}
