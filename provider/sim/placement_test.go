package sim_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/sim"
	"github.com/org/gpuprov/provider/sim/simserver"
)

// clusterInstances returns the sim's instances of cluster's nodes that are
// not terminated, by zone.
func (e *engineEnv) clusterInstances(t *testing.T, cluster string) map[string][]simserver.Instance {
	t.Helper()
	all, err := e.srv.Instances(cloudName)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]simserver.Instance{}
	for _, in := range all {
		if strings.HasPrefix(in.Labels[provider.LabelVM], cluster+"-") && in.Status != simserver.StatusTerminated {
			out[in.Zone] = append(out[in.Zone], in)
		}
	}
	return out
}

func (e *engineEnv) placementGroups(t *testing.T) []simserver.PlacementGroup {
	t.Helper()
	r, err := e.srv.SideResources(cloudName)
	if err != nil {
		t.Fatal(err)
	}
	return r.PlacementGroups
}

// TestEngineCompactClusterMovesAsAWhole: the cheapest zone (us-east-1a)
// has stock for two H100 machines, so a compact 4-node cluster meets a
// stockout on its third node there. The whole cluster moves: every node in
// us-east-1a is torn down, with its placement group, and all four are
// launched again in the next location (eu-west-1b), in one placement group.
// Deleting the nodes together then leaves nothing: no instance, no group.
func TestEngineCompactClusterMovesAsAWhole(t *testing.T) {
	e := newEngineEnv(t, simserver.Faults{OfferStock: map[string]int{"a-h100x1-use1a": 2}}, sim.Config{})
	ctx := context.Background()
	cl, err := e.p.LaunchCluster(ctx, gpuprov.ClusterRequest{
		Name: "train", Nodes: 4, Node: engineReq(""), Placement: gpuprov.PlacementCompact,
	})
	if err != nil {
		t.Fatalf("launch: %v", err)
	}
	for _, v := range cl.Nodes {
		if v == nil || v.State != gpuprov.StateReady || v.Location.Zone != "eu-west-1b" {
			t.Fatalf("node %+v: want ready in eu-west-1b", v)
		}
	}
	byZone := e.clusterInstances(t, "train")
	if len(byZone) != 1 || len(byZone["eu-west-1b"]) != 4 {
		t.Fatalf("live instances by zone: %v; want 4 in eu-west-1b and nothing elsewhere", zones(byZone))
	}
	for _, in := range byZone["eu-west-1b"] {
		if in.PlacementGroup != "gpuprov-train" {
			t.Errorf("instance %s in placement group %q, want gpuprov-train", in.ID, in.PlacementGroup)
		}
	}
	groups := e.placementGroups(t)
	if len(groups) != 1 || groups[0].Region != "eu-west" || groups[0].Name != "gpuprov-train" ||
		groups[0].Labels[provider.LabelCluster] != "train" || groups[0].Labels[provider.LabelInstallation] != e.j.Installation() {
		t.Fatalf("placement groups %+v; want gpuprov-train in eu-west only, labelled with the cluster and installation", groups)
	}
	// The first location was tried and given up as a whole: its instances
	// are terminated.
	all, err := e.srv.Instances(cloudName)
	if err != nil {
		t.Fatal(err)
	}
	tried := 0
	for _, in := range all {
		if strings.HasPrefix(in.Name, "gpuprov-train-") && in.Zone == "us-east-1a" {
			tried++
			if in.Status != simserver.StatusTerminated {
				t.Errorf("instance %s in us-east-1a is %s, want terminated", in.ID, in.Status)
			}
		}
	}
	if tried < 2 {
		t.Fatalf("%d nodes were created in us-east-1a; want the two its stock holds (the stockout on the path)", tried)
	}

	// down --all: every node at once; the last one's teardown removes the
	// group.
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range 4 {
		wg.Go(func() { errs[i] = e.p.Delete(ctx, fmt.Sprintf("train-%d", i)) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if left := e.clusterInstances(t, "train"); len(left) != 0 {
		t.Fatalf("instances left after delete: %v", zones(left))
	}
	if g := e.placementGroups(t); len(g) != 0 {
		t.Fatalf("placement groups left after every node was deleted: %+v", g)
	}
}

// TestEngineSameZoneClusterStaysTogether: a same-zone cluster needs no
// placement group; its nodes share the cheapest zone, and deleting one node
// of a live compact cluster keeps the group for the others.
func TestEngineSameZoneClusterStaysTogether(t *testing.T) {
	e := newEngineEnv(t, simserver.Faults{}, sim.Config{})
	ctx := context.Background()
	cl, err := e.p.LaunchCluster(ctx, gpuprov.ClusterRequest{Name: "pair", Nodes: 2, Node: engineReq(""), Placement: gpuprov.PlacementSameZone})
	if err != nil {
		t.Fatalf("same-zone launch: %v", err)
	}
	if z := zones(e.clusterInstances(t, "pair")); len(z) != 1 || z["us-east-1a"] != 2 {
		t.Fatalf("same-zone cluster: instances by zone %v, want both in us-east-1a", z)
	}
	if g := e.placementGroups(t); len(g) != 0 {
		t.Fatalf("a same-zone cluster made placement groups: %+v", g)
	}
	_ = cl

	if _, err := e.p.LaunchCluster(ctx, gpuprov.ClusterRequest{Name: "tight", Nodes: 2, Node: engineReq(""), Placement: gpuprov.PlacementCompact}); err != nil {
		t.Fatalf("compact launch: %v", err)
	}
	if err := e.p.Delete(ctx, "tight-0"); err != nil {
		t.Fatal(err)
	}
	if g := e.placementGroups(t); len(g) != 1 {
		t.Fatalf("deleting one node of a live compact cluster: groups %+v, want the cluster's group kept", g)
	}
	if err := e.p.Delete(ctx, "tight-1"); err != nil {
		t.Fatal(err)
	}
	if g := e.placementGroups(t); len(g) != 0 {
		t.Fatalf("the last node's delete left groups %+v", g)
	}
}

// TestEngineCompactClusterWithNowhereToGo: with the only zones stocked out
// after two nodes each, a compact 4-node cluster fails, naming why, and
// leaves nothing in any location.
func TestEngineCompactClusterWithNowhereToGo(t *testing.T) {
	e := newEngineEnv(t, simserver.Faults{OfferStock: map[string]int{"a-h100x1-use1a": 2, "a-h100x1-euw1b": 3}}, sim.Config{})
	_, err := e.p.LaunchCluster(context.Background(), gpuprov.ClusterRequest{
		Name: "big", Nodes: 4, Node: engineReq(""), Placement: gpuprov.PlacementCompact,
	})
	if !errors.Is(err, gpuprov.ErrNoOffers) {
		t.Fatalf("launch: %v; want ErrNoOffers once both locations were tried", err)
	}
	for _, want := range []string{"compact", "us-east/us-east-1a", "eu-west/eu-west-1b"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	if left := e.clusterInstances(t, "big"); len(left) != 0 {
		t.Fatalf("instances left: %v", zones(left))
	}
	if g := e.placementGroups(t); len(g) != 0 {
		t.Fatalf("placement groups left: %+v", g)
	}
}

func zones(m map[string][]simserver.Instance) map[string]int {
	out := map[string]int{}
	for z, ins := range m {
		out[z] = len(ins)
	}
	return out
}
