package aws_test

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/internal/mototest"
	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/journal/sqlite"
	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/aws"
)

// The Provisioner on moto: whole launches through the core, with the
// SQLite journal, on the real clock. Moto runs an instance the moment it
// is created, so the waits are short polls (motoTimings), not sleeps.

// motoTimings makes the core poll moto at once instead of every 5s.
func motoTimings(cfg aws.Config) aws.Config {
	cfg.PollInterval = 20 * time.Millisecond
	cfg.BootTimeout = 30 * time.Second
	cfg.DeleteTimeout = 30 * time.Second
	cfg.ConsistencyWindow = 10 * time.Millisecond // moto lists an instance as soon as RunInstances answers
	cfg.RequestsPerSecond = 1000
	return cfg
}

// newMotoProvisioner returns a Provisioner on a fresh SQLite journal in
// t.TempDir() whose one provider is the adapter, built for moto from cfg
// (and opts) with the journal's installation id.
func newMotoProvisioner(t *testing.T, url string, cfg aws.Config, opts ...aws.Option) (*gpuprov.Provisioner, *sqlite.DB) {
	t.Helper()
	ctx := context.Background()
	db, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "journal.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	opts = append(opts, aws.WithInstallation(db.Installation()),
		aws.WithEndpoint(aws.Endpoint{URL: url, Client: mototest.Client, AccessKeyID: mototest.KeyID, SecretAccessKey: mototest.Secret}))
	p, err := aws.New(motoTimings(cfg), opts...)
	if err != nil {
		t.Fatal(err)
	}
	prov, err := gpuprov.New(db, gpuprov.WithProvider(motoProvider{Provider: p, raw: mototest.EC2(url)}),
		gpuprov.WithBackoff(10*time.Millisecond, 200*time.Millisecond, 1),
		gpuprov.WithSSH("ubuntu", newSpec(t, "k").AuthorizedKeys, true),
		gpuprov.WithEvents(func(ev gpuprov.Event) {
			t.Logf("%s %s attempt %d %s %s %s", ev.Time.Format("15:04:05.000"), ev.VM, ev.Attempt, ev.Type, ev.Phase, ev.Message)
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { prov.Close() })
	return prov, db
}

// motoView is what moto itself holds of one VM of one installation in one
// region: its instances that are not terminated, the installation's shared
// security groups (tag:gpuprov-installation and tag:gpuprov-shared) and
// the VM's key pairs (raw DescribeInstances, DescribeSecurityGroups,
// DescribeKeyPairs through the SDK).
type motoView struct {
	Instances      []types.Instance
	SecurityGroups []string
	KeyPairs       []string
}

func (v motoView) empty() bool {
	return len(v.Instances) == 0 && len(v.SecurityGroups) == 0 && len(v.KeyPairs) == 0
}

func viewMoto(t *testing.T, url, region, inst, vm string) motoView {
	t.Helper()
	ctx := context.Background()
	raw := mototest.EC2(url)
	opt := func(o *ec2.Options) { o.Region = region }
	name := provider.ResourceName(vm)
	var v motoView
	ins, err := raw.DescribeInstances(ctx, &ec2.DescribeInstancesInput{Filters: []types.Filter{
		{Name: awssdk.String("tag:" + provider.LabelInstallation), Values: []string{inst}}}}, opt)
	if err != nil {
		t.Fatalf("moto DescribeInstances in %s: %v", region, err)
	}
	for _, r := range ins.Reservations {
		for _, in := range r.Instances {
			if in.State == nil || in.State.Name != types.InstanceStateNameTerminated {
				v.Instances = append(v.Instances, in)
			}
		}
	}
	sgs, err := raw.DescribeSecurityGroups(ctx, &ec2.DescribeSecurityGroupsInput{Filters: []types.Filter{
		{Name: awssdk.String("tag:" + provider.LabelInstallation), Values: []string{inst}},
		{Name: awssdk.String("tag:" + provider.LabelShared), Values: []string{"true"}}}}, opt)
	if err != nil {
		t.Fatalf("moto DescribeSecurityGroups in %s: %v", region, err)
	}
	for _, sg := range sgs.SecurityGroups {
		v.SecurityGroups = append(v.SecurityGroups, awssdk.ToString(sg.GroupId))
	}
	keys, err := raw.DescribeKeyPairs(ctx, &ec2.DescribeKeyPairsInput{Filters: []types.Filter{
		{Name: awssdk.String("key-name"), Values: []string{name}}}}, opt)
	if err != nil {
		t.Fatalf("moto DescribeKeyPairs in %s: %v", region, err)
	}
	for _, k := range keys.KeyPairs {
		v.KeyPairs = append(v.KeyPairs, awssdk.ToString(k.KeyName))
	}
	return v
}

// A whole launch on moto: Launch returns a ready VM whose instance moto
// runs, tagged with the VM and the journal's installation, in the
// installation's shared security group and with the key pair Prepare
// made; Delete leaves moto holding nothing of the VM, and, since it was
// the installation's last VM in the region, not the shared group either.
func TestMotoProvisionerLaunchAndDelete(t *testing.T) {
	url := mototest.URL(t)
	prov, db := newMotoProvisioner(t, url, aws.Config{Regions: []string{"us-east-1"}, Image: mototest.AMI})
	ctx := context.Background()
	const name = "moto-launch"

	vm, err := prov.Launch(ctx, gpuprov.Request{Name: name, GPU: "L4", Timeout: time.Minute})
	if err != nil {
		t.Fatalf("launch: %v", err)
	}
	if vm.State != gpuprov.StateReady || vm.Provider != aws.ID || vm.Location.Region != "us-east-1" ||
		vm.InstanceType != "g6.xlarge" || vm.InstanceID == "" || vm.SSH == nil || vm.SSH.Host == "" || vm.SSH.User != "ubuntu" {
		t.Fatalf("launched %+v", vm)
	}
	as, err := db.Attempts(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if len(as) != 1 || as[0].State != journal.AttemptSucceeded || !slices.Equal(as[0].InstanceIDs, []string{vm.InstanceID}) {
		t.Fatalf("attempts %+v, want one that succeeded with %s", as, vm.InstanceID)
	}

	v := viewMoto(t, url, "us-east-1", db.Installation(), name)
	if len(v.Instances) != 1 || len(v.SecurityGroups) != 1 || len(v.KeyPairs) != 1 {
		t.Fatalf("moto holds %d instances, security groups %v, key pairs %v; want one of each", len(v.Instances), v.SecurityGroups, v.KeyPairs)
	}
	in := v.Instances[0]
	if id := awssdk.ToString(in.InstanceId); id != vm.InstanceID || in.State.Name != types.InstanceStateNameRunning ||
		string(in.InstanceType) != "g6.xlarge" || awssdk.ToString(in.ImageId) != mototest.AMI ||
		awssdk.ToString(in.KeyName) != provider.ResourceName(name) || awssdk.ToString(in.PublicIpAddress) != vm.SSH.Host {
		t.Fatalf("moto's instance %s: %s, %s, %s, key %s, public IP %s; want %s running g6.xlarge %s, key %s, IP %s",
			awssdk.ToString(in.InstanceId), in.State.Name, in.InstanceType, awssdk.ToString(in.ImageId), awssdk.ToString(in.KeyName),
			awssdk.ToString(in.PublicIpAddress), vm.InstanceID, mototest.AMI, provider.ResourceName(name), vm.SSH.Host)
	}
	// The group is the network interface's (moto leaves the instance's own
	// SecurityGroups empty for an instance launched with an interface).
	if len(in.NetworkInterfaces) != 1 || len(in.NetworkInterfaces[0].Groups) != 1 ||
		awssdk.ToString(in.NetworkInterfaces[0].Groups[0].GroupId) != v.SecurityGroups[0] {
		t.Fatalf("moto's instance has interfaces %+v, want one in group %s only", in.NetworkInterfaces, v.SecurityGroups[0])
	}

	if err := prov.Delete(ctx, name); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if got, err := prov.Get(ctx, name); err != nil || got.State != gpuprov.StateDeleted {
		t.Fatalf("after delete: %+v, %v", got, err)
	}
	prov.Close() // removes the shared group waiting out its grace
	if v := viewMoto(t, url, "us-east-1", db.Installation(), name); !v.empty() {
		t.Fatalf("moto still holds %d instances, security groups %v, key pairs %v", len(v.Instances), v.SecurityGroups, v.KeyPairs)
	}
}

// staleCatalog lists p5e.48xlarge (8 × H200) in us-east-1, where moto's
// offerings data (taken from EC2's DescribeInstanceTypeOfferings) has no
// such type, and in us-west-2, where it has. The prices are the fixture's,
// not AWS's: they only put us-east-1 first.
const staleCatalog = `{"source": "test fixture", "as_of": "2026-01",
 "instance_types": [{"instance_type": "p5e.48xlarge", "gpu": "H200", "gpu_count": 8, "gpu_memory_mib": 144384,
  "vcpus": 192, "memory_gib": 2048,
  "regions": {"us-east-1": {"price": 40, "zones": ["use1-az1", "use1-az2"]},
              "us-west-2": {"price": 50, "zones": ["usw2-az1"]}}}]}`

// A launch whose first offer's instance type the region does not have:
// moto (with instance-type validation on) refuses RunInstances with
// InvalidInstanceType.NotFound, the adapter calls that Unavailable for the
// whole region, and the core tears the attempt down, blocks us-east-1
// (its other zone is not tried) and launches in us-west-2. Moto holds one
// instance, in us-west-2, and nothing of the VM in us-east-1; after Delete,
// nothing anywhere.
func TestMotoProvisionerFailsOverAnUnknownInstanceType(t *testing.T) {
	url := mototest.URL(t)
	cat, err := aws.ParseCatalog([]byte(staleCatalog))
	if err != nil {
		t.Fatal(err)
	}
	prov, db := newMotoProvisioner(t, url, aws.Config{Regions: []string{"us-east-1", "us-west-2"}, Image: mototest.AMI}, aws.WithCatalog(cat))
	ctx := context.Background()
	const name = "moto-failover"

	vm, err := prov.Launch(ctx, gpuprov.Request{Name: name, GPU: "H200", GPUCount: 8, Timeout: time.Minute})
	if err != nil {
		t.Fatalf("launch: %v", err)
	}
	if vm.State != gpuprov.StateReady || vm.Location.Region != "us-west-2" || vm.InstanceType != "p5e.48xlarge" {
		t.Fatalf("launched %+v, want p5e.48xlarge ready in us-west-2", vm)
	}
	as, err := db.Attempts(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if len(as) != 2 {
		t.Fatalf("%d attempts, want 2: %+v", len(as), as)
	}
	if a := as[0]; a.Region != "us-east-1" || a.State != journal.AttemptTornDown || !a.CleanedUp ||
		a.ErrorKind != provider.Unavailable.String() || !strings.Contains(a.Error, "InvalidInstanceType.NotFound") || len(a.InstanceIDs) != 0 {
		t.Fatalf("attempt 1: %+v, want us-east-1 torn down and cleaned up after Unavailable (InvalidInstanceType.NotFound), no instance", a)
	}
	if a := as[1]; a.Region != "us-west-2" || a.State != journal.AttemptSucceeded || !slices.Equal(a.InstanceIDs, []string{vm.InstanceID}) {
		t.Fatalf("attempt 2: %+v, want %s in us-west-2", a, vm.InstanceID)
	}
	blocks, err := db.Blocks(ctx, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) != 1 || blocks[0].Key != "region:aws|us-east-1" {
		t.Fatalf("blocks %+v, want only region:aws|us-east-1", blocks)
	}

	// Close removes us-east-1's shared group, waiting out its grace (the
	// Delete below, on a closed Provisioner, removes us-west-2's at once).
	prov.Close()
	if v := viewMoto(t, url, "us-east-1", db.Installation(), name); !v.empty() {
		t.Fatalf("moto holds in us-east-1 %d instances, security groups %v, key pairs %v; want none", len(v.Instances), v.SecurityGroups, v.KeyPairs)
	}
	v := viewMoto(t, url, "us-west-2", db.Installation(), name)
	if len(v.Instances) != 1 || awssdk.ToString(v.Instances[0].InstanceId) != vm.InstanceID {
		t.Fatalf("moto holds %d instances in us-west-2, want only %s", len(v.Instances), vm.InstanceID)
	}

	if err := prov.Delete(ctx, name); err != nil {
		t.Fatalf("delete: %v", err)
	}
	for _, region := range []string{"us-east-1", "us-west-2"} {
		if v := viewMoto(t, url, region, db.Installation(), name); !v.empty() {
			t.Fatalf("moto still holds in %s %d instances, security groups %v, key pairs %v", region, len(v.Instances), v.SecurityGroups, v.KeyPairs)
		}
	}
}

// A launch with a boot disk size and labels on moto: moto's instance has a
// root volume of that size on the image's root device (read by the adapter
// through DescribeImages) and carries the labels as tags beside the
// identity; its shared security group carries the shared labels only.
func TestMotoProvisionerDiskAndLabels(t *testing.T) {
	url := mototest.URL(t)
	prov, db := newMotoProvisioner(t, url, aws.Config{Regions: []string{"us-east-1"}, Image: mototest.AMI})
	ctx := context.Background()
	const name = "moto-needs"
	vm, err := prov.Launch(ctx, gpuprov.Request{Name: name, GPU: "L4", Timeout: time.Minute, DiskGB: 300,
		Labels: map[string]string{"team": "ml"}})
	if err != nil {
		t.Fatalf("launch: %v", err)
	}
	raw := mototest.EC2(url)
	opt := func(o *ec2.Options) { o.Region = "us-east-1" }
	v := viewMoto(t, url, "us-east-1", db.Installation(), name)
	if len(v.Instances) != 1 {
		t.Fatalf("moto holds %d instances", len(v.Instances))
	}
	in := v.Instances[0]
	tags := map[string]string{}
	for _, tg := range in.Tags {
		tags[awssdk.ToString(tg.Key)] = awssdk.ToString(tg.Value)
	}
	if tags["team"] != "ml" || tags[provider.LabelVM] != name {
		t.Errorf("instance tags %v; want team=ml beside the identity", tags)
	}
	var rootVol string
	for _, m := range in.BlockDeviceMappings {
		if awssdk.ToString(m.DeviceName) == awssdk.ToString(in.RootDeviceName) && m.Ebs != nil {
			rootVol = awssdk.ToString(m.Ebs.VolumeId)
		}
	}
	if rootVol == "" {
		t.Fatalf("moto's instance has no root volume on %s: %+v", awssdk.ToString(in.RootDeviceName), in.BlockDeviceMappings)
	}
	vols, err := raw.DescribeVolumes(ctx, &ec2.DescribeVolumesInput{VolumeIds: []string{rootVol}}, opt)
	if err != nil || len(vols.Volumes) != 1 {
		t.Fatalf("DescribeVolumes %s: %v", rootVol, err)
	}
	if size := awssdk.ToInt32(vols.Volumes[0].Size); size != 300 {
		t.Errorf("root volume is %d GB; want 300", size)
	}
	sgs, err := raw.DescribeSecurityGroups(ctx, &ec2.DescribeSecurityGroupsInput{GroupIds: v.SecurityGroups}, opt)
	if err != nil || len(sgs.SecurityGroups) != 1 {
		t.Fatalf("DescribeSecurityGroups: %v", err)
	}
	sgTags := map[string]string{}
	for _, tg := range sgs.SecurityGroups[0].Tags {
		sgTags[awssdk.ToString(tg.Key)] = awssdk.ToString(tg.Value)
	}
	if sgTags["team"] != "" || sgTags[provider.LabelVM] != "" || sgTags[provider.LabelShared] != "true" ||
		sgTags[provider.LabelInstallation] != db.Installation() {
		t.Errorf("shared security group tags %v; want the installation and %s=true, no VM's labels", sgTags, provider.LabelShared)
	}
	if err := prov.Delete(ctx, vm.Name); err != nil {
		t.Fatal(err)
	}
}
