package provider

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrorKind classifies a cloud failure. The kind is the failover policy: the
// core decides from it alone whether to retry, tear down, block or abort.
//
//	kind            for                                        the core
//	Failed          anything else after resources may exist    tears down, blocks the offer, next offer
//	Transient       throttling, 5xx, timeouts, resets          retries the step with backoff; a retried
//	                                                           Create is replayed with its token, or, on a
//	                                                           cloud without tokens, observes first and
//	                                                           adopts what landed
//	Capacity        stockouts                                  tears down, blocks the offer, next offer
//	Quota           account limits                             tears down, blocks the region, next offer
//	Unavailable     not viable here, nothing was created       blocks the offer, no teardown
//	InvalidRequest  the ask can't be satisfied                 aborts
//	Credentials     auth failures                              tears down what may exist, aborts
//
// The zero value is Failed, so an error nobody classified is handled safely.
// ErrorKind implements error, so errors.Is(err, provider.Capacity) reports
// whether err is a *Error of that kind.
type ErrorKind int

const (
	Failed ErrorKind = iota
	Transient
	Capacity
	Quota
	Unavailable
	InvalidRequest
	Credentials
)

var kindNames = [...]string{"failed", "transient", "capacity", "quota", "unavailable", "invalid-request", "credentials"}

// String returns the kind's lowercase name, as journaled.
func (k ErrorKind) String() string {
	if int(k) < len(kindNames) && k >= 0 {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", int(k))
}

// Error makes a kind usable as an errors.Is target.
func (k ErrorKind) Error() string { return k.String() }

// ParseErrorKind is the inverse of String.
func ParseErrorKind(s string) (ErrorKind, bool) {
	for i, n := range kindNames {
		if n == s {
			return ErrorKind(i), true
		}
	}
	return Failed, false
}

// Scope is how much of a provider a failure blocks.
type Scope int

const (
	// ScopeDefault leaves the scope to the kind: Quota blocks the region,
	// Credentials the provider, every other blocking kind the offer.
	ScopeDefault Scope = iota
	ScopeOffer
	ScopeZone
	ScopeRegion
	ScopeProvider
	// ScopeSpot blocks the Spot offers of the offer's region (a Spot-only
	// quota: Azure's LowPriorityCores, AWS's MaxSpotInstanceCountExceeded);
	// on-demand offers there stay open.
	ScopeSpot
	// ScopeFamily blocks the offers of the offer's Family in its region,
	// on-demand or Spot as the offer is (a per-family quota). An offer
	// without a Family is blocked as ScopeOffer.
	ScopeFamily
	// ScopeHost blocks the offers on one machine (Offer.Host): a machine
	// that failed GPU acceptance. An offer without a Host is blocked as
	// ScopeOffer (its type in its zone).
	ScopeHost
)

var scopeNames = [...]string{"default", "offer", "zone", "region", "provider", "spot", "family", "host"}

func (s Scope) String() string {
	if int(s) < len(scopeNames) && s >= 0 {
		return scopeNames[s]
	}
	return fmt.Sprintf("scope(%d)", int(s))
}

// DefaultScope is the scope a kind blocks when the error does not override it.
func (k ErrorKind) DefaultScope() Scope {
	switch k {
	case Quota:
		return ScopeRegion
	case Credentials:
		return ScopeProvider
	default:
		return ScopeOffer
	}
}

// Error is the error every primitive returns on failure. It wraps the vendor
// error, so errors.As reaches the SDK's own types too.
type Error struct {
	Kind     ErrorKind
	Op       string // the primitive or API call: "create", "RunInstances", ...
	Provider string
	Err      error
	// RetryAfter is the wait the cloud asked for (Retry-After), if any.
	RetryAfter time.Duration
	// Block overrides the kind's default blocking scope (for example a wallet
	// that is empty blocks the whole provider, a zone the cloud says is out
	// of everything the zone). Block only as much as the error names: a
	// stockout of one type in a zone is ScopeOffer (type, zone, Spot), not
	// the zone.
	Block Scope
	// BlockFor overrides how long the block lasts (the core's TTL for the
	// kind, WithBlockTTL); zero: the kind's TTL. For a failure that will
	// not clear soon, such as a size a subscription may not use in a
	// location.
	BlockFor time.Duration
}

func (e *Error) Error() string {
	msg := fmt.Sprintf("%s: %s: %s", e.Provider, e.Op, e.Kind)
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

func (e *Error) Unwrap() error { return e.Err }

// Is reports a match for an ErrorKind target of the same kind.
func (e *Error) Is(target error) bool {
	k, ok := target.(ErrorKind)
	return ok && k == e.Kind
}

// Scope returns the blocking scope: Block if set, else the kind's default.
func (e *Error) Scope() Scope {
	if e.Block != ScopeDefault {
		return e.Block
	}
	return e.Kind.DefaultScope()
}

// Errorf builds a *Error of kind for provider and op, formatting the wrapped
// error like fmt.Errorf (so %w works).
func Errorf(kind ErrorKind, provider, op, format string, args ...any) *Error {
	return &Error{Kind: kind, Provider: provider, Op: op, Err: fmt.Errorf(format, args...)}
}

// KindOf returns the kind of err: the Kind of the first *Error in its chain,
// and Failed for an error nobody classified.
func KindOf(err error) ErrorKind {
	var pe *Error
	if errors.As(err, &pe) {
		return pe.Kind
	}
	return Failed
}

// RetryAfterOf returns the RetryAfter of the first *Error in err's chain.
func RetryAfterOf(err error) time.Duration {
	var pe *Error
	if errors.As(err, &pe) {
		return pe.RetryAfter
	}
	return 0
}

// ScopeOf returns the blocking scope of err (see Error.Scope); for an
// unclassified error it is the offer.
func ScopeOf(err error) Scope {
	var pe *Error
	if errors.As(err, &pe) {
		return pe.Scope()
	}
	return ScopeOffer
}

// BlockForOf returns err's BlockFor (see Error.BlockFor); zero when err is
// not a *Error or does not set it.
func BlockForOf(err error) time.Duration {
	var pe *Error
	if errors.As(err, &pe) {
		return pe.BlockFor
	}
	return 0
}

// IsContextError reports whether err is the caller's own cancellation or
// deadline rather than a cloud failure.
func IsContextError(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}
