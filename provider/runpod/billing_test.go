package runpod

import (
	"testing"
	"time"
)

// RunPod bills a pod per second with no minimum
// (https://docs.runpod.io/pods/pricing: "All Pods are billed by the second
// for compute and storage").
func TestBillingPerSecond(t *testing.T) {
	b := (&Provider{}).Capabilities().Billing
	if b.Increment != time.Second || b.Minimum != 0 || b.Free || b.Source != "https://docs.runpod.io/pods/pricing" {
		t.Fatalf("billing %+v", b)
	}
	for _, tc := range []struct{ ran, billed time.Duration }{
		{10 * time.Second, 10 * time.Second},
		{1500 * time.Millisecond, 2 * time.Second},
	} {
		if got := b.Billed(tc.ran); got != tc.billed {
			t.Errorf("an instance that ran %v bills %v, want %v", tc.ran, got, tc.billed)
		}
	}
}
