package lambda

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/org/gpuprov/internal/rest"
	"github.com/org/gpuprov/provider"
)

// APIError is an error answer of the Lambda Cloud API:
// {"error":{"code","message","suggestion"}}. Every error of a call that got
// one wraps it (errors.As reaches it through the *provider.Error), and it
// wraps the HTTP answer it was parsed from, whose text names the method,
// path, status and body.
type APIError struct {
	Status     int    // HTTP status
	Code       string // "instance-operations/launch/insufficient-capacity", ...
	Message    string
	Suggestion string
	RetryAfter time.Duration // from the Retry-After header; 0 without one
	Err        error         // the HTTP answer; never nil in what the adapter returns
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

// Error codes. Reference: the Lambda Cloud API's OpenAPI document, version
// 1.8.3 (the newest found; a copy is openapi-1.8.3.json in the repository
// alexandervaneck/lambda-ai-cloud-api-client, commit b6023bc of
// 2025-11-20). Each code names the ApiError* schema it comes from and the
// operations the adapter calls that document it. The same document is
// Lambda's API reference, one section per operation:
// https://docs.lambda.ai/api/cloud#launchInstance,
// https://docs.lambda.ai/api/cloud#listFilesystems,
// https://docs.lambda.ai/api/cloud#createFilesystem,
// https://docs.lambda.ai/api/cloud#filesystemDelete (the filesystem
// operations' answers are in testdata/openapi-filesystems.json).
const (
	// ApiErrorInsufficientCapacity: launch 400. The only capacity code:
	// 1.8.3 documents none for filesystems.
	CodeInsufficientCapacity = "instance-operations/launch/insufficient-capacity"
	// ApiErrorFileSystemInWrongRegion: launch 400, for a volume
	// (file_system_names, file_system_mounts) of another region than the
	// launch's. The core plans a VM with a volume in the volume's region
	// only, so it blocks just the offer.
	CodeFileSystemWrongRegion = "instance-operations/launch/file-system-in-wrong-region"
	// ApiErrorQuotaExceeded: launch 400, firewall-rulesets POST 400,
	// filesystems POST 400.
	CodeQuotaExceeded = "global/quota-exceeded"
	// ApiErrorDuplicate: filesystems POST 400, a name the account has
	// already. CreateVolume lists first and, on this answer, lists again
	// to adopt a filesystem another process made meanwhile.
	CodeDuplicate = "global/duplicate"
	// ApiErrorFilesystemInUse: filesystems/{id} DELETE 400, for a
	// filesystem an instance mounts ("The filesystem must not be mounted
	// to any running instances at the time of deletion"); DeleteVolume's
	// error then matches provider.ErrInUse (volume.go).
	CodeFilesystemInUse = "filesystems/filesystem-in-use"
	// ApiErrorUnauthorized: 401 on every operation.
	CodeInvalidAPIKey = "global/invalid-api-key"
	// ApiErrorAccountInactive: 403 on every operation.
	CodeAccountInactive = "global/account-inactive"
	// ApiErrorInvalidBillingAddress: launch 403.
	CodeInvalidAddress = "global/invalid-address"
	// ApiErrorInvalidParameters: 400 of launch, ssh-keys POST and DELETE,
	// firewall-rulesets POST, audit-events, filesystems POST. DELETE
	// /ssh-keys/{id} of an id the account does not have answers this too
	// (it documents no 404).
	CodeInvalidParameters = "global/invalid-parameters"
	// ApiErrorInstanceNotFound, ApiErrorLaunchResourceNotFound,
	// ApiErrorFirewallRulesetNotFound, ApiErrorFilesystemNotFound: 404 of
	// instances/{id}, terminate, launch (also 400), firewall-rulesets/{id},
	// filesystems/{id} DELETE (gone: success). On launch it does not say
	// what is missing; when the shared ruleset is (the listing decides),
	// Create's error matches provider.ErrSharedGone (shared.go).
	CodeObjectDoesNotExist = "global/object-does-not-exist"
	// ApiErrorInternal: firewall-rulesets POST, PATCH, DELETE 409.
	CodeInternal = "global/internal-error"
	// ApiErrorFirewallRulesetInUse: firewall-rulesets/{id} DELETE 400, for
	// a ruleset an instance uses; CleanupShared's error then matches
	// provider.ErrInUse.
	CodeRulesetInUse = "firewall-rulesets/firewall-ruleset-in-use"
	// The description's "Provider errors": codes prefixed provider/ come
	// from upstream services; provider/internal-unavailable is its example.
	CodeProviderUnavailable = "provider/internal-unavailable"
	// Not a code of the document: the description names "quota limitations
	// or resource exhaustion" among provider errors, and this is their code
	// as seen in client code. Capacity (next offer) is the safe reading.
	CodeProviderQuota = "provider/quota-exceeded"
)

// codeKinds maps every documented code to the failover policy. A code not
// here is classified by status (classifyAPI).
var codeKinds = map[string]provider.ErrorKind{
	CodeInsufficientCapacity:  provider.Capacity,
	CodeFileSystemWrongRegion: provider.Unavailable,
	CodeQuotaExceeded:         provider.Quota,          // blocks the offer only: see classifyAPI
	CodeDuplicate:             provider.InvalidRequest, // a filesystem name taken: CreateVolume adopts its own
	CodeFilesystemInUse:       provider.InvalidRequest, // an instance mounts it: DeleteVolume refines it (ErrInUse)
	CodeInvalidAPIKey:         provider.Credentials,
	CodeAccountInactive:       provider.Credentials,
	CodeInvalidAddress:        provider.Credentials, // billing address: nothing works until fixed
	CodeInvalidParameters:     provider.InvalidRequest,
	CodeObjectDoesNotExist:    provider.InvalidRequest, // launch: image, key or type missing (a shared ruleset: Transient, ErrSharedGone); deletes treat it as gone first
	CodeInternal:              provider.Transient,
	CodeRulesetInUse:          provider.Transient, // an instance (maybe one still terminating) holds it
	CodeProviderUnavailable:   provider.Transient,
	CodeProviderQuota:         provider.Capacity, // the upstream provider is exhausted
}

// parseError reads Lambda's error body from a *rest.Error.
func parseError(re *rest.Error) *APIError {
	e := &APIError{Status: re.Status, RetryAfter: re.RetryAfter, Err: re}
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
// 401 and 403 Credentials, other provider/* Transient), else Failed. Every
// blocking kind blocks the offer, but Credentials the provider: no code
// names a zone, region or account limit. An
// error without an answer (timeout, reset) is Transient: the call may have
// taken effect and the core resolves that by observing.
func (p *Provider) classify(op string, err error) *provider.Error {
	var re *rest.Error
	if !errors.As(err, &re) {
		return &provider.Error{Kind: provider.Transient, Op: op, Provider: p.base.Name, Err: err}
	}
	return classifyAPI(p.base.Name, op, parseError(re))
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
	pe := &provider.Error{Kind: kind, Op: op, Provider: name, Err: e, RetryAfter: e.RetryAfter}
	if e.Code == CodeQuotaExceeded {
		// ApiErrorQuotaExceeded ("Quota exceeded.", testdata/openapi.json)
		// names no quota: not the region, not the account. The request it
		// answers names an instance type in a region (launch) or a ruleset
		// in a region (firewall-rulesets POST), so only that offer is
		// blocked, not the region the kind would block.
		pe.Block = provider.ScopeOffer
	}
	return pe
}

// isGone reports whether err is a 404 answer (the object does not exist).
func isGone(err error) bool { return rest.StatusOf(err) == http.StatusNotFound }

// isKeyGone reports whether err answers DELETE /ssh-keys/{id} for a key that
// is not there: that operation documents no 404, and an id it does not know
// is its only invalid parameter (a path id and no body), so 400
// global/invalid-parameters means gone. 404 is accepted too.
func isKeyGone(err error) bool {
	return isGone(err) || (rest.StatusOf(err) == http.StatusBadRequest && IsAPIError(err, CodeInvalidParameters))
}
