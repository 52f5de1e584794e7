package vastai_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/org/gpuprov/internal/rest/resttest"
	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/vastai"
)

// leakyKey has characters that URL-encode, so its encoded forms differ.
const leakyKey = "vast_gpuprov+key/0123456789=abcdef"

// echoError is Vast's error shape around a gateway's echo of the
// credentials: the echo in msg and in detail (the 429 shape).
func echoError(status int, echoed string) []byte {
	b, _ := json.Marshal(map[string]any{"success": false, "error": "auth_error", "msg": echoed, "detail": echoed})
	return b
}

// TestErrorsNeverCarryTheKey: a gateway in front of Vast echoes the
// Authorization header (plain, Basic-encoded, URL-encoded) in 401 and 500
// bodies and in a header. No primitive's error holds any form of the key;
// the create reaches its accept (the listing before it answers empty).
func TestErrorsNeverCarryTheKey(t *testing.T) {
	srv := resttest.Echo(t, echoError)
	p, err := vastai.New(vastai.Config{APIKey: leakyKey}, vastai.WithInstallation(installation), vastai.WithHTTP(srv.URL, srv.Client()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	loc := provider.Location{Region: "US", Zone: "machine-5001"}
	offer := provider.Offer{Provider: "vastai", Location: loc, DiskGB: 50, Detail: json.RawMessage(`{"ask_id":101,"machine_id":5001}`)}
	for _, status := range []int{http.StatusUnauthorized, http.StatusInternalServerError} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			srv.SetStatus(status)
			srv.Pass(nil)
			resttest.NoLeak(t, leakyKey, true, map[string]func() error{
				"plan":     func() error { req := h100; _, err := p.Plan(ctx, &req); return err },
				"observe":  func() error { _, err := p.Observe(ctx, loc, "train"); return err },
				"list":     func() error { _, err := p.List(ctx, loc); return err },
				"delete":   func() error { return p.Delete(ctx, loc, "train", []string{"7000001"}) },
				"diagnose": func() error { _, err := p.Diagnose(ctx, loc, "train", "7000001"); return err },
			})
			srv.Pass(func(w http.ResponseWriter, r *http.Request) bool {
				if r.Method != http.MethodGet || !strings.HasPrefix(r.URL.Path, "/api/v1/instances") {
					return false
				}
				w.Header().Set("Content-Type", "application/json")
				_, _ = w.Write([]byte(`{"success":true,"instances":[],"next_token":null}`))
				return true
			})
			resttest.NoLeak(t, leakyKey, true, map[string]func() error{
				"create": func() error { _, err := p.Create(ctx, &offer, json.RawMessage(`{}`), spec("train")); return err },
			})
		})
	}
}

// TestACreateErrorNeverCarriesTheHostKey: an answer that echoes the
// create's body (the onstart script with the injected host key) in its
// msg. The error the core journals holds no line of the private key.
func TestACreateErrorNeverCarriesTheHostKey(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.Method == http.MethodGet {
			_, _ = w.Write([]byte(`{"success":true,"instances":[],"next_token":null}`))
			return
		}
		body, _ := io.ReadAll(r.Body)
		w.WriteHeader(http.StatusBadRequest)
		b, _ := json.Marshal(map[string]any{"success": false, "error": "invalid_args", "msg": "Invalid args: " + string(body)})
		_, _ = w.Write(b)
	}))
	t.Cleanup(srv.Close)
	p, err := vastai.New(vastai.Config{APIKey: leakyKey, InjectHostKey: true}, vastai.WithInstallation(installation), vastai.WithHTTP(srv.URL, srv.Client()))
	if err != nil {
		t.Fatal(err)
	}
	s := spec("train")
	lines := []string{"b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW", "QyNTUxOQAAACCfF8xY2V0ZWQgc2VjcmV0IGtleSBsaW5lIHR3bwAAAJhbm9ueW1vdXM"}
	s.HostKey = &provider.HostKey{PrivatePEM: "-----BEGIN OPENSSH PRIVATE KEY-----\n" + strings.Join(lines, "\n") + "\n-----END OPENSSH PRIVATE KEY-----\n",
		Public: "ssh-ed25519 AAAAhost"}
	offer := provider.Offer{Provider: "vastai", Location: provider.Location{Region: "US", Zone: "machine-5001"}, Detail: json.RawMessage(`{"ask_id":101}`)}
	_, err = p.Create(context.Background(), &offer, nil, s)
	if provider.KindOf(err) != provider.InvalidRequest || !strings.Contains(err.Error(), "[REDACTED]") {
		t.Fatalf("error %v: want an invalid request with the echo masked", err)
	}
	for _, l := range lines {
		if strings.Contains(err.Error(), l) {
			t.Fatalf("the error holds a line of the private host key: %v", err)
		}
	}
}
