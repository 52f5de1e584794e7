package lambda_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jarcoal/httpmock"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/clock"
	"github.com/org/gpuprov/gpuprovtest"
	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/lambda"
	"github.com/org/gpuprov/provider/lambda/lambdamock"
)

// TestQuotaExceededBlocksTheOfferOnly: Lambda answers a launch 400
// global/quota-exceeded (testdata/openapi.json,
// #/components/schemas/ApiErrorQuotaExceeded, "Quota exceeded.", in the
// 400 of POST /api/v1/instance-operations/launch). The answer names no
// quota wider than what the launch asked for, so the core blocks that
// offer (the type in its region) for the Quota block's length and launches
// the next Lambda offer, instead of giving up on Lambda altogether.
func TestQuotaExceededBlocksTheOfferOnly(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	t.Cleanup(clk.AutoAdvance())
	mt := httpmock.NewMockTransport()
	api := lambdamock.New(apiKey, catalog()...)
	api.Fail(lambdamock.Fault{Method: http.MethodPost, Path: "/instance-operations/launch", Status: 400,
		Code: lambda.CodeQuotaExceeded, Message: "Quota exceeded.", Times: 1})
	api.Register(mt, base)
	prov, db := gpuprovtest.New(t, clk, func(inst string) []provider.CloudProvider {
		p, err := lambda.New(lambda.Config{APIKey: apiKey, RequestsPerSecond: 1000, Burst: 100, ConsistencyWindow: time.Second,
			LaunchInterval: time.Nanosecond}, // the pacing reads the wall clock: do not pace the test
			lambda.WithInstallation(inst), lambda.WithHTTP(base, &http.Client{Transport: vendorSchema(t).Transport(t, mt)}))
		if err != nil {
			t.Fatal(err)
		}
		return []provider.CloudProvider{p}
	}, gpuprov.WithSSH("ubuntu", spec("x").AuthorizedKeys, true))

	vm, err := prov.Launch(ctx, gpuprov.Request{Name: "train", GPU: "h100", Timeout: time.Hour})
	if err != nil {
		t.Fatalf("launch: %v; want the next Lambda offer after one type's quota", err)
	}
	if vm.State != gpuprov.StateReady || vm.Provider != "lambda" || vm.InstanceType != "gpu_1x_h100_sxm5" {
		t.Fatalf("vm %+v, want ready on the next offer, gpu_1x_h100_sxm5", vm)
	}
	blocks, err := db.Blocks(ctx, clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) != 1 || blocks[0].Scope != "offer" || blocks[0].ErrorKind != "quota" ||
		!strings.HasPrefix(blocks[0].Key, "offer:lambda|us-east-1||gpu_1x_h100_pcie|") {
		t.Fatalf("blocks %+v, want the quota-exceeded offer only", blocks)
	}
	if left := blocks[0].Until.Sub(clk.Now()); left <= 50*time.Minute || left > time.Hour {
		t.Fatalf("the offer is blocked for %s more, want the Quota block of 1h", left)
	}
}
