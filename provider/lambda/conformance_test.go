package lambda_test

import (
	"testing"

	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/lambda"
	"github.com/org/gpuprov/provider/providertest"
)

func TestConformance(t *testing.T) {
	var e *env
	providertest.Run(t, providertest.Harness{
		New: func(t *testing.T) provider.CloudProvider {
			e = newEnv(t, lambda.Config{LaunchInterval: 1})
			return e.p
		},
		Request:      h100,
		Installation: installation,
		Settle:       func(*testing.T) { e.api.Settle() },
		Break:        func(_ *testing.T, id string) { e.api.SetStatus(id, "unhealthy") },
	})
}
