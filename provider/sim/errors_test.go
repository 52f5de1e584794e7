package sim

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/org/gpuprov/internal/rest"
	"github.com/org/gpuprov/provider"
)

// TestClassify is the error table: each status and documented code of the
// sim API (provider/sim/simserver's package documentation) and the kind, scope
// and Retry-After it becomes.
func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		status     int
		code       string
		retryAfter string
		kind       provider.ErrorKind
		scope      provider.Scope
		wantAfter  time.Duration
	}{
		{409, "out_of_capacity", "", provider.Capacity, provider.ScopeOffer, 0},
		{409, "reservation_full", "", provider.Unavailable, provider.ScopeOffer, 0},
		{409, "reservation_ended", "", provider.Unavailable, provider.ScopeOffer, 0},
		{409, "reservation_not_started", "", provider.Unavailable, provider.ScopeOffer, 0},
		{403, "quota_exceeded", "", provider.Quota, provider.ScopeRegion, 0},
		{402, "insufficient_funds", "", provider.Quota, provider.ScopeProvider, 0},
		{401, "unauthorized", "", provider.Credentials, provider.ScopeProvider, 0},
		{400, "invalid_request", "", provider.InvalidRequest, provider.ScopeOffer, 0},
		{429, "rate_limited", "7", provider.Transient, provider.ScopeOffer, 7 * time.Second},
		{500, "internal", "", provider.Transient, provider.ScopeOffer, 0},
		{503, "unavailable", "", provider.Transient, provider.ScopeOffer, 0},
		{504, "timeout", "", provider.Transient, provider.ScopeOffer, 0},
		{409, "conflict", "", provider.Transient, provider.ScopeOffer, 0},
		{409, "volume_in_use", "", provider.InvalidRequest, provider.ScopeOffer, 0},
		{404, "not_found", "", provider.Failed, provider.ScopeOffer, 0},
		{418, "teapot", "", provider.Failed, provider.ScopeOffer, 0},   // unknown code
		{400, "", "", provider.Failed, provider.ScopeOffer, 0},         // no body
		{502, "", "", provider.Transient, provider.ScopeOffer, 0},      // a proxy's 5xx
		{429, "", "", provider.Transient, provider.ScopeOffer, 0},      // throttled without a body
		{401, "", "", provider.Credentials, provider.ScopeProvider, 0}, // a proxy's 401
	} {
		t.Run(tc.code+"_"+http.StatusText(tc.status), func(t *testing.T) {
			body := ""
			if tc.code != "" {
				body = `{"error":{"code":"` + tc.code + `","message":"m"}}`
			}
			// The answer as the rest client hands it over (it parses
			// Retry-After; internal/rest tests the date form).
			re := &rest.Error{Method: "POST", Path: "/instances", Status: tc.status, Body: []byte(body),
				RetryAfter: rest.RetryAfter(tc.retryAfter, time.Now())}
			pe := classify("sim-a", "create", parseAPIError(re))
			if pe.Kind != tc.kind || pe.Scope() != tc.scope || pe.RetryAfter != tc.wantAfter {
				t.Fatalf("got %s/%s/%s, want %s/%s/%s", pe.Kind, pe.Scope(), pe.RetryAfter, tc.kind, tc.scope, tc.wantAfter)
			}
			var apiErr *APIError
			if !errors.As(pe, &apiErr) || apiErr.Status != tc.status || apiErr.Code != tc.code {
				t.Fatalf("%v does not wrap the API error", pe)
			}
			if !errors.Is(pe, tc.kind) {
				t.Fatalf("errors.Is(%v, %s) is false", pe, tc.kind)
			}
		})
	}
}

func TestStatusMapping(t *testing.T) {
	for vendor, want := range map[string]provider.InstanceStatus{
		"provisioning": provider.StatusPending, "booting": provider.StatusPending, "running": provider.StatusRunning,
		"failed": provider.StatusFailed, "preempted": provider.StatusFailed, "stopping": provider.StatusStopping,
		"terminated": provider.StatusTerminated, "rebooting": provider.StatusUnknown,
	} {
		if got := status(vendor); got != want {
			t.Errorf("status(%q) = %s, want %s", vendor, got, want)
		}
	}
}
