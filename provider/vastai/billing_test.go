package vastai

import (
	"testing"
	"time"
)

// Vast.ai bills an instance per second with no minimum
// (https://docs.vast.ai/billing-help: "You are charged the base active
// rental cost for every second your instance is in the active/connected
// state").
func TestBillingPerSecond(t *testing.T) {
	b := (&Provider{}).Capabilities().Billing
	if b.Increment != time.Second || b.Minimum != 0 || b.Free || b.Source != "https://docs.vast.ai/billing-help" {
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
