package gpuprov

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/provider"
)

// RecoverReport says what Recover did with each active VM it found.
type RecoverReport struct {
	// VMs has one entry per VM Recover found in an active state, by name:
	// what it was, and what became of it.
	VMs []Recovered
	// Resumed are the VMs this process took over and drove to an end, with
	// the error each ended with (nil: ready or deleted as intended; VMs
	// says which).
	Resumed map[string]error
	// Skipped are the VMs Recover left alone, with the reason.
	Skipped map[string]string
	// Reaped are the expired ready VMs (Request.TTL, MaxCost) Recover
	// deleted through Reap once the others had ended.
	Reaped []Reaped
}

// Outcome is what Recover did with one VM.
type Outcome string

const (
	// OutcomeReady: resumed, and now ready (a cluster node: in its cluster).
	OutcomeReady Outcome = "ready"
	// OutcomeDeleted: a teardown (a Delete, or a launch ending) finished.
	OutcomeDeleted Outcome = "deleted"
	// OutcomeFailed: resumed, and the launch failed cleanly (Err says why);
	// everything it started is torn down.
	OutcomeFailed Outcome = "failed"
	// OutcomeTeardownIncomplete: a teardown could not finish (Err says
	// why); the VM stays deleting for a later Recover, Sweep or Delete.
	OutcomeTeardownIncomplete Outcome = "teardown-incomplete"
	// OutcomeInterrupted: driving it stopped before an end (the context
	// ended, the journal failed, the lease was lost); Err says why and a
	// later Recover resumes it.
	OutcomeInterrupted Outcome = "interrupted"
	// OutcomeSkipped: left alone (Reason says why, Owner who drives it).
	OutcomeSkipped Outcome = "skipped"
	// OutcomeContinuing: taken over by RecoverInBackground and still
	// driven in the background (Wait(ctx, name) waits for its end).
	OutcomeContinuing Outcome = "continuing"
)

// Recovered is what Recover did with one VM.
type Recovered struct {
	Name string
	// State and Phase are where the journal had the VM; Owner is who held
	// its lease then (empty: nobody). State is empty for a cluster node the
	// crash kept from being journaled, which Recover launched.
	State journal.VMState
	Phase string
	Owner string
	// Outcome is what became of it; Err the error it ended with, and
	// Reason why it was skipped.
	Outcome Outcome
	Err     error
	Reason  string
}

// Recover takes every VM the journal holds in an active state (pending,
// provisioning, waiting, deleting) whose lease is free, expired, or held by a process
// on this host that is gone, and drives it from its last journaled phase:
// a create is observed and adopted or sent again, a boot is waited for with
// what is left of the deadline, a teardown is finished. A node of a cluster
// that a Joiner forms is resumed through its join, whatever phase it was in:
// the server elected before the crash keeps its role, and the nodes of one
// cluster resumed together elect one server between them, the nodes the
// crash kept from being journaled are launched beside them, and a cluster
// that ends with fewer ready nodes than its minimum gives back the ready
// ones, as LaunchCluster does; without
// WithJoiner such nodes are skipped (RecoverReport.Skipped says why), never
// called ready outside their cluster. It returns when every VM it took has
// ended (RecoverInBackground returns once each is taken over). VMs driven
// by live processes are left alone. A VM that was waiting
// for capacity (Request.WaitForCapacity) goes on waiting until its journaled
// next try, then tries again, until its journaled deadline. Last, Recover
// deletes the ready VMs whose TTL or cost cap has expired (Reap).
func (p *Provisioner) Recover(ctx context.Context) (rep *RecoverReport, err error) {
	ctx, sp := p.startOp(ctx, "gpuprov.Recover")
	if sp.IsRecording() {
		defer func() {
			if rep != nil {
				sp.SetAttributes(attrCount.Int(len(rep.VMs)))
			}
			endSpan(sp, err)
		}()
	}
	return p.recoverVMs(ctx, false)
}

// RecoverInBackground is Recover for a service's start: it takes over the
// same VMs and returns as soon as each is taken over (its lease acquired,
// its recovery journaled) or skipped, not when each has ended. The VMs it
// took go on in the background of the Provisioner — a VM waiting for
// capacity keeps waiting, a boot keeps booting, a teardown finishes — and
// the report lists them with OutcomeContinuing; Wait(ctx, name) waits for
// one to be ready or to end, and the events reach the sinks as usual. The
// cluster nodes a crash kept from being journaled are launched in the
// background too, and the Reap that Recover ends with runs once every VM
// taken has ended. Close stops what still runs: each driver halts where it
// is, writing and sending nothing more (a teardown under way first
// finishes, bounded by its DeleteTimeout), and frees its lease, so the
// next Recover goes on from the journal. ctx bounds the taking over only;
// its values (a tracing span) go with the background drivers.
func (p *Provisioner) RecoverInBackground(ctx context.Context) (rep *RecoverReport, err error) {
	ctx, sp := p.startOp(ctx, "gpuprov.RecoverInBackground")
	if sp.IsRecording() {
		defer func() {
			if rep != nil {
				sp.SetAttributes(attrCount.Int(len(rep.VMs)))
			}
			endSpan(sp, err)
		}()
	}
	return p.recoverVMs(ctx, true)
}

// recoverVMs is Recover (background: RecoverInBackground) within its span.
func (p *Provisioner) recoverVMs(ctx context.Context, background bool) (*RecoverReport, error) {
	p.mu.Lock()
	closed := p.closed
	if !closed && background {
		p.bgDrivers.Add(1) // the background part below, if any
	}
	p.mu.Unlock()
	if closed {
		return nil, errorf("recover: %w", ErrClosed)
	}
	rows, err := p.j.ListVMs(ctx, journal.ListOptions{States: []journal.VMState{
		journal.StatePending, journal.StateProvisioning, journal.StateWaiting, journal.StateDeleting}})
	if err != nil {
		if background {
			p.bgDrivers.Done()
		}
		return nil, fmt.Errorf("gpuprov: recover: listing VMs: %w", err)
	}
	rep := &RecoverReport{Resumed: map[string]error{}, Skipped: map[string]string{}}
	// In the background, the drives outlive the caller's ctx: they end
	// with the Provisioner (Close), keeping ctx's values.
	driveCtx, endDrives := ctx, func() {}
	if background {
		dctx, stop := context.WithCancelCause(context.WithValue(context.WithoutCancel(ctx), backgroundKey{}, true))
		unhook := context.AfterFunc(p.background, func() { stop(context.Cause(p.background)) })
		driveCtx, endDrives = dctx, func() { unhook(); stop(nil) }
	}
	// continuing are the VMs taken over and not ended yet; once the report
	// is returned (reported), what ends is only logged.
	continuing := map[string]Recovered{}
	reported := false
	var (
		mu    sync.Mutex
		wg    sync.WaitGroup
		alive = map[string]bool{} // owner → ownerAlive, asked once per owner
		// Take-overs run in parallel, so their journal writes share
		// commits; a bound keeps a 10,000-VM journal from opening 10,000
		// transactions at once.
		sem = make(chan struct{}, 64)
		// The nodes of one cluster resumed here share its coordinator.
		clusters = &resumedClusters{p: p}
		// Take-overs that have acquired their VM (or given up): missing
		// cluster nodes are launched once they have.
		acquired   sync.WaitGroup
		unfinished = map[string]*unfinishedCluster{} // under mu
	)
	found := func(r journal.VM) Recovered {
		return Recovered{Name: r.Name, State: r.State, Phase: r.Phase, Owner: r.Owner}
	}
	skip := func(r journal.VM, why string) {
		mu.Lock()
		defer mu.Unlock()
		rep.Skipped[r.Name] = why
		v := found(r)
		v.Outcome, v.Reason = OutcomeSkipped, why
		rep.VMs = append(rep.VMs, v)
	}
	done := func(r journal.VM, ended journal.VMState, err error) {
		mu.Lock()
		defer mu.Unlock()
		delete(continuing, r.Name)
		if reported {
			p.log.Info("recovered in the background", "vm", r.Name, "state", ended, "err", err)
			return
		}
		rep.Resumed[r.Name] = err
		v := found(r)
		v.Err = err
		switch {
		case ended == journal.StateReady && err == nil:
			v.Outcome = OutcomeReady
		case ended == journal.StateDeleted && err == nil:
			v.Outcome = OutcomeDeleted
		case ended == journal.StateFailed:
			v.Outcome = OutcomeFailed
		case ended == journal.StateDeleting && errors.Is(err, ErrTeardownIncomplete):
			v.Outcome = OutcomeTeardownIncomplete
		default:
			v.Outcome = OutcomeInterrupted
		}
		rep.VMs = append(rep.VMs, v)
	}
	for _, r := range rows {
		if !p.claim(r.Name) {
			skip(r, "driven by this process")
			continue
		}
		dead := false
		if r.Owner != "" && r.Owner != p.owner {
			a, known := alive[r.Owner]
			if !known {
				a = ownerAlive(r.Owner)
				alive[r.Owner] = a
			}
			dead = !a
		}
		sem <- struct{}{}
		acquired.Add(1)
		wg.Go(func() {
			held := true
			var once sync.Once
			taken := func() { once.Do(acquired.Done) }
			defer func() {
				taken()
				if held {
					<-sem
				}
			}()
			row, err := p.acquireFrom(ctx, r, dead)
			if err != nil {
				// A failed Acquire may still have taken the lease (a
				// cancelled call can commit); releasing what we may hold
				// is harmless, since Release only frees its owner's.
				p.release(r.Name, true)
				skip(r, err.Error())
				return
			}
			d, err := p.newDriver(row)
			if err != nil || !row.State.Active() {
				if err != nil {
					done(r, row.State, err)
				} else {
					skip(r, fmt.Sprintf("%s by the time its lease was taken", row.State))
				}
				p.release(r.Name, true) // not ours to drive after all
				return
			}
			if d.joinCluster && row.State != journal.StateDeleting {
				if p.joiner == nil {
					// Finishing it without joining would call a machine
					// ready that is not in its cluster; a process that
					// can form clusters takes it.
					p.release(r.Name, true)
					skip(r, fmt.Sprintf("node of cluster %s, which a Joiner forms: recover with WithJoiner", row.Cluster))
					return
				}
				d.join = clusters.join(row.Cluster)
			}
			if err := d.commit(ctx, &journal.Step{Update: &d.row, Events: []journal.Event{{Type: EvRecovered,
				Phase: row.Phase, Attempt: row.Attempt, Message: fmt.Sprintf("taken over from %q in state %s", r.Owner, row.State)}}}); err != nil {
				p.release(r.Name, true)
				done(r, row.State, err)
				return
			}
			if row.Cluster != "" && d.clusterNodes > 0 && row.State != journal.StateDeleting {
				mu.Lock()
				unfinished[row.Cluster] = unfinished[row.Cluster].add(d, row.CreatedAt)
				mu.Unlock()
			}
			mu.Lock()
			v := found(r)
			v.Outcome = OutcomeContinuing
			continuing[r.Name] = v
			mu.Unlock()
			taken()
			held = false
			<-sem // taken over: the long drive does not hold a slot
			rctx, sp := p.child(driveCtx, "gpuprov.resume", "")
			if sp.IsRecording() {
				sp.SetAttributes(attrVM.String(r.Name), attrState.String(string(row.State)))
			}
			_, err = p.drive(rctx, d)
			endSpan(sp, err)
			done(r, d.row.State, err)
		})
	}
	// A cluster resumed here gets the nodes its crash kept from being
	// journaled, launched beside the resumed ones and joined to the same
	// coordinator.
	acquired.Wait()
	for name, uc := range unfinished {
		missing, err := p.missingNodes(ctx, name, uc)
		if err != nil {
			p.log.Warn("recover: cluster nodes not relaunched", "cluster", name, "err", err)
			continue
		}
		for _, req := range missing {
			cn := clusterNode{cluster: name, placementGroup: uc.tmpl.placementGroup, nodes: uc.tmpl.clusterNodes, min: uc.tmpl.clusterMin}
			if uc.tmpl.joinCluster {
				cn.join = clusters.join(name)
			}
			mu.Lock()
			continuing[req.Name] = Recovered{Name: req.Name, Outcome: OutcomeContinuing}
			mu.Unlock()
			wg.Go(func() {
				vm, err := p.launchNode(driveCtx, req, cn)
				ended := journal.StateFailed
				if vm != nil {
					ended = vm.State
				}
				done(journal.VM{Name: req.Name, Cluster: name}, ended, err)
			})
		}
	}
	// The end: every VM taken has ended. All or nothing, as
	// LaunchCluster: a cluster with fewer ready nodes than it needs gives
	// back the ready ones; then the expired VMs are reaped.
	finish := func(ctx context.Context, rep *RecoverReport) error {
		// A crashed process leaves the shared firewalls of the regions it
		// used, waiting out a grace that died with it. Their removal is
		// scheduled here as after this process's own last VM of a region:
		// after the grace, or at Close, every region's that no instance
		// uses (the cloud refuses the others).
		for _, name := range p.Providers() {
			p.lingerShared(ctx, p.providers[name], allRegions)
		}
		for name, uc := range unfinished {
			p.enforceClusterMin(ctx, name, uc.tmpl.clusterNodes, uc.tmpl.clusterMin, rep)
		}
		var err error
		rep.Reaped, err = p.Reap(ctx)
		return err
	}
	if background {
		mu.Lock()
		for _, v := range continuing {
			rep.VMs = append(rep.VMs, v)
		}
		reported = true
		mu.Unlock()
		go func() {
			defer p.bgDrivers.Done()
			defer endDrives()
			wg.Wait()
			if context.Cause(driveCtx) != nil {
				// Closed: the drivers halted where they were, and a
				// cluster short of nodes now is not one that failed.
				return
			}
			if err := finish(driveCtx, &RecoverReport{Resumed: map[string]error{}, Skipped: map[string]string{}}); err != nil {
				p.log.Warn("recover: reaping after the background recovery", "err", err)
			}
		}()
		slices.SortFunc(rep.VMs, func(a, b Recovered) int { return strings.Compare(a.Name, b.Name) })
		return rep, nil
	}
	wg.Wait()
	err = finish(ctx, rep)
	slices.SortFunc(rep.VMs, func(a, b Recovered) int { return strings.Compare(a.Name, b.Name) })
	return rep, err
}

// backgroundKey marks the context of the drivers RecoverInBackground
// leaves running: drive flags them, so that Close halts them.
type backgroundKey struct{}

// ownerAlive reports whether a lease owner may still be running. Owners are
// "host/pid/start-nanos/random". On this host, a pid that does not exist, or
// that belongs to a process started at another time, is dead. Owners on other
// hosts, or in another format, count as alive: their lease's expiry decides.
func ownerAlive(owner string) bool {
	parts := strings.Split(owner, "/")
	if len(parts) != 4 {
		return true
	}
	host, _ := os.Hostname()
	if parts[0] != host {
		return true
	}
	pid, err := strconv.Atoi(parts[1])
	if err != nil || pid <= 0 {
		return true
	}
	start, err := strconv.ParseInt(parts[2], 10, 64)
	if err != nil {
		return true
	}
	if pid == os.Getpid() {
		return start == processStart.UnixNano()
	}
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	if st, ok := procStart(pid); ok {
		// The pid was reused by a process that started well after the owner.
		d := st.Sub(time.Unix(0, start))
		return d < 2*time.Second && d > -2*time.Second
	}
	return true
}

// procStart reads a process's start time from /proc (Linux); ok is false
// elsewhere.
func procStart(pid int) (time.Time, bool) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return time.Time{}, false
	}
	// Field 22 (starttime, in clock ticks since boot) follows the command,
	// which is parenthesized and may contain spaces.
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return time.Time{}, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return time.Time{}, false
	}
	ticks, err := strconv.ParseInt(f[19], 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	boot, ok := bootTime()
	if !ok {
		return time.Time{}, false
	}
	const clkTck = 100 // USER_HZ on every Linux architecture Go supports
	return boot.Add(time.Duration(ticks) * time.Second / clkTck), true
}

func bootTime() (time.Time, bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return time.Time{}, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "btime "); ok {
			sec, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return time.Time{}, false
			}
			return time.Unix(sec, 0), true
		}
	}
	return time.Time{}, false
}

// SweepOptions controls Sweep.
type SweepOptions struct {
	// Delete deletes the orphans found; the default is a dry run.
	Delete bool
	// Grace is how old an instance must be before it counts as an orphan,
	// covering the cloud's listing lag and launches in flight. Zero means
	// DefaultSweepGrace; NoGrace (any negative value) means none at all.
	Grace time.Duration
}

// DefaultSweepGrace is the grace Sweep applies when SweepOptions.Grace is zero.
const DefaultSweepGrace = 10 * time.Minute

// NoGrace, as SweepOptions.Grace, makes every orphan count at once, however
// young: an instance still in the cloud's listing lag may then be reported.
const NoGrace time.Duration = -1

// Orphan is an instance carrying this installation's identity that no VM in
// the journal owns.
type Orphan struct {
	Provider string
	provider.Observed
	Reason  string
	Deleted bool
	Err     error
}

// Sweep lists, on every provider that implements provider.Lister, the
// instances of this installation, and reports those the journal does not own
// (a VM unknown, deleted or failed, or an instance that is not the VM's) and
// that are older than the grace period; with Delete it deletes them. It also
// finishes the teardown of VMs left in state deleting by a failed teardown.
// Providers without Lister are listed in the error, not skipped silently.
func (p *Provisioner) Sweep(ctx context.Context, opts SweepOptions) (out []Orphan, err error) {
	ctx, sp := p.startOp(ctx, "gpuprov.Sweep")
	if sp.IsRecording() {
		defer func() {
			sp.SetAttributes(attrCount.Int(len(out)))
			endSpan(sp, err)
		}()
	}
	return p.sweep(ctx, opts)
}

// sweep is Sweep within its span.
func (p *Provisioner) sweep(ctx context.Context, opts SweepOptions) ([]Orphan, error) {
	switch {
	case opts.Grace == 0:
		opts.Grace = DefaultSweepGrace
	case opts.Grace < 0:
		opts.Grace = 0
	}
	now := p.clock.Now()
	var out []Orphan
	var errs []error
	for _, name := range p.Providers() {
		pp := p.providers[name]
		l, ok := pp.CloudProvider.(provider.Lister)
		if !ok {
			errs = append(errs, fmt.Errorf("%s cannot list instances (no provider.Lister): not swept", name))
			continue
		}
		var all []provider.Observed
		err := pp.call(withPriority(ctx), "list", provider.Location{}, func(ctx context.Context) (err error) {
			all, err = l.List(ctx, provider.Location{})
			return err
		})
		if err != nil && context.Cause(ctx) != nil {
			return out, err
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("listing: %w", ofProvider(name, err)))
			continue
		}
		for _, o := range all {
			reason, err := p.orphanReason(ctx, name, o)
			if err != nil {
				return out, err
			}
			if reason == "" || now.Sub(o.Created) < opts.Grace {
				continue
			}
			orph := Orphan{Provider: name, Observed: o, Reason: reason}
			if opts.Delete {
				orph.Err = pp.call(ctx, "delete", o.Location, func(ctx context.Context) error {
					return pp.Delete(ctx, o.Location, o.VM, []string{o.ID})
				})
				if cerr := context.Cause(ctx); cerr != nil {
					return out, cerr
				}
				orph.Deleted = orph.Err == nil
			}
			out = append(out, orph)
		}
	}
	if opts.Delete {
		stuck, err := p.j.ListVMs(ctx, journal.ListOptions{States: []journal.VMState{journal.StateDeleting}})
		if err != nil {
			return out, err
		}
		for _, v := range stuck {
			if err := p.Delete(ctx, v.Name); err != nil && !errors.Is(err, ErrBusy) {
				errs = append(errs, err)
			}
		}
		if err := p.cleanupSharedEverywhere(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return out, errors.Join(errs...)
}

// CleanupShared removes, on every provider that shares side resources
// (provider.SharedCleaner), the installation's shared side resources that no
// instance uses, in every region: what a process killed while they waited
// out their grace (WithSharedGrace) left, or a teardown that found one
// still in use. One that an instance uses is left (the cloud refuses), and
// is not an error. Sweep with Delete does it too; the CLI's `down --all`
// does it after its deletions.
func (p *Provisioner) CleanupShared(ctx context.Context) (err error) {
	ctx, sp := p.startOp(ctx, "gpuprov.CleanupShared")
	if sp.IsRecording() {
		defer func() { endSpan(sp, err) }()
	}
	return p.cleanupSharedEverywhere(ctx)
}

// cleanupSharedEverywhere is CleanupShared within the caller's span.
func (p *Provisioner) cleanupSharedEverywhere(ctx context.Context) error {
	var errs []error
	for _, name := range p.Providers() {
		if err := p.cleanupShared(ctx, p.providers[name], provider.Location{}, true); err != nil {
			errs = append(errs, fmt.Errorf("shared side resources: %w", ofProvider(name, err)))
		}
	}
	return errors.Join(errs...)
}

// orphanReason says why the journal does not own instance o of provider
// name, or "" when it does.
func (p *Provisioner) orphanReason(ctx context.Context, name string, o provider.Observed) (string, error) {
	if o.VM == "" {
		return "instance carries no VM name", nil
	}
	row, err := p.j.GetVM(ctx, o.VM)
	if errors.Is(err, journal.ErrNotFound) {
		return "no VM " + o.VM + " in the journal", nil
	}
	if err != nil {
		return "", err
	}
	switch {
	case row.State.Terminal():
		return fmt.Sprintf("VM %s is %s", o.VM, row.State), nil
	case row.State == journal.StateReady && (row.Provider != name || row.InstanceID != o.ID):
		return fmt.Sprintf("VM %s is ready on %s/%s, not this instance", o.VM, row.Provider, row.InstanceID), nil
	}
	return "", nil
}

// unfinishedCluster is a cluster Recover resumed nodes of: a resumed node's
// driver, whose journaled request every node of the cluster shares but for
// its name, and the earliest creation among the resumed nodes.
type unfinishedCluster struct {
	tmpl  *driver
	since time.Time
}

func (uc *unfinishedCluster) add(d *driver, created time.Time) *unfinishedCluster {
	if uc == nil {
		return &unfinishedCluster{tmpl: d, since: created}
	}
	if created.Before(uc.since) {
		uc.since = created
	}
	return uc
}

// missingNodes returns the requests of cluster's nodes that its launch
// never journaled: names <cluster>-<i> with no row, or only the row of an
// earlier incarnation (ended before this one's nodes were created). None
// while any node is being deleted: the cluster is being given back.
func (p *Provisioner) missingNodes(ctx context.Context, cluster string, uc *unfinishedCluster) ([]Request, error) {
	rows, err := p.j.ListVMs(ctx, journal.ListOptions{Cluster: cluster})
	if err != nil {
		return nil, err
	}
	have := map[string]bool{}
	for _, r := range rows {
		if r.State == journal.StateDeleting {
			return nil, nil
		}
		if !r.State.Terminal() || !r.EndedAt.Before(uc.since) {
			have[r.Name] = true
		}
	}
	var out []Request
	for i := range uc.tmpl.clusterNodes {
		name := fmt.Sprintf("%s-%d", cluster, i)
		if have[name] {
			continue
		}
		if row, err := p.j.GetVM(ctx, name); err == nil && !row.State.Terminal() {
			continue // a VM of that name outside the cluster: leave it be
		}
		req := uc.tmpl.req
		req.Name = name
		out = append(out, req)
	}
	return out, nil
}

// enforceClusterMin deletes the ready nodes of cluster when fewer than min
// of its nodes are ready, and says so in rep.
func (p *Provisioner) enforceClusterMin(ctx context.Context, cluster string, nodes, min int, rep *RecoverReport) {
	rows, err := p.j.ListVMs(ctx, journal.ListOptions{Cluster: cluster})
	if err != nil {
		p.log.Warn("recover: cluster not checked", "cluster", cluster, "err", err)
		return
	}
	var ready []journal.VM
	for _, r := range rows {
		if r.State == journal.StateReady {
			ready = append(ready, r)
		}
	}
	if len(ready) >= min {
		return
	}
	why := fmt.Errorf("gpuprov: cluster %s: %d of %d nodes ready, %d needed; the ready ones were deleted", cluster, len(ready), nodes, min)
	dctx := context.WithoutCancel(ctx)
	for _, r := range ready {
		v := Recovered{Name: r.Name, State: r.State, Outcome: OutcomeDeleted, Err: why}
		if err := p.Delete(dctx, r.Name); err != nil {
			v.Outcome, v.Err = OutcomeTeardownIncomplete, errors.Join(why, err)
		}
		if i := slices.IndexFunc(rep.VMs, func(x Recovered) bool { return x.Name == r.Name }); i >= 0 {
			v.State, v.Phase, v.Owner = rep.VMs[i].State, rep.VMs[i].Phase, rep.VMs[i].Owner
			rep.VMs[i] = v
		} else {
			rep.VMs = append(rep.VMs, v)
		}
		rep.Resumed[r.Name] = v.Err
	}
}
