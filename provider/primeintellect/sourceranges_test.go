package primeintellect_test

import (
	"testing"

	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/primeintellect"
)

// TestPrimeCannotRestrictWhoConnects: createPod's pod config has no setting
// for who may connect (Prime Intellect compute API 0.1.0,
// api-evangelist/prime-intellect openapi/_original/prime-intellect-compute-api-openapi.yml,
// POST /api/v1/pods/: pod {name, cloudId, gpuType, socket, gpuCount, image,
// dataCenterId, country, security (secure_cloud | community_cloud: the
// provider tier), sshKeyId, envVars, ...}). Capabilities lists source
// ranges as unsupported, so the core plans no Prime offer for a request
// that restricts its sources.
func TestPrimeCannotRestrictWhoConnects(t *testing.T) {
	p, err := primeintellect.New(primeintellect.Config{APIKey: apiKey})
	if err != nil {
		t.Fatal(err)
	}
	if p.Capabilities().Supports(provider.FeatureSourceRanges) {
		t.Fatal("Capabilities does not list source ranges as unsupported")
	}
}
