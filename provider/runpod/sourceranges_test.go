package runpod_test

import (
	"testing"

	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/runpod"
)

// TestRunPodCannotRestrictWhoConnects: createPod takes the ports to expose
// and nothing about who may reach them (runpod/docs
// api-reference-v2/openapi.json: CreatePodRequest, whose
// BaseContainerConfig.ports is "Exposed ports, formatted as
// port/protocol", with unevaluatedProperties false; docs.runpod.io
// pods/configuration/expose-ports: exposed ports are reachable from the
// internet). Capabilities lists source ranges as unsupported, so the core
// plans no RunPod offer for a request that restricts its sources.
func TestRunPodCannotRestrictWhoConnects(t *testing.T) {
	p, err := runpod.New(runpod.Config{APIKey: apiKey})
	if err != nil {
		t.Fatal(err)
	}
	if p.Capabilities().Supports(provider.FeatureSourceRanges) {
		t.Fatal("Capabilities does not list source ranges as unsupported")
	}
}
