package runpod

import (
	"errors"
	"testing"
	"time"

	"github.com/org/gpuprov/internal/rest"
	"github.com/org/gpuprov/provider"
)

// TestClassify is built from the create operation's error table in RunPod's
// REST v2 OpenAPI description and the capacity detail RunPod answers.
func TestClassify(t *testing.T) {
	capacity := `{"detail":"There are no longer any instances available with the requested specifications. Please refresh and try again.","status":400,"title":"Bad Request"}`
	inUse := `{"title":"Bad Request","status":400,"detail":"You must remove this network volume from all pods before deleting it."}`
	for _, tc := range []struct {
		name, op string
		status   int
		body     string
		after    time.Duration
		kind     provider.ErrorKind
		scope    provider.Scope
	}{
		{"capacity", "create", 400, capacity, 0, provider.Capacity, provider.ScopeOffer},
		{"capacity lower case", "create", 400, `{"detail":"there are NO LONGER ANY INSTANCES AVAILABLE"}`, 0, provider.Capacity, provider.ScopeOffer},
		{"placement rule", "create", 400, `{"title":"Bad Request","status":400,"detail":"globalNetworking requires an NVIDIA GPU"}`, 0, provider.Unavailable, provider.ScopeOffer},
		{"bad request elsewhere", "observe", 400, `{"title":"Bad Request","status":400,"detail":"request could not be processed"}`, 0, provider.InvalidRequest, provider.ScopeOffer},
		{"balance", "create", 402, `{"title":"Payment Required","status":402,"detail":"Insufficient balance"}`, 0, provider.Quota, provider.ScopeProvider},
		{"unauthorized", "plan", 401, `{"title":"Unauthorized","status":401,"detail":"missing bearer token"}`, 0, provider.Credentials, provider.ScopeProvider},
		{"pool access", "create", 403, `{"title":"Forbidden","status":403,"detail":"access denied"}`, 0, provider.Unavailable, provider.ScopeOffer},
		{"forbidden", "observe", 403, `{"title":"Forbidden","status":403,"detail":"access denied"}`, 0, provider.Credentials, provider.ScopeProvider},
		{"validation", "create", 422, `{"title":"Unprocessable Entity","status":422,"detail":"Request validation failed.","errors":["$.gpu.id: required"]}`, 0, provider.InvalidRequest, provider.ScopeOffer},
		// deletePod's 409 in the v2 OpenAPI: retried as Transient it looped for ever.
		{"cluster pod", "delete", 409, `{"title":"Conflict","status":409,"detail":"Pod belongs to a cluster and cannot be terminated via the pod endpoints."}`, 0, provider.Failed, provider.ScopeOffer},
		{"throttled", "plan", 429, `{"title":"Too Many Requests","status":429,"detail":"rate limit exceeded for the minute window"}`, 12 * time.Second, provider.Transient, provider.ScopeOffer},
		{"server", "create", 502, ``, 0, provider.Transient, provider.ScopeOffer},
		{"not found", "diagnose", 404, `{"title":"Not Found","status":404,"detail":"pod not found"}`, 0, provider.Failed, provider.ScopeOffer},
		{"volume refused in the data center", opCreateVolume, 400, `{"title":"Bad Request","status":400,"detail":"request could not be processed"}`, 0, provider.Unavailable, provider.ScopeOffer},
		{"volume capacity", opCreateVolume, 400, capacity, 0, provider.Capacity, provider.ScopeOffer},
		{"volume balance", opCreateVolume, 402, `{"title":"Payment Required","status":402,"detail":"Insufficient balance"}`, 0, provider.Quota, provider.ScopeProvider},
		{"volume in use", opDeleteVolume, 400, inUse, 0, provider.InvalidRequest, provider.ScopeOffer},
		{"volume in use, other status", opDeleteVolume, 409, inUse, 0, provider.InvalidRequest, provider.ScopeOffer},
		{"in-use text while throttled", opDeleteVolume, 429, inUse, 0, provider.Transient, provider.ScopeOffer},
	} {
		t.Run(tc.name, func(t *testing.T) {
			re := &rest.Error{Status: tc.status, Body: []byte(tc.body), RetryAfter: tc.after}
			pe := classifyAPI("runpod", tc.op, parseError(re))
			if pe.Kind != tc.kind || pe.Scope() != tc.scope || pe.RetryAfter != tc.after {
				t.Fatalf("got %s/%s/%s, want %s/%s/%s (%v)", pe.Kind, pe.Scope(), pe.RetryAfter, tc.kind, tc.scope, tc.after, pe)
			}
			var ae *APIError
			if !errors.As(pe, &ae) || ae.Status != tc.status {
				t.Fatalf("%v does not wrap the API error", pe)
			}
			if ae.RetryAfter != tc.after {
				t.Fatalf("APIError.RetryAfter = %s, want %s", ae.RetryAfter, tc.after)
			}
			// A volume still mounted matches provider.ErrInUse, which the
			// core's delete waits on; nothing else does.
			if inUseWant := tc.body == inUse && tc.status != 429; errors.Is(pe, provider.ErrInUse) != inUseWant {
				t.Fatalf("errors.Is(%v, ErrInUse) = %v, want %v", pe, !inUseWant, inUseWant)
			}
			// The adapter's own checks (isGone) reach the HTTP answer through it.
			if rest.StatusOf(pe) != tc.status {
				t.Fatalf("rest.StatusOf(%v) = %d, want %d", pe, rest.StatusOf(pe), tc.status)
			}
		})
	}
}

func TestStatusMapping(t *testing.T) {
	port, ip := 40022, "192.0.2.1"
	mapped := &struct {
		Uptime int               `json:"uptime"`
		Ports  []wireRuntimePort `json:"ports"`
	}{Ports: []wireRuntimePort{{Private: 22, Public: &port, Type: "tcp", IP: &ip}}}
	for _, tc := range []struct {
		pod  wirePod
		want provider.InstanceStatus
	}{
		{wirePod{Status: "PROVISIONING"}, provider.StatusPending},
		{wirePod{Status: "STARTING"}, provider.StatusPending},
		{wirePod{Status: "RUNNING"}, provider.StatusPending}, // no runtime yet
		{wirePod{Status: "RUNNING", Runtime: mapped}, provider.StatusRunning},
		{wirePod{Status: "EXITED"}, provider.StatusFailed},
		{wirePod{Status: "ERROR"}, provider.StatusFailed},
		{wirePod{Status: "TERMINATED"}, provider.StatusTerminated},
		{wirePod{Status: "MIGRATING"}, provider.StatusUnknown},
	} {
		if got := status(tc.pod); got != tc.want {
			t.Errorf("status(%s, runtime %v) = %s, want %s", tc.pod.Status, tc.pod.Runtime != nil, got, tc.want)
		}
	}
	o := observed(wirePod{ID: "p", Status: "RUNNING", Runtime: mapped})
	if o.SSH == nil || *o.SSH != (provider.SSHEndpoint{Host: ip, Port: port, User: "root"}) {
		t.Fatalf("ssh %+v", o.SSH)
	}
}
