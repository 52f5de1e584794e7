package runpod_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/org/gpuprov/internal/openapitest"
	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/runpod"
	"github.com/org/gpuprov/provider/runpod/runpodmock"
)

// Every test's traffic goes through RunPod's REST API v2 OpenAPI document
// (testdata/openapi.json; newEnv wraps the mock's transport): a request the
// adapter sends or an answer the mock serves that the document does not
// allow fails the test that made it.

// TestEveryPrimitiveAgainstTheVendorSchema runs every primitive, and the
// error answers the adapter branches on, through the schema check, and
// asserts that each operation of the trimmed document was exercised.
func TestEveryPrimitiveAgainstTheVendorSchema(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, runpod.Config{})
	o, id := e.launch(t, spec("train")) // Plan, Prepare, Create
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
	if d, err := e.p.Diagnose(ctx, o.Location, "train", "podgone"); err != nil || d.Exists { // 404
		t.Fatalf("diagnose gone: %+v %v", d, err)
	}
	e.api.Fail(runpodmock.Fault{Method: http.MethodPost, Path: "/pods", Status: 400, Detail: runpodmock.CapacityDetail, Times: 1})
	prep, err := e.p.Prepare(ctx, &o, spec("second"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.p.Create(ctx, &o, prep, spec("second")); provider.KindOf(err) != provider.Capacity {
		t.Fatalf("capacity: %v", err)
	}
	_, member := e.launch(t, spec("member"))
	e.api.JoinCluster(member, "cluster_abc123")
	if err := e.p.Delete(ctx, o.Location, "member", []string{member}); provider.KindOf(err) != provider.Failed { // 409
		t.Fatalf("cluster pod: %v", err)
	}
	if err := e.p.Delete(ctx, o.Location, "train", []string{id, "poddead"}); err != nil { // 204, then 404: gone
		t.Fatal(err)
	}
	if err := e.p.Cleanup(ctx, o.Location, "train"); err != nil {
		t.Fatal(err)
	}

	// Network volumes: create (list, data center, POST), a create sent
	// again (list), a pod created with it (GET volume), observe, the
	// delete refused while held (400), done (204) and again (404), a pod
	// with a volume that is gone (404).
	vspec := provider.VolumeSpec{Name: "data", Installation: installation, SizeGB: 10, Location: o.Location}
	v, err := e.p.CreateVolume(ctx, vspec)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := e.p.CreateVolume(ctx, vspec); err != nil || again.ID != v.ID {
		t.Fatalf("volume create sent again: %+v %v", again, err)
	}
	withVolume := spec("with-volume")
	withVolume.Volumes = []provider.VolumeMount{{ID: v.ID, Name: "data", MountPath: "/data"}}
	pod, err := e.p.Create(ctx, &o, nil, withVolume)
	if err != nil {
		t.Fatal(err)
	}
	if seen, err := e.p.ObserveVolume(ctx, o.Location, "data"); err != nil || seen == nil || seen.AttachedTo != pod {
		t.Fatalf("observe volume: %+v %v", seen, err)
	}
	if err := e.p.Delete(ctx, o.Location, "with-volume", []string{pod}); err != nil {
		t.Fatal(err)
	}
	e.api.HoldVolume(v.ID, true)
	if err := e.p.DeleteVolume(ctx, o.Location, v.ID); !errors.Is(err, provider.ErrInUse) { // 400
		t.Fatalf("held volume: %v", err)
	}
	e.api.HoldVolume(v.ID, false)
	for range 2 { // 204, then 404
		if err := e.p.DeleteVolume(ctx, o.Location, v.ID); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.p.Create(ctx, &o, nil, withVolume); provider.KindOf(err) != provider.InvalidRequest { // GET volume 404
		t.Fatalf("create with a deleted volume: %v", err)
	}

	wrong, _ := runpod.New(runpod.Config{APIKey: "wrong"}, runpod.WithHTTP(base, e.Client()))
	req := h100
	if _, err := wrong.Plan(ctx, &req); provider.KindOf(err) != provider.Credentials { // 401
		t.Fatalf("wrong key: %v", err)
	}

	e.Exercised(t, "POST /v2/pods 400", "POST /v2/pods 201", "GET /v2/catalog/gpus 401",
		"GET /v2/pods/{id} 404", "DELETE /v2/pods/{id} 204", "DELETE /v2/pods/{id} 404", "DELETE /v2/pods/{id} 409",
		"POST /v2/network-volumes 201", "GET /v2/network-volumes 200", "GET /v2/catalog/datacenters/{id} 200",
		"GET /v2/network-volumes/{id} 200", "GET /v2/network-volumes/{id} 404",
		"DELETE /v2/network-volumes/{id} 400", "DELETE /v2/network-volumes/{id} 204", "DELETE /v2/network-volumes/{id} 404")
}

// TestTheSchemaCatchesAMockThatStrays derives wrong answers and requests
// from right ones and asserts the check rejects each.
func TestTheSchemaCatchesAMockThatStrays(t *testing.T) {
	e := newEnv(t, runpod.Config{})
	_, id := e.launch(t, spec("train"))
	e.api.Settle()
	get := e.Request(t, http.MethodGet, base+"/pods/"+id, "")
	pod := e.Answer(t, get)
	if err := e.Doc.CheckResponse(get, openapitest.JSONResponse(200, pod)); err != nil {
		t.Fatalf("the mock's own answer is rejected: %v", err)
	}
	create := func(body string) *http.Request { return e.Request(t, http.MethodPost, base+"/pods", body) }
	volumeCreate := func(body string) *http.Request { return e.Request(t, http.MethodPost, base+"/network-volumes", body) }
	vid := e.api.AddVolume(runpodmock.Volume{Name: "gpuprov--data", DataCenter: "US-TX-3", Size: 10})
	getVolume := e.Request(t, http.MethodGet, base+"/network-volumes/"+vid, "")
	volume := e.Answer(t, getVolume)
	if err := e.Doc.CheckResponse(getVolume, openapitest.JSONResponse(200, volume)); err != nil {
		t.Fatalf("the mock's own volume is rejected: %v", err)
	}
	if _, err := e.Doc.CheckRequest(create(`{"name":"x","image":"runpod/base","gpu":{"id":"NVIDIA H100 80GB HBM3","count":1},"cloud":"SECURE"}`)); err != nil {
		t.Fatalf("a valid create is rejected: %v", err)
	}
	problem := func(status int, body string) error {
		r := openapitest.JSONResponse(status, []byte(body))
		r.Header.Set("Content-Type", "application/problem+json")
		return e.Doc.CheckResponse(get, r)
	}
	for _, tc := range []struct {
		name string
		err  func() error
		want string
	}{
		{"pod status renamed to desiredStatus (the v1 name)", func() error {
			return e.Doc.CheckResponse(get, openapitest.JSONResponse(200, openapitest.Edit(t, pod, func(o map[string]any) {
				o["desiredStatus"] = o["status"]
				delete(o, "status")
			})))
		}, "status"},
		{"pod status outside PodStatus", func() error {
			return e.Doc.CheckResponse(get, openapitest.JSONResponse(200, openapitest.Edit(t, pod, func(o map[string]any) {
				o["status"] = "READY"
			})))
		}, "status"},
		{"public port as a string", func() error {
			return e.Doc.CheckResponse(get, openapitest.JSONResponse(200, openapitest.Edit(t, pod, func(o map[string]any) {
				o["runtime"].(map[string]any)["ports"].([]any)[0].(map[string]any)["public"] = "40022"
			})))
		}, "public"},
		{"an error that is not a problem document", func() error { return problem(404, `{"error":"pod not found"}`) }, "detail"},
		{"create with the cloud in lower case", func() error {
			_, err := e.Doc.CheckRequest(create(`{"name":"x","image":"runpod/base","gpu":{"id":"g"},"cloud":"secure"}`))
			return err
		}, "cloud"},
		{"create with a field CreatePodRequest does not have", func() error {
			_, err := e.Doc.CheckRequest(create(`{"name":"x","image":"runpod/base","gpu":{"id":"g"},"gpuTypeId":"g"}`))
			return err
		}, "gpuTypeId"},
		{"create without an image or a template", func() error {
			_, err := e.Doc.CheckRequest(create(`{"name":"x","gpu":{"id":"g"}}`))
			return err
		}, "image"},
		{"create with two network volumes", func() error {
			_, err := e.Doc.CheckRequest(create(`{"name":"x","image":"runpod/base","gpu":{"id":"g"},` +
				`"mounts":{"network":[{"volumeId":"a","path":"/a"},{"volumeId":"b","path":"/b"}]}}`))
			return err
		}, "network"},
		{"network mount named as in v1 (networkVolumeId, volumeMountPath)", func() error {
			_, err := e.Doc.CheckRequest(create(`{"name":"x","image":"runpod/base","gpu":{"id":"g"},"networkVolumeId":"a","volumeMountPath":"/a"}`))
			return err
		}, "networkVolumeId"},
		{"volume create with dataCenterId (the v1 name)", func() error {
			_, err := e.Doc.CheckRequest(volumeCreate(`{"name":"x","size":10,"dataCenterId":"US-TX-3"}`))
			return err
		}, "dataCenterId"},
		{"volume create below 10 GB", func() error {
			_, err := e.Doc.CheckRequest(volumeCreate(`{"name":"x","size":5,"dataCenter":"US-TX-3"}`))
			return err
		}, "size"},
		{"volume without its type", func() error {
			return e.Doc.CheckResponse(getVolume, openapitest.JSONResponse(200, openapitest.Edit(t, volume, func(o map[string]any) {
				delete(o, "type")
			})))
		}, "type"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.err()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("the schema check let it through (or named the wrong field): %v", err)
			}
		})
	}
}

// TestCreateSizesTheContainerDisk: an offer's disk is the configured
// container disk; a disk the core raised for Request.DiskGB is sent as
// "disk" (BaseContainerConfig: container disk in GB, minimum 1).
func TestCreateSizesTheContainerDisk(t *testing.T) {
	e := newEnv(t, runpod.Config{})
	o, _ := e.launch(t, spec("small"))
	if o.DiskGB != 50 {
		t.Fatalf("offer disk %d GB; want the default container disk, 50", o.DiskGB)
	}
	o.DiskGB = 400
	if _, err := e.p.Create(context.Background(), &o, nil, spec("big")); err != nil {
		t.Fatal(err)
	}
	creates := e.api.Calls(http.MethodPost, "/pods")
	var body struct{ Disk int }
	if err := json.Unmarshal(creates[len(creates)-1].Body, &body); err != nil || body.Disk != 400 {
		t.Fatalf("disk %d (%v); want 400", body.Disk, err)
	}
}
