package primeintellect

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

// APIError is an error answer of the Prime Intellect API. The API answers
// FastAPI-style: {"detail": "..."} or {"detail": [{"loc", "msg"}]}, and its
// OpenAPI spec documents {"errors": [{"param", "details"}]} for 422; Message
// gathers whichever is present. Every error of a call that got one wraps
// it (errors.As reaches it through the *provider.Error), and it wraps the
// HTTP answer it was parsed from, whose text names the method, path, status
// and body.
type APIError struct {
	Status     int // HTTP status
	Message    string
	RetryAfter time.Duration // from the Retry-After header; 0 without one
	Err        error         // the HTTP answer; never nil in what the adapter returns
}

func (e *APIError) Error() string { return fmt.Sprintf("HTTP %d: %s", e.Status, e.Message) }

func (e *APIError) Unwrap() error { return e.Err }

func parseError(re *rest.Error) *APIError {
	e := &APIError{Status: re.Status, RetryAfter: re.RetryAfter, Err: re}
	var w struct {
		Detail  json.RawMessage `json:"detail"`
		Message string          `json:"message"`
		Error   string          `json:"error"`
		Errors  []struct {
			Param   string `json:"param"`
			Details string `json:"details"`
		} `json:"errors"`
	}
	var parts []string
	if json.Unmarshal(re.Body, &w) == nil {
		var s string
		var list []struct {
			Loc []any  `json:"loc"`
			Msg string `json:"msg"`
		}
		switch {
		case json.Unmarshal(w.Detail, &s) == nil && s != "":
			parts = append(parts, s)
		case json.Unmarshal(w.Detail, &list) == nil:
			for _, d := range list {
				parts = append(parts, fmt.Sprintf("%v: %s", d.Loc, d.Msg))
			}
		}
		for _, d := range w.Errors {
			parts = append(parts, d.Param+": "+d.Details)
		}
		for _, m := range []string{w.Message, w.Error} {
			if m != "" {
				parts = append(parts, m)
			}
		}
	}
	e.Message = strings.Join(parts, "; ")
	if e.Message == "" {
		e.Message = strings.TrimSpace(string(re.Body))
	}
	if e.Message == "" {
		e.Message = http.StatusText(re.Status)
	}
	return e
}

// capacityPhrases are matched, case-insensitively, in a 4xx answer's text:
// Prime has no error code for a stockout, only its message.
var capacityPhrases = []string{"capacity", "out of stock", "no longer available", "not available",
	"unavailable", "no available", "insufficient gpu", "insufficient resources", "sold out"}

// walletPhrases mark an empty wallet when it comes as a 400 instead of 402.
var walletPhrases = []string{"insufficient funds", "insufficient balance", "wallet", "top up", "add funds"}

func containsAny(s string, phrases []string) bool {
	s = strings.ToLower(s)
	for _, p := range phrases {
		if strings.Contains(s, p) {
			return true
		}
	}
	return false
}

// classifyAPI maps a Prime answer to the failover policy. Prime's OpenAPI
// document (compute API 0.1.0) documents only 401 "Authorization failed" and
// 422 "Invalid request data" ({"errors": [{"param", "details"}]}) on every
// operation; it documents no stockout answer. So on create any other 4xx is
// taken for "this offer cannot be placed" (Unavailable: next offer, nothing
// was created), never InvalidRequest, which would abort the whole launch on
// an undocumented stockout text:
//
//	402, or a 4xx naming the wallet/funds   Quota, provider-wide (the wallet funds every region)
//	401, 403                                 Credentials
//	429, 5xx                                 Transient (Retry-After honoured)
//	4xx naming capacity or stock             Capacity
//	422                                      InvalidRequest
//	other 4xx on create                      Unavailable
//	other 400                                InvalidRequest
//	anything else                            Failed
func classifyAPI(name, op string, e *APIError) *provider.Error {
	pe := &provider.Error{Kind: provider.Failed, Op: op, Provider: name, Err: e, RetryAfter: e.RetryAfter}
	switch {
	case e.Status == http.StatusPaymentRequired || (e.Status >= 400 && e.Status < 500 && containsAny(e.Message, walletPhrases)):
		pe.Kind, pe.Block = provider.Quota, provider.ScopeProvider
	case e.Status == http.StatusUnauthorized || e.Status == http.StatusForbidden:
		pe.Kind = provider.Credentials
	case e.Status == http.StatusTooManyRequests || e.Status >= 500:
		pe.Kind = provider.Transient
	case e.Status >= 400 && e.Status < 500 && e.Status != http.StatusNotFound && containsAny(e.Message, capacityPhrases):
		pe.Kind = provider.Capacity
	case e.Status == http.StatusUnprocessableEntity:
		pe.Kind = provider.InvalidRequest
	case op == "create" && e.Status >= 400 && e.Status < 500:
		pe.Kind = provider.Unavailable
	case e.Status == http.StatusBadRequest:
		pe.Kind = provider.InvalidRequest
	}
	return pe
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

func isGone(err error) bool { return rest.StatusOf(err) == http.StatusNotFound }
