package lambda_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/org/gpuprov/internal/rest/resttest"
	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/lambda"
)

// leakyKey has characters that URL-encode, so its encoded forms differ.
const leakyKey = "secret_gpuprov+lambda/0123456789=abcdef"

// echoError is Lambda's error shape around a gateway's echo of the
// credentials.
func echoError(status int, echoed string) []byte {
	code := lambda.CodeInternal
	if status == http.StatusUnauthorized {
		code = lambda.CodeInvalidAPIKey
	}
	b, _ := json.Marshal(map[string]any{"error": map[string]string{"code": code, "message": echoed, "suggestion": "check " + echoed}})
	return b
}

// TestErrorsNeverCarryTheKey: a gateway in front of Lambda echoes the
// Authorization header (plain, Basic-encoded, URL-encoded) in 401 and 500
// bodies and in a header. No primitive's error holds any form of the key,
// nor does the adapter's log.
func TestErrorsNeverCarryTheKey(t *testing.T) {
	srv := resttest.Echo(t, echoError)
	p, err := lambda.New(lambda.Config{APIKey: leakyKey}, lambda.WithInstallation(installation), lambda.WithHTTP(srv.URL+"/api/v1", srv.Client()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	loc := provider.Location{Region: "us-east-1"}
	offer := provider.Offer{Provider: "lambda", Location: loc, Detail: json.RawMessage(`{"instance_type":"gpu_1x_h100_pcie","region":"us-east-1"}`)}
	for _, status := range []int{http.StatusUnauthorized, http.StatusInternalServerError} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			srv.SetStatus(status)
			resttest.NoLeak(t, leakyKey, true, map[string]func() error{
				"plan":    func() error { req := h100; _, err := p.Plan(ctx, &req); return err },
				"prepare": func() error { _, err := p.Prepare(ctx, &offer, spec("train")); return err },
				"create": func() error {
					_, err := p.Create(ctx, &offer, json.RawMessage(`{"ssh_key":"k"}`), spec("train"))
					return err
				},
				"observe":  func() error { _, err := p.Observe(ctx, loc, "train"); return err },
				"list":     func() error { _, err := p.List(ctx, loc); return err },
				"delete":   func() error { return p.Delete(ctx, loc, "train", []string{"0123"}) },
				"cleanup":  func() error { return p.Cleanup(ctx, loc, "train") },
				"diagnose": func() error { _, err := p.Diagnose(ctx, loc, "train", "0123"); return err },
			})
		})
	}
}
