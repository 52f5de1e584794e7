package gcp

import (
	"testing"
	"time"
)

// Compute Engine bills vCPUs, GPUs and memory per second after a one-minute
// minimum. "VM instance pricing", Billing model
// (https://cloud.google.com/compute/vm-instance-pricing): "All vCPUs, GPUs,
// and GB of memory are charged a minimum of 1 minute." and "After 1 minute,
// instances are charged in 1 second increments."
func TestBillingPerSecondAfterAMinute(t *testing.T) {
	b := (&Provider{}).Capabilities().Billing
	if b.Increment != time.Second || b.Minimum != time.Minute || b.Free || b.Source != "https://cloud.google.com/compute/vm-instance-pricing" {
		t.Fatalf("billing %+v", b)
	}
	for _, tc := range []struct{ ran, billed time.Duration }{
		{30 * time.Second, time.Minute},
		{61*time.Second + time.Millisecond, 62 * time.Second},
	} {
		if got := b.Billed(tc.ran); got != tc.billed {
			t.Errorf("an instance that ran %v bills %v, want %v", tc.ran, got, tc.billed)
		}
	}
}
