package primeintellect_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/org/gpuprov/internal/rest/resttest"
	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/primeintellect"
)

// leakyKey has characters that URL-encode, so its encoded forms differ.
const leakyKey = "pit_gpuprov+prime/0123456789=abcdef"

// echoDetail is Prime's FastAPI error shape around a gateway's echo of the
// credentials, with the documented 422 list beside it.
func echoDetail(status int, echoed string) []byte {
	b, _ := json.Marshal(map[string]any{"detail": echoed, "errors": []map[string]string{{"param": "authorization", "details": echoed}}})
	return b
}

// TestErrorsNeverCarryTheKey: a gateway in front of Prime echoes the
// Authorization header (plain, Basic-encoded, URL-encoded) in 401 and 500
// bodies and in a header. No primitive's error holds any form of the key.
func TestErrorsNeverCarryTheKey(t *testing.T) {
	srv := resttest.Echo(t, echoDetail)
	p, err := primeintellect.New(primeintellect.Config{APIKey: leakyKey}, primeintellect.WithInstallation(installation),
		primeintellect.WithHTTP(srv.URL+"/api/v1", srv.Client()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	loc := provider.Location{Region: "united_states"}
	offer := provider.Offer{Provider: "primeintellect", Location: loc,
		Detail: json.RawMessage(`{"cloudId":"c1","gpuType":"H100_80GB","socket":"SXM5","gpuCount":1,"provider":"runpod"}`)}
	for _, status := range []int{http.StatusUnauthorized, http.StatusInternalServerError} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			srv.SetStatus(status)
			resttest.NoLeak(t, leakyKey, true, map[string]func() error{
				"plan":    func() error { req := h100; _, err := p.Plan(ctx, &req); return err },
				"prepare": func() error { _, err := p.Prepare(ctx, &offer, spec("train")); return err },
				"create": func() error {
					_, err := p.Create(ctx, &offer, json.RawMessage(`{"sshKeyId":"k"}`), spec("train"))
					return err
				},
				"observe":  func() error { _, err := p.Observe(ctx, loc, "train"); return err },
				"list":     func() error { _, err := p.List(ctx, loc); return err },
				"delete":   func() error { return p.Delete(ctx, loc, "train", []string{"pod0123"}) },
				"cleanup":  func() error { return p.Cleanup(ctx, loc, "train") },
				"diagnose": func() error { _, err := p.Diagnose(ctx, loc, "train", "pod0123"); return err },
			})
		})
	}
}
