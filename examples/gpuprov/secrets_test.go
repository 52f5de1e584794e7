package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jarcoal/httpmock"

	"github.com/org/gpuprov/internal/rest/resttest"
	"github.com/org/gpuprov/provider/lambda"
	"github.com/org/gpuprov/provider/lambda/lambdamock"
	"github.com/org/gpuprov/provider/primeintellect/primemock"
	"github.com/org/gpuprov/provider/runpod/runpodmock"
)

// echoCloud is a marketplace the CLI is pointed at through its base_url
// key: the adapter's fake of the vendor's API (registered on an httpmock
// transport at fakeBase+root) answers every call but the create, which an
// echoing gateway answers in the vendor's error shape (body).
type echoCloud struct {
	name   string
	root   string // the API root's path, as in base_url: "/api/v1"
	fake   func(key string, mt *httpmock.MockTransport, base string)
	create func(r *http.Request) bool
	body   func(status int, echoed string) []byte
	config string // the section's keys beside api_key and base_url
}

const fakeBase = "https://fake.test"

var echoClouds = []echoCloud{
	{name: "lambda", root: "/api/v1",
		fake: func(key string, mt *httpmock.MockTransport, base string) {
			lambdamock.New(key, lambdamock.Type{Name: "gpu_1x_h100_pcie", GPUDescription: "H100 (80 GB PCIe)", PriceCents: 249,
				GPUs: 1, VCPUs: 26, MemoryGiB: 200, Regions: []string{"us-east-1"}}).Register(mt, base)
		},
		create: func(r *http.Request) bool {
			return r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/instance-operations/launch")
		},
		body: func(status int, echoed string) []byte {
			code := lambda.CodeInternal
			if status == http.StatusUnauthorized {
				code = lambda.CodeInvalidAPIKey
			}
			b, _ := json.Marshal(map[string]any{"error": map[string]string{"code": code, "message": echoed, "suggestion": "check " + echoed}})
			return b
		},
		config: "no_firewall = true\nrequests_per_second = 100\nburst = 10\nlaunch_interval = \"1ms\"\nconsistency_window = \"10ms\"\n"},
	{name: "runpod", root: "/v2",
		fake: func(key string, mt *httpmock.MockTransport, base string) {
			runpodmock.New(key, runpodmock.GPU{ID: "NVIDIA H100 80GB HBM3", Name: "H100 SXM", Memory: 80, Secure: 2.99, MaxCount: 8,
				DataCenters: map[string]string{"US-TX-3": "HIGH"}}).Register(mt, base)
		},
		create: func(r *http.Request) bool {
			return r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/v2/pods")
		},
		body: func(status int, echoed string) []byte {
			return []byte(`{"title":"` + http.StatusText(status) + `","status":` + strconv.Itoa(status) + `,"detail":` + strconv.Quote(echoed) + `}`)
		},
		config: "clouds = [\"SECURE\"]\nrequests_per_second = 100\nburst = 10\nconsistency_window = \"10ms\"\n"},
	{name: "primeintellect", root: "/api/v1",
		fake: func(key string, mt *httpmock.MockTransport, base string) {
			primemock.New(key, primemock.Item{CloudID: "h100-us", GPUType: "H100_80GB", Socket: "SXM5", Provider: "dc_roan",
				Region: "united_states", DataCenter: "US-1", Country: "US", Security: "secure_cloud", Stock: "Low", GPUCount: 1,
				GPUMemory: 80, Price: 1.99}).Register(mt, base)
		},
		create: func(r *http.Request) bool {
			return r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/pods/")
		},
		body:   func(status int, echoed string) []byte { return []byte(`{"detail":` + strconv.Quote(echoed) + `}`) },
		config: "requests_per_second = 100\nburst = 10\nconsistency_window = \"10ms\"\n"},
}

// forward answers r on w with what mt answers the same request sent to
// fakeBase.
func forward(t *testing.T, mt http.RoundTripper, w http.ResponseWriter, r *http.Request) {
	u, err := url.Parse(fakeBase + r.URL.RequestURI())
	if err != nil {
		t.Error(err)
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	req := r.Clone(r.Context())
	req.URL, req.Host, req.RequestURI = u, u.Host, ""
	resp, err := mt.RoundTrip(req)
	if err != nil && r.Context().Err() != nil {
		// The CLI hung up (its --timeout ended the call under way): the
		// fake was never asked, and nobody reads the answer.
		w.WriteHeader(http.StatusBadGateway)
		return
	}
	if err != nil {
		t.Errorf("the fake did not answer %s %s: %v", r.Method, r.URL, err)
		w.WriteHeader(http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, vs := range resp.Header {
		w.Header()[k] = vs
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

// TestCLIOutputNeverHoldsTheKey runs the CLI against each marketplace (its
// base_url set in the config) behind a gateway that echoes the request's
// credentials when it refuses the create: the other calls are answered by
// the adapter's fake of the vendor's API, the create with a 401 or a 500
// in the vendor's error shape with the Authorization header (plain, Basic-
// and URL-encoded) in its body and a header. Neither `up` (the 500 one
// retried until its --timeout) nor the read commands after it print any
// form of the key on stdout or stderr, and the journal file (with its
// -wal) does not hold it; the masked echo is both printed and journaled, so
// the refusal reached the user and the journal.
func TestCLIOutputNeverHoldsTheKey(t *testing.T) {
	for _, cl := range echoClouds {
		for _, status := range []int{http.StatusUnauthorized, http.StatusInternalServerError} {
			t.Run(cl.name+"/"+strconv.Itoa(status), func(t *testing.T) {
				key := "secret_" + cl.name + "+gpuprov/0123456789=abcdef"
				mt := httpmock.NewMockTransport()
				cl.fake(key, mt, fakeBase+cl.root)
				srv := resttest.Echo(t, cl.body)
				srv.SetStatus(status)
				var echoed atomic.Int32
				srv.Pass(func(w http.ResponseWriter, r *http.Request) bool {
					if cl.create(r) {
						echoed.Add(1)
						return false // the echoing refusal
					}
					forward(t, mt, w, r)
					return true
				})

				c := newCLIEnv(t)
				c.writeConfig("[" + cl.name + "]\napi_key = \"" + key + "\"\nbase_url = \"" + srv.URL + cl.root + "\"\n" + cl.config)
				args := []string{"up", "--gpu", "h100", "--name", "leak", "--provider", cl.name}
				if status != http.StatusUnauthorized {
					args = append(args, "--timeout", "3s") // a 500 is retried until then
				}
				up := c.run(args...)
				if up.code == 0 {
					t.Fatalf("up succeeded against a %d:\n%s\n%s", status, up.stdout, up.stderr)
				}
				var out strings.Builder
				out.WriteString(up.stdout + up.stderr)
				for _, args := range [][]string{{"show", "leak"}, {"show", "leak", "-o", "json"}, {"list"}, {"list", "-o", "json"}} {
					r := c.run(args...)
					out.WriteString(r.stdout + r.stderr)
				}
				if f := resttest.Leaks(out.String(), key); len(f) > 0 {
					t.Errorf("the CLI printed the key as %q:\n%s", f, out.String())
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
				if !strings.Contains(up.stdout+up.stderr, "HTTP "+strconv.Itoa(status)) || !strings.Contains(up.stdout+up.stderr, "[REDACTED]") ||
					!strings.Contains(string(journal), "[REDACTED]") {
					t.Errorf("up or the journal does not show the (masked) %d:\n%s\n%s", status, up.stdout, up.stderr)
				}
				if echoed.Load() == 0 {
					t.Error("the create never reached the echo")
				}
			})
		}
	}
}
