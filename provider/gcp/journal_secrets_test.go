package gcp_test

import (
	"encoding/json"
	"net/http"
	"regexp"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/auth"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/clock"
	"github.com/org/gpuprov/gpuprovtest"
	"github.com/org/gpuprov/internal/rest/resttest"
	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/gcp"
)

// roundTrip is an http.RoundTripper made of a function.
type roundTrip func(*http.Request) (*http.Response, error)

func (f roundTrip) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

var instanceInsert = regexp.MustCompile(`/zones/[^/]+/instances$`)

// gceEcho is Compute Engine's error envelope around an echoing gateway's
// text: backendError for a 500, authError for a 401.
func gceEcho(status int, echoed string) []byte {
	reason := "backendError"
	if status == http.StatusUnauthorized {
		reason = "authError"
	}
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"code": status, "message": echoed,
		"errors": []map[string]string{{"message": echoed, "domain": "global", "reason": reason}}}})
	return b
}

// TestJournalNeverHoldsTheAccessToken launches through the Provisioner,
// with the SQLite journal, on the adapter whose instances.insert goes
// through a gateway that echoes the request's bearer token (as sent, as
// Basic credentials, URL-encoded): first a 500 (retried), then a 401 (the
// launch aborts). The launch's error, every event the sink saw, and the
// journal file's bytes (and its -wal) hold no form of the token, while the
// masked echo is there to be read.
func TestJournalNeverHoldsTheAccessToken(t *testing.T) {
	const token = "ya29.a0AfB_journal+gpuprov/0123456789=abcdef"
	c, mt := newCloud(t)
	clk := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	t.Cleanup(clk.AutoAdvance())
	var inserts atomic.Int32
	echo := &http.Client{Transport: roundTrip(func(r *http.Request) (*http.Response, error) {
		if r.Method != http.MethodPost || !instanceInsert.MatchString(r.URL.Path) {
			return mt.RoundTrip(r)
		}
		status := http.StatusInternalServerError
		if inserts.Add(1) > 1 {
			status = http.StatusUnauthorized
		}
		return resttest.EchoResponse(r, status, gceEcho), nil
	})}
	creds := auth.NewCredentials(&auth.CredentialsOptions{TokenProvider: staticToken(token)})
	l := gpuprovtest.LaunchEchoed(t, clk, func(inst string) provider.CloudProvider {
		return c.provider(t, mt, gcp.Config{Regions: []string{"us-central1"}}, gcp.WithInstallation(inst),
			gcp.WithEndpoint(endpoint, echo), gcp.WithCredentials(creds))
	}, gpuprov.Request{Name: "train", GPU: "l4", Timeout: time.Hour})
	if inserts.Load() < 2 {
		t.Fatalf("%d inserts reached the echo, want the 500 and the 401", inserts.Load())
	}
	if calls := c.calls("/compute/v1/"); len(calls) == 0 || calls[0].Auth != "Bearer "+token {
		t.Fatalf("the requests did not carry the token: %+v", calls)
	}
	gpuprovtest.LaunchLeaks(t, map[string]string{"access token": token}, l)
}
