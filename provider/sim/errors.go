package sim

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/org/gpuprov/internal/rest"
	"github.com/org/gpuprov/provider"
)

// ErrRequestTimeout is wrapped by the Transient error of a call that got
// no answer within Config.RequestTimeout. It is deliberately not
// context.DeadlineExceeded: the caller's deadline has not passed.
var ErrRequestTimeout = rest.ErrTimeout

// APIError is an error answer of the sim API, wrapped in the *provider.Error
// every primitive returns (errors.As reaches it).
type APIError struct {
	Status     int    // HTTP status
	Code       string // the API's error code: "out_of_capacity", ...
	Message    string
	RetryAfter time.Duration // from the Retry-After header
}

func (e *APIError) Error() string {
	if e.Code == "" {
		return fmt.Sprintf("HTTP %d: %s", e.Status, e.Message)
	}
	return fmt.Sprintf("HTTP %d %s: %s", e.Status, e.Code, e.Message)
}

// IsAPIError reports whether err wraps an *APIError with one of codes (any
// code when none is given).
func IsAPIError(err error, codes ...string) bool {
	var e *APIError
	if !errors.As(err, &e) {
		return false
	}
	if len(codes) == 0 {
		return true
	}
	for _, c := range codes {
		if e.Code == c {
			return true
		}
	}
	return false
}

// codeKinds maps the API's documented error codes (see provider/sim/simserver) to
// the failover policy.
var codeKinds = map[string]provider.ErrorKind{
	"out_of_capacity": provider.Capacity,
	// A reservation that is full or has ended refuses this offer only;
	// the shape's ordinary capacity is another offer.
	"reservation_full":  provider.Unavailable,
	"reservation_ended": provider.Unavailable,
	// A bought block that has not started yet: this offer, later.
	"reservation_not_started": provider.Unavailable,
	"quota_exceeded":          provider.Quota, // blocks the region
	"insufficient_funds":      provider.Quota, // blocks the provider: see classify
	"unauthorized":            provider.Credentials,
	"invalid_request":         provider.InvalidRequest,
	"unknown_firewall":        provider.Transient, // a shared firewall removed meanwhile: Create says ErrSharedGone
	"rate_limited":            provider.Transient,
	"internal":                provider.Transient,
	"unavailable":             provider.Transient,
	"timeout":                 provider.Transient,
	"conflict":                provider.Transient,      // a dependency still shutting down
	"volume_in_use":           provider.InvalidRequest, // a volume attached to another instance: VolumeManager's contract
	"not_found":               provider.Failed,         // primitives that expect it treat it as success first
}

// classify maps an error answer to a *provider.Error: by code first, then,
// for a code it does not know, by status (429 and 5xx Transient, 401
// Credentials), and everything else Failed.
func classify(name, op string, e *APIError) *provider.Error {
	kind, known := codeKinds[e.Code]
	if !known {
		switch {
		case e.Status == http.StatusTooManyRequests || e.Status >= 500:
			kind = provider.Transient
		case e.Status == http.StatusUnauthorized:
			kind = provider.Credentials
		default:
			kind = provider.Failed
		}
	}
	pe := &provider.Error{Kind: kind, Op: op, Provider: name, Err: e, RetryAfter: e.RetryAfter}
	if e.Code == "insufficient_funds" {
		pe.Block = provider.ScopeProvider // an empty wallet fails every region alike
	}
	return pe
}

// isNotFound reports whether err is a 404 answer.
func isNotFound(err error) bool {
	var e *APIError
	return errors.As(err, &e) && e.Status == http.StatusNotFound
}

// apiError returns the *APIError err wraps, else err: what a
// *provider.Error of another op or cause wraps, so that its text names the
// provider once.
func apiError(err error) error {
	var e *APIError
	if errors.As(err, &e) {
		return e
	}
	return err
}

// apiErrors is apiError of each of errs.
func apiErrors(errs []error) []error {
	out := make([]error, len(errs))
	for i, err := range errs {
		out[i] = apiError(err)
	}
	return out
}
