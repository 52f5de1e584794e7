package lambda

import (
	"testing"
	"time"
)

// Lambda bills an On-Demand Cloud instance in one-minute increments
// (https://docs.lambda.ai/public-cloud/billing: "ODC prices instances by
// hourly usage and bills in one-minute increments"); no minimum is stated,
// and a started minute is a billed one.
func TestBillingPerMinute(t *testing.T) {
	b := (&Provider{}).Capabilities().Billing
	if b.Increment != time.Minute || b.Minimum != time.Minute || b.Free || b.Source != "https://docs.lambda.ai/public-cloud/billing" {
		t.Fatalf("billing %+v", b)
	}
	for _, tc := range []struct{ ran, billed time.Duration }{
		{10 * time.Second, time.Minute},
		{6*time.Minute + time.Second, 7 * time.Minute},
	} {
		if got := b.Billed(tc.ran); got != tc.billed {
			t.Errorf("an instance that ran %v bills %v, want %v", tc.ran, got, tc.billed)
		}
	}
}
