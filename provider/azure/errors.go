package azure

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"

	"github.com/org/gpuprov/provider"
)

// codeKinds maps ARM error codes (error.code of the envelope
// {"error":{"code","message","details"}}, of a synchronous answer or of a
// failed long-running operation) to kinds. The references are in
// errors_test.go and docs/clouds/azure.md. OperationNotAllowed, SkuNotAvailable and
// the allocation codes are refined by refine (scope, quota). 404 codes
// (ResourceNotFound, NotFound) are decided by the callers: a delete of
// what is gone is success.
var codeKinds = map[string]provider.ErrorKind{
	// Capacity: allocation failures and a size the location cannot
	// give now.
	"AllocationFailed":                      provider.Capacity,
	"ZonalAllocationFailed":                 provider.Capacity,
	"OverconstrainedAllocationRequest":      provider.Capacity,
	"OverconstrainedZonalAllocationRequest": provider.Capacity,
	"SkuNotAvailable":                       provider.Capacity,
	// Quota.
	"QuotaExceeded": provider.Quota,
	// Transient: a server error reported in an operation's status
	// document (HTTP 200: the status cannot tell), another operation on
	// the resource still running, and a dependency still in use
	// by something being deleted (a NIC still attached or reserved, a
	// public IP or security group still referenced by a NIC).
	"InternalServerError":                      provider.Transient,
	"AnotherOperationInProgress":               provider.Transient,
	"NicInUse":                                 provider.Transient,
	"NicReservedForAnotherVm":                  provider.Transient,
	"PublicIPAddressCannotBeDeleted":           provider.Transient,
	"InUseNetworkSecurityGroupCannotBeDeleted": provider.Transient,
	// Credentials.
	"AuthorizationFailed":              provider.Credentials,
	"LinkedAuthorizationFailed":        provider.Credentials,
	"InvalidAuthenticationToken":       provider.Credentials,
	"InvalidAuthenticationTokenTenant": provider.Credentials,
	"ExpiredAuthenticationToken":       provider.Credentials,
	// InvalidRequest: the configuration or the request is wrong everywhere.
	"InvalidParameter":                provider.InvalidRequest,
	"InvalidRequestContent":           provider.InvalidRequest,
	"MissingSubscriptionRegistration": provider.InvalidRequest,
	"SubscriptionNotFound":            provider.InvalidRequest,
	"ResourceGroupNotFound":           provider.InvalidRequest,
	// Unavailable: this region does not offer the resource type.
	"LocationNotAvailableForResourceType": provider.Unavailable,
	"NoRegisteredProviderFound":           provider.Unavailable,
	// Failed: something exists and is not as asked.
	"OperationNotAllowed":      provider.Failed,
	"PropertyChangeNotAllowed": provider.Failed,
}

// inUseCodes answer the delete of a network resource that something still
// uses; Cleanup's callers see them as Transient.
var inUseCodes = []string{"NicInUse", "NicReservedForAnotherVm", "PublicIPAddressCannotBeDeleted", "InUseNetworkSecurityGroupCannotBeDeleted"}

// APIError is an ARM error answer, as the adapter reads it: the HTTP
// status (200 for the status document of a failed long-running
// operation), the error code and message, the codes of error.details, and
// Retry-After. It wraps the SDK's *azcore.ResponseError.
type APIError struct {
	StatusCode  int
	Code        string
	Message     string
	DetailCodes []string
	RetryAfter  time.Duration
	err         *azcore.ResponseError
}

func (e *APIError) Error() string {
	s := fmt.Sprintf("HTTP %d %s: %s", e.StatusCode, e.Code, e.Message)
	if len(e.DetailCodes) > 0 {
		s += " (details: " + strings.Join(e.DetailCodes, ", ") + ")"
	}
	return s
}

func (e *APIError) Unwrap() error { return e.err }

// codes is the top-level code followed by the details' codes.
func (e *APIError) codes() []string { return append([]string{e.Code}, e.DetailCodes...) }

// IsCode reports whether err is (or wraps) an ARM error answer whose code
// or one of whose details' codes is one of codes.
func IsCode(err error, codes ...string) bool {
	ae, ok := apiError(err)
	if !ok {
		return false
	}
	for _, c := range ae.codes() {
		if slices.Contains(codes, c) {
			return true
		}
	}
	return false
}

// envelope is the ARM error body; the status document of a long-running
// operation carries the same "error" object.
type envelope struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
		Details []struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"details"`
	} `json:"error"`
}

// apiError reads an *APIError out of err: an *APIError already made, or a
// *azcore.ResponseError whose body is parsed.
func apiError(err error) (*APIError, bool) {
	var ae *APIError
	if errors.As(err, &ae) {
		return ae, true
	}
	var re *azcore.ResponseError
	if !errors.As(err, &re) {
		return nil, false
	}
	ae = &APIError{StatusCode: re.StatusCode, Code: re.ErrorCode, err: re}
	if resp := re.RawResponse; resp != nil {
		if body, berr := runtime.Payload(resp); berr == nil && len(body) > 0 {
			var env envelope
			if json.Unmarshal(body, &env) == nil {
				if ae.Code == "" {
					ae.Code = env.Error.Code
				}
				ae.Message = env.Error.Message
				for _, d := range env.Error.Details {
					ae.DetailCodes = append(ae.DetailCodes, d.Code)
					if ae.Message == "" {
						ae.Message = d.Message
					}
				}
			}
			if ae.Message == "" {
				ae.Message = strings.TrimSpace(string(body))
				if len(ae.Message) > 500 {
					ae.Message = ae.Message[:500] + "…"
				}
			}
		}
		ae.RetryAfter = retryAfter(resp.Header.Get("Retry-After"))
	}
	return ae, true
}

// retryAfter reads a Retry-After header: seconds or an HTTP date.
func retryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && s >= 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := time.Until(t); d > 0 {
			return d
		}
	}
	return 0
}

// isStatus reports whether err is an ARM answer with HTTP status code.
func isStatus(err error, code int) bool {
	ae, ok := apiError(err)
	return ok && ae.StatusCode == code
}

// isNotFound reports a 404: the resource (or its resource group) is gone.
func isNotFound(err error) bool { return isStatus(err, http.StatusNotFound) }

// classify maps an error of the SDK to a *provider.Error, masked of the
// adapter's credentials (seal).
func (p *Provider) classify(op string, err error) *provider.Error {
	return p.seal(classifyError(p.name, op, err))
}

// classifyError decides the kind of err:
//   - a failure to get a token is Credentials (Transient when the token
//     service answered 429 or 5xx, or the call was cut short);
//   - an ARM answer: the first of its codes (top level, then details)
//     that codeKinds knows, refined by refine; else by status: 429 and 5xx
//     Transient, 401 and 403 Credentials, anything else Failed;
//   - no answer (timeout, reset, cancelled call) is Transient: the request
//     may have landed, which the core resolves by observing;
//   - anything else is Failed.
func classifyError(name, op string, err error) *provider.Error {
	pe := &provider.Error{Kind: provider.Failed, Op: op, Provider: name, Err: err}
	var te *tokenError
	if errors.As(err, &te) {
		pe.Kind = provider.Credentials
		var af *azidentity.AuthenticationFailedError
		if errors.As(err, &af) && af.RawResponse != nil &&
			(af.RawResponse.StatusCode == http.StatusTooManyRequests || af.RawResponse.StatusCode >= 500) {
			pe.Kind = provider.Transient
		}
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			pe.Kind = provider.Transient
		}
		return pe
	}
	ae, ok := apiError(err)
	if !ok {
		var ne net.Error
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) || errors.As(err, &ne) ||
			errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) ||
			strings.Contains(err.Error(), "connection reset") || strings.Contains(err.Error(), "connection refused") {
			pe.Kind = provider.Transient
		}
		return pe
	}
	pe.Err, pe.RetryAfter = ae, ae.RetryAfter
	for _, c := range ae.codes() {
		if k, known := codeKinds[c]; known {
			pe.Kind = k
			refine(pe, c, ae.Message)
			return pe
		}
	}
	switch s := ae.StatusCode; {
	case s == http.StatusTooManyRequests || s >= 500:
		pe.Kind = provider.Transient
	case s == http.StatusUnauthorized || s == http.StatusForbidden:
		pe.Kind = provider.Credentials
	}
	return pe
}

var (
	// zonesRE reads the zones a SkuNotAvailable message names:
	// "... is currently not available in location 'eastus' zones '1' for
	// subscription '...'".
	zonesRE = regexp.MustCompile(`zones '([^']*)'`)
	// quotaRE recognizes an OperationNotAllowed that is a quota refusal:
	// "Operation could not be completed as it results in exceeding
	// approved standardNCADSA100v4Family Cores quota." (or Total Regional
	// Cores, Low Priority Cores), and the older "Operation results in
	// exceeding quota limits of Core."
	quotaRE = regexp.MustCompile(`(?i)exceeding (approved .* quota|quota limit)`)
)

// refine sets the scope of a classified code, and turns an
// OperationNotAllowed that names a quota into Quota:
//   - ZonalAllocationFailed and OverconstrainedZonalAllocationRequest
//     block the zone; SkuNotAvailable blocks the zone when its message
//     names one; the other capacity codes block the offer (the size in the
//     region or zone, on demand or Spot): another size may have capacity;
//   - a quota blocks the region (the core's default for Quota): vCPU
//     quotas are regional, per family and in total;
//   - a region that does not offer the resource type blocks the region.
func refine(pe *provider.Error, code, message string) {
	switch code {
	case "ZonalAllocationFailed", "OverconstrainedZonalAllocationRequest":
		pe.Block = provider.ScopeZone
	case "SkuNotAvailable":
		if m := zonesRE.FindStringSubmatch(message); m != nil && strings.TrimSpace(m[1]) != "" {
			pe.Block = provider.ScopeZone
		}
	case "OperationNotAllowed":
		if quotaRE.MatchString(message) {
			pe.Kind, pe.Block = provider.Quota, provider.ScopeRegion
		}
	case "QuotaExceeded":
		pe.Block = provider.ScopeRegion
	case "LocationNotAvailableForResourceType", "NoRegisteredProviderFound":
		pe.Block = provider.ScopeRegion
	}
}
