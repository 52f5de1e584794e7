package main

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/org/gpuprov/internal/rest/resttest"
)

// TestCLIOutputNeverHoldsTheKey runs the CLI against a Lambda endpoint (its
// base_url set in the config) behind a gateway that echoes the request's
// credentials: the catalog and the SSH-key calls answer as Lambda does, the
// launch is refused 401 with the Authorization header (plain, Basic- and
// URL-encoded) in its body and a header. Neither `up` nor the read commands
// after it print any form of the key on stdout or stderr, and the journal
// file does not hold it; the masked echo is printed, so the error reached
// the user.
func TestCLIOutputNeverHoldsTheKey(t *testing.T) {
	const key = "secret_cli+gpuprov/0123456789=abcdef"
	srv := resttest.Echo(t, func(status int, echoed string) []byte {
		b, _ := json.Marshal(map[string]any{"error": map[string]string{"code": "global/invalid-api-key", "message": echoed}})
		return b
	})
	srv.SetStatus(http.StatusUnauthorized)
	srv.Pass(func(w http.ResponseWriter, r *http.Request) bool {
		path := strings.TrimPrefix(r.URL.Path, "/api/v1")
		var data any
		switch {
		case r.Method == http.MethodGet && path == "/instance-types":
			data = map[string]any{"gpu_1x_h100_pcie": map[string]any{
				"instance_type": map[string]any{"name": "gpu_1x_h100_pcie", "description": "1x H100 (80 GB PCIe)",
					"gpu_description": "H100 (80 GB PCIe)", "price_cents_per_hour": 249,
					"specs": map[string]int{"vcpus": 26, "memory_gib": 200, "storage_gib": 1024, "gpus": 1}},
				"regions_with_capacity_available": []map[string]string{{"name": "us-east-1", "description": "Virginia, USA"}}}}
		case r.Method == http.MethodGet:
			data = []any{} // instances, ssh-keys, firewall-rulesets: none
		case r.Method == http.MethodPost && path == "/ssh-keys":
			var in map[string]string
			_ = json.NewDecoder(r.Body).Decode(&in)
			data = map[string]string{"id": "0920582c7ff041399e34823a0be62549", "name": in["name"], "public_key": in["public_key"]}
		case r.Method == http.MethodDelete:
			data = map[string]any{}
		default:
			return false // the launch: the echoing 401
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"data": data})
		return true
	})

	c := newCLIEnv(t)
	c.writeConfig(`[lambda]
api_key = "` + key + `"
base_url = "` + srv.URL + `/api/v1"
no_firewall = true
requests_per_second = 100
burst = 10
launch_interval = "1ms"
`)
	var out strings.Builder
	up := c.run("up", "--gpu", "h100", "--name", "leak", "--provider", "lambda")
	if up.code == 0 {
		t.Fatalf("up succeeded against a 401:\n%s\n%s", up.stdout, up.stderr)
	}
	out.WriteString(up.stdout + up.stderr)
	for _, args := range [][]string{{"show", "leak"}, {"show", "leak", "-o", "json"}, {"list"}, {"list", "-o", "json"}} {
		r := c.run(args...)
		out.WriteString(r.stdout + r.stderr)
	}
	if f := resttest.Leaks(out.String(), key); len(f) > 0 {
		t.Errorf("the CLI printed the key as %q:\n%s", f, out.String())
	}
	if !strings.Contains(up.stdout+up.stderr, "[REDACTED]") || !strings.Contains(up.stdout+up.stderr, "invalid-api-key") {
		t.Errorf("up did not show the (masked) refusal:\n%s\n%s", up.stdout, up.stderr)
	}
	var journal []byte
	for _, f := range []string{"journal.db", "journal.db-wal"} {
		b, err := os.ReadFile(filepath.Join(c.stateDir(), f))
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		journal = append(journal, b...)
	}
	if len(journal) == 0 {
		t.Fatal("no journal was written")
	}
	if f := resttest.Leaks(string(journal), key); len(f) > 0 {
		t.Errorf("the journal holds the key as %q", f)
	}
}
