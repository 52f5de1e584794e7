package aws_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/aws/smithy-go"

	"github.com/org/gpuprov/internal/mototest"
	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/aws"
)

// Quotas is checked against the fake's Service Quotas, which answers
// GetServiceQuota with the request and response syntax of the Service
// Quotas API Reference (JSON 1.1, X-Amz-Target
// ServiceQuotasV20190624.GetServiceQuota, {"ServiceCode","QuotaCode"} →
// {"Quota":{…,"Value":…}}), and against moto's server below.

func quotaEnv(t *testing.T) *env {
	e := newEnv(t, awsConfig())
	e.f.quotas = map[string]float64{
		"us-east-1|L-417A185B": 192, "us-east-1|L-DB2E81BA": 64, "us-east-1|L-7212CCBC": 0, "us-east-1|L-3819A6DF": 8,
	}
	return e
}

// The four vCPU quotas of the catalog's GPU buckets, one call each, as
// QuotaLimits the core can apply to the adapter's own offers: the P
// on-demand quota covers p5's on-demand offers and nothing else, a zero
// Spot quota does not fit a spot offer, reserved offers draw on none.
func TestQuotas(t *testing.T) {
	e := quotaEnv(t)
	got, err := e.p.Quotas(context.Background(), "us-east-1")
	if err != nil {
		t.Fatal(err)
	}
	want := []provider.QuotaLimit{
		{Name: "Running On-Demand P instances (L-417A185B)", What: "P instances", Region: "us-east-1", Unit: provider.QuotaVCPUs,
			Limit: 192, Families: []string{"P"}, OnDemand: true},
		{Name: "Running On-Demand G and VT instances (L-DB2E81BA)", What: "G and VT instances", Region: "us-east-1",
			Unit: provider.QuotaVCPUs, Limit: 64, Families: []string{"G"}, OnDemand: true},
		{Name: "All P Spot Instance Requests (L-7212CCBC)", What: "P Spot instances", Region: "us-east-1", Unit: provider.QuotaVCPUs,
			Limit: 0, Families: []string{"P"}, Spot: true},
		{Name: "All G and VT Spot Instance Requests (L-3819A6DF)", What: "G and VT Spot instances", Region: "us-east-1",
			Unit: provider.QuotaVCPUs, Limit: 8, Families: []string{"G"}, Spot: true},
	}
	if a, b := mustJSON(t, got), mustJSON(t, want); a != b {
		t.Fatalf("quotas\n%s\nwant\n%s", a, b)
	}
	reqs := e.f.requests("GetServiceQuota")
	if len(reqs) != 4 {
		t.Fatalf("%d GetServiceQuota calls, want 4", len(reqs))
	}
	for _, r := range reqs {
		if jsonField(r.Body, "ServiceCode") != "ec2" || r.Region != "us-east-1" ||
			r.Header.Get("Content-Type") != "application/x-amz-json-1.1" {
			t.Fatalf("GetServiceQuota request %q in %s, %v", r.Body, r.Region, r.Header)
		}
	}

	// Applied to the adapter's offers.
	cfg := awsConfig()
	cfg.Spot = true
	e2 := newEnv(t, cfg)
	e2.f.addReservation(fakeCR{ID: crOpen, Region: "us-east-1", ZoneID: "use1-az4", Type: "p5.48xlarge", Total: 1, Free: 1})
	offers := plan(t, e2, provider.ResourceRequest{GPU: "H100-80GB", GPUCount: 8, Spot: provider.SpotOrOnDemand, Regions: []string{"us-east-1"}})
	l4 := plan(t, e2, provider.ResourceRequest{GPU: "L4", GPUCount: 1, Regions: []string{"us-east-1"}, Reserved: provider.ForbidReserved})
	pOD, pSpot, gOD := got[0], got[2], got[1]
	var seen [3]bool
	for _, o := range offers {
		switch {
		case o.Reservation != nil:
			seen[0] = true
			if pOD.Covers(&o) || pSpot.Covers(&o) {
				t.Fatalf("a reservation offer draws on a quota: %+v", o)
			}
		case o.Spot:
			seen[1] = true
			if pOD.Covers(&o) || !pSpot.Covers(&o) || pSpot.Fits(&o) {
				t.Fatalf("spot p5 offer %+v against the P quotas", o)
			}
			if s := pSpot.Shortfall(&o); !strings.Contains(s, "quota 0 of 192 vCPUs for P Spot instances in us-east-1") {
				t.Fatalf("shortfall %q", s)
			}
		default:
			seen[2] = true
			if !pOD.Covers(&o) || !pOD.Fits(&o) || gOD.Covers(&o) {
				t.Fatalf("on-demand p5 offer %+v against the P and G quotas", o)
			}
		}
	}
	if seen != [3]bool{true, true, true} || len(l4) == 0 || !gOD.Covers(&l4[0]) || pOD.Covers(&l4[0]) {
		t.Fatalf("offers seen %v; g6 covered by G %v, by P %v", seen, gOD.Covers(&l4[0]), pOD.Covers(&l4[0]))
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.MarshalIndent(v, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A quota Service Quotas does not hold in the region is left out; an
// account that may not read quotas gets the error its code maps to
// (AccessDeniedException: Credentials), which the core reads as "cannot
// tell"; a bad region name is refused before any call.
func TestQuotasErrors(t *testing.T) {
	e := quotaEnv(t)
	delete(e.f.quotas, "us-east-1|L-3819A6DF")
	got, err := e.p.Quotas(context.Background(), "us-east-1")
	if err != nil || len(got) != 3 || slices.ContainsFunc(got, func(q provider.QuotaLimit) bool { return strings.Contains(q.Name, "L-3819A6DF") }) {
		t.Fatalf("a quota the region lacks: %+v, %v", got, err)
	}

	e = quotaEnv(t)
	e.f.fail(&fakeRule{Action: "GetServiceQuota", Code: "AccessDeniedException", Status: 400})
	_, err = e.p.Quotas(context.Background(), "us-east-1")
	errKind(t, err, provider.Credentials)
	var ae smithy.APIError
	if !errors.As(err, &ae) || ae.ErrorCode() != "AccessDeniedException" || strings.Contains(err.Error(), "secret-test") {
		t.Fatalf("access denied: %v", err)
	}

	e = quotaEnv(t)
	e.f.fail(&fakeRule{Action: "GetServiceQuota", Code: "TooManyRequestsException", Status: 400, Times: 1})
	_, err = e.p.Quotas(context.Background(), "us-east-1")
	errKind(t, err, provider.Transient)

	e = quotaEnv(t)
	_, err = e.p.Quotas(context.Background(), "Mars")
	errKind(t, err, provider.InvalidRequest)
	if !strings.Contains(err.Error(), `"Mars"`) || len(e.f.requests("")) != 0 {
		t.Fatalf("bad region: %v, %d calls", err, len(e.f.requests("")))
	}
}

// Against moto_server 5.2.1 (internal/mototest): the adapter's Service
// Quotas client reaches moto through the provider's endpoint, signed, in
// the JSON 1.1 protocol moto routes on — moto answers a VPC quota it holds
// (L-F678F1CE, "VPCs per Region", 5). moto 5.2.1 holds no EC2 quotas:
// its servicequotas backend knows service code vpc only and answers
// NoSuchResourceException for ec2, so Quotas against it returns no quota
// and no error, as it does for a region that lacks them. The EC2 quota
// values are checked against the fake above.
func TestMotoQuotas(t *testing.T) {
	url := mototest.URL(t)
	p, err := aws.New(aws.Config{Regions: []string{"us-east-1"}}, aws.WithEndpoint(aws.Endpoint{URL: url, Client: mototest.Client,
		AccessKeyID: mototest.KeyID, SecretAccessKey: mototest.Secret}))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	v, err := p.ServiceQuotaValue(ctx, "us-east-1", "vpc", "L-F678F1CE")
	if err != nil || v != 5 {
		t.Fatalf("moto's VPCs-per-Region quota: %v, %v; want 5", v, err)
	}
	got, err := p.Quotas(ctx, "us-east-1")
	if err != nil || len(got) != 0 {
		t.Fatalf("EC2 quotas on moto 5.2.1: %+v, %v; want none (moto holds no ec2 quotas)", got, err)
	}
}
