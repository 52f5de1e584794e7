package runpod_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/jarcoal/httpmock"
	"go.uber.org/goleak"

	"github.com/org/gpuprov/internal/openapitest"
	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/runpod"
	"github.com/org/gpuprov/provider/runpod/runpodmock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	apiKey       = "rpa_SECRETKEY0123456789"
	base         = "https://runpod.test/v2"
	installation = "inst-runpod"
)

var h100 = provider.ResourceRequest{GPU: "H100-80GB", GPUCount: 1}

func gpus() []runpodmock.GPU {
	return []runpodmock.GPU{
		{ID: "NVIDIA H100 80GB HBM3", Name: "H100 SXM", Memory: 80, Secure: 2.99, Community: 2.69, MaxCount: 8,
			DataCenters: map[string]string{"US-TX-3": "HIGH", "EU-RO-1": "LOW", "US-KS-2": "NONE"}},
		{ID: "NVIDIA H100 PCIe", Name: "H100 PCIe", Memory: 80, Secure: 2.39, MaxCount: 2,
			DataCenters: map[string]string{"US-CA-2": "MEDIUM"}},
		{ID: "AMD Instinct MI300X OAM", Name: "MI300X", Memory: 192, Secure: 2.49, MaxCount: 8,
			DataCenters: map[string]string{"EU-RO-1": "HIGH"}},
	}
}

type env struct {
	api  *runpodmock.API
	mt   *httpmock.MockTransport
	doc  *openapitest.Doc  // the vendor's schema every request and answer is checked against
	rt   http.RoundTripper // mt behind doc's checks
	p    *runpod.Provider
	logs *bytes.Buffer
}

func newEnv(t *testing.T, cfg runpod.Config) *env {
	t.Helper()
	e := &env{api: runpodmock.New(apiKey, gpus()...), mt: httpmock.NewMockTransport(), logs: &bytes.Buffer{}}
	e.api.Register(e.mt, base)
	e.doc = vendorSchema(t)
	e.rt = e.doc.Transport(t, e.mt)
	cfg.APIKey = apiKey
	log := slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	p, err := runpod.New(cfg, runpod.WithInstallation(installation), runpod.WithLogger(log), runpod.WithHTTP(base, &http.Client{Transport: e.rt}))
	if err != nil {
		t.Fatal(err)
	}
	e.p = p
	t.Cleanup(func() {
		if strings.Contains(e.logs.String(), apiKey) {
			t.Error("the API key appears in the adapter's logs")
		}
	})
	return e
}

// vendorSchema is the RunPod REST API v2 (2.0.0) OpenAPI document
// (testdata/README.md), served at base's host.
func vendorSchema(t testing.TB) *openapitest.Doc {
	return openapitest.Load(t, "testdata/openapi.json", "https://runpod.test", undocumented...)
}

func spec(vm string) *provider.InstanceSpec {
	return &provider.InstanceSpec{VM: vm, Installation: installation, Attempt: 1, SSHUser: "root",
		AuthorizedKeys: []string{"ssh-ed25519 AAAAfirst user@a", "ssh-ed25519 AAAAsecond user@b"}}
}

func (e *env) offer(t *testing.T) provider.Offer {
	t.Helper()
	req := h100
	offers, err := e.p.Plan(context.Background(), &req)
	if err != nil || len(offers) == 0 {
		t.Fatalf("plan: %d offers, %v", len(offers), err)
	}
	return offers[0]
}

func (e *env) launch(t *testing.T, s *provider.InstanceSpec) (provider.Offer, string) {
	t.Helper()
	o := e.offer(t)
	prep, err := e.p.Prepare(context.Background(), &o, s)
	if err != nil {
		t.Fatal(err)
	}
	id, err := e.p.Create(context.Background(), &o, prep, s)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	return o, id
}

func kindOf(t *testing.T, err error, want provider.ErrorKind) *provider.Error {
	t.Helper()
	if got := provider.KindOf(err); err == nil || got != want {
		t.Fatalf("kind %s, want %s: %v", got, want, err)
	}
	if strings.Contains(err.Error(), apiKey) {
		t.Fatalf("the API key appears in an error: %v", err)
	}
	pe, _ := err.(*provider.Error)
	return pe
}

// undocumented: every operation RunPod's document lists has a default
// answer (ErrorResponse), so no status goes unchecked.
var undocumented []openapitest.Option
