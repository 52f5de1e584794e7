package providertest

import (
	"testing"
	"time"
)

// WaitFor waits, in real time, until cond holds: for goroutines to reach a
// state (a queue, a poller, a sleep, a removal the fake clock set off),
// never for a fake clock. It fails the test when cond does not hold within
// a few seconds.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(100 * time.Microsecond)
	}
}
