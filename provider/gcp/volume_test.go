package gcp_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"cloud.google.com/go/compute/apiv1/computepb"
	"github.com/google/uuid"
	"github.com/jarcoal/httpmock"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/gcp"
)

// disks is the part of the fake Compute Engine API that holds zonal
// persistent disks: disks.insert (requestId replays answered with the first
// operation, 409 alreadyExists for a taken name), disks.get by name or
// numeric id (users: the instances that list the disk), disks.delete (400
// resourceInUseByAnotherResource while an instance lists it, "The disk
// resource '…' is already being used by '…'", the answer
// hashicorp/terraform-provider-google#2078 and hashicorp/terraform#23698
// record), instances.get by numeric id, instances.attachDisk (the same
// refusal for a disk an instance lists already) and instances.detachDisk.
// It answers the zone operations too, so that an attach can stay RUNNING
// until it is polled. Its state is guarded by the cloud's mutex; its
// requests are recorded with the cloud's.
type disks struct {
	c      *cloud
	zones  map[string]map[string]*computepb.Disk // zone → name → disk
	nextID uint64
	// requestIDs are the operations of the inserts by requestId.
	requestIDs map[string]*computepb.Operation
	// creatingReads makes a new disk read CREATING for its first reads, as a
	// disk whose insert the bounded wait gave up on; creating counts them down.
	creatingReads int
	creating      map[string]int
	// attachRunning answers attachDisk with a RUNNING operation whose attach
	// happens when it is first polled.
	attachRunning bool
	pending       map[string]func() // operation → what happens when it is polled
	// insertFaults make the next disk inserts end in these operation errors.
	insertFaults []opFault
	// attachFaults make the next attaches end in these operation errors;
	// racer, if set, is the instance another attach gave the disk to first.
	attachFaults []attachFault
}

type attachFault struct {
	opFault
	racer string
}

// newDisks serves the disks calls of c's transport mt.
func newDisks(c *cloud, mt *httpmock.MockTransport) *disks {
	d := &disks{c: c, zones: map[string]map[string]*computepb.Disk{}, nextID: 5000000000000000001,
		requestIDs: map[string]*computepb.Operation{}, creating: map[string]int{}, pending: map[string]func(){}}
	base := `^` + regexp.QuoteMeta(endpoint+"/compute/v1/projects/"+project+"/zones/") + `[a-z0-9-]+/`
	mt.RegisterRegexpResponder("GET", regexp.MustCompile(base+`(disks/[^/?]+|operations/[^/?]+|instances/[0-9]+)(\?.*)?$`), d.serve)
	mt.RegisterRegexpResponder("POST", regexp.MustCompile(base+`(disks|instances/[^/?]+/(attachDisk|detachDisk))(\?.*)?$`), d.serve)
	mt.RegisterRegexpResponder("DELETE", regexp.MustCompile(base+`disks/[^/?]+(\?.*)?$`), d.serve)
	return d
}

// volumeCloud is a mock with disks and an adapter on it.
func volumeCloud(t *testing.T) (*cloud, *disks, *gcp.Provider, *httpmock.MockTransport) {
	c, mt := newCloud(t)
	d := newDisks(c, mt)
	return c, d, c.provider(t, mt, gcp.Config{}), mt
}

func (d *disks) serve(req *http.Request) (*http.Response, error) {
	c := d.c
	c.mu.Lock()
	defer c.mu.Unlock()
	var body []byte
	if req.Body != nil {
		body, _ = io.ReadAll(req.Body)
	}
	c.requests = append(c.requests, request{Method: req.Method, Path: req.URL.Path, Query: req.URL.Query(), Body: body,
		Auth: req.Header.Get("Authorization")})
	p := strings.Split(strings.TrimPrefix(req.URL.Path, "/compute/v1/projects/"+project+"/"), "/")
	route := req.Method + " " + strings.Join(p, "/")
	for key, fs := range c.syncFaults {
		if len(fs) > 0 && strings.HasPrefix(route, key) {
			c.syncFaults[key] = fs[1:]
			return apiErr(fs[0].Status, fs[0].Reason, fs[0].Message), nil
		}
	}
	zone := p[1]
	switch {
	case p[2] == "operations":
		if effect, ok := d.pending[p[3]]; ok {
			delete(d.pending, p[3])
			effect()
		}
		return c.getOp(p[3]), nil
	case p[2] == "instances" && req.Method == "GET":
		if in := c.instanceByID(zone, p[3]); in != nil {
			return msg(in), nil
		}
		return apiErr(404, "notFound", fmt.Sprintf("The resource 'projects/%s/zones/%s/instances/%s' was not found", project, zone, p[3])), nil
	case p[2] == "instances" && p[4] == "attachDisk":
		return d.attach(zone, p[3], body), nil
	case p[2] == "instances":
		return d.detach(zone, p[3], req.URL.Query().Get("deviceName")), nil
	case req.Method == "POST":
		return d.insert(zone, req.URL.Query().Get("requestId"), body), nil
	case req.Method == "GET":
		dk := d.find(zone, p[3])
		if dk == nil {
			return apiErr(404, "notFound", fmt.Sprintf("The resource '%s' was not found", diskPath(zone, p[3]))), nil
		}
		return msg(d.read(zone, dk)), nil
	}
	dk := d.find(zone, p[3])
	if dk == nil {
		return apiErr(404, "notFound", fmt.Sprintf("The resource '%s' was not found", diskPath(zone, p[3]))), nil
	}
	if users := d.users(zone, dk.GetName()); len(users) > 0 {
		return inUseErr(zone, dk.GetName(), users[0]), nil
	}
	delete(d.zones[zone], dk.GetName())
	return msg(c.newOp(zone, "delete", dk.GetId(), nil)), nil
}

func diskPath(zone, name string) string {
	return "projects/" + project + "/zones/" + zone + "/disks/" + name
}

func instanceURL(zone, name string) string {
	return endpoint + "/compute/v1/projects/" + project + "/zones/" + zone + "/instances/" + name
}

func inUseErr(zone, disk, user string) *http.Response {
	return apiErr(400, "resourceInUseByAnotherResource", fmt.Sprintf("The disk resource '%s' is already being used by '%s'",
		diskPath(zone, disk), strings.TrimPrefix(user, endpoint+"/compute/v1/")))
}

// instanceByID returns the instance of zone whose id or name is key.
func (c *cloud) instanceByID(zone, key string) *computepb.Instance {
	for _, in := range c.instances[zone] {
		if strconv.FormatUint(in.GetId(), 10) == key || in.GetName() == key {
			return in
		}
	}
	return nil
}

// find returns the disk of zone whose name or numeric id is key.
func (d *disks) find(zone, key string) *computepb.Disk {
	if dk, ok := d.zones[zone][key]; ok {
		return dk
	}
	for _, dk := range d.zones[zone] {
		if strconv.FormatUint(dk.GetId(), 10) == key {
			return dk
		}
	}
	return nil
}

// users are the instances of zone that list the disk name.
func (d *disks) users(zone, name string) []string {
	var out []string
	for _, in := range d.c.instances[zone] {
		for _, ad := range in.GetDisks() {
			if strings.HasSuffix(ad.GetSource(), "/"+diskPath(zone, name)) {
				out = append(out, instanceURL(zone, in.GetName()))
			}
		}
	}
	return out
}

// read is what disks.get answers for dk.
func (d *disks) read(zone string, dk *computepb.Disk) *computepb.Disk {
	out := proto.Clone(dk).(*computepb.Disk)
	if n := d.creating[dk.GetName()]; n > 0 {
		d.creating[dk.GetName()] = n - 1
		out.Status = proto.String("CREATING")
	}
	out.Users = d.users(zone, dk.GetName())
	return out
}

func (d *disks) insert(zone, requestID string, body []byte) *http.Response {
	if op, ok := d.requestIDs[requestID]; ok && requestID != "" {
		return msg(op) // a replayed request: the same operation, nothing new
	}
	var dk computepb.Disk
	if err := protojson.Unmarshal(body, &dk); err != nil {
		return apiErr(400, "invalid", err.Error())
	}
	if len(d.insertFaults) > 0 {
		f := d.insertFaults[0]
		d.insertFaults = d.insertFaults[1:]
		op := d.c.newOp(zone, "insert", 0, &f)
		d.requestIDs[requestID] = op
		return msg(op)
	}
	if _, ok := d.zones[zone][dk.GetName()]; ok {
		return apiErr(409, "alreadyExists", fmt.Sprintf("The resource '%s' already exists", diskPath(zone, dk.GetName())))
	}
	d.put(zone, &dk)
	d.creating[dk.GetName()] = d.creatingReads
	op := d.c.newOp(zone, "insert", dk.GetId(), nil)
	d.requestIDs[requestID] = op
	return msg(op)
}

// put stores dk in zone as Compute Engine fills it in.
func (d *disks) put(zone string, dk *computepb.Disk) {
	dk.Kind = proto.String("compute#disk")
	dk.Id = proto.Uint64(d.nextID)
	d.nextID++
	dk.Zone = proto.String(endpoint + "/compute/v1/projects/" + project + "/zones/" + zone)
	dk.SelfLink = proto.String(endpoint + "/compute/v1/" + diskPath(zone, dk.GetName()))
	if t := dk.GetType(); t != "" && !strings.HasPrefix(t, "https://") {
		dk.Type = proto.String(endpoint + "/compute/v1/" + t)
	}
	dk.Status = proto.String("READY")
	dk.CreationTimestamp = proto.String("2026-03-01T12:00:00.000-07:00")
	dk.LabelFingerprint = proto.String("42WmSpB8rSM=")
	if d.zones[zone] == nil {
		d.zones[zone] = map[string]*computepb.Disk{}
	}
	d.zones[zone][dk.GetName()] = dk
}

func (d *disks) attach(zone, instance string, body []byte) *http.Response {
	in := d.c.instanceByID(zone, instance)
	if in == nil {
		return apiErr(404, "notFound", fmt.Sprintf("The resource 'projects/%s/zones/%s/instances/%s' was not found", project, zone, instance))
	}
	var ad computepb.AttachedDisk
	if err := protojson.Unmarshal(body, &ad); err != nil {
		return apiErr(400, "invalid", err.Error())
	}
	name := lastSegment(ad.GetSource())
	dk := d.find(zone, name)
	if dk == nil {
		return apiErr(404, "notFound", fmt.Sprintf("The resource '%s' was not found", diskPath(zone, name)))
	}
	attach := func(in *computepb.Instance) {
		in.Disks = append(in.Disks, &computepb.AttachedDisk{Kind: proto.String("compute#attachedDisk"),
			Type: proto.String("PERSISTENT"), Mode: proto.String(ad.GetMode()), Source: dk.SelfLink,
			DeviceName: proto.String(ad.GetDeviceName()), Index: proto.Int32(int32(len(in.Disks))),
			Boot: proto.Bool(false), AutoDelete: proto.Bool(ad.GetAutoDelete()), Interface: proto.String("SCSI")})
	}
	if len(d.attachFaults) > 0 {
		f := d.attachFaults[0]
		d.attachFaults = d.attachFaults[1:]
		if r := d.c.instanceByID(zone, f.racer); r != nil {
			attach(r)
		}
		return msg(d.c.newOp(zone, "attachDisk", in.GetId(), &f.opFault))
	}
	if users := d.users(zone, dk.GetName()); len(users) > 0 {
		return inUseErr(zone, dk.GetName(), users[0])
	}
	op := d.c.newOp(zone, "attachDisk", in.GetId(), nil)
	if !d.attachRunning {
		attach(in)
		return msg(op)
	}
	running := proto.Clone(op).(*computepb.Operation)
	running.Status = computepb.Operation_RUNNING.Enum()
	d.c.ops[op.GetName()] = running
	d.pending[op.GetName()] = func() {
		attach(in)
		running.Status = computepb.Operation_DONE.Enum()
	}
	return msg(running)
}

func (d *disks) detach(zone, instance, device string) *http.Response {
	in := d.c.instanceByID(zone, instance)
	if in == nil {
		return apiErr(404, "notFound", fmt.Sprintf("The resource 'projects/%s/zones/%s/instances/%s' was not found", project, zone, instance))
	}
	for i, ad := range in.GetDisks() {
		if ad.GetDeviceName() == device && !ad.GetBoot() {
			in.Disks = append(in.Disks[:i:i], in.Disks[i+1:]...)
			return msg(d.c.newOp(zone, "detachDisk", in.GetId(), nil))
		}
	}
	// The mock's own wording: the adapter detaches only what the
	// instance lists.
	return apiErr(400, "invalid", fmt.Sprintf("no disk attached as %q", device))
}

// disk returns a copy of the disk name in zone as disks.get reads it, or nil.
func (d *disks) disk(zone, name string) *computepb.Disk {
	d.c.mu.Lock()
	defer d.c.mu.Unlock()
	dk := d.find(zone, name)
	if dk == nil {
		return nil
	}
	out := proto.Clone(dk).(*computepb.Disk)
	out.Users = d.users(zone, name)
	return out
}

var (
	zoneA   = provider.Location{Region: "us-central1", Zone: "us-central1-a"}
	dataDev = "/dev/disk/by-id/google-gpuprov--data"
)

// runningInstance launches VM vm in zoneA and returns its instance id once
// it runs.
func runningInstance(t *testing.T, c *cloud, p *gcp.Provider, vm string) string {
	t.Helper()
	ctx := context.Background()
	o := offerIn(t, p, l4, zoneA.Zone, false)
	spec := newSpec(t, vm)
	prep, err := p.Prepare(ctx, &o, spec)
	if err != nil {
		t.Fatal(err)
	}
	id, err := p.Create(ctx, &o, prep, spec)
	if err != nil {
		t.Fatal(err)
	}
	c.settle()
	return id
}

func dataSpec(token string) provider.VolumeSpec {
	return provider.VolumeSpec{Name: "data", Installation: installation, SizeGB: 500, Location: zoneA,
		UserLabels: map[string]string{"team": "ml"}, IdempotencyToken: token}
}

// polledAfter reports whether a request whose "METHOD path" contains
// poll follows the first one that contains call.
func polledAfter(c *cloud, call, poll string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	seen := false
	for _, r := range c.requests {
		line := r.Method + " " + r.Path
		seen = seen || strings.Contains(line, call)
		if seen && strings.Contains(line, poll) {
			return true
		}
	}
	return false
}

// inUse asserts err matches provider.ErrInUse with kind want.
func inUse(t *testing.T, err error, want provider.ErrorKind) {
	t.Helper()
	if !errors.Is(err, provider.ErrInUse) || provider.KindOf(err) != want {
		t.Fatalf("err %v (kind %s), want %s matching ErrInUse", err, provider.KindOf(err), want)
	}
}

// What the core relies on, in the order it relies on it: a volume created
// and observed until available, attached to a running instance (the
// attach's operation waited for) at the by-id path of its device name,
// attached again to the same instance at the same path without a second
// attach, refused to another instance and refused deletion while attached
// (ErrInUse), detached, deleted, deleted again, and gone.
func TestVolumeLifecycle(t *testing.T) {
	c, d, p, _ := volumeCloud(t)
	ctx := context.Background()
	a := runningInstance(t, c, p, "train-1")
	b := runningInstance(t, c, p, "train-2")
	d.creatingReads, d.attachRunning = 1, true
	token := uuid.NewSHA1(uuid.NameSpaceOID, []byte("volume data")).String()

	v, err := p.CreateVolume(ctx, dataSpec(token))
	if err != nil {
		t.Fatal(err)
	}
	if v.ID == "" || v.Name != "data" || v.SizeGB != 500 || v.Location != zoneA || v.Status != provider.VolumeCreating || v.Created.IsZero() {
		t.Fatalf("created %+v, want data, 500 GB, in %s, creating", v, zoneA)
	}
	ins := c.calls("POST /compute/v1/projects/" + project + "/zones/us-central1-a/disks")
	if len(ins) != 1 || url.Values(ins[0].Query).Get("requestId") != token {
		t.Fatalf("disk inserts %v, want one with requestId %s", ins, token)
	}
	body := decoded(t, ins[0])
	labels := sub(body, "labels")
	if str(body, "name") != "gpuprov--data" || str(body, "sizeGb") != "500" ||
		str(body, "type") != "projects/"+project+"/zones/us-central1-a/diskTypes/pd-balanced" ||
		labels["gpuprov"] != "data" || labels["gpuprov-installation"] != installation || labels["gpuprov-volume"] != "true" || labels["team"] != "ml" {
		t.Fatalf("insert body %v", body)
	}
	seen, err := p.ObserveVolume(ctx, zoneA, "data")
	if err != nil || seen == nil || seen.ID != v.ID || seen.Status != provider.VolumeAvailable {
		t.Fatalf("observed %+v, %v; want volume %s available", seen, err, v.ID)
	}

	dev, err := p.AttachVolume(ctx, zoneA, v.ID, a)
	if err != nil || dev != dataDev {
		t.Fatalf("attach: %q, %v; want %s", dev, err, dataDev)
	}
	att := c.calls("/instances/gpuprov-train-1/attachDisk")
	if len(att) != 1 {
		t.Fatalf("%d attaches, want 1", len(att))
	}
	ad := decoded(t, att[0])
	if str(ad, "source") != "projects/"+project+"/zones/us-central1-a/disks/gpuprov--data" || str(ad, "deviceName") != "gpuprov--data" ||
		str(ad, "mode") != "READ_WRITE" || ad["autoDelete"] != false || ad["boot"] != false {
		t.Fatalf("attach body %v", ad)
	}
	// The attach answered RUNNING, and attaches when its operation is
	// polled: the device came back after a poll, from an instance that
	// lists the disk.
	if !polledAfter(c, "/attachDisk", "/zones/us-central1-a/operations/") || len(d.pending) > 0 {
		t.Fatal("the attach's operation was never polled")
	}
	if seen, _ := p.ObserveVolume(ctx, zoneA, "data"); seen == nil || seen.Status != provider.VolumeAttached || seen.AttachedTo != "gpuprov-train-1" {
		t.Fatalf("observed %+v, want attached to gpuprov-train-1", seen)
	}

	if dev, err := p.AttachVolume(ctx, zoneA, v.ID, a); err != nil || dev != dataDev {
		t.Fatalf("second attach: %q, %v; want %s", dev, err, dataDev)
	}
	if n := len(c.calls("/attachDisk")); n != 1 {
		t.Fatalf("%d attachDisk calls after attaching twice to the same instance, want 1", n)
	}
	_, err = p.AttachVolume(ctx, zoneA, v.ID, b)
	inUse(t, err, provider.InvalidRequest)
	if n := len(c.calls("/attachDisk")); n != 1 {
		t.Fatalf("%d attachDisk calls, want none for the second instance", n)
	}
	inUse(t, p.DeleteVolume(ctx, zoneA, v.ID), provider.InvalidRequest)
	if d.disk("us-central1-a", "gpuprov--data") == nil {
		t.Fatal("the attached disk was deleted")
	}

	if err := p.DetachVolume(ctx, zoneA, v.ID, a); err != nil {
		t.Fatal(err)
	}
	det := c.calls("/instances/gpuprov-train-1/detachDisk")
	if len(det) != 1 || url.Values(det[0].Query).Get("deviceName") != "gpuprov--data" {
		t.Fatalf("detaches %v, want one of device gpuprov--data", det)
	}
	if err := p.DetachVolume(ctx, zoneA, v.ID, a); err != nil {
		t.Fatalf("detach of a detached volume: %v", err)
	}
	if err := p.DetachVolume(ctx, zoneA, v.ID, b); err != nil {
		t.Fatalf("detach from an instance it never was attached to: %v", err)
	}
	if n := len(c.calls("/detachDisk")); n != 1 {
		t.Fatalf("%d detachDisk calls, want 1", n)
	}
	if seen, _ := p.ObserveVolume(ctx, zoneA, "data"); seen == nil || seen.Status != provider.VolumeAvailable || seen.AttachedTo != "" {
		t.Fatalf("observed %+v after the detach, want available", seen)
	}

	if err := p.DeleteVolume(ctx, zoneA, v.ID); err != nil {
		t.Fatal(err)
	}
	if err := p.DeleteVolume(ctx, zoneA, v.ID); err != nil {
		t.Fatalf("delete of a deleted volume: %v", err)
	}
	if n := len(c.calls("DELETE /compute/v1/projects/" + project + "/zones/us-central1-a/disks/")); n != 1 {
		t.Fatalf("%d disk deletes, want 1", n)
	}
	if seen, err := p.ObserveVolume(ctx, zoneA, "data"); seen != nil || err != nil {
		t.Fatalf("observed %+v, %v after the delete, want nil", seen, err)
	}
	if err := p.DetachVolume(ctx, zoneA, v.ID, a); err != nil {
		t.Fatalf("detach of a deleted volume: %v", err)
	}
}

// A create sent again (its answer lost) is the same request: one disk, the
// same volume. One sent with another token after the disk exists (the
// requestId forgotten) adopts it.
func TestVolumeCreateSentTwiceIsOneVolume(t *testing.T) {
	c, d, p, _ := volumeCloud(t)
	ctx := context.Background()
	token := uuid.NewSHA1(uuid.NameSpaceOID, []byte("volume data")).String()
	first, err := p.CreateVolume(ctx, dataSpec(token))
	if err != nil {
		t.Fatal(err)
	}
	again, err := p.CreateVolume(ctx, dataSpec(token))
	if err != nil {
		t.Fatal(err)
	}
	if again.ID != first.ID {
		t.Fatalf("second create returned %s, want %s", again.ID, first.ID)
	}
	ins := c.calls("/zones/us-central1-a/disks")
	var posts []request
	for _, r := range ins {
		if r.Method == "POST" {
			posts = append(posts, r)
		}
	}
	if len(posts) != 2 || url.Values(posts[0].Query).Get("requestId") != url.Values(posts[1].Query).Get("requestId") {
		t.Fatalf("inserts %v, want two with one requestId", posts)
	}
	later, err := p.CreateVolume(ctx, dataSpec(uuid.NewString()))
	if err != nil || later.ID != first.ID {
		t.Fatalf("create with another token: %+v, %v; want the volume %s adopted", later, err, first.ID)
	}
	d.c.mu.Lock()
	n := len(d.zones["us-central1-a"])
	d.c.mu.Unlock()
	if n != 1 {
		t.Fatalf("%d disks, want 1", n)
	}
	// A token that is no UUID still makes a valid requestId, the same each
	// time.
	spec := dataSpec("not-a-uuid")
	spec.Name = "scratch"
	for range 2 {
		if _, err := p.CreateVolume(ctx, spec); err != nil {
			t.Fatal(err)
		}
	}
	var ids []string
	for _, r := range c.calls("POST /compute/v1/projects/" + project + "/zones/us-central1-a/disks") {
		if strings.Contains(string(r.Body), "gpuprov--scratch") {
			ids = append(ids, url.Values(r.Query).Get("requestId"))
		}
	}
	if _, err := uuid.Parse(ids[0]); len(ids) != 2 || ids[0] != ids[1] || err != nil {
		t.Fatalf("requestIds %v, want one UUID twice", ids)
	}
}

// A disk of the volume's name that is not this installation's volume is
// never adopted, observed, attached or deleted.
func TestVolumeOfAnotherInstallationIsRefused(t *testing.T) {
	for _, tc := range []struct {
		name   string
		labels map[string]string
	}{
		{"another installation's volume", map[string]string{"gpuprov": "data", "gpuprov-installation": "ffffffffffffffff", "gpuprov-volume": "true"}},
		{"this installation's identity without gpuprov-volume", map[string]string{"gpuprov": "data", "gpuprov-installation": installation}},
		{"a disk gpuprov did not make", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, d, p, _ := volumeCloud(t)
			ctx := context.Background()
			c.mu.Lock()
			d.put("us-central1-a", &computepb.Disk{Name: proto.String("gpuprov--data"), SizeGb: proto.Int64(500), Labels: tc.labels})
			theirs := strconv.FormatUint(d.zones["us-central1-a"]["gpuprov--data"].GetId(), 10)
			c.mu.Unlock()
			a := runningInstance(t, c, p, "train-1")

			_, err := p.CreateVolume(ctx, dataSpec(uuid.NewString()))
			kindOf(t, err, provider.InvalidRequest)
			if seen, err := p.ObserveVolume(ctx, zoneA, "data"); seen != nil || err != nil {
				t.Fatalf("observed %+v, %v; want nil", seen, err)
			}
			_, err = p.AttachVolume(ctx, zoneA, theirs, a)
			kindOf(t, err, provider.InvalidRequest)
			kindOf(t, p.DeleteVolume(ctx, zoneA, theirs), provider.InvalidRequest)
			kindOf(t, p.DetachVolume(ctx, zoneA, theirs, a), provider.InvalidRequest)
			if d.disk("us-central1-a", "gpuprov--data") == nil || len(c.calls("/attachDisk")) > 0 {
				t.Fatal("the disk was touched")
			}
		})
	}
}

// A VM and a volume of one name share a zone: the VM's boot disk takes
// the instance's name, gpuprov-data, and carries the VM's identity labels;
// the volume is gpuprov--data. The volume is made beside the boot disk,
// observed as itself, attached to that very VM, detached and deleted; no
// request names the boot disk, which is still there, attached, at the end.
// Its id given as a volume's is refused, and it is never adopted.
func TestVolumeBesideTheBootDiskOfItsNamesake(t *testing.T) {
	c, d, p, _ := volumeCloud(t)
	ctx := context.Background()
	vm := runningInstance(t, c, p, "data")
	c.mu.Lock()
	boot := &computepb.Disk{Name: proto.String("gpuprov-data"), SizeGb: proto.Int64(100),
		Labels: map[string]string{"gpuprov": "data", "gpuprov-installation": installation, "team": "ml"}}
	d.put("us-central1-a", boot)
	bootID := strconv.FormatUint(boot.GetId(), 10)
	in := c.instanceByID("us-central1-a", "gpuprov-data")
	if in == nil || len(in.GetDisks()) != 1 {
		c.mu.Unlock()
		t.Fatalf("instance gpuprov-data: %v", in)
	}
	in.Disks[0].Source, in.Disks[0].DeviceName = boot.SelfLink, proto.String("persistent-disk-0")
	c.requests = nil
	c.mu.Unlock()

	if seen, err := p.ObserveVolume(ctx, zoneA, "data"); seen != nil || err != nil {
		t.Fatalf("observed %+v, %v before the volume exists; want nil", seen, err)
	}
	v, err := p.CreateVolume(ctx, dataSpec(uuid.NewString()))
	if err != nil {
		t.Fatalf("create beside the boot disk: %v", err)
	}
	if v.ID == bootID || v.Name != "data" || v.SizeGB != 500 {
		t.Fatalf("created %+v; want a volume of its own, not the boot disk %s", v, bootID)
	}
	if seen, err := p.ObserveVolume(ctx, zoneA, "data"); err != nil || seen == nil || seen.ID != v.ID {
		t.Fatalf("observed %+v, %v; want volume %s", seen, err, v.ID)
	}
	if _, err := p.CreateVolume(ctx, dataSpec(uuid.NewString())); err != nil {
		t.Fatalf("create sent again with another token (adopt): %v", err)
	}
	dev, err := p.AttachVolume(ctx, zoneA, v.ID, vm)
	if err != nil || dev != dataDev {
		t.Fatalf("attach to VM data: %q, %v; want %s", dev, err, dataDev)
	}
	if err := p.DetachVolume(ctx, zoneA, v.ID, vm); err != nil {
		t.Fatal(err)
	}
	if det := c.calls("/detachDisk"); len(det) != 1 || url.Values(det[0].Query).Get("deviceName") != "gpuprov--data" {
		t.Fatalf("detaches %v, want one of device gpuprov--data", det)
	}
	_, err = p.AttachVolume(ctx, zoneA, bootID, vm)
	kindOf(t, err, provider.InvalidRequest)
	kindOf(t, p.DeleteVolume(ctx, zoneA, bootID), provider.InvalidRequest)
	if err := p.DeleteVolume(ctx, zoneA, v.ID); err != nil {
		t.Fatal(err)
	}
	if seen, err := p.ObserveVolume(ctx, zoneA, "data"); seen != nil || err != nil {
		t.Fatalf("observed %+v, %v after the delete; want nil", seen, err)
	}

	for _, r := range c.calls("/disks/") {
		if strings.HasSuffix(r.Path, "/disks/gpuprov-data") || strings.HasSuffix(r.Path, "/disks/"+bootID) && r.Method != "GET" {
			t.Errorf("%s %s: the boot disk was touched", r.Method, r.Path)
		}
	}
	for _, r := range c.calls("/attachDisk") {
		if strings.Contains(string(r.Body), "disks/gpuprov-data\"") {
			t.Errorf("the boot disk was attached: %s", r.Body)
		}
	}
	if got := d.disk("us-central1-a", "gpuprov-data"); got == nil || len(got.GetUsers()) != 1 || d.disk("us-central1-a", "gpuprov--data") != nil {
		t.Fatalf("the boot disk is %v; want it kept and attached, the volume gone", got)
	}
}

// The disk name gpuprov--<name> is held to Compute Engine's 63
// characters: a name of 54 makes a disk, one of 55 is refused before any
// call (TestVolumeBadInputSendsNothing).
func TestVolumeLongestName(t *testing.T) {
	_, d, p, _ := volumeCloud(t)
	spec := dataSpec(uuid.NewString())
	spec.Name = strings.Repeat("d", 54)
	v, err := p.CreateVolume(context.Background(), spec)
	if err != nil || v.Name != spec.Name {
		t.Fatalf("create of a 54-character name: %+v, %v", v, err)
	}
	if name := provider.VolumeResourceName(spec.Name); len(name) != 63 || d.disk("us-central1-a", name) == nil {
		t.Fatalf("no disk %s (%d characters)", name, len(name))
	}
}

// Sizes outside persistent disks' limits, names that make no disk name and
// locations without a zone are refused before any request.
func TestVolumeBadInputSendsNothing(t *testing.T) {
	c, _, p, _ := volumeCloud(t)
	ctx := context.Background()
	if got := p.VolumeLimits(); got != (provider.VolumeLimits{Scope: provider.VolumeZonal, MinGB: 10, MaxGB: 65536}) {
		t.Fatalf("limits %+v", got)
	}
	region := provider.Location{Region: "us-central1"}
	for _, tc := range []struct {
		name string
		edit func(*provider.VolumeSpec)
	}{
		{"9 GB", func(s *provider.VolumeSpec) { s.SizeGB = 9 }},
		{"no size", func(s *provider.VolumeSpec) { s.SizeGB = 0 }},
		{"65537 GB", func(s *provider.VolumeSpec) { s.SizeGB = 65537 }},
		{"no zone", func(s *provider.VolumeSpec) { s.Location = region }},
		{"a region for a zone", func(s *provider.VolumeSpec) { s.Location = provider.Location{Zone: "us-central1"} }},
		{"no name", func(s *provider.VolumeSpec) { s.Name = "" }},
		{"a name no disk can have", func(s *provider.VolumeSpec) { s.Name = "Data_1" }},
		{"a name too long", func(s *provider.VolumeSpec) { s.Name = strings.Repeat("d", 55) }}, // gpuprov--ddd…: 64 characters
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := dataSpec(uuid.NewString())
			tc.edit(&spec)
			_, err := p.CreateVolume(ctx, spec)
			kindOf(t, err, provider.InvalidRequest)
		})
	}
	_, err := p.ObserveVolume(ctx, region, "data")
	kindOf(t, err, provider.InvalidRequest)
	_, err = p.AttachVolume(ctx, region, "5000000000000000001", "7000000000000000001")
	kindOf(t, err, provider.InvalidRequest)
	kindOf(t, p.DetachVolume(ctx, region, "5000000000000000001", "7000000000000000001"), provider.InvalidRequest)
	kindOf(t, p.DeleteVolume(ctx, region, "5000000000000000001"), provider.InvalidRequest)
	kindOf(t, p.DeleteVolume(ctx, zoneA, "../disks/x"), provider.InvalidRequest)
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.requests) != 0 {
		t.Fatalf("%d requests sent, want none: %v", len(c.requests), c.requests[0])
	}
}

// Compute Engine's volume errors become the kinds the core acts on: a zone
// out of disk capacity (ZONE_RESOURCE_POOL_EXHAUSTED, as disk creates get
// it: kubernetes-sigs/gcp-compute-persistent-disk-csi-driver#1837 for
// pd-balanced, "(resource type:pd-standard)" in cirruslabs/cirrus-ci-docs#131)
// is Capacity blocking the zone, a disk quota (SSD_TOTAL_GB counts
// pd-balanced and pd-ssd, DISKS_TOTAL_GB pd-standard) Quota blocking the
// region, rate limits Transient, a missing permission Credentials; none
// leaves a disk.
func TestVolumeCreateErrorKinds(t *testing.T) {
	stockout := "The zone 'projects/" + project + "/zones/us-central1-a' does not have enough resources available to fulfill the request.  '(resource type:pd-ssd)'."
	for _, tc := range []struct {
		name  string
		op    *opFault
		sync  *apiFault
		kind  provider.ErrorKind
		scope provider.Scope
	}{
		{name: "stockout", op: &opFault{Code: "ZONE_RESOURCE_POOL_EXHAUSTED", Message: stockout, HTTP: 503},
			kind: provider.Capacity, scope: provider.ScopeZone},
		{name: "stockout with details", op: &opFault{Code: "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS", Message: stockout, HTTP: 503},
			kind: provider.Capacity, scope: provider.ScopeZone},
		{name: "SSD_TOTAL_GB", op: &opFault{Code: "QUOTA_EXCEEDED", Message: "Quota 'SSD_TOTAL_GB' exceeded.  Limit: 500.0 in region us-central1.",
			QuotaMetric: "SSD_TOTAL_GB", HTTP: 403}, kind: provider.Quota, scope: provider.ScopeRegion},
		{name: "DISKS_TOTAL_GB", op: &opFault{Code: "QUOTA_EXCEEDED", Message: "Quota 'DISKS_TOTAL_GB' exceeded.  Limit: 4096.0 in region us-central1.",
			QuotaMetric: "DISKS_TOTAL_GB", HTTP: 403}, kind: provider.Quota, scope: provider.ScopeRegion},
		{name: "quota refused at once", sync: &apiFault{403, "quotaExceeded", "Quota 'SSD_TOTAL_GB' exceeded.  Limit: 500.0 in region us-central1."},
			kind: provider.Quota, scope: provider.ScopeRegion},
		{name: "rate limit", sync: &apiFault{429, "rateLimitExceeded", "Rate Limit Exceeded"}, kind: provider.Transient},
		{name: "permission", sync: &apiFault{403, "forbidden", "Required 'compute.disks.create' permission for '" + diskPath("us-central1-a", "gpuprov--data") + "'"},
			kind: provider.Credentials, scope: provider.ScopeProvider},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, d, p, _ := volumeCloud(t)
			if tc.op != nil {
				d.insertFaults = []opFault{*tc.op}
			} else {
				c.syncFaults["POST zones/us-central1-a/disks"] = []apiFault{*tc.sync}
			}
			_, err := p.CreateVolume(context.Background(), dataSpec(uuid.NewString()))
			pe := kindOf(t, err, tc.kind)
			if tc.scope != provider.ScopeDefault && pe.Scope() != tc.scope {
				t.Fatalf("blocks %v, want %v (%v)", pe.Scope(), tc.scope, err)
			}
			if d.disk("us-central1-a", "gpuprov--data") != nil {
				t.Fatal("a disk was made")
			}
		})
	}
}

// A volume in use is ErrInUse however Compute Engine says so: the disk's
// users before the call, a delete refused with
// resourceInUseByAnotherResource, an attach whose operation ends in
// RESOURCE_IN_USE_BY_ANOTHER_RESOURCE because another attach won. It is
// InvalidRequest while the holder runs, Transient when it is being deleted
// (or the disk is free again), and the delete succeeds once the holder is
// gone.
func TestVolumeInUse(t *testing.T) {
	c, d, p, _ := volumeCloud(t)
	ctx := context.Background()
	a := runningInstance(t, c, p, "train-1")
	b := runningInstance(t, c, p, "train-2")
	v, err := p.CreateVolume(ctx, dataSpec(uuid.NewString()))
	if err != nil {
		t.Fatal(err)
	}

	// Another attach to train-2 lands between the read and the attach.
	d.attachFaults = []attachFault{{racer: "gpuprov-train-2", opFault: opFault{Code: "RESOURCE_IN_USE_BY_ANOTHER_RESOURCE",
		Message: "The disk resource '" + diskPath("us-central1-a", "gpuprov--data") + "' is already being used by 'projects/" + project +
			"/zones/us-central1-a/instances/gpuprov-train-2'", HTTP: 400}}}
	_, err = p.AttachVolume(ctx, zoneA, v.ID, a)
	inUse(t, err, provider.InvalidRequest)
	if !strings.Contains(err.Error(), "gpuprov-train-2") {
		t.Fatalf("error %v does not name the holder", err)
	}
	// The holder is the one asking: the attach is done.
	if dev, err := p.AttachVolume(ctx, zoneA, v.ID, b); err != nil || dev != dataDev {
		t.Fatalf("attach to the holder: %q, %v", dev, err)
	}

	// The holder is being deleted: its end frees the disk.
	if err := p.Delete(ctx, zoneA, "train-2", []string{b}); err != nil {
		t.Fatal(err)
	}
	inUse(t, p.DeleteVolume(ctx, zoneA, v.ID), provider.Transient)
	_, err = p.AttachVolume(ctx, zoneA, v.ID, a)
	inUse(t, err, provider.Transient)
	c.settle()

	// Refused by the API although the disk read free: Transient, the disk
	// holds no one now.
	c.syncFaults["DELETE zones/us-central1-a/disks/gpuprov--data"] = []apiFault{{400, "resourceInUseByAnotherResource",
		"The disk resource '" + diskPath("us-central1-a", "gpuprov--data") + "' is already being used by 'projects/" + project +
			"/zones/us-central1-a/instances/gpuprov-train-9'"}}
	inUse(t, p.DeleteVolume(ctx, zoneA, v.ID), provider.Transient)
	if err := p.DeleteVolume(ctx, zoneA, v.ID); err != nil {
		t.Fatal(err)
	}
	if d.disk("us-central1-a", "gpuprov--data") != nil {
		t.Fatal("the disk is still there")
	}
}

// The disks, attach and detach requests the volumes send keep the
// discovery document: their methods, path parameters (a numeric id where
// a name may be given), query parameters and bodies; the disk's labels keep
// the label rules; and the mock's disks.get answers have the Disk schema's
// shape, so what the adapter reads from them is what Compute Engine sends.
func TestVolumeRequestsMatchDiscovery(t *testing.T) {
	doc := loadDiscovery(t)
	c, d, p, _ := volumeCloud(t)
	ctx := context.Background()
	a := runningInstance(t, c, p, "train-1")
	c.mu.Lock()
	c.requests = nil
	c.mu.Unlock()
	spec := dataSpec(uuid.NewString())
	spec.UserLabels = map[string]string{"team": "ml", "cost-center": "r-and-d"}
	v, err := p.CreateVolume(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.ObserveVolume(ctx, zoneA, "data"); err != nil {
		t.Fatal(err)
	}
	if _, err := p.AttachVolume(ctx, zoneA, v.ID, a); err != nil {
		t.Fatal(err)
	}
	attached := d.disk("us-central1-a", "gpuprov--data")
	if err := p.DetachVolume(ctx, zoneA, v.ID, a); err != nil {
		t.Fatal(err)
	}
	free := d.disk("us-central1-a", "gpuprov--data")
	if err := p.DeleteVolume(ctx, zoneA, v.ID); err != nil {
		t.Fatal(err)
	}

	c.mu.Lock()
	sent := append([]request(nil), c.requests...)
	c.mu.Unlock()
	methods := map[string]int{}
	for _, r := range sent {
		m, vs := checkCall(doc, r)
		if m == nil {
			continue // operation polls: zoneOperations.get is not checked
		}
		methods[m.ID]++
		if len(vs) > 0 {
			t.Errorf("%s %s breaks the discovery document (revision %s):\n%s", r.Method, r.Path, doc.Revision, joinViolations(vs))
		}
		if m.ID == "compute.disks.insert" {
			if vs := checkLabels("resource.labels", decoded(t, r)["labels"]); len(vs) > 0 {
				t.Errorf("disk labels:\n%s", joinViolations(vs))
			}
		}
	}
	for _, want := range []string{"compute.disks.insert", "compute.disks.get", "compute.disks.delete", "compute.instances.get",
		"compute.instances.attachDisk", "compute.instances.detachDisk"} {
		if methods[want] == 0 {
			t.Errorf("no %s request was checked (checked %v)", want, methods)
		}
	}
	for _, dk := range []*computepb.Disk{attached, free} {
		b, err := protojson.Marshal(dk)
		if err != nil {
			t.Fatal(err)
		}
		if vs := doc.checkResponse(doc.method(t, "disks", "get"), b); len(vs) > 0 {
			t.Errorf("disks.get answer:\n%s", joinViolations(vs))
		}
	}
	if len(attached.GetUsers()) != 1 {
		t.Fatalf("attached disk users %v", attached.GetUsers())
	}
}

// The check is not a rubber stamp: a broken variant of each call is
// rejected, naming what breaks.
func TestVolumeCheckRejectsBrokenCalls(t *testing.T) {
	doc := loadDiscovery(t)
	disksURL := "/compute/v1/projects/" + project + "/zones/us-central1-a/disks"
	for _, tc := range []struct {
		name string
		r    request
		want string
	}{
		{"size as a number", request{Method: "POST", Path: disksURL, Body: []byte(`{"name":"gpuprov--data","sizeGb":500}`)}, "resource.sizeGb"},
		{"a field Disk lacks", request{Method: "POST", Path: disksURL, Body: []byte(`{"name":"gpuprov--data","sizeGB":"500"}`)}, "resource.sizeGB"},
		{"a name no disk has", request{Method: "POST", Path: disksURL, Body: []byte(`{"name":"Data_1","sizeGb":"500"}`)}, "resource.name"},
		{"no name", request{Method: "POST", Path: disksURL, Body: []byte(`{"sizeGb":"500"}`)}, "resource.name"},
		{"a zero requestId", request{Method: "POST", Path: disksURL, Query: url.Values{"requestId": {uuid.Nil.String()}},
			Body: []byte(`{"name":"gpuprov--data","sizeGb":"500"}`)}, "?requestId"},
		{"an output-only field", request{Method: "POST", Path: disksURL, Body: []byte(`{"name":"gpuprov--data","users":["x"]}`)}, "resource.users"},
		{"an attach mode Compute Engine lacks", request{Method: "POST", Path: "/compute/v1/projects/" + project + "/zones/us-central1-a/instances/gpuprov-a/attachDisk",
			Body: []byte(`{"source":"projects/p/zones/z/disks/d","mode":"RW"}`)}, "resource.mode"},
		{"a detach without a device name", request{Method: "POST", Path: "/compute/v1/projects/" + project + "/zones/us-central1-a/instances/gpuprov-a/detachDisk"}, "?deviceName"},
		{"a disk path that is no name or id", request{Method: "GET", Path: disksURL + "/-1"}, "{disk}"},
		{"an unknown query parameter", request{Method: "DELETE", Path: disksURL + "/gpuprov--data", Query: url.Values{"force": {"true"}}}, "?force"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, vs := checkCall(doc, tc.r)
			if m == nil {
				t.Fatal("no method matched")
			}
			for _, v := range vs {
				if v.Path == tc.want {
					return
				}
			}
			t.Fatalf("violations %v, want one at %s", vs, tc.want)
		})
	}
}

// checkCall finds the discovery method of r (by HTTP method and flat path)
// and checks it: path parameters against their patterns, query parameters,
// required query parameters, and the body against the request schema. It
// returns a nil method for a call outside the document.
func checkCall(doc *discoveryDoc, r request) (*discoveryMethod, []violation) {
	path := strings.TrimPrefix(r.Path, "/compute/v1/")
	m, params := matchMethod(doc, r.Method, path)
	if m == nil {
		return nil, nil
	}
	var out []violation
	for name, val := range params {
		p := m.Parameters[name]
		if p == nil || p.Location != "path" {
			out = append(out, violation{"{" + name + "}", "not a path parameter of " + m.ID})
			continue
		}
		if p.Pattern != "" && !regexp.MustCompile(`^(?:`+p.Pattern+`)$`).MatchString(val) {
			out = append(out, violation{"{" + name + "}", fmt.Sprintf("%q does not match %s", val, p.Pattern)})
		}
	}
	query := url.Values(r.Query)
	for name, p := range m.Parameters {
		if p.Location == "query" && p.Required && !query.Has(name) {
			out = append(out, violation{"?" + name, "required by " + m.ID})
		}
	}
	if m.Request != nil {
		return m, append(out, doc.checkRequest(m, query, r.Body)...)
	}
	for name, vals := range query {
		p := m.Parameters[name]
		if p == nil {
			p = doc.Parameters[name]
		}
		if p == nil || p.Location != "query" {
			out = append(out, violation{"?" + name, "not a query parameter of " + m.ID})
			continue
		}
		for _, v := range vals {
			out = append(out, doc.walk(m.ID, v, p, "?"+name)...)
		}
	}
	if len(r.Body) > 0 {
		out = append(out, violation{"resource", m.ID + " takes no body"})
	}
	return m, out
}

// matchMethod returns the method whose flat path matches path, and the
// path's parameters.
func matchMethod(doc *discoveryDoc, method, path string) (*discoveryMethod, map[string]string) {
	segs := strings.Split(path, "/")
	for _, res := range doc.Resources {
	next:
		for _, m := range res.Methods {
			tmpl := strings.Split(m.FlatPath, "/")
			if m.HTTPMethod != method || len(tmpl) != len(segs) {
				continue
			}
			params := map[string]string{}
			for i, s := range tmpl {
				switch {
				case strings.HasPrefix(s, "{") && strings.HasSuffix(s, "}"):
					params[s[1:len(s)-1]] = segs[i]
				case s != segs[i]:
					continue next
				}
			}
			return m, params
		}
	}
	return nil, nil
}
