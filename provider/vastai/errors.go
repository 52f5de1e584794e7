package vastai

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

// APIError is an error answer of Vast.ai's REST API:
// {"success": false, "error": "<code>", "msg": "<text>", "ask_id": N} on
// most operations, {"detail": "<text>"} for a 429. Every error of a call
// that got one wraps it (errors.As reaches it through the
// *provider.Error), and it wraps the HTTP answer it was parsed from, whose
// text names the method, path, status and body.
type APIError struct {
	Status     int    // HTTP status
	Code       string // "error": no_such_ask, invalid_args, auth_error, not_found, ...
	Msg        string // "msg": "error 410/3907: no_such_ask Instance type 1234567 is no longer available."
	Detail     string // "detail", the 429 shape
	AskID      int64  // "ask_id": the offer a create error is about
	RetryAfter time.Duration
	Err        error // the HTTP answer; never nil in what the adapter returns
}

func (e *APIError) Error() string {
	text := strings.TrimSpace(strings.Join([]string{e.Msg, e.Detail}, " "))
	if e.Code != "" {
		return fmt.Sprintf("HTTP %d %s: %s", e.Status, e.Code, text)
	}
	return fmt.Sprintf("HTTP %d: %s", e.Status, text)
}

func (e *APIError) Unwrap() error { return e.Err }

func parseError(re *rest.Error) *APIError {
	e := &APIError{Status: re.Status, RetryAfter: re.RetryAfter, Err: re}
	var w struct {
		Error  string `json:"error"`
		Msg    string `json:"msg"`
		Detail string `json:"detail"`
		AskID  int64  `json:"ask_id"`
	}
	if json.Unmarshal(re.Body, &w) == nil {
		e.Code, e.Msg, e.Detail, e.AskID = w.Error, w.Msg, w.Detail, w.AskID
	}
	if e.Msg == "" && e.Detail == "" {
		e.Msg = strings.TrimSpace(string(re.Body))
	}
	if e.Msg == "" && e.Detail == "" {
		e.Msg = http.StatusText(re.Status)
	}
	return e
}

// Texts the classification looks for, case-insensitively, in an answer's
// error code, msg and detail.
const (
	// GoneText marks an ask that is no longer there: taken by another
	// renter between the search and the accept, or withdrawn. Vast answers
	// it as 404 {"error": "invalid_args", "msg": "error 404/3603:
	// no_such_ask Instance type by id N is not available."} and, with
	// cancel_unavail, 410 {"error": "no_such_ask", "msg": "error 410/3907:
	// no_such_ask Instance type N is no longer available."}
	// (createInstance in Vast's OpenAPI document).
	GoneText = "no_such_ask"
	// authText is the msg of an unknown or revoked key ("Invalid user
	// key", with error "auth_error"): showInstance's 401 example, and
	// searchOffers' 404, which the document labels "Unauthorized - invalid
	// or missing API key".
	authText = "invalid user key"
)

// creditTexts mark an account out of credit. createInstance documents no
// such answer; the texts are those Vast uses elsewhere: "Insufficient
// credit" (prepayInstance's 411), "insufficient_balance"
// (transferCredit's 400 code) and "Insufficient credits" (the CLI's
// common errors, vast-cli vastai/SKILL.md).
var creditTexts = []string{"insufficient credit", "insufficient_credit", "insufficient balance", "insufficient_balance"}

// Codes of createInstance's 400 (the error enum of its 400 answer in Vast's
// OpenAPI document, the only codes it documents for that status).
const (
	// codeInvalidArgs: the request's arguments break the create's input
	// validation (x-input-validation: image, onstart and args, label, env,
	// disk), which no other ask would pass either.
	codeInvalidArgs = "invalid_args"
	// codeInvalidPrice: a bid price outside 0.001–128 $/h. The adapter sends
	// no price (on-demand), so the only price the check can refuse is the
	// ask's own: that ask cannot be rented.
	codeInvalidPrice = "invalid_price"
	// codeNoSSHKeyForVM: a VM ask (not a container) needs an SSH key
	// registered on the account before the create ("VM: no recovery", the
	// document's Key Quirks). The adapter registers none: a container ask
	// needs none.
	codeNoSSHKeyForVM = "no_ssh_key_for_vm"
)

// classifyAPI maps an answer to the failover policy (references: Vast's
// OpenAPI document, operations createInstance, searchOffers,
// showInstances and destroyInstance; the vendor CLI vast-ai/vast-cli):
//
//	401; error auth_error or msg "Invalid user key" (also searchOffers' 404)   Credentials
//	no_such_ask in the answer; 404 or 410 on create (the ask is gone)          Capacity, offer scope
//	insufficient credit or balance; 402                                         Quota, provider-wide
//	429 (Retry-After honoured), 5xx                                             Transient
//	403 on create naming the ask (ask_id: "Offer N is not your own")            Unavailable
//	403 otherwise                                                               Credentials
//	400 invalid_args on create                                                  InvalidRequest
//	400 invalid_price or no_ssh_key_for_vm on create (this ask only)            Unavailable
//	any other 400 on create (undocumented)                                      Failed (next offer)
//	400 otherwise (showInstances: invalid_request, invalid_token)               InvalidRequest
//	anything else                                                               Failed
//
// An undocumented 400 on create fails over rather than abort the launch:
// Vast documents three codes for it, and an answer it does not describe
// says nothing about the other asks (SkyPilot's and dstack's Vast
// integrations also move on after any failed create).
func classifyAPI(name, op string, e *APIError) *provider.Error {
	pe := &provider.Error{Kind: provider.Failed, Op: op, Provider: name, Err: e, RetryAfter: e.RetryAfter}
	text := strings.ToLower(e.Code + " " + e.Msg + " " + e.Detail)
	create := op == "create"
	switch {
	case e.Status == http.StatusUnauthorized || e.Code == "auth_error" || strings.Contains(text, authText):
		pe.Kind = provider.Credentials
	case strings.Contains(text, GoneText) || create && (e.Status == http.StatusNotFound || e.Status == http.StatusGone):
		pe.Kind = provider.Capacity
	case containsAny(text, creditTexts) || e.Status == http.StatusPaymentRequired:
		pe.Kind, pe.Block = provider.Quota, provider.ScopeProvider
	case e.Status == http.StatusTooManyRequests || e.Status >= 500:
		pe.Kind = provider.Transient
	case e.Status == http.StatusForbidden && create && e.AskID != 0:
		pe.Kind = provider.Unavailable
	case e.Status == http.StatusForbidden:
		pe.Kind = provider.Credentials
	case e.Status == http.StatusBadRequest && create:
		pe.Kind = createBadRequest(e.Code)
	case e.Status == http.StatusBadRequest:
		pe.Kind = provider.InvalidRequest
	}
	return pe
}

// createBadRequest is the kind of a 400 on create, by its error code.
func createBadRequest(code string) provider.ErrorKind {
	switch code {
	case codeInvalidArgs:
		return provider.InvalidRequest
	case codeInvalidPrice, codeNoSSHKeyForVM:
		return provider.Unavailable
	}
	return provider.Failed
}

func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// classify turns a call's error into a *provider.Error; an error without an
// answer is Transient (the call may have taken effect).
func (p *Provider) classify(op string, err error) *provider.Error {
	var re *rest.Error
	if !errors.As(err, &re) {
		return &provider.Error{Kind: provider.Transient, Op: op, Provider: p.base.Name, Err: err}
	}
	return classifyAPI(p.base.Name, op, parseError(re))
}

// isGone reports a 404 that says the instance does not exist (destroyInstance
// answers {"error": "not_found", "msg": "Instance not found"}), not a 404
// about the key.
func isGone(err error) bool {
	return rest.StatusOf(err) == http.StatusNotFound && provider.KindOf(err) != provider.Credentials
}
