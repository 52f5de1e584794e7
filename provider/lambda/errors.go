package lambda

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/org/gpuprov/internal/rest"
	"github.com/org/gpuprov/provider"
)

// APIError is an error answer of the Lambda Cloud API:
// {"error":{"code","message","suggestion"}}. It wraps the *rest.Error it
// was parsed from; errors.As reaches both.
type APIError struct {
	Status     int
	Code       string // "instance-operations/launch/insufficient-capacity", ...
	Message    string
	Suggestion string
	Err        *rest.Error
}

func (e *APIError) Error() string {
	msg := fmt.Sprintf("HTTP %d", e.Status)
	if e.Code != "" {
		msg += " " + e.Code
	}
	if e.Message != "" {
		msg += ": " + e.Message
	}
	if e.Suggestion != "" {
		msg += " (" + e.Suggestion + ")"
	}
	return msg
}

func (e *APIError) Unwrap() error { return e.Err }

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

// Documented error codes (OpenAPI spec of the Lambda Cloud API, v1.10).
const (
	CodeInsufficientCapacity   = "instance-operations/launch/insufficient-capacity"
	CodeFileSystemWrongRegion  = "instance-operations/launch/file-system-in-wrong-region"
	CodeFileSystemsUnsupported = "instance-operations/launch/file-systems-not-supported"
	CodeQuotaExceeded          = "global/quota-exceeded"
	CodeInvalidAPIKey          = "global/invalid-api-key"
	CodeAccountInactive        = "global/account-inactive"
	CodeInvalidAddress         = "global/invalid-address"
	CodeForbidden              = "global/forbidden"
	CodeInvalidParameters      = "global/invalid-parameters"
	CodeObjectDoesNotExist     = "global/object-does-not-exist"
	CodeNotFound               = "global/not-found"
	CodeConflict               = "global/conflict"
	CodeInternal               = "global/internal-error"
	CodeUnknown                = "global/unknown"
	CodeKeyInUse               = "ssh-keys/key-in-use"
	CodeRulesetInUse           = "firewall-rulesets/firewall-ruleset-in-use"
	CodeProviderUnavailable    = "provider/internal-unavailable"
	CodeProviderQuota          = "provider/quota-exceeded"
)

// codeKinds maps every documented code to the failover policy.
var codeKinds = map[string]provider.ErrorKind{
	CodeInsufficientCapacity:   provider.Capacity,
	CodeFileSystemWrongRegion:  provider.Unavailable,
	CodeFileSystemsUnsupported: provider.Unavailable,
	CodeQuotaExceeded:          provider.Quota, // account-wide: see classify
	CodeInvalidAPIKey:          provider.Credentials,
	CodeAccountInactive:        provider.Credentials,
	CodeInvalidAddress:         provider.Credentials, // billing address: nothing works until fixed
	CodeForbidden:              provider.Credentials,
	CodeInvalidParameters:      provider.InvalidRequest,
	CodeObjectDoesNotExist:     provider.InvalidRequest, // launch: image, key or ruleset missing; delete treats it as gone first
	CodeNotFound:               provider.InvalidRequest,
	CodeConflict:               provider.Transient,
	CodeInternal:               provider.Transient,
	CodeKeyInUse:               provider.Transient, // an instance still terminating holds it
	CodeRulesetInUse:           provider.Transient, // likewise
	CodeProviderUnavailable:    provider.Transient,
	CodeProviderQuota:          provider.Capacity, // the upstream provider is exhausted
}

// parseError reads Lambda's error body from a *rest.Error.
func parseError(re *rest.Error) *APIError {
	e := &APIError{Status: re.Status, Err: re}
	var w struct {
		Error struct {
			Code       string `json:"code"`
			Message    string `json:"message"`
			Suggestion string `json:"suggestion"`
		} `json:"error"`
	}
	if json.Unmarshal(re.Body, &w) == nil {
		e.Code, e.Message, e.Suggestion = w.Error.Code, w.Error.Message, w.Error.Suggestion
	}
	if e.Message == "" && e.Code == "" {
		e.Message = http.StatusText(re.Status)
	}
	return e
}

// classify turns a call's error into a *provider.Error: by Lambda's code
// first, then by status for codes it does not know (429 and 5xx Transient,
// 401 and 403 Credentials, other provider/* Transient), else Failed. An
// error without an answer (timeout, reset) is Transient: the call may have
// taken effect and the core resolves that by observing.
func (p *Provider) classify(op string, err error) *provider.Error {
	var re *rest.Error
	if !errors.As(err, &re) {
		return &provider.Error{Kind: provider.Transient, Op: op, Provider: p.name, Err: err}
	}
	return classifyAPI(p.name, op, parseError(re))
}

func classifyAPI(name, op string, e *APIError) *provider.Error {
	kind, known := codeKinds[e.Code]
	if !known {
		switch {
		case e.Status == http.StatusTooManyRequests || e.Status >= 500:
			kind = provider.Transient
		case strings.HasPrefix(e.Code, "provider/"):
			kind = provider.Transient // upstream outages, per the API's "Provider errors"
		case e.Status == http.StatusUnauthorized || e.Status == http.StatusForbidden:
			kind = provider.Credentials
		default:
			kind = provider.Failed
		}
	}
	pe := &provider.Error{Kind: kind, Op: op, Provider: name, Err: e, RetryAfter: e.Err.RetryAfter}
	if e.Code == CodeQuotaExceeded {
		pe.Block = provider.ScopeProvider // Lambda's quotas are per account, not per region
	}
	return pe
}

// isGone reports whether err is a 404 answer (the object does not exist).
func isGone(err error) bool { return rest.StatusOf(err) == http.StatusNotFound }
