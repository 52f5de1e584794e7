package replicatest_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/journal/journaltest"
	"github.com/org/gpuprov/journal/postgres"
	"github.com/org/gpuprov/journal/postgres/pgtest"
	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/providertest"
	"github.com/org/gpuprov/provider/sim"
	"github.com/org/gpuprov/provider/sim/simserver"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

const (
	cloud = "sim-a"
	// leaseTTL is short so that takeover is quick, but long enough that a
	// live replica's heartbeat (every TTL/3) survives CPU starvation under
	// -race with other test binaries on 2 cores: at 2s a starved heartbeat
	// let a lease lapse now and then, and a survivor rightly took the VM;
	// at 4s it still did, once in a clean-clone CI run (3 of 300 VMs taken
	// from the live replica while other packages' tests shared the cores).
	leaseTTL = 8 * time.Second
)

// replica is one engine process: its own pool on the shared journal, its
// own provider client, its own owner id, and a power switch.
type replica struct {
	owner string
	sw    *atomic.Bool // the replica's power switch: true is dead
	db    *postgres.DB
	kp    *providertest.Killed
	p     *gpuprov.Provisioner
}

// world is the simulated cloud and the journal the replicas share.
type world struct {
	t   *testing.T
	srv *simserver.Server
	url string
}

func newWorld(t *testing.T, timing simserver.Timing) *world {
	t.Helper()
	pg := pgtest.Require(t)
	srv, err := simserver.Start(simserver.Options{
		DisableSSH: true,
		Clouds:     []simserver.CloudConfig{{Name: cloud, Offers: simserver.DefaultCatalog(cloud), Timing: &timing}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return &world{t: t, srv: srv, url: pg.NewSchema(t)}
}

// replica starts a replica named owner.
func (w *world) replica(owner string, opts ...gpuprov.Option) *replica {
	w.t.Helper()
	return w.replicaWith(owner, nil, nil, opts...)
}

// replicaWith starts a replica whose journal and provider are wrapped by
// wrapJ and wrapP (when not nil), inside the power switch.
func (w *world) replicaWith(owner string, wrapJ func(journal.Journal) journal.Journal,
	wrapP func(provider.CloudProvider) provider.CloudProvider, opts ...gpuprov.Option) *replica {
	w.t.Helper()
	db, err := postgres.Open(context.Background(), w.url)
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { db.Close() })
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	w.t.Cleanup(tr.CloseIdleConnections)
	sp, err := sim.New(sim.Config{
		Endpoint: w.srv.URL(), Cloud: cloud, APIKey: w.srv.APIKey(cloud),
		PollInterval: 200 * time.Millisecond, BootTimeout: 30 * time.Second, DeleteTimeout: 20 * time.Second,
		ConsistencyWindow: 300 * time.Millisecond, RequestTimeout: 10 * time.Second,
	}, sim.WithName(cloud), sim.WithInstallation(db.Installation()), sim.WithHTTPClient(&http.Client{Transport: tr}))
	if err != nil {
		w.t.Fatal(err)
	}
	r := &replica{owner: owner, sw: &atomic.Bool{}, db: db}
	var cp provider.CloudProvider = sp
	if wrapP != nil {
		cp = wrapP(sp)
	}
	r.kp = providertest.Killable(cp, r.sw.Load)
	base := []gpuprov.Option{
		gpuprov.WithProvider(r.kp.WithList()), gpuprov.WithOwner(owner), gpuprov.WithLeaseTTL(leaseTTL),
		gpuprov.WithBackoff(50*time.Millisecond, time.Second, 1), gpuprov.WithPlanCache(5 * time.Second),
	}
	var j journal.Journal = db
	if wrapJ != nil {
		j = wrapJ(db)
	}
	r.p, err = gpuprov.New(&journaltest.Killable{Journal: j, Dead: r.sw.Load}, append(base, opts...)...)
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { r.p.Close() })
	return r
}

// recoverLoop runs Recover every period until ctx ends, and returns the
// VMs it resumed.
func recoverLoop(ctx context.Context, r *replica, period time.Duration, resumed map[string]error, mu *sync.Mutex) {
	for ctx.Err() == nil {
		// The report counts whatever the error: the last Recover may have
		// resumed VMs before the loop's cancellation cut its reaping short.
		if rep, _ := r.p.Recover(ctx); rep != nil {
			mu.Lock()
			for vm, err := range rep.Resumed {
				resumed[vm] = err
			}
			mu.Unlock()
		}
		select {
		case <-ctx.Done():
		case <-time.After(period):
		}
	}
}

func vmName(i int) string { return fmt.Sprintf("vm-%03d", i) }

// TestReplicasTakeOver: three replicas launch 300 VMs on one PostgreSQL
// journal; one is killed mid-way; the two survivors' periodic Recover
// finishes its VMs once its leases lapse. Every VM ends ready exactly once
// with one live instance, no VM is ever driven by two replicas at once, and
// the survivors take over exactly the dead replica's unfinished VMs.
func TestReplicasTakeOver(t *testing.T) {
	const (
		n           = 300
		replicas    = 3
		killAtReady = 35 // the victim dies once this many of its VMs are ready
	)
	start := time.Now()
	w := newWorld(t, simserver.Timing{
		APILatency: simserver.Duration(time.Millisecond),
		BootTime:   simserver.Duration(2 * time.Second), BootJitter: simserver.Duration(1500 * time.Millisecond),
		DeleteTime: simserver.Duration(200 * time.Millisecond),
	})

	var (
		mu        sync.Mutex
		launched  = map[string]int{} // per owner: launch events seen
		readyBy   = map[string]int{}
		victimEnd = make(chan struct{})
	)
	victim := "replica-2"
	armed := make(chan struct{})
	var armOnce sync.Once
	sink := func(owner string) func(gpuprov.Event) {
		return func(e gpuprov.Event) {
			mu.Lock()
			defer mu.Unlock()
			switch e.Type {
			case gpuprov.EvLaunch:
				launched[owner]++
			case gpuprov.EvReady:
				readyBy[owner]++
			}
			if owner == victim && launched[owner] == n/replicas && readyBy[owner] >= killAtReady {
				armOnce.Do(func() { close(armed) })
			}
		}
	}
	rs := make([]*replica, replicas)
	for i := range rs {
		owner := fmt.Sprintf("replica-%d", i)
		rs[i] = w.replica(owner, gpuprov.WithEvents(sink(owner)))
	}
	dead := rs[2]

	req := func(i int) gpuprov.Request {
		return gpuprov.Request{Name: vmName(i), GPU: "H100", Providers: []string{cloud}, Timeout: 40 * time.Second}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	victimCtx, killLaunches := context.WithCancel(ctx)
	defer killLaunches()

	launchErrs := make([]error, n)
	var launches sync.WaitGroup
	for i := range n {
		r := rs[i%replicas]
		lctx := ctx
		if r == dead {
			lctx = victimCtx
		}
		launches.Go(func() { _, launchErrs[i] = r.p.Launch(lctx, req(i)) })
	}
	go func() {
		defer close(victimEnd)
		select {
		case <-armed:
		case <-ctx.Done():
			return
		}
		// SIGKILL: writes and cloud calls fail from now on, the heartbeat
		// stops renewing, the in-flight launches return.
		dead.sw.Store(true)
		killLaunches()
		dead.p.Close()
	}()

	// The survivors recover periodically once the first wave of launches is
	// journaled (see TestRecoverSkipsOwnLaunch for why not before).
	waitFor(t, ctx, "every launch journaled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		total := 0
		for _, c := range launched {
			total += c
		}
		return total == n
	})
	resumed := map[string]error{}
	var resumedMu sync.Mutex
	rctx, stopRecover := context.WithCancel(ctx)
	var loops sync.WaitGroup
	for _, r := range rs[:2] {
		loops.Go(func() { recoverLoop(rctx, r, 300*time.Millisecond, resumed, &resumedMu) })
	}

	<-victimEnd
	if !dead.sw.Load() {
		t.Fatalf("the victim was never killed: %v", ctx.Err())
	}
	killedAt := time.Now()
	launches.Wait()
	t.Logf("victim killed %.1fs in; every launch call returned %.1fs later", killedAt.Sub(start).Seconds(), time.Since(killedAt).Seconds())

	waitFor(t, ctx, "every VM ready", func() bool {
		vms, err := rs[0].db.ListVMs(ctx, journal.ListOptions{States: []journal.VMState{journal.StateReady}})
		return err == nil && len(vms) == n
	})
	stopRecover()
	loops.Wait()
	t.Logf("all %d VMs ready %.1fs after the kill (lease TTL %v)", n, time.Since(killedAt).Seconds(), leaseTTL)

	for i, err := range launchErrs {
		if (i%replicas == 2) != (err != nil) && !(i%replicas == 2 && err == nil) {
			t.Errorf("launch of %s by replica-%d: %v", vmName(i), i%replicas, err)
		}
	}
	if got := dead.kp.Refused(); got > 0 {
		t.Logf("the victim's cloud client refused %d mutations after the kill (a dead process sends none)", got)
	}

	checkCloud(t, w, rs[0].db, n)
	unfinished := checkEvents(t, rs[0].db, n, victim)
	resumedMu.Lock()
	defer resumedMu.Unlock()
	var got []string
	for vm, err := range resumed {
		got = append(got, vm)
		if err != nil {
			t.Errorf("Recover resumed %s and it ended with %v", vm, err)
		}
	}
	sort.Strings(got)
	if strings.Join(got, ",") != strings.Join(unfinished, ",") {
		t.Errorf("Recover resumed %d VMs %v;\nthe victim left %d unfinished: %v", len(got), got, len(unfinished), unfinished)
	}
	if len(unfinished) == 0 {
		t.Errorf("the victim left no VM unfinished: the kill came too late to test a takeover")
	}
	t.Logf("the victim left %d VMs unfinished; the survivors took each over once", len(unfinished))
}

// checkCloud asserts that every VM has exactly one instance in the sim,
// ever, that it runs, and that it is the journaled one.
func checkCloud(t *testing.T, w *world, j journal.Journal, n int) {
	t.Helper()
	all, err := w.srv.Instances(cloud)
	if err != nil {
		t.Fatal(err)
	}
	byVM := map[string][]simserver.Instance{}
	for _, in := range all {
		byVM[in.Labels[provider.LabelVM]] = append(byVM[in.Labels[provider.LabelVM]], in)
	}
	for i := range n {
		name := vmName(i)
		v, err := j.GetVM(context.Background(), name)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		ins := byVM[name]
		switch {
		case len(ins) != 1:
			t.Errorf("%s: the cloud holds %d instances, want exactly 1: %+v", name, len(ins), ins)
		case ins[0].Status != simserver.StatusRunning:
			t.Errorf("%s: instance %s is %s, want running", name, ins[0].ID, ins[0].Status)
		case ins[0].ID != v.InstanceID:
			t.Errorf("%s: the journal says instance %q, the cloud runs %q", name, v.InstanceID, ins[0].ID)
		}
		if v.State != journal.StateReady || v.Owner != "" {
			t.Errorf("%s: ended %s with lease owner %q, want ready and free", name, v.State, v.Owner)
		}
	}
	if len(byVM) != n {
		t.Errorf("the cloud holds instances of %d VMs, want %d", len(byVM), n)
	}
}

// checkEvents reads the whole event log and asserts, per VM in Seq order,
// that every VM was ready exactly once, and that each owner's events form
// one unbroken span: the only hand-over allowed is from the victim to a
// survivor, starting with a "recovered" event. It returns the VMs the
// victim left unfinished (handed over), sorted.
func checkEvents(t *testing.T, j journal.Journal, n int, victim string) []string {
	t.Helper()
	evs, err := j.Events(context.Background(), journal.EventQuery{})
	if err != nil {
		t.Fatal(err)
	}
	byVM := map[string][]journal.Event{}
	for i, e := range evs {
		if i > 0 && e.Seq <= evs[i-1].Seq {
			t.Fatalf("event log out of Seq order at %d", i)
		}
		if e.Owner == "" {
			t.Errorf("event %d (%s of %s) has no owner", e.Seq, e.Type, e.VM)
		}
		byVM[e.VM] = append(byVM[e.VM], e)
	}
	var handed []string
	for i := range n {
		name := vmName(i)
		es := byVM[name]
		ready := 0
		var spans []string // owners, one per unbroken span
		for k, e := range es {
			if e.Type == gpuprov.EvReady {
				ready++
			}
			if e.Type == gpuprov.EvRecovered && e.Owner == victim {
				t.Errorf("%s: the victim recovered it (Seq %d)", name, e.Seq)
			}
			if len(spans) == 0 || spans[len(spans)-1] != e.Owner {
				if len(spans) > 0 && e.Type != gpuprov.EvRecovered {
					t.Errorf("%s: %s's events interleave with %s's without a takeover (Seq %d: %s)", name, e.Owner, spans[len(spans)-1], e.Seq, e.Type)
				}
				if k > 0 && es[k-1].Owner != victim {
					t.Errorf("%s: taken from the live replica %s by %s (Seq %d)", name, es[k-1].Owner, e.Owner, e.Seq)
				}
				spans = append(spans, e.Owner)
			} else if e.Type == gpuprov.EvRecovered {
				t.Errorf("%s: %s recovered a VM it was driving itself (Seq %d)", name, e.Owner, e.Seq)
			}
		}
		if ready != 1 {
			t.Errorf("%s: %d ready events, want exactly 1", name, ready)
		}
		seen := map[string]bool{}
		for _, o := range spans {
			if seen[o] {
				t.Errorf("%s: driven by %v: an owner came back after another took over", name, spans)
			}
			seen[o] = true
		}
		if len(spans) > 2 {
			t.Errorf("%s: driven by %v, want at most one takeover", name, spans)
		}
		if len(spans) == 2 {
			handed = append(handed, name)
		}
	}
	sort.Strings(handed)
	return handed
}

// waitFor polls cond every 50ms until it holds, failing t when ctx ends.
func waitFor(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
