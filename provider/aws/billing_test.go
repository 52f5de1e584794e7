package aws

import (
	"testing"
	"time"
)

// EC2 bills the Linux instances gpuprov launches, on demand or Spot, per
// second with a one-minute minimum. EC2 User Guide, "Instance lifecycle"
// (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/ec2-instance-lifecycle.html):
// "As soon as your instance transitions to the running state, you're billed
// for each second, with a one-minute minimum, that you keep the instance
// running".
func TestBillingPerSecondWithAMinuteMinimum(t *testing.T) {
	b := (&Provider{}).Capabilities().Billing
	if b.Increment != time.Second || b.Minimum != time.Minute || b.Free || b.Source != "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/ec2-instance-lifecycle.html" {
		t.Fatalf("billing %+v", b)
	}
	for _, tc := range []struct{ ran, billed time.Duration }{
		{30 * time.Second, time.Minute},
		{90*time.Second + 200*time.Millisecond, 91 * time.Second},
		{time.Hour, time.Hour},
	} {
		if got := b.Billed(tc.ran); got != tc.billed {
			t.Errorf("an instance that ran %v bills %v, want %v", tc.ran, got, tc.billed)
		}
	}
}
