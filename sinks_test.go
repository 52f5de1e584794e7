package gpuprov_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/provider"
	pt "github.com/org/gpuprov/provider/providertest"
)

// TestEveryJournaledEventReachesTheSinks: a cluster launch with a failover,
// a server election and joins, then a delete, journals events of many
// kinds; every one of them was handed to the WithEvents sinks too (the
// docs promise every transition), the cluster-server election included.
func TestEveryJournaledEventReachesTheSinks(t *testing.T) {
	ctx := context.Background()
	fn := newFakeNodes()
	e := newEnv(t, gpuprov.WithConnector(fn), gpuprov.WithBootstrapper(fn), gpuprov.WithJoiner(fn))
	e.fake("a").Script(&pt.Rule{Op: pt.OpCreate, Match: func(c *pt.Call) bool { return c.VM == "gpu-1" }, Err: pe(provider.Capacity, "none"), Times: 1})
	if _, err := e.p.LaunchCluster(ctx, gpuprov.ClusterRequest{Name: "gpu", Nodes: 2, Node: h100("")}); err != nil {
		t.Fatal(err)
	}
	if err := e.p.Delete(ctx, "gpu-0"); err != nil {
		t.Fatal(err)
	}
	journaled, err := e.j.Events(ctx, journal.EventQuery{})
	if err != nil {
		t.Fatal(err)
	}
	key := func(vm, typ, msg string) string { return fmt.Sprintf("%s %s %q", vm, typ, msg) }
	e.mu.Lock()
	sunk := map[string]int{}
	for _, ev := range e.events {
		sunk[key(ev.VM, ev.Type, ev.Message)]++
	}
	e.mu.Unlock()
	kinds := map[string]bool{}
	for _, ev := range journaled {
		kinds[ev.Type] = true
		k := key(ev.VM, ev.Type, ev.Message)
		if sunk[k] == 0 {
			t.Errorf("journaled but never handed to the sinks: %s", k)
			continue
		}
		sunk[k]--
	}
	for _, want := range []string{gpuprov.EvLaunch, gpuprov.EvAttempt, gpuprov.EvFailure, gpuprov.EvBlocked, gpuprov.EvClusterServer, gpuprov.EvReady, gpuprov.EvDeleting, gpuprov.EvDeleted} {
		if !kinds[want] {
			t.Errorf("the run journaled no %s event; the test does not cover it", want)
		}
	}
}
