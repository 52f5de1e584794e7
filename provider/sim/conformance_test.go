package sim_test

import (
	"testing"
	"time"

	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/providertest"
	"github.com/org/gpuprov/provider/sim/simserver"
)

// The sim adapter passes the kit every adapter passes, against the real
// in-process sim server.
func TestConformance(t *testing.T) {
	var e *env
	providertest.Run(t, providertest.Harness{
		New: func(t *testing.T) provider.CloudProvider {
			e = newEnv(t, func(o *simserver.Options) { o.DisableSSH = true })
			return e.p
		},
		Request:      provider.ResourceRequest{GPU: "H100-80GB", GPUCount: 1},
		Installation: installation,
		Settle:       func(t *testing.T) { e.clk.Advance(bootTime + deleteTime + time.Second) },
		Break: func(t *testing.T, id string) {
			e.clk.Advance(bootTime + time.Second) // only a running instance can be preempted
			if err := e.srv.Preempt(cloudName, id); err != nil {
				t.Fatal(err)
			}
		},
	})
}

// Its shared firewalls keep the contract of provider.SharedCleaner, by the
// server's own view of its firewalls.
func TestSharedFirewallContract(t *testing.T) {
	var e *env
	providertest.CheckShared(t, providertest.SharedHarness{
		Harness: providertest.Harness{
			New: func(t *testing.T) provider.CloudProvider {
				e = newEnv(t, func(o *simserver.Options) { o.DisableSSH = true })
				return e.p
			},
			Request:      provider.ResourceRequest{GPU: "H100-80GB", GPUCount: 1},
			Installation: installation,
			Settle:       func(t *testing.T) { e.clk.Advance(bootTime + deleteTime + time.Second) },
		},
		Shared: func(t *testing.T, loc provider.Location) []string {
			res, err := e.srv.SideResources(cloudName)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, f := range res.Firewalls {
				if f.Region == loc.Region && f.Labels[provider.LabelShared] == "true" && f.Labels[provider.LabelInstallation] == installation {
					names = append(names, f.Name)
				}
			}
			return names
		},
	})
}
