package gpuprov_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/clock"
	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/journal/sqlite"
	"github.com/org/gpuprov/provider"
	pt "github.com/org/gpuprov/provider/providertest"
)

// runClusterCrash launches a 3-node cluster with a journal that dies after
// k writes, recovers with a new Provisioner on the same file, and checks
// that every node ended either ready and in the cluster (one server, the
// others joined to it) or cleanly failed, with nothing leaked.
func runClusterCrash(t *testing.T, k int) (writes int, crashed bool) {
	clk := clock.NewFake(t0)
	stop := clk.AutoAdvance()
	defer stop()
	fakes := standardFakes(clk)
	a := fakes[0]
	a.BootTime, a.DeleteTime = 20*time.Second, 10*time.Second
	// Node 2's first offer is out of stock: a failover inside the cluster.
	a.Script(&pt.Rule{Op: pt.OpCreate, Match: func(c *pt.Call) bool { return c.VM == "gpu-2" }, Err: pe(provider.Capacity, "none"), Times: 1})
	e := newEnvWith(t, clk, fakes)
	e.p.Close()

	// The machines outlive the process: one fakeNodes for both.
	fn := newFakeNodes()
	nodeOpts := []gpuprov.Option{gpuprov.WithConnector(fn), gpuprov.WithBootstrapper(fn), gpuprov.WithJoiner(fn)}
	cj := &crashJournal{Journal: e.j, left: k}
	p1 := e.provisioner(cj, nodeOpts...)
	_, err := p1.LaunchCluster(cj.dying(), gpuprov.ClusterRequest{Name: "gpu", Nodes: 3, Node: h100("")})
	cj.mu.Lock()
	crashed, writes = cj.crashed, cj.writes
	cj.mu.Unlock()
	p1.Close()
	if !crashed {
		// The launch ended within k writes: it must have formed the
		// cluster.
		if err != nil {
			t.Fatalf("k=%d: uncrashed cluster launch: %v", k, err)
		}
		checkCluster(t, e, fn, k, false)
		return writes, false
	}

	if rows, _ := e.j.ListVMs(context.Background(), journal.ListOptions{Cluster: "gpu"}); testing.Verbose() {
		for _, r := range rows {
			t.Logf("k=%d: after the crash %s %s/%s attempt %d", k, r.Name, r.State, r.Phase, r.Attempt)
		}
	}
	clk.Advance(2 * time.Minute)
	db2, err := sqlite.Open(context.Background(), e.path)
	if err != nil {
		t.Fatal(err)
	}
	defer db2.Close()
	e.j = db2
	rep, err := e.provisioner(db2, nodeOpts...).Recover(context.Background())
	if err != nil {
		t.Fatalf("k=%d: recover: %v", k, err)
	}
	if len(rep.Skipped) != 0 {
		t.Fatalf("k=%d: recover skipped %v", k, rep.Skipped)
	}

	checkCluster(t, e, fn, k, true)
	return writes, true
}

// checkCluster checks that every node of cluster gpu ended ready and in
// the cluster (one server, the others joined to it) or cleanly failed, with
// nothing leaked, and that all three are ready once any was journaled.
func checkCluster(t *testing.T, e *env, fn *fakeNodes, k int, recovered bool) {
	t.Helper()
	fn.mu.Lock()
	defer fn.mu.Unlock()
	var ready []string
	for i := range 3 {
		name := fmt.Sprintf("gpu-%d", i)
		if _, err := e.j.GetVM(context.Background(), name); errors.Is(err, journal.ErrNotFound) {
			continue // killed before this node was journaled
		}
		row := e.assertClean(name)
		if row.State == journal.StateReady {
			ready = append(ready, name)
		}
	}
	servers := slices.Compact(slices.Sorted(slices.Values(fn.served)))
	if len(ready) > 0 && len(servers) != 1 {
		t.Fatalf("k=%d: servers %v (served %v) for ready nodes %v; want exactly one", k, servers, fn.served, ready)
	}
	for _, name := range ready {
		if name == servers[0] {
			continue
		}
		if got := fn.joined[name]; got != servers[0] {
			t.Fatalf("k=%d: ready node %s joined %q, want the server %s (served %v, joined %v)", k, name, got, servers[0], fn.served, fn.joined)
		}
	}
	if len(ready) > 0 && !slices.Contains(ready, servers[0]) {
		t.Fatalf("k=%d: server %s is not ready, yet nodes %v are", k, servers[0], ready)
	}
	// Recover launches the nodes the crash kept from being journaled: a
	// cluster with any node journaled ends with all three ready.
	rows, _ := e.j.ListVMs(context.Background(), journal.ListOptions{Cluster: "gpu"})
	if len(rows) > 0 && len(ready) != 3 {
		var story strings.Builder
		for _, row := range rows {
			fmt.Fprintf(&story, "\n%s %s (%s):%s", row.Name, row.State, row.LastError, e.story(row.Name))
		}
		t.Fatalf("k=%d: only %v of 3 nodes ready (recovered: %v)%s", k, ready, recovered, story.String())
	}
	if len(rows) == 0 && len(e.live()) != 0 {
		t.Fatalf("k=%d: no node journaled, yet instances %+v run", k, e.live())
	}
}

// TestClusterCrashAtEveryJournalWrite kills a 3-node LaunchCluster after
// each journal write in turn and recovers: every node ends in its cluster
// (nodes that had not reached the join phase too), with one server.
func TestClusterCrashAtEveryJournalWrite(t *testing.T) {
	total, crashed := runClusterCrash(t, -1)
	if crashed {
		t.Fatal("a run with an unlimited journal crashed")
	}
	if total < 15 {
		t.Fatalf("the cluster launch makes only %d writes", total)
	}
	// The number of writes varies by a few with scheduling (a node that
	// meets the block another node's stockout set abandons its offer with
	// one attempt more), so k runs a little past the first run's total; a
	// run that ends within k writes is checked as a finished launch.
	for k := range total + 6 {
		t.Run(fmt.Sprintf("k=%d", k), func(t *testing.T) {
			if writes, crashed := runClusterCrash(t, k); !crashed && writes > k {
				t.Fatalf("made %d writes with a journal that dies after %d, and did not crash", writes, k)
			}
		})
	}
}

// A node of a cluster that a Joiner forms is not finished by a Recover
// without one: it is skipped with the reason, not called ready outside its
// cluster.
func TestRecoverWithoutJoinerSkipsClusterNodes(t *testing.T) {
	clk := clock.NewFake(t0)
	stop := clk.AutoAdvance()
	defer stop()
	fakes := standardFakes(clk)
	fakes[0].BootTime = 20 * time.Second
	e := newEnvWith(t, clk, fakes)
	e.p.Close()
	fn := newFakeNodes()
	cj := &crashJournal{Journal: e.j, left: 4}
	p1 := e.provisioner(cj, gpuprov.WithConnector(fn), gpuprov.WithJoiner(fn))
	p1.LaunchCluster(cj.dying(), gpuprov.ClusterRequest{Name: "pair", Nodes: 2, Node: h100("")})
	p1.Close()
	clk.Advance(2 * time.Minute)
	rep, err := e.provisioner(e.j, gpuprov.WithConnector(fn)).Recover(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Resumed) != 0 || len(rep.Skipped) == 0 {
		t.Fatalf("recover without a joiner: %+v", rep)
	}
	for name, why := range rep.Skipped {
		if row, _ := e.j.GetVM(context.Background(), name); row.State == journal.StateReady || !strings.Contains(why, "WithJoiner") {
			t.Fatalf("%s: %s, skipped because %q", name, row.State, why)
		}
	}
}

// TestRecoveredClusterIsAllOrNothing: a 3-node cluster killed early whose
// node gpu-0 can never be created is, after Recover, given back whole: the
// nodes that became ready are deleted, the report says why, and nothing
// runs.
func TestRecoveredClusterIsAllOrNothing(t *testing.T) {
	clk := clock.NewFake(t0)
	stop := clk.AutoAdvance()
	defer stop()
	fakes := standardFakes(clk)
	for _, f := range fakes {
		// Refused outright (no offer is blocked for the other nodes).
		f.Script(&pt.Rule{Op: pt.OpCreate, Match: func(c *pt.Call) bool { return c.VM == "gpu-0" }, Err: pe(provider.InvalidRequest, "image not allowed")})
	}
	e := newEnvWith(t, clk, fakes)
	e.p.Close()
	fn := newFakeNodes()
	nodeOpts := []gpuprov.Option{gpuprov.WithConnector(fn), gpuprov.WithBootstrapper(fn), gpuprov.WithJoiner(fn)}
	cj := &crashJournal{Journal: e.j, left: 2}
	p1 := e.provisioner(cj, nodeOpts...)
	p1.LaunchCluster(cj.dying(), gpuprov.ClusterRequest{Name: "gpu", Nodes: 3, Node: h100("")})
	p1.Close()
	if !cj.crashed {
		t.Fatal("the journal did not die")
	}
	clk.Advance(2 * time.Minute)
	rep, err := e.provisioner(e.j, nodeOpts...).Recover(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	deleted := 0
	for _, v := range rep.VMs {
		if v.Outcome == gpuprov.OutcomeDeleted && v.Err != nil && strings.Contains(v.Err.Error(), "nodes ready, 3 needed") {
			deleted++
		}
	}
	rows, _ := e.j.ListVMs(context.Background(), journal.ListOptions{Cluster: "gpu"})
	if len(rows) != 3 {
		t.Fatalf("%d nodes journaled after Recover; want all 3 (the missing ones launched)", len(rows))
	}
	for _, r := range rows {
		if r.State != journal.StateFailed && r.State != journal.StateDeleted {
			t.Errorf("%s ended %s; want failed or deleted", r.Name, r.State)
		}
		e.assertClean(r.Name)
	}
	if deleted != 2 {
		t.Errorf("report %+v: want the 2 ready nodes deleted, saying the cluster lacked a node", rep.VMs)
	}
	if live := e.live(); len(live) != 0 {
		t.Fatalf("instances left: %+v", live)
	}
}
