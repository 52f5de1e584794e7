package primeintellect

import (
	"testing"
	"time"
)

// Prime Intellect documents no billing increment for pods, only hourly
// prices ("priceHr": "Hourly price for running the pod.", in the API
// reference behind https://docs.primeintellect.ai/api-reference/pods/create-pod):
// gpuprov counts whole hours, at least one, the conservative reading.
func TestBillingByTheHourForWantOfAFinerDocumentedUnit(t *testing.T) {
	b := (&Provider{}).Capabilities().Billing
	if b.Increment != time.Hour || b.Minimum != time.Hour || b.Free || b.Source != "https://docs.primeintellect.ai/api-reference/pods/create-pod" {
		t.Fatalf("billing %+v", b)
	}
	for _, tc := range []struct{ ran, billed time.Duration }{
		{5 * time.Minute, time.Hour},
		{61 * time.Minute, 2 * time.Hour},
	} {
		if got := b.Billed(tc.ran); got != tc.billed {
			t.Errorf("an instance that ran %v bills %v, want %v", tc.ran, got, tc.billed)
		}
	}
}
