package vastai_test

import (
	"strconv"
	"testing"

	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/providertest"
	"github.com/org/gpuprov/provider/vastai"
)

func TestConformance(t *testing.T) {
	var e *env
	providertest.Run(t, providertest.Harness{
		New: func(t *testing.T) provider.CloudProvider {
			e = newEnv(t, vastai.Config{})
			return e.p
		},
		Request:      h100,
		Installation: installation,
		Settle:       func(*testing.T) { e.api.Settle() },
		Break: func(t *testing.T, id string) {
			n, err := strconv.ParseInt(id, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			e.api.SetStatus(n, "exited")
		},
	})
}
