package gpuprov_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/journal/sqlite"
	"github.com/org/gpuprov/provider"
	pt "github.com/org/gpuprov/provider/providertest"
)

// fakeNodes is a Connector, Bootstrapper and Joiner that records what each
// node was asked to do.
type fakeNodes struct {
	mu       sync.Mutex
	log      []string
	hostKey  string
	failBoot map[string]bool // VM → bootstrap fails
	failConn map[string]int  // VM → connect failures left
	// failConnErr is what a failing connect returns (default: refused).
	failConnErr error
	served      []string
	joined      map[string]string // agent → server
}

func newFakeNodes() *fakeNodes {
	return &fakeNodes{hostKey: "ssh-ed25519 AAAAfake", failBoot: map[string]bool{}, failConn: map[string]int{}, joined: map[string]string{}}
}

type fakeConn struct {
	n   *fakeNodes
	vm  string
	key string
}

func (c *fakeConn) Run(ctx context.Context, cmd string) ([]byte, []byte, error) {
	c.n.record(c.vm, "run "+cmd)
	return nil, nil, nil
}
func (c *fakeConn) WriteFile(ctx context.Context, path string, b []byte, m fs.FileMode) error {
	c.n.record(c.vm, "write "+path)
	return nil
}
func (c *fakeConn) HostKey() string { return c.key }
func (c *fakeConn) Close() error    { return nil }

func (n *fakeNodes) record(vm, s string) {
	n.mu.Lock()
	n.log = append(n.log, vm+": "+s)
	n.mu.Unlock()
}

func (n *fakeNodes) Connect(ctx context.Context, node gpuprov.Node) (gpuprov.Conn, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.failConn[node.VM] > 0 {
		n.failConn[node.VM]--
		if n.failConnErr != nil {
			return nil, n.failConnErr
		}
		return nil, errors.New("connection refused")
	}
	n.log = append(n.log, node.VM+": connect "+node.SSH.Address())
	// The key the node presents: the injected one where gpuprov injected
	// one (cloud-init installed it), else the image's own.
	key := node.HostKey
	if key == "" {
		key = n.hostKey
	}
	return &fakeConn{n: n, vm: node.VM, key: key}, nil
}

func (n *fakeNodes) Bootstrap(ctx context.Context, node gpuprov.Node, c gpuprov.Conn) error {
	if n.failBoot[node.VM] {
		return errors.New("apt-get: exit status 100")
	}
	_, _, err := c.Run(ctx, "bootstrap")
	return err
}

func (n *fakeNodes) Serve(ctx context.Context, node gpuprov.Node, c gpuprov.Conn) (gpuprov.JoinInfo, error) {
	n.mu.Lock()
	n.served = append(n.served, node.VM)
	n.mu.Unlock()
	return gpuprov.JoinInfo{URL: "https://" + node.SSH.Host + ":6443", Token: "K10secret", Kubeconfig: []byte("kubeconfig of " + node.VM)}, nil
}

func (n *fakeNodes) Join(ctx context.Context, s gpuprov.JoinInfo, node gpuprov.Node, c gpuprov.Conn) error {
	n.mu.Lock()
	n.joined[node.VM] = s.Server.VM
	n.mu.Unlock()
	return nil
}

func TestLaunchClusterElectsOneServerAndJoinsTheRest(t *testing.T) {
	fn := newFakeNodes()
	e := newEnv(t, gpuprov.WithConnector(fn), gpuprov.WithBootstrapper(fn), gpuprov.WithJoiner(fn))
	// Node 2's first offer is out of stock: it is replaced by failover.
	e.fake("a").Script(&pt.Rule{Op: pt.OpCreate, Match: func(c *pt.Call) bool { return c.VM == "gpu-2" }, Err: pe(provider.Capacity, "none"), Times: 1})
	cl, err := e.p.LaunchCluster(context.Background(), gpuprov.ClusterRequest{Name: "gpu", Nodes: 3, Node: h100("")})
	if err != nil {
		t.Fatal(err)
	}
	if len(fn.served) != 1 || cl.Server != fn.served[0] {
		t.Fatalf("served by %v, cluster says %q", fn.served, cl.Server)
	}
	if len(fn.joined) != 2 {
		t.Fatalf("joined %v", fn.joined)
	}
	for agent, server := range fn.joined {
		if server != cl.Server || agent == cl.Server {
			t.Fatalf("agent %s joined %s (server %s)", agent, server, cl.Server)
		}
	}
	if string(cl.Kubeconfig) != "kubeconfig of "+cl.Server {
		t.Fatalf("kubeconfig %q", cl.Kubeconfig)
	}
	for _, v := range cl.Nodes {
		if v.State != gpuprov.StateReady || v.Cluster != "gpu" || !strings.HasPrefix(v.HostKey, "ssh-ed25519 ") || v.HostKey == fn.hostKey {
			t.Fatalf("node %+v", v)
		}
		e.assertClean(v.Name)
	}
	// The token never reached the journal.
	evs, _ := e.j.Events(context.Background(), journal.EventQuery{})
	for _, ev := range evs {
		if strings.Contains(ev.Message, "K10secret") {
			t.Fatalf("join token journaled in %+v", ev)
		}
	}
}

func TestClusterAllOrNothing(t *testing.T) {
	fn := newFakeNodes()
	fn.failBoot["pair-1"] = true
	e := newEnv(t, gpuprov.WithConnector(fn), gpuprov.WithBootstrapper(fn), gpuprov.WithJoiner(fn))
	cl, err := e.p.LaunchCluster(context.Background(), gpuprov.ClusterRequest{Name: "pair", Nodes: 2, Node: h100("")})
	if err == nil || !strings.Contains(err.Error(), "1 of 2 nodes ready") {
		t.Fatalf("err %v", err)
	}
	if _, ok := cl.Errors["pair-1"]; !ok {
		t.Fatalf("errors %v", cl.Errors)
	}
	for _, name := range []string{"pair-0", "pair-1"} {
		row := e.assertClean(name)
		if row.State == journal.StateReady {
			t.Fatalf("%s still ready after an all-or-nothing failure", name)
		}
	}
	// With a minimum of one, the same failure keeps the good node.
	fn2 := newFakeNodes()
	fn2.failBoot["min-1"] = true
	e2 := newEnv(t, gpuprov.WithConnector(fn2), gpuprov.WithBootstrapper(fn2), gpuprov.WithJoiner(fn2))
	cl, err = e2.p.LaunchCluster(context.Background(), gpuprov.ClusterRequest{Name: "min", Nodes: 2, MinNodes: 1, Node: h100("")})
	if err != nil || cl.Nodes[0].State != gpuprov.StateReady {
		t.Fatalf("min 1: %v %+v", err, cl)
	}
}

// Where the cloud takes no user-data, the first contact's key is pinned.
func TestHostKeyPinnedOnFirstContactWithoutUserData(t *testing.T) {
	fn := newFakeNodes()
	e := newEnv(t, gpuprov.WithConnector(fn))
	for _, f := range e.fakes {
		f.Caps.Unsupported = []provider.Feature{provider.FeatureUserData}
	}
	p := e.provisioner(e.j, gpuprov.WithConnector(fn))
	vm, err := p.Launch(context.Background(), h100("tofu"))
	if err != nil {
		t.Fatal(err)
	}
	if vm.HostKey != fn.hostKey {
		t.Fatalf("pinned %q, want the key seen on first contact", vm.HostKey)
	}
	if !slices.Contains(e.eventTypes("tofu"), gpuprov.EvHostKeyPinned) {
		t.Fatalf("events %v", e.eventTypes("tofu"))
	}
}

func TestConnectFailureFailsOverBootstrapFailureAborts(t *testing.T) {
	fn := newFakeNodes()
	fn.failConn["flaky"] = 1
	e := newEnv(t, gpuprov.WithConnector(fn), gpuprov.WithPhaseTimeouts(time.Minute, time.Minute))
	vm, err := e.p.Launch(context.Background(), h100("flaky"))
	if err != nil {
		t.Fatal(err)
	}
	if vm.Location.Zone != "us-east-1b" {
		t.Fatalf("after a failed connect the next offer should be used, got %s", vm.Location.Zone)
	}
	if bs, _ := e.j.Blocks(context.Background(), e.clk.Now()); len(bs) != 0 {
		t.Fatalf("a connect failure must not block the offer: %+v", bs)
	}
	e.assertClean("flaky")

	fn.failBoot["broken"] = true
	p := e.provisioner(e.j, gpuprov.WithConnector(fn), gpuprov.WithBootstrapper(fn))
	_, err = p.Launch(context.Background(), h100("broken"))
	if !errors.Is(err, gpuprov.ErrAborted) || !strings.Contains(err.Error(), "exit status 100") {
		t.Fatalf("err %v", err)
	}
	if n := len(e.fake("a").Calls(pt.OpCreate)); n != 3 {
		t.Fatalf("a failing bootstrap must not be retried on other offers (%d creates in all)", n)
	}
	e.assertClean("broken")
}

// Two Provisioners, each with its own handle on one journal file as two
// processes would have: concurrent launches are safe, and Recover leaves a VM
// alone while its owner's lease is live.
func TestTwoProvisionersShareAJournal(t *testing.T) {
	e := newEnv(t)
	db2, err := sqlite.Open(context.Background(), e.path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db2.Close() })
	p2 := e.provisioner(db2)
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for i := range 10 {
		for _, p := range []*gpuprov.Provisioner{e.p, p2} {
			wg.Go(func() {
				_, err := p.Launch(context.Background(), h100(fmt.Sprintf("%s-%d", map[bool]string{true: "one", false: "two"}[p == e.p], i)))
				errs <- err
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	vms, _ := e.j.ListVMs(context.Background(), journal.ListOptions{States: []journal.VMState{journal.StateReady}})
	if len(vms) != 20 || len(e.live()) != 20 {
		t.Fatalf("%d ready VMs, %d live instances; want 20 of each", len(vms), len(e.live()))
	}

	// p3 holds a launch, parked in its connect phase; p's Recover and
	// Delete must leave it alone. While it is parked nothing sleeps, so the
	// fake clock stands still and p3's lease stays live however slowly the
	// machine runs: a launch left polling a slow boot would let the
	// auto-advancing clock outrun p3's heartbeat (virtual seconds pass
	// faster than real renewals land) and expire the lease for real.
	parked := &parkedConnector{in: make(chan struct{})}
	p3 := e.provisioner(e.j, gpuprov.WithConnector(parked))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		r := h100("busy")
		r.Providers = []string{"b"}
		_, err := p3.Launch(ctx, r)
		done <- err
	}()
	<-parked.in
	rep, err := e.p.Recover(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := rep.Skipped["busy"]; !ok || len(rep.Resumed) != 0 {
		t.Fatalf("recover took a VM another live process drives: %+v", rep)
	}
	if err := e.p.Delete(context.Background(), "busy"); !errors.Is(err, gpuprov.ErrBusy) {
		t.Fatalf("delete of a VM another process drives: %v", err)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled launch: %v", err)
	}
	e.assertClean("busy")
}

// parkedConnector blocks every Connect until its context ends, and says
// when the first one started.
type parkedConnector struct {
	in   chan struct{}
	once sync.Once
}

func (c *parkedConnector) Connect(ctx context.Context, n gpuprov.Node) (gpuprov.Conn, error) {
	c.once.Do(func() { close(c.in) })
	<-ctx.Done()
	return nil, context.Cause(ctx)
}

// A cluster whose node name is taken fails before any node is launched.
func TestClusterWithATakenNameLaunchesNothing(t *testing.T) {
	e := newEnv(t)
	if _, err := e.p.Launch(context.Background(), h100("gpu-1")); err != nil {
		t.Fatal(err)
	}
	creates := len(e.fake("a").Calls(pt.OpCreate)) + len(e.fake("b").Calls(pt.OpCreate))
	_, err := e.p.LaunchCluster(context.Background(), gpuprov.ClusterRequest{Name: "gpu", Nodes: 3, Node: h100("")})
	if !errors.Is(err, gpuprov.ErrExists) || !strings.Contains(err.Error(), "gpu-1") {
		t.Fatalf("err %v, want ErrExists naming gpu-1", err)
	}
	if n := len(e.fake("a").Calls(pt.OpCreate)) + len(e.fake("b").Calls(pt.OpCreate)); n != creates {
		t.Fatalf("%d creates for a cluster refused up front", n-creates)
	}
	if _, err := e.j.GetVM(context.Background(), "gpu-0"); !errors.Is(err, journal.ErrNotFound) {
		t.Fatalf("gpu-0 was journaled: %v", err)
	}
}

// TestPlacedClusterMovesAsAWhole: a same-zone cluster whose third node
// meets a stockout in the cheapest zone gives that zone up entirely and
// lands every node in the next one; a node failing over on its own (as
// with placement any) would have split the cluster.
func TestPlacedClusterMovesAsAWhole(t *testing.T) {
	e := newEnv(t)
	e.fake("a").Script(&pt.Rule{Op: pt.OpCreate, Match: func(c *pt.Call) bool { return c.VM == "z-2" && c.Location.Zone == "us-east-1a" },
		Err: pe(provider.Capacity, "no capacity in us-east-1a"), Times: 1})
	cl, err := e.p.LaunchCluster(context.Background(), gpuprov.ClusterRequest{Name: "z", Nodes: 3, Node: h100(""), Placement: gpuprov.PlacementSameZone})
	if err != nil {
		t.Fatalf("launch: %v", err)
	}
	for _, v := range cl.Nodes {
		if v.State != gpuprov.StateReady || v.Location.Zone != "us-east-1b" {
			t.Fatalf("node %s %s in %s; want every node ready in us-east-1b", v.Name, v.State, v.Location)
		}
	}
	live := append(e.fake("a").Live(), e.fake("b").Live()...)
	if len(live) != 3 {
		t.Fatalf("%d live instances, want the cluster's 3", len(live))
	}
	for _, in := range live {
		if in.Location.Zone != "us-east-1b" {
			t.Fatalf("live instance %s in %s; want nothing outside us-east-1b", in.ID, in.Location)
		}
	}
	// Each node's history reads as one story: it starts at the launch of
	// the VM as it is now, and every event about an attempt is about one
	// of its attempts, in the location that attempt was in.
	for _, v := range cl.Nodes {
		as, evs, err := e.p.History(context.Background(), v.Name)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) == 0 || evs[0].Type != gpuprov.EvLaunch {
			t.Fatalf("history of %s does not start with its launch: %+v", v.Name, evs)
		}
		zones := map[int]string{}
		for _, a := range as {
			zones[a.N] = a.Zone
		}
		for _, ev := range evs {
			if ev.Attempt == 0 {
				continue
			}
			if z, ok := zones[ev.Attempt]; !ok || ev.Zone != z {
				t.Errorf("history of %s: event %s of attempt %d in %q, but its attempts are %v", v.Name, ev.Type, ev.Attempt, ev.Zone, zones)
			}
		}
	}
}

// TestPlacementRefusedUpFront: an unknown placement, a partial minimum for
// a placed cluster, and compact placement where no provider can place are
// refused before anything is created.
func TestPlacementRefusedUpFront(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	for _, tc := range []struct {
		req  gpuprov.ClusterRequest
		want string
	}{
		{gpuprov.ClusterRequest{Name: "p", Nodes: 2, Node: h100(""), Placement: "tight"}, `placement: "tight": want one of [any same-region same-zone compact]`},
		{gpuprov.ClusterRequest{Name: "p", Nodes: 2, MinNodes: 1, Node: h100(""), Placement: gpuprov.PlacementSameRegion}, "all or nothing"},
	} {
		_, err := e.p.LaunchCluster(ctx, tc.req)
		var re *gpuprov.RequestError
		if !errors.As(err, &re) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: err %v, want a RequestError saying %q", tc.req, err, tc.want)
		}
	}
	_, err := e.p.LaunchCluster(ctx, gpuprov.ClusterRequest{Name: "p", Nodes: 2, Node: h100(""), Placement: gpuprov.PlacementCompact})
	if !errors.Is(err, gpuprov.ErrNoOffers) || !strings.Contains(err.Error(), "no offer on a provider that can place a compact cluster") {
		t.Fatalf("compact on providers without placement groups: %v", err)
	}
	if n := len(e.fake("a").Calls(pt.OpCreate, pt.OpPrepare)) + len(e.fake("b").Calls(pt.OpCreate, pt.OpPrepare)); n != 0 {
		t.Fatalf("%d prepares or creates for refused clusters", n)
	}
}

// TestDeleteCluster: a cluster is deleted as a whole, every node at once,
// with nothing left in the cloud; an unknown cluster is ErrNotFound.
func TestDeleteCluster(t *testing.T) {
	ctx := context.Background()
	fn := newFakeNodes()
	e := newEnv(t, gpuprov.WithConnector(fn), gpuprov.WithBootstrapper(fn), gpuprov.WithJoiner(fn))
	for _, f := range e.fakes {
		f.DeleteTime = time.Minute
	}
	cl, err := e.p.LaunchCluster(ctx, gpuprov.ClusterRequest{Name: "gone", Nodes: 3, Node: h100("")})
	if err != nil {
		t.Fatal(err)
	}
	start := e.clk.Now()
	if err := e.p.DeleteCluster(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	// Three deletions of a minute each, at once: not three minutes.
	if took := e.clk.Now().Sub(start); took >= 3*time.Minute {
		t.Errorf("deleting 3 nodes took %v; want them deleted together", took)
	}
	for _, n := range cl.Nodes {
		if row := e.assertClean(n.Name); row.State != journal.StateDeleted {
			t.Errorf("node %s is %s after DeleteCluster", n.Name, row.State)
		}
	}
	if err := e.p.DeleteCluster(ctx, "nope"); !errors.Is(err, gpuprov.ErrNotFound) {
		t.Errorf("DeleteCluster of an unknown cluster: %v; want ErrNotFound", err)
	}
}
