package kubernetes

import (
	"testing"
	"time"
)

// A pod bills nothing of its own: the cluster is paid for whatever runs on
// it, so Capabilities says Free and the core counts no cost for a pod,
// whatever gpu_price_per_hour ranks the cluster at.
func TestBillingIsFree(t *testing.T) {
	for _, st := range []string{ServiceNodePort, ServiceLoadBalancer, ServiceClusterIP} {
		b := (&Provider{cfg: Config{ServiceType: st, GPUPricePerHour: 2}}).Capabilities().Billing
		if !b.Free || b.Increment != 0 || b.Minimum != 0 {
			t.Fatalf("service type %q: billing %+v", st, b)
		}
		if got := b.Cost(3*time.Hour, 2); got != 0 {
			t.Fatalf("a pod that ran 3 h costs %v, want 0", got)
		}
	}
}
