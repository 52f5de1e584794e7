package gcp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/gcp"
)

func prepareAndOffer(t *testing.T, p *gcp.Provider, spec *provider.InstanceSpec, zone string) (provider.Offer, []byte) {
	t.Helper()
	o := offerIn(t, p, l4, zone, false)
	prep, err := p.Prepare(context.Background(), &o, spec)
	if err != nil {
		t.Fatal(err)
	}
	return o, prep
}

// An insert whose operation ends in ZONE_RESOURCE_POOL_EXHAUSTED returns no
// error itself; the code is read from the operation after Wait, and is
// Capacity blocking the offer ("Troubleshooting resource availability
// errors": the zone lacks the resources of this request; SkyPilot's GCP
// handler blocks the request's resources in the zone). QUOTA_EXCEEDED is
// Quota blocking what its metric counts: the GPU model's offers in the
// region (NVIDIA_L4_GPUS), or the whole project for GPUS_ALL_REGIONS.
func TestCreateOperationErrors(t *testing.T) {
	for _, tc := range []struct {
		fault opFault
		kind  provider.ErrorKind
		scope provider.Scope
	}{
		{opFault{Code: "ZONE_RESOURCE_POOL_EXHAUSTED", Message: "The zone 'projects/p/zones/us-central1-a' does not have enough resources", HTTP: 503},
			provider.Capacity, provider.ScopeOffer},
		{opFault{Code: "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS", Message: "A g2-standard-8 VM instance is currently unavailable", HTTP: 503},
			provider.Capacity, provider.ScopeOffer},
		{opFault{Code: "QUOTA_EXCEEDED", Message: "Quota 'NVIDIA_L4_GPUS' exceeded. Limit: 0.0 in region us-central1.", QuotaMetric: "compute.googleapis.com/nvidia_l4_gpus", HTTP: 403},
			provider.Quota, provider.ScopeFamily},
		{opFault{Code: "QUOTA_EXCEEDED", Message: "Quota 'GPUS_ALL_REGIONS' exceeded. Limit: 0.0 globally.", QuotaMetric: "compute.googleapis.com/gpus_all_regions", HTTP: 403},
			provider.Quota, provider.ScopeProvider},
		{opFault{Code: "RESOURCE_OPERATION_RATE_EXCEEDED", HTTP: 503}, provider.Transient, provider.ScopeOffer},
		{opFault{Code: "UNSUPPORTED_OPERATION", HTTP: 400}, provider.Capacity, provider.ScopeOffer},
		{opFault{Code: "SOMETHING_NEW", HTTP: 500}, provider.Failed, provider.ScopeOffer},
	} {
		t.Run(tc.fault.Code, func(t *testing.T) {
			c, mt := newCloud(t)
			p := c.provider(t, mt, gcp.Config{})
			spec := newSpec(t, "cap")
			o, prep := prepareAndOffer(t, p, spec, "us-central1-a")
			c.insertFaults["us-central1-a"] = []opFault{tc.fault}
			id, err := p.Create(context.Background(), &o, prep, spec)
			pe := kindOf(t, err, tc.kind)
			if pe.Scope() != tc.scope || id != "" {
				t.Fatalf("scope %s (want %s), id %q", pe.Scope(), tc.scope, id)
			}
			if !gcp.IsCode(err, tc.fault.Code) {
				t.Fatalf("%v does not wrap the operation's code", err)
			}
			if len(c.calls("POST /compute/v1/projects/"+project+"/zones/us-central1-a/instances")) != 1 || len(c.live()) != 0 {
				t.Fatal("want one insert and no instance")
			}
		})
	}
}

// Synchronous insert errors map by reason and status, one attempt each.
func TestCreateSyncErrors(t *testing.T) {
	for _, tc := range []struct {
		fault apiFault
		kind  provider.ErrorKind
	}{
		{apiFault{429, "rateLimitExceeded", "Rate Limit Exceeded"}, provider.Transient},
		{apiFault{403, "rateLimitExceeded", "Rate Limit Exceeded"}, provider.Transient},
		{apiFault{503, "backendError", "Backend Error"}, provider.Transient},
		{apiFault{403, "quotaExceeded", "Quota 'GPUS_ALL_REGIONS' exceeded. Limit: 1.0 globally."}, provider.Quota},
		{apiFault{403, "forbidden", "Required 'compute.instances.create' permission"}, provider.Credentials},
		{apiFault{401, "authError", "Invalid Credentials"}, provider.Credentials},
		{apiFault{400, "invalid", "Invalid value for field 'resource.machineType': 'g2 standard'. Must be a match of regex '[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?'"}, provider.InvalidRequest},
		{apiFault{401, "required", "Request is missing required authentication credential."}, provider.Credentials},
		{apiFault{404, "notFound", "The resource 'projects/p/zones/us-central1-a/machineTypes/g2-standard-8' was not found"}, provider.Unavailable},
		{apiFault{404, "notFound", "The resource 'projects/p/regions/us-central1/subnetworks/gpu' was not found"}, provider.Failed},
		{apiFault{404, "notFound", "The resource 'projects/p/global/images/x' was not found"}, provider.InvalidRequest},
		{apiFault{418, "teapot", "?"}, provider.Failed},
	} {
		t.Run(fmt.Sprintf("%d_%s", tc.fault.Status, tc.fault.Reason), func(t *testing.T) {
			c, mt := newCloud(t)
			p := c.provider(t, mt, gcp.Config{})
			spec := newSpec(t, "sync")
			o, prep := prepareAndOffer(t, p, spec, "us-central1-a")
			c.syncFaults["POST zones/us-central1-a/instances"] = []apiFault{tc.fault}
			_, err := p.Create(context.Background(), &o, prep, spec)
			kindOf(t, err, tc.kind)
			if n := len(c.calls("POST /compute/v1/projects/" + project + "/zones/us-central1-a/instances")); n != 1 {
				t.Fatalf("%d inserts: the client retried", n)
			}
		})
	}
}

// A machine type or accelerator type the zone does not offer is refused
// before any operation with HTTP 400, reason invalid, "Invalid value for
// field 'resource.machineType': '…'. Machine type with name '…' does not
// exist in zone '…'." (troubleshooting-vm-creation; gcloud compute instances
// create matches the text). It is Unavailable blocking the offer (that
// type in that zone), so the launch moves on, not InvalidRequest aborting
// it.
func TestCreateTypeNotOfferedInZone(t *testing.T) {
	for _, tc := range []struct {
		name  string
		req   provider.ResourceRequest
		unoff string
		field string
	}{
		{"machine type", l4, "", "resource.machineType"}, // the offer's own
		{"accelerator type", provider.ResourceRequest{GPU: "T4", GPUCount: 1}, "nvidia-tesla-t4", "resource.guestAccelerators[0].acceleratorType"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, mt := newCloud(t)
			p := c.provider(t, mt, gcp.Config{})
			spec := newSpec(t, "zonal")
			o := offerIn(t, p, tc.req, "us-central1-a", false)
			prep, err := p.Prepare(context.Background(), &o, spec)
			if err != nil {
				t.Fatal(err)
			}
			if tc.unoff == "" {
				tc.unoff = o.InstanceType
			}
			c.notOffered["us-central1-a/"+tc.unoff] = true
			_, err = p.Create(context.Background(), &o, prep, spec)
			pe := kindOf(t, err, provider.Unavailable)
			if pe.Scope() != provider.ScopeOffer || !strings.Contains(err.Error(), "Invalid value for field '"+tc.field+"'") ||
				!strings.Contains(err.Error(), "does not exist in zone 'us-central1-a'") {
				t.Fatalf("scope %s, error %v", pe.Scope(), err)
			}
			if n := len(c.calls("/zones/us-central1-a/operations/")); n != 0 || len(c.live()) != 0 {
				t.Fatalf("%d operation polls, %d instances: nothing should have started", n, len(c.live()))
			}
		})
	}
}

// An operation ending in RESOURCE_NOT_FOUND is not a stockout: a missing
// subnetwork blocks its region as Failed, a missing network aborts as
// InvalidRequest, instead of failing over as Capacity forever.
func TestCreateResourceNotFound(t *testing.T) {
	for _, tc := range []struct {
		msg   string
		kind  provider.ErrorKind
		scope provider.Scope
	}{
		{"The resource 'projects/proj-test/regions/us-central1/subnetworks/gpu' was not found", provider.Failed, provider.ScopeRegion},
		{"The resource 'projects/proj-test/global/networks/gpu-net' was not found", provider.InvalidRequest, provider.ScopeOffer},
		{"The resource 'projects/proj-test/zones/us-central1-a/instances/gpuprov-rnf' was not found", provider.Failed, provider.ScopeOffer},
	} {
		t.Run(tc.msg[strings.LastIndexByte(tc.msg[:strings.LastIndexByte(tc.msg, '/')], '/')+1:], func(t *testing.T) {
			c, mt := newCloud(t)
			p := c.provider(t, mt, gcp.Config{})
			spec := newSpec(t, "rnf")
			o, prep := prepareAndOffer(t, p, spec, "us-central1-a")
			c.insertFaults["us-central1-a"] = []opFault{{Code: "RESOURCE_NOT_FOUND", Message: tc.msg, HTTP: 404}}
			_, err := p.Create(context.Background(), &o, prep, spec)
			if pe := kindOf(t, err, tc.kind); pe.Scope() != tc.scope || !gcp.IsCode(err, "RESOURCE_NOT_FOUND") {
				t.Fatalf("scope %s (want %s): %v", pe.Scope(), tc.scope, err)
			}
		})
	}
}

// A name taken in the zone (409 alreadyExists) is adopted when it carries
// this VM's labels, and Unavailable when it does not.
func TestCreateAdoptsOnAlreadyExists(t *testing.T) {
	c, mt := newCloud(t)
	p := c.provider(t, mt, gcp.Config{})
	ctx := context.Background()
	spec := newSpec(t, "dup")
	o, prep := prepareAndOffer(t, p, spec, "us-central1-a")
	id, err := p.Create(ctx, &o, prep, spec)
	if err != nil {
		t.Fatal(err)
	}
	spec2 := *spec
	spec2.Attempt, spec2.IdempotencyToken = 2, "another-token"
	id2, err := p.Create(ctx, &o, prep, &spec2)
	if err != nil || id2 != id || len(c.live()) != 1 {
		t.Fatalf("adopt: %q vs %q, %v, %d instances", id2, id, err, len(c.live()))
	}
	other := c.provider(t, mt, gcp.Config{}, gcp.WithInstallation("ffffffffffffffff"))
	spec3 := *spec
	spec3.Installation, spec3.IdempotencyToken = "ffffffffffffffff", "third"
	_, err = other.Create(ctx, &o, prep, &spec3)
	kindOf(t, err, provider.Unavailable)
}

// The instance is observed by both labels: missing right after Create
// while the listing lags, then Pending, then Running with the SSH
// endpoint; deleted, it is Stopping, then gone.
func TestObserveLifecycle(t *testing.T) {
	c, mt := newCloud(t)
	p := c.provider(t, mt, gcp.Config{})
	ctx := context.Background()
	spec := newSpec(t, "life")
	o, prep := prepareAndOffer(t, p, spec, "us-central1-a")
	c.lag = 1
	id, err := p.Create(ctx, &o, prep, spec)
	if err != nil {
		t.Fatal(err)
	}
	obs, err := p.Observe(ctx, o.Location, "life")
	if err != nil || len(obs) != 0 {
		t.Fatalf("an id not yet visible: %+v, %v", obs, err)
	}
	// Deleting an id that is not visible yet is not an error either.
	if err := p.Delete(ctx, o.Location, "ghost", []string{"12345"}); err != nil {
		t.Fatal(err)
	}
	obs, _ = p.Observe(ctx, o.Location, "life")
	if len(obs) != 1 || obs[0].ID != id || obs[0].Status != provider.StatusPending || obs[0].SSH != nil ||
		obs[0].VM != "life" || obs[0].VendorStatus != "PROVISIONING" || obs[0].InstanceType != "g2-standard-4" {
		t.Fatalf("pending: %+v", obs)
	}
	lst := c.calls("GET /compute/v1/projects/" + project + "/zones/us-central1-a/instances")
	f := lst[len(lst)-1].Query["filter"][0]
	if !strings.Contains(f, `labels.gpuprov = "life"`) || !strings.Contains(f, `labels.gpuprov-installation = "`+installation+`"`) {
		t.Fatalf("observe filter %q", f)
	}
	c.settle()
	obs, _ = p.Observe(ctx, o.Location, "life")
	if len(obs) != 1 || obs[0].Status != provider.StatusRunning || obs[0].SSH == nil || obs[0].SSH.Port != 22 ||
		obs[0].SSH.User != "gpuprov" || obs[0].SSH.Host != obs[0].PublicIP || obs[0].PrivateIP == "" {
		t.Fatalf("running: %+v", obs)
	}
	if other, _ := p.Observe(ctx, o.Location, "other"); len(other) != 0 {
		t.Fatalf("another VM sees %+v", other)
	}
	if err := p.Delete(ctx, o.Location, "life", []string{id}); err != nil {
		t.Fatal(err)
	}
	obs, _ = p.Observe(ctx, o.Location, "life")
	if len(obs) != 1 || obs[0].Status != provider.StatusStopping {
		t.Fatalf("deleting: %+v", obs)
	}
	c.settle()
	if obs, _ = p.Observe(ctx, o.Location, "life"); len(obs) != 0 {
		t.Fatalf("deleted: %+v", obs)
	}
	// Delete of a missing instance is success, and a stale id never
	// deletes a newer instance of the same name.
	if err := p.Delete(ctx, o.Location, "life", []string{id}); err != nil {
		t.Fatal(err)
	}
	spec.IdempotencyToken = "second-attempt"
	id2, err := p.Create(ctx, &o, prep, spec)
	if err != nil || id2 == id {
		t.Fatalf("second create %q, %v", id2, err)
	}
	deletes := len(c.calls("DELETE /compute/v1/projects/" + project + "/zones/us-central1-a/instances/gpuprov-life"))
	if err := p.Delete(ctx, o.Location, "life", []string{id}); err != nil {
		t.Fatal(err)
	}
	if n := len(c.calls("DELETE /compute/v1/projects/" + project + "/zones/us-central1-a/instances/gpuprov-life")); n != deletes || len(c.live()) != 1 {
		t.Fatalf("a stale id deleted the newer instance (%d deletes)", n-deletes)
	}
}

func TestStatusMapping(t *testing.T) {
	c, mt := newCloud(t)
	p := c.provider(t, mt, gcp.Config{})
	ctx := context.Background()
	spec := newSpec(t, "st")
	o, prep := prepareAndOffer(t, p, spec, "us-central1-a")
	id, err := p.Create(ctx, &o, prep, spec)
	if err != nil {
		t.Fatal(err)
	}
	for vendor, want := range map[string]provider.InstanceStatus{
		"PROVISIONING": provider.StatusPending, "STAGING": provider.StatusPending, "PENDING": provider.StatusPending,
		"RUNNING": provider.StatusRunning, "STOPPING": provider.StatusStopping, "SUSPENDING": provider.StatusStopping,
		"PENDING_STOP": provider.StatusStopping, "DEPROVISIONING": provider.StatusStopping,
		"TERMINATED": provider.StatusFailed, "STOPPED": provider.StatusFailed, "SUSPENDED": provider.StatusFailed,
		"REPAIRING": provider.StatusFailed, "SOMETHING_NEW": provider.StatusUnknown,
	} {
		c.setStatus(id, vendor, "")
		obs, err := p.Observe(ctx, o.Location, "st")
		if err != nil || len(obs) != 1 || obs[0].Status != want || obs[0].VendorStatus != vendor {
			t.Errorf("%s: %+v, %v; want %s", vendor, obs, err, want)
		}
	}
}

func TestFirewallPrepareAndCleanup(t *testing.T) {
	c, mt := newCloud(t)
	p := c.provider(t, mt, gcp.Config{Network: "gpu-net"})
	ctx := context.Background()
	spec := newSpec(t, "fw")
	o := offerIn(t, p, l4, "us-central1-a", false)
	prep1, err := p.Prepare(ctx, &o, spec)
	if err != nil {
		t.Fatal(err)
	}
	prep2, err := p.Prepare(ctx, &o, spec)
	if err != nil || string(prep1) != string(prep2) {
		t.Fatalf("second prepare: %s vs %s, %v", prep2, prep1, err)
	}
	if fws := c.firewallNames(); !slices.Equal(fws, []string{"gpuprov-fw"}) {
		t.Fatalf("firewalls %v", fws)
	}
	var fw computepb.Firewall
	if err := protojson.Unmarshal(c.calls("POST /compute/v1/projects/" + project + "/global/firewalls")[0].Body, &fw); err != nil {
		t.Fatal(err)
	}
	if fw.GetNetwork() != "projects/"+project+"/global/networks/gpu-net" || fw.GetDirection() != "INGRESS" ||
		!slices.Equal(fw.GetTargetTags(), []string{"gpuprov-fw"}) || len(fw.GetAllowed()) != 2 ||
		fw.GetAllowed()[0].GetIPProtocol() != "tcp" || !slices.Equal(fw.GetAllowed()[0].GetPorts(), []string{"22", "6443"}) ||
		fw.GetAllowed()[1].GetIPProtocol() != "udp" || !slices.Equal(fw.GetAllowed()[1].GetPorts(), []string{"51820"}) {
		t.Fatalf("firewall %v", &fw)
	}
	// Deleting the rule while the instance is still being deleted.
	c.syncFaults["DELETE global/firewalls/gpuprov-fw"] = []apiFault{{400, "resourceInUseByAnotherResource",
		"The firewall resource 'projects/p/global/firewalls/gpuprov-fw' is already being used by 'projects/p/zones/z/instances/gpuprov-fw'"}}
	kindOf(t, p.Cleanup(ctx, o.Location, "fw"), provider.Transient)
	for i := range 2 {
		if err := p.Cleanup(ctx, o.Location, "fw"); err != nil {
			t.Fatalf("cleanup %d: %v", i, err)
		}
	}
	if fws := c.firewallNames(); len(fws) != 0 {
		t.Fatalf("firewalls left %v", fws)
	}
	// A missing image family fails Prepare as an invalid request.
	spec.Image = "projects/deeplearning-platform-release/global/images/family/no-such-family"
	_, err = p.Prepare(ctx, &o, spec)
	kindOf(t, err, provider.InvalidRequest)
}

func TestListByInstallation(t *testing.T) {
	c, mt := newCloud(t)
	p := c.provider(t, mt, gcp.Config{Regions: []string{"us-central1"}})
	other := c.provider(t, mt, gcp.Config{}, gcp.WithInstallation("ffffffffffffffff"))
	ctx := context.Background()
	for _, tc := range []struct {
		p    *gcp.Provider
		vm   string
		inst string
	}{{p, "a", installation}, {other, "b", "ffffffffffffffff"}} {
		spec := newSpec(t, tc.vm)
		spec.Installation = tc.inst
		o, prep := prepareAndOffer(t, tc.p, spec, "us-central1-b")
		if _, err := tc.p.Create(ctx, &o, prep, spec); err != nil {
			t.Fatal(err)
		}
	}
	all, err := p.List(ctx, provider.Location{})
	if err != nil || len(all) != 1 || all[0].VM != "a" || all[0].Location.Zone != "us-central1-b" {
		t.Fatalf("list: %+v, %v", all, err)
	}
	agg := c.calls("GET /compute/v1/projects/" + project + "/aggregated/instances")
	if f := agg[len(agg)-1].Query["filter"][0]; f != `labels.gpuprov-installation = "`+installation+`"` {
		t.Fatalf("list filter %q", f)
	}
	if east, _ := p.List(ctx, provider.Location{Region: "us-east1"}); len(east) != 0 {
		t.Fatalf("us-east1: %+v", east)
	}
}

// Diagnose attributes a Spot preemption from the zone operations that
// target the instance id, even after the instance was deleted, and reports
// a stopped instance's status message.
func TestDiagnose(t *testing.T) {
	c, mt := newCloud(t)
	p := c.provider(t, mt, gcp.Config{})
	ctx := context.Background()
	spec := newSpec(t, "dx")
	o, prep := prepareAndOffer(t, p, spec, "us-central1-a")
	id, err := p.Create(ctx, &o, prep, spec)
	if err != nil {
		t.Fatal(err)
	}
	c.settle()
	d, err := p.Diagnose(ctx, o.Location, "dx", id)
	if err != nil || d.Verdict() != provider.Healthy || !d.Exists {
		t.Fatalf("running: %+v, %v", d, err)
	}
	c.setStatus(id, "TERMINATED", "Instance was stopped by a host error")
	d, _ = p.Diagnose(ctx, o.Location, "dx", id)
	if d.Verdict() != provider.Unhealthy || d.Status != provider.StatusFailed || d.Findings[0].Code != "stopped" ||
		!strings.Contains(d.Findings[0].Message, "host error") {
		t.Fatalf("terminated: %+v", d)
	}
	// Preempted and deleted (Spot, termination action DELETE).
	var target uint64
	for _, in := range c.live() {
		target = in.GetId()
	}
	c.mu.Lock()
	c.zoneOps["us-central1-a"] = append(c.zoneOps["us-central1-a"], &computepb.Operation{
		Name: strp("systemevent-1"), OperationType: strp("compute.instances.preempted"), TargetId: &target,
		StatusMessage: strp("Instance was preempted."), InsertTime: strp("2026-03-01T12:30:00.000-07:00"),
	}, &computepb.Operation{Name: strp("systemevent-0"), OperationType: strp("compute.instances.setLabels"), TargetId: &target})
	c.mu.Unlock()
	if err := p.Delete(ctx, o.Location, "dx", []string{id}); err != nil {
		t.Fatal(err)
	}
	c.settle()
	d, err = p.Diagnose(ctx, o.Location, "dx", id)
	if err != nil || d.Exists || d.Verdict() != provider.Gone || len(d.Findings) != 1 || d.Findings[0].Code != "preempted" ||
		d.Findings[0].At.IsZero() {
		t.Fatalf("preempted: %+v, %v", d, err)
	}
	ops := c.calls("GET /compute/v1/projects/" + project + "/zones/us-central1-a/operations")
	if f := ops[len(ops)-1].Query["filter"][0]; f != "targetId = "+id {
		t.Fatalf("operations filter %q", f)
	}
}

func strp(s string) *string { return &s }

func TestConfigAndRegistry(t *testing.T) {
	for _, tc := range []struct {
		cfg  gcp.Config
		want string
	}{
		{gcp.Config{}, "project is not set"},
		{gcp.Config{Project: "X"}, "project:"},
		{gcp.Config{Project: project, Zones: []string{"us-central1"}}, "zones:"},
		{gcp.Config{Project: project, Regions: []string{"us central"}}, "regions:"},
		{gcp.Config{Project: project, DiskSizeGB: 5}, "disk_size_gb"},
		{gcp.Config{Project: project, Image: "ubuntu"}, "image:"},
	} {
		_, err := gcp.New(tc.cfg, gcp.WithEndpoint(endpoint, nil))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.cfg, err, tc.want)
		}
	}
	decode := func(m map[string]any) func(any) error {
		return func(into any) error {
			b, _ := jsonMarshal(m)
			return jsonStrict(b, into)
		}
	}
	_, err := provider.Build("gcp", provider.Settings{Installation: installation, Decode: decode(map[string]any{
		"project": project, "boot_timeout": "soon"})})
	if err == nil || !strings.Contains(err.Error(), "boot_timeout") {
		t.Fatalf("bad duration: %v", err)
	}
	_, err = provider.Build("gcp", provider.Settings{Installation: installation, Decode: decode(map[string]any{
		"project": project, "credentials_file": "/nonexistent/creds.json"})})
	if err == nil || !strings.Contains(err.Error(), "credentials_file") {
		t.Fatalf("missing credentials file: %v", err)
	}
}

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }

// jsonStrict decodes like the CLI's config decoder: unknown keys are errors.
func jsonStrict(b []byte, into any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	return dec.Decode(into)
}

// Reads are single attempts too: the client's default retryer (which
// retries 503 and 504 on instances.get) is turned off, the core is the only
// retry layer.
func TestReadsAreOneAttempt(t *testing.T) {
	c, mt := newCloud(t)
	p := c.provider(t, mt, gcp.Config{})
	loc := provider.Location{Region: "us-central1", Zone: "us-central1-a"}
	c.syncFaults["GET zones/us-central1-a/instances/gpuprov-x"] = []apiFault{{503, "backendError", "x"}, {503, "backendError", "x"}}
	_, err := p.Diagnose(context.Background(), loc, "x", "123")
	kindOf(t, err, provider.Transient)
	if n := len(c.calls("GET /compute/v1/projects/" + project + "/zones/us-central1-a/instances/gpuprov-x")); n != 1 {
		t.Fatalf("%d get calls, want 1", n)
	}
}
