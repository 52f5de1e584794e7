package aws_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/org/gpuprov/provider"
)

// A just-created instance the tag filter does not list yet is looked up by
// id; InvalidInstanceID.NotFound then means "not visible yet": no error.
func TestObserveInstanceNotVisibleYet(t *testing.T) {
	e := newEnv(t, awsConfig())
	ctx := context.Background()
	o, id := e.launch(t, l4, newSpec(t, "fresh"))
	e.f.mu.Lock()
	e.f.hidden[id] = 2 // invisible to the filtered call and to the lookup by id
	e.f.mu.Unlock()
	obs, err := e.p.Observe(ctx, o.Location, "fresh")
	if err != nil || len(obs) != 0 {
		t.Fatalf("observe of an instance not visible yet: %+v, %v (want none and no error)", obs, err)
	}
	byID := 0
	for _, r := range e.f.requests("DescribeInstances") {
		if r.Form.Get("InstanceId.1") == id {
			byID++
		}
	}
	if byID != 1 {
		t.Fatalf("%d DescribeInstances by id, want 1", byID)
	}
	obs, err = e.p.Observe(ctx, o.Location, "fresh")
	if err != nil || len(obs) != 1 || obs[0].ID != id || obs[0].Status != provider.StatusPending || obs[0].SSH != nil {
		t.Fatalf("observe once visible: %+v, %v", obs, err)
	}
	// Past the consistency window an id no filter lists is not looked up.
	e.f.mu.Lock()
	e.f.hidden[id] = 1
	e.f.mu.Unlock()
	e.clk.Advance(31 * time.Second)
	before := len(e.f.requests("DescribeInstances"))
	if obs, err := e.p.Observe(ctx, o.Location, "fresh"); err != nil || len(obs) != 0 {
		t.Fatalf("observe: %+v, %v", obs, err)
	}
	if n := len(e.f.requests("DescribeInstances")) - before; n != 1 {
		t.Fatalf("%d DescribeInstances after the window, want only the filtered one", n)
	}
}

func TestObserveFiltersAndStatuses(t *testing.T) {
	e := newEnv(t, awsConfig())
	ctx := context.Background()
	o, id := e.launch(t, l4, newSpec(t, "st"))
	obs, err := e.p.Observe(ctx, o.Location, "st")
	if err != nil || len(obs) != 1 {
		t.Fatalf("observe: %+v, %v", obs, err)
	}
	r := e.f.requests("DescribeInstances")[0]
	fs := filters(r.Form)
	if !slices.Equal(fs["tag:gpuprov"], []string{"st"}) || !slices.Equal(fs["tag:gpuprov-installation"], []string{installation}) ||
		!slices.Equal(fs["instance-state-name"], []string{"pending", "running", "shutting-down", "stopping", "stopped"}) ||
		len(fs) != 3 {
		t.Fatalf("DescribeInstances filters %v, want the identity tags and live states only (zones are filtered by the adapter)", fs)
	}
	e.clk.Advance(bootTime)
	obs, _ = e.p.Observe(ctx, o.Location, "st")
	if len(obs) != 1 || obs[0].Status != provider.StatusRunning || obs[0].SSH == nil ||
		obs[0].SSH.Port != 22 || obs[0].SSH.User != "ubuntu" || obs[0].SSH.Host != obs[0].PublicIP || obs[0].Location != o.Location {
		t.Fatalf("running instance observed as %+v", obs)
	}
	for state, want := range map[string]provider.InstanceStatus{
		"stopping": provider.StatusStopping, "stopped": provider.StatusFailed, "shutting-down": provider.StatusStopping,
	} {
		e.f.setState(id, state, "Server.SpotInstanceShutdown")
		obs, err := e.p.Observe(ctx, o.Location, "st")
		if err != nil || len(obs) != 1 || obs[0].Status != want || obs[0].SSH != nil {
			t.Fatalf("%s observed as %+v, %v; want %s without SSH", state, obs, err, want)
		}
	}
	e.f.setState(id, "terminated", "Client.UserInitiatedShutdown")
	if obs, _ := e.p.Observe(ctx, o.Location, "st"); len(obs) != 0 {
		t.Fatalf("terminated instance observed: %+v", obs)
	}
}

// List finds every VM of this installation, across pages, and no other.
func TestListPagesAndFiltersByInstallation(t *testing.T) {
	e := newEnv(t, awsConfig())
	for _, vm := range []string{"a", "b", "c"} {
		e.launch(t, l4, newSpec(t, vm))
	}
	e.f.mu.Lock()
	e.f.pageSize = 1
	for _, in := range e.f.instances {
		if in.Tags["gpuprov"] == "c" {
			in.Tags["gpuprov-installation"] = "someone-else"
		}
	}
	e.f.mu.Unlock()
	all, err := e.p.List(context.Background(), provider.Location{})
	if err != nil {
		t.Fatal(err)
	}
	var vms []string
	for _, o := range all {
		vms = append(vms, o.VM)
	}
	slices.Sort(vms)
	if !slices.Equal(vms, []string{"a", "b"}) {
		t.Fatalf("List found VMs %v, want a and b", vms)
	}
	pages := 0
	for _, r := range e.f.requests("DescribeInstances") {
		if r.Region == "us-east-1" && r.Form.Get("NextToken") != "" {
			pages++
		}
	}
	if pages != 1 { // two matching instances, one per page
		t.Fatalf("%d follow-up pages in us-east-1, want 1", pages)
	}
}

func TestDeleteOfMissingIDsIsSuccess(t *testing.T) {
	e := newEnv(t, awsConfig())
	ctx := context.Background()
	o, id := e.launch(t, l4, newSpec(t, "del"))
	if err := e.p.Delete(ctx, o.Location, "del", []string{"i-0fffffffffffffff0"}); err != nil {
		t.Fatalf("delete of an unknown id: %v", err)
	}
	if err := e.p.Delete(ctx, o.Location, "del", []string{"i-0fffffffffffffff0", id}); err != nil {
		t.Fatalf("delete of a batch with an unknown id: %v", err)
	}
	if live := e.f.live(); len(live) != 1 || live[0].State != "shutting-down" {
		t.Fatalf("after delete: %+v", live)
	}
	e.clk.Advance(deleteTime)
	if live := e.f.live(); len(live) != 0 {
		t.Fatalf("instance left: %+v", live)
	}
	if err := e.p.Delete(ctx, o.Location, "del", []string{id}); err != nil {
		t.Fatalf("delete of a terminated id: %v", err)
	}
}

// Cleanup while the instance shuts down removes the VM's own key pair at
// once and leaves the shared security group, which CleanupShared removes
// once the instance is gone (TestCleanupSharedSweepsEverything); a per-VM
// group from before groups were shared still waits for its instance
// (TestCleanupRemovesAPerVMGroupFromBefore).
func TestCleanupLeavesTheSharedGroup(t *testing.T) {
	e := newEnv(t, awsConfig())
	ctx := context.Background()
	o, id := e.launch(t, l4, newSpec(t, "clean"))
	if err := e.p.Delete(ctx, o.Location, "clean", []string{id}); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := e.p.Cleanup(ctx, o.Location, "clean"); err != nil {
			t.Fatalf("cleanup %d while the instance shuts down: %v", i+1, err)
		}
	}
	shared := provider.SharedName(installation, []provider.Port{{Number: 22, Protocol: "tcp"}, {Number: 6443, Protocol: "tcp"}}, nil)
	if side := e.f.side(); !slices.Equal(side, []string{"sg:us-east-1/" + shared}) {
		t.Fatalf("side resources after cleanup: %v, want the shared group only", side)
	}
	if n := len(e.f.requests("DeleteSecurityGroup")); n != 0 {
		t.Fatalf("Cleanup sent %d DeleteSecurityGroup", n)
	}
}

func TestPrepareAdoptsAndOpensPorts(t *testing.T) {
	e := newEnv(t, awsConfig())
	ctx := context.Background()
	spec := newSpec(t, "prep")
	o := e.offer(t, l4)
	a, err := e.p.Prepare(ctx, &o, spec)
	if err != nil {
		t.Fatal(err)
	}
	b, err := e.p.Prepare(ctx, &o, spec)
	if err != nil || string(a) != string(b) {
		t.Fatalf("second prepare: %s, %v; first %s", b, err, a)
	}
	var pr struct{ Subnet, SecurityGroup, KeyName, AMI, ZoneID string }
	if err := json.Unmarshal(a, &struct {
		Subnet        *string `json:"subnet"`
		SecurityGroup *string `json:"security_group"`
		KeyName       *string `json:"key_name"`
		AMI           *string `json:"ami"`
		ZoneID        *string `json:"zone_id"`
	}{&pr.Subnet, &pr.SecurityGroup, &pr.KeyName, &pr.AMI, &pr.ZoneID}); err != nil {
		t.Fatal(err)
	}
	if pr.Subnet != subnetID(o.Location.Zone) || pr.KeyName != "gpuprov-prep" || pr.AMI != testAMI || pr.SecurityGroup == "" {
		t.Fatalf("prepared %s", a)
	}
	e.f.mu.Lock()
	sg := e.f.sgs[pr.SecurityGroup]
	key := e.f.keys["us-east-1|gpuprov-prep"]
	e.f.mu.Unlock()
	shared := provider.SharedName(installation, []provider.Port{{Number: 22, Protocol: "tcp"}, {Number: 6443, Protocol: "tcp"}}, nil)
	if sg == nil || sg.Name != shared || sg.Tags["gpuprov"] != "" || sg.Tags["gpuprov-installation"] != installation ||
		sg.Tags[provider.LabelShared] != "true" || !slices.Equal(sg.Rules, []string{"tcp/22", "tcp/6443"}) {
		t.Fatalf("security group %+v", sg)
	}
	if key == nil || key.Material != spec.AuthorizedKeys[0] || key.Tags["gpuprov"] != "prep" {
		t.Fatalf("key pair %+v", key)
	}
	ssm := e.f.requests("GetParameter")
	if len(ssm) != 2 || jsonField(ssm[0].Body, "Name") != "/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-ubuntu-22.04/latest/ami-id" ||
		ssm[0].Header.Get("X-Amz-Target") != "AmazonSSM.GetParameter" || ssm[0].Region != "us-east-1" {
		t.Fatalf("SSM requests %+v", ssm)
	}
}

func TestPrepareImage(t *testing.T) {
	e := newEnv(t, awsConfig())
	o := e.offer(t, l4)
	e.f.ami = ""
	_, err := e.p.Prepare(context.Background(), &o, newSpec(t, "noimg"))
	errKind(t, err, provider.Unavailable)

	cfg := awsConfig()
	cfg.Image = "ami-0aaaabbbbccccdddd"
	e2 := newEnv(t, cfg)
	o2 := e2.offer(t, l4)
	prep, err := e2.p.Prepare(context.Background(), &o2, newSpec(t, "img"))
	if err != nil || len(e2.f.requests("GetParameter")) != 0 {
		t.Fatalf("configured image: %s, %v, %d SSM calls", prep, err, len(e2.f.requests("GetParameter")))
	}
	spec := newSpec(t, "img2")
	spec.Image = "ami-0eeeeffff00001111"
	prep, _ = e2.p.Prepare(context.Background(), &o2, spec)
	var pr struct {
		AMI string `json:"ami"`
	}
	if json.Unmarshal(prep, &pr); pr.AMI != spec.Image {
		t.Fatalf("request image not used: %s", prep)
	}
}

// List and Observe of a zone send one DescribeInstances for the region,
// without a zone filter (some endpoints refuse availability-zone-id: moto
// answers it with HTTP 500), and return only the zone's instances, whether
// the zone is named by id or by name.
func TestListAndObserveFilterTheZoneThemselves(t *testing.T) {
	e := newEnv(t, awsConfig())
	ctx := context.Background()
	offers, err := e.p.Plan(ctx, &l4)
	if err != nil {
		t.Fatal(err)
	}
	var zoned []provider.Offer // two offers of us-east-1 in different zones
	for _, o := range offers {
		if o.Location.Region == "us-east-1" && (len(zoned) == 0 || o.Location.Zone != zoned[0].Location.Zone) {
			zoned = append(zoned, o)
		}
	}
	if len(zoned) < 2 {
		t.Fatalf("plan has no two zones of us-east-1: %+v", offers)
	}
	ids := map[string]string{}
	for i, vm := range []string{"a", "b"} {
		o, spec := zoned[i], newSpec(t, vm)
		prep, err := e.p.Prepare(ctx, &o, spec)
		if err != nil {
			t.Fatal(err)
		}
		if ids[vm], err = e.p.Create(ctx, &o, prep, spec); err != nil {
			t.Fatal(err)
		}
	}
	e.clk.Advance(time.Minute) // past the consistency window: no lookups by id
	zoneA, zoneB := zoned[0].Location, zoned[1].Location
	byName := provider.Location{Region: "us-east-1", Zone: zoneName(zoneB.Zone)}

	count := func(t *testing.T, f func() ([]provider.Observed, error)) ([]string, int) {
		t.Helper()
		before := len(e.f.requests("DescribeInstances"))
		obs, err := f()
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, o := range obs {
			got = append(got, o.ID)
		}
		slices.Sort(got)
		return got, len(e.f.requests("DescribeInstances")) - before
	}
	for _, tc := range []struct {
		name  string
		call  func() ([]provider.Observed, error)
		want  []string
		calls int
	}{
		{"list zone a", func() ([]provider.Observed, error) { return e.p.List(ctx, zoneA) }, []string{ids["a"]}, 1},
		{"list zone b by name", func() ([]provider.Observed, error) { return e.p.List(ctx, byName) }, []string{ids["b"]}, 1},
		{"list region", func() ([]provider.Observed, error) { return e.p.List(ctx, provider.Location{Region: "us-east-1"}) }, sorted(ids["a"], ids["b"]), 1},
		{"list everywhere", func() ([]provider.Observed, error) { return e.p.List(ctx, provider.Location{}) }, sorted(ids["a"], ids["b"]), 2},
		{"observe b in zone a", func() ([]provider.Observed, error) { return e.p.Observe(ctx, zoneA, "b") }, nil, 1},
		{"observe b in zone b", func() ([]provider.Observed, error) { return e.p.Observe(ctx, zoneB, "b") }, []string{ids["b"]}, 1},
		{"observe b by zone name", func() ([]provider.Observed, error) { return e.p.Observe(ctx, byName, "b") }, []string{ids["b"]}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, calls := count(t, tc.call)
			if !slices.Equal(got, tc.want) || calls != tc.calls {
				t.Fatalf("found %v with %d DescribeInstances, want %v with %d", got, calls, tc.want, tc.calls)
			}
		})
	}
	for _, r := range e.f.requests("DescribeInstances") {
		fs := filters(r.Form)
		if _, ok := fs["availability-zone-id"]; ok {
			t.Fatalf("DescribeInstances sent the availability-zone-id filter: %v", fs)
		}
		if _, ok := fs["availability-zone"]; ok {
			t.Fatalf("DescribeInstances sent the availability-zone filter: %v", fs)
		}
	}
}

func sorted(s ...string) []string { slices.Sort(s); return s }

// ListNamed is List less the instances of VMs not named: one
// DescribeInstances per region with the names in a tag:gpuprov filter,
// another installation's instance of a named VM left out.
func TestListNamedFiltersOnTheNames(t *testing.T) {
	e := newEnv(t, awsConfig())
	for _, vm := range []string{"a", "b", "c", "d"} {
		e.launch(t, l4, newSpec(t, vm))
	}
	e.f.mu.Lock()
	for _, in := range e.f.instances {
		if in.Tags["gpuprov"] == "c" {
			in.Tags["gpuprov-installation"] = "someone-else"
		}
	}
	e.f.mu.Unlock()
	before := len(e.f.requests("DescribeInstances"))
	got, err := e.p.ListNamed(context.Background(), provider.Location{}, []string{"a", "c", "d", "nosuch"})
	if err != nil {
		t.Fatal(err)
	}
	var vms []string
	for _, o := range got {
		vms = append(vms, o.VM)
	}
	slices.Sort(vms)
	if !slices.Equal(vms, []string{"a", "d"}) {
		t.Fatalf("ListNamed found VMs %v, want a and d", vms)
	}
	for _, r := range e.f.requests("DescribeInstances")[before:] {
		fs := filters(r.Form)
		if names := fs["tag:gpuprov"]; !slices.Equal(names, []string{"a", "c", "d", "nosuch"}) || fs["tag-key"] != nil {
			t.Fatalf("DescribeInstances filters %v, want tag:gpuprov on the names, no tag-key", fs)
		}
	}
}
