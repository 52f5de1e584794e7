package lambda_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/org/gpuprov/internal/openapitest"
	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/lambda"
	"github.com/org/gpuprov/provider/lambda/lambdamock"
)

// Every test's traffic goes through the Lambda Cloud API's OpenAPI document
// 1.8.3 (testdata/openapi.json; newEnv wraps the mock's transport): a
// request the adapter sends or an answer the mock serves that the document
// does not allow fails the test that made it.

// TestEveryPrimitiveAgainstTheVendorSchema runs every primitive, and the
// error answers the adapter branches on, through the schema check, and
// asserts that each operation of the trimmed document was exercised: the
// testdata holds no operation the adapter does not call, and every one it
// calls is checked at least once.
func TestEveryPrimitiveAgainstTheVendorSchema(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, lambda.Config{LaunchInterval: 1})
	o, id := e.launch(t, spec("train"))              // Plan, Prepare, Create
	prep, err := e.p.Prepare(ctx, &o, spec("train")) // adopts the key and ruleset
	if err != nil {
		t.Fatal(err)
	}
	if obs, err := e.p.Observe(ctx, o.Location, "train"); err != nil || len(obs) != 1 {
		t.Fatalf("observe: %+v %v", obs, err)
	}
	if vms, err := e.p.List(ctx, o.Location); err != nil || len(vms) != 1 {
		t.Fatalf("list: %+v %v", vms, err)
	}
	if d, err := e.p.Diagnose(ctx, o.Location, "train", id); err != nil || !d.Exists {
		t.Fatalf("diagnose: %+v %v", d, err)
	}
	e.api.Audit = []map[string]any{{"action": "terminated", "resource_lrns": []string{"lrn:cloud:instance:gone1"}}}
	if d, err := e.p.Diagnose(ctx, o.Location, "train", "gone1"); err != nil || d.Exists { // 404, then the audit log
		t.Fatalf("diagnose gone: %+v %v", d, err)
	}
	// Error answers: insufficient capacity (400), an unknown type (404).
	e.api.Fail(lambdamock.Fault{Method: http.MethodPost, Path: "/instance-operations/launch", Status: 400,
		Code: lambda.CodeInsufficientCapacity, Message: "Not enough capacity to fulfill launch request.", Times: 1})
	e.now = e.now.Add(time.Minute)
	if _, err := e.p.Create(ctx, &o, prep, spec("second")); provider.KindOf(err) != provider.Capacity {
		t.Fatalf("capacity: %v", err)
	}
	if err := e.p.Delete(ctx, o.Location, "train", []string{id, "0000000000000000000000000000dead"}); err != nil { // 200, then 404: gone is success
		t.Fatal(err)
	}
	if err := e.p.Cleanup(ctx, o.Location, "train"); err != nil { // the key; the shared ruleset is not the VM's
		t.Fatal(err)
	}
	if err := e.p.CleanupShared(ctx, o.Location); !errors.Is(err, provider.ErrInUse) { // 400: ruleset in use while terminating
		t.Fatalf("cleanup of the shared ruleset while terminating: %v", err)
	}
	e.api.Settle()
	if err := e.p.CleanupShared(ctx, o.Location); err != nil { // 200
		t.Fatal(err)
	}
	if err := e.p.Cleanup(ctx, o.Location, "train"); err != nil {
		t.Fatal(err)
	}
	wrong, _ := lambda.New(lambda.Config{APIKey: "wrong"}, lambda.WithHTTP(base, e.Client()))
	req := h100
	if _, err := wrong.Plan(ctx, &req); provider.KindOf(err) != provider.Credentials { // 401
		t.Fatalf("wrong key: %v", err)
	}

	e.Exercised(t, "POST /api/v1/instance-operations/launch 400", "GET /api/v1/instance-types 401",
		"GET /api/v1/instances/{id} 404", "POST /api/v1/instance-operations/terminate 404",
		"DELETE /api/v1/firewall-rulesets/{id} 400")
}

// TestTheSchemaCatchesAMockThatStrays derives wrong answers and requests
// from right ones and asserts the check rejects each: the mock cannot drift
// from the vendor's document unnoticed, nor the adapter's requests.
func TestTheSchemaCatchesAMockThatStrays(t *testing.T) {
	e := newEnv(t, lambda.Config{})
	_, id := e.launch(t, spec("train"))
	e.api.Settle()
	get := e.Request(t, http.MethodGet, base+"/instances/"+id, "")
	instance := e.Answer(t, get)
	if err := e.Doc.CheckResponse(get, openapitest.JSONResponse(200, instance)); err != nil {
		t.Fatalf("the mock's own answer is rejected: %v", err)
	}
	launch := func(body string) *http.Request {
		return e.Request(t, http.MethodPost, base+"/instance-operations/launch", body)
	}
	if _, err := e.Doc.CheckRequest(launch(`{"region_name":"us-east-1","instance_type_name":"gpu_1x_h100_pcie","ssh_key_names":["k"]}`)); err != nil {
		t.Fatalf("a valid launch is rejected: %v", err)
	}

	for _, tc := range []struct {
		name string
		err  func() error
		want string // in the error
	}{
		{"instance status renamed to state", func() error {
			return e.Doc.CheckResponse(get, openapitest.JSONResponse(200, openapitest.Edit(t, instance, func(o map[string]any) {
				in := o["data"].(map[string]any)
				in["state"] = in["status"]
				delete(in, "status")
			})))
		}, "status"},
		{"instance status outside InstanceStatus", func() error {
			return e.Doc.CheckResponse(get, openapitest.JSONResponse(200, openapitest.Edit(t, instance, func(o map[string]any) {
				o["data"].(map[string]any)["status"] = "running"
			})))
		}, "status"},
		{"price as a string", func() error {
			return e.Doc.CheckResponse(get, openapitest.JSONResponse(200, openapitest.Edit(t, instance, func(o map[string]any) {
				o["data"].(map[string]any)["instance_type"].(map[string]any)["price_cents_per_hour"] = "249"
			})))
		}, "price_cents_per_hour"},
		{"401 without the suggestion ApiErrorUnauthorized requires", func() error {
			return e.Doc.CheckResponse(get, openapitest.JSONResponse(401,
				[]byte(`{"error":{"code":"global/invalid-api-key","message":"API key was invalid, expired, or deleted."}}`)))
		}, "suggestion"},
		{"an error code the status does not document", func() error {
			return e.Doc.CheckResponse(get, openapitest.JSONResponse(404,
				[]byte(`{"error":{"code":"global/not-found","message":"not found","suggestion":"none"}}`)))
		}, "code"},
		{"launch without region_name", func() error {
			_, err := e.Doc.CheckRequest(launch(`{"instance_type_name":"gpu_1x_h100_pcie","ssh_key_names":["k"]}`))
			return err
		}, "region_name"},
		{"launch with upper-case firewall protocol", func() error {
			_, err := e.Doc.CheckRequest(e.Request(t, http.MethodPost, base+"/firewall-rulesets",
				`{"name":"x","region":"us-east-1","rules":[{"protocol":"TCP","port_range":[22,22],"source_network":"0.0.0.0/0","description":"ssh"}]}`))
			return err
		}, "protocol"},
		{"an operation the document does not have", func() error {
			_, err := e.Doc.CheckRequest(e.Request(t, http.MethodGet, base+"/instances/"+id+"/console", ""))
			return err
		}, "no operation"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.err()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("the schema check let it through (or named the wrong field): %v", err)
			}
		})
	}
}

// TestLaunchCarriesTheRequestsLabelsAndTheTypesDisk: the caller's labels are
// launch tags beside the identity (their keys pass RequestedTagEntry's
// pattern, which the schema check above enforces on every launch body), and
// an offer's disk is its instance type's storage_gib.
func TestLaunchCarriesTheRequestsLabelsAndTheTypesDisk(t *testing.T) {
	e := newEnv(t, lambda.Config{LaunchInterval: 1})
	o, _ := e.launch(t, spec("tagged"))
	if o.DiskGB <= 0 {
		t.Errorf("offer %s has no disk; want its type's storage_gib", o.InstanceType)
	}
	ins := e.api.Instances()
	if len(ins) != 1 {
		t.Fatalf("%d instances", len(ins))
	}
	if tg := ins[0].Tags; tg["team"] != "ml" || tg["cost-center"] != "r-and-d" || tg[provider.LabelVM] != "tagged" || tg[provider.LabelInstallation] != installation {
		t.Errorf("instance tags %v; want the caller's labels and the identity", tg)
	}
}
