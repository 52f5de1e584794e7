package aws_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/jarcoal/httpmock"

	"github.com/org/gpuprov/clock"
	"github.com/org/gpuprov/internal/mototest"
	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/aws"
)

// Persistent volumes (provider.VolumeManager) on EBS. The main suite runs
// against moto's EC2 server (see moto_test.go), which creates, attaches
// and detaches a volume the moment it is asked, keeps tags and answers
// VolumeInUse for the delete of an attached volume; its limits here: it
// ignores CreateVolume's ClientToken and AvailabilityZoneId (the adapter
// sends the zone's name, and finds a volume by its tags before creating
// one), and it attaches an attached volume again without VolumeInUse (the
// adapter reads the volume before it attaches). What moto cannot show —
// the creating → available and attaching → attached waits, a create
// replayed with its token, and EC2's error codes — runs against fakeEBS
// below, on a fake clock.

// motoVolumeEnv is the adapter of one installation on moto, on a fake
// clock that runs any poll's sleep at once, with two running instances in
// us-east-1a.
type motoVolumeEnv struct {
	p    *aws.Provider
	inst string
	raw  *ec2.Client
	loc  provider.Location // us-east-1 and us-east-1a's zone id
	a, b string            // the instances
}

func newMotoVolumeEnv(t *testing.T) *motoVolumeEnv {
	t.Helper()
	url := mototest.URL(t)
	raw := mototest.EC2(url)
	e := &motoVolumeEnv{p: newMotoVolumeProvider(t, url, motoInstallation(t)), inst: motoInstallation(t), raw: raw}
	ctx := context.Background()
	zones, err := raw.DescribeAvailabilityZones(ctx, &ec2.DescribeAvailabilityZonesInput{})
	if err != nil {
		t.Fatal(err)
	}
	for _, z := range zones.AvailabilityZones {
		if awssdk.ToString(z.ZoneName) == "us-east-1a" {
			e.loc = provider.Location{Region: "us-east-1", Zone: awssdk.ToString(z.ZoneId)}
		}
	}
	if e.loc.Zone == "" || e.loc.Zone == "us-east-1a" {
		t.Fatalf("moto lists no zone id for us-east-1a: %+v", zones.AvailabilityZones)
	}
	run, err := raw.RunInstances(ctx, &ec2.RunInstancesInput{ImageId: awssdk.String(mototest.AMI), InstanceType: "g6.xlarge",
		MinCount: awssdk.Int32(2), MaxCount: awssdk.Int32(2), Placement: &types.Placement{AvailabilityZone: awssdk.String("us-east-1a")}})
	if err != nil || len(run.Instances) != 2 {
		t.Fatalf("RunInstances in moto: %v", err)
	}
	e.a, e.b = awssdk.ToString(run.Instances[0].InstanceId), awssdk.ToString(run.Instances[1].InstanceId)
	t.Cleanup(func() {
		_, _ = raw.TerminateInstances(context.Background(), &ec2.TerminateInstancesInput{InstanceIds: []string{e.a, e.b}}) // moto's state dies with it
	})
	return e
}

// newMotoVolumeProvider is newMotoProvider on a fake clock that runs every
// sleep at once.
func newMotoVolumeProvider(t *testing.T, url, inst string) *aws.Provider {
	t.Helper()
	clk := clock.NewFake(t0)
	t.Cleanup(clk.AutoAdvance())
	p, err := aws.New(aws.Config{Regions: []string{"us-east-1"}, Image: mototest.AMI}, aws.WithInstallation(inst), aws.WithClock(clk),
		aws.WithEndpoint(aws.Endpoint{URL: url, Client: mototest.Client, AccessKeyID: mototest.KeyID, SecretAccessKey: mototest.Secret}))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// motoVolumes is moto's own view of the volumes named name of the test's
// installation and of the other installation (TestMotoVolumeNamesAreNotShared).
func (e *motoVolumeEnv) motoVolumes(t *testing.T, name string) []types.Volume {
	t.Helper()
	out, err := e.raw.DescribeVolumes(context.Background(), &ec2.DescribeVolumesInput{Filters: []types.Filter{
		{Name: awssdk.String("tag:" + provider.LabelVM), Values: []string{name}},
		{Name: awssdk.String("tag:" + provider.LabelInstallation), Values: []string{e.inst, e.inst + "-other"}}}})
	if err != nil {
		t.Fatal(err)
	}
	return out.Volumes
}

func volumeTags(tags []types.Tag) map[string]string {
	m := map[string]string{}
	for _, tg := range tags {
		m[awssdk.ToString(tg.Key)] = awssdk.ToString(tg.Value)
	}
	return m
}

func wantInUse(t *testing.T, err error, kind provider.ErrorKind) {
	t.Helper()
	if !errors.Is(err, provider.ErrInUse) || provider.KindOf(err) != kind {
		t.Fatalf("got %v (kind %s), want an error matching provider.ErrInUse of kind %s", err, provider.KindOf(err), kind)
	}
}

// The life of a volume as the core drives it, against moto: create (sent
// twice with its token: one volume), observe until available, attach (the
// NVMe by-id path of the volume; moto holds it at /dev/sdf), attach again
// (same device), attach elsewhere and delete while attached (ErrInUse,
// InvalidRequest: the holder runs), detach (from an instance it is not on:
// nothing; from its own: detached), delete twice, observe: nil.
func TestMotoVolumeLifecycle(t *testing.T) {
	e := newMotoVolumeEnv(t)
	ctx := context.Background()
	inst := motoInstallation(t)
	spec := provider.VolumeSpec{Name: "data", Installation: inst, SizeGB: 100, Location: e.loc,
		UserLabels: map[string]string{"team": "ml"}, IdempotencyToken: inst + "-vol-data-0"}
	v, err := e.p.CreateVolume(ctx, spec)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if !strings.HasPrefix(v.ID, "vol-") || v.Name != "data" || v.SizeGB != 100 || v.Location != e.loc ||
		(v.Status != provider.VolumeCreating && v.Status != provider.VolumeAvailable) || v.AttachedTo != "" {
		t.Fatalf("create: %+v", v)
	}
	again, err := e.p.CreateVolume(ctx, spec)
	if err != nil || again.ID != v.ID {
		t.Fatalf("create sent again: %+v, %v; want %s", again, err, v.ID)
	}
	held := e.motoVolumes(t, "data")
	if len(held) != 1 {
		t.Fatalf("moto holds %d volumes named data, want 1", len(held))
	}
	want := map[string]string{"Name": "gpuprov--data", provider.LabelVM: "data", provider.LabelInstallation: inst,
		provider.LabelVolume: "true", "team": "ml"}
	if got := volumeTags(held[0].Tags); !maps.Equal(got, want) || held[0].VolumeType != types.VolumeTypeGp3 ||
		awssdk.ToInt32(held[0].Size) != 100 || awssdk.ToString(held[0].AvailabilityZone) != "us-east-1a" {
		t.Fatalf("moto holds %s %s %d GiB in %s tagged %v; want gp3, 100 GiB in us-east-1a tagged %v",
			awssdk.ToString(held[0].VolumeId), held[0].VolumeType, awssdk.ToInt32(held[0].Size), awssdk.ToString(held[0].AvailabilityZone), volumeTags(held[0].Tags), want)
	}

	seen, err := e.p.ObserveVolume(ctx, e.loc, "data") // moto makes a volume available at once
	if err != nil || seen == nil || seen.ID != v.ID || seen.Status != provider.VolumeAvailable || seen.Name != "data" || seen.Location != e.loc {
		t.Fatalf("observe: %+v, %v; want %s available", seen, err, v.ID)
	}
	for _, other := range []struct {
		loc  provider.Location
		name string
	}{{e.loc, "none"}, {provider.Location{Region: "us-east-1", Zone: "use1-az-none"}, "data"}} {
		if got, err := e.p.ObserveVolume(ctx, other.loc, other.name); err != nil || got != nil {
			t.Fatalf("observe %s in %s: %+v, %v; want nil", other.name, other.loc, got, err)
		}
	}

	wantDev := "/dev/disk/by-id/nvme-Amazon_Elastic_Block_Store_" + strings.ReplaceAll(v.ID, "-", "")
	dev, err := e.p.AttachVolume(ctx, e.loc, v.ID, e.a)
	if err != nil || dev != wantDev {
		t.Fatalf("attach: %q, %v; want %q", dev, err, wantDev)
	}
	held = e.motoVolumes(t, "data")
	if len(held[0].Attachments) != 1 || awssdk.ToString(held[0].Attachments[0].InstanceId) != e.a ||
		awssdk.ToString(held[0].Attachments[0].Device) != "/dev/sdf" {
		t.Fatalf("moto's attachments: %+v, want one to %s as /dev/sdf", held[0].Attachments, e.a)
	}
	if seen, err := e.p.ObserveVolume(ctx, e.loc, "data"); err != nil || seen.Status != provider.VolumeAttached || seen.AttachedTo != e.a {
		t.Fatalf("observe attached: %+v, %v", seen, err)
	}
	if dev2, err := e.p.AttachVolume(ctx, e.loc, v.ID, e.a); err != nil || dev2 != dev {
		t.Fatalf("attach again to the same instance: %q, %v; want %q", dev2, err, dev)
	}
	_, err = e.p.AttachVolume(ctx, e.loc, v.ID, e.b)
	wantInUse(t, err, provider.InvalidRequest)
	wantInUse(t, e.p.DeleteVolume(ctx, e.loc, v.ID), provider.InvalidRequest)
	if err := e.p.DetachVolume(ctx, e.loc, v.ID, e.b); err != nil {
		t.Fatalf("detach from an instance it is not attached to: %v", err)
	}
	if seen, err := e.p.ObserveVolume(ctx, e.loc, "data"); err != nil || seen.AttachedTo != e.a {
		t.Fatalf("after a detach from %s: %+v, %v; want still attached to %s", e.b, seen, err, e.a)
	}
	for i := range 2 {
		if err := e.p.DetachVolume(ctx, e.loc, v.ID, e.a); err != nil {
			t.Fatalf("detach %d: %v", i+1, err)
		}
	}
	if held := e.motoVolumes(t, "data"); len(held) != 1 || len(held[0].Attachments) != 0 || held[0].State != types.VolumeStateAvailable {
		t.Fatalf("moto after detach: %+v", held)
	}
	for i := range 2 {
		if err := e.p.DeleteVolume(ctx, e.loc, v.ID); err != nil {
			t.Fatalf("delete %d: %v", i+1, err)
		}
	}
	if seen, err := e.p.ObserveVolume(ctx, e.loc, "data"); err != nil || seen != nil {
		t.Fatalf("observe after delete: %+v, %v; want nil", seen, err)
	}
	if held := e.motoVolumes(t, "data"); len(held) != 0 {
		t.Fatalf("moto still holds %+v", held)
	}
}

// A name is one volume of a zone: another installation's volume of that
// name is refused (moto keeps one volume), and is not this installation's
// to observe. A VM's root volume, which RunInstances tags with the VM's
// name and installation, is never taken for a persistent volume of that
// name.
func TestMotoVolumeNamesAreNotShared(t *testing.T) {
	e := newMotoVolumeEnv(t)
	ctx := context.Background()
	inst := motoInstallation(t)
	other := newMotoVolumeProvider(t, mototest.URL(t), inst+"-other")
	theirs, err := other.CreateVolume(ctx, provider.VolumeSpec{Name: "shared", SizeGB: 10, Location: e.loc, IdempotencyToken: inst + "-other-shared"})
	if err != nil {
		t.Fatalf("create of the other installation: %v", err)
	}
	_, err = e.p.CreateVolume(ctx, provider.VolumeSpec{Name: "shared", Installation: inst, SizeGB: 10, Location: e.loc, IdempotencyToken: inst + "-shared"})
	errKind(t, err, provider.InvalidRequest)
	if held := e.motoVolumes(t, "shared"); len(held) != 1 || awssdk.ToString(held[0].VolumeId) != theirs.ID {
		t.Fatalf("moto holds %+v, want only %s", held, theirs.ID)
	}
	if got, err := e.p.ObserveVolume(ctx, e.loc, "shared"); err != nil || got != nil {
		t.Fatalf("observe of another installation's volume: %+v, %v; want nil", got, err)
	}

	// a root volume as RunInstances tags it: the VM's identity, no LabelVolume
	root, err := e.raw.CreateVolume(ctx, &ec2.CreateVolumeInput{AvailabilityZone: awssdk.String("us-east-1a"), Size: awssdk.Int32(8),
		TagSpecifications: []types.TagSpecification{{ResourceType: types.ResourceTypeVolume, Tags: []types.Tag{
			{Key: awssdk.String(provider.LabelVM), Value: awssdk.String("train")},
			{Key: awssdk.String(provider.LabelInstallation), Value: awssdk.String(inst)}}}}})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := e.p.ObserveVolume(ctx, e.loc, "train"); err != nil || got != nil {
		t.Fatalf("observe of a name a root volume carries: %+v, %v; want nil", got, err)
	}
	v, err := e.p.CreateVolume(ctx, provider.VolumeSpec{Name: "train", Installation: inst, SizeGB: 20, Location: e.loc})
	if err != nil || v.ID == awssdk.ToString(root.VolumeId) || v.SizeGB != 20 {
		t.Fatalf("create of a name a root volume carries: %+v, %v; want a new volume", v, err)
	}
	for _, id := range []string{v.ID, theirs.ID, awssdk.ToString(root.VolumeId)} {
		if err := e.p.DeleteVolume(ctx, e.loc, id); err != nil {
			t.Fatalf("delete %s: %v", id, err)
		}
	}
}

// fakeEBS is EC2's volume calls as the API reference describes them,
// served through an httpmock transport on the test's fake clock: a
// volume is creating for volumeCreateTime, an attachment attaching for
// attachTime and detaching for detachTime; CreateVolume honours
// ClientToken; AttachVolume refuses an attached volume (VolumeInUse), a
// creating one (IncorrectState), a device name in use and another zone;
// DeleteVolume refuses an attached volume (VolumeInUse). Rules script
// error answers.
type fakeEBS struct {
	t    *testing.T
	clk  *clock.Fake
	tr   *httpmock.MockTransport
	mu   sync.Mutex
	seq  int
	reqs []*fakeReq

	rules     []*ebsRule
	volumes   map[string]*fakeVolume
	tokens    map[string]string // client token → volume id
	instances map[string]*fakeVM
}

type fakeVolume struct {
	ID, Zone, State        string // Zone: a zone id; State: creating or available
	Size                   int
	Tags                   map[string]string
	Created                time.Time
	Instance, Device       string
	Attach                 string // attaching, attached, detaching, or "" when not attached
	AttachDone, DetachDone time.Time
	hidden                 int // filtered DescribeVolumes calls that do not list it yet
}

// fakeVM is an instance as AttachVolume and DescribeInstances see it.
type fakeVM struct {
	ID, Type, Zone, State string
	Devices               []string // block device mapping names
}

// ebsRule makes requests of Action fail with Code (Times > 0: that many
// times; 0: always), with the status EC2 documents for it; Before runs
// first (another caller's change that the error answers); Landed makes the
// call take effect before the error answer (an answer lost on the way).
type ebsRule struct {
	Action, Code string
	Times        int
	Before       func(f *fakeEBS)
	Landed       bool
	hits         int
}

const (
	volumeCreateTime = 20 * time.Second
	attachTime       = 15 * time.Second
	detachTime       = 10 * time.Second
)

func newFakeEBS(t *testing.T) *fakeEBS {
	f := &fakeEBS{t: t, clk: clock.NewFake(t0), tr: httpmock.NewMockTransport(), volumes: map[string]*fakeVolume{},
		tokens: map[string]string{}, instances: map[string]*fakeVM{}}
	f.tr.RegisterNoResponder(f.serve)
	return f
}

// provider returns the adapter of installation on f, polling every 5s
// (the default) on f's clock.
func (f *fakeEBS) provider(t *testing.T) *aws.Provider {
	t.Helper()
	p, err := aws.New(aws.Config{Regions: []string{"us-east-1"}}, aws.WithInstallation(installation), aws.WithClock(f.clk),
		aws.WithEndpoint(aws.Endpoint{URL: ec2URL, Client: &http.Client{Transport: f.tr}, AccessKeyID: "AKIDTEST", SecretAccessKey: "secret-test"}))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func (f *fakeEBS) fail(r *ebsRule) { f.mu.Lock(); f.rules = append(f.rules, r); f.mu.Unlock() }

func (f *fakeEBS) requests(action string) []*fakeReq {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*fakeReq
	for _, r := range f.reqs {
		if action == "" || r.Action == action {
			out = append(out, r)
		}
	}
	return out
}

func (f *fakeEBS) addVM(vm *fakeVM) { f.mu.Lock(); f.instances[vm.ID] = vm; f.mu.Unlock() }

// addVolume puts an available volume of installation named name in zone.
func (f *fakeEBS) addVolume(name, zone string) *fakeVolume {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seq++
	v := &fakeVolume{ID: fmt.Sprintf("vol-0%016x", f.seq), Zone: zone, State: "available", Size: 50, Created: f.clk.Now(),
		Tags: map[string]string{"Name": provider.VolumeResourceName(name), "gpuprov": name, "gpuprov-installation": installation, provider.LabelVolume: "true"}}
	f.volumes[v.ID] = v
	return v
}

// attachNow attaches v to instance as device at once.
func (f *fakeEBS) attachNow(v *fakeVolume, instance, device string) {
	v.Instance, v.Device, v.Attach = instance, device, "attached"
}

// tick moves a volume along with time. Callers hold f.mu.
func (f *fakeEBS) tick(v *fakeVolume) {
	now := f.clk.Now()
	if v.State == "creating" && !now.Before(v.Created.Add(volumeCreateTime)) {
		v.State = "available"
	}
	if v.Attach == "attaching" && !now.Before(v.AttachDone) {
		v.Attach = "attached"
	}
	if v.Attach == "detaching" && !now.Before(v.DetachDone) {
		if vm := f.instances[v.Instance]; vm != nil {
			vm.Devices = slices.DeleteFunc(vm.Devices, func(d string) bool { return d == v.Device })
		}
		v.Instance, v.Device, v.Attach = "", "", ""
	}
}

func (f *fakeEBS) serve(req *http.Request) (*http.Response, error) {
	b, _ := io.ReadAll(req.Body)
	m := credRE.FindStringSubmatch(req.Header.Get("Authorization"))
	form, err := url.ParseQuery(string(b))
	if m == nil || err != nil || form.Get("Version") != "2016-11-15" {
		f.t.Errorf("malformed or unsigned EC2 request: %s %q", req.URL, b)
		return ec2Error(400, "MalformedQueryString", "test"), nil
	}
	r := &fakeReq{Action: form.Get("Action"), Region: m[2], Form: form}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reqs = append(f.reqs, r)
	for _, v := range f.volumes {
		f.tick(v)
	}
	var rule *ebsRule
	for _, x := range f.rules {
		if x.Action == r.Action && (x.Times == 0 || x.hits < x.Times) {
			x.hits++
			rule = x
			break
		}
	}
	if rule != nil {
		if rule.Before != nil {
			rule.Before(f)
		}
		if !rule.Landed {
			return ec2Error(documentedStatus(rule.Code), rule.Code, "scripted by the test"), nil
		}
	}
	resp := f.act(r)
	if rule != nil {
		return ec2Error(documentedStatus(rule.Code), rule.Code, "scripted by the test"), nil
	}
	return resp, nil
}

func (f *fakeEBS) act(r *fakeReq) *http.Response {
	switch r.Action {
	case "DescribeAvailabilityZones":
		var b strings.Builder
		for i := 1; i <= 3; i++ {
			id := "use1-az" + strconv.Itoa(i)
			fmt.Fprintf(&b, `<item><zoneName>%s</zoneName><zoneId>%s</zoneId><zoneState>available</zoneState><regionName>us-east-1</regionName></item>`, zoneName(id), id)
		}
		return answer(r.Action, `<availabilityZoneInfo>`+b.String()+`</availabilityZoneInfo>`)
	case "CreateVolume":
		return f.createVolume(r)
	case "DescribeVolumes":
		return f.describeVolumes(r)
	case "AttachVolume":
		return f.attachVolume(r)
	case "DetachVolume":
		return f.detachVolume(r)
	case "DeleteVolume":
		v, ok := f.volumes[r.Form.Get("VolumeId")]
		switch {
		case !ok:
			return ec2Error(400, "InvalidVolume.NotFound", "The volume '"+r.Form.Get("VolumeId")+"' does not exist.")
		case v.Attach != "":
			return ec2Error(400, "VolumeInUse", "Volume "+v.ID+" is currently attached to "+v.Instance)
		}
		delete(f.volumes, v.ID)
		return answer(r.Action, `<return>true</return>`)
	case "DescribeInstances":
		var b strings.Builder
		for _, id := range list(r.Form, "InstanceId") {
			vm, ok := f.instances[id]
			if !ok {
				return ec2Error(400, "InvalidInstanceID.NotFound", "The instance ID '"+id+"' does not exist")
			}
			fmt.Fprintf(&b, `<item><reservationId>r-1</reservationId><instancesSet><item><instanceId>%s</instanceId><instanceType>%s</instanceType>`+
				`<instanceState><code>16</code><name>%s</name></instanceState><placement><availabilityZone>%s</availabilityZone><availabilityZoneId>%s</availabilityZoneId></placement>`+
				`<blockDeviceMapping>`, vm.ID, vm.Type, vm.State, zoneName(vm.Zone), vm.Zone)
			for _, d := range vm.Devices {
				fmt.Fprintf(&b, `<item><deviceName>%s</deviceName><ebs><volumeId>vol-0root</volumeId><status>attached</status></ebs></item>`, d)
			}
			b.WriteString(`</blockDeviceMapping></item></instancesSet></item>`)
		}
		return answer(r.Action, `<reservationSet>`+b.String()+`</reservationSet>`)
	}
	f.t.Errorf("fake EBS: unexpected action %q", r.Action)
	return ec2Error(400, "InvalidAction", r.Action)
}

func (f *fakeEBS) createVolume(r *fakeReq) *http.Response {
	if id, ok := f.tokens[r.Form.Get("ClientToken")]; ok && r.Form.Get("ClientToken") != "" {
		return answer(r.Action, volumeXML(f.volumes[id]))
	}
	zone := ""
	for i := 1; i <= 3; i++ {
		if id := "use1-az" + strconv.Itoa(i); zoneName(id) == r.Form.Get("AvailabilityZone") || id == r.Form.Get("AvailabilityZoneId") {
			zone = id
		}
	}
	size, _ := strconv.Atoi(r.Form.Get("Size"))
	switch {
	case zone == "":
		return ec2Error(400, "InvalidZone.NotFound", "no zone")
	case r.Form.Get("VolumeType") != "gp3" || size < 1 || size > 65536:
		return ec2Error(400, "InvalidParameterValue", "type or size")
	}
	f.seq++
	v := &fakeVolume{ID: fmt.Sprintf("vol-0%016x", f.seq), Zone: zone, State: "creating", Size: size, Created: f.clk.Now(),
		Tags: tagSpec(r.Form, "volume")}
	f.volumes[v.ID] = v
	if t := r.Form.Get("ClientToken"); t != "" {
		f.tokens[t] = v.ID
	}
	return answer(r.Action, volumeXML(v))
}

func (f *fakeEBS) describeVolumes(r *fakeReq) *http.Response {
	ids := list(r.Form, "VolumeId")
	fs := filters(r.Form)
	var out []*fakeVolume
	for _, id := range ids {
		v, ok := f.volumes[id]
		if !ok {
			return ec2Error(400, "InvalidVolume.NotFound", "The volume '"+id+"' does not exist.")
		}
		out = append(out, v)
	}
	if len(ids) == 0 {
		for _, v := range f.volumes {
			if v.hidden > 0 {
				v.hidden--
				continue
			}
			if matchTags(fs, v.Tags) {
				out = append(out, v)
			}
		}
	}
	slices.SortFunc(out, func(a, b *fakeVolume) int { return strings.Compare(a.ID, b.ID) })
	var b strings.Builder
	for _, v := range out {
		b.WriteString(`<item>` + volumeXML(v) + `</item>`)
	}
	return answer(r.Action, `<volumeSet>`+b.String()+`</volumeSet>`)
}

// volumeXML is a volume as the reference's Volume (and CreateVolume's
// response) has it.
func volumeXML(v *fakeVolume) string {
	state := v.State
	var att string
	if v.Attach != "" {
		state = "in-use"
		att = fmt.Sprintf(`<item><volumeId>%s</volumeId><instanceId>%s</instanceId><device>%s</device><status>%s</status>`+
			`<attachTime>2026-03-01T12:00:00.000Z</attachTime><deleteOnTermination>false</deleteOnTermination></item>`, v.ID, v.Instance, v.Device, v.Attach)
	}
	return fmt.Sprintf(`<volumeId>%s</volumeId><size>%d</size><availabilityZone>%s</availabilityZone><availabilityZoneId>%s</availabilityZoneId>`+
		`<status>%s</status><createTime>%s</createTime><volumeType>gp3</volumeType><attachmentSet>%s</attachmentSet>%s`,
		v.ID, v.Size, zoneName(v.Zone), v.Zone, state, v.Created.UTC().Format(time.RFC3339), att, tagsXML(v.Tags))
}

func (f *fakeEBS) attachVolume(r *fakeReq) *http.Response {
	v, ok := f.volumes[r.Form.Get("VolumeId")]
	if !ok {
		return ec2Error(400, "InvalidVolume.NotFound", "The volume '"+r.Form.Get("VolumeId")+"' does not exist.")
	}
	vm, ok := f.instances[r.Form.Get("InstanceId")]
	dev := r.Form.Get("Device")
	switch {
	case !ok:
		return ec2Error(400, "InvalidInstanceID.NotFound", "The instance ID '"+r.Form.Get("InstanceId")+"' does not exist")
	case v.State == "creating":
		return ec2Error(400, "IncorrectState", "vol is in the 'creating' state")
	case v.Attach != "":
		return ec2Error(400, "VolumeInUse", v.ID+" is already attached to an instance")
	case vm.State != "running":
		return ec2Error(400, "IncorrectInstanceState", "not running")
	case vm.Zone != v.Zone:
		return ec2Error(400, "InvalidVolume.ZoneMismatch", "The volume '"+v.ID+"' is not in the same availability zone as instance '"+vm.ID+"'")
	case slices.Contains(vm.Devices, dev) || !strings.HasPrefix(dev, "/dev/sd"):
		return ec2Error(400, "InvalidParameterValue", "Invalid value '"+dev+"' for unixDevice. Attachment point "+dev+" is already in use")
	}
	v.Instance, v.Device, v.Attach, v.AttachDone = vm.ID, dev, "attaching", f.clk.Now().Add(attachTime)
	vm.Devices = append(vm.Devices, dev)
	return answer(r.Action, fmt.Sprintf(`<volumeId>%s</volumeId><instanceId>%s</instanceId><device>%s</device><status>attaching</status>`+
		`<attachTime>2026-03-01T12:00:00.000Z</attachTime>`, v.ID, vm.ID, dev))
}

func (f *fakeEBS) detachVolume(r *fakeReq) *http.Response {
	v, ok := f.volumes[r.Form.Get("VolumeId")]
	if !ok {
		return ec2Error(400, "InvalidVolume.NotFound", "The volume '"+r.Form.Get("VolumeId")+"' does not exist.")
	}
	if v.Attach == "" || v.Instance != r.Form.Get("InstanceId") {
		return ec2Error(400, "InvalidAttachment.NotFound", "not attached")
	}
	v.Attach, v.DetachDone = "detaching", f.clk.Now().Add(detachTime)
	return answer(r.Action, fmt.Sprintf(`<volumeId>%s</volumeId><instanceId>%s</instanceId><device>%s</device><status>detaching</status>`, v.ID, v.Instance, v.Device))
}

var l4Zone = provider.Location{Region: "us-east-1", Zone: "use1-az1"}

// The waits the core relies on: a volume is created, observed creating,
// then available; attached, AttachVolume returning only once EC2 says
// attached, on the first device name the instance does not use
// (/dev/sda1 and /dev/sdf are: /dev/sdg), as the NVMe by-id path; on a
// Xen GPU type (p3) as /dev/xvd<letter>; detached, DetachVolume returning
// once the attachment is gone. No real sleep: the poll interval passes on
// the fake clock.
func TestVolumeWaitsThroughCreatingAndAttaching(t *testing.T) {
	f := newFakeEBS(t)
	defer f.clk.AutoAdvance()()
	p := f.provider(t)
	ctx := context.Background()
	f.addVM(&fakeVM{ID: "i-0aaaaaaaaaaaaaaa1", Type: "g6.xlarge", Zone: "use1-az1", State: "running", Devices: []string{"/dev/sda1", "/dev/sdf"}})
	f.addVM(&fakeVM{ID: "i-0bbbbbbbbbbbbbbb2", Type: "p3.2xlarge", Zone: "use1-az1", State: "running", Devices: []string{"/dev/xvda"}})

	v, err := p.CreateVolume(ctx, provider.VolumeSpec{Name: "ckpt", SizeGB: 500, Location: l4Zone, IdempotencyToken: "tok-ckpt"})
	if err != nil || v.Status != provider.VolumeCreating || v.Location != l4Zone || v.Name != "ckpt" {
		t.Fatalf("create: %+v, %v; want creating in %s", v, err, l4Zone)
	}
	if c := f.requests("CreateVolume"); len(c) != 1 || c[0].Form.Get("AvailabilityZone") != "us-east-1a" || c[0].Form.Get("Size") != "500" ||
		c[0].Form.Get("VolumeType") != "gp3" || c[0].Form.Get("ClientToken") != "tok-ckpt" ||
		!maps.Equal(tagSpec(c[0].Form, "volume"), map[string]string{"Name": "gpuprov--ckpt", "gpuprov": "ckpt", "gpuprov-installation": installation, provider.LabelVolume: "true"}) {
		t.Fatalf("CreateVolume sent %v", c)
	}
	start := f.clk.Now()
	var seen *provider.Volume
	for seen == nil || seen.Status == provider.VolumeCreating {
		if seen != nil {
			if err := f.clk.Sleep(ctx, 5*time.Second); err != nil {
				t.Fatal(err)
			}
		}
		if seen, err = p.ObserveVolume(ctx, l4Zone, "ckpt"); err != nil || seen == nil {
			t.Fatalf("observe: %+v, %v", seen, err)
		}
	}
	if seen.Status != provider.VolumeAvailable || seen.ID != v.ID || f.clk.Now().Sub(start) < volumeCreateTime {
		t.Fatalf("observed %+v after %s; want %s available after %s", seen, f.clk.Now().Sub(start), v.ID, volumeCreateTime)
	}

	start, polls := f.clk.Now(), len(f.requests("DescribeVolumes"))
	dev, err := p.AttachVolume(ctx, l4Zone, v.ID, "i-0aaaaaaaaaaaaaaa1")
	if want := "/dev/disk/by-id/nvme-Amazon_Elastic_Block_Store_" + strings.ReplaceAll(v.ID, "-", ""); err != nil || dev != want {
		t.Fatalf("attach: %q, %v; want %q", dev, err, want)
	}
	if a := f.requests("AttachVolume"); len(a) != 1 || a[0].Form.Get("Device") != "/dev/sdg" || a[0].Form.Get("InstanceId") != "i-0aaaaaaaaaaaaaaa1" {
		t.Fatalf("AttachVolume sent %+v, want one with /dev/sdg", a)
	}
	if waited, n := f.clk.Now().Sub(start), len(f.requests("DescribeVolumes"))-polls; waited < attachTime || n < 3 {
		t.Fatalf("attach returned after %s and %d DescribeVolumes; want it to wait through attaching (%s)", waited, n, attachTime)
	}
	if dev2, err := p.AttachVolume(ctx, l4Zone, v.ID, "i-0aaaaaaaaaaaaaaa1"); err != nil || dev2 != dev || len(f.requests("AttachVolume")) != 1 {
		t.Fatalf("attach again: %q, %v, %d AttachVolume sent; want %q and none sent", dev2, err, len(f.requests("AttachVolume")), dev)
	}

	start = f.clk.Now()
	if err := p.DetachVolume(ctx, l4Zone, v.ID, "i-0aaaaaaaaaaaaaaa1"); err != nil {
		t.Fatalf("detach: %v", err)
	}
	if waited := f.clk.Now().Sub(start); waited < detachTime {
		t.Fatalf("detach returned after %s; want it to wait through detaching (%s)", waited, detachTime)
	}
	if seen, err := p.ObserveVolume(ctx, l4Zone, "ckpt"); err != nil || seen.Status != provider.VolumeAvailable || seen.AttachedTo != "" {
		t.Fatalf("observe after detach: %+v, %v", seen, err)
	}

	dev, err = p.AttachVolume(ctx, l4Zone, v.ID, "i-0bbbbbbbbbbbbbbb2")
	if err != nil || dev != "/dev/xvdf" {
		t.Fatalf("attach to a p3 (Xen): %q, %v; want /dev/xvdf", dev, err)
	}
}

// A create whose answer is lost, sent again before DescribeVolumes lists
// its volume, is answered with that volume by EC2 for its ClientToken: one
// volume. A token longer than EC2's 64 characters is sent as its SHA-256.
func TestVolumeCreateReplayedWithItsToken(t *testing.T) {
	f := newFakeEBS(t)
	p := f.provider(t)
	ctx := context.Background()
	f.fail(&ebsRule{Action: "CreateVolume", Code: "InternalError", Times: 1, Landed: true})
	spec := provider.VolumeSpec{Name: "data", SizeGB: 100, Location: l4Zone, IdempotencyToken: "tok-data"}
	_, err := p.CreateVolume(ctx, spec)
	errKind(t, err, provider.Transient)
	for _, v := range f.volumes {
		v.hidden = 5 // not listed yet: eventual consistency
	}
	v, err := p.CreateVolume(ctx, spec)
	if err != nil || len(f.volumes) != 1 || f.volumes[v.ID] == nil {
		t.Fatalf("create sent again: %+v, %v; the fake holds %d volumes", v, err, len(f.volumes))
	}
	c := f.requests("CreateVolume")
	if len(c) != 2 || c[0].Form.Get("ClientToken") != "tok-data" || c[1].Form.Get("ClientToken") != "tok-data" {
		t.Fatalf("CreateVolume sent %d times with tokens %v", len(c), c)
	}

	long := strings.Repeat("t", 65)
	if _, err := p.CreateVolume(ctx, provider.VolumeSpec{Name: "long", SizeGB: 1, Location: l4Zone, IdempotencyToken: long}); err != nil {
		t.Fatal(err)
	}
	if tok := f.requests("CreateVolume")[2].Form.Get("ClientToken"); len(tok) != 64 || tok == long[:64] {
		t.Fatalf("a 65-character token sent as %q; want its 64-digit hash", tok)
	}
}

// What the adapter refuses is refused before any request: a size outside
// gp3's 1 to 65,536 GiB, a location without a zone or a region, no name.
func TestVolumeBadInputSendsNothing(t *testing.T) {
	f := newFakeEBS(t)
	p := f.provider(t)
	for name, spec := range map[string]provider.VolumeSpec{
		"size 0":       {Name: "d", SizeGB: 0, Location: l4Zone},
		"size 65537":   {Name: "d", SizeGB: 65537, Location: l4Zone},
		"negative":     {Name: "d", SizeGB: -1, Location: l4Zone},
		"no zone":      {Name: "d", SizeGB: 10, Location: provider.Location{Region: "us-east-1"}},
		"no region":    {Name: "d", SizeGB: 10, Location: provider.Location{Zone: "use1-az1"}},
		"no name":      {SizeGB: 10, Location: l4Zone},
		"no location":  {Name: "d", SizeGB: 10},
		"size 100 000": {Name: "d", SizeGB: 100000, Location: l4Zone},
	} {
		_, err := p.CreateVolume(context.Background(), spec)
		if provider.KindOf(err) != provider.InvalidRequest {
			t.Errorf("%s: %v, want invalid-request", name, err)
		}
	}
	if lim := p.VolumeLimits(); lim != (provider.VolumeLimits{Scope: provider.VolumeZonal, MinGB: 1, MaxGB: 65536}) {
		t.Errorf("limits %+v", lim)
	}
	if n := len(f.requests("")); n != 0 {
		t.Fatalf("%d requests sent for refused input: %+v", n, f.requests(""))
	}
}

// EC2's volume error codes (EC2 API Reference, "Error codes for the Amazon
// EC2 API", client and server tables) as the core sees them: the kind, the
// scope blocked, and whether the error matches provider.ErrInUse; one
// request per mutating call (the SDK's retryer is off).
func TestVolumeErrorCodes(t *testing.T) {
	const holder, user = "i-0holder000000001", "i-0user00000000002"
	type call func(p *aws.Provider, v *fakeVolume) error
	create := func(p *aws.Provider, _ *fakeVolume) error {
		_, err := p.CreateVolume(context.Background(), provider.VolumeSpec{Name: "new", SizeGB: 10, Location: l4Zone, IdempotencyToken: "tok-new"})
		return err
	}
	attach := func(p *aws.Provider, v *fakeVolume) error {
		_, err := p.AttachVolume(context.Background(), l4Zone, v.ID, user)
		return err
	}
	del := func(p *aws.Provider, v *fakeVolume) error { return p.DeleteVolume(context.Background(), l4Zone, v.ID) }
	detach := func(p *aws.Provider, v *fakeVolume) error {
		return p.DetachVolume(context.Background(), l4Zone, v.ID, holder)
	}
	for _, tc := range []struct {
		name   string
		setup  func(f *fakeEBS, v *fakeVolume)
		rule   *ebsRule
		call   call
		action string // the mutating action, sent exactly once
		kind   provider.ErrorKind
		scope  provider.Scope
		inUse  bool
		ok     bool
	}{
		{name: "InsufficientVolumeCapacity (server, 500): the zone is out of EBS capacity",
			rule: &ebsRule{Action: "CreateVolume", Code: "InsufficientVolumeCapacity"}, call: create, action: "CreateVolume",
			kind: provider.Capacity, scope: provider.ScopeZone},
		{name: "VolumeLimitExceeded (client): the account's EBS storage limit",
			rule: &ebsRule{Action: "CreateVolume", Code: "VolumeLimitExceeded"}, call: create, action: "CreateVolume",
			kind: provider.Quota, scope: provider.ScopeRegion},
		{name: "MaxIOPSLimitExceeded (client): the account's IOPS limit in the region",
			rule: &ebsRule{Action: "CreateVolume", Code: "MaxIOPSLimitExceeded"}, call: create, action: "CreateVolume",
			kind: provider.Quota, scope: provider.ScopeRegion},
		{name: "VolumeTypeNotAvailableInZone (client): no gp3 in the zone",
			rule: &ebsRule{Action: "CreateVolume", Code: "VolumeTypeNotAvailableInZone"}, call: create, action: "CreateVolume",
			kind: provider.Unavailable, scope: provider.ScopeZone},
		{name: "AttachmentLimitExceeded (client): the instance type's attachment limit",
			rule: &ebsRule{Action: "AttachVolume", Code: "AttachmentLimitExceeded"}, call: attach, action: "AttachVolume",
			kind: provider.Quota, scope: provider.ScopeOffer},
		{name: "InvalidVolume.ZoneMismatch (client): volume and instance in different zones",
			setup: func(f *fakeEBS, v *fakeVolume) { v.Zone = "use1-az2" }, call: attach, action: "AttachVolume",
			kind: provider.InvalidRequest, scope: provider.ScopeOffer},
		{name: "InvalidVolumeID.ZoneMismatch (client): volume and instance in different zones",
			rule: &ebsRule{Action: "AttachVolume", Code: "InvalidVolumeID.ZoneMismatch"}, call: attach, action: "AttachVolume",
			kind: provider.InvalidRequest, scope: provider.ScopeOffer},
		{name: "IncorrectInstanceState (client): the instance is not running yet",
			setup: func(f *fakeEBS, v *fakeVolume) { f.instances[user].State = "pending" }, call: attach, action: "AttachVolume",
			kind: provider.Transient, scope: provider.ScopeOffer},
		{name: "InvalidInstanceID.NotFound (client): the instance is gone",
			setup: func(f *fakeEBS, v *fakeVolume) { delete(f.instances, user) }, call: attach,
			kind: provider.Failed, scope: provider.ScopeOffer},
		{name: "InvalidVolumeID.Malformed (client) at DeleteVolume",
			rule: &ebsRule{Action: "DeleteVolume", Code: "InvalidVolumeID.Malformed"}, call: del, action: "DeleteVolume",
			kind: provider.InvalidRequest, scope: provider.ScopeOffer},
		{name: "IncorrectState (client): the volume is still being created",
			rule: &ebsRule{Action: "AttachVolume", Code: "IncorrectState"}, call: attach, action: "AttachVolume",
			kind: provider.Transient, scope: provider.ScopeOffer},
		{name: "attach to a volume another instance holds: no AttachVolume sent",
			setup: func(f *fakeEBS, v *fakeVolume) { f.attachNow(v, holder, "/dev/sdf") }, call: attach,
			kind: provider.InvalidRequest, scope: provider.ScopeOffer, inUse: true},
		{name: "VolumeInUse (client) at AttachVolume: another attach won the race",
			rule: &ebsRule{Action: "AttachVolume", Code: "VolumeInUse", Before: func(f *fakeEBS) {
				for _, v := range f.volumes {
					f.attachNow(v, holder, "/dev/sdf")
				}
			}}, call: attach, action: "AttachVolume", kind: provider.InvalidRequest, scope: provider.ScopeOffer, inUse: true},
		{name: "attach to a volume being detached from another instance",
			setup: func(f *fakeEBS, v *fakeVolume) {
				f.attachNow(v, holder, "/dev/sdf")
				v.Attach, v.DetachDone = "detaching", f.clk.Now().Add(time.Hour)
			}, call: attach, kind: provider.Transient, scope: provider.ScopeOffer, inUse: true},
		{name: "VolumeInUse (client) at DeleteVolume: the holder runs",
			setup: func(f *fakeEBS, v *fakeVolume) { f.attachNow(v, holder, "/dev/sdf") }, call: del, action: "DeleteVolume",
			kind: provider.InvalidRequest, scope: provider.ScopeOffer, inUse: true},
		{name: "VolumeInUse (client) at DeleteVolume: the holder is shutting down",
			setup: func(f *fakeEBS, v *fakeVolume) {
				f.attachNow(v, holder, "/dev/sdf")
				f.instances[holder].State = "shutting-down"
			}, call: del, action: "DeleteVolume", kind: provider.Transient, scope: provider.ScopeOffer, inUse: true},
		{name: "VolumeInUse (client) at DeleteVolume: the holder is gone",
			setup: func(f *fakeEBS, v *fakeVolume) { f.attachNow(v, "i-0gone0000000000003", "/dev/sdf") }, call: del, action: "DeleteVolume",
			kind: provider.Transient, scope: provider.ScopeOffer, inUse: true},
		{name: "InvalidVolume.NotFound (client) at DeleteVolume: gone is success",
			setup: func(f *fakeEBS, v *fakeVolume) { delete(f.volumes, v.ID) }, call: del, action: "DeleteVolume", ok: true},
		{name: "InvalidAttachment.NotFound (client) at DetachVolume: not attached is success",
			setup: func(f *fakeEBS, v *fakeVolume) { f.attachNow(v, holder, "/dev/sdf") },
			rule:  &ebsRule{Action: "DetachVolume", Code: "InvalidAttachment.NotFound"}, call: detach, action: "DetachVolume", ok: true},
		{name: "InvalidVolume.NotFound (client) at AttachVolume: the volume is gone",
			setup: func(f *fakeEBS, v *fakeVolume) { delete(f.volumes, v.ID) }, call: attach,
			kind: provider.InvalidRequest, scope: provider.ScopeOffer},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeEBS(t)
			defer f.clk.AutoAdvance()()
			p := f.provider(t)
			f.addVM(&fakeVM{ID: holder, Type: "g6.xlarge", Zone: "use1-az1", State: "running", Devices: []string{"/dev/sda1"}})
			f.addVM(&fakeVM{ID: user, Type: "g6.xlarge", Zone: "use1-az1", State: "running", Devices: []string{"/dev/sda1"}})
			v := f.addVolume("data", "use1-az1")
			if tc.setup != nil {
				tc.setup(f, v)
			}
			if tc.rule != nil {
				f.fail(tc.rule)
			}
			err := tc.call(p, v)
			if tc.action != "" {
				if n := len(f.requests(tc.action)); n != 1 {
					t.Errorf("%s sent %d times, want once", tc.action, n)
				}
			} else if n := len(f.requests("AttachVolume")); n != 0 {
				t.Errorf("AttachVolume sent %d times, want none", n)
			}
			if tc.ok {
				if err != nil {
					t.Fatalf("got %v, want success", err)
				}
				return
			}
			if err == nil || provider.KindOf(err) != tc.kind || provider.ScopeOf(err) != tc.scope || errors.Is(err, provider.ErrInUse) != tc.inUse {
				t.Fatalf("got %v (kind %s, scope %s, in use %t); want %s, %s, in use %t",
					err, provider.KindOf(err), provider.ScopeOf(err), errors.Is(err, provider.ErrInUse), tc.kind, tc.scope, tc.inUse)
			}
			if strings.Contains(err.Error(), "secret-test") {
				t.Fatalf("error text holds the secret key: %v", err)
			}
		})
	}
}
