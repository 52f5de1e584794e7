package primeintellect_test

import (
	"net/http"
	"testing"

	"github.com/org/gpuprov/internal/openapitest"
	"github.com/org/gpuprov/internal/rest/resttest"
	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/primeintellect"
	"github.com/org/gpuprov/provider/primeintellect/primemock"
)

const (
	apiKey       = "pit_secret_key_abcdef0123"
	base         = "https://prime.test/api/v1"
	installation = "inst-prime"
)

var h100 = provider.ResourceRequest{GPU: "H100-80GB", GPUCount: 1}

func items() []primemock.Item {
	return []primemock.Item{
		{CloudID: "h100-sxm-dc1", GPUType: "H100_80GB", Socket: "SXM5", Provider: "dc_roan", Region: "united_states", DataCenter: "US-1", Country: "US", Security: "secure_cloud", Stock: "Medium", GPUCount: 1, GPUMemory: 80, Price: 2.10},
		{CloudID: "h100-pcie-eu", GPUType: "H100_80GB", Socket: "PCIe", Provider: "runpod", Region: "eu_west", DataCenter: "EU-2", Country: "FR", Security: "community_cloud", Stock: "High", GPUCount: 1, GPUMemory: 80, Price: 1.90},
		{CloudID: "h100-gone", GPUType: "H100_80GB", Socket: "SXM5", Provider: "nebius", Region: "eu_north", DataCenter: "FI-1", Country: "FI", Security: "secure_cloud", Stock: "Unavailable", GPUCount: 1, GPUMemory: 80, Price: 1.50},
		{CloudID: "h100-x8", GPUType: "H100_80GB", Socket: "SXM5", Provider: "dc_roan", Region: "united_states", DataCenter: "US-1", Country: "US", Security: "secure_cloud", Stock: "High", GPUCount: 8, GPUMemory: 80, Price: 2.00},
		{CloudID: "b300", GPUType: "B300_262GB", Socket: "SXM6", Provider: "dc_roan", Region: "united_states", DataCenter: "US-1", Country: "US", Security: "secure_cloud", Stock: "High", GPUCount: 1, GPUMemory: 262, Price: 0.50},
	}
}

type env struct {
	*resttest.Env // the mock's transport behind the vendor's schema, the logs
	api           *primemock.API
	p             *primeintellect.Provider
}

func newEnv(t *testing.T, cfg primeintellect.Config, its ...primemock.Item) *env {
	t.Helper()
	if len(its) == 0 {
		its = items()
	}
	e := &env{Env: resttest.NewEnv(t, apiKey, vendorSchema(t)), api: primemock.New(apiKey, its...)}
	e.api.Register(e.MT, base)
	cfg.APIKey = apiKey
	p, err := primeintellect.New(cfg, primeintellect.WithInstallation(installation), primeintellect.WithLogger(e.Log),
		primeintellect.WithHTTP(base, e.Client()))
	if err != nil {
		t.Fatal(err)
	}
	e.p = p
	return e
}

// vendorSchema is the Prime Intellect compute API (0.1.0) OpenAPI document
// (testdata/README.md), served at base's host.
func vendorSchema(t testing.TB) *openapitest.Doc {
	return openapitest.Load(t, "testdata/openapi.json", "https://prime.test", undocumented...)
}

func spec(vm string) *provider.InstanceSpec {
	return &provider.InstanceSpec{VM: vm, Installation: installation, Attempt: 1, SSHUser: "root",
		AuthorizedKeys: []string{"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJ5Vf0zdfBx5i9nRYkuGAOI4dqnA7BD6IVn0i60HNmDH user@host"}}
}

func (e *env) offers(t *testing.T) []provider.Offer { return resttest.Offers(t, e.p, h100) }

func (e *env) offer(t *testing.T) provider.Offer { return resttest.Offer(t, e.p, h100) }

func (e *env) launch(t *testing.T, s *provider.InstanceSpec) (provider.Offer, string) {
	return resttest.Launch(t, e.p, h100, s)
}

func kindOf(t *testing.T, err error, want provider.ErrorKind) *provider.Error {
	return resttest.Kind(t, err, want, apiKey)
}

// undocumented are the statuses Prime Intellect answers that its document
// lists for no operation (it lists 200, 401 and 422); their bodies go
// unchecked.
var undocumented = []openapitest.Option{
	openapitest.UndocumentedStatus(http.StatusPaymentRequired, "the wallet (docs/clouds/primeintellect.md, from the shared notes)"),
	openapitest.UndocumentedStatus(http.StatusBadRequest, `observed {"detail": "..."} answers: out of stock, SSH key not found (docs/clouds/primeintellect.md)`),
	openapitest.UndocumentedStatus(http.StatusNotFound, `observed {"detail": "Pod not found"} (docs/clouds/primeintellect.md)`),
	openapitest.UndocumentedStatus(http.StatusTooManyRequests, "rate limits (docs/clouds/primeintellect.md)"),
	openapitest.UndocumentedStatus(http.StatusInternalServerError, "any server"),
	openapitest.UndocumentedStatus(http.StatusBadGateway, "any gateway"),
	openapitest.UndocumentedStatus(http.StatusServiceUnavailable, "any gateway"),
	openapitest.UndocumentedStatus(http.StatusGatewayTimeout, "any gateway"),
}
