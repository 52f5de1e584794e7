package aws_test

import (
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/aws/smithy-go"

	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/aws"
)

// tagsOf returns the tags of the TagSpecification of resource type rt in
// a RunInstances form.
func tagsOf(t *testing.T, r *fakeReq, rt string) map[string]string {
	t.Helper()
	tags := tagSpec(r.Form, rt)
	if tags == nil {
		t.Fatalf("RunInstances has no TagSpecification for %s: %v", rt, r.Form)
	}
	return tags
}

func TestRunInstancesRequest(t *testing.T) {
	e := newEnv(t, awsConfig())
	spec := newSpec(t, "train")
	o, id := e.launch(t, l4, spec)
	runs := e.f.requests("RunInstances")
	if len(runs) != 1 {
		t.Fatalf("%d RunInstances requests, want 1", len(runs))
	}
	r := runs[0]
	if r.Region != o.Location.Region || r.Region != "us-east-1" {
		t.Fatalf("RunInstances signed for %q, offer in %s", r.Region, o.Location)
	}
	for key, want := range map[string]string{
		"ClientToken": spec.IdempotencyToken, "InstanceType": o.InstanceType, "ImageId": testAMI,
		"MinCount": "1", "MaxCount": "1", "InstanceInitiatedShutdownBehavior": "terminate",
		"KeyName": "gpuprov-train", "NetworkInterface.1.AssociatePublicIpAddress": "true",
		"NetworkInterface.1.SubnetId": subnetID(o.Location.Zone), "MetadataOptions.HttpTokens": "required",
	} {
		if got := r.Form.Get(key); got != want {
			t.Errorf("%s = %q, want %q", key, got, want)
		}
	}
	if r.Form.Get("InstanceMarketOptions.MarketType") != "" {
		t.Errorf("on-demand launch carries market options: %v", r.Form)
	}
	for _, rt := range []string{"instance", "volume"} {
		tags := tagsOf(t, r, rt)
		if tags["gpuprov"] != "train" || tags["gpuprov-installation"] != installation || tags["Name"] != "gpuprov-train" {
			t.Errorf("%s tags %v lack the VM identity", rt, tags)
		}
	}
	ud, err := base64.StdEncoding.DecodeString(r.Form.Get("UserData"))
	if err != nil {
		t.Fatalf("UserData is not base64: %v", err)
	}
	for _, want := range []string{"#cloud-config", "ed25519_private", spec.HostKey.Public, spec.AuthorizedKeys[0]} {
		if !strings.Contains(string(ud), want) {
			t.Errorf("user-data lacks %q:\n%s", want, ud)
		}
	}
	if live := e.f.live(); len(live) != 1 || live[0].ID != id || live[0].Spot {
		t.Fatalf("fake holds %+v, want the one on-demand instance %s", live, id)
	}
}

func TestSpotLaunchCarriesMarketOptions(t *testing.T) {
	cfg := awsConfig()
	cfg.Spot = true
	e := newEnv(t, cfg)
	req := l4
	req.Spot = provider.SpotOnly
	o, _ := e.launch(t, req, newSpec(t, "cheap"))
	if !o.Spot {
		t.Fatalf("first offer of a spot-only request is not spot: %+v", o)
	}
	r := e.f.requests("RunInstances")[0]
	for key, want := range map[string]string{
		"InstanceMarketOptions.MarketType":                               "spot",
		"InstanceMarketOptions.SpotOptions.SpotInstanceType":             "one-time",
		"InstanceMarketOptions.SpotOptions.InstanceInterruptionBehavior": "terminate",
	} {
		if got := r.Form.Get(key); got != want {
			t.Errorf("%s = %q, want %q", key, got, want)
		}
	}
}

// InsufficientInstanceCapacity arrives as HTTP 500; the SDK would retry a
// 500, the adapter must not: one request, Capacity.
func TestCapacityIsHTTP500AndNotRetried(t *testing.T) {
	e := newEnv(t, awsConfig())
	e.f.fail(&fakeRule{Action: "RunInstances", Code: "InsufficientInstanceCapacity", Status: http.StatusInternalServerError})
	ctx := context.Background()
	spec := newSpec(t, "stock")
	o := e.offer(t, l4)
	prep, err := e.p.Prepare(ctx, &o, spec)
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.p.Create(ctx, &o, prep, spec)
	pe := errKind(t, err, provider.Capacity)
	if pe.Scope() != provider.ScopeOffer {
		t.Fatalf("capacity blocks %s, want the offer", pe.Scope())
	}
	var ae smithy.APIError
	if !errors.As(err, &ae) || ae.ErrorCode() != "InsufficientInstanceCapacity" || aws.ErrorCode(err) != "InsufficientInstanceCapacity" {
		t.Fatalf("%v does not wrap the API error", err)
	}
	if n := len(e.f.requests("RunInstances")); n != 1 {
		t.Fatalf("%d RunInstances requests, want exactly 1", n)
	}
}

// Every documented error kind of RunInstances, each from one request that
// the fake answers with the status EC2 documents for the code (Status 0)
// or, for codes the table does not know, the status given; the kinds and
// scopes are those of TestClassify, whose rows cite the reference. Nothing is
// created by any of them.
func TestCreateErrorKinds(t *testing.T) {
	for _, tc := range []struct {
		code   string
		status int
		kind   provider.ErrorKind
		scope  provider.Scope
	}{
		{"VcpuLimitExceeded", 0, provider.Quota, provider.ScopeFamily}, // refODQuota: the type's bucket
		{"InstanceLimitExceeded", 0, provider.Quota, provider.ScopeRegion},
		{"MaxSpotInstanceCountExceeded", 0, provider.Quota, provider.ScopeSpot}, // refSpotQuota: Spot only
		{"InsufficientInstanceCapacity", 0, provider.Capacity, provider.ScopeOffer},
		{"InsufficientAddressCapacity", 0, provider.Capacity, provider.ScopeZone},
		{"InsufficientReservedInstanceCapacity", 0, provider.Capacity, provider.ScopeOffer},
		{"SpotMaxPriceTooLow", 0, provider.Capacity, provider.ScopeOffer},
		{"RequestLimitExceeded", 0, provider.Transient, provider.ScopeOffer},
		{"InternalError", 0, provider.Transient, provider.ScopeOffer},
		{"Unsupported", 0, provider.Unavailable, provider.ScopeOffer},
		{"InvalidInstanceType", 0, provider.Unavailable, provider.ScopeRegion},
		{"InvalidInstanceType.NotFound", 0, provider.Unavailable, provider.ScopeRegion},
		{"OptInRequired", 0, provider.Unavailable, provider.ScopeRegion},
		{"InvalidAMIID.NotFound", 0, provider.Unavailable, provider.ScopeOffer},
		{"InvalidParameterValue", 0, provider.InvalidRequest, provider.ScopeOffer},
		{"IdempotentParameterMismatch", 0, provider.InvalidRequest, provider.ScopeOffer},
		{"AuthFailure", 0, provider.Credentials, provider.ScopeProvider},
		{"UnauthorizedOperation", 0, provider.Credentials, provider.ScopeProvider},
		{"IdempotentInstanceTerminated", 0, provider.Failed, provider.ScopeOffer},
		{"SomethingNew", 400, provider.Failed, provider.ScopeOffer},
		{"SomethingNew", 502, provider.Transient, provider.ScopeOffer},
	} {
		status := tc.status
		if status == 0 {
			status = documentedStatus(tc.code)
		}
		t.Run(tc.code+"_"+http.StatusText(status), func(t *testing.T) {
			e := newEnv(t, awsConfig())
			e.f.fail(&fakeRule{Action: "RunInstances", Code: tc.code, Status: tc.status})
			ctx := context.Background()
			spec := newSpec(t, "kinds")
			o := e.offer(t, l4)
			prep, err := e.p.Prepare(ctx, &o, spec)
			if err != nil {
				t.Fatal(err)
			}
			_, err = e.p.Create(ctx, &o, prep, spec)
			pe := errKind(t, err, tc.kind)
			if pe.Scope() != tc.scope || pe.Op != "create" || pe.Provider != "aws" {
				t.Fatalf("scope %s op %q provider %q, want %s create aws", pe.Scope(), pe.Op, pe.Provider, tc.scope)
			}
			if aws.ErrorCode(err) != tc.code {
				t.Fatalf("error code %q, want %q", aws.ErrorCode(err), tc.code)
			}
			if n := len(e.f.requests("RunInstances")); n != 1 {
				t.Fatalf("%d RunInstances requests, want 1", n)
			}
			if live := e.f.live(); len(live) != 0 {
				t.Fatalf("a refused create left %+v", live)
			}
		})
	}
}

// A type the zone does not sell: EC2 answers Unsupported (HTTP 400) with
// its message naming the zones that do ("Error codes for the Amazon EC2
// API", client errors: "an Availability Zone that currently has
// constraints on that instance type"); the offer (that type in that zone)
// is blocked, not the zone, and nothing was created.
func TestCreateTypeNotOfferedInZone(t *testing.T) {
	e := newEnv(t, awsConfig())
	ctx := context.Background()
	spec := newSpec(t, "nozone")
	o := e.offer(t, l4)
	other := "use1-az6"
	if o.Location.Zone == other {
		other = "use1-az5"
	}
	e.f.mu.Lock()
	e.f.offered = map[string][]string{o.InstanceType: {other}}
	e.f.mu.Unlock()
	prep, err := e.p.Prepare(ctx, &o, spec)
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.p.Create(ctx, &o, prep, spec)
	pe := errKind(t, err, provider.Unavailable)
	if pe.Scope() != provider.ScopeOffer || aws.ErrorCode(err) != "Unsupported" ||
		!strings.Contains(err.Error(), "is not supported in your requested Availability Zone") {
		t.Fatalf("scope %s, error %v; want offer scope and EC2's Unsupported", pe.Scope(), err)
	}
	if n, live := len(e.f.requests("RunInstances")), e.f.live(); n != 1 || len(live) != 0 {
		t.Fatalf("%d RunInstances, %d instances left; want 1 and none", n, len(live))
	}
}

// A replayed create (same token) returns the instance the first one made.
func TestCreateReplayIsIdempotent(t *testing.T) {
	e := newEnv(t, awsConfig())
	ctx := context.Background()
	spec := newSpec(t, "replay")
	o := e.offer(t, l4)
	prep, err := e.p.Prepare(ctx, &o, spec)
	if err != nil {
		t.Fatal(err)
	}
	a, err1 := e.p.Create(ctx, &o, prep, spec)
	b, err2 := e.p.Create(ctx, &o, prep, spec)
	if err1 != nil || err2 != nil || a != b {
		t.Fatalf("replay: %q %v, %q %v", a, err1, b, err2)
	}
	if n := len(e.f.live()); n != 1 {
		t.Fatalf("replay left %d instances", n)
	}
	long := *spec
	long.IdempotencyToken = strings.Repeat("x", 80)
	if _, err := e.p.Create(ctx, &o, prep, &long); err != nil {
		t.Fatal(err)
	}
	if tok := e.f.requests("RunInstances")[2].Form.Get("ClientToken"); len(tok) != 64 || tok == long.IdempotencyToken {
		t.Fatalf("an 80-character token was sent as %q; EC2 takes at most 64", tok)
	}
}

func TestCreateRejectsMissingDetail(t *testing.T) {
	e := newEnv(t, awsConfig())
	o := e.offer(t, l4)
	_, err := e.p.Create(context.Background(), &o, []byte(`{}`), newSpec(t, "x"))
	errKind(t, err, provider.InvalidRequest)
	if n := len(e.f.requests("RunInstances")); n != 0 {
		t.Fatalf("sent %d RunInstances without prepared data", n)
	}
}

// TestRunInstancesTakesTheRequestsDiskAndLabels: an offer whose disk the core
// sized (Request.DiskGB) launches with a root block device mapping of that
// size on the image's root device (read with DescribeImages), and the
// caller's labels are tags on the instance, its volumes and its key pair
// beside the identity, but not on the shared security group, which is no
// one VM's (provider.SharedLabels). A disk below the image's root snapshot
// is refused at Prepare, before anything is launched.
func TestRunInstancesTakesTheRequestsDiskAndLabels(t *testing.T) {
	e := newEnv(t, awsConfig())
	spec := newSpec(t, "needs")
	spec.UserLabels = map[string]string{"team": "ml", "cost-center": "r-and-d"}
	ctx := context.Background()
	o := e.offer(t, l4)
	o.DiskGB = 750
	prep, err := e.p.Prepare(ctx, &o, spec)
	if err != nil {
		t.Fatalf("prepare: %v", err)
	}
	if _, err := e.p.Create(ctx, &o, prep, spec); err != nil {
		t.Fatalf("create: %v", err)
	}
	r := e.f.requests("RunInstances")[0]
	for key, want := range map[string]string{
		"BlockDeviceMapping.1.DeviceName": "/dev/sda1", "BlockDeviceMapping.1.Ebs.VolumeSize": "750",
		"BlockDeviceMapping.1.Ebs.VolumeType": "gp3", "BlockDeviceMapping.1.Ebs.DeleteOnTermination": "true",
	} {
		if got := r.Form.Get(key); got != want {
			t.Errorf("%s = %q, want %q", key, got, want)
		}
	}
	for _, rt := range []string{"instance", "volume"} {
		if tags := tagsOf(t, r, rt); tags["team"] != "ml" || tags["cost-center"] != "r-and-d" || tags["gpuprov"] != "needs" {
			t.Errorf("%s tags %v; want the caller's labels and the identity", rt, tags)
		}
	}
	keys, groups := e.f.requests("ImportKeyPair"), e.f.requests("CreateSecurityGroup")
	if len(keys) == 0 || len(groups) == 0 {
		t.Fatalf("%d ImportKeyPair, %d CreateSecurityGroup", len(keys), len(groups))
	}
	if tags := tagSpec(keys[0].Form, "key-pair"); tags["team"] != "ml" || tags["gpuprov"] != "needs" {
		t.Errorf("key pair tags %v lack the caller's labels or the identity", tags)
	}
	if tags := tagSpec(groups[0].Form, "security-group"); tags["team"] != "" || tags["gpuprov"] != "" || tags[provider.LabelShared] != "true" {
		t.Errorf("shared security group tags %v; want the shared labels, no VM's labels or identity", tags)
	}

	// Smaller than the image's 100 GB root snapshot: refused up front.
	e2 := newEnv(t, awsConfig())
	o2 := e2.offer(t, l4)
	o2.DiskGB = 50
	_, err = e2.p.Prepare(ctx, &o2, newSpec(t, "tiny"))
	errKind(t, err, provider.InvalidRequest)
	if !strings.Contains(err.Error(), "smaller than image") {
		t.Errorf("error %q does not say the disk is below the image's", err)
	}
	if n := len(e2.f.requests("RunInstances")); n != 0 {
		t.Errorf("%d RunInstances after a refused disk", n)
	}
}
