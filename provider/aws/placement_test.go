package aws_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/aws"
)

const pgName = "gpuprov-train" // provider.PlacementGroupName("train")

// clusterLabels are the labels the core hands EnsurePlacementGroup: the
// cluster's identity and the caller's labels.
func clusterLabels() map[string]string {
	return map[string]string{provider.LabelCluster: "train", provider.LabelInstallation: installation, "team": "ml"}
}

// zoneOffers returns offers of req in region, one per zone, in Plan's order.
func (e *env) zoneOffers(t *testing.T, req provider.ResourceRequest, region string) []provider.Offer {
	t.Helper()
	offers, err := e.p.Plan(context.Background(), &req)
	if err != nil {
		t.Fatal(err)
	}
	var out []provider.Offer
	seen := map[string]bool{}
	for _, o := range offers {
		if o.Location.Region == region && !seen[o.Location.Zone] && !o.Spot {
			seen[o.Location.Zone] = true
			out = append(out, o)
		}
	}
	if len(out) < 2 {
		t.Fatalf("plan has offers in %d zones of %s, want at least 2", len(out), region)
	}
	return out
}

// launchIn prepares and creates spec's VM on offer o.
func (e *env) launchIn(t *testing.T, o provider.Offer, spec *provider.InstanceSpec) (string, error) {
	t.Helper()
	ctx := context.Background()
	prep, err := e.p.Prepare(ctx, &o, spec)
	if err != nil {
		t.Fatalf("prepare: %v", err)
	}
	return e.p.Create(ctx, &o, prep, spec)
}

func actions(reqs []*fakeReq) []string {
	var out []string
	for _, r := range reqs {
		out = append(out, r.Action)
	}
	return out
}

func pgActions(e *env) []string {
	var out []string
	for _, a := range actions(e.f.requests("")) {
		if a == "CreatePlacementGroup" || a == "DescribePlacementGroups" || a == "DeletePlacementGroup" {
			out = append(out, a)
		}
	}
	return out
}

// TestPlacementGroupLifecycle: a compact cluster's group from its first
// EnsurePlacementGroup to its deletion. The first Ensure creates a tagged
// cluster group; the second adopts it (EC2 answers Duplicate); a node
// created with spec.PlacementGroup is launched into it; deleting the group
// while that node runs, and while it shuts down, is an error matching
// provider.ErrInUse; once it is terminated the group goes, and deleting it
// again is success.
func TestPlacementGroupLifecycle(t *testing.T) {
	e := newEnv(t, awsConfig())
	ctx := context.Background()
	if !e.p.Capabilities().CompactPlacement {
		t.Fatal("Capabilities().CompactPlacement is false")
	}
	o := e.offer(t, l4)
	loc := provider.Location{Region: o.Location.Region, Zone: o.Location.Zone}
	for i := range 2 {
		if err := e.p.EnsurePlacementGroup(ctx, loc, pgName, clusterLabels()); err != nil {
			t.Fatalf("ensure %d: %v", i+1, err)
		}
	}
	if got, want := pgActions(e), []string{"CreatePlacementGroup", "CreatePlacementGroup", "DescribePlacementGroups"}; !slices.Equal(got, want) {
		t.Fatalf("placement-group requests %v, want %v", got, want)
	}
	create := e.f.requests("CreatePlacementGroup")[0]
	if create.Region != loc.Region || create.Form.Get("GroupName") != pgName || create.Form.Get("Strategy") != "cluster" {
		t.Fatalf("CreatePlacementGroup in %s: %v; want %s, strategy cluster, in %s", create.Region, create.Form, pgName, loc.Region)
	}
	if tags := tagSpec(create.Form, "placement-group"); tags[provider.LabelCluster] != "train" ||
		tags[provider.LabelInstallation] != installation || tags["team"] != "ml" || len(tags) != 3 {
		t.Fatalf("placement group tags %v; want the cluster, the installation and team=ml", tags)
	}
	if side := e.f.side(); !slices.Contains(side, "pg:"+loc.Region+"/"+pgName) {
		t.Fatalf("fake holds %v, no placement group", side)
	}

	spec := newSpec(t, "train-0")
	spec.PlacementGroup = pgName
	id, err := e.launchIn(t, o, spec)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	run := e.f.requests("RunInstances")[0]
	if got := run.Form.Get("Placement.GroupName"); got != pgName {
		t.Fatalf("RunInstances Placement.GroupName = %q, want %q", got, pgName)
	}
	if got := run.Form.Get("NetworkInterface.1.SubnetId"); got != subnetID(o.Location.Zone) {
		t.Fatalf("RunInstances subnet %q, want the zone's %q", got, subnetID(o.Location.Zone))
	}
	if live := e.f.live(); len(live) != 1 || live[0].PG != pgName {
		t.Fatalf("fake holds %+v, want one instance in %s", live, pgName)
	}

	inUse := func(when string) {
		t.Helper()
		err := e.p.DeletePlacementGroup(ctx, loc, pgName)
		if !errors.Is(err, provider.ErrInUse) || provider.KindOf(err) != provider.Transient ||
			aws.ErrorCode(err) != "InvalidPlacementGroup.InUse" {
			t.Fatalf("delete %s: %v (kind %s); want Transient matching provider.ErrInUse, code InvalidPlacementGroup.InUse",
				when, err, provider.KindOf(err))
		}
		if !slices.Contains(e.f.side(), "pg:"+loc.Region+"/"+pgName) {
			t.Fatalf("delete %s removed the group", when)
		}
	}
	inUse("while the node runs")
	e.clk.Advance(bootTime)
	if err := e.p.Delete(ctx, loc, spec.VM, []string{id}); err != nil {
		t.Fatal(err)
	}
	inUse("while the node shuts down")
	e.clk.Advance(deleteTime)
	if err := e.p.DeletePlacementGroup(ctx, loc, pgName); err != nil {
		t.Fatalf("delete after the node terminated: %v", err)
	}
	if side := e.f.side(); slices.Contains(side, "pg:"+loc.Region+"/"+pgName) {
		t.Fatalf("the group is still there: %v", side)
	}
	before := len(e.f.requests("DeletePlacementGroup"))
	if err := e.p.DeletePlacementGroup(ctx, loc, pgName); err != nil {
		t.Fatalf("delete of a deleted group: %v", err)
	}
	if n := len(e.f.requests("DeletePlacementGroup")); n != before {
		t.Fatalf("a group not listed was deleted again (%d DeletePlacementGroup, want %d)", n, before)
	}
}

// Deleting a group that is not there is success: one never made (not
// listed), and one deleted between DescribePlacementGroups and
// DeletePlacementGroup (EC2 answers InvalidPlacementGroup.Unknown).
func TestDeletePlacementGroupThatIsGone(t *testing.T) {
	e := newEnv(t, awsConfig())
	ctx := context.Background()
	loc := provider.Location{Region: "us-east-1"}
	if err := e.p.DeletePlacementGroup(ctx, loc, "gpuprov-never"); err != nil {
		t.Fatalf("delete of a group never made: %v", err)
	}
	if err := e.p.EnsurePlacementGroup(ctx, loc, pgName, clusterLabels()); err != nil {
		t.Fatal(err)
	}
	e.f.fail(&fakeRule{Action: "DeletePlacementGroup", Code: "InvalidPlacementGroup.Unknown", Times: 1})
	if err := e.p.DeletePlacementGroup(ctx, loc, pgName); err != nil {
		t.Fatalf("delete answered InvalidPlacementGroup.Unknown: %v", err)
	}
	if n := len(e.f.requests("DeletePlacementGroup")); n != 1 {
		t.Fatalf("%d DeletePlacementGroup, want 1 (none for the group never made)", n)
	}
}

// A group of the cluster's name that this installation did not make, or
// that is not a cluster group, is not adopted: Ensure refuses it as
// InvalidRequest, and Delete leaves it alone.
func TestEnsurePlacementGroupRefusesWhatIsNotOurs(t *testing.T) {
	e := newEnv(t, awsConfig())
	ctx := context.Background()
	loc := provider.Location{Region: "us-east-1"}
	other, err := aws.New(awsConfig(), aws.WithInstallation("inst-other"), aws.WithEndpoint(e.f.endpoint()), aws.WithClock(e.clk))
	if err != nil {
		t.Fatal(err)
	}
	if err := other.EnsurePlacementGroup(ctx, loc, pgName, map[string]string{provider.LabelCluster: "train"}); err != nil {
		t.Fatal(err)
	}
	err = e.p.EnsurePlacementGroup(ctx, loc, pgName, clusterLabels())
	errKind(t, err, provider.InvalidRequest)
	if err := e.p.DeletePlacementGroup(ctx, loc, pgName); err != nil {
		t.Fatalf("delete of another installation's group: %v", err)
	}
	if n := len(e.f.requests("DeletePlacementGroup")); n != 0 || !slices.Contains(e.f.side(), "pg:us-east-1/"+pgName) {
		t.Fatalf("another installation's group was deleted (%d DeletePlacementGroup; fake holds %v)", n, e.f.side())
	}

	e.f.mu.Lock()
	e.f.pgs["us-east-1|gpuprov-spread"] = &fakePG{ID: "pg-0spread", Region: "us-east-1", Name: "gpuprov-spread", Strategy: "spread",
		Tags: map[string]string{provider.LabelInstallation: installation}}
	e.f.mu.Unlock()
	err = e.p.EnsurePlacementGroup(ctx, loc, "gpuprov-spread", clusterLabels())
	errKind(t, err, provider.InvalidRequest)
}

// Create into a placement group, as EC2 refuses it: the group is unknown
// in the region (Failed: the next attempt ensures the group again); its
// instances are in another zone (Unavailable for this zone; nothing
// created); no capacity (Capacity for the offer, as without a group).
func TestCreateInPlacementGroupErrors(t *testing.T) {
	ctx := context.Background()
	t.Run("unknown group", func(t *testing.T) {
		e := newEnv(t, awsConfig())
		spec := newSpec(t, "train-0")
		spec.PlacementGroup = "gpuprov-gone"
		_, err := e.launchIn(t, e.offer(t, l4), spec)
		pe := errKind(t, err, provider.Failed)
		if aws.ErrorCode(err) != "InvalidPlacementGroup.Unknown" || pe.Op != "create" || pe.Scope() != provider.ScopeOffer {
			t.Fatalf("%v: want InvalidPlacementGroup.Unknown at create, blocking the offer", err)
		}
		if live := e.f.live(); len(live) != 0 {
			t.Fatalf("a refused create left %+v", live)
		}
	})
	t.Run("group in another zone", func(t *testing.T) {
		e := newEnv(t, awsConfig())
		zones := e.zoneOffers(t, l4, "us-east-1")
		loc := provider.Location{Region: "us-east-1", Zone: zones[0].Location.Zone}
		if err := e.p.EnsurePlacementGroup(ctx, loc, pgName, clusterLabels()); err != nil {
			t.Fatal(err)
		}
		first := newSpec(t, "train-0")
		first.PlacementGroup = pgName
		if _, err := e.launchIn(t, zones[0], first); err != nil {
			t.Fatal(err)
		}
		second := newSpec(t, "train-1")
		second.PlacementGroup = pgName
		_, err := e.launchIn(t, zones[1], second)
		pe := errKind(t, err, provider.Unavailable)
		if aws.ErrorCode(err) != "InvalidPlacementGroup.InUse" || pe.Scope() != provider.ScopeZone || errors.Is(err, provider.ErrInUse) {
			t.Fatalf("%v (scope %s): want InvalidPlacementGroup.InUse blocking the zone, not matching ErrInUse", err, pe.Scope())
		}
		if live := e.f.live(); len(live) != 1 {
			t.Fatalf("fake holds %d instances, want the first node only", len(live))
		}
	})
	t.Run("no capacity", func(t *testing.T) {
		e := newEnv(t, awsConfig())
		o := e.offer(t, l4)
		if err := e.p.EnsurePlacementGroup(ctx, o.Location, pgName, clusterLabels()); err != nil {
			t.Fatal(err)
		}
		e.f.fail(&fakeRule{Action: "RunInstances", Code: "InsufficientInstanceCapacity"})
		spec := newSpec(t, "train-0")
		spec.PlacementGroup = pgName
		_, err := e.launchIn(t, o, spec)
		if pe := errKind(t, err, provider.Capacity); pe.Scope() != provider.ScopeOffer {
			t.Fatalf("capacity in a placement group blocks %s, want the offer", pe.Scope())
		}
		if got := e.f.requests("RunInstances")[0].Form.Get("Placement.GroupName"); got != pgName {
			t.Fatalf("Placement.GroupName = %q", got)
		}
	})
}

// EnsurePlacementGroup's own refusals: the account's placement-group limit
// is Quota for the region; a group EC2 says exists but does not list yet
// is Transient.
func TestEnsurePlacementGroupErrors(t *testing.T) {
	ctx := context.Background()
	loc := provider.Location{Region: "us-east-1"}
	e := newEnv(t, awsConfig())
	e.f.fail(&fakeRule{Action: "CreatePlacementGroup", Code: "PlacementGroupLimitExceeded", Times: 1})
	err := e.p.EnsurePlacementGroup(ctx, loc, pgName, clusterLabels())
	if pe := errKind(t, err, provider.Quota); pe.Scope() != provider.ScopeRegion || pe.Op != "prepare" {
		t.Fatalf("limit: scope %s op %q, want region, prepare", pe.Scope(), pe.Op)
	}
	e.f.fail(&fakeRule{Action: "CreatePlacementGroup", Code: "InvalidPlacementGroup.Duplicate", Times: 1})
	err = e.p.EnsurePlacementGroup(ctx, loc, pgName, clusterLabels())
	errKind(t, err, provider.Transient)
	if err := e.p.EnsurePlacementGroup(ctx, loc, pgName, clusterLabels()); err != nil {
		t.Fatalf("ensure again: %v", err)
	}
}
