package azure

import (
	"cmp"
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
// {"error":{"code","message","target","details"}}, of a synchronous
// answer or of a failed long-running operation) to kinds. The references
// are in errors_test.go and docs/clouds/azure.md. A throttled answer (HTTP
// 429, or a TooManyRequests detail) is Transient before this table is
// read. OperationNotAllowed, QuotaExceeded, SkuNotAvailable,
// InvalidParameter and RequestDisallowedByPolicy are refined by refine
// (quota scope, the size missing from a region, a location policy), and
// by Create, which knows the offer (Spot, its quota family). 404 codes
// (ResourceNotFound, NotFound) are decided by the callers: a delete of
// what is gone is success, the adapter's own resource group gone is made
// again.
var codeKinds = map[string]provider.ErrorKind{
	// Capacity: allocation failures and a size the location cannot
	// give now.
	"AllocationFailed":                      provider.Capacity,
	"ZonalAllocationFailed":                 provider.Capacity,
	"OverconstrainedAllocationRequest":      provider.Capacity,
	"OverconstrainedZonalAllocationRequest": provider.Capacity,
	"SkuNotAvailable":                       provider.Capacity,
	// Quota: vCPUs (regional, per family, Spot) and public IPs.
	"QuotaExceeded":                   provider.Quota,
	"PublicIPCountLimitReached":       provider.Quota,
	"StaticPublicIPCountLimitReached": provider.Quota,
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
	// Unavailable: this region does not offer the resource type; an
	// Azure Policy of the subscription forbids the request.
	"LocationNotAvailableForResourceType": provider.Unavailable,
	"NoRegisteredProviderFound":           provider.Unavailable,
	"RequestDisallowedByPolicy":           provider.Unavailable,
	// Failed: something exists and is not as asked.
	"OperationNotAllowed":      provider.Failed,
	"PropertyChangeNotAllowed": provider.Failed,
}

// throttledCode is the detail code of a throttled answer: Compute answers
// 429 with top-level code OperationNotAllowed and a detail TooManyRequests
// ("Troubleshooting API throttling errors", Microsoft Learn).
const throttledCode = "TooManyRequests"

// restrictedFor is how long a size the subscription may not use in a
// location stays blocked: an on-demand SkuNotAvailable, a size missing
// from a region. Such a restriction lifts only on a support request;
// Azure's own Karpenter provider caches it for 23 hours
// (SKUNotAvailableOnDemandTTL in pkg/providers/instance/offerings).
const restrictedFor = 23 * time.Hour

// APIError is an ARM error answer, as the adapter reads it: the HTTP
// status (200 for the status document of a failed long-running
// operation), the error code, target and message, the codes of
// error.details, what an Azure Policy refusal says it evaluated, and
// Retry-After. It wraps the SDK's *azcore.ResponseError.
type APIError struct {
	StatusCode  int
	Code        string
	Target      string
	Message     string
	DetailCodes []string
	RetryAfter  time.Duration
	// policy is what the policy violations of a RequestDisallowedByPolicy
	// (error.additionalInfo, type PolicyViolation) evaluated.
	policy []policyViolation
	err    *azcore.ResponseError
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

// armError is the ARM error object: the "error" of the envelope
// {"error":{...}} most answers and every operation status document carry,
// or the whole body, as Compute's throttling answer shows it
// ("Troubleshooting API throttling errors"). azcore reads the code of
// both shapes.
type armError struct {
	Code           string     `json:"code"`
	Message        string     `json:"message"`
	Target         string     `json:"target"`
	Details        []armError `json:"details"`
	AdditionalInfo []struct {
		Type string          `json:"type"`
		Info policyViolation `json:"info"`
	} `json:"additionalInfo"`
}

// policyViolation is the info of an additionalInfo entry of type
// PolicyViolation ("Resolve errors for request disallowed by policy";
// the answers shown in rancher/rancher#29086): the policy definition and
// the expressions it evaluated on the request.
type policyViolation struct {
	PolicyDefinitionID string `json:"policyDefinitionId"`
	EvaluationDetails  struct {
		EvaluatedExpressions []struct {
			Expression string `json:"expression"`
			Path       string `json:"path"`
		} `json:"evaluatedExpressions"`
	} `json:"evaluationDetails"`
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
			if e, ok := parseARMError(body); ok {
				if ae.Code == "" {
					ae.Code = e.Code
				}
				ae.Target, ae.Message = e.Target, e.Message
				ae.policy = e.violations()
				for _, d := range e.Details {
					ae.DetailCodes = append(ae.DetailCodes, d.Code)
					if ae.Message == "" {
						ae.Message = d.Message
					}
					if ae.Target == "" {
						ae.Target = d.Target
					}
					ae.policy = append(ae.policy, d.violations()...)
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

// parseARMError reads the error object of body, wrapped in "error" or not.
func parseARMError(body []byte) (armError, bool) {
	var env struct {
		Error *armError `json:"error"`
	}
	if json.Unmarshal(body, &env) == nil && env.Error != nil {
		return *env.Error, true
	}
	var bare armError
	if json.Unmarshal(body, &bare) == nil && bare.Code != "" {
		return bare, true
	}
	return armError{}, false
}

func (e armError) violations() []policyViolation {
	var out []policyViolation
	for _, a := range e.AdditionalInfo {
		if strings.EqualFold(a.Type, "PolicyViolation") {
			out = append(out, a.Info)
		}
	}
	return out
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
//   - an ARM answer that is throttled (HTTP 429, or a TooManyRequests
//     code, whatever the top-level code) is Transient with its
//     Retry-After;
//   - another ARM answer: the first of its codes (top level, then
//     details) that codeKinds knows, refined by refine; else by status:
//     5xx Transient, 401 and 403 Credentials, anything else Failed;
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
	if ae.StatusCode == http.StatusTooManyRequests || slices.Contains(ae.codes(), throttledCode) {
		pe.Kind = provider.Transient
		return pe
	}
	for _, c := range ae.codes() {
		if k, known := codeKinds[c]; known {
			pe.Kind = k
			refine(pe, c, ae)
			return pe
		}
	}
	switch s := ae.StatusCode; {
	case s >= 500:
		pe.Kind = provider.Transient
	case s == http.StatusUnauthorized || s == http.StatusForbidden:
		pe.Kind = provider.Credentials
	}
	return pe
}

var (
	// quotaRE recognizes a vCPU quota refusal (OperationNotAllowed, or
	// QuotaExceeded) and names the quota: "Operation could not be
	// completed as it results in exceeding approved standardNCADSA100v4Family
	// Cores quota." (a family: "Standard NCASv3_T4 Family" has spaces),
	// "... approved Total Regional Cores quota.", "... approved
	// LowPriorityCores quota."; the older "Operation results in exceeding
	// quota limits of Core." names none.
	quotaRE = regexp.MustCompile(`(?i)exceeding (?:approved (.*?) ?cores quota|quota limits? of core)`)
	// lowPriorityRE names the Spot (low priority) vCPU quota.
	lowPriorityRE = regexp.MustCompile(`(?i)^low ?priority$`)
)

// Built-in Azure Policy definitions that restrict locations: "Allowed
// locations" and "Allowed locations for resource groups" (Azure Policy
// built-in definitions, Microsoft Learn; the ids as refusals name them,
// microsoft/vscode-azurefunctions#1244, rancher/rancher#29086).
var locationPolicies = []string{"e56962a6-4747-49cd-b67b-bf8b01975c4c", "e765b5de-1225-4ba3-bd56-1ac6695af988"}

// refine sets the scope of a classified code, and turns an answer that
// names a quota, a missing size or a location policy into its kind:
//   - the allocation codes and SkuNotAvailable block the offer (the size
//     in the zone or region, on demand or Spot): they name the size, and
//     another size may have capacity there; Create makes an on-demand
//     SkuNotAvailable Unavailable for restrictedFor;
//   - a quota blocks what it counts: the Spot offers of the region for
//     the low-priority (Spot) vCPUs, the family's offers in the region
//     for a family's vCPUs (Create checks the offer is of that family),
//     the region for the regional vCPUs and the region's public IPs;
//   - InvalidParameter with target vmSize ("The requested VM size X is
//     not available in the current region") is Unavailable for the offer,
//     for restrictedFor: the catalog comes from prices, not availability;
//   - RequestDisallowedByPolicy blocks the region when the policy
//     restricts locations, else the offer;
//   - a region that does not offer the resource type blocks the region.
func refine(pe *provider.Error, code string, ae *APIError) {
	switch code {
	case "OperationNotAllowed", "QuotaExceeded":
		m := quotaRE.FindStringSubmatch(ae.Message)
		switch {
		case m == nil:
			if code == "QuotaExceeded" {
				pe.Block = provider.ScopeRegion
			}
		case lowPriorityRE.MatchString(m[1]):
			pe.Kind, pe.Block = provider.Quota, provider.ScopeSpot
		case m[1] != "" && !strings.EqualFold(m[1], "Total Regional"):
			pe.Kind, pe.Block = provider.Quota, provider.ScopeFamily
		default:
			pe.Kind, pe.Block = provider.Quota, provider.ScopeRegion
		}
	case "PublicIPCountLimitReached", "StaticPublicIPCountLimitReached":
		pe.Block = provider.ScopeRegion
	case "InvalidParameter":
		if strings.EqualFold(ae.Target, "vmSize") {
			pe.Kind, pe.Block, pe.BlockFor = provider.Unavailable, provider.ScopeOffer, restrictedFor
		}
	case "RequestDisallowedByPolicy":
		pe.Block = provider.ScopeOffer
		if ae.locationPolicy() {
			pe.Block = provider.ScopeRegion
		}
	case "LocationNotAvailableForResourceType", "NoRegisteredProviderFound":
		pe.Block = provider.ScopeRegion
	}
}

// quotaFamily is the vCPU family a family quota refusal names, "" for
// another answer.
func quotaFamily(ae *APIError) string {
	m := quotaRE.FindStringSubmatch(ae.Message)
	if m == nil || m[1] == "" || lowPriorityRE.MatchString(m[1]) || strings.EqualFold(m[1], "Total Regional") {
		return ""
	}
	return m[1]
}

// sameFamily compares quota family names as Azure spells them in SKUs
// and refusals: in any case, spaces ignored ("Standard NCASv3_T4 Family"
// is standardNCASv3_T4Family).
func sameFamily(a, b string) bool {
	norm := func(s string) string { return strings.ToLower(strings.ReplaceAll(s, " ", "")) }
	return a != "" && norm(a) == norm(b)
}

// locationPolicy reports whether a RequestDisallowedByPolicy refusal is
// for the location: a violation whose evaluated expressions are on the
// location (and the resource type) only, as the built-in "Allowed
// locations" evaluates, or a message naming a built-in location policy.
// A policy that evaluated anything else (a size, a public IP) is not.
func (e *APIError) locationPolicy() bool {
	for _, v := range e.policy {
		onLocation, other := false, false
		for _, x := range v.EvaluationDetails.EvaluatedExpressions {
			switch f := strings.ToLower(cmp.Or(x.Path, x.Expression)); f {
			case "location":
				onLocation = true
			case "type":
			default:
				other = true
			}
		}
		if onLocation && !other {
			return true
		}
		if slices.ContainsFunc(locationPolicies, func(id string) bool { return strings.HasSuffix(strings.ToLower(v.PolicyDefinitionID), id) }) {
			return true
		}
	}
	return slices.ContainsFunc(locationPolicies, func(id string) bool { return strings.Contains(strings.ToLower(e.Message), id) })
}
