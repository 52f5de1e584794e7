package aws_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/org/gpuprov/internal/mototest"
	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/aws"
	"github.com/org/gpuprov/provider/providertest"
)

// The shared security group against moto. Moto 5.2.1 serves the group's
// creation, InvalidGroup.Duplicate, the tags, the rules and their
// InvalidPermission.Duplicate as EC2 documents them, but not the two
// answers that protect a group in use (checked at run time by the probes
// below, so that a moto that learns them runs the skipped checks):
//   - DeleteSecurityGroup of a group a running instance's network interface
//     uses succeeds (EC2: DependencyViolation);
//   - RunInstances whose network interface names a group id that does not
//     exist makes a group of that id (EC2: InvalidGroup.NotFound).
// Both paths are checked against the httpmock fake, which answers as the
// EC2 API Reference documents (TestSharedCleanerKit,
// TestCleanupSharedSweepsEverything, TestCreateFindsSharedGroupGone).

// probes numbers the probes' security groups.
var probes atomic.Int64

// actionCounter counts the EC2 actions sent through it to next.
type actionCounter struct {
	next http.RoundTripper
	mu   sync.Mutex
	n    map[string]int
}

func (c *actionCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, err
	}
	r.Body = io.NopCloser(bytes.NewReader(b))
	form, _ := url.ParseQuery(string(b)) // a body that is no form counts as action ""
	c.mu.Lock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[form.Get("Action")]++
	c.mu.Unlock()
	return c.next.RoundTrip(r)
}

// count returns how many of actions were sent.
func (c *actionCounter) count(actions ...string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, a := range actions {
		n += c.n[a]
	}
	return n
}

// newCountedMotoProvider is newMotoProvider whose EC2 actions are counted.
func newCountedMotoProvider(t *testing.T, url, inst string) (motoProvider, *actionCounter) {
	t.Helper()
	c := &actionCounter{next: mototest.Client.Transport}
	p, err := aws.New(aws.Config{Regions: []string{"us-east-1"}, Image: mototest.AMI}, aws.WithInstallation(inst),
		aws.WithEndpoint(aws.Endpoint{URL: url, Client: &http.Client{Transport: c}, AccessKeyID: mototest.KeyID, SecretAccessKey: mototest.Secret}))
	if err != nil {
		t.Fatal(err)
	}
	return motoProvider{Provider: p, raw: mototest.EC2(url)}, c
}

// motoSharedGroups returns the shared security groups of installation inst
// that moto holds in region.
func motoSharedGroups(t *testing.T, raw *ec2.Client, region, inst string) []types.SecurityGroup {
	t.Helper()
	out, err := raw.DescribeSecurityGroups(context.Background(), &ec2.DescribeSecurityGroupsInput{Filters: []types.Filter{
		{Name: awssdk.String("tag:" + provider.LabelInstallation), Values: []string{inst}},
		{Name: awssdk.String("tag:" + provider.LabelShared), Values: []string{"true"}}}},
		func(o *ec2.Options) { o.Region = region })
	if err != nil {
		t.Fatalf("moto DescribeSecurityGroups in %s: %v", region, err)
	}
	return out.SecurityGroups
}

// motoProbeSubnet returns a default subnet of us-east-1 in moto.
func motoProbeSubnet(t *testing.T, raw *ec2.Client) (subnet, vpc string) {
	t.Helper()
	out, err := raw.DescribeSubnets(context.Background(), &ec2.DescribeSubnetsInput{Filters: []types.Filter{
		{Name: awssdk.String("default-for-az"), Values: []string{"true"}}}})
	if err != nil || len(out.Subnets) == 0 {
		t.Fatalf("moto DescribeSubnets: %+v, %v", out, err)
	}
	return awssdk.ToString(out.Subnets[0].SubnetId), awssdk.ToString(out.Subnets[0].VpcId)
}

// motoProbeRun launches one t3.micro in moto with groups on its network
// interface, and returns its id, or the error.
func motoProbeRun(ctx context.Context, raw *ec2.Client, subnet string, groups ...string) (string, error) {
	out, err := raw.RunInstances(ctx, &ec2.RunInstancesInput{ImageId: awssdk.String(mototest.AMI), InstanceType: types.InstanceTypeT3Micro,
		MinCount: awssdk.Int32(1), MaxCount: awssdk.Int32(1),
		NetworkInterfaces: []types.InstanceNetworkInterfaceSpecification{{DeviceIndex: awssdk.Int32(0),
			SubnetId: awssdk.String(subnet), Groups: groups}}})
	if err != nil {
		return "", err
	}
	return awssdk.ToString(out.Instances[0].InstanceId), nil
}

// motoDeletesGroupsInUse says how moto answers DeleteSecurityGroup of a
// group a running instance uses, when it does not answer DependencyViolation
// as EC2 does; "" when it does. It leaves nothing behind in moto.
func motoDeletesGroupsInUse(t *testing.T, raw *ec2.Client) string {
	t.Helper()
	ctx := context.Background()
	subnet, vpc := motoProbeSubnet(t, raw)
	sg, err := raw.CreateSecurityGroup(ctx, &ec2.CreateSecurityGroupInput{
		GroupName:   awssdk.String(fmt.Sprintf("probe-in-use-%d-%d", os.Getpid(), probes.Add(1))),
		Description: awssdk.String("gpuprov test probe"), VpcId: awssdk.String(vpc)})
	if err != nil {
		t.Fatalf("moto CreateSecurityGroup: %v", err)
	}
	id, err := motoProbeRun(ctx, raw, subnet, awssdk.ToString(sg.GroupId))
	if err != nil {
		t.Fatalf("moto RunInstances: %v", err)
	}
	_, err = raw.DeleteSecurityGroup(ctx, &ec2.DeleteSecurityGroupInput{GroupId: sg.GroupId})
	// Best effort, errors ignored: the probe's instance and, when moto
	// refused, its group (moto terminates at once) must not outlive it,
	// and what they leave is no test's.
	_, _ = raw.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{id}})
	if err != nil {
		_, _ = raw.DeleteSecurityGroup(ctx, &ec2.DeleteSecurityGroupInput{GroupId: sg.GroupId})
	}
	switch {
	case err == nil:
		return fmt.Sprintf("moto %s deletes a security group that a running instance's network interface uses "+
			"(DeleteSecurityGroup answers success, EC2 answers DependencyViolation); the in-use path is checked "+
			"against the httpmock fake (TestSharedCleanerKit, TestCleanupSharedSweepsEverything)", mototest.Version())
	case aws.ErrorCode(err) == "DependencyViolation":
		return ""
	}
	t.Fatalf("moto DeleteSecurityGroup of a group in use: %v", err)
	return ""
}

// motoLaunchesIntoMissingGroups says how moto answers RunInstances whose
// network interface names a group id that does not exist, when it does not
// refuse with InvalidGroup.NotFound as EC2 does; "" when it does.
func motoLaunchesIntoMissingGroups(t *testing.T, raw *ec2.Client) string {
	t.Helper()
	ctx := context.Background()
	subnet, _ := motoProbeSubnet(t, raw)
	const missing = "sg-0fffffffffffffff1"
	id, err := motoProbeRun(ctx, raw, subnet, missing)
	switch {
	case err == nil:
		// Best effort, errors ignored: the probe's instance and the group
		// moto made for it are no test's.
		_, _ = raw.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{id}})
		_, _ = raw.DeleteSecurityGroup(ctx, &ec2.DeleteSecurityGroupInput{GroupId: awssdk.String(missing)})
		return fmt.Sprintf("moto %s launches an instance whose network interface names a security group id that does not exist, "+
			"making a group of that id (EC2 answers InvalidGroup.NotFound); the shared-gone path is checked against the httpmock "+
			"fake (TestCreateFindsSharedGroupGone)", mototest.Version())
	case aws.ErrorCode(err) == "InvalidGroup.NotFound":
		return ""
	}
	t.Fatalf("moto RunInstances into a missing group: %v", err)
	return ""
}

// Against moto: two VMs with the same ports share one group (one
// CreateSecurityGroup; the second Prepare sends no security-group request),
// tagged with the shared labels and opening SSH and 6443 from anywhere;
// ports in another order share it, another port set makes another group;
// a provider that meets the group first (a restarted process) adopts it
// and completes the rules a process that died before opening them left
// out; Cleanup of a VM leaves it.
func TestMotoSharedGroup(t *testing.T) {
	url := mototest.URL(t)
	raw := mototest.EC2(url)
	inst := motoInstallation(t)
	p, count := newCountedMotoProvider(t, url, inst)
	ctx := context.Background()
	offers, err := p.Plan(ctx, &l4)
	if err != nil || len(offers) == 0 {
		t.Fatalf("plan: %d offers, %v", len(offers), err)
	}
	o := offers[0]
	groupOf := func(spec *provider.InstanceSpec) string {
		t.Helper()
		spec.Installation = inst
		prep, err := p.Prepare(ctx, &o, spec)
		if err != nil {
			t.Fatalf("prepare %s: %v", spec.VM, err)
		}
		return securityGroupOf(t, prep)
	}
	a := groupOf(newSpec(t, "moto-sh-a"))
	before := count.count(sgActions...)
	if b := groupOf(newSpec(t, "moto-sh-b")); b != a {
		t.Fatalf("second VM's group %s, first's %s", b, a)
	}
	if n := count.count(sgActions...) - before; n != 0 || count.count("CreateSecurityGroup") != 1 {
		t.Fatalf("second Prepare sent %d security-group requests (want 0); %d CreateSecurityGroup (want 1)", n, count.count("CreateSecurityGroup"))
	}
	reordered := newSpec(t, "moto-sh-c")
	reordered.OpenPorts = []provider.Port{{Number: 6443, Protocol: "tcp"}, {Number: 22, Protocol: "tcp"}}
	if c := groupOf(reordered); c != a {
		t.Fatalf("the same ports in another order: group %s, want %s", c, a)
	}
	other := newSpec(t, "moto-sh-d")
	other.OpenPorts = []provider.Port{{Number: 51820, Protocol: "udp"}}
	d := groupOf(other)
	if d == a {
		t.Fatal("another port set shares the first group")
	}
	groups := motoSharedGroups(t, raw, o.Location.Region, inst)
	if len(groups) != 2 {
		t.Fatalf("moto holds %d shared groups, want 2 (one per port set)", len(groups))
	}
	i := slices.IndexFunc(groups, func(g types.SecurityGroup) bool { return awssdk.ToString(g.GroupId) == a })
	if i < 0 {
		t.Fatalf("group %s not listed by its tags", a)
	}
	g := groups[i]
	name := provider.SharedName(inst, []provider.Port{{Number: 22, Protocol: "tcp"}, {Number: 6443, Protocol: "tcp"}}, nil)
	var rules []string
	for _, perm := range g.IpPermissions {
		for _, r := range perm.IpRanges {
			rules = append(rules, fmt.Sprintf("%s/%d-%d from %s", awssdk.ToString(perm.IpProtocol), awssdk.ToInt32(perm.FromPort),
				awssdk.ToInt32(perm.ToPort), awssdk.ToString(r.CidrIp)))
		}
	}
	slices.Sort(rules)
	if awssdk.ToString(g.GroupName) != name || !slices.Equal(rules, []string{"tcp/22-22 from 0.0.0.0/0", "tcp/6443-6443 from 0.0.0.0/0"}) {
		t.Fatalf("group %s named %s opens %v; want %s opening tcp/22 and tcp/6443 from anywhere", a, awssdk.ToString(g.GroupName), rules, name)
	}

	// A process that died between CreateSecurityGroup and its rules: a
	// fresh provider adopts the group and opens what is missing.
	if _, err := raw.RevokeSecurityGroupIngress(ctx, &ec2.RevokeSecurityGroupIngressInput{GroupId: g.GroupId,
		IpPermissions: []types.IpPermission{{IpProtocol: awssdk.String("tcp"), FromPort: awssdk.Int32(6443), ToPort: awssdk.Int32(6443),
			IpRanges: []types.IpRange{{CidrIp: awssdk.String("0.0.0.0/0")}}}}}); err != nil {
		t.Fatalf("moto RevokeSecurityGroupIngress: %v", err)
	}
	fresh, freshCount := newCountedMotoProvider(t, url, inst)
	spec := newSpec(t, "moto-sh-e")
	spec.Installation = inst
	prep, err := fresh.Prepare(ctx, &o, spec)
	if err != nil {
		t.Fatalf("prepare on a fresh provider: %v", err)
	}
	if id := securityGroupOf(t, prep); id != a || freshCount.count("AuthorizeSecurityGroupIngress") != 1 {
		t.Fatalf("fresh provider: group %s after %d AuthorizeSecurityGroupIngress; want %s adopted and 6443 opened once",
			id, freshCount.count("AuthorizeSecurityGroupIngress"), a)
	}
	got, err := raw.DescribeSecurityGroups(ctx, &ec2.DescribeSecurityGroupsInput{GroupIds: []string{a}})
	if err != nil || len(got.SecurityGroups) != 1 || !opensPort(got.SecurityGroups[0], 6443) || !opensPort(got.SecurityGroups[0], 22) {
		t.Fatalf("adopted group %+v (%v) does not open 22 and 6443 again", got, err)
	}

	for _, vm := range []string{"moto-sh-a", "moto-sh-b", "moto-sh-c", "moto-sh-d", "moto-sh-e"} {
		if err := p.Cleanup(ctx, o.Location, vm); err != nil {
			t.Fatalf("cleanup %s: %v", vm, err)
		}
	}
	if n := len(motoSharedGroups(t, raw, o.Location.Region, inst)); n != 2 {
		t.Fatalf("Cleanup of the VMs left %d shared groups, want both", n)
	}
	if err := p.CleanupShared(ctx, provider.Location{}); err != nil {
		t.Fatalf("CleanupShared: %v", err)
	}
	if n := len(motoSharedGroups(t, raw, o.Location.Region, inst)); n != 0 {
		t.Fatalf("CleanupShared left %d shared groups", n)
	}
}

func opensPort(g types.SecurityGroup, port int32) bool {
	for _, perm := range g.IpPermissions {
		if awssdk.ToInt32(perm.FromPort) <= port && port <= awssdk.ToInt32(perm.ToPort) &&
			slices.ContainsFunc(perm.IpRanges, func(r types.IpRange) bool { return awssdk.ToString(r.CidrIp) == "0.0.0.0/0" }) {
			return true
		}
	}
	return false
}

// The kit's check of provider.SharedCleaner against moto; moto 5.2.1
// deletes a group in use, so its in-use step is skipped saying so.
func TestMotoSharedCleanerKit(t *testing.T) {
	url := mototest.URL(t)
	raw := mototest.EC2(url)
	inst := motoInstallation(t)
	providertest.CheckShared(t, providertest.SharedHarness{
		Harness: providertest.Harness{
			New: func(t *testing.T) provider.CloudProvider {
				return motoProvider{Provider: newMotoProvider(t, url, inst), raw: raw}
			},
			Request:      l4,
			Installation: inst,
		},
		Shared: func(t *testing.T, loc provider.Location) []string {
			var ids []string
			for _, g := range motoSharedGroups(t, raw, loc.Region, inst) {
				ids = append(ids, awssdk.ToString(g.GroupId))
			}
			return ids
		},
		InUseNotRefused: motoDeletesGroupsInUse(t, raw),
	})
}

// RunInstances into a shared group another process deleted since Prepare,
// against moto, when moto refuses it as EC2 does; moto 5.2.1 does not.
func TestMotoCreateFindsSharedGroupGone(t *testing.T) {
	url := mototest.URL(t)
	raw := mototest.EC2(url)
	if why := motoLaunchesIntoMissingGroups(t, raw); why != "" {
		t.Skip(why)
	}
	inst := motoInstallation(t)
	p := motoProvider{Provider: newMotoProvider(t, url, inst), raw: raw}
	ctx := context.Background()
	offers, err := p.Plan(ctx, &l4)
	if err != nil || len(offers) == 0 {
		t.Fatalf("plan: %d offers, %v", len(offers), err)
	}
	o := offers[0]
	spec := newSpec(t, "moto-gone")
	spec.Installation = inst
	prep, err := p.Prepare(ctx, &o, spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := newMotoProvider(t, url, inst).CleanupShared(ctx, provider.Location{}); err != nil {
		t.Fatalf("another process's CleanupShared: %v", err)
	}
	_, err = p.Create(ctx, &o, prep, spec)
	if !errors.Is(err, provider.ErrSharedGone) || provider.KindOf(err) != provider.Transient {
		t.Fatalf("create into a deleted group: %v, want a Transient error matching ErrSharedGone", err)
	}
	if prep, err = p.Prepare(ctx, &o, spec); err != nil {
		t.Fatal(err)
	}
	id, err := p.Create(ctx, &o, prep, spec)
	if err != nil {
		t.Fatalf("create after Prepare made the group again: %v", err)
	}
	if err := p.Delete(ctx, o.Location, spec.VM, []string{id}); err != nil {
		t.Fatal(err)
	}
	if err := p.Cleanup(ctx, o.Location, spec.VM); err != nil {
		t.Fatal(err)
	}
	if err := p.CleanupShared(ctx, o.Location); err != nil {
		t.Fatal(err)
	}
}
