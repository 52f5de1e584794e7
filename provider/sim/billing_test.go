package sim

import (
	"testing"
	"time"
)

// The simulated cloud bills per second from the create's acceptance until
// the instance is terminated, at least 60 s (docs/clouds/sim.md#billing).
func TestBillingPerSecondWithAMinuteMinimum(t *testing.T) {
	b := (&Provider{}).Capabilities().Billing
	if b.Increment != time.Second || b.Minimum != time.Minute || b.Free || b.Source != "docs/clouds/sim.md#billing" {
		t.Fatalf("billing %+v", b)
	}
	for _, tc := range []struct{ ran, billed time.Duration }{
		{time.Second, time.Minute},
		{10*time.Minute + 300*time.Millisecond, 10*time.Minute + time.Second},
	} {
		if got := b.Billed(tc.ran); got != tc.billed {
			t.Errorf("an instance that ran %v bills %v, want %v", tc.ran, got, tc.billed)
		}
	}
}
