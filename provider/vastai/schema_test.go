package vastai_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/org/gpuprov/internal/openapitest"
	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/vastai"
	"github.com/org/gpuprov/provider/vastai/vastmock"
)

// Every test's traffic goes through Vast's OpenAPI document
// (testdata/openapi.json; newEnv wraps the mock's transport): a request the
// adapter sends or an answer the mock serves that the document does not
// allow fails the test that made it.

// TestEveryPrimitiveAgainstTheVendorSchema runs every primitive, and the
// error answers the adapter branches on, through the schema check, and
// asserts that each operation of the trimmed document was exercised.
func TestEveryPrimitiveAgainstTheVendorSchema(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, vastai.Config{InjectHostKey: true})
	s := spec("train")
	s.HostKey = &provider.HostKey{PrivatePEM: "-----BEGIN OPENSSH PRIVATE KEY-----\nAAAA\n-----END OPENSSH PRIVATE KEY-----\n", Public: "ssh-ed25519 BBBB"}
	o, id := e.launch(t, s) // Plan, Prepare, Create
	e.api.Settle()
	if obs, err := e.p.Observe(ctx, o.Location, "train"); err != nil || len(obs) != 1 || obs[0].SSH == nil {
		t.Fatalf("observe: %+v %v", obs, err)
	}
	if vms, err := e.p.List(ctx, provider.Location{}); err != nil || len(vms) != 1 {
		t.Fatalf("list: %+v %v", vms, err)
	}
	if d, err := e.p.Diagnose(ctx, o.Location, "train", id); err != nil || !d.Exists {
		t.Fatalf("diagnose: %+v %v", d, err)
	}
	req := h100
	offers, _ := e.p.Plan(ctx, &req)
	next := offers[0] // the ask taken above is off the market
	e.api.Snipe(101)
	if _, err := e.p.Create(ctx, &next, nil, spec("second")); provider.KindOf(err) != provider.Capacity { // 410
		t.Fatalf("taken ask: %v", err)
	}
	if _, err := e.p.Create(ctx, &o, nil, spec("third")); provider.KindOf(err) != provider.Capacity { // 404: rented already
		t.Fatalf("rented ask: %v", err)
	}
	e.api.Fail(vastmock.Fault{Method: http.MethodPut, Path: "/api/v0/asks/", Status: 400, Error: "invalid_args",
		Msg: "error 400/3467: Invalid args: 'id' is required and must be a valid offer ID", Times: 1}) // createInstance 400's example
	if _, err := e.p.Create(ctx, &next, nil, spec("fourth")); provider.KindOf(err) != provider.InvalidRequest {
		t.Fatalf("invalid args: %v", err)
	}
	if err := e.p.Delete(ctx, o.Location, "train", []string{id, "123456"}); err != nil { // 200, then 404: gone
		t.Fatal(err)
	}
	if err := e.p.Cleanup(ctx, o.Location, "train"); err != nil {
		t.Fatal(err)
	}
	wrong, _ := vastai.New(vastai.Config{APIKey: "wrong-key-0000"}, vastai.WithHTTP(base, e.Client()))
	if _, err := wrong.Plan(ctx, &req); provider.KindOf(err) != provider.Credentials { // 404 Invalid user key
		t.Fatalf("wrong key: %v", err)
	}
	if _, err := wrong.List(ctx, provider.Location{}); provider.KindOf(err) != provider.Credentials { // 401
		t.Fatalf("wrong key: %v", err)
	}

	e.Exercised(t, "POST /api/v0/bundles 200", "POST /api/v0/bundles 404", "PUT /api/v0/asks/{id} 200",
		"PUT /api/v0/asks/{id} 400", "PUT /api/v0/asks/{id} 404", "PUT /api/v0/asks/{id} 410", "GET /api/v1/instances 200",
		"GET /api/v1/instances 401", "DELETE /api/v0/instances/{id} 200", "DELETE /api/v0/instances/{id} 404")
}

// TestTheSchemaCatchesAMockThatStrays derives wrong answers and requests
// from right ones and asserts the check rejects each.
func TestTheSchemaCatchesAMockThatStrays(t *testing.T) {
	e := newEnv(t, vastai.Config{})
	e.launch(t, spec("train"))
	e.api.Settle()
	get := e.Request(t, http.MethodGet, base+"/api/v1/instances/?limit=25", "")
	page := e.Answer(t, get)
	if err := e.Doc.CheckResponse(get, openapitest.JSONResponse(200, page)); err != nil {
		t.Fatalf("the mock's own answer is rejected: %v", err)
	}
	put := func(body string) *http.Request { return e.Request(t, http.MethodPut, base+"/api/v0/asks/101/", body) }
	if _, err := e.Doc.CheckRequest(put(`{"image":"vastai/base-image:@vastai-automatic-tag","disk":50,"label":"x","runtype":"ssh"}`)); err != nil {
		t.Fatalf("a valid create is rejected: %v", err)
	}
	editInstance := func(edit func(map[string]any)) func() error {
		return func() error {
			return e.Doc.CheckResponse(get, openapitest.JSONResponse(200, openapitest.Edit(t, page, func(o map[string]any) {
				edit(o["instances"].([]any)[0].(map[string]any))
			})))
		}
	}
	for _, tc := range []struct {
		name string
		err  func() error
		want string
	}{
		{"ssh_port as a string", editInstance(func(in map[string]any) { in["ssh_port"] = "10600" }), "ssh_port"},
		{"ports as a list", editInstance(func(in map[string]any) { in["ports"] = []any{"22/tcp"} }), "ports"},
		{"next_token as a number", func() error {
			return e.Doc.CheckResponse(get, openapitest.JSONResponse(200, openapitest.Edit(t, page, func(o map[string]any) { o["next_token"] = 2 })))
		}, "next_token"},
		{"new_contract as a string", func() error {
			return e.Doc.CheckResponse(put(`{"image":"x"}`), openapitest.JSONResponse(200, []byte(`{"success":true,"new_contract":"7000001"}`)))
		}, "new_contract"},
		{"a create 400 with a code outside the document's", func() error {
			return e.Doc.CheckResponse(put(`{"image":"x"}`), openapitest.JSONResponse(400, []byte(`{"success":false,"error":"disk_too_big","msg":"?"}`)))
		}, "error"},
		{"the CLI's runtype string, outside the enum", func() error {
			_, err := e.Doc.CheckRequest(put(`{"image":"x","runtype":"ssh_direc ssh_proxy"}`))
			return err
		}, "runtype"},
		{"a create without an image", func() error {
			_, err := e.Doc.CheckRequest(put(`{"label":"x"}`))
			return err
		}, "image"},
		{"a search sorted on one key (the document wants two)", func() error {
			_, err := e.Doc.CheckRequest(e.Request(t, http.MethodPost, base+"/api/v0/bundles/", `{"order":[["dph_total","asc"]]}`))
			return err
		}, "order"},
		{"a listing page over 25", func() error {
			_, err := e.Doc.CheckRequest(e.Request(t, http.MethodGet, base+"/api/v1/instances/?limit=50", ""))
			return err
		}, "limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.err()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("the schema check let it through (or named the wrong field): %v", err)
			}
		})
	}
}
