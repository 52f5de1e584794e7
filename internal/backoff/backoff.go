// Package backoff computes retry delays: exponential growth with full jitter,
// never shorter than what the server asked for with Retry-After.
package backoff

import (
	"math/rand/v2"
	"sync"
	"time"
)

// Policy is an exponential backoff with full jitter: the n-th retry (from 0)
// waits a uniformly random duration in [0, min(Max, Base·2ⁿ)], raised to the
// server's Retry-After when that is longer.
type Policy struct {
	Base time.Duration
	Max  time.Duration

	mu  sync.Mutex
	rnd *rand.Rand
}

// New returns a policy; seed fixes the jitter for reproducible tests.
func New(base, max time.Duration, seed uint64) *Policy {
	return &Policy{Base: base, Max: max, rnd: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

// Delay returns the wait before retry n (0-based).
func (p *Policy) Delay(n int, retryAfter time.Duration) time.Duration {
	ceil := p.Max
	if n < 62 {
		if c := p.Base << uint(n); c > 0 && c < ceil {
			ceil = c
		}
	}
	p.mu.Lock()
	d := time.Duration(p.rnd.Int64N(int64(ceil) + 1))
	p.mu.Unlock()
	if retryAfter > d {
		d = retryAfter
	}
	return d
}
