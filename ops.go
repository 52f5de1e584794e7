package gpuprov

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/provider"
)

// Launch provisions one VM and blocks until it is ready or the launch has
// cleanly failed. The request is validated before anything is journaled or
// created (a *RequestError). On failure everything the launch started is torn
// down; if a teardown cannot finish, the error wraps ErrTeardownIncomplete
// and the VM stays in state deleting for Recover, Sweep or Delete. Cancelling
// ctx tears down and fails the launch.
func (p *Provisioner) Launch(ctx context.Context, req Request) (*VM, error) {
	return p.launch(ctx, req, "", nil)
}

func (p *Provisioner) launch(ctx context.Context, req Request, cluster string, join func(context.Context, Node, Conn) error) (*VM, error) {
	return p.launchNode(ctx, req, clusterNode{cluster: cluster, join: join})
}

// clusterNode is what launchNode needs to know of a node's cluster; the
// zero value launches a VM of no cluster.
type clusterNode struct {
	cluster string
	// join serves or joins the cluster (nil: no Joiner forms it).
	join func(context.Context, Node, Conn) error
	// placementGroup is the compact cluster's group the node is created in.
	placementGroup string
	// nodes and min are the cluster's size and the nodes it needs ready.
	nodes, min int
}

// launchNode is launch for a VM that may be a node of a cluster, under the
// span gpuprov.Launch.
func (p *Provisioner) launchNode(ctx context.Context, req Request, cn clusterNode) (vm *VM, err error) {
	ctx, sp := p.startOp(ctx, "gpuprov.Launch")
	if sp.IsRecording() {
		gpu := req.GPU
		if len(req.GPUs) > 0 {
			gpu = req.alternativesText() // as given: the request is not normalized yet
		}
		sp.SetAttributes(attrVM.String(req.Name), attrGPU.String(gpu), attrGPUCount.Int(req.GPUCount))
		if cn.cluster != "" {
			sp.SetAttributes(attrCluster.String(cn.cluster))
		}
		defer func() {
			sp.SetAttributes(vmAttrs(vm)...)
			endSpan(sp, err)
		}()
	}
	if err := req.normalize(p.providerSet()); err != nil {
		return nil, err
	}
	if err := p.checkVolumes(ctx, &req); err != nil {
		return nil, err
	}
	cluster, join := cn.cluster, cn.join
	jr := journaledRequest{Request: req, PlacementGroup: cn.placementGroup, ClusterNodes: cn.nodes, ClusterMin: cn.min, ClientKeys: p.clientKeys()}
	if cluster != "" {
		jr.JoinCluster = new(join != nil)
	}
	raw, err := json.Marshal(jr)
	if err != nil {
		return nil, fmt.Errorf("gpuprov: encoding request: %w", err)
	}
	now := p.clock.Now()
	row := journal.VM{
		Name: req.Name, ID: newID(), Cluster: cluster, Request: raw, State: journal.StatePending,
		Owner: p.owner, LeaseExpiry: now.Add(p.leaseTTL), Deadline: now.Add(req.Timeout),
		CreatedAt: now, UpdatedAt: now,
	}
	d, err := p.newDriver(row)
	if err != nil {
		return nil, err
	}
	d.join = join
	msg := req.alternativesText()
	if req.MaxPricePerHour > 0 {
		msg += " under " + usd(req.MaxPricePerHour) + "/h"
	}
	p.hold(req.Name) // before the VM exists, so no Recover of this process can take it
	if err := d.commit(ctx, &journal.Step{Create: &d.row, Events: []journal.Event{{Type: EvLaunch, Message: msg}}}); err != nil {
		p.release(req.Name, true) // only frees a lease we hold (a failed write may still have committed)
		if errors.Is(err, journal.ErrExists) {
			return nil, errorf("a VM named %s exists and is not deleted: %w", req.Name, journal.ErrExists)
		}
		return nil, err
	}
	p.grant(req.Name, now)
	return p.drive(ctx, d)
}

// drive runs a driver whose VM the caller holds (hold or claim), renewing
// its lease, and lets go of it at the end.
func (p *Provisioner) drive(ctx context.Context, d *driver) (*VM, error) {
	if ctx.Value(backgroundKey{}) != nil {
		d.background = true
	}
	ctx, cancel := context.WithCancelCause(p.fenced(ctx, d.row.Name))
	defer cancel(nil)
	done := p.track(d.row.Name, cancel)
	// Released before done says so: a Delete that cancelled this driver
	// and waits for it then finds the VM free to claim.
	defer done()
	defer func() { p.release(d.row.Name, !d.released) }()
	return d.run(ctx)
}

// track registers an in-process driver so Delete can stop it first.
func (p *Provisioner) track(name string, cancel context.CancelCauseFunc) func() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.running == nil {
		p.running = map[string]*running{}
	}
	r := &running{cancel: cancel, done: make(chan struct{})}
	p.running[name] = r
	return func() {
		p.mu.Lock()
		if p.running[name] == r {
			delete(p.running, name)
		}
		p.mu.Unlock()
		close(r.done)
	}
}

type running struct {
	cancel context.CancelCauseFunc
	done   chan struct{}
}

// LaunchResult is the outcome of one VM of LaunchMany.
type LaunchResult struct {
	VM  *VM
	Err error
}

// LaunchOption tunes LaunchMany and LaunchEach.
type LaunchOption func(*launchOptions)

type launchOptions struct{ limit int }

// Limit launches at most n of the requests at a time, in order, as
// errgroup's SetLimit does: the next starts when one ends (ready or not).
// A request's Timeout counts from its start. n <= 0: no limit.
func Limit(n int) LaunchOption { return func(o *launchOptions) { o.limit = n } }

// LaunchMany launches every request concurrently (at most Limit at a time)
// and returns when all have ended, with one result per request in order.
// Requests that name one VM twice are refused before anything is launched:
// every result then holds the *RequestError.
func (p *Provisioner) LaunchMany(ctx context.Context, reqs []Request, opts ...LaunchOption) []LaunchResult {
	out := make([]LaunchResult, len(reqs))
	if err := p.LaunchEach(ctx, reqs, func(i int, r LaunchResult) { out[i] = r }, opts...); err != nil {
		for i := range out {
			out[i].Err = err
		}
	}
	return out
}

// LaunchEach launches every request concurrently (at most Limit at a time,
// in order) and hands each result to done as soon as its launch ends, with
// the request's index; calls to done are serialized (a scheduler can act on
// a ready VM while others still boot). It returns when every launch has
// ended and done has returned for each. A request still waiting for its
// turn when ctx ends is not launched: its result is ctx's error. Requests
// that name one VM twice are refused before anything is launched, with a
// *RequestError and no call to done.
func (p *Provisioner) LaunchEach(ctx context.Context, reqs []Request, done func(i int, r LaunchResult), opts ...LaunchOption) error {
	var o launchOptions
	for _, opt := range opts {
		opt(&o)
	}
	seen := make(map[string]int, len(reqs))
	for i, r := range reqs {
		if j, dup := seen[r.Name]; dup {
			return &RequestError{"name", fmt.Sprintf("requests %d and %d both name VM %q", j, i, r.Name)}
		}
		seen[r.Name] = i
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		slot chan struct{} // nil: no limit
	)
	if o.limit > 0 {
		slot = make(chan struct{}, o.limit)
	}
	for i, r := range reqs {
		var res LaunchResult
		if slot != nil {
			select {
			case slot <- struct{}{}:
			case <-ctx.Done():
				res.Err = errorf("launch %s not started: %w", r.Name, context.Cause(ctx))
				mu.Lock()
				done(i, res)
				mu.Unlock()
				continue
			}
		}
		wg.Go(func() {
			res.VM, res.Err = p.Launch(ctx, r)
			if slot != nil {
				<-slot
			}
			mu.Lock()
			defer mu.Unlock()
			done(i, res)
		})
	}
	wg.Wait()
	return nil
}

// Delete tears the VM down: every instance of every attempt deleted and
// confirmed gone, side resources cleaned up, then state deleted. A launch of
// the VM running in this process is cancelled first (it tears down what it
// started). A VM driven by another live process gives ErrBusy. Deleting a
// deleted or failed VM does nothing.
func (p *Provisioner) Delete(ctx context.Context, name string) (err error) {
	ctx, sp := p.startOp(ctx, "gpuprov.Delete")
	if sp.IsRecording() {
		sp.SetAttributes(attrVM.String(name))
		defer func() { endSpan(sp, err) }()
	}
	return p.deleteIf(ctx, name, func(journal.VM) (string, bool) { return "", true })
}

// deleteIf is Delete, once the lease is held, only if cond holds for the VM
// as the journal has it then; cond's text goes in the deleting event. It
// reports errSkipped when cond said no.
func (p *Provisioner) deleteIf(ctx context.Context, name string, cond func(journal.VM) (string, bool)) error {
	for !p.claim(name) {
		p.mu.Lock()
		r := p.running[name]
		p.mu.Unlock()
		if r == nil {
			return errorf("VM %s: %w (by this process; try again)", name, ErrBusy)
		}
		r.cancel(nil)
		select {
		case <-r.done:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	row, err := p.acquire(ctx, name)
	if err != nil {
		p.release(name, true) // only frees a lease we hold (a cancelled Acquire may have committed)
		return err
	}
	d, err := p.newDriver(row)
	if err != nil {
		p.release(name, true)
		return err
	}
	defer func() { p.release(name, !d.released) }()
	if row.State.Terminal() {
		return nil
	}
	why, ok := cond(row)
	if !ok {
		return errSkipped
	}
	d.row.State, d.row.Phase, d.row.NextTry = journal.StateDeleting, "", time.Time{}
	if err := d.commit(ctx, &journal.Step{Update: &d.row, Events: []journal.Event{{Type: EvDeleting, Message: why}}}); err != nil {
		return err
	}
	return d.finishDelete(p.fenced(ctx, name))
}

// acquire takes the VM's lease for this process, taking over from an owner
// on this host that is proven dead.
func (p *Provisioner) acquire(ctx context.Context, name string) (journal.VM, error) {
	row, err := p.j.GetVM(ctx, name)
	if err != nil {
		return journal.VM{}, vmError(name, err)
	}
	dead := row.Owner != "" && row.Owner != p.owner && !ownerAlive(row.Owner)
	return p.acquireFrom(ctx, row, dead)
}

// acquireFrom takes the lease of the VM read as row; ownerDead says its
// owner is proven gone (the lease is then taken before it expires).
func (p *Provisioner) acquireFrom(ctx context.Context, row journal.VM, ownerDead bool) (journal.VM, error) {
	var dead []string
	if ownerDead {
		dead = append(dead, row.Owner)
	}
	now := p.clock.Now()
	got, err := p.j.Acquire(ctx, row.Name, p.owner, now, now.Add(p.leaseTTL), dead...)
	if err != nil {
		return journal.VM{}, vmError(row.Name, err)
	}
	p.grant(row.Name, now)
	return got, nil
}

// finishDelete tears down every attempt not yet torn down and marks the VM
// deleted; on a teardown it cannot finish, the VM stays deleting.
func (d *driver) finishDelete(ctx context.Context) error {
	attempts, err := d.takeOverAttempts(ctx)
	if err != nil {
		return err
	}
	for i := range attempts {
		if a := &attempts[i]; !(a.State == journal.AttemptTornDown && a.CleanedUp) {
			if pp, ok := d.p.providers[a.Provider]; ok {
				// Held until its own teardown: an earlier attempt's
				// cleanup in the region must not remove the shared
				// resources under a later attempt's instance.
				pp.holdShared(a)
			}
		}
	}
	for i := range attempts {
		a := &attempts[i]
		if a.State == journal.AttemptTornDown && a.CleanedUp {
			continue
		}
		if a.State == journal.AttemptTornDown {
			a.State = journal.AttemptTearingDown // cleanup still owed
		}
		if err := d.teardown(ctx, a, nil, false); err != nil {
			return d.stuck(ctx, err)
		}
	}
	if err := d.releaseVolumes(ctx, true); err != nil {
		return d.stuck(ctx, err)
	}
	now := d.now()
	d.row.State, d.row.Phase, d.row.EndedAt = journal.StateDeleted, "", now
	d.row.InstanceID, d.row.SSHHost, d.row.SSHPort, d.row.LastError, d.row.LastErrorKind = "", "", 0, "", ""
	return d.commit(ctx, &journal.Step{Update: &d.row, ReleaseLease: true, Events: []journal.Event{{Type: EvDeleted}}})
}

// Get returns the VM named name, or an error wrapping ErrNotFound.
func (p *Provisioner) Get(ctx context.Context, name string) (*VM, error) {
	row, err := p.j.GetVM(ctx, name)
	if err != nil {
		return nil, vmError(name, err)
	}
	return vmFromRow(row), nil
}

// ListOptions filters List.
type ListOptions = journal.ListOptions

// List returns the journal's VMs matching opts, by name.
func (p *Provisioner) List(ctx context.Context, opts ListOptions) ([]*VM, error) {
	rows, err := p.j.ListVMs(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("gpuprov: listing VMs: %w", err)
	}
	out := make([]*VM, len(rows))
	for i, r := range rows {
		out[i] = vmFromRow(r)
	}
	return out, nil
}

// History returns a VM's attempts and its events, oldest first: the story
// of the VM as it is now, from the launch that made it. A name launched
// again once its VM ended (a placed cluster that moved to another location,
// a name reused after a delete) starts a new story, as its attempts do; the
// events of the earlier VMs of that name stay in the journal's event log
// (Journal().Events).
func (p *Provisioner) History(ctx context.Context, name string) ([]journal.Attempt, []Event, error) {
	if _, err := p.j.GetVM(ctx, name); err != nil {
		return nil, nil, vmError(name, err)
	}
	as, err := p.j.Attempts(ctx, name)
	if err != nil {
		return nil, nil, err
	}
	evs, err := p.j.Events(ctx, journal.EventQuery{VM: name})
	if err != nil {
		return nil, nil, err
	}
	// Events come in Seq order: this VM's story starts at the last launch.
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].Type == EvLaunch {
			evs = evs[i:]
			break
		}
	}
	return as, evs, nil
}

// Health diagnoses a VM's instance: the provider's Diagnoser where it has
// one, else provider.DiagnoseFromObserve. A VM without an instance is Gone.
// HealthGPU adds the machine's own view of its GPUs, over SSH.
func (p *Provisioner) Health(ctx context.Context, name string, opts ...HealthOption) (provider.Diagnosis, error) {
	var hc healthConfig
	for _, o := range opts {
		o(&hc)
	}
	row, err := p.j.GetVM(ctx, name)
	if err != nil {
		return provider.Diagnosis{}, vmError(name, err)
	}
	if row.InstanceID == "" {
		return provider.Diagnosis{Findings: []provider.Finding{{Severity: provider.Critical, Code: "no-instance",
			Message: fmt.Sprintf("VM is %s and has no instance", row.State)}}}, nil
	}
	pp, ok := p.providers[row.Provider]
	if !ok {
		return provider.Diagnosis{}, fmt.Errorf("gpuprov: VM %s: provider %q is not configured", name, row.Provider)
	}
	loc := provider.Location{Region: row.Region, Zone: row.Zone}
	var dg provider.Diagnosis
	err = pp.call(ctx, "diagnose", loc, func(ctx context.Context) (err error) {
		if d, ok := pp.CloudProvider.(provider.Diagnoser); ok {
			dg, err = d.Diagnose(ctx, loc, name, row.InstanceID)
		} else {
			dg, err = provider.DiagnoseFromObserve(ctx, pp.CloudProvider, loc, name, row.InstanceID)
		}
		return err
	})
	if err == nil && hc.gpu && dg.Exists && dg.Status == provider.StatusRunning {
		dg.Findings = append(dg.Findings, p.gpuHealth(ctx, row)...)
	}
	if err == nil && row.State == StateReady {
		if i := slices.IndexFunc(dg.Findings, func(f provider.Finding) bool { return f.Code == "preempted" }); i >= 0 {
			if rerr := p.recordPreemption(ctx, row, dg.Findings[i]); rerr != nil {
				p.log.Warn("gpuprov: recording a preemption", "vm", name, "err", rerr)
			}
		}
	}
	return dg, err
}

// recordPreemption journals, once per attempt, that a ready VM's instance
// was reclaimed, and counts it in its offer's history (a read that found a
// fact: no lease is needed, and nothing of the VM changes).
func (p *Provisioner) recordPreemption(ctx context.Context, row journal.VM, f provider.Finding) error {
	evs, err := p.j.Events(ctx, journal.EventQuery{VM: row.Name})
	if err != nil {
		return err
	}
	if slices.ContainsFunc(evs, func(e journal.Event) bool { return e.Type == EvPreempted && e.Attempt == row.Attempt }) {
		return nil
	}
	as, err := p.j.Attempts(ctx, row.Name)
	if err != nil {
		return err
	}
	i := slices.IndexFunc(as, func(a journal.Attempt) bool { return a.N == row.Attempt })
	if i < 0 {
		return nil
	}
	a := &as[i]
	now := p.clock.Now()
	at := cmp.Or(f.At, now)
	var o provider.Offer
	_ = jsonUnmarshal(a.Offer, &o) // the engine wrote it; a zero offer only loses the type and spot in the history
	st := &journal.Step{
		Events: []journal.Event{{Time: now, VM: row.Name, Attempt: a.N, Type: EvPreempted, Provider: a.Provider, Region: a.Region,
			Zone: a.Zone, InstanceID: row.InstanceID, Message: f.Message, Owner: p.owner}},
	}
	if !a.CreateSent.IsZero() {
		st.Outcomes = []journal.Outcome{{OfferKey: a.OfferKey, Provider: a.Provider, Region: a.Region, Zone: a.Zone,
			InstanceType: o.InstanceType, Spot: o.Spot, Kind: journal.OutcomePreempted, Elapsed: max(at.Sub(a.CreateSent), 0), At: now}}
	}
	if err := p.j.Commit(ctx, st); err != nil {
		return err
	}
	p.emit(st.Events)
	return nil
}

// DefaultWaitPoll is how often Wait reads the journal.
const DefaultWaitPoll = 2 * time.Second

// Wait waits until VM name is ready, whichever process drives it (this
// one, another replica, a RecoverInBackground), as the AWS SDK's waiters
// do: it reads the journal every DefaultWaitPoll (on the Provisioner's
// clock) and returns the VM once it is ready. A VM that ends otherwise
// (failed, or deleted) is returned with an error matching ErrEnded that
// says how and why; an unknown name is ErrNotFound. ctx bounds the wait;
// nothing is sent to a cloud.
func (p *Provisioner) Wait(ctx context.Context, name string) (*VM, error) {
	for {
		row, err := p.j.GetVM(ctx, name)
		if err != nil {
			return nil, vmError(name, err)
		}
		switch {
		case row.State == journal.StateReady:
			return vmFromRow(row), nil
		case row.State.Terminal():
			msg := fmt.Sprintf("VM %s is %s", name, row.State)
			if row.LastError != "" {
				msg += ": " + row.LastError
			}
			return vmFromRow(row), errorf("%s: %w", msg, ErrEnded)
		}
		if err := p.clock.Sleep(ctx, DefaultWaitPoll); err != nil {
			return vmFromRow(row), errorf("waiting for VM %s (%s): %w", name, row.State, context.Cause(ctx))
		}
	}
}

// DeleteCluster deletes every node of the cluster named name, all at once,
// as Delete does each (a node's launch running in this process is
// cancelled first; the placement group goes with the last node of its
// location). It returns when every node has ended, joining the errors of
// the nodes that could not be deleted; a cluster with no node in the
// journal is ErrNotFound.
func (p *Provisioner) DeleteCluster(ctx context.Context, name string) (err error) {
	ctx, sp := p.startOp(ctx, "gpuprov.DeleteCluster")
	if sp.IsRecording() {
		sp.SetAttributes(attrCluster.String(name))
		defer func() { endSpan(sp, err) }()
	}
	nodes, err := p.j.ListVMs(ctx, journal.ListOptions{Cluster: name})
	if err != nil {
		return errorf("cluster %s: listing its nodes: %w", name, err)
	}
	if len(nodes) == 0 {
		return errorf("no cluster named %s in the journal: %w", name, ErrNotFound)
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for _, n := range nodes {
		wg.Go(func() {
			if err := p.Delete(ctx, n.Name); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}
