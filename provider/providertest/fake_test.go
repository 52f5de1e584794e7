package providertest_test

import (
	"testing"
	"time"

	"github.com/org/gpuprov/clock"
	"github.com/org/gpuprov/provider"
	pt "github.com/org/gpuprov/provider/providertest"
)

// The fake passes the kit it offers to adapters.
func TestFakeConforms(t *testing.T) {
	var clk *clock.Fake
	var f *pt.Fake
	pt.Run(t, pt.Harness{
		New: func(t *testing.T) provider.CloudProvider {
			clk = clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
			f = pt.NewFake("fake", clk,
				pt.Offer("r2", "r2a", "big", "H100-80GB", 1, 3),
				pt.Offer("r1", "r1a", "small", "H100-80GB", 1, 2))
			f.BootTime, f.DeleteTime = time.Minute, time.Minute
			f.Installation = "inst"
			return f
		},
		Request:      provider.ResourceRequest{GPU: "H100-80GB", GPUCount: 1},
		Installation: "inst",
		Settle:       func(t *testing.T) { clk.Advance(2 * time.Minute) },
		Break: func(t *testing.T, id string) {
			f.Break(id)
		},
	})
}
