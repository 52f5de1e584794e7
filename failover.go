package gpuprov

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/org/gpuprov/clock"
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
//	GPU acceptance failed    yes       host (days) or offer     next offer
//	acceptance not judged    yes       no                       next offer
//	bootstrap / join failed  yes       no                       abort
//	caller cancel/deadline   yes       no                       abort
//
// Journal failures and a lost lease stop the driver at once, touching
// nothing: Recover takes it from the journal.
func (d *driver) afterFailure(ctx context.Context, a *journal.Attempt, err error) error {
	if isFatal(err) {
		return err
	}
	if herr := d.halted(); herr != nil {
		return herr
	}
	kind := provider.KindOf(err)
	var pe *phaseError
	isPhase := errors.As(err, &pe)
	ctxDone := context.Cause(ctx) != nil
	if cause := context.Cause(ctx); ctxDone && !errors.Is(err, cause) {
		err = fmt.Errorf("%w (while: %w)", cause, err)
	}

	a.Error, a.ErrorKind = err.Error(), errorKindName(err)
	d.lastErr = err
	if d.conn != nil {
		// The session is to this attempt's machine, which goes: the next
		// attempt connects to its own.
		d.conn.Close()
		d.conn = nil
	}
	d.row.LastError, d.row.LastErrorKind = a.Error, a.ErrorKind
	fe := d.event(EvFailure, a, err.Error())
	fe.ErrorKind = a.ErrorKind
	events := []journal.Event{fe}

	var blocks []journal.Block
	if !ctxDone && isPhase && pe.phase == PhaseAccept && isRejected(err) {
		var o provider.Offer
		if jerr := jsonUnmarshal(a.Offer, &o); jerr == nil {
			b := d.p.acceptanceBlock(&o, err)
			blocks = append(blocks, b)
			be := d.event(EvBlocked, a, fmt.Sprintf("%s until %s", b.Key, b.Until.UTC().Format(time.RFC3339)))
			be.ErrorKind = KindAccept
			events = append(events, be)
		}
	}
	if !ctxDone && !isPhase && !errors.Is(err, errOfferBlocked) { // a block left the queue: it is journaled
		switch kind {
		case provider.Capacity, provider.Quota, provider.Unavailable, provider.Failed, provider.Credentials:
			var o provider.Offer
			if jerr := jsonUnmarshal(a.Offer, &o); jerr == nil {
				b := d.p.block(&o, kind, provider.ScopeOf(err), provider.BlockForOf(err), err)
				blocks = append(blocks, b)
				be := d.event(EvBlocked, a, fmt.Sprintf("%s until %s", b.Key, b.Until.UTC().Format(time.RFC3339)))
				be.ErrorKind = kind.String()
				events = append(events, be)
			}
		}
	}
	// A bought block is used or the launch ends: it is never replaced by
	// buying another (nor is one whose purchase's outcome is unknown).
	boughtOffer, bought := blockBought(a)
	keepBlock := bought || errors.Is(err, ErrBlockUnknown)
	nextOffer := !keepBlock && isPhase && (pe.phase == PhaseConnect || pe.phase == PhaseAccept)
	goesOn := !ctxDone && !keepBlock && (nextOffer ||
		(!isPhase && kind != provider.Transient && kind != provider.InvalidRequest && kind != provider.Credentials))
	var outcomes []journal.Outcome
	switch {
	case ctxDone:
	case isPhase && pe.phase == PhaseAccept && isRejected(err):
		outcomes = d.outcome(a, journal.OutcomeAcceptanceFailed)
	case !isPhase && kind == provider.Capacity:
		outcomes = d.outcome(a, journal.OutcomeStockout)
	case isPhase, kind == provider.Failed, kind == provider.Unavailable, kind == provider.Transient:
		outcomes = d.outcome(a, journal.OutcomeFailed)
	}
	if err := d.teardown(ctx, a, &journal.Step{Update: &d.row, Events: events, Blocks: blocks, Outcomes: outcomes}, goesOn); err != nil {
		return d.stuck(ctx, err)
	}
	switch {
	case bought:
		r := boughtOffer.Reservation
		return d.fail(ctx, fmt.Errorf("%w: %w; block %s stays bought until %s: launch into it with reservation %s", ErrAborted, err,
			r.ID, boughtOffer.Block.End.UTC().Format(time.RFC3339), r.ID))
	case ctxDone:
		return d.fail(ctx, err)
	case keepBlock:
		return d.fail(ctx, fmt.Errorf("%w: %w", ErrAborted, err))
	case nextOffer:
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
//
// later says the launch goes on with another offer: the cleanup is then
// owed (CleanedUp stays false) until the next attempt is known, and skipped
// altogether when that attempt is in the same location (failover in
// place). What this process knows the attempt never sent is not undone: no
// look for instances when no create went out, no cleanup when no Prepare
// request did.
func (d *driver) teardown(ctx context.Context, a *journal.Attempt, first *journal.Step, later bool) (err error) {
	ctx, sp := d.p.child(ctx, "gpuprov.teardown", "")
	if sp.IsRecording() {
		sp.SetAttributes(attrAttempt.Int(a.N), attrCloudProvider.String(a.Provider))
		defer func() { endSpan(sp, err) }()
	}
	pp, ok := d.p.providers[a.Provider]
	if !ok {
		return provider.Errorf(provider.Credentials, a.Provider, "teardown", "provider %q is not configured in this process; configure it to tear down attempt %d", a.Provider, a.N)
	}
	dctx, cancel := detached(ctx, d.p, pp.caps.DeleteTimeout)
	defer cancel()
	loc := provider.Location{Region: a.Region, Zone: a.Zone}
	window := pp.caps.ConsistencyWindow
	if k, ok := provider.ParseErrorKind(a.ErrorKind); ok && a.Phase == PhaseCreate && definitive(k) {
		// The cloud said the create did not land: one look is enough, no
		// need to wait out its listing lag (it is still looked at, in case
		// the adapter was wrong).
		window = 0
	}
	us := d.unsent[a.N]
	if a.State != journal.AttemptTearingDown {
		a.State = journal.AttemptTearingDown
		st := first
		if st == nil {
			st = &journal.Step{}
		}
		st.Attempts = append(st.Attempts, *a)
		st.Events = append(st.Events, d.event(EvTeardown, a, ""))
		// The intent is written ahead of every mutation of the teardown.
		// When none may follow (no instance known, the create refused or
		// never sent, the cleanup owed to the next attempt or nothing to
		// clean up), it waits for the first one or joins the torn-down
		// confirmation: a failover then costs one fsync less. Its blocks
		// take effect in this process at once.
		quiet := len(a.InstanceIDs) == 0 && d.placementGroup == "" &&
			(window == 0 || us != nil && us.create) && (later || us != nil && us.prepare)
		if quiet {
			d.intent = st
			if len(st.Blocks) > 0 {
				d.p.blocksAdded(st.Blocks)
			}
		} else if err := d.commit(ctx, st); err != nil {
			return err
		}
	}
	if !a.CreateSent.IsZero() && (us == nil || !us.create) {
		if err := d.deleteInstances(dctx, pp, a, loc, window); err != nil {
			return fmt.Errorf("tearing down attempt %d in %s/%s: %w", a.N, a.Provider, loc, err)
		}
	}
	how := "side resources cleaned"
	var cleaned []journal.Attempt
	switch {
	case us != nil && us.prepare:
		a.CleanedUp = true // nothing was made
		how = "nothing was sent"
		d.unholdShared(dctx, pp, a)
	case later:
		a.CleanedUp = false
		how = "cleanup waits for the next attempt"
		if d.retiring {
			how = "cleanup waits for the VM's end (its replacement may share it)"
		}
		d.deferred[a.N] = true
	default:
		if err := d.retry(dctx, pp, a, "cleanup", func(ctx context.Context) error { return pp.Cleanup(ctx, loc, d.row.Name) }); err != nil {
			return fmt.Errorf("cleaning up attempt %d in %s/%s: %w", a.N, a.Provider, loc, err)
		}
		a.CleanedUp = true
		// One Cleanup of the location serves every attempt that owed it.
		var keep []*journal.Attempt
		for _, o := range d.owed {
			if sameLocation(o, a) && o.N != a.N {
				o.CleanedUp = true
				cleaned = append(cleaned, *o)
			} else if o.N != a.N {
				keep = append(keep, o)
			}
		}
		d.owed = keep
		for i := range cleaned {
			pp.releaseShared(&cleaned[i]) // a's own hold, released below, is the region's last if any is
		}
		d.unholdShared(dctx, pp, a)
	}
	d.dropPlacementGroup(dctx, pp, loc)
	a.State, a.EndedAt = journal.AttemptTornDown, d.now()
	if !a.CleanedUp {
		owed := *a
		d.owed = append(d.owed, &owed)
	}
	if d.row.Attempt == a.N {
		d.row.InstanceID, d.row.SSHHost, d.row.SSHPort = "", "", 0
	}
	ev := d.event(EvTornDown, a, fmt.Sprintf("instances %v gone, %s", a.InstanceIDs, how))
	ev.Time, ev.VM = d.now(), d.row.Name
	done := &journal.Step{Update: &d.row, Attempts: append(cleaned, *a), Events: []journal.Event{ev}}
	// What was waiting goes first: an earlier confirmation or payment,
	// then this teardown's intent.
	for _, w := range []*journal.Step{d.intent, d.pending} {
		if w != nil {
			done.Attempts = append(slices.Clip(w.Attempts), done.Attempts...)
			done.Events = append(slices.Clip(w.Events), done.Events...)
			done.Blocks = append(slices.Clip(w.Blocks), done.Blocks...)
			done.Outcomes = append(slices.Clip(w.Outcomes), done.Outcomes...)
			done.ReleaseLease = done.ReleaseLease || w.ReleaseLease
		}
	}
	d.intent, d.pending = nil, done
	return nil
}

// flushIntent writes a teardown intent that was waiting (see teardown)
// before the mutation about to be made.
func (d *driver) flushIntent(ctx context.Context) error {
	in := d.intent
	if in == nil {
		return nil
	}
	d.intent = nil
	return d.commit(ctx, in)
}

// detached returns a context that outlives the caller's cancellation (a
// teardown after Ctrl-C must still run), bounded by timeout on p's clock.
func detached(ctx context.Context, p *Provisioner, timeout time.Duration) (context.Context, context.CancelFunc) {
	return clock.WithDeadline(context.WithoutCancel(ctx), p.clock, p.clock.Now().Add(timeout))
}

// redeleteAfter is how long an instance whose deletion the cloud accepted
// may still be listed as running (not stopping) before its Delete is sent
// again: a cloud may accept a delete and drop it.
const redeleteAfter = time.Minute

// deleteInstances deletes every instance of attempt a and returns once none
// is listed any more (and the listing lag after the create is over).
//
// Every id the journal knows is sent to Delete first, before anything is
// looked at: deleting an unknown id is success by contract, and a read API
// that is down, or a listing that lags, must never keep a known instance
// alive. Observe (or the shared List) then only confirms, and finds what the
// journal does not know, which is deleted too. Failed calls are retried with
// backoff on consecutive failures; a successful call resets it. It gives up
// when ctx (the teardown's DeleteTimeout) ends, naming the ids not
// confirmed gone and the last error.
func (d *driver) deleteInstances(ctx context.Context, pp *paced, a *journal.Attempt, loc provider.Location, window time.Duration) error {
	requested := map[string]time.Time{} // id → when the cloud accepted its Delete
	// Confirmation comes from looks taken during this teardown, never from
	// a listing shared earlier (a Delete of a VM ready for hours would
	// otherwise read the listing its launch polled).
	if t := d.now().Add(-time.Nanosecond); d.seen.Before(t) {
		d.seen = t
	}
	send := func(ids []string) error {
		for _, id := range ids {
			if !slices.Contains(a.InstanceIDs, id) {
				a.InstanceIDs = append(a.InstanceIDs, id)
			}
		}
		if err := d.flushIntent(ctx); err != nil {
			return err
		}
		err := pp.call(ctx, "delete", loc, func(ctx context.Context) error { return pp.Delete(ctx, loc, d.row.Name, ids) })
		if err == nil {
			now := d.now()
			for _, id := range ids {
				requested[id] = now
			}
			d.seen = now // the next look must see the deletion
		}
		return err
	}
	// stopping: ids the last look saw shutting down. One seen stopping and
	// then not (a pod past its grace on a node that died: the cloud will
	// not finish it) is sent its Delete again at once, not a redeleteAfter
	// later: the adapter forces what it can.
	stopping := map[string]bool{}
	var lastErr error
	for failures := 0; ; {
		var known []string
		for _, id := range a.InstanceIDs {
			if _, ok := requested[id]; !ok {
				known = append(known, id)
			}
		}
		var err error
		if len(known) > 0 {
			err = send(known)
		}
		if err == nil {
			var obs []provider.Observed
			// After a create the cloud refused (window 0), one look
			// settles it: it is not kept waiting for the next shared
			// listing, so a failover costs no poll interval.
			if obs, err = d.look(ctx, pp, a, window == 0 && len(requested) == 0); err == nil {
				var del []string
				for _, o := range obs {
					at, asked := requested[o.ID]
					if o.Status != provider.StatusStopping && (!asked || stopping[o.ID] || d.now().Sub(at) >= redeleteAfter) {
						del = append(del, o.ID)
					}
				}
				clear(stopping)
				for _, o := range obs {
					stopping[o.ID] = o.Status == provider.StatusStopping
				}
				if len(obs) == 0 && !d.now().Before(a.CreateSent.Add(window)) {
					return nil
				}
				if len(del) > 0 {
					err = send(del)
				}
			}
		}
		if err != nil && provider.KindOf(err) != provider.Transient && context.Cause(ctx) == nil {
			return err
		}
		wait := pp.caps.PollInterval
		if err != nil {
			lastErr = err
			wait = d.p.backoff.Delay(min(failures, 6), provider.RetryAfterOf(err))
			failures++
		} else {
			failures = 0
		}
		if context.Cause(ctx) == nil {
			err = d.p.clock.Sleep(ctx, wait)
		}
		if cerr := context.Cause(ctx); cerr != nil || err != nil {
			msg := fmt.Sprintf("instances %v not confirmed gone", a.InstanceIDs)
			if len(requested) > 0 {
				msg += fmt.Sprintf(" (deletion of %v accepted)", slices.Sorted(maps.Keys(requested)))
			}
			if lastErr != nil {
				return fmt.Errorf("%s: %w; last error: %w", msg, cmp.Or(cerr, err), lastErr)
			}
			return fmt.Errorf("%s: %w", msg, cmp.Or(cerr, err))
		}
	}
}

// block returns the blocklist entry for a failure of kind on offer o: for
// the error's own length (for), else the kind's TTL.
func (p *Provisioner) block(o *provider.Offer, kind provider.ErrorKind, scope provider.Scope, for_ time.Duration, cause error) journal.Block {
	now := p.clock.Now()
	ttl := cmp.Or(for_, p.blockTTL[kind], 10*time.Minute)
	if scope == provider.ScopeSpot && !o.Spot || scope == provider.ScopeFamily && o.Family == "" || scope == provider.ScopeHost && o.Host == "" {
		scope = provider.ScopeOffer // a scope the offer is not in blocks the offer
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
	case provider.ScopeSpot:
		return "spot:" + o.Provider + "|" + o.Location.Region
	case provider.ScopeHost:
		if o.Host == "" {
			return "offer:" + o.Key()
		}
		return "host:" + o.Provider + "|" + o.Host
	case provider.ScopeFamily:
		pricing := "od"
		if o.Spot {
			pricing = "spot"
		}
		return "family:" + o.Provider + "|" + o.Location.Region + "|" + o.Family + "|" + pricing
	default:
		return "offer:" + o.Key()
	}
}

// blockedBy returns the block that covers o, if any.
func blockedBy(o *provider.Offer, blocks map[string]journal.Block) (journal.Block, bool) {
	scopes := []provider.Scope{provider.ScopeOffer, provider.ScopeZone, provider.ScopeRegion, provider.ScopeProvider}
	if o.Reservation != nil {
		// Capacity the account holds: a stockout of its shape or a quota
		// of its region does not keep it from launching; only its own
		// block (it is full, it refused) and the provider's do.
		scopes = []provider.Scope{provider.ScopeOffer, provider.ScopeProvider}
	}
	if o.Spot {
		scopes = append(scopes, provider.ScopeSpot)
	}
	if o.Family != "" {
		scopes = append(scopes, provider.ScopeFamily)
	}
	if o.Host != "" {
		scopes = append(scopes, provider.ScopeHost)
	}
	for _, s := range scopes {
		if b, ok := blocks[blockKey(o, s)]; ok {
			return b, true
		}
	}
	return journal.Block{}, false
}

// restocked reports whether offer o, blocked by b, is in stock again: b is a
// stockout, and a plan made after it shows the offer in stock (see
// provider.Offer.InStock).
func restocked(o *provider.Offer, b journal.Block, planned time.Time) bool {
	return o.InStock && b.ErrorKind == provider.Capacity.String() && planned.After(b.CreatedAt)
}

// nextOffer returns the cheapest planned offer not blocked and not tried. A
// launch waiting for capacity also takes an offer whose stockout block a
// fresh plan shows restocked.
func (d *driver) nextOffer(ctx context.Context) (*provider.Offer, error) {
	res, err := d.p.plan(ctx, &d.req, d.planSince)
	if err != nil {
		return nil, err
	}
	d.plan = res
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
		if b, ok := blockedBy(o, res.blocks); ok {
			if !d.req.WaitForCapacity || !restocked(o, b, res.planned) {
				blocked++
				continue
			}
			d.restocked = true
		}
		return o, nil
	}
	return nil, fmt.Errorf("%w for %s: %d planned, %d blocked, %d tried%s", ErrNoOffers,
		d.req.alternativesText(), len(res.Offers), blocked, len(d.tried), res.errorSummary())
}

// dropPlacementGroup deletes the compact cluster's placement group once
// this node's instances are gone, unless another node of the cluster still
// means to use it (active and not being deleted): the last node of the
// cluster removes it. Nodes deleted together all try, and wait out the
// cloud's lag (ErrInUse) until it is gone. A failure leaves the group,
// which costs nothing, to the next node's teardown or the cluster's
// relocation; it does not fail this teardown.
func (d *driver) dropPlacementGroup(ctx context.Context, pp *paced, loc provider.Location) {
	if d.placementGroup == "" {
		return
	}
	if _, ok := pp.CloudProvider.(provider.PlacementGrouper); !ok {
		return
	}
	if d.row.Cluster != "" {
		rows, err := d.p.j.ListVMs(ctx, journal.ListOptions{Cluster: d.row.Cluster})
		if err != nil {
			d.p.log.Warn("placement group left: cannot read the cluster's nodes", "vm", d.row.Name, "group", d.placementGroup, "err", err)
			return
		}
		for _, r := range rows {
			if r.Name != d.row.Name && r.Region == loc.Region && r.Provider == pp.Name() &&
				!r.State.Terminal() && r.State != journal.StateDeleting {
				return // r keeps using it
			}
		}
	}
	if err := d.p.deletePlacementGroup(ctx, pp, loc, d.placementGroup); err != nil {
		d.p.log.Warn("placement group left", "vm", d.row.Name, "group", d.placementGroup, "location", loc, "err", err)
	}
}

// deletePlacementGroup deletes group in loc, retrying transient errors and
// a group still in use (instances of it still terminating) with the core's
// backoff, until ctx ends.
func (p *Provisioner) deletePlacementGroup(ctx context.Context, pp *paced, loc provider.Location, group string) error {
	pg, ok := pp.CloudProvider.(provider.PlacementGrouper)
	if !ok {
		return nil
	}
	for n := 0; ; n++ {
		err := pp.call(ctx, "placement-group", loc, func(ctx context.Context) error { return pg.DeletePlacementGroup(ctx, loc, group) })
		if context.Cause(ctx) != nil {
			return err
		}
		if err == nil || (!errors.Is(err, provider.ErrInUse) && provider.KindOf(err) != provider.Transient) {
			return err
		}
		if serr := p.clock.Sleep(ctx, p.backoff.Delay(n, provider.RetryAfterOf(err))); serr != nil {
			return errors.Join(serr, err)
		}
	}
}
