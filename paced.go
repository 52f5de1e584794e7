package gpuprov

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

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
	pc   *pacer // nil: unlimited
	// perRequest says the provider paces each request it sends with pc
	// (provider.RequestPacer), so the core does not pace its primitives.
	perRequest bool
	burst      int
	observers  []func(Call) // the Provisioner's, set by New
	tracer     trace.Tracer // the Provisioner's, set by New

	lister provider.Lister // nil: Observe per VM
	clock  clock.Clock     // the Provisioner's, set by New

	mu        sync.Mutex
	notBefore time.Time // on clock: no call before it (Retry-After)
	pollers   map[provider.Location]*poller
	// shared is, per region, the VMs of this process holding an attempt
	// whose side resources may include the provider's shared ones (see
	// shared.go); only for a provider.SharedCleaner.
	shared map[string]map[string]struct{}
	// linger is, per region, the removal of the shared side resources
	// waiting out its grace; closing the channel calls it off.
	linger map[string]chan struct{}
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
	pp.burst = c.Burst
	if pp.burst <= 0 {
		pp.burst = max(1, int(c.RequestsPerSecond))
	}
	return pp
}

// start sets the clock, the observers and the tracer, makes the account's
// pacer and hands it to a provider that paces its own requests. New calls
// it once, before any call.
func (pp *paced) start(clk clock.Clock, observers []func(Call), tracer trace.Tracer) {
	pp.clock, pp.observers, pp.tracer = clk, observers, tracer
	if pp.caps.RequestsPerSecond > 0 {
		pp.pc = newPacer(clk, pp.caps.RequestsPerSecond, pp.burst)
	}
	// Without a rate too: the core then still knows which calls sent a
	// request (a Prepare that sends none owes no cleanup, and what waits to
	// be journaled is written before the first request; see prepare) and
	// every request waits out a Retry-After.
	if rp, ok := pp.CloudProvider.(provider.RequestPacer); ok {
		pp.perRequest = true
		rp.UsePacer(pp.turn)
	}
}

// Context values the pacer reads: a listing's priority, and the stopper of
// a call made for one offer.
type (
	prioKey    struct{}
	stopperKey struct{}
)

// withPriority marks ctx's calls as going ahead of the others (listings).
func withPriority(ctx context.Context) context.Context {
	return context.WithValue(ctx, prioKey{}, true)
}

// withStopper makes ctx's calls leave the queue once s says their offer
// was blocked.
func withStopper(ctx context.Context, s *stopper) context.Context {
	return context.WithValue(ctx, stopperKey{}, s)
}

// turn waits for the account's turn to send one request: after any
// Retry-After, and when the pacer grants it (the priority and the stopper
// come from ctx). It is the wait a provider.RequestPacer calls.
func (pp *paced) turn(ctx context.Context) error {
	if ws, ok := ctx.Value(writeFirstKey{}).(*writeFirst); ok {
		if err := ws.run(); err != nil {
			return err
		}
	}
	if w, ok := ctx.Value(waitedKey{}).(*atomic.Int64); ok {
		defer func(asked time.Time) { w.Add(int64(pp.clock.Now().Sub(asked))) }(pp.clock.Now())
	}
	pp.mu.Lock()
	d := pp.notBefore.Sub(pp.clock.Now())
	pp.mu.Unlock()
	if d > 0 {
		if err := pp.clock.Sleep(ctx, d); err != nil {
			return err
		}
	}
	s, _ := ctx.Value(stopperKey{}).(*stopper)
	if pp.pc != nil { // else the account has no rate: no wait
		prio, _ := ctx.Value(prioKey{}).(bool)
		var stop leaver
		if s != nil {
			stop = s
		}
		if err := pp.pc.wait(ctx, prio, stop); err != nil {
			return err
		}
	}
	// The fence is judged now, after every wait: a lease that ran out
	// while the call waited for its turn stops it here.
	if err := checkFence(ctx); err != nil {
		return err
	}
	if s != nil && pp.perRequest {
		s.sent.Store(true) // the provider sends its request now
	}
	if g, ok := ctx.Value(grantedKey{}).(*granted); ok {
		now := pp.clock.Now()
		g.at.Store(&now)
	}
	if c, ok := ctx.Value(turnsKey{}).(*atomic.Int32); ok {
		c.Add(1)
	}
	return nil
}

// writeFirst is a journal write that must be durable before the first
// request of a call is sent (see driver.prepare); it runs once, for the
// first turn asked for.
type (
	writeFirst struct {
		write func() error
		mu    sync.Mutex
		done  bool
		err   error
	}
	writeFirstKey struct{}
)

func (w *writeFirst) run() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.done, w.err = true, w.write()
	}
	return w.err
}

// or returns the write's error if it failed, else err: a failed journal
// write stops the driver, whatever the adapter made of the error its turn
// gave it (a transient error would be retried). w may be nil.
func (w *writeFirst) or(err error) error {
	if w == nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	return err
}

// granted holds when the account last granted a turn to a call (a
// create's send time); turnsKey counts the turns a call took (a listing's
// pages); waitedKey adds up how long a traced call waited for its turns.
type (
	granted    struct{ at atomic.Pointer[time.Time] }
	grantedKey struct{}
	turnsKey   struct{}
	waitedKey  struct{}
)

// call makes one primitive call op in loc: it waits for the account's turn
// (unless the provider paces its own requests), runs f, notes what the
// answer says about pacing and hands the call to the observers. Under a
// recording span, the call has a span of its own (gpuprov.cloud.<op>),
// the parent of whatever the provider's SDK traces.
func (pp *paced) call(ctx context.Context, op string, loc provider.Location, f func(context.Context) error) (err error) {
	ctx, sp := child(ctx, pp.tracer, callSpan, op)
	if sp.IsRecording() {
		waited := new(atomic.Int64)
		ctx = context.WithValue(ctx, waitedKey{}, waited)
		defer func() { pp.endCall(ctx, sp, op, loc, time.Duration(waited.Load()), err) }()
	}
	if !pp.perRequest {
		if err := pp.turn(ctx); err != nil {
			return err
		}
	}
	start := time.Now()
	err = f(ctx)
	pp.note(err)
	if len(pp.observers) > 0 {
		c := Call{Provider: pp.Name(), Op: op, Region: loc.Region, Zone: loc.Zone, Duration: time.Since(start)}
		if err != nil {
			c.ErrorKind = errorKindName(err)
			c.RetryAfter = provider.RetryAfterOf(err)
			c.Throttled = c.RetryAfter > 0
		}
		for _, o := range pp.observers {
			o(c)
		}
	}
	return err
}

// endCall ends the span of call op in loc: where it went, how long it
// waited for the account's turns on the Provisioner's clock (a Retry-After
// honoured included: the account's pause before a turn), the Retry-After
// its answer asked for, its error.
func (pp *paced) endCall(ctx context.Context, sp trace.Span, op string, loc provider.Location, waited time.Duration, err error) {
	sp.SetAttributes(callAttrs(ctx, pp.Name(), op, loc)...)
	sp.SetAttributes(attrPacingWait.Float64(waited.Seconds()))
	if ra := provider.RetryAfterOf(err); ra > 0 {
		sp.SetAttributes(attrRetryAfter.Float64(ra.Seconds()))
	}
	endSpan(sp, err)
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
