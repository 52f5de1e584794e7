package lambda_test

import (
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jarcoal/httpmock"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/clock"
	"github.com/org/gpuprov/gpuprovtest"
	"github.com/org/gpuprov/internal/rest/resttest"
	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/lambda"
	"github.com/org/gpuprov/provider/lambda/lambdamock"
	"github.com/org/gpuprov/provider/primeintellect"
	"github.com/org/gpuprov/provider/primeintellect/primemock"
	"github.com/org/gpuprov/provider/runpod"
	"github.com/org/gpuprov/provider/runpod/runpodmock"
)

// TestJournalNeverHoldsTheKey launches through the Provisioner, with the
// SQLite journal, on each marketplace adapter whose create goes through a
// gateway that echoes the request's credentials: first a 500 (retried),
// then a 401 (the launch aborts). The launch's error, every event the sink
// saw, and the journal file's bytes (and its -wal) hold no form of the key,
// while the masked echo is there to be read.
func TestJournalNeverHoldsTheKey(t *testing.T) {
	for _, tc := range []struct {
		name   string
		create func(r *http.Request) bool
		body   func(status int, echoed string) []byte
		build  func(t *testing.T, key, inst string, hc func(*httpmock.MockTransport) *http.Client) provider.CloudProvider
	}{
		{"lambda", func(r *http.Request) bool {
			return r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/instance-operations/launch")
		}, echoError, func(t *testing.T, key, inst string, hc func(*httpmock.MockTransport) *http.Client) provider.CloudProvider {
			mt := httpmock.NewMockTransport()
			lambdamock.New(key, catalog()...).Register(mt, base)
			p, err := lambda.New(lambda.Config{APIKey: key, RequestsPerSecond: 1000, Burst: 100, ConsistencyWindow: time.Second, LaunchInterval: time.Nanosecond},
				lambda.WithInstallation(inst), lambda.WithHTTP(base, hc(mt)))
			if err != nil {
				t.Fatal(err)
			}
			return p
		}},
		{"runpod", func(r *http.Request) bool {
			return r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/v2/pods")
		}, func(status int, echoed string) []byte {
			return []byte(`{"title":"` + http.StatusText(status) + `","status":` + strconv.Itoa(status) + `,"detail":` + strconv.Quote(echoed) + `}`)
		}, func(t *testing.T, key, inst string, hc func(*httpmock.MockTransport) *http.Client) provider.CloudProvider {
			mt := httpmock.NewMockTransport()
			runpodmock.New(key, runpodmock.GPU{ID: "NVIDIA H100 80GB HBM3", Name: "H100 SXM", Memory: 80, Secure: 2.99, MaxCount: 8,
				DataCenters: map[string]string{"US-TX-3": "HIGH"}}).Register(mt, "https://runpod.test/v2")
			p, err := runpod.New(runpod.Config{APIKey: key, Clouds: []string{"SECURE"}, RequestsPerSecond: 1000, Burst: 100, ConsistencyWindow: time.Second},
				runpod.WithInstallation(inst), runpod.WithHTTP("https://runpod.test/v2", hc(mt)))
			if err != nil {
				t.Fatal(err)
			}
			return p
		}},
		{"primeintellect", func(r *http.Request) bool {
			return r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/pods/")
		}, func(status int, echoed string) []byte {
			return []byte(`{"detail":` + strconv.Quote(echoed) + `}`)
		}, func(t *testing.T, key, inst string, hc func(*httpmock.MockTransport) *http.Client) provider.CloudProvider {
			mt := httpmock.NewMockTransport()
			primemock.New(key, primemock.Item{CloudID: "h100-us", GPUType: "H100_80GB", Socket: "SXM5", Provider: "dc_roan",
				Region: "united_states", DataCenter: "US-1", Country: "US", Security: "secure_cloud", Stock: "Low", GPUCount: 1, GPUMemory: 80, Price: 1.99}).
				Register(mt, "https://prime.test/api/v1")
			p, err := primeintellect.New(primeintellect.Config{APIKey: key, RequestsPerSecond: 1000, Burst: 100, ConsistencyWindow: time.Second},
				primeintellect.WithInstallation(inst), primeintellect.WithHTTP("https://prime.test/api/v1", hc(mt)))
			if err != nil {
				t.Fatal(err)
			}
			return p
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "key_" + tc.name + "+gpuprov/0123456789=abcdef"
			clk := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
			t.Cleanup(clk.AutoAdvance())
			var creates atomic.Int32
			echo := func(mt *httpmock.MockTransport) *http.Client {
				return &http.Client{Transport: roundTrip(func(r *http.Request) (*http.Response, error) {
					if !tc.create(r) {
						return mt.RoundTrip(r)
					}
					status := http.StatusInternalServerError
					if creates.Add(1) > 1 {
						status = http.StatusUnauthorized
					}
					return resttest.EchoResponse(r, status, tc.body), nil
				})}
			}
			l := gpuprovtest.LaunchEchoed(t, clk, func(inst string) provider.CloudProvider { return tc.build(t, key, inst, echo) },
				gpuprov.Request{Name: "train", GPU: "h100", Timeout: time.Hour},
				gpuprov.WithSSH("root", []string{"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJ5Vf0zdfBx5i9nRYkuGAOI4dqnA7BD6IVn0i60HNmDH ops@example"}, true))
			if creates.Load() < 2 {
				t.Fatalf("%d creates reached the echo, want the 500 and the 401", creates.Load())
			}
			gpuprovtest.LaunchLeaks(t, map[string]string{"API key": key}, l)
		})
	}
}
