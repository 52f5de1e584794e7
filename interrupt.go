package gpuprov

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/org/gpuprov/clock"
	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/ssh"
)

// Interruption events.
const (
	// EvInterruption: the cloud announced that a ready spot VM's instance
	// is about to be interrupted (its message says how and when), or a
	// watch found it reclaimed without a notice.
	EvInterruption = "interruption"
	// EvReplacing: the VM's replacement launch starts (Request.
	// OnInterruption); its attempts follow as a launch's do.
	EvReplacing = "replacing"
	// EvRetired: the interrupted instance of a replaced VM is deleted,
	// its replacement being ready (or the instance reclaimed).
	EvRetired = "retired"
)

// Interruption is what the hook of WithInterruptionHandler is told.
type Interruption struct {
	// VM is the VM as it was when the notice came: ready, on the
	// interrupted instance.
	VM *VM
	// InstanceID is the interrupted instance.
	InstanceID string
	// Notice is the cloud's announcement (Kind, its time, its words).
	Notice provider.Notice
	// At is when the cloud acts: the notice's time, or, when the cloud
	// gave none, when the notice was heard plus the cloud's documented
	// lead. Zero for a rebalance recommendation (no reclaim is set).
	At time.Time
	// Left is At less the time the hook was called (0 once it passed).
	Left time.Duration
	// Heard says the notice came ahead of the interruption; false: the
	// instance was found reclaimed already.
	Heard bool
	// Replacing says a replacement launch started (Request.OnInterruption).
	Replacing bool
	// SSH is a connection to the interrupted machine, for a checkpoint
	// or a drain, valid until the hook returns; nil when the machine is
	// gone or could not be reached.
	SSH *ssh.Client
}

// InterruptionHandler is a caller's hook on an interruption notice: a
// checkpoint, a drain. Its ctx ends at the interruption's time (At; a
// rebalance recommendation: after DefaultRebalanceHook). Where the cloud
// takes an acknowledgement (Azure's Scheduled Events), it is sent when the
// hook returns, so a hook that finishes early lets the interruption come
// early.
type InterruptionHandler func(ctx context.Context, in Interruption)

// DefaultRebalanceHook bounds the hook of a rebalance recommendation.
const DefaultRebalanceHook = 2 * time.Minute

// WithInterruptionHandler runs h on every interruption of a ready spot VM
// that this Provisioner's watch hears of (WithReaper), once per
// interruption, in the process that took it (the one holding the VM's
// lease while the interruption was journaled).
func WithInterruptionHandler(h InterruptionHandler) Option {
	return func(p *Provisioner) { p.onInterruption = h }
}

// WithNoticePoll sets how often the watch of a spot VM runs the cloud's
// probe on the machine (default provider.NoticeEvery, what AWS advises).
func WithNoticePoll(every time.Duration) Option {
	return func(p *Provisioner) {
		if every < 100*time.Millisecond {
			p.pending = append(p.pending, fmt.Errorf("gpuprov: WithNoticePoll(%v): want at least 100ms", every))
			return
		}
		p.noticeEvery = every
	}
}

// Interrupted is one interruption of a VM, as its journal keeps it (in the
// journaled request) and VM.Interruptions shows it.
type Interrupted struct {
	// Attempt and InstanceID are what was interrupted.
	Attempt    int    `json:"attempt"`
	InstanceID string `json:"instance_id"`
	// Offer is the interrupted attempt's offer key; Spot whether it was.
	Offer string `json:"offer,omitempty"`
	Spot  bool   `json:"spot,omitempty"`
	// Kind and Detail are the notice's; Heard when it was heard (or the
	// reclaim found), At when the cloud acts (zero: not said).
	Kind   provider.NoticeKind `json:"kind"`
	Detail string              `json:"detail,omitempty"`
	Heard  time.Time           `json:"heard"`
	At     time.Time           `json:"at,omitzero"`
	// Notice says it was announced ahead; false: found reclaimed.
	Notice bool `json:"notice,omitempty"`
	// Replace is the policy the replacement followed ("" none).
	Replace InterruptionPolicy `json:"replace,omitempty"`
	// ReadySince is when the VM first became ready, on its first
	// machine: its TTL counts from then, across replacements.
	ReadySince time.Time `json:"ready_since,omitzero"`
}

// replaces reports whether kind ends the instance, so that a replacement
// is due: a rebalance recommendation is a risk, not a reclaim.
func replaces(kind provider.NoticeKind) bool { return kind != provider.NoticeRebalance }

// watcher is the set of spot VMs this Provisioner watches (WithReaper).
type watcher struct {
	mu   sync.Mutex
	vms  map[string]*watch // by VM name
	done map[string]bool   // name|instance|kind handled by this process
	// gone counts, per name|instance, the ticks in a row whose
	// observation found the instance missing: a listing's lag must not
	// pass for a reclaim.
	gone map[string]int
	wg   sync.WaitGroup
}

// watch is the watch of one VM's instance.
type watch struct {
	instance string
	cancel   context.CancelFunc
	// live says the SSH session runs the probe (its first output came);
	// while it does, the tick does not observe the VM. looking says an
	// observation of it runs (one at a time).
	live, looking bool
}

// spotReady reports whether row is a ready spot VM, and its offer.
func spotReady(row journal.VM) (provider.Offer, bool) {
	var o provider.Offer
	if row.State != journal.StateReady || row.InstanceID == "" || jsonUnmarshal(row.Offer, &o) != nil || !o.Spot {
		return o, false
	}
	return o, true
}

// syncWatches starts a watch for every ready spot VM of rows that
// has none, stops those of VMs that are not ready on the same instance any
// more, and observes the watched VMs whose machine cannot be heard from
// (no probe, no login key, or a session that is down): a preemption seen
// so, or a notice the cloud's API gives (Observed.Notice), is handled as a
// heard notice is.
func (p *Provisioner) syncWatches(ctx context.Context, rows []journal.VM) {
	w := &p.watch
	w.mu.Lock()
	keep := map[string]bool{}
	var look []journal.VM
	for _, row := range rows {
		o, ok := spotReady(row)
		if !ok {
			continue
		}
		keep[row.Name] = true
		cur := w.vms[row.Name]
		if cur != nil && cur.instance != row.InstanceID {
			cur.cancel()
			cur = nil
		}
		if cur == nil {
			cur = &watch{instance: row.InstanceID, cancel: func() {}}
			if probe, ok := p.probeFor(row, o); ok {
				wctx, cancel := context.WithCancel(ctx)
				cur.cancel = cancel
				w.wg.Add(1)
				go func() {
					defer w.wg.Done()
					p.watchMachine(wctx, ctx, row, probe)
				}()
			}
			w.vms[row.Name] = cur
		}
		if !cur.live && !cur.looking {
			cur.looking = true
			look = append(look, row)
		}
	}
	for name, cur := range w.vms {
		if !keep[name] {
			cur.cancel()
			delete(w.vms, name)
		}
	}
	w.mu.Unlock()
	for _, row := range look {
		// In the background: a hook must not hold up the reaper.
		w.wg.Go(func() {
			p.lookAt(ctx, row)
			w.mu.Lock()
			if cur := w.vms[row.Name]; cur != nil {
				cur.looking = false
			}
			w.mu.Unlock()
		})
	}
}

// stopWatches ends every watch and waits for them (Close).
func (p *Provisioner) stopWatches() {
	w := &p.watch
	w.mu.Lock()
	for name, cur := range w.vms {
		cur.cancel()
		delete(w.vms, name)
	}
	w.mu.Unlock()
	w.wg.Wait()
}

// setLive records whether the watch of name on instance hears the machine.
func (p *Provisioner) setLive(name, instance string, live bool) {
	w := &p.watch
	w.mu.Lock()
	defer w.mu.Unlock()
	if cur := w.vms[name]; cur != nil && cur.instance == instance {
		cur.live = live
	}
}

// probeFor is the notice probe of row's machine, if its cloud has one and
// this process can log in.
func (p *Provisioner) probeFor(row journal.VM, o provider.Offer) (provider.NoticeProbe, bool) {
	pp, ok := p.providers[row.Provider]
	if !ok || p.loginKey() == nil || row.SSHHost == "" || row.HostKey == "" {
		return provider.NoticeProbe{}, false
	}
	nw, ok := pp.CloudProvider.(provider.NoticeWatcher)
	if !ok {
		return provider.NoticeProbe{}, false
	}
	probe, ok := nw.NoticeProbe(provider.NoticeTarget{Name: row.Name, InstanceID: row.InstanceID,
		Location: provider.Location{Region: row.Region, Zone: row.Zone}, Spot: o.Spot})
	if !ok || probe.Command == "" || probe.Parse == nil {
		return provider.NoticeProbe{}, false
	}
	return probe, true
}

// noticeSep stands for a newline of a probe's output on the watch's
// stream: each output is one line.
const noticeSep = '\036'

// noticeScript is the loop the watch runs on the machine: the probe every
// every, one line out per output that differs from the last (the first
// always: it says the watch runs).
func noticeScript(command string, every time.Duration) string {
	return fmt.Sprintf("prev=x; while :; do out=$( { %s\n} 2>/dev/null | tr '\\n' '\\036'); "+
		"if [ \"$out\" != \"$prev\" ]; then printf '%%s\\n' \"$out\"; prev=$out; fi; sleep %s; done",
		command, strings.TrimSuffix(fmt.Sprintf("%.3f", every.Seconds()), "0"))
}

// watchMachine keeps one SSH session on row's machine that runs the probe,
// until ctx ends (the VM is not ready on this instance any more, or the
// Provisioner closes); a notice is handled on base, the reaper's context. A session that drops (the machine is gone, the
// network failed) is opened again after a pause; meanwhile the tick
// observes the VM through its cloud.
func (p *Provisioner) watchMachine(ctx, base context.Context, row journal.VM, probe provider.NoticeProbe) {
	script := noticeScript(probe.Command, p.noticeEvery)
	for {
		c, err := p.SSH(ctx, row.Name)
		if err == nil {
			// A notice is handled on the reaper's context, not the
			// watch's, which ends as soon as the VM is replaced; the
			// session stays open until its hook is done with it.
			var handling sync.WaitGroup
			lines := &lineWriter{line: func(line string) {
				p.setLive(row.Name, row.InstanceID, true)
				out := []byte(strings.ReplaceAll(line, string(noticeSep), "\n"))
				if len(bytes.TrimSpace(out)) == 0 {
					return
				}
				notices, perr := probe.Parse(out)
				if perr != nil {
					p.log.Warn("interruption watch: the probe's answer does not parse", "vm", row.Name, "err", perr)
				}
				for _, n := range notices {
					handling.Go(func() { p.heard(base, row, n, probe.Lead, true, false, c) })
				}
			}}
			_, err = c.Run(ctx, script, ssh.WithOutput(lines, io.Discard))
			handling.Wait()
			c.Close()
		}
		p.setLive(row.Name, row.InstanceID, false)
		if ctx.Err() != nil {
			return
		}
		p.log.Debug("interruption watch: the session ended", "vm", row.Name, "err", err)
		if p.clock.Sleep(ctx, cmp.Or(p.reapEvery, time.Minute)) != nil {
			return
		}
	}
}

// lineWriter calls line for each full line written to it.
type lineWriter struct {
	buf  []byte
	line func(string)
}

func (w *lineWriter) Write(b []byte) (int, error) {
	w.buf = append(w.buf, b...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		l := string(w.buf[:i])
		w.buf = w.buf[i+1:]
		w.line(l)
	}
	if len(w.buf) > 1<<20 { // a probe that never ends a line
		w.buf = w.buf[:0]
	}
	return len(b), nil
}

// lookAt observes a watched VM's instance through its cloud: a notice the
// API gives, or a reclaim (the instance preempted, or missing on two ticks
// in a row), is handled as a heard notice.
func (p *Provisioner) lookAt(ctx context.Context, row journal.VM) {
	pp, ok := p.providers[row.Provider]
	if !ok {
		return
	}
	loc := provider.Location{Region: row.Region, Zone: row.Zone}
	var obs []provider.Observed
	err := pp.call(ctx, "observe", loc, func(ctx context.Context) (err error) {
		obs, err = pp.Observe(ctx, loc, row.Name)
		return err
	})
	if err != nil {
		p.log.Warn("interruption watch: observing", "vm", row.Name, "err", err)
		return
	}
	key := row.Name + "|" + row.InstanceID
	i := slices.IndexFunc(obs, func(o provider.Observed) bool { return o.ID == row.InstanceID })
	if i >= 0 && obs[i].Notice != nil {
		p.heard(ctx, row, *obs[i].Notice, 0, true, false, nil)
		return
	}
	if i >= 0 && obs[i].Status != provider.StatusStopping && obs[i].Status != provider.StatusTerminated && obs[i].Status != provider.StatusFailed {
		p.watch.mu.Lock()
		delete(p.watch.gone, key)
		p.watch.mu.Unlock()
		return
	}
	// Missing or stopped: a Diagnoser says whether the cloud reclaimed it.
	dg, err := p.Health(ctx, row.Name)
	if err != nil {
		p.log.Warn("interruption watch: diagnosing", "vm", row.Name, "err", err)
		return
	}
	fi := slices.IndexFunc(dg.Findings, func(f provider.Finding) bool { return f.Code == "preempted" })
	if fi < 0 {
		if dg.Exists && dg.Status == provider.StatusRunning {
			return
		}
		p.watch.mu.Lock()
		p.watch.gone[key]++
		n := p.watch.gone[key]
		p.watch.mu.Unlock()
		if n < 2 {
			return // seen once: a listing's lag, maybe
		}
	}
	n := provider.Notice{Kind: provider.NoticePreempt, Detail: "the instance was reclaimed without a notice"}
	if fi >= 0 {
		n.At, n.Detail = dg.Findings[fi].At, dg.Findings[fi].Message
	}
	p.heard(ctx, row, n, 0, false, fi >= 0, nil)
}

// heard handles notice n of row's instance (ahead: heard before the
// interruption; lead: the cloud's documented notice, for a notice without
// a time; counted: Health counted it in the offer's history already; c: a
// connection to the machine, if one is open): once per
// instance and kind, it journals the interruption under the VM's lease,
// starts the replacement the request asks for, then runs the caller's
// hook and sends the cloud's acknowledgement.
func (p *Provisioner) heard(ctx context.Context, row journal.VM, n provider.Notice, lead time.Duration, ahead, counted bool, c *ssh.Client) {
	key := row.Name + "|" + row.InstanceID + "|" + string(n.Kind)
	w := &p.watch
	w.mu.Lock()
	if w.done[key] {
		w.mu.Unlock()
		return
	}
	w.done[key] = true
	w.mu.Unlock()
	now := p.clock.Now()
	at := n.At
	if at.IsZero() && replaces(n.Kind) {
		at = now
		if ahead {
			at = now.Add(lead)
		}
	}
	rec := Interrupted{InstanceID: row.InstanceID, Kind: n.Kind, Detail: n.Detail, Heard: now, At: at, Notice: ahead}
	replacing, vm, err := p.interrupt(ctx, row, rec, counted)
	if err != nil {
		if errors.Is(err, errSkipped) {
			return
		}
		p.log.Warn("interruption: journaling it", "vm", row.Name, "instance", row.InstanceID, "err", err)
		w.mu.Lock()
		delete(w.done, key) // the next output or tick tries again
		w.mu.Unlock()
		return
	}
	if p.onInterruption != nil {
		p.runHook(ctx, Interruption{VM: vm, InstanceID: row.InstanceID, Notice: n, At: at, Heard: ahead, Replacing: replacing, SSH: c})
	}
	if n.Ack != "" && c != nil {
		actx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if _, err := c.Run(actx, n.Ack); err != nil {
			p.log.Warn("interruption: acknowledging the notice", "vm", row.Name, "err", err)
		}
	}
}

// runHook runs the caller's hook on in, bounded by the interruption's
// time; a panic in it is logged, not spread.
func (p *Provisioner) runHook(ctx context.Context, in Interruption) {
	var (
		hctx   context.Context
		cancel context.CancelFunc
	)
	if in.At.IsZero() {
		hctx, cancel = clock.WithDeadline(ctx, p.clock, p.clock.Now().Add(DefaultRebalanceHook))
	} else {
		in.Left = max(in.At.Sub(p.clock.Now()), 0)
		hctx, cancel = clock.WithDeadline(ctx, p.clock, in.At)
	}
	defer cancel()
	defer func() {
		if r := recover(); r != nil {
			p.log.Error("interruption hook panicked", "vm", in.VM.Name, "panic", r)
		}
	}()
	p.onInterruption(hctx, in)
}

// interrupt journals interruption rec of row's VM under its lease, once:
// the event, the preemption in its offer's history, and, when the request
// asks for one and the notice ends the instance, the start of the
// replacement — the VM provisioning again under its name, its interrupted
// offer blocked for spot — whose driver it leaves running in the
// background. errSkipped: the VM is not ready on that instance any more,
// or the interruption was journaled before (by this or another process).
// counted: Health counted the preemption in the offer's history already.
func (p *Provisioner) interrupt(ctx context.Context, row journal.VM, rec Interrupted, counted bool) (replacing bool, vm *VM, err error) {
	if !p.claim(row.Name) {
		return false, nil, errSkipped // a driver of this process has it
	}
	cur, err := p.acquire(ctx, row.Name)
	if err != nil {
		p.release(row.Name, true)
		if errors.Is(err, ErrBusy) {
			return false, nil, errSkipped
		}
		return false, nil, err
	}
	d, err := p.newDriver(cur)
	if err != nil {
		p.release(row.Name, true)
		return false, nil, err
	}
	handed := false
	defer func() {
		if !handed {
			p.release(row.Name, !d.released)
		}
	}()
	if cur.State != journal.StateReady || cur.InstanceID != row.InstanceID ||
		slices.ContainsFunc(d.jr.Interruptions, func(i Interrupted) bool { return i.InstanceID == rec.InstanceID && i.Kind == rec.Kind }) {
		return false, nil, errSkipped
	}
	vm = vmFromRow(cur)
	as, err := p.j.Attempts(ctx, cur.Name)
	if err != nil {
		return false, nil, err
	}
	ai := slices.IndexFunc(as, func(a journal.Attempt) bool { return a.N == cur.Attempt })
	if ai < 0 {
		return false, nil, fmt.Errorf("gpuprov: VM %s: journal names attempt %d but has no such attempt", cur.Name, cur.Attempt)
	}
	a := &as[ai]
	var o provider.Offer
	_ = jsonUnmarshal(a.Offer, &o) // the engine wrote it; a zero offer only loses the spot flag
	rec.Attempt, rec.Offer, rec.Spot, rec.ReadySince = a.N, a.OfferKey, o.Spot, cur.ReadyAt
	if n := len(d.jr.Interruptions); n > 0 && !d.jr.Interruptions[n-1].ReadySince.IsZero() {
		rec.ReadySince = d.jr.Interruptions[n-1].ReadySince
	}
	replacing = d.req.OnInterruption != "" && replaces(rec.Kind) && cur.Cluster == ""
	if replacing {
		rec.Replace = d.req.OnInterruption
	}
	d.jr.Interruptions = append(d.jr.Interruptions, rec)
	raw, err := json.Marshal(d.jr)
	if err != nil {
		return false, nil, fmt.Errorf("gpuprov: encoding request: %w", err)
	}
	d.row.Request = raw
	now := p.clock.Now()
	st := &journal.Step{Update: &d.row, Events: []journal.Event{d.event(EvInterruption, a, interruptionText(rec, now))}}
	if rec.Kind == provider.NoticePreempt && !counted && !a.CreateSent.IsZero() {
		st.Outcomes = []journal.Outcome{{OfferKey: a.OfferKey, Provider: a.Provider, Region: a.Region, Zone: a.Zone,
			InstanceType: o.InstanceType, Spot: o.Spot, Kind: journal.OutcomePreempted,
			Elapsed: max(cmp.Or(rec.At, now).Sub(a.CreateSent), 0), At: now}}
	}
	if !replacing {
		st.ReleaseLease = true
		if err := d.commit(ctx, st); err != nil {
			return false, nil, err
		}
		return false, vm, nil
	}
	if o.Spot {
		st.Blocks = append(st.Blocks, p.block(&o, provider.Capacity, provider.ScopeOffer, 0,
			fmt.Errorf("spot capacity reclaimed (%s)", rec.Kind)))
	}
	d.row.State, d.row.Phase, d.row.LastError, d.row.LastErrorKind = journal.StateProvisioning, "", "", ""
	d.row.ExpiresAt, d.row.Deadline = time.Time{}, now.Add(d.req.Timeout)
	msg := fmt.Sprintf("replacing %s (%s): a new launch on another offer; the interrupted machine is deleted ", cur.InstanceID, a.OfferKey)
	if rec.Replace == ReplaceAtReclaim {
		msg += "when the cloud reclaims it"
	} else {
		msg += "once the replacement is ready"
	}
	st.Events = append(st.Events, d.event(EvReplacing, a, msg))
	if err := d.commit(ctx, st); err != nil {
		return false, nil, err
	}
	handed = true
	p.replaceInBackground(ctx, d)
	return true, vm, nil
}

// replaceInBackground drives d's replacement as RecoverInBackground drives
// what it takes over: Close halts it, and the next Recover goes on.
func (p *Provisioner) replaceInBackground(ctx context.Context, d *driver) {
	p.mu.Lock()
	closed := p.closed
	if !closed {
		p.bgDrivers.Add(1)
	}
	p.mu.Unlock()
	if closed {
		p.release(d.row.Name, false) // the lease lapses; Recover goes on from the journal
		return
	}
	dctx, stop := context.WithCancelCause(context.WithValue(context.WithoutCancel(ctx), backgroundKey{}, true))
	unhook := context.AfterFunc(p.background, func() { stop(context.Cause(p.background)) })
	go func() {
		defer p.bgDrivers.Done()
		defer func() { unhook(); stop(nil) }()
		v, err := p.drive(dctx, d)
		if err != nil {
			p.log.Warn("interruption: the replacement ended without a ready VM", "vm", d.row.Name, "err", err)
			return
		}
		p.log.Info("interruption: replaced", "vm", d.row.Name, "instance", v.InstanceID)
	}()
}

// interruptionText is the EvInterruption message of rec.
func interruptionText(rec Interrupted, now time.Time) string {
	var b strings.Builder
	if rec.Notice {
		fmt.Fprintf(&b, "%s notice for %s", rec.Kind, rec.InstanceID)
	} else {
		fmt.Fprintf(&b, "%s reclaimed without a notice", rec.InstanceID)
	}
	if !rec.At.IsZero() {
		fmt.Fprintf(&b, ": at %s (%v left)", rec.At.UTC().Format(time.RFC3339), max(rec.At.Sub(now), 0).Round(time.Second))
	}
	if rec.Detail != "" {
		fmt.Fprintf(&b, "; %s", rec.Detail)
	}
	return b.String()
}

// replacing is the interruption whose replacement d drives, if any: the
// last one, unless a replacement is ready since (its attempt is then the
// VM's, or the VM is ready).
func (d *driver) replacing() *Interrupted {
	if len(d.jr.Interruptions) == 0 || d.row.State == journal.StateReady {
		return nil
	}
	r := &d.jr.Interruptions[len(d.jr.Interruptions)-1]
	if r.Replace == "" {
		return nil
	}
	return r
}

// retire deletes the interrupted machines of a replaced VM: every earlier
// attempt that succeeded and is not torn down, before the replacement
// (attempt cur) is called ready, or when the replacement fails (all). An
// attempt replaced at reclaim (ReplaceAtReclaim) is kept until the time its
// notice gave, unless the launch is failing. Its cleanup waits for the
// VM's end (the replacement may use the same side resources); its
// instances are confirmed gone first.
func (d *driver) retire(ctx context.Context, cur *journal.Attempt, failing bool) error {
	if len(d.jr.Interruptions) == 0 {
		return nil
	}
	rctx, cancel := journalCall(ctx)
	as, err := d.p.j.Attempts(rctx, d.row.Name)
	cancel()
	if err != nil {
		return fmt.Errorf("gpuprov: VM %s: reading attempts: %w", d.row.Name, err)
	}
	for i := range as {
		d.own(&as[i])
	}
	if cur != nil {
		d.own(cur)
	}
	for i := range as {
		a := &as[i]
		if cur != nil && a.N == cur.N || a.State != journal.AttemptSucceeded && a.State != journal.AttemptTearingDown {
			continue
		}
		ri := slices.IndexFunc(d.jr.Interruptions, func(r Interrupted) bool { return r.Attempt == a.N })
		if ri < 0 {
			continue // an attempt of the journal's own making (edited by hand): Delete handles it
		}
		r := d.jr.Interruptions[ri]
		if r.Replace == ReplaceAtReclaim && !failing && a.State == journal.AttemptSucceeded {
			if wait := r.At.Sub(d.now()); wait > 0 {
				if err := d.p.clock.Sleep(ctx, wait); err != nil {
					return context.Cause(ctx)
				}
			}
		}
		d.retiring = true
		err := d.teardown(ctx, a, nil, true)
		d.retiring = false
		if err != nil {
			return err
		}
		why := "its replacement is ready"
		switch {
		case failing:
			why = "its replacement failed"
		case r.Replace == ReplaceAtReclaim:
			why = "its reclaim time passed"
		}
		d.retired(a, why)
	}
	return nil
}

// retired adds, to the write that confirms a's teardown, the event that
// says an interrupted attempt is retired, and why; nothing for an attempt
// that was not interrupted.
func (d *driver) retired(a *journal.Attempt, why string) {
	ri := slices.IndexFunc(d.jr.Interruptions, func(r Interrupted) bool { return r.Attempt == a.N })
	if ri < 0 || d.pending == nil {
		return
	}
	d.pending.Events = append(d.pending.Events, d.event(EvRetired, a,
		fmt.Sprintf("interrupted %s deleted: %s", d.jr.Interruptions[ri].InstanceID, why)))
}

// own records a's instances as a's, for the looks of a replaced VM (see
// look); a VM never interrupted records nothing.
func (d *driver) own(a *journal.Attempt) {
	if len(d.jr.Interruptions) == 0 {
		return
	}
	for _, id := range a.InstanceIDs {
		d.owners[id] = a.N
	}
}
