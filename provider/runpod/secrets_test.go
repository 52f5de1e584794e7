package runpod_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/org/gpuprov/internal/rest/resttest"
	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/runpod"
)

// leakyKey has characters that URL-encode, so its encoded forms differ.
const leakyKey = "rpa_gpuprov+runpod/0123456789=abcdef"

// echoProblem is RunPod's problem shape (ErrorResponse) around a gateway's
// echo of the credentials, with the echo in detail and errors.
func echoProblem(status int, echoed string) []byte {
	b, _ := json.Marshal(map[string]any{"title": http.StatusText(status), "status": status, "detail": echoed, "errors": []string{echoed}})
	return b
}

// TestErrorsNeverCarryTheKey: a gateway in front of RunPod echoes the
// Authorization header (plain, Basic-encoded, URL-encoded) in 401 and 500
// bodies and in a header. No primitive's error holds any form of the key.
func TestErrorsNeverCarryTheKey(t *testing.T) {
	srv := resttest.Echo(t, echoProblem)
	p, err := runpod.New(runpod.Config{APIKey: leakyKey}, runpod.WithInstallation(installation), runpod.WithHTTP(srv.URL+"/v2", srv.Client()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	loc := provider.Location{Region: "US-TX-3"}
	offer := provider.Offer{Provider: "runpod", Location: loc,
		Detail: json.RawMessage(`{"gpuTypeId":"NVIDIA H100 80GB HBM3","count":1,"cloud":"SECURE","dataCenterId":"US-TX-3"}`)}
	for _, status := range []int{http.StatusUnauthorized, http.StatusInternalServerError} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			srv.SetStatus(status)
			resttest.NoLeak(t, leakyKey, true, map[string]func() error{
				"plan":     func() error { req := h100; _, err := p.Plan(ctx, &req); return err },
				"create":   func() error { _, err := p.Create(ctx, &offer, json.RawMessage(`{}`), spec("train")); return err },
				"observe":  func() error { _, err := p.Observe(ctx, loc, "train"); return err },
				"list":     func() error { _, err := p.List(ctx, loc); return err },
				"delete":   func() error { return p.Delete(ctx, loc, "train", []string{"pod0123"}) },
				"diagnose": func() error { _, err := p.Diagnose(ctx, loc, "train", "pod0123"); return err },
				"create volume": func() error {
					_, err := p.CreateVolume(ctx, provider.VolumeSpec{Name: "data", Installation: installation, SizeGB: 10, Location: loc})
					return err
				},
				"observe volume": func() error { _, err := p.ObserveVolume(ctx, loc, "data"); return err },
				"detach volume":  func() error { return p.DetachVolume(ctx, loc, "vol0123", "pod0123") },
				"delete volume":  func() error { return p.DeleteVolume(ctx, loc, "vol0123") },
			})
		})
	}
}
