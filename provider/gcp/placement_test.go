package gcp_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/gcp"
)

// clusterLabels are the labels the core hands EnsurePlacementGroup.
func clusterLabels(cluster string) map[string]string {
	return map[string]string{provider.LabelInstallation: installation, provider.LabelCluster: cluster, "team": "ml"}
}

const policyPrefix = "/compute/v1/projects/" + project + "/regions/us-central1/resourcePolicies"

// A compact cluster's placement group end to end, as the core drives it:
// ensured twice (the second insert is answered 409 alreadyExists and the
// policy adopted), named in the instance's resourcePolicies at Create,
// refused deletion while the instance exists or is still being deleted
// (ErrInUse), deleted once it is gone, and a delete of a policy that is
// gone or never was is success.
func TestPlacementGroupLifecycle(t *testing.T) {
	c, mt := newCloud(t)
	p := c.provider(t, mt, gcp.Config{})
	ctx := context.Background()
	group := provider.PlacementGroupName("ring")
	spec := newSpec(t, "ring-0")
	spec.PlacementGroup = group
	o := offerIn(t, p, l4, "us-central1-a", false)

	for i := range 2 {
		if err := p.EnsurePlacementGroup(ctx, o.Location, group, clusterLabels("ring")); err != nil {
			t.Fatalf("ensure %d: %v", i, err)
		}
	}
	if got := c.policyNames(); !slices.Equal(got, []string{"us-central1/" + group}) {
		t.Fatalf("policies %v", got)
	}
	inserts := c.calls("POST " + policyPrefix)
	if len(inserts) != 2 || len(c.calls("GET "+policyPrefix+"/"+group)) != 1 {
		t.Fatalf("%d inserts and %d reads, want 2 and the one read of the adopting ensure", len(inserts), len(c.calls("GET "+policyPrefix+"/"+group)))
	}
	if n := len(c.calls("GET /compute/v1/projects/" + project + "/regions/us-central1/operations/")); n != 1 {
		t.Fatalf("%d regional operation polls, want 1 (the first insert's)", n)
	}
	var rp computepb.ResourcePolicy
	if err := protojson.Unmarshal(inserts[0].Body, &rp); err != nil {
		t.Fatal(err)
	}
	gp := rp.GetGroupPlacementPolicy()
	if rp.GetName() != group || gp.GetCollocation() != "COLLOCATED" || gp.VmCount != nil || gp.AvailabilityDomainCount != nil {
		t.Fatalf("policy body %v", &rp)
	}
	for _, want := range []string{"gpuprov-installation=" + installation, "gpuprov-cluster=ring"} {
		if !slices.Contains(strings.Fields(rp.GetDescription()), want) {
			t.Fatalf("description %q lacks %s", rp.GetDescription(), want)
		}
	}

	prep, err := p.Prepare(ctx, &o, spec)
	if err != nil {
		t.Fatal(err)
	}
	id, err := p.Create(ctx, &o, prep, spec)
	if err != nil {
		t.Fatal(err)
	}
	var in computepb.Instance
	if err := protojson.Unmarshal(c.calls("POST /compute/v1/projects/" + project + "/zones/us-central1-a/instances")[0].Body, &in); err != nil {
		t.Fatal(err)
	}
	if want := []string{"projects/" + project + "/regions/us-central1/resourcePolicies/" + group}; !slices.Equal(in.GetResourcePolicies(), want) ||
		in.GetScheduling().GetOnHostMaintenance() != "TERMINATE" {
		t.Fatalf("instance resource policies %v, onHostMaintenance %s", in.GetResourcePolicies(), in.GetScheduling().GetOnHostMaintenance())
	}

	// The instance holds the policy while it exists and while it is
	// being deleted.
	inUse := func(when string) {
		t.Helper()
		err := p.DeletePlacementGroup(ctx, o.Location, group)
		if !errors.Is(err, provider.ErrInUse) || provider.KindOf(err) != provider.Transient ||
			!strings.Contains(err.Error(), "is already being used by") {
			t.Fatalf("%s: %v, want a transient error matching ErrInUse", when, err)
		}
		if len(c.policyNames()) != 1 {
			t.Fatalf("%s: the policy went", when)
		}
	}
	inUse("instance running")
	if err := p.Delete(ctx, o.Location, spec.VM, []string{id}); err != nil {
		t.Fatal(err)
	}
	inUse("instance being deleted")
	c.settle()
	if err := p.DeletePlacementGroup(ctx, o.Location, group); err != nil {
		t.Fatalf("delete after the instance went: %v", err)
	}
	if got := c.policyNames(); len(got) != 0 {
		t.Fatalf("policies left %v", got)
	}
	for _, name := range []string{group, "gpuprov-never"} {
		if err := p.DeletePlacementGroup(ctx, o.Location, name); err != nil {
			t.Fatalf("delete of %s, which is gone: %v", name, err)
		}
	}
}

// A policy of the name that another installation made is neither adopted
// (Unavailable, blocking the region: nothing was created) nor deleted.
func TestPlacementGroupOfAnotherInstallation(t *testing.T) {
	c, mt := newCloud(t)
	p := c.provider(t, mt, gcp.Config{})
	other := c.provider(t, mt, gcp.Config{}, gcp.WithInstallation("ffffffffffffffff"))
	ctx := context.Background()
	loc := provider.Location{Region: "us-central1", Zone: "us-central1-a"}
	if err := other.EnsurePlacementGroup(ctx, loc, "gpuprov-shared", nil); err != nil {
		t.Fatal(err)
	}
	pe := kindOf(t, p.EnsurePlacementGroup(ctx, loc, "gpuprov-shared", clusterLabels("shared")), provider.Unavailable)
	if pe.Scope() != provider.ScopeRegion {
		t.Fatalf("scope %s, want region", pe.Scope())
	}
	kindOf(t, p.DeletePlacementGroup(ctx, loc, "gpuprov-shared"), provider.Failed)
	if len(c.calls("DELETE "+policyPrefix)) != 0 || len(c.policyNames()) != 1 {
		t.Fatal("another installation's policy was deleted")
	}
	if err := other.DeletePlacementGroup(ctx, loc, "gpuprov-shared"); err != nil {
		t.Fatal(err)
	}
}

// Errors the operations and the calls end in: the operation's codes decide
// as for any operation, RESOURCE_IN_USE_BY_ANOTHER_RESOURCE matches
// ErrInUse, RESOURCE_NOT_FOUND on delete is success, synchronous answers
// are classified, one attempt each.
func TestPlacementGroupErrors(t *testing.T) {
	loc := provider.Location{Region: "us-central1", Zone: "us-central1-a"}
	for _, tc := range []struct {
		name   string
		delete bool
		opF    *opFault
		syncF  *apiFault
		kind   provider.ErrorKind // checked when !ok
		ok     bool
		inUse  bool
	}{
		{name: "insert quota", opF: &opFault{Code: "QUOTA_EXCEEDED", Message: "Quota 'RESOURCE_POLICIES' exceeded. Limit: 10.0 in region us-central1.", HTTP: 403}, kind: provider.Quota},
		{name: "insert forbidden", syncF: &apiFault{403, "forbidden", "Required 'compute.resourcePolicies.create' permission for 'projects/proj-test'"}, kind: provider.Credentials},
		{name: "insert rate limited", syncF: &apiFault{429, "rateLimitExceeded", "Rate Limit Exceeded"}, kind: provider.Transient},
		{name: "delete in use by operation", delete: true, opF: &opFault{Code: "RESOURCE_IN_USE_BY_ANOTHER_RESOURCE", Message: "The resource_policy resource is already being used", HTTP: 400}, kind: provider.Transient, inUse: true},
		{name: "delete gone by operation", delete: true, opF: &opFault{Code: "RESOURCE_NOT_FOUND", Message: "The resource 'projects/proj-test/regions/us-central1/resourcePolicies/gpuprov-e' was not found", HTTP: 404}, ok: true},
		{name: "delete backend error", delete: true, syncF: &apiFault{503, "backendError", "Backend Error"}, kind: provider.Transient},
		{name: "delete forbidden", delete: true, syncF: &apiFault{403, "forbidden", "Required 'compute.resourcePolicies.delete' permission"}, kind: provider.Credentials},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, mt := newCloud(t)
			p := c.provider(t, mt, gcp.Config{})
			ctx := context.Background()
			call, method := p.EnsurePlacementGroup, "POST "
			if tc.delete {
				if err := p.EnsurePlacementGroup(ctx, loc, "gpuprov-e", nil); err != nil {
					t.Fatal(err)
				}
				call = func(ctx context.Context, loc provider.Location, name string, _ map[string]string) error {
					return p.DeletePlacementGroup(ctx, loc, name)
				}
				method = "DELETE "
			}
			if tc.opF != nil {
				c.policyFaults = []opFault{*tc.opF}
			}
			if tc.syncF != nil {
				c.syncFaults[method+"regions/us-central1/resourcePolicies"] = []apiFault{*tc.syncF}
			}
			err := call(ctx, loc, "gpuprov-e", nil)
			switch {
			case tc.ok && err != nil:
				t.Fatal(err)
			case !tc.ok:
				kindOf(t, err, tc.kind)
				if errors.Is(err, provider.ErrInUse) != tc.inUse {
					t.Fatalf("%v: matches ErrInUse %v, want %v", err, !tc.inUse, tc.inUse)
				}
			}
			if n := len(c.calls(method + policyPrefix)); n != 1 {
				t.Fatalf("%d %scalls: the client retried", n, method)
			}
		})
	}
}

// The group's location and name are checked before any call; a location
// with only a zone names the zone's region.
func TestPlacementGroupArguments(t *testing.T) {
	c, mt := newCloud(t)
	p := c.provider(t, mt, gcp.Config{})
	ctx := context.Background()
	for _, tc := range []struct {
		loc  provider.Location
		name string
	}{
		{provider.Location{Region: "us-central1"}, "Gpuprov_Ring"},
		{provider.Location{Region: "us-central1"}, "gpuprov-" + strings.Repeat("x", 56)},
		{provider.Location{}, "gpuprov-ring"},
	} {
		kindOf(t, p.EnsurePlacementGroup(ctx, tc.loc, tc.name, nil), provider.InvalidRequest)
		kindOf(t, p.DeletePlacementGroup(ctx, tc.loc, tc.name), provider.InvalidRequest)
	}
	if n := len(c.calls("resourcePolicies")); n != 0 {
		t.Fatalf("%d calls for invalid arguments", n)
	}
	if err := p.EnsurePlacementGroup(ctx, provider.Location{Zone: "europe-west4-b"}, "gpuprov-ring", nil); err != nil {
		t.Fatal(err)
	}
	if got := c.policyNames(); !slices.Equal(got, []string{"europe-west4/gpuprov-ring"}) {
		t.Fatalf("policies %v", got)
	}
}

// N1 machine types (T4, V100 attached as guest accelerators) take no compact
// placement policy: with a placement group, Prepare and Create refuse the
// offer as Unavailable before making anything, so the launch moves on to
// an offer whose series does (G2, A2, A3).
func TestCompactPlacementRefusesN1(t *testing.T) {
	c, mt := newCloud(t)
	p := c.provider(t, mt, gcp.Config{})
	ctx := context.Background()
	spec := newSpec(t, "n1")
	o := offerIn(t, p, provider.ResourceRequest{GPU: "T4", GPUCount: 1}, "us-central1-b", false)
	prep, err := p.Prepare(ctx, &o, spec) // without a group the offer is fine
	if err != nil {
		t.Fatal(err)
	}
	spec.PlacementGroup = "gpuprov-ring"
	if err := p.EnsurePlacementGroup(ctx, o.Location, spec.PlacementGroup, nil); err != nil {
		t.Fatal(err)
	}
	fws := len(c.calls("POST /compute/v1/projects/" + project + "/global/firewalls"))
	_, err = p.Prepare(ctx, &o, spec)
	kindOf(t, err, provider.Unavailable)
	_, err = p.Create(ctx, &o, prep, spec)
	pe := kindOf(t, err, provider.Unavailable)
	if pe.Scope() != provider.ScopeOffer || !strings.Contains(err.Error(), "compact placement") {
		t.Fatalf("scope %s: %v", pe.Scope(), err)
	}
	if n := len(c.calls("POST /compute/v1/projects/" + project + "/global/firewalls")); n != fws ||
		len(c.calls("POST /compute/v1/projects/"+project+"/zones/us-central1-b/instances")) != 0 {
		t.Fatal("a refused offer made a firewall rule or an instance")
	}
}
