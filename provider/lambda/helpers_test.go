package lambda_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/org/gpuprov/internal/openapitest"
	"github.com/org/gpuprov/internal/rest/resttest"
	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/lambda"
	"github.com/org/gpuprov/provider/lambda/lambdamock"
)

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
	*resttest.Env                  // the mock's transport behind the vendor's schema, the logs
	fsDoc         *openapitest.Doc // the schema of the filesystem operations (filesystemSchema)
	api           *lambdamock.API
	p             *lambda.Provider
	now           time.Time
}

func newEnv(t *testing.T, cfg lambda.Config) *env {
	t.Helper()
	e := &env{Env: resttest.NewEnv(t, apiKey, vendorSchema(t)), api: lambdamock.New(apiKey, catalog()...),
		now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	e.api.Register(e.MT, base)
	e.fsDoc = filesystemSchema(t)
	e.RT = byPath{fs: e.fsDoc.Transport(t, e.MT), rest: e.RT}
	cfg.APIKey = apiKey
	p, err := lambda.New(cfg, lambda.WithName("lambda"), lambda.WithInstallation(installation), lambda.WithLogger(e.Log),
		lambda.WithHTTP(base, e.Client()), lambda.WithNow(func() time.Time { return e.now }))
	if err != nil {
		t.Fatal(err)
	}
	e.p = p
	return e
}

// vendorSchema is the Lambda Cloud API's OpenAPI document 1.8.3
// (testdata/README.md), served at base's host.
func vendorSchema(t testing.TB) *openapitest.Doc {
	return openapitest.Load(t, "testdata/openapi.json", "https://lambda.test", undocumented...)
}

// filesystemSchema is the filesystem operations of the same document
// (testdata/openapi-filesystems.json, testdata/README.md), trimmed apart
// so that openapi.json, whose lines docs/clouds/lambda.md cites, stays as
// it is.
func filesystemSchema(t testing.TB) *openapitest.Doc {
	return openapitest.Load(t, "testdata/openapi-filesystems.json", "https://lambda.test", undocumented...)
}

// byPath sends the filesystem operations through fs, the rest through rest.
type byPath struct{ fs, rest http.RoundTripper }

func (b byPath) RoundTrip(r *http.Request) (*http.Response, error) {
	if strings.HasPrefix(r.URL.Path, "/api/v1/file-systems") || strings.HasPrefix(r.URL.Path, "/api/v1/filesystems") {
		return b.fs.RoundTrip(r)
	}
	return b.rest.RoundTrip(r)
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

func (e *env) offers(t *testing.T) []provider.Offer { return resttest.Offers(t, e.p, h100) }

func (e *env) offer(t *testing.T) provider.Offer { return resttest.Offer(t, e.p, h100) }

func (e *env) launch(t *testing.T, s *provider.InstanceSpec) (provider.Offer, string) {
	return resttest.Launch(t, e.p, h100, s)
}

func kindOf(t *testing.T, err error, want provider.ErrorKind) *provider.Error {
	return resttest.Kind(t, err, want, apiKey)
}
