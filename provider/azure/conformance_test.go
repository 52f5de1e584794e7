package azure_test

import (
	"testing"

	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/azure"
	"github.com/org/gpuprov/provider/providertest"
)

// The adapter passes the kit every adapter passes, against the stateful
// mock of Azure Resource Manager: regional placement, and zonal.
func TestConformance(t *testing.T) {
	for name, cfg := range map[string]azure.Config{
		"regional":       {},
		"zonal":          {Regions: []string{"eastus", "westus2"}, Zones: []string{"1", "2"}},
		"resource group": {ResourceGroup: "shared-gpu"},
	} {
		t.Run(name, func(t *testing.T) {
			var c *cloud
			providertest.Run(t, providertest.Harness{
				New: func(t *testing.T) provider.CloudProvider {
					cl, mt := newCloud(t)
					c = cl
					if cfg.ResourceGroup != "" {
						c.rgs["shared-gpu"] = map[string]any{"name": "shared-gpu", "location": "eastus"}
					}
					return c.provider(t, mt, cfg)
				},
				Request:      t4,
				Installation: installation,
				Settle:       func(t *testing.T) { c.settle() },
				Break: func(t *testing.T, id string) {
					c.settle()
					c.setPower(id, "stopped")
				},
			})
		})
	}
}
