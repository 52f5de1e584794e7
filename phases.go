package gpuprov

import (
	"cmp"
	"context"
	"encoding/pem"
	"fmt"
	"time"

	"github.com/org/gpuprov/clock"
	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/provider"
)

func pemEncode(b *pem.Block) []byte { return pem.EncodeToMemory(b) }

// afterBoot is the phase that follows a successful boot; "" is ready.
func (d *driver) afterBoot() string {
	if d.p.connector != nil {
		return PhaseConnect
	}
	return ""
}

// node describes the VM's running instance for the connect, bootstrap and
// join phases.
func (d *driver) node() Node {
	gpu := d.offerGPU()
	return Node{
		VM: d.row.Name, Cluster: d.row.Cluster, Provider: d.row.Provider,
		Location: provider.Location{Region: d.row.Region, Zone: d.row.Zone}, InstanceID: d.row.InstanceID,
		SSH:      provider.SSHEndpoint{Host: d.row.SSHHost, Port: d.row.SSHPort, User: d.row.SSHUser},
		PublicIP: d.row.SSHHost, GPU: gpu.GPU, GPUCount: gpu.Count, HostKey: d.row.HostKey,
	}
}

// offerGPU returns the GPU model and count of the offer the VM's attempt
// is on (one of the request's alternatives), else of the request's first
// alternative.
func (d *driver) offerGPU() GPUChoice {
	var o provider.Offer
	if jsonUnmarshal(d.row.Offer, &o) == nil && o.GPU != "" && o.GPUCount > 0 {
		return GPUChoice{GPU: o.GPU, Count: o.GPUCount}
	}
	return d.req.Alternatives()[0]
}

// nodePhases runs connect, accept, bootstrap and join, each journaled on
// entry, and then marks the VM ready. A resumed launch reconnects first
// (and judges the machine again if it was cut off in accept: the probe
// only reads).
func (d *driver) nodePhases(ctx context.Context, a *journal.Attempt) error {
	if d.conn == nil {
		if err := d.p.checkClientKey(d.row.Name, d.jr.ClientKeys); err != nil {
			return err // fatal: left as it is for a process with the key
		}
		sctx, sp := d.p.child(ctx, phaseSpan, PhaseConnect)
		cctx, cancel := clock.WithDeadline(sctx, d.p.clock, d.now().Add(d.p.sshTO))
		conn, err := d.p.connector.Connect(cctx, d.node())
		cancel()
		endSpan(sp, err)
		if err != nil {
			return &phaseError{PhaseConnect, err}
		}
		d.conn = fencedConn{conn}
		if d.row.HostKey == "" && conn.HostKey() != "" {
			d.row.HostKey, a.HostKey = conn.HostKey(), conn.HostKey()
			if err := d.commit(ctx, &journal.Step{Update: &d.row, Attempts: []journal.Attempt{*a},
				Events: []journal.Event{d.event(EvHostKeyPinned, a, conn.HostKey())}}); err != nil {
				return err
			}
		}
	}
	if err := d.mountVolumes(ctx, a); err != nil {
		return err
	}
	steps := []struct {
		phase string
		run   func(context.Context) error
	}{
		{PhaseAccept, nil},
		{PhaseBootstrap, nil},
		{PhaseJoin, nil},
	}
	if d.accepts() {
		steps[0].run = func(ctx context.Context) error { return d.accept(ctx, a) }
	}
	if d.p.bootstrapper != nil {
		steps[1].run = func(ctx context.Context) error { return d.p.bootstrapper.Bootstrap(ctx, d.node(), d.conn) }
	}
	if d.join != nil {
		steps[2].run = func(ctx context.Context) error { return d.join(ctx, d.node(), d.conn) }
	}
	started := a.Phase == PhaseConnect
	for _, s := range steps {
		if !started && s.phase != a.Phase {
			continue
		}
		started = true
		if s.run == nil {
			continue
		}
		if a.Phase != s.phase {
			if err := d.setPhase(ctx, a, s.phase); err != nil {
				return err
			}
		}
		pctx, sp := d.p.child(ctx, phaseSpan, s.phase)
		sctx, cancel := clock.WithDeadline(pctx, d.p.clock, d.now().Add(d.p.stepTO))
		err := s.run(sctx)
		cancel()
		endSpan(sp, err)
		if err != nil {
			return &phaseError{s.phase, err}
		}
	}
	return d.ready(ctx, a)
}

// reclaimMargin is how long before a reservation starts terminating its
// instances (provider.Reservation.Reclaims) the leash of a VM in it ends:
// time for gpuprov's own teardown to run first.
const reclaimMargin = 5 * time.Minute

// runEnd is when the leash of an instance that the cloud deletes run after
// it started running (a flex-start VM's maxRunDuration) ends: a margin
// before the cloud's end (a tenth of the run, at most 10 minutes), so the
// VM is deleted by gpuprov, through its teardown, rather than killed.
func runEnd(run time.Duration, started time.Time) time.Time {
	return started.Add(run - min(run/10, 10*time.Minute))
}

// ready marks the attempt succeeded and the VM ready.
func (d *driver) ready(ctx context.Context, a *journal.Attempt) error {
	retireErr := d.retire(ctx, a, false)
	if retireErr != nil && isFatal(retireErr) {
		return retireErr
	}
	now := d.now()
	replaced := d.replacing()
	a.Phase, a.State, a.EndedAt = "", journal.AttemptSucceeded, now
	d.row.State, d.row.Phase, d.row.ReadyAt, d.row.LastError, d.row.LastErrorKind = journal.StateReady, "", now, "", ""
	ttlFrom := now
	if replaced != nil && !replaced.ReadySince.IsZero() {
		ttlFrom = replaced.ReadySince // a replacement keeps the VM's TTL
	}
	d.row.NextTry, d.row.ExpiresAt = time.Time{}, expiry(&d.req, ttlFrom, d.capEnd(ctx, a, now))
	var o provider.Offer
	if jsonUnmarshal(a.Offer, &o) == nil {
		var ends []time.Time
		if o.MaxRunDuration > 0 {
			ends = append(ends, runEnd(o.MaxRunDuration, cmp.Or(d.running, now)))
		}
		if r := o.Reservation; r != nil && !r.Ends.IsZero() && r.Reclaims > 0 {
			ends = append(ends, r.Ends.Add(-r.Reclaims-reclaimMargin))
		}
		for _, end := range ends {
			if d.row.ExpiresAt.IsZero() || end.Before(d.row.ExpiresAt) {
				d.row.ExpiresAt = end
			}
		}
	}
	msg := fmt.Sprintf("%s in %v", d.row.InstanceID, now.Sub(d.row.CreatedAt).Round(1e6))
	if !d.row.ExpiresAt.IsZero() {
		msg += fmt.Sprintf("; expires at %s", d.row.ExpiresAt.UTC().Format(time.RFC3339))
	}
	evs := []journal.Event{d.event(EvReady, a, msg)}
	if retireErr != nil {
		// The replacement stands; the interrupted machine that could not
		// be confirmed gone stays an attempt tearing down, which Delete
		// finishes.
		d.row.LastError, d.row.LastErrorKind = "retiring the interrupted machine: "+retireErr.Error(), errorKindName(retireErr)
		evs = append(evs, d.event(EvTeardownError, nil, d.row.LastError))
	}
	return d.commit(ctx, &journal.Step{Update: &d.row, ReleaseLease: true, Attempts: []journal.Attempt{*a},
		Events: evs, Lifts: d.liftStockout(ctx, a),
		Outcomes: d.outcome(a, journal.OutcomeReady)})
}

// liftStockout returns the lift of a stockout block on a's offer made
// before a's create went out, if there is one: the offer had capacity after
// all, and the VMs waiting for it should not wait out the block. A block
// made after the create (another VM found the offer out since) stands.
func (d *driver) liftStockout(ctx context.Context, a *journal.Attempt) []journal.Lift {
	var o provider.Offer
	if a.CreateSent.IsZero() || jsonUnmarshal(a.Offer, &o) != nil {
		return nil
	}
	b, ok := d.p.blockedNow(ctx, &o)
	if !ok || b.Key != blockKey(&o, provider.ScopeOffer) || b.ErrorKind != provider.Capacity.String() || !b.CreatedAt.Before(a.CreateSent) {
		return nil
	}
	return []journal.Lift{{Key: b.Key, Before: a.CreateSent}}
}
