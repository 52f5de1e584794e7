package gcp

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/api/googleapi"

	"github.com/org/gpuprov/provider"
)

// Synchronous error reasons (googleapi.Error.Errors[].Reason) and their
// kinds. 404 notFound and 409 alreadyExists are decided by the callers
// (delete treats 404 as success, insert adopts on 409) and by notFoundKind.
var reasonKinds = map[string]provider.ErrorKind{
	"rateLimitExceeded":              provider.Transient,
	"userRateLimitExceeded":          provider.Transient,
	"backendError":                   provider.Transient,
	"internalError":                  provider.Transient,
	"resourceNotReady":               provider.Transient,
	"resourceInUseByAnotherResource": provider.Transient, // a dependency still shutting down
	"quotaExceeded":                  provider.Quota,
	"insufficientCapacity":           provider.Capacity,
	"invalid":                        provider.InvalidRequest,
	"invalidParameter":               provider.InvalidRequest,
	"required":                       provider.InvalidRequest,
	"badRequest":                     provider.InvalidRequest,
	"conditionNotMet":                provider.Failed,
	"forbidden":                      provider.Credentials,
	"insufficientPermissions":        provider.Credentials,
	"accessNotConfigured":            provider.Credentials,
	"authError":                      provider.Credentials,
	"alreadyExists":                  provider.Failed,
}

// Operation error codes (Operation.error.errors[].code) and their kinds.
var opCodeKinds = map[string]provider.ErrorKind{
	"ZONE_RESOURCE_POOL_EXHAUSTED":              provider.Capacity, // zone scope: see opError
	"ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS": provider.Capacity,
	"QUOTA_EXCEEDED":                            provider.Quota,
	"RESOURCE_OPERATION_RATE_EXCEEDED":          provider.Transient,
	"RESOURCE_NOT_READY":                        provider.Transient,
	"INTERNAL_ERROR":                            provider.Transient,
	"RESOURCE_IN_USE_BY_ANOTHER_RESOURCE":       provider.Transient,
	"UNSUPPORTED_OPERATION":                     provider.Capacity, // seen when a Spot VM is preempted while being created
	"RESOURCE_NOT_FOUND":                        provider.Capacity, // likewise
	"INVALID_FIELD_VALUE":                       provider.InvalidRequest,
	"BAD_REQUEST":                               provider.InvalidRequest,
	"IAM_PERMISSION_DENIED":                     provider.Credentials,
	"PERMISSIONS_ERROR":                         provider.Credentials,
	"CONDITION_NOT_MET":                         provider.Failed,
}

// OperationError is a failed GCE operation: the codes and messages of its
// error list. It is wrapped in the *provider.Error a primitive returns.
type OperationError struct {
	Operation  string // the operation's name
	HTTPStatus int    // httpErrorStatusCode
	Codes      []string
	Messages   []string
	// QuotaMetric is the metric of a QUOTA_EXCEEDED detail, if any
	// ("NVIDIA_L4_GPUS", "GPUS_ALL_REGIONS").
	QuotaMetric string
}

func (e *OperationError) Error() string {
	return fmt.Sprintf("operation %s failed (HTTP %d): %s: %s", e.Operation, e.HTTPStatus,
		strings.Join(e.Codes, ","), strings.Join(e.Messages, "; "))
}

// IsCode reports whether err wraps an *OperationError with one of codes.
func IsCode(err error, codes ...string) bool {
	var oe *OperationError
	if !errors.As(err, &oe) {
		return false
	}
	for _, c := range oe.Codes {
		for _, want := range codes {
			if c == want {
				return true
			}
		}
	}
	return false
}

// operationError extracts the error list of a finished operation; nil when
// it has none.
func operationError(op *computepb.Operation) *OperationError {
	errs := op.GetError().GetErrors()
	if len(errs) == 0 {
		return nil
	}
	oe := &OperationError{Operation: op.GetName(), HTTPStatus: int(op.GetHttpErrorStatusCode())}
	for _, e := range errs {
		oe.Codes = append(oe.Codes, e.GetCode())
		oe.Messages = append(oe.Messages, e.GetMessage())
		for _, d := range e.GetErrorDetails() {
			if m := d.GetQuotaInfo().GetMetricName(); m != "" && oe.QuotaMetric == "" {
				oe.QuotaMetric = m
			}
		}
	}
	return oe
}

// classifyOp maps a failed operation to a *provider.Error: the first code
// with a known kind decides; a zonal stockout blocks the zone; a quota on
// all regions blocks the provider. Unknown codes are Failed.
func (p *Provider) classifyOp(op string, oe *OperationError) *provider.Error {
	pe := &provider.Error{Kind: provider.Failed, Op: op, Provider: p.name, Err: oe}
	for _, c := range oe.Codes {
		if k, ok := opCodeKinds[c]; ok {
			pe.Kind = k
			break
		}
	}
	switch pe.Kind {
	case provider.Capacity:
		if IsCode(oe, "ZONE_RESOURCE_POOL_EXHAUSTED", "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS") {
			pe.Block = provider.ScopeZone
		}
	case provider.Quota:
		pe.Block = quotaScope(oe.QuotaMetric + " " + strings.Join(oe.Messages, " "))
	}
	return pe
}

// quotaScope: a quota named GPUS_ALL_REGIONS (or a global quota) blocks
// every region of the project; a regional one ("... in region us-east4")
// blocks the region.
func quotaScope(text string) provider.Scope {
	t := strings.ToUpper(text)
	if strings.Contains(t, "ALL_REGIONS") || strings.Contains(t, "GLOBAL") {
		return provider.ScopeProvider
	}
	return provider.ScopeRegion
}

// apiFacts is what a synchronous error says: HTTP status, reasons,
// message, Retry-After.
type apiFacts struct {
	status     int
	reasons    []string
	message    string
	retryAfter time.Duration
}

func facts(err error) (apiFacts, bool) {
	var ge *googleapi.Error
	if !errors.As(err, &ge) {
		return apiFacts{}, false
	}
	f := apiFacts{status: ge.Code, message: ge.Message}
	for _, e := range ge.Errors {
		f.reasons = append(f.reasons, e.Reason)
		if f.message == "" {
			f.message = e.Message
		}
	}
	if ra := ge.Header.Get("Retry-After"); ra != "" {
		if s, err := strconv.Atoi(ra); err == nil && s >= 0 {
			f.retryAfter = time.Duration(s) * time.Second
		} else if t, err := http.ParseTime(ra); err == nil {
			f.retryAfter = time.Until(t)
		}
	}
	return f, true
}

// isStatus reports whether err is an API answer with HTTP status code.
func isStatus(err error, code int) bool {
	f, ok := facts(err)
	return ok && f.status == code
}

func isNotFound(err error) bool { return isStatus(err, http.StatusNotFound) }
func isAlreadyExists(err error) bool {
	return isStatus(err, http.StatusConflict) || hasReason(err, "alreadyExists")
}

func hasReason(err error, reason string) bool {
	f, ok := facts(err)
	if !ok {
		return false
	}
	for _, r := range f.reasons {
		if r == reason {
			return true
		}
	}
	return false
}

// classify maps a synchronous API error to a *provider.Error: by reason
// first, then by status (429/5xx Transient, 401/403 Credentials, 404 by
// what was not found), a transport failure or timeout Transient, and
// anything else Failed.
func (p *Provider) classify(op string, err error) *provider.Error {
	pe := &provider.Error{Kind: provider.Failed, Op: op, Provider: p.name, Err: err}
	f, ok := facts(err)
	if !ok {
		// No answer: a connection reset, a timeout, a cancelled call. The
		// request may have landed; the core resolves that by observing.
		var ne interface{ Timeout() bool }
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) || errors.As(err, &ne) ||
			strings.Contains(err.Error(), "connection") || strings.Contains(err.Error(), "EOF") {
			pe.Kind = provider.Transient
		}
		return pe
	}
	pe.RetryAfter = f.retryAfter
	for _, r := range f.reasons {
		if k, known := reasonKinds[r]; known {
			pe.Kind = k
			if k == provider.Quota {
				pe.Block = quotaScope(f.message)
			}
			if k == provider.Capacity {
				pe.Block = provider.ScopeZone
			}
			return pe
		}
	}
	switch {
	case f.status == http.StatusTooManyRequests || f.status >= 500:
		pe.Kind = provider.Transient
	case f.status == http.StatusUnauthorized || f.status == http.StatusForbidden:
		pe.Kind = provider.Credentials
	case f.status == http.StatusNotFound:
		pe.Kind = notFoundKind(f.message)
	case f.status == http.StatusBadRequest:
		pe.Kind = provider.InvalidRequest
	}
	return pe
}

// notFoundKind decides a 404 by what was not found: a machine or
// accelerator type or a location the zone does not offer is Unavailable
// (another offer may work); a missing image is InvalidRequest (no offer
// will); anything else Failed.
func notFoundKind(msg string) provider.ErrorKind {
	m := strings.ToLower(msg)
	switch {
	case strings.Contains(m, "machinetypes") || strings.Contains(m, "acceleratortypes") ||
		strings.Contains(m, "location") || strings.Contains(m, "/zones/") && !strings.Contains(m, "/instances/"):
		return provider.Unavailable
	case strings.Contains(m, "images"):
		return provider.InvalidRequest
	}
	return provider.Failed
}
