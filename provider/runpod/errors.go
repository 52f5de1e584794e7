package runpod

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

// APIError is an error answer of RunPod's REST API v2, an RFC 9457 problem:
// {"title", "status", "detail", "errors"}. Every error of a call that got
// one wraps it (errors.As reaches it through the *provider.Error), and it
// wraps the HTTP answer it was parsed from, whose text names the method,
// path, status and body.
type APIError struct {
	Status     int // HTTP status
	Title      string
	Detail     string
	Errors     []string      // request-validation failures (422)
	RetryAfter time.Duration // from the Retry-After header; 0 without one
	Err        error         // the HTTP answer; never nil in what the adapter returns
}

func (e *APIError) Error() string {
	msg := fmt.Sprintf("HTTP %d %s: %s", e.Status, e.Title, e.Detail)
	if len(e.Errors) > 0 {
		msg += " (" + strings.Join(e.Errors, "; ") + ")"
	}
	return msg
}

func (e *APIError) Unwrap() error { return e.Err }

func parseError(re *rest.Error) *APIError {
	e := &APIError{Status: re.Status, RetryAfter: re.RetryAfter, Err: re}
	var w struct {
		Title   string   `json:"title"`
		Detail  string   `json:"detail"`
		Errors  []string `json:"errors"`
		Message string   `json:"message"` // REST v1's shape
		Error   string   `json:"error"`
	}
	if json.Unmarshal(re.Body, &w) == nil {
		e.Title, e.Detail, e.Errors = w.Title, w.Detail, w.Errors
		if e.Detail == "" {
			e.Detail = w.Message + w.Error
		}
	}
	if e.Title == "" {
		e.Title = http.StatusText(re.Status)
	}
	if e.Detail == "" {
		e.Detail = strings.TrimSpace(string(re.Body))
	}
	return e
}

// CapacityText is what RunPod answers, as HTTP 400 with no machine-readable
// code, when a create cannot be placed: "There are no longer any instances
// available with the requested specifications. Please refresh and try
// again." It is matched case-insensitively in the problem's detail.
const CapacityText = "no longer any instances available"

// InUseText is what RunPod answers the delete of a network volume that a
// pod (or a serverless worker) still mounts: "You must remove this network
// volume from all pods before deleting it." The v2 document lists no such
// answer for DELETE /v2/network-volumes/{id}; the text is recorded from
// RunPod's answers in public client code (dstack,
// https://github.com/dstackai/dstack/pull/3781, its review thread), whose
// status v2 does not say. It is matched case-insensitively in the detail
// of any 4xx answer but 401 and 429.
const InUseText = "remove this network volume from all pods"

// classifyAPI maps an answer to the failover policy, following the create
// operation's table in RunPod's v2 OpenAPI description:
//
//	400 with CapacityText         Capacity
//	4xx with InUseText            InvalidRequest wrapping provider.ErrInUse (a volume still mounted;
//	                              401 and 429 keep their rows)
//	400 otherwise on create       Unavailable (a rule or this GPU/data center cannot be placed; nothing exists)
//	400 on create volume          Unavailable (the data center takes no network volume; nothing exists)
//	400 otherwise                 InvalidRequest
//	402 insufficient balance      Quota, provider-wide
//	401                           Credentials
//	403 on create                 Unavailable (the account cannot use this pool)
//	403 otherwise                 Credentials
//	409                           Failed (DELETE/PATCH: the pod belongs to a cluster and only
//	                              DELETE /v2/clusters/{id} removes it; no retry changes that)
//	422                           InvalidRequest
//	429, 5xx                      Transient (Retry-After honoured)
//	anything else                 Failed
//
// (RunPod REST API v2 OpenAPI, runpod/docs api-reference-v2/openapi.json,
// version 2.0.0 of 2026-08-18: deletePod answers 409 "Pod belongs to a
// cluster and cannot be terminated via the pod endpoints". The network
// volume operations, https://docs.runpod.io/api-reference-v2/network-volumes/create-a-network-volume
// and .../delete-a-network-volume, list 400, 401, 403, 422, 429 (create)
// and 401, 403, 404, 429 (delete) besides a default ErrorResponse, with
// nothing of their own for capacity, limits or a volume in use. A data center without network volumes is
// known before the create from getDataCenter's networkVolumeTypes,
// https://docs.runpod.io/api-reference-v2/catalog/get-a-data-center; a
// create refused anyway answers 400, Unavailable as a pod's is. The only
// documented account limit, the balance, is the 402 row, and sizes beyond
// 4 TB need RunPod's support, https://docs.runpod.io/storage/network-volumes.)
func classifyAPI(name, op string, e *APIError) *provider.Error {
	pe := &provider.Error{Kind: provider.Failed, Op: op, Provider: name, Err: e, RetryAfter: e.RetryAfter}
	create := op == "create"
	detail := strings.ToLower(e.Detail)
	switch {
	case e.Status == http.StatusBadRequest && strings.Contains(detail, CapacityText):
		pe.Kind = provider.Capacity
	case e.Status/100 == 4 && e.Status != http.StatusUnauthorized && e.Status != http.StatusTooManyRequests && strings.Contains(detail, InUseText):
		pe.Kind, pe.Err = provider.InvalidRequest, fmt.Errorf("%w: %w", provider.ErrInUse, e)
	case e.Status == http.StatusBadRequest && (create || op == opCreateVolume):
		pe.Kind = provider.Unavailable
	case e.Status == http.StatusBadRequest || e.Status == http.StatusUnprocessableEntity:
		pe.Kind = provider.InvalidRequest
	case e.Status == http.StatusPaymentRequired:
		pe.Kind, pe.Block = provider.Quota, provider.ScopeProvider
	case e.Status == http.StatusUnauthorized:
		pe.Kind = provider.Credentials
	case e.Status == http.StatusForbidden && create:
		pe.Kind = provider.Unavailable
	case e.Status == http.StatusForbidden:
		pe.Kind = provider.Credentials
	case e.Status == http.StatusConflict:
		pe.Kind = provider.Failed // a cluster's pod: retrying the same call never succeeds
	case e.Status == http.StatusTooManyRequests || e.Status >= 500:
		pe.Kind = provider.Transient
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
