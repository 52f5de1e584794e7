package runpod_test

import (
	"testing"

	"github.com/org/gpuprov/internal/openapitest"
	"github.com/org/gpuprov/internal/rest/resttest"
	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/runpod"
	"github.com/org/gpuprov/provider/runpod/runpodmock"
)

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
	*resttest.Env // the mock's transport behind the vendor's schema, the logs
	api           *runpodmock.API
	p             *runpod.Provider
}

func newEnv(t *testing.T, cfg runpod.Config) *env {
	t.Helper()
	e := &env{Env: resttest.NewEnv(t, apiKey, vendorSchema(t)), api: runpodmock.New(apiKey, gpus()...)}
	e.api.Register(e.MT, base)
	cfg.APIKey = apiKey
	p, err := runpod.New(cfg, runpod.WithInstallation(installation), runpod.WithLogger(e.Log), runpod.WithHTTP(base, e.Client()))
	if err != nil {
		t.Fatal(err)
	}
	e.p = p
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

func (e *env) offers(t *testing.T) []provider.Offer { return resttest.Offers(t, e.p, h100) }

func (e *env) offer(t *testing.T) provider.Offer { return resttest.Offer(t, e.p, h100) }

func (e *env) launch(t *testing.T, s *provider.InstanceSpec) (provider.Offer, string) {
	return resttest.Launch(t, e.p, h100, s)
}

func kindOf(t *testing.T, err error, want provider.ErrorKind) *provider.Error {
	return resttest.Kind(t, err, want, apiKey)
}

// undocumented: every operation RunPod's document lists has a default
// answer (ErrorResponse), so no status goes unchecked.
var undocumented []openapitest.Option
