package backoff

import (
	"testing"
	"time"
)

func TestDelayIsBoundedJitteredAndHonoursRetryAfter(t *testing.T) {
	p := New(100*time.Millisecond, 2*time.Second, 1)
	seen := map[time.Duration]bool{}
	for n := 0; n < 40; n++ {
		ceil := 100 * time.Millisecond << uint(min(n, 20))
		if ceil > 2*time.Second {
			ceil = 2 * time.Second
		}
		d := p.Delay(n, 0)
		if d < 0 || d > ceil {
			t.Fatalf("retry %d: delay %v outside [0, %v]", n, d, ceil)
		}
		seen[d] = true
	}
	if len(seen) < 30 {
		t.Fatalf("jitter produced only %d distinct delays in 40", len(seen))
	}
	if d := p.Delay(0, 5*time.Second); d != 5*time.Second {
		t.Fatalf("Retry-After 5s gave %v", d)
	}
	if d := p.Delay(1000, 0); d > 2*time.Second {
		t.Fatalf("huge n gave %v", d)
	}
}
