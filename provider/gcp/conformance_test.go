package gcp_test

import (
	"testing"

	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/gcp"
	"github.com/org/gpuprov/provider/providertest"
)

// The adapter passes the kit every adapter passes, against the stateful
// mock of the Compute API.
func TestConformance(t *testing.T) {
	var c *cloud
	providertest.Run(t, providertest.Harness{
		New: func(t *testing.T) provider.CloudProvider {
			cl, mt := newCloud(t)
			c = cl
			return c.provider(t, mt, gcp.Config{})
		},
		Request:      provider.ResourceRequest{GPU: "L4", GPUCount: 1},
		Installation: installation,
		Settle:       func(t *testing.T) { c.settle() },
		Break: func(t *testing.T, id string) {
			c.settle()
			c.setStatus(id, "TERMINATED", "Instance terminated by a host error")
		},
	})
}
