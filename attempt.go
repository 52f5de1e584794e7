package gpuprov

import (
	"cmp"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"golang.org/x/crypto/ssh"

	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/provider"
)

// tokenNamespace is the UUIDv5 namespace of create idempotency tokens.
var tokenNamespace = uuid.MustParse("6f1c2d0e-9a4b-5c3d-8e7f-0a1b2c3d4e5f")

func tokenFor(installation, vmID string, attempt int) string {
	return uuid.NewSHA1(tokenNamespace, fmt.Appendf(nil, "%s/%s/%d", installation, vmID, attempt)).String()
}

// runAttempt takes attempt a from its journaled phase to ready. resumed says
// the attempt was taken over from the journal (after a crash), so a create
// phase must observe before it sends anything.
func (d *driver) runAttempt(ctx context.Context, a *journal.Attempt, resumed bool) error {
	pp, ok := d.p.providers[a.Provider]
	if !ok {
		return provider.Errorf(provider.Credentials, a.Provider, "attempt", "provider %q is not configured in this process", a.Provider)
	}
	var offer provider.Offer
	if err := json.Unmarshal(a.Offer, &offer); err != nil {
		return fmt.Errorf("gpuprov: journaled offer of attempt %d does not parse: %w", a.N, err)
	}
	if resumed {
		pp.holdShared(a) // see provision
	}
	for {
		var err error
		switch a.Phase {
		case PhasePurchase, PhasePurchaseSent:
			pctx, sp := d.p.child(ctx, phaseSpan, PhasePurchase)
			err = d.purchase(pctx, pp, &offer, a, resumed)
			endSpan(sp, err)
		case PhaseBlockStart:
			err = d.blockStart(ctx, &offer, a)
		case PhasePrepare:
			pctx, sp := d.p.child(ctx, phaseSpan, PhasePrepare)
			err = d.prepare(pctx, pp, &offer, a)
			endSpan(sp, err)
		case PhaseCreate:
			pctx, sp := d.p.child(ctx, phaseSpan, PhaseCreate)
			err = d.create(pctx, pp, &offer, a, resumed)
			endSpan(sp, err)
		case PhaseBoot, PhaseQueued:
			pctx, sp := d.p.child(ctx, phaseSpan, PhaseBoot)
			err = d.boot(pctx, pp, a)
			endSpan(sp, err)
		case PhaseConnect, PhaseAccept, PhaseBootstrap, PhaseJoin:
			err = d.nodePhases(ctx, a) // a span per phase of its own
		case "":
			return nil
		default:
			return fmt.Errorf("gpuprov: attempt %d has unknown phase %q", a.N, a.Phase)
		}
		if err != nil {
			return err
		}
	}
}

// setPhase moves the attempt and the VM to phase in one journal step.
func (d *driver) setPhase(ctx context.Context, a *journal.Attempt, phase string, extra ...journal.Event) error {
	a.Phase, d.row.Phase = phase, phase
	evs := append([]journal.Event{d.event(EvPhase, a, phase)}, extra...)
	return d.commit(ctx, &journal.Step{Update: &d.row, Attempts: []journal.Attempt{*a}, Events: evs})
}

func (d *driver) spec(a *journal.Attempt) *provider.InstanceSpec {
	return &provider.InstanceSpec{
		VM: d.row.Name, Installation: d.p.j.Installation(), Attempt: a.N, IdempotencyToken: a.Token,
		SSHUser: firstNonEmpty(d.req.SSHUser, d.p.sshUser), AuthorizedKeys: d.p.authKeys,
		HostKey: d.hostKeys[a.N], OpenPorts: d.req.OpenPorts, SourceRanges: d.req.SourceRanges, Image: d.req.Image,
		UserLabels: d.req.Labels, PlacementGroup: d.placementGroup, Volumes: d.mounts,
	}
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

// prepare runs Prepare and journals its result together with the intent to
// create (phase create, the time the create is sent, the host key to pin).
// What waits to be journaled (the attempt's start, an earlier attempt's
// failure) is written before the first request the Prepare sends, or with
// the create intent when it sends none.
func (d *driver) prepare(ctx context.Context, pp *paced, o *provider.Offer, a *journal.Attempt) error {
	var ws *writeFirst
	if d.pending != nil || d.intent != nil {
		ws = &writeFirst{write: func() error { return d.commit(ctx, &journal.Step{}) }}
		ctx = context.WithValue(ctx, writeFirstKey{}, ws)
	}
	if d.placementGroup != "" {
		pg, ok := pp.CloudProvider.(provider.PlacementGrouper)
		if !ok {
			return provider.Errorf(provider.InvalidRequest, pp.Name(), "prepare", "compact placement is not supported")
		}
		labels := maps.Clone(d.req.Labels)
		if labels == nil {
			labels = map[string]string{}
		}
		labels[provider.LabelInstallation], labels[provider.LabelCluster] = d.p.j.Installation(), d.row.Cluster
		if err := d.retry(ctx, pp, a, "prepare", func(ctx context.Context) error {
			return ws.or(pg.EnsurePlacementGroup(ctx, o.Location, d.placementGroup, labels))
		}); err != nil {
			return err
		}
	}
	pp.holdShared(a)
	prepared := d.preparedInPlace(o, a)
	if prepared == nil {
		st := d.stopperFor(o, a)
		err := d.retry(withStopper(ctx, st), pp, a, "prepare", func(ctx context.Context) error {
			if !pp.perRequest {
				st.sent.Store(true) // the core granted the turn: Prepare runs
			}
			var err error
			prepared, err = pp.Prepare(ctx, o, d.spec(a))
			return ws.or(err)
		})
		if us := d.unsent[a.N]; us != nil && st.sent.Load() {
			us.prepare = false
		}
		if err != nil {
			return err
		}
	}
	a.Prepared = prepared
	if err := d.newHostKey(pp, a); err != nil {
		return err
	}
	if err := d.ensureVolumes(ctx, pp, o, a); err != nil {
		return err
	}
	a.CreateSent = d.now()
	a.Phase, d.row.Phase = PhaseCreate, PhaseCreate
	return d.commit(ctx, &journal.Step{Update: &d.row, Attempts: []journal.Attempt{*a},
		Events:   []journal.Event{d.event(EvPhase, a, PhaseCreate), d.event(EvCreateSent, a, "token "+a.Token)},
		Outcomes: d.outcome(a, journal.OutcomeCreated)})
}

// newHostKey generates the attempt's host key where the cloud takes
// user-data; the public half is journaled (pinned), the private half only
// goes into user-data.
func (d *driver) newHostKey(pp *paced, a *journal.Attempt) error {
	if !d.p.hostKeys || !pp.caps.Supports(provider.FeatureUserData) {
		return nil
	}
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return fmt.Errorf("gpuprov: generating host key: %w", err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "gpuprov host key "+d.row.Name)
	if err != nil {
		return fmt.Errorf("gpuprov: encoding host key: %w", err)
	}
	sp, err := ssh.NewPublicKey(pub)
	if err != nil {
		return fmt.Errorf("gpuprov: encoding host key: %w", err)
	}
	hk := &provider.HostKey{PrivatePEM: string(pemEncode(block)), Public: strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sp)))}
	d.hostKeys[a.N] = hk
	a.HostKey = hk.Public
	return nil
}

// create sends the create and resolves every ambiguous outcome. A resumed
// create, and a retried one on a cloud without idempotency tokens, first
// looks for what landed (waiting out the cloud's listing lag, counted for a
// resumed one from the takeover: see takeOverAttempts) and adopts it; only
// when nothing is there is the create sent again. On a cloud that honours
// the token (the feature provider.FeatureIdempotencyToken) a retried create
// is sent again at once with the same token, and a resumed one after one
// look: the cloud answers the replay with the instance the first one made,
// if it landed, so that a 5xx costs a backoff, not the listing lag. Every
// resend is journaled (its send time) before it goes out.
func (d *driver) create(ctx context.Context, pp *paced, o *provider.Offer, a *journal.Attempt, resumed bool) error {
	mounts, err := d.createMounts(ctx, pp)
	if err != nil {
		return err
	}
	d.mounts = mounts
	observeFirst := resumed
	replay := pp.caps.Supports(provider.FeatureIdempotencyToken) && a.Token != ""
	sharedGone := 0
	var last error // the last create's error, for an end that cuts the retries short
	withLast := func(err error) error {
		if last != nil && context.Cause(ctx) != nil && !errors.Is(err, last) {
			return errors.Join(err, last)
		}
		return err
	}
	for n := 0; ; n++ {
		if observeFirst {
			// With the token, one look decides: a replay cannot duplicate.
			inst, err := d.findLanded(ctx, pp, a, replay)
			if err != nil {
				return withLast(err)
			}
			if inst != nil {
				return d.recordInstance(ctx, a, inst.ID, EvAdopted)
			}
			if d.hostKeys[a.N] == nil && a.HostKey != "" {
				// The private half died with the process that made it.
				if err := d.newHostKey(pp, a); err != nil {
					return err
				}
			}
		}
		if observeFirst || n > 0 {
			// The listing lag of a teardown, or of a Recover after a
			// crash, counts from this send.
			why := "resend" // the create did not land (a shared resource was gone) and was prepared again
			switch {
			case observeFirst:
				why = "resend after observing nothing"
			case replay:
				why = "resend with the same token"
			}
			a.CreateSent = d.now()
			if err := d.commit(ctx, &journal.Step{Attempts: []journal.Attempt{*a},
				Events: []journal.Event{d.event(EvCreateSent, a, why+"; token "+a.Token)}}); err != nil {
				return err
			}
		}
		var cctx context.Context
		var st *stopper
		if n == 0 && !observeFirst {
			// Another VM may find the offer out of stock while this one
			// waits for its turn: the create then leaves the queue instead
			// of failing too (see stopper).
			st = d.stopperFor(o, a)
			if err := st.check(ctx); err != nil {
				return err
			}
			cctx = withStopper(ctx, st)
		} else {
			// A resend keeps its place: it goes ahead of the first sends
			// queued behind it (as listings do), so a transient error
			// costs a backoff, not the account's whole queue again.
			cctx = withPriority(ctx)
		}
		var id string
		g := &granted{}
		cctx = context.WithValue(cctx, grantedKey{}, g)
		err := pp.call(cctx, "create", o.Location, func(ctx context.Context) (err error) {
			if st != nil && !pp.perRequest {
				// The core granted the turn: the create goes out.
				if err := st.check(ctx); err != nil {
					return err
				}
				st.sent.Store(true)
			}
			id, err = pp.Create(ctx, o, a.Prepared, d.spec(a))
			return err
		})
		if us := d.unsent[a.N]; us != nil && (st == nil || st.sent.Load()) {
			us.create = false
		}
		if at := g.at.Load(); at != nil {
			// The listing lag counts from the send, not from the intent
			// journaled before the wait for the account's turn (the
			// journal keeps the earlier time until the attempt's next
			// write).
			a.CreateSent = *at
		}
		if err == nil {
			// The instance exists now: a look that started before this
			// moment may not show it, so the next one must start after.
			d.seen = d.now()
			return d.recordInstance(ctx, a, id, EvCreated)
		}
		if provider.KindOf(err) != provider.Transient || context.Cause(ctx) != nil {
			return withLast(err)
		}
		last = err
		if errors.Is(err, provider.ErrSharedGone) && sharedGone < 3 {
			// Another process removed a shared side resource between this
			// VM's Prepare and its create, which did not land: prepare
			// again and send it again.
			sharedGone++
			if err := d.reprepare(ctx, pp, o, a, err); err != nil {
				return err
			}
			continue
		}
		if err := d.backoff(ctx, a, "create", n, err); err != nil {
			return err
		}
		observeFirst = !replay
	}
}

// reprepare runs Prepare again for attempt a after a create found a shared
// side resource gone (cause), and journals the new prepared data.
func (d *driver) reprepare(ctx context.Context, pp *paced, o *provider.Offer, a *journal.Attempt, cause error) error {
	var prepared json.RawMessage
	if err := d.retry(ctx, pp, a, "prepare", func(ctx context.Context) (err error) {
		prepared, err = pp.Prepare(ctx, o, d.spec(a))
		return err
	}); err != nil {
		return errors.Join(err, cause)
	}
	a.Prepared = prepared
	return d.commit(ctx, &journal.Step{Attempts: []journal.Attempt{*a},
		Events: []journal.Event{d.event(EvRetry, a, fmt.Sprintf("create: %v; prepared again", cause))}})
}

// preparedInPlace returns the prepared data of an attempt that owes its
// cleanup in the location of a, on an offer whose Prepare takes the same
// input (instance type, disk), so that a failover in place skips Prepare;
// nil when there is none.
func (d *driver) preparedInPlace(o *provider.Offer, a *journal.Attempt) json.RawMessage {
	for i := len(d.owed) - 1; i >= 0; i-- {
		x := d.owed[i]
		if !sameLocation(x, a) || len(x.Prepared) == 0 || !d.deferred[x.N] {
			continue
		}
		var xo provider.Offer
		if err := json.Unmarshal(x.Offer, &xo); err != nil || xo.InstanceType != o.InstanceType || xo.DiskGB != o.DiskGB {
			continue
		}
		return x.Prepared
	}
	return nil
}

// recordInstance journals the instance id and moves the attempt to boot.
func (d *driver) recordInstance(ctx context.Context, a *journal.Attempt, id, how string) error {
	if !slices.Contains(a.InstanceIDs, id) {
		a.InstanceIDs = append([]string{id}, a.InstanceIDs...)
	}
	d.row.InstanceID = id
	e := d.event(how, a, id)
	e.InstanceID = id
	return d.setPhase(ctx, a, PhaseBoot, e)
}

// findLanded observes until an instance of the VM appears or the cloud's
// consistency window since the last create has passed; once, until a look
// works.
func (d *driver) findLanded(ctx context.Context, pp *paced, a *journal.Attempt, once bool) (*provider.Observed, error) {
	for first := true; ; first = false {
		// The create's fate decides what comes next: its first look does
		// not wait for the location's next shared listing; the looks that
		// wait out the listing lag share it.
		obs, err := d.look(ctx, pp, a, first)
		if err == nil {
			if best := pickInstance(obs, a.InstanceIDs); best != nil {
				return best, nil
			}
		} else if provider.KindOf(err) != provider.Transient || context.Cause(ctx) != nil {
			return nil, err
		}
		// Nothing there counts once a look that worked saw nothing after
		// the window: a failed look says nothing.
		left := a.CreateSent.Add(pp.caps.ConsistencyWindow).Sub(d.now())
		if (left <= 0 || once) && err == nil {
			return nil, nil
		}
		if left <= 0 {
			left = d.p.backoff.Delay(0, provider.RetryAfterOf(err))
		}
		if err := d.p.clock.Sleep(ctx, min(left, pp.caps.PollInterval)); err != nil {
			return nil, err
		}
	}
}

// observe returns what the cloud holds of the VM in the attempt's location,
// as seen by a look that started after the driver's previous one and after
// the attempt's create (so every poll sees newer data than the last). On a
// provider with a Lister, the looks of every VM polling one location share
// one List call (see lister.go); elsewhere each is an Observe call.
func (d *driver) observe(ctx context.Context, pp *paced, a *journal.Attempt) ([]provider.Observed, error) {
	return d.look(ctx, pp, a, false)
}

// look is observe; now says the look may not wait for the location's next
// shared listing (which starts at most once per PollInterval): it is a
// call of its own, a listing of the VM on a provider with a Lister (see
// listOwn), else an Observe.
func (d *driver) look(ctx context.Context, pp *paced, a *journal.Attempt, now bool) ([]provider.Observed, error) {
	obs, err := d.lookAll(ctx, pp, a, now)
	if len(d.owners) > 0 {
		// A replaced VM has two live attempts, maybe in one location: an
		// instance of the other is neither this one's nor a duplicate.
		obs = slices.DeleteFunc(slices.Clone(obs), func(o provider.Observed) bool {
			n, ok := d.owners[o.ID]
			return ok && n != a.N
		})
	}
	return obs, err
}

// lookAll is look, with the instances of every attempt.
func (d *driver) lookAll(ctx context.Context, pp *paced, a *journal.Attempt, now bool) ([]provider.Observed, error) {
	loc := provider.Location{Region: a.Region, Zone: a.Zone}
	fresh := d.seen.Add(time.Nanosecond)
	if a.CreateSent.After(fresh) {
		fresh = a.CreateSent
	}
	if pp.lister != nil && !now {
		obs, started, err := pp.listFor(ctx, d.p.clock, loc, d.row.Name, fresh)
		if err == nil {
			d.seen = started
		}
		return obs, err
	}
	if pp.lister != nil {
		obs, started, err := pp.listOwn(ctx, loc, d.row.Name, d.now)
		if err != nil {
			return nil, err
		}
		d.seen = started
		return obs, nil
	}
	var started time.Time
	var obs []provider.Observed
	err := pp.call(ctx, "observe", loc, func(ctx context.Context) (err error) {
		started = d.now()
		obs, err = pp.Observe(ctx, loc, d.row.Name)
		return err
	})
	if err == nil {
		d.seen = started
	}
	return obs, err
}

// pickInstance chooses the instance to keep among those observed: a known id
// that is not broken, else the healthiest, oldest one.
func pickInstance(obs []provider.Observed, known []string) *provider.Observed {
	if len(obs) == 0 {
		return nil
	}
	rank := func(o *provider.Observed) int {
		r := 0
		switch o.Status {
		case provider.StatusRunning:
			r = 0
		case provider.StatusPending, provider.StatusUnknown:
			r = 1
		default:
			r = 2
		}
		if !slices.Contains(known, o.ID) {
			r += 3
		}
		return r
	}
	best := &obs[0]
	for i := 1; i < len(obs); i++ {
		o := &obs[i]
		if rank(o) < rank(best) || (rank(o) == rank(best) && o.Created.Before(best.Created)) {
			best = o
		}
	}
	return best
}

// boot polls Observe until the instance runs with an SSH endpoint, within
// the provider's BootTimeout counted from the create, or, for an instance
// that waits in the cloud's queue (provider.Observed.Queued), from when it
// leaves it: the queue is bounded by the launch's deadline alone. Entering
// and leaving the queue are journaled (phase queued, then boot), so a
// process that takes the VM over knows it waits.
func (d *driver) boot(ctx context.Context, pp *paced, a *journal.Attempt) error {
	bootEnd := a.CreateSent.Add(pp.caps.BootTimeout)
	if a.Phase == PhaseQueued {
		bootEnd = d.now().Add(pp.caps.BootTimeout)
	}
	for {
		obs, err := d.observe(ctx, pp, a)
		if err != nil && (provider.KindOf(err) != provider.Transient || context.Cause(ctx) != nil) {
			return err
		}
		if err == nil {
			inst := pickInstance(obs, a.InstanceIDs)
			if err := d.removeDuplicates(ctx, pp, a, obs, inst); err != nil {
				return err
			}
			switch {
			case inst == nil:
				if d.now().Sub(a.CreateSent) > pp.caps.ConsistencyWindow {
					return provider.Errorf(provider.Failed, a.Provider, "boot", "instance %s disappeared while booting", d.row.InstanceID)
				}
			case inst.ID != d.row.InstanceID:
				if err := d.recordInstance(ctx, a, inst.ID, EvAdopted); err != nil {
					return err
				}
				continue
			case inst.Queued:
				bootEnd = d.now().Add(pp.caps.BootTimeout)
				if a.Phase != PhaseQueued {
					msg := fmt.Sprintf("%s waits for capacity in %s's queue (vendor status %q)", inst.ID, a.Provider, inst.VendorStatus)
					ev := d.event(EvQueued, a, msg)
					ev.Phase = PhaseQueued // the phase it enters, as the phase event says
					if err := d.setPhase(ctx, a, PhaseQueued, ev); err != nil {
						return err
					}
				}
			case a.Phase == PhaseQueued && inst.Status != provider.StatusFailed:
				// Out of the queue: the boot timeout runs from now.
				bootEnd = d.now().Add(pp.caps.BootTimeout)
				if err := d.setPhase(ctx, a, PhaseBoot); err != nil {
					return err
				}
				continue
			case inst.Status == provider.StatusRunning && inst.SSH != nil:
				if d.running.IsZero() {
					d.running = d.seen
				}
				d.row.SSHHost, d.row.SSHPort, d.row.SSHUser = inst.SSH.Host, inst.SSH.Port, inst.SSH.User
				d.row.HostKey = a.HostKey
				a.Host = cmp.Or(inst.Host, a.Host)
				if next := d.afterBoot(); next != "" {
					return d.setPhase(ctx, a, next)
				}
				return d.ready(ctx, a)
			case inst.Status == provider.StatusFailed:
				return provider.Errorf(provider.Failed, a.Provider, "boot", "instance %s failed while booting (vendor status %q)", inst.ID, inst.VendorStatus)
			case inst.Status == provider.StatusStopping || inst.Status == provider.StatusTerminated:
				return provider.Errorf(provider.Failed, a.Provider, "boot", "instance %s stopped while booting (vendor status %q)", inst.ID, inst.VendorStatus)
			}
		}
		left := bootEnd.Sub(d.now())
		if left <= 0 {
			return provider.Errorf(provider.Failed, a.Provider, "boot", "instance %s not running with SSH after %v", d.row.InstanceID, pp.caps.BootTimeout)
		}
		if err := d.p.clock.Sleep(ctx, min(left, pp.caps.PollInterval)); err != nil {
			return err
		}
	}
}

// removeDuplicates deletes every observed instance of the VM but keep.
func (d *driver) removeDuplicates(ctx context.Context, pp *paced, a *journal.Attempt, obs []provider.Observed, keep *provider.Observed) error {
	var dups []string
	for _, o := range obs {
		if keep != nil && o.ID != keep.ID && o.Status != provider.StatusStopping {
			dups = append(dups, o.ID)
		}
	}
	if len(dups) == 0 {
		return nil
	}
	for _, id := range dups {
		if !slices.Contains(a.InstanceIDs, id) {
			a.InstanceIDs = append(a.InstanceIDs, id)
		}
	}
	// Write-ahead: the duplicate ids are journaled before they are deleted.
	if err := d.commit(ctx, &journal.Step{Attempts: []journal.Attempt{*a},
		Events: []journal.Event{d.event(EvDuplicate, a, "deleting "+strings.Join(dups, ","))}}); err != nil {
		return err
	}
	return d.retry(ctx, pp, a, "delete duplicates", func(ctx context.Context) error {
		return pp.Delete(ctx, provider.Location{Region: a.Region, Zone: a.Zone}, d.row.Name, dups)
	})
}

// retry runs a provider call op of attempt a, retrying transient errors
// with backoff until ctx ends.
func (d *driver) retry(ctx context.Context, pp *paced, a *journal.Attempt, op string, f func(context.Context) error) error {
	loc := provider.Location{Region: a.Region, Zone: a.Zone}
	callOp, _, _ := strings.Cut(op, " ") // "delete duplicates" is a delete
	for n := 0; ; n++ {
		err := pp.call(withRetry(ctx, n), callOp, loc, f)
		if err == nil || provider.KindOf(err) != provider.Transient || context.Cause(ctx) != nil {
			return err
		}
		if err := d.backoff(ctx, a, op, n, err); err != nil {
			return err
		}
	}
}

// backoff waits before retry n of op after a transient error, and says so.
func (d *driver) backoff(ctx context.Context, a *journal.Attempt, op string, n int, cause error) error {
	wait := d.p.backoff.Delay(n, provider.RetryAfterOf(cause))
	e := d.event(EvRetry, a, fmt.Sprintf("%s: %v; retry %d in %v", op, cause, n+1, wait.Round(time.Millisecond)))
	e.ErrorKind, e.VM, e.Time, e.Owner = provider.Transient.String(), d.row.Name, d.now(), d.p.owner
	d.p.emit([]journal.Event{e}) // retries are not journaled: they change no state
	traceRetry(ctx, op, n+1, wait, provider.RetryAfterOf(cause))
	if err := d.p.clock.Sleep(ctx, wait); err != nil {
		return errors.Join(err, cause)
	}
	return nil
}
