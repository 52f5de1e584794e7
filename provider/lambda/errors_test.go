package lambda

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/org/gpuprov/internal/rest"
	"github.com/org/gpuprov/provider"
)

// TestClassify is built from the error codes of Lambda's OpenAPI document,
// version 1.8.3 (alexandervaneck/lambda-ai-cloud-api-client,
// openapi-1.8.3.json): every ApiError* code it defines, then codes it does
// not define, which go by status.
func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		status     int
		code       string
		retryAfter time.Duration
		kind       provider.ErrorKind
		scope      provider.Scope
	}{
		{400, CodeInsufficientCapacity, 0, provider.Capacity, provider.ScopeOffer},
		// ApiErrorQuotaExceeded names no scope: the offer (the type in the
		// region the launch named), not the provider nor the region.
		{400, CodeQuotaExceeded, 0, provider.Quota, provider.ScopeOffer},
		{400, CodeFileSystemWrongRegion, 0, provider.Unavailable, provider.ScopeOffer},
		{400, CodeInvalidParameters, 0, provider.InvalidRequest, provider.ScopeOffer},
		{404, CodeObjectDoesNotExist, 0, provider.InvalidRequest, provider.ScopeOffer},
		{401, CodeInvalidAPIKey, 0, provider.Credentials, provider.ScopeProvider},
		{403, CodeAccountInactive, 0, provider.Credentials, provider.ScopeProvider},
		{403, CodeInvalidAddress, 0, provider.Credentials, provider.ScopeProvider},
		{409, CodeInternal, 0, provider.Transient, provider.ScopeOffer},
		{400, CodeRulesetInUse, 0, provider.Transient, provider.ScopeOffer},
		{503, CodeProviderUnavailable, 0, provider.Transient, provider.ScopeOffer},
		{400, CodeProviderQuota, 0, provider.Capacity, provider.ScopeOffer},
		{502, "provider/other", 0, provider.Transient, provider.ScopeOffer},
		{429, "", 12 * time.Second, provider.Transient, provider.ScopeOffer},
		// Not in 1.8.3: by status.
		{500, "global/unknown", 0, provider.Transient, provider.ScopeOffer},
		{400, "global/unknown", 0, provider.Failed, provider.ScopeOffer},
		{403, "global/forbidden", 0, provider.Credentials, provider.ScopeProvider},
		{409, "global/conflict", 0, provider.Failed, provider.ScopeOffer},
		{400, "ssh-keys/key-in-use", 0, provider.Failed, provider.ScopeOffer},
		{418, "global/teapot", 0, provider.Failed, provider.ScopeOffer}, // unknown code
		{401, "", 0, provider.Credentials, provider.ScopeProvider},      // a proxy's 401
	} {
		t.Run(tc.code+"_"+http.StatusText(tc.status), func(t *testing.T) {
			body := ""
			if tc.code != "" {
				body = `{"error":{"code":"` + tc.code + `","message":"m","suggestion":"s"}}`
			}
			re := &rest.Error{Method: "POST", Path: "/x", Status: tc.status, Body: []byte(body), RetryAfter: tc.retryAfter}
			pe := classifyAPI("lambda", "create", parseError(re))
			if pe.Kind != tc.kind || pe.Scope() != tc.scope || pe.RetryAfter != tc.retryAfter {
				t.Fatalf("got %s/%s/%s, want %s/%s/%s", pe.Kind, pe.Scope(), pe.RetryAfter, tc.kind, tc.scope, tc.retryAfter)
			}
			if !errors.Is(pe, tc.kind) || !IsAPIError(pe) {
				t.Fatalf("%v does not wrap the API error", pe)
			}
			var ae *APIError
			if !errors.As(pe, &ae) || ae.Status != tc.status || ae.RetryAfter != tc.retryAfter {
				t.Fatalf("%v does not wrap the API error with its status and Retry-After", pe)
			}
			var r *rest.Error
			if !errors.As(pe, &r) || r.Status != tc.status || rest.StatusOf(pe) != tc.status {
				t.Fatalf("%v does not reach the rest error", pe)
			}
			if tc.code != "" && !IsAPIError(pe, tc.code) {
				t.Fatalf("IsAPIError(%v, %s) is false", pe, tc.code)
			}
		})
	}
}

func TestStatusMapping(t *testing.T) {
	for vendor, want := range map[string]provider.InstanceStatus{
		"booting": provider.StatusPending, "active": provider.StatusRunning, "unhealthy": provider.StatusFailed,
		"preempted": provider.StatusFailed, "terminating": provider.StatusStopping, "terminated": provider.StatusTerminated,
		"rebooting": provider.StatusUnknown,
	} {
		if got := status(vendor); got != want {
			t.Errorf("status(%q) = %s, want %s", vendor, got, want)
		}
	}
}

func TestGPUOf(t *testing.T) {
	for _, tc := range []struct{ name, desc, want string }{
		{"gpu_8x_h100_sxm5", "H100 (80 GB SXM5)", "H100-80GB"},
		{"gpu_1x_a100_sxm4", "A100 (40 GB SXM4)", "A100-40GB"},
		{"gpu_8x_a100_80gb_sxm4", "A100 (80 GB SXM4)", "A100-80GB"},
		{"gpu_1x_gh200", "GH200 (96 GB)", "GH200"},
		{"gpu_8x_b200_sxm6", "B200 (180 GB SXM6)", "B200"},
		{"gpu_1x_a10", "A10 (24 GB PCIe)", "A10"},
		{"gpu_1x_h100_pcie", "", "H100-80GB"}, // by name alone
		{"gpu_1x_rtx6000", "RTX 6000 (24 GB)", ""},
	} {
		g, ok := gpuOf(wireInstanceType{Name: tc.name, GPUDescription: tc.desc})
		if (tc.want == "") == ok || g.Name != tc.want {
			t.Errorf("gpuOf(%s, %q) = %q %v, want %q", tc.name, tc.desc, g.Name, ok, tc.want)
		}
	}
}

func TestSideNameFitsLambdaLimits(t *testing.T) {
	vm := "a234567890123456789012345678901234567890123456789x" // 50 characters
	if n := len(SideName(vm, "inst")); n > 64 {
		t.Fatalf("side name is %d characters, Lambda allows 64", n)
	}
	if SideName("a", "inst-1") == SideName("a", "inst-2") {
		t.Fatal("two installations share a side name")
	}
}
