package gpuprov

import (
	"context"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/org/gpuprov/provider"
)

// Core defaults for Capabilities a provider leaves at zero.
const (
	defaultBootTimeout       = 15 * time.Minute
	defaultDeleteTimeout     = 10 * time.Minute
	defaultPollInterval      = 5 * time.Second
	defaultConsistencyWindow = 10 * time.Second
)

// paced wraps a provider with the core's view of it: capabilities with
// defaults filled in, and a token bucket that paces every API call of the
// account, paused as a whole while the cloud's Retry-After runs.
type paced struct {
	provider.CloudProvider
	caps provider.Capabilities
	lim  *rate.Limiter // nil: unlimited

	lister provider.Lister // nil: Observe per VM

	mu        sync.Mutex
	notBefore time.Time // wall clock: Retry-After is a real-time request
	pollers   map[provider.Location]*poller
}

func newPaced(cp provider.CloudProvider) *paced {
	c := cp.Capabilities()
	if c.BootTimeout <= 0 {
		c.BootTimeout = defaultBootTimeout
	}
	if c.DeleteTimeout <= 0 {
		c.DeleteTimeout = defaultDeleteTimeout
	}
	if c.PollInterval <= 0 {
		c.PollInterval = defaultPollInterval
	}
	if c.ConsistencyWindow < 0 {
		c.ConsistencyWindow = 0
	}
	pp := &paced{CloudProvider: cp, caps: c, pollers: map[provider.Location]*poller{}}
	if l, ok := cp.(provider.Lister); ok {
		pp.lister = l
	}
	if c.RequestsPerSecond > 0 {
		burst := c.Burst
		if burst <= 0 {
			burst = max(1, int(c.RequestsPerSecond))
		}
		pp.lim = rate.NewLimiter(rate.Limit(c.RequestsPerSecond), burst)
	}
	return pp
}

// wait blocks until the account may make one more API call.
func (pp *paced) wait(ctx context.Context) error {
	pp.mu.Lock()
	d := time.Until(pp.notBefore)
	pp.mu.Unlock()
	if d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return context.Cause(ctx)
		}
	}
	if pp.lim == nil {
		return nil
	}
	return pp.lim.Wait(ctx)
}

// note records what an answer says about pacing: a Retry-After pauses the
// whole account.
func (pp *paced) note(err error) {
	if ra := provider.RetryAfterOf(err); ra > 0 {
		pp.mu.Lock()
		if t := time.Now().Add(ra); t.After(pp.notBefore) {
			pp.notBefore = t
		}
		pp.mu.Unlock()
	}
}
