package primeintellect

import (
	"errors"
	"testing"
	"time"

	"github.com/org/gpuprov/internal/rest"
	"github.com/org/gpuprov/provider"
)

// TestClassify is built from the statuses of Prime's API reference (401,
// 402 wallet, 422 validation, 429, 5xx) and the stock messages it answers
// on create. Prime's OpenAPI document (compute API 0.1.0) documents only 401
// and 422 ({"errors":[{"param","details"}]}).
func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		body   string
		after  time.Duration
		kind   provider.ErrorKind
		scope  provider.Scope
	}{
		{"wallet", 402, `{"detail":"Insufficient balance"}`, 0, provider.Quota, provider.ScopeProvider},
		{"wallet as 400", 400, `{"detail":"Insufficient funds in wallet"}`, 0, provider.Quota, provider.ScopeProvider},
		{"unauthorized", 401, `{"detail":"Invalid API key"}`, 0, provider.Credentials, provider.ScopeProvider},
		{"forbidden", 403, `{"detail":"Missing scope"}`, 0, provider.Credentials, provider.ScopeProvider},
		{"out of stock", 400, `{"detail":"This configuration is out of stock"}`, 0, provider.Capacity, provider.ScopeOffer},
		{"no capacity 409", 409, `{"detail":"No capacity available for the selected GPU"}`, 0, provider.Capacity, provider.ScopeOffer},
		{"not available", 400, `{"detail":"Selected configuration is not available anymore"}`, 0, provider.Capacity, provider.ScopeOffer},
		{"validation list", 422, `{"detail":[{"loc":["body","pod","gpuType"],"msg":"value is not a valid enumeration member"}]}`, 0, provider.InvalidRequest, provider.ScopeOffer},
		{"validation errors", 422, `{"errors":[{"param":"socket","details":"invalid"}]}`, 0, provider.InvalidRequest, provider.ScopeOffer},
		// No stockout answer is documented: an unknown 4xx on create goes
		// to the next offer, it never aborts the launch.
		{"bad request", 400, `{"detail":"Invalid image for this cloudId"}`, 0, provider.Unavailable, provider.ScopeOffer},
		{"undocumented stockout", 400, `{"detail":"No machines matching your request right now"}`, 0, provider.Unavailable, provider.ScopeOffer},
		{"undocumented 409", 409, `{"detail":"Request could not be fulfilled"}`, 0, provider.Unavailable, provider.ScopeOffer},
		{"throttled", 429, `{"detail":"Too many requests"}`, 9 * time.Second, provider.Transient, provider.ScopeOffer},
		{"server", 500, `Internal Server Error`, 0, provider.Transient, provider.ScopeOffer},
		{"gateway", 502, ``, 0, provider.Transient, provider.ScopeOffer},
		{"cloudId gone", 404, `{"detail":"Not Found"}`, 0, provider.Unavailable, provider.ScopeOffer},
	} {
		t.Run(tc.name, func(t *testing.T) {
			re := &rest.Error{Method: "POST", Path: "/pods/", Status: tc.status, Body: []byte(tc.body), RetryAfter: tc.after}
			pe := classifyAPI("primeintellect", "create", parseError(re))
			if pe.Kind != tc.kind || pe.Scope() != tc.scope || pe.RetryAfter != tc.after {
				t.Fatalf("got %s/%s/%s, want %s/%s/%s (%v)", pe.Kind, pe.Scope(), pe.RetryAfter, tc.kind, tc.scope, tc.after, pe)
			}
			var ae *APIError
			if !errors.As(pe, &ae) || ae.Status != tc.status || !errors.Is(pe, tc.kind) {
				t.Fatalf("%v does not wrap the API error", pe)
			}
			if ae.RetryAfter != tc.after {
				t.Fatalf("APIError.RetryAfter = %s, want %s", ae.RetryAfter, tc.after)
			}
			// The adapter's own checks (isGone) reach the HTTP answer through it.
			if rest.StatusOf(pe) != tc.status {
				t.Fatalf("rest.StatusOf(%v) = %d, want %d", pe, rest.StatusOf(pe), tc.status)
			}
		})
	}
}

// TestClassifyOutsideCreate: away from create a 400 is still the request's
// fault and a 404 is not a stockout.
func TestClassifyOutsideCreate(t *testing.T) {
	for _, tc := range []struct {
		op     string
		status int
		body   string
		kind   provider.ErrorKind
	}{
		{"prepare", 400, `{"detail":"Invalid public key"}`, provider.InvalidRequest},
		{"diagnose", 404, `{"detail":"Pod not found"}`, provider.Failed},
		{"delete", 418, `{}`, provider.Failed},
	} {
		re := &rest.Error{Status: tc.status, Body: []byte(tc.body)}
		if pe := classifyAPI("primeintellect", tc.op, parseError(re)); pe.Kind != tc.kind {
			t.Errorf("%s %d: %s, want %s", tc.op, tc.status, pe.Kind, tc.kind)
		}
	}
}

func TestStatusMapping(t *testing.T) {
	for _, tc := range []struct {
		pod, install string
		want         provider.InstanceStatus
	}{
		{"PROVISIONING", "PENDING", provider.StatusPending},
		{"PENDING", "PENDING", provider.StatusPending},
		{"ACTIVE", "ACTIVE", provider.StatusPending}, // still installing
		{"ACTIVE", "PENDING", provider.StatusPending},
		{"ACTIVE", "FINISHED", provider.StatusRunning},
		{"ACTIVE", "ERROR", provider.StatusFailed},
		{"ERROR", "", provider.StatusFailed},
		{"STOPPED", "FINISHED", provider.StatusFailed},
		{"DELETING", "FINISHED", provider.StatusStopping},
		{"TERMINATED", "TERMINATED", provider.StatusTerminated},
		{"UNKNOWN", "", provider.StatusUnknown},
	} {
		if got := status(tc.pod, tc.install); got != tc.want {
			t.Errorf("status(%s, %s) = %s, want %s", tc.pod, tc.install, got, tc.want)
		}
	}
}

func TestParseSSH(t *testing.T) {
	for in, want := range map[string]provider.SSHEndpoint{
		"root@1.2.3.4 -p 22":          {Host: "1.2.3.4", Port: 22, User: "root"},
		"ubuntu@host.example -p 4022": {Host: "host.example", Port: 4022, User: "ubuntu"},
		"ssh root@5.6.7.8 -p 30022":   {Host: "5.6.7.8", Port: 30022, User: "root"},
		"9.9.9.9":                     {Host: "9.9.9.9", Port: 22, User: "root"},
	} {
		if got, ok := parseSSH(in); !ok || got != want {
			t.Errorf("parseSSH(%q) = %+v %v, want %+v", in, got, ok, want)
		}
	}
	if _, ok := parseSSH("root@1.2.3.4 -p 99999"); ok {
		t.Error("bad port accepted")
	}
	if got := firstString([]byte(`[null,"root@1.1.1.1 -p 2"]`)); got != "root@1.1.1.1 -p 2" {
		t.Errorf("list form: %q", got)
	}
}

func TestPodNameRoundTrips(t *testing.T) {
	if vm := vmOf(PodName("my-vm-2", "inst"), "inst"); vm != "my-vm-2" {
		t.Fatalf("vmOf = %q", vm)
	}
	if vm := vmOf(PodName("my-vm", "inst"), "other"); vm != "" {
		t.Fatalf("another installation's pod parsed as %q", vm)
	}
}

func TestPrimeGPUTypesAreCanonical(t *testing.T) {
	for in, want := range map[string]string{"H100_80GB": "H100-80GB", "A100_80GB": "A100-80GB", "A100_40GB": "A100-40GB",
		"H200_141GB": "H200", "GH200_480GB": "GH200", "B200_180GB": "B200", "L40S_48GB": "L40S", "RTX4090_24GB": "RTX4090",
		"RTX6000Ada_48GB": "RTX6000-ADA", "A6000_48GB": "A6000"} {
		if g, ok := provider.LookupGPU(in); !ok || g.Name != want {
			t.Errorf("LookupGPU(%s) = %q %v, want %s", in, g.Name, ok, want)
		}
	}
}
