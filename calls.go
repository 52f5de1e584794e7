package gpuprov

import "time"

// Call is one call of a cloud primitive as the core made it: what a
// metrics collector counts per provider (see WithCallObserver).
type Call struct {
	// Provider is the provider id, Op the primitive: plan, prepare,
	// create, observe, list, delete, cleanup, cleanup-shared, diagnose,
	// placement-group.
	Provider, Op string
	// Region and Zone are where the call went; empty for a call of every
	// location (Plan, a Sweep's List).
	Region, Zone string
	// Duration is the call's own time, pacing waits excluded.
	Duration time.Duration
	// ErrorKind is the provider.ErrorKind name of its error ("" when it
	// succeeded).
	ErrorKind string
	// Throttled says the cloud answered with a rate limit that asked the
	// account to pause (a 429 or 503 with Retry-After, which every adapter
	// turns into provider.Error.RetryAfter); RetryAfter is how long.
	Throttled  bool
	RetryAfter time.Duration
}

// WithCallObserver hands f every cloud primitive call the Provisioner makes,
// once it returns. f runs on the calling goroutine and must be quick.
func WithCallObserver(f func(Call)) Option {
	return func(p *Provisioner) { p.callObservers = append(p.callObservers, f) }
}
