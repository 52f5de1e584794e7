package gpuprov

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/org/gpuprov/clock"
	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/provider"
)

// Phases of an attempt, as journaled in VM.Phase and Attempt.Phase.
const (
	PhasePrepare = "prepare"
	PhaseCreate  = "create"
	PhaseBoot    = "boot"
	// PhaseQueued is boot while the instance waits in the cloud's queue
	// for capacity (a flex-start create, Request.FlexStart): the launch's
	// deadline bounds it, not the provider's boot timeout.
	PhaseQueued    = "queued"
	PhaseConnect   = "connect"
	PhaseAccept    = "accept"
	PhaseBootstrap = "bootstrap"
	PhaseJoin      = "join"
)

// journalError marks a failed journal write. Once the journal cannot be
// written the engine must not touch the cloud again (every mutation is
// written ahead), so it stops at once and leaves the rest to Recover.
type journalError struct{ err error }

func (e *journalError) Error() string {
	if errors.Is(e.err, journal.ErrUnreachable) {
		// The backend's text says "journal unreachable" and why.
		return "gpuprov: " + e.err.Error()
	}
	return "gpuprov: journal write failed: " + e.err.Error()
}
func (e *journalError) Unwrap() error { return e.err }

// phaseError is a failure of the core's own phases (connect, bootstrap,
// join), as opposed to a cloud failure: it says nothing about the offer.
type phaseError struct {
	phase string
	err   error
}

func (e *phaseError) Error() string { return e.phase + ": " + e.err.Error() }
func (e *phaseError) Unwrap() error { return e.err }

// driver drives one VM from its journaled state to an end. It is used by one
// goroutine at a time.
type driver struct {
	p     *Provisioner
	row   journal.VM
	req   Request
	tried map[string]bool
	// hostKeys holds the private host key generated per attempt; it lives in
	// memory only and is lost (and regenerated) if the process dies.
	hostKeys map[int]*provider.HostKey
	conn     Conn
	join     func(ctx context.Context, n Node, c Conn) error // cluster nodes only
	// joinCluster says the VM must serve or join its cluster to be ready.
	joinCluster bool
	lastErr     error // why this process's last attempt failed
	// lastAttempt is why the last journaled attempt failed, for a driver
	// that took the VM over before this process made an attempt of its own.
	lastAttempt string
	// background: RecoverInBackground drives it; Close halts it.
	background bool
	// jr is the request as journaled (the VM row's Request).
	jr journaledRequest
	// planSince: the plans this driver uses are made no earlier (set when
	// it begins to wait for capacity, so that its next try sees new offers
	// however long the plan cache keeps them).
	planSince time.Time
	released  bool      // the last write freed the lease
	seen      time.Time // when the last observation used started
	// running is when boot first saw the instance running (zero: not in
	// this process); a flex-start VM's leash counts from it.
	running time.Time
	// intent is a teardown intent that waits for the teardown's first
	// mutation, or joins its torn-down confirmation (see teardown).
	intent *journal.Step
	// pending is a write that may wait for the driver's next one: the
	// confirmation that an attempt is torn down, which no cloud mutation
	// depends on. Joining it to the next attempt's first write saves an
	// fsync per failover; lost in a crash, Recover redoes the (idempotent)
	// teardown.
	pending *journal.Step
	// placementGroup is the compact cluster's placement group, if any;
	// clusterNodes and clusterMin the cluster's size and minimum
	// (journaledRequest).
	placementGroup           string
	clusterNodes, clusterMin int
	// plan is the plan nextOffer read last (a wait for capacity reads its
	// blocks).
	plan *PlanResult
	// restocked says the offer nextOffer returned last was blocked by a
	// stockout that a fresh plan shows over.
	restocked bool
	// owed are the torn-down attempts whose cleanup waits for the next
	// attempt (failover in place, see shared.go).
	owed []*journal.Attempt
	// deferred are the owed attempts whose cleanup this process deferred
	// (an owed attempt read from the journal may have been cleaned up
	// before a crash: its prepared data is not reused).
	deferred map[int]bool
	// unsent says, per attempt this process started, what it knows it
	// never sent: no Prepare request (nothing to clean up) or no create
	// (nothing to look for). An attempt taken over from the journal has no
	// entry: everything may have been sent.
	unsent map[int]*unsent
	// retiring says a teardown retires an interrupted attempt whose VM
	// was replaced (interrupt.go).
	retiring bool
	// owners maps the instances of a replaced VM's attempts to their
	// attempt (interrupt.go): its looks leave out the other attempts'.
	owners map[string]int
	// mounts are the volumes the create of the current attempt attaches,
	// on a provider whose volumes attach at create (volumes.go).
	mounts []provider.VolumeMount
}

// unsent is what an attempt is known not to have sent.
type unsent struct{ prepare, create bool }

// journaledRequest is a Request as the journal keeps it, with what resuming
// the VM needs to know besides.
type journaledRequest struct {
	Request
	// JoinCluster says whether the VM is a node of a cluster that a Joiner
	// forms: such a node is ready only once it serves or has joined its
	// cluster, also when Recover finishes it. Absent (nil) in journals
	// written before it existed.
	JoinCluster *bool `json:"join_cluster,omitempty"`
	// PlacementGroup is the placement group of a node of a compact
	// cluster (provider.InstanceSpec.PlacementGroup).
	PlacementGroup string `json:"placement_group,omitempty"`
	// ClusterNodes and ClusterMin are the node's cluster's size and the
	// nodes it needs ready (LaunchCluster's Nodes and MinNodes, a 0
	// minimum made Nodes): Recover launches the nodes a crash kept from
	// being journaled and deletes the cluster's ready nodes when fewer
	// than ClusterMin end ready. 0 in journals written before they existed.
	ClusterNodes int `json:"cluster_nodes,omitempty"`
	ClusterMin   int `json:"cluster_min,omitempty"`
	// ClientKeys are the SHA256 fingerprints of the client keys the
	// current attempt installed on the machine (WithSSH, WithSSHKey), so
	// that a process holding another key says so instead of timing out at
	// login. Empty in journals written before it existed.
	ClientKeys []string `json:"client_keys,omitempty"`
	// Interruptions are the VM's interruptions (interrupt.go), oldest
	// first: the last one without a ready VM since is being replaced.
	Interruptions []Interrupted `json:"interruptions,omitempty"`
}

func (p *Provisioner) newDriver(row journal.VM) (*driver, error) {
	d := &driver{p: p, row: row, tried: map[string]bool{}, hostKeys: map[int]*provider.HostKey{}, unsent: map[int]*unsent{}, deferred: map[int]bool{}, owners: map[string]int{}}
	var jr journaledRequest
	if err := json.Unmarshal(row.Request, &jr); err != nil {
		return nil, fmt.Errorf("gpuprov: VM %s: journaled request does not parse: %w", row.Name, err)
	}
	d.jr = jr
	d.req, d.placementGroup, d.clusterNodes, d.clusterMin = jr.Request, jr.PlacementGroup, jr.ClusterNodes, jr.ClusterMin
	if row.Cluster != "" {
		// Journals from before JoinCluster: a node joins when this process
		// can form clusters.
		d.joinCluster = p.joiner != nil
		if jr.JoinCluster != nil {
			d.joinCluster = *jr.JoinCluster
		}
	}
	return d, nil
}

// now is the Provisioner's clock.
func (d *driver) now() time.Time { return d.p.clock.Now() }

// commit writes st durably (with the VM update, if st.Update is &d.row) and
// then hands its events to the sinks. The write runs on a context detached
// from the caller's cancellation: a teardown after Ctrl-C must still be
// journaled.
func (d *driver) commit(ctx context.Context, st *journal.Step) error {
	// Every cloud mutation is journaled first: a driver that writes
	// nothing more sends nothing more.
	if err := d.halted(); err != nil {
		return err
	}
	// Writes that were allowed to wait (see teardown) go first, in the
	// same durable commit: a torn-down confirmation, then a teardown
	// intent.
	for _, p := range []*journal.Step{d.intent, d.pending} {
		if p == nil {
			continue
		}
		if p.Update != nil && st.Update == nil {
			st.Update = p.Update
		}
		st.ReleaseLease = st.ReleaseLease || p.ReleaseLease
		st.Attempts = append(slices.Clip(p.Attempts), st.Attempts...)
		st.Events = append(slices.Clip(p.Events), st.Events...)
		st.Blocks = append(slices.Clip(p.Blocks), st.Blocks...)
		st.Outcomes = append(slices.Clip(p.Outcomes), st.Outcomes...)
	}
	d.intent, d.pending = nil, nil
	now := d.now()
	if st.Update != nil {
		st.Update.UpdatedAt = now
	}
	for i := range st.Events {
		e := &st.Events[i]
		if e.Time.IsZero() {
			e.Time = now
		}
		if e.VM == "" {
			e.VM = d.row.Name
		}
		e.Owner = d.p.owner
	}
	wctx, cancel := journalCall(ctx)
	defer cancel()
	if err := d.p.j.Commit(wctx, st); err != nil {
		return &journalError{err}
	}
	if st.ReleaseLease {
		d.released = true
	}
	if len(st.Blocks) > 0 {
		d.p.blocksAdded(st.Blocks)
	}
	if len(st.Lifts) > 0 {
		d.p.blocksLifted(st.Lifts)
	}
	d.p.emit(st.Events)
	return nil
}

// journalCall returns the context of a driver's journal write (or a
// takeover's read): it outlives ctx's end, since what a cancelled or late
// launch did must still be recorded and undone, and is bounded by
// driverJournalWait, so a journal that does not answer ends the call.
func journalCall(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), driverJournalWait)
}

// driverJournalWait bounds one journal call of a driver.
const driverJournalWait = 30 * time.Second

func (p *Provisioner) emit(evs []journal.Event) {
	for _, e := range evs {
		p.log.Debug("event", "vm", e.VM, "type", e.Type, "attempt", e.Attempt, "phase", e.Phase,
			"provider", e.Provider, "region", e.Region, "kind", e.ErrorKind, "msg", e.Message)
		for _, s := range p.sinks {
			s(e)
		}
	}
}

// event builds an event about attempt a (nil: about the VM).
func (d *driver) event(typ string, a *journal.Attempt, msg string) journal.Event {
	e := journal.Event{Type: typ, Message: msg, Phase: d.row.Phase}
	if a != nil {
		e.Attempt, e.Provider, e.Region, e.Zone, e.Phase = a.N, a.Provider, a.Region, a.Zone, a.Phase
		if len(a.InstanceIDs) > 0 {
			e.InstanceID = a.InstanceIDs[0]
		}
	}
	return e
}

// run drives the VM to ready, failed or deleted.
func (d *driver) run(ctx context.Context) (*VM, error) {
	if !d.row.Deadline.IsZero() && d.row.State != journal.StateDeleting {
		var cancel context.CancelFunc
		ctx, cancel = clock.WithDeadline(ctx, d.p.clock, d.row.Deadline)
		defer cancel()
	}
	defer func() {
		if d.conn != nil {
			d.conn.Close() // the node stays up; only our session ends
		}
	}()
	var err error
	switch d.row.State {
	case journal.StatePending, journal.StateProvisioning, journal.StateWaiting:
		err = d.provision(ctx)
	case journal.StateDeleting:
		err = d.finishDelete(ctx)
	}
	return vmFromRow(d.row), err
}

// takeOverAttempts reads the VM's attempts for a driver that takes the VM
// over from the journal. An attempt left in phase create may have sent its
// create at any time up to now: its intent was journaled before the wait
// for the account's turn, and the process that sent it may have died
// before journaling anything else. Its CreateSent becomes now, so that the
// listing lag a look or a teardown waits out counts from the latest
// possible send, not from the intent.
//
// The read outlives ctx's end, as a commit does: a VM taken over after its
// launch's deadline passed must still learn what its attempts started, so
// that the launch ends the way it would have ended in time — failed, with
// everything torn down — rather than stay provisioning with its instances
// billing, taken over and given up by every Recover.
func (d *driver) takeOverAttempts(ctx context.Context) ([]journal.Attempt, error) {
	rctx, cancel := journalCall(ctx)
	defer cancel()
	attempts, err := d.p.j.Attempts(rctx, d.row.Name)
	if err != nil {
		return nil, fmt.Errorf("gpuprov: VM %s: reading attempts: %w", d.row.Name, err)
	}
	now := d.now()
	for i := range attempts {
		if a := &attempts[i]; a.State == journal.AttemptActive && a.Phase == PhaseCreate && now.After(a.CreateSent) {
			a.CreateSent = now
		}
	}
	return attempts, nil
}

// provision resumes the VM from its journaled attempt, then fails over
// through the offers until one is ready or the launch must end.
func (d *driver) provision(ctx context.Context) error {
	var attempts []journal.Attempt
	if d.row.Attempt > 0 { // a fresh launch has none to read
		var err error
		if attempts, err = d.takeOverAttempts(ctx); err != nil {
			return err
		}
	}
	for _, a := range attempts {
		if a.Error != "" {
			d.lastAttempt = a.Error // attempts come in order
		}
	}
	for i := range attempts {
		if a := &attempts[i]; a.N == d.row.Attempt && a.State != journal.AttemptTornDown {
			// Taken over from the journal: its instance may use the
			// region's shared side resources, so the teardowns below
			// must not ask to remove them.
			if pp, ok := d.p.providers[a.Provider]; ok {
				pp.holdShared(a)
			}
		}
	}
	for i := range attempts {
		a := &attempts[i]
		d.tried[a.OfferKey] = true
		d.own(a)
		if a.State == journal.AttemptTornDown && !a.CleanedUp {
			owed := *a // failover in place, cut short by the crash
			d.owed = append(d.owed, &owed)
		}
		if a.N == d.row.Attempt {
			continue
		}
		// The engine writes attempt k+1 only after attempt k is torn down,
		// so this finds nothing unless the journal was edited by hand, or
		// a replacement retires an interrupted attempt (its cleanup then
		// waits: the replacement may use the same side resources).
		if a.State == journal.AttemptActive || a.State == journal.AttemptTearingDown {
			if err := d.teardown(ctx, a, nil, len(d.jr.Interruptions) > 0); err != nil {
				return d.stuck(ctx, err)
			}
			d.retired(a, "its retirement was under way (finished after a restart)")
		}
	}
	if d.row.Attempt > 0 {
		var cur *journal.Attempt
		for i := range attempts {
			if attempts[i].N == d.row.Attempt {
				cur = &attempts[i]
			}
		}
		switch {
		case cur == nil:
			return fmt.Errorf("gpuprov: VM %s: journal names attempt %d but has no such attempt", d.row.Name, d.row.Attempt)
		case cur.State == journal.AttemptActive && context.Cause(ctx) != nil:
			// Taken over after the launch's time ran out (or its caller
			// gave up): the attempt is not resumed, whatever state its
			// machine reached, but ends as a failure would have in time.
			if err := d.afterFailure(ctx, cur, context.Cause(ctx)); err != nil {
				return err
			}
		case cur.State == journal.AttemptActive:
			// What earlier attempts owe elsewhere is paid before the
			// resumed attempt goes on, as startAttempt pays it before a
			// new one: the crash may have come between the attempt's
			// start and the payment's journaling.
			paid, err := d.payOwed(ctx, cur)
			if len(paid) > 0 {
				if d.pending == nil {
					d.pending = &journal.Step{}
				}
				d.pending.Attempts = append(d.pending.Attempts, paid...)
			}
			if err != nil {
				return d.stuck(ctx, fmt.Errorf("cleaning up after an earlier attempt: %w", err))
			}
			if end, err := d.attempt(ctx, cur, true); end {
				return err
			}
		case cur.State == journal.AttemptTearingDown:
			if err := d.teardown(ctx, cur, nil, false); err != nil {
				return d.stuck(ctx, err)
			}
		}
		if _, bought := blockBought(cur); cur.State == journal.AttemptTornDown && (aborts(cur.ErrorKind) || bought) {
			// The launch was ending (cancelled, out of time, a failure no
			// other offer can fix, or one after its block was bought) when
			// its process died: finish it the way it was going, not with a
			// new offer.
			return d.fail(ctx, fmt.Errorf("%w: %s (finished after a restart)", ErrAborted, cur.Error))
		}
	}
	for {
		if err := context.Cause(ctx); err != nil {
			return d.fail(ctx, err)
		}
		if d.row.State == journal.StateWaiting {
			// Resumed while waiting (after a restart): the wait goes on
			// until its journaled next try.
			if err := d.sleepUntilNextTry(ctx); err != nil {
				return err
			}
		}
		max := d.req.MaxOffers
		if max == 0 {
			max = d.p.maxOffers
		}
		if len(d.tried) >= max {
			err := d.withLast(fmt.Errorf("%w: tried %d offers (the bound)", ErrOffersExhausted, len(d.tried)))
			if d.req.WaitForCapacity {
				if werr := d.waitForCapacity(ctx, err); werr != nil {
					return werr
				}
				continue
			}
			return d.fail(ctx, err)
		}
		offer, err := d.nextOffer(ctx)
		if err != nil {
			var je *journalError
			if errors.As(err, &je) {
				return err
			}
			err = d.withLast(err)
			if d.req.WaitForCapacity && errors.Is(err, ErrNoOffers) && (d.req.WaitForOffers || !d.plan.noneFit()) {
				if werr := d.waitForCapacity(ctx, err); werr != nil {
					return werr
				}
				continue
			}
			return d.fail(ctx, err)
		}
		a, err := d.startAttempt(ctx, offer)
		if err != nil {
			return err
		}
		if end, err := d.attempt(ctx, a, false); end {
			return err
		}
	}
}

// attempt runs attempt a (resumed: taken over from the journal) and, when
// it fails, what its failure leads to (the block, the teardown, the end of
// the launch or not), under the span gpuprov.attempt. end says the launch
// ended: ready when err is nil.
func (d *driver) attempt(ctx context.Context, a *journal.Attempt, resumed bool) (end bool, err error) {
	ctx, sp := d.p.child(ctx, "gpuprov.attempt", "")
	if sp.IsRecording() {
		var o provider.Offer
		if json.Unmarshal(a.Offer, &o) == nil {
			sp.SetAttributes(attemptAttrs(a, &o, resumed)...)
			ctx = withCallTags(ctx, o.InstanceType)
		}
	}
	err = d.runAttempt(ctx, a, resumed)
	if err == nil {
		endSpan(sp, nil)
		return true, nil
	}
	stop := d.afterFailure(ctx, a, err)
	endSpan(sp, err) // the attempt failed, whether the launch goes on or not
	return stop != nil, stop
}

// withLast adds to err, which ends the launch for want of offers, why the
// last attempt failed: the cause a caller acts on (a refused SSH key, a
// quota) is there, not only in the events.
func (d *driver) withLast(err error) error {
	// Not the VM's LastError: while it waits, that is the waiting reason,
	// which holds the previous round's "last attempt failed" already.
	switch {
	case d.lastErr != nil:
		return fmt.Errorf("%w; the last attempt failed: %w", err, d.lastErr)
	case d.lastAttempt != "": // taken over: the journaled text
		return fmt.Errorf("%w; the last attempt failed: %s", err, d.lastAttempt)
	}
	return err
}

// firstPhase is where an attempt on o starts: the purchase of a block not
// yet bought, else prepare.
func firstPhase(o *provider.Offer) string {
	if o.Block != nil && o.Reservation == nil {
		return PhasePurchase
	}
	return PhasePrepare
}

// startAttempt journals a new attempt on offer before anything is prepared.
func (d *driver) startAttempt(ctx context.Context, o *provider.Offer) (*journal.Attempt, error) {
	if pp, ok := d.p.providers[o.Provider]; ok && o.Billing == nil {
		// The attempt records how its instance bills, so that the
		// journal alone counts the bill (cost.go).
		oc, b := *o, pp.caps.Billing
		oc.Billing = &b
		o = &oc
	}
	raw, err := json.Marshal(o)
	if err != nil {
		return nil, fmt.Errorf("gpuprov: encoding offer: %w", err)
	}
	n := d.row.Attempt + 1
	a := &journal.Attempt{
		VM: d.row.Name, N: n, Provider: o.Provider, Region: o.Location.Region, Zone: o.Location.Zone,
		OfferKey: o.Key(), Offer: raw, State: journal.AttemptActive, Phase: firstPhase(o),
		Token: d.token(n), StartedAt: d.now(), Host: o.Host,
	}
	d.tried[a.OfferKey] = true
	d.unsent[n] = &unsent{prepare: true, create: true}
	if pp, ok := d.p.providers[a.Provider]; ok {
		// Before what other attempts owe is paid: the region's shared
		// resources must not look unused in between.
		pp.holdShared(a)
	}
	if keys := d.p.clientKeys(); !slices.Equal(keys, d.jr.ClientKeys) {
		// This attempt installs this process's keys: the VM's record
		// says so from its first write on.
		d.jr.ClientKeys = keys
		raw, err := json.Marshal(d.jr)
		if err != nil {
			return nil, fmt.Errorf("gpuprov: encoding request: %w", err)
		}
		d.row.Request = raw
	}
	d.row.State, d.row.Phase, d.row.Attempt = journal.StateProvisioning, firstPhase(o), n
	d.row.Provider, d.row.Region, d.row.Zone, d.row.Offer, d.row.PricePerHour = o.Provider, o.Location.Region, o.Location.Zone, raw, o.PricePerHour
	d.row.InstanceID, d.row.SSHHost, d.row.SSHPort, d.row.SSHUser, d.row.HostKey = "", "", 0, "", ""
	d.row.NextTry = time.Time{}
	msg := fmt.Sprintf("%s %s %s×%d $%.2f/h", o.InstanceType, o.Location, o.GPU, o.GPUCount, o.PricePerHour)
	if o.Spot {
		msg += " spot"
	}
	if r := d.replacing(); r != nil && r.Spot && !o.Spot {
		msg += fmt.Sprintf(" (on-demand: replaces interrupted spot instance %s; no untried spot offer ranks before it)", r.InstanceID)
	}
	if d.restocked {
		msg += " (in stock again: its stockout block is passed over)"
		d.restocked = false
	}
	st := &journal.Step{Update: &d.row, Attempts: []journal.Attempt{*a}, Events: []journal.Event{d.event(EvAttempt, a, msg)}}
	if d.pending != nil && d.intent == nil {
		// Only an earlier failure's confirmation waits: the attempt joins
		// it, and both are written before the first request this attempt
		// sends (see prepare) — with the create intent, when its Prepare
		// sends none, so that a failover costs one fsync.
		d.pending.Attempts = append(d.pending.Attempts, st.Attempts...)
		d.pending.Events = append(d.pending.Events, st.Events...)
		d.pending.Update = st.Update
	} else if err := d.commit(ctx, st); err != nil {
		return nil, err
	}
	// What the earlier attempts owe elsewhere is paid before this
	// attempt's Prepare: an adapter's per-VM resources may be named for
	// the VM alone (an account-wide key, a Secret), so a cleanup after this
	// attempt's Prepare could remove what it made. payOwed journals what
	// waits (the earlier attempts torn down, this one started) before its
	// first cleanup; the payment is journaled with the next write.
	paid, err := d.payOwed(ctx, a)
	if len(paid) > 0 {
		if d.pending == nil {
			d.pending = &journal.Step{}
		}
		d.pending.Attempts = append(d.pending.Attempts, paid...)
	}
	if err != nil {
		return nil, d.stuck(ctx, fmt.Errorf("cleaning up after an earlier attempt: %w", err))
	}
	return a, nil
}

// token derives the create idempotency token of attempt n from the VM's
// identity: a UUIDv5-shaped value, the same for every replay of the attempt.
func (d *driver) token(n int) string {
	return tokenFor(d.p.j.Installation(), d.row.ID, n)
}

func newID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	return hex.EncodeToString(b[:])
}

// fail ends the launch as failed. Every attempt is torn down by now.
func (d *driver) fail(ctx context.Context, cause error) error {
	if err := d.halted(); err != nil {
		return err
	}
	if err := d.retire(ctx, nil, true); err != nil {
		return d.stuck(ctx, errors.Join(cause, err))
	}
	if err := d.releaseVolumes(ctx, false); err != nil {
		return d.stuck(ctx, errors.Join(cause, err))
	}
	paid, err := d.payOwed(ctx, nil)
	if err != nil {
		if len(paid) > 0 {
			d.pending = &journal.Step{Attempts: paid}
		}
		return d.stuck(ctx, errors.Join(cause, fmt.Errorf("cleaning up after an earlier attempt: %w", err)))
	}
	now := d.now()
	d.row.State, d.row.Phase, d.row.EndedAt = journal.StateFailed, "", now
	d.row.LastError, d.row.LastErrorKind = cause.Error(), errorKindName(cause)
	d.row.InstanceID, d.row.SSHHost, d.row.SSHPort = "", "", 0
	if err := d.commit(ctx, &journal.Step{Update: &d.row, ReleaseLease: true, Attempts: paid,
		Events: []journal.Event{{Type: EvFailed, Message: cause.Error(), ErrorKind: d.row.LastErrorKind}}}); err != nil {
		return errors.Join(cause, err)
	}
	if d.row.Attempt == 0 {
		return errorf("launch %s failed: %w", d.row.Name, cause)
	}
	return errorf("launch %s failed (everything it started was torn down): %w", d.row.Name, cause)
}

// stuck records a teardown that could not finish: the VM stays deleting,
// loudly, for Recover, Sweep or Delete to finish.
func (d *driver) stuck(ctx context.Context, cause error) error {
	var je *journalError
	if errors.As(cause, &je) || errors.Is(cause, journal.ErrLeaseLost) || errors.Is(cause, journal.ErrConflict) {
		return cause
	}
	d.row.State, d.row.LastError, d.row.LastErrorKind = journal.StateDeleting, cause.Error(), errorKindName(cause)
	if err := d.commit(ctx, &journal.Step{Update: &d.row, ReleaseLease: true,
		Events: []journal.Event{{Type: EvTeardownError, Message: cause.Error(), ErrorKind: d.row.LastErrorKind}}}); err != nil {
		return errors.Join(cause, err)
	}
	return errorf("VM %s: %w: %w", d.row.Name, ErrTeardownIncomplete, cause)
}

func errorKindName(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, context.Canceled):
		return KindCanceled
	case errors.Is(err, context.DeadlineExceeded):
		return KindDeadline
	case errors.Is(err, ErrNoOffers), errors.Is(err, ErrOffersExhausted):
		return KindNoOffers
	}
	var pe *phaseError
	if errors.As(err, &pe) {
		return pe.phase
	}
	return provider.KindOf(err).String()
}

// aborts reports whether a journaled error kind ends the launch rather than
// moving it to the next offer (see afterFailure).
func aborts(kind string) bool {
	switch kind {
	case "canceled", "deadline", PhaseBootstrap, PhaseJoin,
		provider.Transient.String(), provider.InvalidRequest.String(), provider.Credentials.String():
		return true
	}
	return false
}

// isFatal reports errors after which the driver must stop touching the VM.
func isFatal(err error) bool {
	var je *journalError
	return errors.As(err, &je) || errors.Is(err, journal.ErrLeaseLost) || errors.Is(err, journal.ErrConflict) ||
		errors.Is(err, ErrClosed) || errors.Is(err, ErrKeyMismatch)
}

// halted returns ErrClosed, wrapped, once the Provisioner of a driver left
// running in the background (RecoverInBackground) is closed: the driver
// then stops where it is, writing and sending nothing more, and the next
// Recover goes on from the journal. Nil otherwise.
func (d *driver) halted() error {
	if d.background && context.Cause(d.p.background) != nil {
		return errorf("VM %s: stopped in phase %q: %w", d.row.Name, d.row.Phase, ErrClosed)
	}
	return nil
}
