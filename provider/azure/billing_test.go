package azure

import (
	"testing"
	"time"
)

// Azure bills a VM by the minute, the larger of the two units Microsoft's
// pages give (the knowledge-center answer at
// https://azure.microsoft.com/en-us/resources/knowledge-center/if-my-virtual-machine-ran-for-6-minutes-and-45/
// bills "the full minutes your virtual machine runs"; the pricing page says
// per second): gpuprov counts whole minutes, rounded up, at least one. The
// knowledge center's own example, 6 min 45 s, bills 6 minutes there; 7
// here, an upper bound.
func TestBillingPerMinute(t *testing.T) {
	b := (&Provider{}).Capabilities().Billing
	if b.Increment != time.Minute || b.Minimum != time.Minute || b.Free || b.Source != "https://azure.microsoft.com/en-us/resources/knowledge-center/if-my-virtual-machine-ran-for-6-minutes-and-45/" {
		t.Fatalf("billing %+v", b)
	}
	for _, tc := range []struct{ ran, billed time.Duration }{
		{20 * time.Second, time.Minute},
		{6*time.Minute + 45*time.Second, 7 * time.Minute},
	} {
		if got := b.Billed(tc.ran); got != tc.billed {
			t.Errorf("an instance that ran %v bills %v, want %v", tc.ran, got, tc.billed)
		}
	}
}
