package vastai_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/jarcoal/httpmock"

	"github.com/org/gpuprov/internal/openapitest"
	"github.com/org/gpuprov/internal/rest/resttest"
	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/vastai"
	"github.com/org/gpuprov/provider/vastai/vastmock"
)

const (
	apiKey       = "vast_SECRETKEY0123456789abcdef"
	base         = "https://vast.test"
	installation = "0123456789abcdef"
)

var h100 = provider.ResourceRequest{GPU: "H100-80GB", GPUCount: 1}

// market is the mock's offers: two H100 asks that pass the default filters
// (the PCIe one in Canada is cheaper), and asks each filter removes.
func market() []vastmock.Offer {
	return []vastmock.Offer{
		{ID: 101, MachineID: 5001, HostID: 71, GPUName: "H100 SXM", NumGPUs: 1, GPURAMMB: 81559, DPH: 2.10, Reliability: 0.995,
			Verified: true, Geolocation: "Texas, US", DiskSpace: 500, CPUCores: 24, CPURAMMB: 257000},
		{ID: 102, MachineID: 5002, HostID: 72, GPUName: "H100 PCIE", NumGPUs: 1, GPURAMMB: 81559, DPH: 1.85, Reliability: 0.97,
			Verified: true, Geolocation: "Quebec, CA", DiskSpace: 300, CPUCores: 16, CPURAMMB: 128000},
		{ID: 103, MachineID: 5003, HostID: 73, GPUName: "H100 SXM", NumGPUs: 1, GPURAMMB: 81559, DPH: 1.50, Reliability: 0.90,
			Verified: true, Geolocation: "Oregon, US", DiskSpace: 500, CPUCores: 24, CPURAMMB: 257000}, // below 0.95
		{ID: 104, MachineID: 5004, HostID: 74, GPUName: "H100 SXM", NumGPUs: 1, GPURAMMB: 81559, DPH: 1.60, Reliability: 0.99,
			Verified: false, Geolocation: "Bavaria, DE", DiskSpace: 500, CPUCores: 24, CPURAMMB: 257000}, // unverified
		{ID: 105, MachineID: 5005, HostID: 75, GPUName: "A100 SXM4", NumGPUs: 1, GPURAMMB: 81920, DPH: 1.20, Reliability: 0.99,
			Verified: true, Geolocation: "Texas, US", DiskSpace: 500, CPUCores: 16, CPURAMMB: 128000},
		{ID: 106, MachineID: 5006, HostID: 76, GPUName: "A100 SXM4", NumGPUs: 1, GPURAMMB: 40960, DPH: 0.90, Reliability: 0.99,
			Verified: true, Geolocation: "Texas, US", DiskSpace: 500, CPUCores: 16, CPURAMMB: 128000},
		{ID: 107, MachineID: 5007, HostID: 77, GPUName: "RTX 3090", NumGPUs: 1, GPURAMMB: 24576, DPH: 0.20, Reliability: 0.99,
			Verified: true, Geolocation: "Texas, US", DiskSpace: 500, CPUCores: 8, CPURAMMB: 64000},
		{ID: 108, MachineID: 5008, HostID: 78, GPUName: "H100 SXM", NumGPUs: 2, GPURAMMB: 81559, DPH: 4.00, Reliability: 0.99,
			Verified: true, Geolocation: "Texas, US", DiskSpace: 500, CPUCores: 48, CPURAMMB: 514000},
	}
}

type env struct {
	*resttest.Env // the mock's transport behind the vendor's schema, the logs
	api           *vastmock.API
	p             *vastai.Provider
}

func newEnv(t *testing.T, cfg vastai.Config, offers ...vastmock.Offer) *env {
	t.Helper()
	if offers == nil {
		offers = market()
	}
	e := &env{Env: resttest.NewEnv(t, apiKey, vendorSchema(t)), api: vastmock.New(apiKey, offers...)}
	e.api.Register(e.MT, base)
	cfg.APIKey = apiKey
	p, err := vastai.New(cfg, vastai.WithInstallation(installation), vastai.WithLogger(e.Log), vastai.WithHTTP(base, e.Client()))
	if err != nil {
		t.Fatal(err)
	}
	e.p = p
	t.Cleanup(func() {
		if strings.Contains(e.Logs.String(), "PRIVATE KEY") {
			t.Error("a private host key appears in the adapter's logs")
		}
	})
	return e
}

// vendorSchema is Vast's OpenAPI document, trimmed (testdata/README.md),
// served at base.
func vendorSchema(t testing.TB) *openapitest.Doc {
	return openapitest.Load(t, "testdata/openapi.json", base, undocumented...)
}

// undocumented are the statuses Vast answers where its document lists them
// for no operation the adapter calls; their bodies go unchecked.
var undocumented = []openapitest.Option{
	openapitest.UndocumentedStatus(http.StatusUnauthorized, "searchOffers (404 instead) and destroyInstance list no 401; showInstance's 401 is {error: auth_error, msg: Invalid user key}"),
	openapitest.UndocumentedStatus(http.StatusPaymentRequired, "createInstance documents no out-of-credit answer; the mock's 402 {msg: Insufficient credit} is an assumption (docs/clouds/vastai.md)"),
	openapitest.UndocumentedStatus(http.StatusTooManyRequests, "searchOffers lists no 429; every other operation answers {detail: API requests too frequent endpoint threshold=N}"),
	openapitest.UndocumentedStatus(http.StatusInternalServerError, "no operation lists 5xx"),
	openapitest.UndocumentedStatus(http.StatusBadGateway, "no operation lists 5xx"),
	openapitest.UndocumentedStatus(http.StatusServiceUnavailable, "no operation lists 5xx"),
}

func spec(vm string) *provider.InstanceSpec {
	return &provider.InstanceSpec{VM: vm, Installation: installation, Attempt: 1, SSHUser: "root",
		AuthorizedKeys: []string{"ssh-ed25519 AAAAfirst user@a", "ssh-ed25519 AAAAsecond user@b"}}
}

func (e *env) offer(t *testing.T) provider.Offer { return resttest.Offer(t, e.p, h100) }

func (e *env) launch(t *testing.T, s *provider.InstanceSpec) (provider.Offer, string) {
	return resttest.Launch(t, e.p, h100, s)
}

func kindOf(t *testing.T, err error, want provider.ErrorKind) *provider.Error {
	return resttest.Kind(t, err, want, apiKey)
}

// newMockTransport serves api at base.
func newMockTransport(api *vastmock.API) *httpmock.MockTransport {
	mt := httpmock.NewMockTransport()
	api.Register(mt, base)
	return mt
}
