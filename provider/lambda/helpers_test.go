package lambda_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jarcoal/httpmock"
	"go.uber.org/goleak"

	"github.com/org/gpuprov/internal/openapitest"
	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/lambda"
	"github.com/org/gpuprov/provider/lambda/lambdamock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	apiKey       = "lambda-secret-key-0123456789"
	base         = "https://lambda.test/api/v1"
	installation = "inst-lambda"
)

var h100 = provider.ResourceRequest{GPU: "H100-80GB", GPUCount: 1}

// catalog: one H100 type with capacity in us-east-1 only, a dearer 8x type,
// and a GPU the canonical table does not know.
func catalog() []lambdamock.Type {
	return []lambdamock.Type{
		{Name: "gpu_1x_h100_pcie", GPUDescription: "H100 (80 GB PCIe)", PriceCents: 249, GPUs: 1, VCPUs: 26, MemoryGiB: 200, Regions: []string{"us-east-1"}},
		{Name: "gpu_1x_h100_sxm5", GPUDescription: "H100 (80 GB SXM5)", PriceCents: 329, GPUs: 1, VCPUs: 26, MemoryGiB: 225, Regions: []string{"us-west-3", "us-south-1"}},
		{Name: "gpu_8x_h100_sxm5", GPUDescription: "H100 (80 GB SXM5)", PriceCents: 2392, GPUs: 8, VCPUs: 208, MemoryGiB: 1800, Regions: nil},
		{Name: "gpu_1x_rtx6000", GPUDescription: "RTX 6000 (24 GB)", PriceCents: 50, GPUs: 1, VCPUs: 14, MemoryGiB: 46, Regions: []string{"us-east-1"}},
	}
}

type env struct {
	api  *lambdamock.API
	mt   *httpmock.MockTransport
	doc  *openapitest.Doc  // the vendor's schema every request and answer is checked against
	rt   http.RoundTripper // mt behind doc's checks
	p    *lambda.Provider
	logs *bytes.Buffer
	now  time.Time
}

func newEnv(t *testing.T, cfg lambda.Config) *env {
	t.Helper()
	e := &env{api: lambdamock.New(apiKey, catalog()...), mt: httpmock.NewMockTransport(), logs: &bytes.Buffer{},
		now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	e.api.Register(e.mt, base)
	e.doc = vendorSchema(t)
	e.rt = e.doc.Transport(t, e.mt)
	cfg.APIKey = apiKey
	log := slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	p, err := lambda.New(cfg, lambda.WithName("lambda"), lambda.WithInstallation(installation), lambda.WithLogger(log),
		lambda.WithHTTP(base, &http.Client{Transport: e.rt}), lambda.WithNow(func() time.Time { return e.now }))
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

// vendorSchema is the Lambda Cloud API's OpenAPI document 1.8.3
// (testdata/README.md), served at base's host.
func vendorSchema(t testing.TB) *openapitest.Doc {
	return openapitest.Load(t, "testdata/openapi.json", "https://lambda.test", undocumented...)
}

// undocumented are the statuses Lambda answers that 1.8.3 lists for no
// operation; their bodies go unchecked.
var undocumented = []openapitest.Option{
	openapitest.UndocumentedStatus(http.StatusTooManyRequests, "rate limits (docs/clouds/lambda.md: ~1 request/s, 1 launch per 12 s)"),
	openapitest.UndocumentedStatus(http.StatusInternalServerError, "any server"),
	openapitest.UndocumentedStatus(http.StatusBadGateway, "any gateway"),
	openapitest.UndocumentedStatus(http.StatusServiceUnavailable, "any gateway"),
	openapitest.UndocumentedStatus(http.StatusGatewayTimeout, "any gateway"),
}

func spec(vm string) *provider.InstanceSpec {
	return &provider.InstanceSpec{VM: vm, Installation: installation, Attempt: 1, SSHUser: "ubuntu",
		AuthorizedKeys: []string{"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJ5Vf0zdfBx5i9nRYkuGAOI4dqnA7BD6IVn0i60HNmDH user@host"},
		HostKey:        &provider.HostKey{PrivatePEM: "-----BEGIN OPENSSH PRIVATE KEY-----\nHOSTKEYSECRET\n-----END OPENSSH PRIVATE KEY-----\n", Public: "ssh-ed25519 AAAAhost"},
		OpenPorts:      []provider.Port{{Number: 6443, Protocol: "tcp"}},
		UserLabels:     map[string]string{"team": "ml", "cost-center": "r-and-d"}}
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
	ctx := context.Background()
	o := e.offer(t)
	prep, err := e.p.Prepare(ctx, &o, s)
	if err != nil {
		t.Fatalf("prepare: %v", err)
	}
	id, err := e.p.Create(ctx, &o, prep, s)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	return o, id
}

func kindOf(t *testing.T, err error, want provider.ErrorKind) *provider.Error {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want %s", want)
	}
	if got := provider.KindOf(err); got != want {
		t.Fatalf("kind %s, want %s: %v", got, want, err)
	}
	pe, _ := err.(*provider.Error)
	if strings.Contains(err.Error(), apiKey) {
		t.Fatalf("the API key appears in an error: %v", err)
	}
	return pe
}
