package azure_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/clock"
	"github.com/org/gpuprov/gpuprovtest"
	"github.com/org/gpuprov/internal/rest/resttest"
	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/azure"
)

// staticToken is a credential that hands out one known access token.
type staticToken string

func (s staticToken) GetToken(context.Context, policy.TokenRequestOptions) (azcore.AccessToken, error) {
	return azcore.AccessToken{Token: string(s), ExpiresOn: time.Now().Add(time.Hour)}, nil
}

// A proxy or gateway in front of ARM may echo the request's Authorization
// header in its error body. The access token must not reach the error of
// any primitive, whatever the status (401 is Credentials, 500 Transient),
// and the kind must still be decided from the answer.
func TestErrorsNeverCarryTheAccessToken(t *testing.T) {
	const token = "eyJ0eXAiOiJKV1QiLCJhbGciOiJSUzI1NiJ9.test-arm-access-token.0123456789abcdef"
	for _, tc := range []struct {
		status int
		kind   provider.ErrorKind
	}{
		{http.StatusUnauthorized, provider.Credentials},
		{http.StatusInternalServerError, provider.Transient},
	} {
		t.Run(http.StatusText(tc.status), func(t *testing.T) {
			c, mt := newCloud(t)
			p := c.provider(t, mt, azure.Config{}, azure.WithCredential(staticToken(token)))
			spec := newSpec(t, "leak")
			o := offerIn(t, p, t4, provider.Location{Region: "eastus"}, false)
			prep := []byte(`{"resource_group":"gpuprov-` + installation + `-eastus","nic":"/subscriptions/` + subscription +
				`/resourceGroups/g/providers/Microsoft.Network/networkInterfaces/n","image":{"publisher":"p","offer":"o","sku":"s","version":"latest"}}`)
			id := "/subscriptions/" + subscription + "/resourceGroups/gpuprov-" + installation + "-eastus/providers/Microsoft.Compute/virtualMachines/gpuprov-leak-1"
			c.echoAuth = tc.status
			resttest.NoLeak(t, token, true, map[string]func() error{
				"prepare": func() error { _, err := p.Prepare(context.Background(), &o, spec); return err },
				"create":  func() error { _, err := p.Create(context.Background(), &o, prep, spec); return err },
				"observe": func() error { _, err := p.Observe(context.Background(), o.Location, "leak"); return err },
				"list":    func() error { _, err := p.List(context.Background(), provider.Location{}); return err },
				"delete":  func() error { return p.Delete(context.Background(), o.Location, "leak", []string{id}) },
				"cleanup": func() error { return p.Cleanup(context.Background(), o.Location, "leak") },
				"diagnose": func() error {
					_, err := p.Diagnose(context.Background(), o.Location, "leak", id)
					return err
				},
			})
			for name, call := range map[string]func() error{
				"prepare": func() error { _, err := p.Prepare(context.Background(), &o, spec); return err },
				"observe": func() error { _, err := p.Observe(context.Background(), o.Location, "leak"); return err },
				"cleanup": func() error { return p.Cleanup(context.Background(), o.Location, "leak") },
			} {
				err := call()
				kindOf(t, err, tc.kind)
				if !strings.Contains(err.Error(), "Authorization: Bearer [REDACTED]") {
					t.Errorf("%s: %v", name, err)
				}
			}
			// The mock saw the token: it was sent, and masked on the way back.
			if calls := c.calls("", "/subscriptions/"); len(calls) == 0 || calls[0].Header.Get("Authorization") != "Bearer "+token {
				t.Fatalf("requests did not carry the token")
			}
		})
	}
}

// armEcho is ARM's error envelope around an echoing gateway's text.
func armEcho(status int, echoed string) []byte {
	code := "InternalServerError"
	if status == http.StatusUnauthorized {
		code = "InvalidAuthenticationToken"
	}
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"code": code, "message": echoed}})
	return b
}

// roundTrip is an http.RoundTripper made of a function.
type roundTrip func(*http.Request) (*http.Response, error)

func (f roundTrip) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

var vmPut = regexp.MustCompile(`/providers/Microsoft\.Compute/virtualMachines/[^/]+$`)

// TestJournalNeverHoldsTheAccessToken launches through the Provisioner,
// with the SQLite journal, on the adapter whose VM PUT goes through a
// gateway that echoes the request's bearer token (as sent, as Basic
// credentials, URL-encoded): first a 500 (retried), then a 401 (the launch
// aborts). The launch's error, every event the sink saw, and the journal
// file's bytes (and its -wal) hold no form of the token, while the masked
// echo is there to be read.
func TestJournalNeverHoldsTheAccessToken(t *testing.T) {
	const token = "eyJ0eXAi.journal+gpuprov/0123456789=abcdef"
	c, mt := newCloud(t)
	c.autoRun = true
	clk := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	t.Cleanup(clk.AutoAdvance())
	var puts atomic.Int32
	echo := &http.Client{Transport: roundTrip(func(r *http.Request) (*http.Response, error) {
		if r.Method != http.MethodPut || !vmPut.MatchString(r.URL.Path) {
			return mt.RoundTrip(r)
		}
		status := http.StatusInternalServerError
		if puts.Add(1) > 1 {
			status = http.StatusUnauthorized
		}
		return resttest.EchoResponse(r, status, armEcho), nil
	})}
	l := gpuprovtest.LaunchEchoed(t, clk, func(inst string) provider.CloudProvider {
		return c.provider(t, mt, azure.Config{Regions: []string{"eastus"}}, azure.WithInstallation(inst),
			azure.WithEndpoint(endpoint, echo), azure.WithCredential(staticToken(token)), azure.WithClock(clk))
	}, gpuprov.Request{Name: "train", GPU: "t4", Timeout: time.Hour})
	if puts.Load() < 2 {
		t.Fatalf("%d VM PUTs reached the echo, want the 500 and the 401", puts.Load())
	}
	if calls := c.calls("", "/subscriptions/"); len(calls) == 0 || calls[0].Header.Get("Authorization") != "Bearer "+token {
		t.Fatal("the requests did not carry the token")
	}
	gpuprovtest.LaunchLeaks(t, map[string]string{"access token": token}, l)
}

// failingToken is a credential that cannot get a token.
type failingToken struct{}

func (failingToken) GetToken(context.Context, policy.TokenRequestOptions) (azcore.AccessToken, error) {
	return azcore.AccessToken{}, errors.New("DefaultAzureCredential: failed to acquire a token: no credential in the environment")
}

// A credential that cannot get a token fails every primitive as
// Credentials (the core aborts), before any request is sent.
func TestNoTokenIsCredentials(t *testing.T) {
	c, mt := newCloud(t)
	p := c.provider(t, mt, azure.Config{}, azure.WithCredential(failingToken{}))
	_, err := p.Observe(context.Background(), provider.Location{Region: "eastus"}, "x")
	kindOf(t, err, provider.Credentials)
	o := offerIn(t, p, t4, provider.Location{Region: "eastus"}, false)
	_, err = p.Prepare(context.Background(), &o, newSpec(t, "x"))
	kindOf(t, err, provider.Credentials)
	if n := len(c.calls("", "/")); n != 0 {
		t.Fatalf("%d requests sent without a token", n)
	}
}
