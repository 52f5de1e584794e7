package aws_test

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/aws"
	"github.com/org/gpuprov/provider/providertest"
)

// sharedGroups returns the installation's shared security groups the fake
// holds in region, by id.
func (f *fakeEC2) sharedGroups(region string) []*fakeSG {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*fakeSG
	for _, sg := range f.sgs {
		if sg.Region == region && sg.Tags[provider.LabelShared] == "true" && sg.Tags[provider.LabelInstallation] == installation {
			out = append(out, sg)
		}
	}
	slices.SortFunc(out, func(a, b *fakeSG) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// actions returns the actions of the requests the fake received from the
// n-th on.
func (f *fakeEC2) actions(from int) []string {
	var out []string
	for _, r := range f.requests("")[from:] {
		out = append(out, r.Action)
	}
	return out
}

// securityGroupOf returns the security group id prep names.
func securityGroupOf(t *testing.T, prep json.RawMessage) string {
	t.Helper()
	var pr struct {
		SecurityGroup string `json:"security_group"`
	}
	if err := json.Unmarshal(prep, &pr); err != nil || pr.SecurityGroup == "" {
		t.Fatalf("prepared %s names no security group (%v)", prep, err)
	}
	return pr.SecurityGroup
}

var sgActions = []string{"CreateSecurityGroup", "DescribeSecurityGroups", "AuthorizeSecurityGroupIngress", "DeleteSecurityGroup"}

// Two VMs in one region and VPC with the same ports share one security
// group: one CreateSecurityGroup, and the second Prepare sends no
// security-group request at all (its only EC2 requests are the subnet
// lookup and its own key pair). Before groups were shared, every Prepare
// sent 6 EC2 requests (DescribeVpcs, DescribeSubnets, CreateSecurityGroup,
// two AuthorizeSecurityGroupIngress, ImportKeyPair) and SSM's
// GetParameter; now the first VM of a group sends those, and every other
// VM 3 (and GetParameter).
func TestSharedGroupIsMadeOncePerPortSet(t *testing.T) {
	e := newEnv(t, awsConfig())
	ctx := context.Background()
	o := e.offer(t, l4)
	a, b := newSpec(t, "a"), newSpec(t, "b")
	before := len(e.f.requests(""))
	prepA, err := e.p.Prepare(ctx, &o, a)
	if err != nil {
		t.Fatal(err)
	}
	first := e.f.actions(before)
	if want := []string{"DescribeVpcs", "DescribeSubnets", "CreateSecurityGroup", "AuthorizeSecurityGroupIngress",
		"AuthorizeSecurityGroupIngress", "ImportKeyPair", "GetParameter"}; !slices.Equal(first, want) {
		t.Fatalf("first Prepare sent %v, want %v", first, want)
	}
	before = len(e.f.requests(""))
	prepB, err := e.p.Prepare(ctx, &o, b)
	if err != nil {
		t.Fatal(err)
	}
	second := e.f.actions(before)
	if want := []string{"DescribeVpcs", "DescribeSubnets", "ImportKeyPair", "GetParameter"}; !slices.Equal(second, want) {
		t.Fatalf("second Prepare sent %v, want %v (no security-group request)", second, want)
	}
	t.Logf("EC2 requests per Prepare: first VM %d, second VM %d (plus one SSM GetParameter each); per-VM groups took %d for every VM",
		len(first)-1, len(second)-1, len(first)-1)
	if n := len(e.f.requests("CreateSecurityGroup")); n != 1 {
		t.Fatalf("%d CreateSecurityGroup, want 1", n)
	}
	if ga, gb := securityGroupOf(t, prepA), securityGroupOf(t, prepB); ga != gb {
		t.Fatalf("VMs of one port set in one VPC got groups %s and %s", ga, gb)
	}
	groups := e.f.sharedGroups("us-east-1")
	if len(groups) != 1 {
		t.Fatalf("fake holds shared groups %+v, want one", groups)
	}
	sg := groups[0]
	name := provider.SharedName(installation, []provider.Port{{Number: 22, Protocol: "tcp"}, {Number: 6443, Protocol: "tcp"}}, nil)
	if sg.Name != name || sg.Tags["Name"] != name || sg.Tags[provider.LabelInstallation] != installation ||
		sg.Tags[provider.LabelShared] != "true" || len(sg.Tags) != 3 || !slices.Equal(sg.Rules, []string{"tcp/22", "tcp/6443"}) {
		t.Fatalf("shared group %+v; want %s tagged with Name, the installation and %s only, opening tcp/22 and tcp/6443",
			sg, name, provider.LabelShared)
	}

	for _, tc := range []struct {
		name  string
		ports []provider.Port
		same  bool
	}{
		{"the same ports in another order, SSH and 6443 named again", []provider.Port{{Number: 6443, Protocol: "TCP"}, {Number: 22, Protocol: "tcp"}, {Number: 6443, Protocol: "tcp"}}, true},
		{"another port set", []provider.Port{{Number: 6443, Protocol: "tcp"}, {Number: 51820, Protocol: "udp"}}, false},
		{"no port besides SSH", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := newSpec(t, "c")
			spec.OpenPorts = tc.ports
			creates := len(e.f.requests("CreateSecurityGroup"))
			prep, err := e.p.Prepare(ctx, &o, spec)
			if err != nil {
				t.Fatal(err)
			}
			got := securityGroupOf(t, prep)
			made := len(e.f.requests("CreateSecurityGroup")) - creates
			if tc.same && (got != sg.ID || made != 0) {
				t.Fatalf("group %s after %d CreateSecurityGroup, want %s and none", got, made, sg.ID)
			}
			if !tc.same && (got == sg.ID || made != 1) {
				t.Fatalf("group %s after %d CreateSecurityGroup, want a new one", got, made)
			}
		})
	}
	if n := len(e.f.sharedGroups("us-east-1")); n != 3 {
		t.Fatalf("%d shared groups in us-east-1, want one per port set (3)", n)
	}

	// Another region is another VPC: another group.
	west := e.offer(t, provider.ResourceRequest{GPU: "L4", GPUCount: 1, Regions: []string{"us-west-2"}})
	if _, err := e.p.Prepare(ctx, &west, newSpec(t, "d")); err != nil {
		t.Fatal(err)
	}
	if n := len(e.f.sharedGroups("us-west-2")); n != 1 {
		t.Fatalf("%d shared groups in us-west-2, want 1", n)
	}
}

// Concurrent first Prepares of one group make one group.
func TestSharedGroupConcurrentFirstPrepares(t *testing.T) {
	e := newEnv(t, awsConfig())
	o := e.offer(t, l4)
	const n = 16
	specs := make([]*provider.InstanceSpec, n)
	for i := range specs {
		specs[i] = newSpec(t, "vm-"+string(rune('a'+i)))
	}
	ids := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			prep, err := e.p.Prepare(context.Background(), &o, specs[i])
			if err != nil {
				t.Error(err)
				return
			}
			ids[i] = securityGroupOf(t, prep)
		}()
	}
	wg.Wait()
	if c := len(e.f.requests("CreateSecurityGroup")); c != 1 {
		t.Fatalf("%d concurrent first Prepares sent %d CreateSecurityGroup, want 1", n, c)
	}
	if uniq := slices.Compact(slices.Sorted(slices.Values(ids))); len(uniq) != 1 {
		t.Fatalf("groups %v, want one", ids)
	}
	if a := len(e.f.requests("AuthorizeSecurityGroupIngress")); a != 2 {
		t.Fatalf("%d AuthorizeSecurityGroupIngress, want 2 (SSH and 6443, once)", a)
	}
}

// A group that exists when Prepare first meets it (made by another
// process, or by this one before a restart: CreateSecurityGroup answers
// InvalidGroup.Duplicate) is adopted when it is this installation's shared
// group, and its missing rules are added: a process that died between
// CreateSecurityGroup and AuthorizeSecurityGroupIngress left it without
// them. Rules it has are not sent again. A group of that name that is not
// this installation's shared group is refused.
func TestSharedGroupAdoptedAndCompleted(t *testing.T) {
	name := provider.SharedName(installation, []provider.Port{{Number: 22, Protocol: "tcp"}, {Number: 6443, Protocol: "tcp"}}, nil)
	shared := map[string]string{"Name": name, provider.LabelInstallation: installation, provider.LabelShared: "true"}
	for _, tc := range []struct {
		name       string
		tags       map[string]string
		rules      []string
		authorizes int
		refused    bool
	}{
		{"made, no rule opened", shared, nil, 2, false},
		{"made, SSH opened", shared, []string{"tcp/22"}, 1, false},
		{"complete", shared, []string{"tcp/22", "tcp/6443"}, 0, false},
		{"another installation's", map[string]string{provider.LabelInstallation: "other", provider.LabelShared: "true"}, nil, 0, true},
		{"not shared", map[string]string{provider.LabelInstallation: installation, provider.LabelVM: "x"}, nil, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, awsConfig())
			o := e.offer(t, l4)
			e.f.mu.Lock()
			e.f.sgs["sg-0made0000000000001"] = &fakeSG{ID: "sg-0made0000000000001", Region: "us-east-1", VPC: "vpc-0def00000000000a1",
				Name: name, Tags: tc.tags, Rules: slices.Clone(tc.rules)}
			e.f.mu.Unlock()
			prep, err := e.p.Prepare(context.Background(), &o, newSpec(t, "adopt"))
			if tc.refused {
				errKind(t, err, provider.InvalidRequest)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if id := securityGroupOf(t, prep); id != "sg-0made0000000000001" {
				t.Fatalf("group %s, want the existing one adopted", id)
			}
			if n := len(e.f.requests("AuthorizeSecurityGroupIngress")); n != tc.authorizes {
				t.Fatalf("%d AuthorizeSecurityGroupIngress, want %d", n, tc.authorizes)
			}
			e.f.mu.Lock()
			rules := slices.Sorted(slices.Values(e.f.sgs["sg-0made0000000000001"].Rules))
			e.f.mu.Unlock()
			if !slices.Equal(rules, []string{"tcp/22", "tcp/6443"}) {
				t.Fatalf("adopted group opens %v, want tcp/22 and tcp/6443", rules)
			}
		})
	}
}

// A rule that is there already when Prepare opens it
// (InvalidPermission.Duplicate: another process opened it between this
// one's DescribeSecurityGroups and its AuthorizeSecurityGroupIngress) is
// success.
func TestSharedGroupDuplicateRuleIsSuccess(t *testing.T) {
	e := newEnv(t, awsConfig())
	o := e.offer(t, l4)
	e.f.fail(&fakeRule{Action: "AuthorizeSecurityGroupIngress", Code: "InvalidPermission.Duplicate", Times: 1})
	if _, err := e.p.Prepare(context.Background(), &o, newSpec(t, "dup")); err != nil {
		t.Fatalf("prepare: %v", err)
	}
}

// RunInstances into a group that another process deleted since Prepare
// (InvalidGroup.NotFound) launches nothing: Create returns a Transient
// error matching provider.ErrSharedGone, the provider forgets the group,
// and the next Prepare makes it again.
func TestCreateFindsSharedGroupGone(t *testing.T) {
	e := newEnv(t, awsConfig())
	ctx := context.Background()
	o := e.offer(t, l4)
	spec := newSpec(t, "gone")
	prep, err := e.p.Prepare(ctx, &o, spec)
	if err != nil {
		t.Fatal(err)
	}
	old := securityGroupOf(t, prep)
	// Another process of the installation sweeps: no instance uses the group yet.
	other, err := aws.New(awsConfig(), aws.WithInstallation(installation), aws.WithEndpoint(e.f.endpoint()), aws.WithClock(e.clk))
	if err != nil {
		t.Fatal(err)
	}
	if err := other.CleanupShared(ctx, provider.Location{}); err != nil {
		t.Fatalf("the other process's CleanupShared: %v", err)
	}
	_, err = e.p.Create(ctx, &o, prep, spec)
	pe := errKind(t, err, provider.Transient)
	if !errors.Is(err, provider.ErrSharedGone) || pe.Op != "create" || aws.ErrorCode(err) != "InvalidGroup.NotFound" {
		t.Fatalf("create into a deleted group: %v (op %q, code %q); want ErrSharedGone carrying InvalidGroup.NotFound",
			err, pe.Op, aws.ErrorCode(err))
	}
	if live := e.f.live(); len(live) != 0 {
		t.Fatalf("instances %+v after a refused create", live)
	}
	prep, err = e.p.Prepare(ctx, &o, spec)
	if err != nil {
		t.Fatal(err)
	}
	if again := securityGroupOf(t, prep); again == old || len(e.f.requests("CreateSecurityGroup")) != 2 {
		t.Fatalf("Prepare after the group went: group %s (the old one was %s), %d CreateSecurityGroup; want it made again",
			again, old, len(e.f.requests("CreateSecurityGroup")))
	}
	if _, err := e.p.Create(ctx, &o, prep, spec); err != nil {
		t.Fatalf("create after Prepare made the group again: %v", err)
	}
}

// The kit's check of provider.SharedCleaner on the fake EC2, which refuses
// to delete a group an instance uses as EC2 does (DependencyViolation).
func TestSharedCleanerKit(t *testing.T) {
	var e *env
	providertest.CheckShared(t, providertest.SharedHarness{
		Harness: providertest.Harness{
			New: func(t *testing.T) provider.CloudProvider {
				e = newEnv(t, awsConfig())
				return e.p
			},
			Request:      l4,
			Installation: installation,
			Settle:       func(t *testing.T) { e.clk.Advance(bootTime + deleteTime + time.Second) },
		},
		Shared: func(t *testing.T, loc provider.Location) []string {
			var ids []string
			for _, sg := range e.f.sharedGroups(loc.Region) {
				ids = append(ids, sg.ID)
			}
			return ids
		},
	})
}

// CleanupShared sweeps every region of a zero Location and every group:
// the group an instance uses (in us-east-1) is left, with a Transient
// error matching provider.ErrInUse, and the free one (in us-west-2) is
// deleted all the same, and forgotten: the next Prepare there makes it
// again instead of naming a deleted group.
func TestCleanupSharedSweepsEverything(t *testing.T) {
	e := newEnv(t, awsConfig())
	ctx := context.Background()
	o, id := e.launch(t, l4, newSpec(t, "east"))
	west := e.offer(t, provider.ResourceRequest{GPU: "L4", GPUCount: 1, Regions: []string{"us-west-2"}})
	if _, err := e.p.Prepare(ctx, &west, newSpec(t, "west")); err != nil {
		t.Fatal(err)
	}
	err := e.p.CleanupShared(ctx, provider.Location{})
	pe := errKind(t, err, provider.Transient)
	if !errors.Is(err, provider.ErrInUse) || pe.Op != "cleanup" || aws.ErrorCode(err) != "DependencyViolation" {
		t.Fatalf("CleanupShared with an instance in us-east-1: %v (op %q); want ErrInUse carrying DependencyViolation", err, pe.Op)
	}
	if n, w := len(e.f.sharedGroups("us-east-1")), len(e.f.sharedGroups("us-west-2")); n != 1 || w != 0 {
		t.Fatalf("after the sweep: %d shared groups in us-east-1 (want 1, in use), %d in us-west-2 (want 0)", n, w)
	}
	creates := len(e.f.requests("CreateSecurityGroup"))
	if _, err := e.p.Prepare(ctx, &west, newSpec(t, "west")); err != nil {
		t.Fatal(err)
	}
	if len(e.f.requests("CreateSecurityGroup")) != creates+1 || len(e.f.sharedGroups("us-west-2")) != 1 {
		t.Fatal("Prepare after CleanupShared deleted the group did not make it again")
	}

	// An instance shutting down still uses its group; once it is gone
	// the group goes, and the cleanup of the VM itself never waited.
	if err := e.p.Delete(ctx, o.Location, "east", []string{id}); err != nil {
		t.Fatal(err)
	}
	if err := e.p.Cleanup(ctx, o.Location, "east"); err != nil {
		t.Fatalf("Cleanup while the instance shuts down: %v (it removes the key pair only)", err)
	}
	if err := e.p.CleanupShared(ctx, o.Location); !errors.Is(err, provider.ErrInUse) {
		t.Fatalf("CleanupShared while the instance shuts down: %v, want ErrInUse", err)
	}
	e.clk.Advance(deleteTime)
	if err := e.p.Cleanup(ctx, west.Location, "west"); err != nil {
		t.Fatal(err)
	}
	if err := e.p.CleanupShared(ctx, provider.Location{}); err != nil {
		t.Fatalf("CleanupShared once the instance is gone: %v", err)
	}
	if side := e.f.side(); len(side) != 0 {
		t.Fatalf("fake holds %v", side)
	}
	// A group gone between the listing and the delete is success.
	if _, err := e.p.Prepare(ctx, &o, newSpec(t, "east")); err != nil {
		t.Fatal(err)
	}
	e.f.fail(&fakeRule{Action: "DeleteSecurityGroup", Code: "InvalidGroup.NotFound", Times: 1})
	if err := e.p.CleanupShared(ctx, o.Location); err != nil {
		t.Fatalf("CleanupShared of a group that went meanwhile: %v", err)
	}
	// Another failure is returned, after every group was tried.
	e.f.fail(&fakeRule{Action: "DeleteSecurityGroup", Code: "UnauthorizedOperation", Times: 1})
	err = e.p.CleanupShared(ctx, o.Location)
	errKind(t, err, provider.Credentials)
}

// A per-VM group gpuprov-<vm> that Prepare made before groups were shared
// (an attempt journaled by an older version) is still removed by Cleanup,
// after DependencyViolation while its instance shuts down; a shared group
// whose name is gpuprov-<that vm> (a VM named fw-…) and another
// installation's per-VM group of that name are left.
func TestCleanupRemovesAPerVMGroupFromBefore(t *testing.T) {
	e := newEnv(t, awsConfig())
	ctx := context.Background()
	o := e.offer(t, l4)
	const vpc = "vpc-0def00000000000a1"
	e.f.mu.Lock()
	e.f.sgs["sg-0old"] = &fakeSG{ID: "sg-0old", Region: "us-east-1", VPC: vpc, Name: "gpuprov-old",
		Tags: map[string]string{"Name": "gpuprov-old", provider.LabelVM: "old", provider.LabelInstallation: installation}, Rules: []string{"tcp/22"}}
	e.f.sgs["sg-0theirs"] = &fakeSG{ID: "sg-0theirs", Region: "us-east-1", VPC: "vpc-0other", Name: "gpuprov-old",
		Tags: map[string]string{provider.LabelVM: "old", provider.LabelInstallation: "other"}}
	e.f.instances["i-0old"] = &fakeInstance{ID: "i-0old", Region: "us-east-1", ZoneID: o.Location.Zone, Type: "g6.xlarge", State: "shutting-down",
		SG: "sg-0old", Tags: map[string]string{provider.LabelVM: "old", provider.LabelInstallation: installation}, Launched: t0, Ended: t0}
	e.f.mu.Unlock()
	// A shared group named as a VM fw-<12 hex> would name its per-VM group.
	fw := newSpec(t, "fw")
	fw.OpenPorts = nil
	prep, err := e.p.Prepare(ctx, &o, fw)
	if err != nil {
		t.Fatal(err)
	}
	shared := securityGroupOf(t, prep)
	sharedName := provider.SharedName(installation, []provider.Port{{Number: 22, Protocol: "tcp"}}, nil)
	lookalike := sharedName[len("gpuprov-"):]

	err = e.p.Cleanup(ctx, o.Location, "old")
	if pe := errKind(t, err, provider.Transient); pe.Op != "cleanup" || aws.ErrorCode(err) != "DependencyViolation" {
		t.Fatalf("cleanup while the old instance shuts down: %v", err)
	}
	e.clk.Advance(deleteTime)
	if err := e.p.Cleanup(ctx, o.Location, "old"); err != nil {
		t.Fatalf("cleanup once the old instance is gone: %v", err)
	}
	if err := e.p.Cleanup(ctx, o.Location, lookalike); err != nil {
		t.Fatalf("cleanup of VM %s: %v", lookalike, err)
	}
	e.f.mu.Lock()
	_, oldLeft := e.f.sgs["sg-0old"]
	_, theirsLeft := e.f.sgs["sg-0theirs"]
	_, sharedLeft := e.f.sgs[shared]
	e.f.mu.Unlock()
	if oldLeft || !theirsLeft || !sharedLeft {
		t.Fatalf("after cleanup: own per-VM group left %v (want false), another installation's left %v, shared %s left %v (want true)",
			oldLeft, theirsLeft, sharedName, sharedLeft)
	}
	for _, r := range e.f.requests("DeleteSecurityGroup") {
		if id := r.Form.Get("GroupId"); id != "sg-0old" {
			t.Fatalf("Cleanup sent DeleteSecurityGroup %s", id)
		}
	}
}
