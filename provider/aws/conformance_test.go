package aws_test

import (
	"testing"
	"time"

	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/providertest"
)

// The adapter passes the kit every adapter passes, against the stateful
// fake of EC2.
func TestConformance(t *testing.T) {
	var e *env
	providertest.Run(t, providertest.Harness{
		New: func(t *testing.T) provider.CloudProvider {
			e = newEnv(t, awsConfig())
			return e.p
		},
		Request:      l4,
		Installation: installation,
		Settle:       func(t *testing.T) { e.clk.Advance(bootTime + deleteTime + time.Second) },
		Break: func(t *testing.T, id string) {
			e.f.setState(id, "stopped", "Server.InsufficientInstanceCapacity")
		},
	})
}
