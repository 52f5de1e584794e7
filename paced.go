package gpuprov

import (
	"context"
	"fmt"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/org/gpuprov/clock"
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
	clock  clock.Clock     // the Provisioner's, set by New

	mu        sync.Mutex
	notBefore time.Time // on clock: no call before it (Retry-After)
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
	pp := &paced{CloudProvider: cp, caps: c, clock: clock.Real, pollers: map[provider.Location]*poller{}}
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

// wait blocks until the account may make one more API call: after any
// Retry-After the cloud asked for, and when the token bucket has a token.
func (pp *paced) wait(ctx context.Context) error {
	pp.mu.Lock()
	d := pp.notBefore.Sub(pp.clock.Now())
	pp.mu.Unlock()
	if d > 0 {
		if err := pp.clock.Sleep(ctx, d); err != nil {
			return err
		}
	}
	if pp.lim == nil {
		return nil
	}
	now := pp.clock.Now()
	r := pp.lim.ReserveN(now, 1)
	if !r.OK() {
		return fmt.Errorf("gpuprov: %s: rate limiter cannot grant a call", pp.Name())
	}
	if err := pp.clock.Sleep(ctx, r.DelayFrom(now)); err != nil {
		r.CancelAt(pp.clock.Now())
		return err
	}
	return nil
}

// note records what an answer says about pacing: a Retry-After pauses the
// whole account.
func (pp *paced) note(err error) {
	if ra := provider.RetryAfterOf(err); ra > 0 {
		pp.mu.Lock()
		if t := pp.clock.Now().Add(ra); t.After(pp.notBefore) {
			pp.notBefore = t
		}
		pp.mu.Unlock()
	}
}
