package primeintellect_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/org/gpuprov/internal/openapitest"
	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/primeintellect"
	"github.com/org/gpuprov/provider/primeintellect/primemock"
)

// Every test's traffic goes through Prime Intellect's compute API OpenAPI
// document (testdata/openapi.json; newEnv wraps the mock's transport): a
// request the adapter sends or an answer the mock serves that the document
// does not allow fails the test that made it.

// TestEveryPrimitiveAgainstTheVendorSchema runs every primitive, and the
// error answers the adapter branches on, through the schema check, and
// asserts that each operation of the trimmed document was exercised.
func TestEveryPrimitiveAgainstTheVendorSchema(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, primeintellect.Config{})
	o, id := e.launch(t, spec("train"))              // Plan, Prepare, Create
	prep, err := e.p.Prepare(ctx, &o, spec("train")) // adopts the key
	if err != nil {
		t.Fatal(err)
	}
	e.api.Settle()
	if obs, err := e.p.Observe(ctx, o.Location, "train"); err != nil || len(obs) != 1 || obs[0].SSH == nil {
		t.Fatalf("observe: %+v %v", obs, err)
	}
	if vms, err := e.p.List(ctx, o.Location); err != nil || len(vms) != 1 {
		t.Fatalf("list: %+v %v", vms, err)
	}
	if d, err := e.p.Diagnose(ctx, o.Location, "train", id); err != nil || !d.Exists {
		t.Fatalf("diagnose: %+v %v", d, err)
	}
	e.api.Fail(primemock.Fault{Method: http.MethodPost, Path: "/pods/", Status: 400, Body: `{"detail":"This configuration is out of stock"}`, Times: 1})
	if _, err := e.p.Create(ctx, &o, prep, spec("second")); provider.KindOf(err) != provider.Capacity {
		t.Fatalf("capacity: %v", err)
	}
	e.api.Fail(primemock.Fault{Method: http.MethodPost, Path: "/pods/", Status: 422,
		Body: `{"errors":[{"param":"pod.gpuCount","details":"Input should be greater than 0"}]}`, Times: 1})
	if _, err := e.p.Create(ctx, &o, prep, spec("second")); provider.KindOf(err) != provider.InvalidRequest {
		t.Fatalf("422: %v", err)
	}
	if err := e.p.Delete(ctx, o.Location, "train", []string{id, "00000000-0000-4000-8000-00000000dead"}); err != nil { // 200, then 404: gone
		t.Fatal(err)
	}
	e.api.Settle()
	if d, err := e.p.Diagnose(ctx, o.Location, "train", id); err != nil || d.Exists { // 404, then the history
		t.Fatalf("diagnose gone: %+v %v", d, err)
	}
	if err := e.p.Cleanup(ctx, o.Location, "train"); err != nil {
		t.Fatal(err)
	}
	wrong, _ := primeintellect.New(primeintellect.Config{APIKey: "wrong"}, primeintellect.WithHTTP(base, e.Client()))
	req := h100
	if _, err := wrong.Plan(ctx, &req); provider.KindOf(err) != provider.Credentials { // 401
		t.Fatalf("wrong key: %v", err)
	}

	e.Exercised(t, "POST /api/v1/pods/ 422", "GET /api/v1/availability/gpus 401",
		"DELETE /api/v1/pods/{pod_id} 200", "DELETE /api/v1/ssh_keys/{key_id} 200")
}

// TestTheSchemaCatchesAMockThatStrays derives wrong answers and requests
// from right ones and asserts the check rejects each.
func TestTheSchemaCatchesAMockThatStrays(t *testing.T) {
	e := newEnv(t, primeintellect.Config{})
	_, id := e.launch(t, spec("train"))
	e.api.Settle()
	get := e.Request(t, http.MethodGet, base+"/pods/"+id, "")
	pod := e.Answer(t, get)
	if err := e.Doc.CheckResponse(get, openapitest.JSONResponse(200, pod)); err != nil {
		t.Fatalf("the mock's own answer is rejected: %v", err)
	}
	create := func(body string) *http.Request { return e.Request(t, http.MethodPost, base+"/pods/", body) }
	if _, err := e.Doc.CheckRequest(create(`{"pod":{"cloudId":"c","gpuType":"H100_80GB","socket":"SXM5","gpuCount":1},"provider":{"type":"runpod"}}`)); err != nil {
		t.Fatalf("a valid create is rejected: %v", err)
	}
	for _, tc := range []struct {
		name string
		err  func() error
		want string
	}{
		{"gpuName renamed to gpuType (the availability field's name)", func() error {
			return e.Doc.CheckResponse(get, openapitest.JSONResponse(200, openapitest.Edit(t, pod, func(o map[string]any) {
				o["gpuType"] = o["gpuName"]
				delete(o, "gpuName")
			})))
		}, "gpuName"},
		{"pod status outside PodStatusEnum", func() error {
			return e.Doc.CheckResponse(get, openapitest.JSONResponse(200, openapitest.Edit(t, pod, func(o map[string]any) {
				o["status"] = "RUNNING"
			})))
		}, "status"},
		{"priceHr as a string", func() error {
			return e.Doc.CheckResponse(get, openapitest.JSONResponse(200, openapitest.Edit(t, pod, func(o map[string]any) {
				o["priceHr"] = "1.0"
			})))
		}, "priceHr"},
		{"422 in FastAPI's default shape instead of ErrorResponse", func() error {
			return e.Doc.CheckResponse(get, openapitest.JSONResponse(422, []byte(`{"detail":[{"loc":["path","pod_id"],"msg":"bad"}]}`)))
		}, "errors"},
		{"create without provider", func() error {
			_, err := e.Doc.CheckRequest(create(`{"pod":{"cloudId":"c","gpuType":"H100_80GB","socket":"SXM5","gpuCount":1}}`))
			return err
		}, "provider"},
		{"create with an image outside EnvironmentTypeEnum", func() error {
			_, err := e.Doc.CheckRequest(create(`{"pod":{"cloudId":"c","gpuType":"H100_80GB","socket":"SXM5","gpuCount":1,"image":"nvidia/cuda:12.4"},"provider":{"type":"runpod"}}`))
			return err
		}, "image"},
		{"create with a field PodRequestConfig does not have", func() error {
			_, err := e.Doc.CheckRequest(create(`{"pod":{"cloudId":"c","gpuType":"H100_80GB","socket":"SXM5","gpuCount":1,"sshKey":"k"},"provider":{"type":"runpod"}}`))
			return err
		}, "sshKey"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.err()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("the schema check let it through (or named the wrong field): %v", err)
			}
		})
	}
}
