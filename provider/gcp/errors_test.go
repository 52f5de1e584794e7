package gcp

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"
	"github.com/googleapis/gax-go/v2/apierror"
	"google.golang.org/api/googleapi"

	"github.com/org/gpuprov/provider"
)

// TestClassify is the table of synchronous errors: the documented reasons
// (googleapi.Error.Errors[].Reason) and statuses, wrapped as the REST client
// wraps them (an *apierror.APIError around a *googleapi.Error). References
// as in docs/clouds/gcp.md: [errors] the v1 error catalog, [bulk]
// "Troubleshooting bulk VM creation", [sky] SkyPilot's GCP failover handler.
func TestClassify(t *testing.T) {
	p := &Provider{name: "gcp"}
	for _, tc := range []struct {
		status  int
		reason  string
		message string
		kind    provider.ErrorKind
		scope   provider.Scope
	}{
		{429, "rateLimitExceeded", "", provider.Transient, provider.ScopeOffer},
		{403, "rateLimitExceeded", "", provider.Transient, provider.ScopeOffer},
		{403, "userRateLimitExceeded", "", provider.Transient, provider.ScopeOffer},
		{500, "backendError", "", provider.Transient, provider.ScopeOffer},
		{503, "", "", provider.Transient, provider.ScopeOffer},
		{502, "", "", provider.Transient, provider.ScopeOffer},
		{400, "resourceNotReady", "", provider.Transient, provider.ScopeOffer},
		{400, "resourceInUseByAnotherResource", "", provider.Transient, provider.ScopeOffer},
		// Quotas ([bulk]: 403 quotaExceeded, "Quota 'X' exceeded. Limit: N in
		// region R."; "Allocation quotas": one GPU quota per model and region,
		// PREEMPTIBLE_* for Spot, GPUS_ALL_REGIONS for the project) block
		// what the metric counts: the GPU model (the offer's family), Spot,
		// the region or the provider.
		{403, "quotaExceeded", "Quota 'NVIDIA_H100_GPUS' exceeded. Limit: 8.0 in region us-east4.", provider.Quota, provider.ScopeFamily},
		{403, "quotaExceeded", "Quota 'PREEMPTIBLE_NVIDIA_L4_GPUS' exceeded. Limit: 0.0 in region us-central1.", provider.Quota, provider.ScopeFamily},
		{403, "quotaExceeded", "Quota 'PREEMPTIBLE_CPUS' exceeded. Limit: 0.0 in region us-central1.", provider.Quota, provider.ScopeSpot},
		{403, "quotaExceeded", "Quota 'CPUS' exceeded. Limit: 24.0 in region us-central1.", provider.Quota, provider.ScopeRegion},
		{403, "quotaExceeded", "Quota 'GPUS_ALL_REGIONS' exceeded. Limit: 0.0 globally.", provider.Quota, provider.ScopeProvider},
		// [bulk]: 503 insufficientCapacity, the zone lacks the resources of
		// the request (its type); SkyPilot's GCP handler blocks that
		// request's resources in the zone only.
		{503, "insufficientCapacity", "", provider.Capacity, provider.ScopeOffer},
		{401, "", "Request had invalid authentication credentials.", provider.Credentials, provider.ScopeProvider},
		{403, "forbidden", "", provider.Credentials, provider.ScopeProvider},
		{403, "insufficientPermissions", "", provider.Credentials, provider.ScopeProvider},
		{403, "accessNotConfigured", "Compute Engine API has not been used in project", provider.Credentials, provider.ScopeProvider},
		{400, "invalid", "", provider.InvalidRequest, provider.ScopeOffer},
		{400, "required", "", provider.InvalidRequest, provider.ScopeOffer},
		{400, "", "", provider.InvalidRequest, provider.ScopeOffer},
		// A machine or accelerator type the zone does not offer is refused
		// before any operation with 400 invalid; gcloud compute instances
		// create matches this text (google-cloud-sdk lib/surface/compute/
		// instances/create.py). That type is not there: the offer is
		// blocked, the zone's other types and other zones may launch.
		{404, "notFound", "The resource 'projects/p/zones/us-west4-a/acceleratorTypes/nvidia-l4' was not found", provider.Unavailable, provider.ScopeOffer},
		{404, "notFound", "The resource 'projects/p/zones/us-west4-a/machineTypes/a3-highgpu-8g' was not found", provider.Unavailable, provider.ScopeOffer},
		{400, "invalid", "Invalid value for field 'resource.machineType': 'zones/us-central1-f/machineTypes/g2-standard-4'. Machine type with name 'g2-standard-4' does not exist in zone 'us-central1-f'.", provider.Unavailable, provider.ScopeOffer},
		{400, "invalid", "Invalid value for field 'resource.guestAccelerators[0].acceleratorType': 'zones/us-central1-f/acceleratorTypes/nvidia-tesla-v100'. Accelerator type 'nvidia-tesla-v100' does not exist in zone 'us-central1-f'.", provider.Unavailable, provider.ScopeOffer},
		{400, "badRequest", "The resource 'projects/p/zones/us-west1-b/acceleratorTypes/nvidia-tesla-p4' was not found", provider.Unavailable, provider.ScopeOffer},
		// A zone the project may not use ([sky] records the text and blocks
		// the zone): nothing launches there.
		{403, "forbidden", "Location us-east1-d is not found or access is unauthorized.", provider.Unavailable, provider.ScopeZone},
		// A malformed machine type is the request's fault: no zone helps.
		{400, "invalid", "Invalid value for field 'resource.machineType': 'g2 standard'. Must be a match of regex '[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?'", provider.InvalidRequest, provider.ScopeOffer},
		{400, "badRequest", "[nvidia-tesla-a100, n1-highmem-8] features are not compatible for creating instance.", provider.InvalidRequest, provider.ScopeOffer},
		// A missing or bad credential is 401 whatever the reason
		// (reason "required" for a missing Authorization header).
		{401, "required", "Request is missing required authentication credential.", provider.Credentials, provider.ScopeProvider},
		{401, "authError", "Invalid Credentials", provider.Credentials, provider.ScopeProvider},
		{404, "notFound", "The resource 'projects/p/regions/us-central1/subnetworks/gpu' was not found", provider.Failed, provider.ScopeRegion},
		{404, "notFound", "The resource 'projects/p/global/networks/nope' was not found", provider.InvalidRequest, provider.ScopeOffer},
		{404, "notFound", "The resource 'projects/nope-project' was not found", provider.InvalidRequest, provider.ScopeOffer},
		{400, "invalid", "Invalid value for field 'zone': 'xx-west9-z'. Unknown zone.", provider.InvalidRequest, provider.ScopeOffer},
		{404, "notFound", "The resource 'projects/p/global/images/family/nope' was not found", provider.InvalidRequest, provider.ScopeOffer},
		{404, "notFound", "The resource 'projects/p/zones/z/instances/gpuprov-x' was not found", provider.Failed, provider.ScopeOffer},
		// An insert naming a compact placement policy that is missing (the
		// cluster's group was deleted under it): this offer fails, no
		// other blocks.
		{404, "notFound", "The resource 'projects/p/regions/us-central1/resourcePolicies/gpuprov-ring' was not found", provider.Failed, provider.ScopeOffer},
		{409, "alreadyExists", "", provider.Failed, provider.ScopeOffer},
		{412, "conditionNotMet", "", provider.Failed, provider.ScopeOffer},
		{418, "teapot", "", provider.Failed, provider.ScopeOffer},
	} {
		t.Run(fmt.Sprintf("%d_%s_%.30s", tc.status, tc.reason, tc.message), func(t *testing.T) {
			ge := &googleapi.Error{Code: tc.status, Message: tc.message, Header: http.Header{}}
			if tc.reason != "" {
				ge.Errors = []googleapi.ErrorItem{{Reason: tc.reason, Message: tc.message}}
			}
			wrapped, ok := apierror.FromError(ge)
			if !ok {
				t.Fatal("apierror.FromError")
			}
			pe := p.classify("create", wrapped)
			if pe.Kind != tc.kind || pe.Scope() != tc.scope {
				t.Fatalf("got %s/%s, want %s/%s", pe.Kind, pe.Scope(), tc.kind, tc.scope)
			}
			var back *googleapi.Error
			if !errors.As(pe, &back) || back.Code != tc.status || !errors.Is(pe, tc.kind) {
				t.Fatalf("%v does not wrap the API error", pe)
			}
		})
	}
}

func TestClassifyRetryAfterAndTransport(t *testing.T) {
	p := &Provider{name: "gcp"}
	ge := &googleapi.Error{Code: 429, Header: http.Header{"Retry-After": {"7"}}}
	if pe := p.classify("observe", ge); pe.Kind != provider.Transient || pe.RetryAfter != 7*time.Second {
		t.Fatalf("%s %s", pe.Kind, pe.RetryAfter)
	}
	for _, err := range []error{context.DeadlineExceeded, fmt.Errorf("dial tcp: connection refused"), errors.New("unexpected EOF")} {
		if pe := p.classify("create", err); pe.Kind != provider.Transient {
			t.Errorf("%v: %s, want transient", err, pe.Kind)
		}
	}
	if pe := p.classify("create", errors.New("proto: cannot parse")); pe.Kind != provider.Failed {
		t.Errorf("an unclassified error is %s, want failed", pe.Kind)
	}
}

// TestClassifyOp is the table of operation error codes read after Wait.
func TestClassifyOp(t *testing.T) {
	p := &Provider{name: "gcp"}
	for i, tc := range []struct {
		code, message, metric string
		kind                  provider.ErrorKind
		scope                 provider.Scope
	}{
		// "Troubleshooting resource availability errors": the zone lacks the
		// resources to fulfil the request (its machine type, its GPUs);
		// SkyPilot's FailoverCloudErrorHandlerV2._gcp_handler blocks that
		// request's resources in that zone only. The offer is blocked.
		{"ZONE_RESOURCE_POOL_EXHAUSTED", "The zone 'projects/p/zones/us-central1-a' does not have enough resources available to fulfill the request.  Try a different zone, or try again later.", "", provider.Capacity, provider.ScopeOffer},
		{"ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS", "The zone 'projects/p/zones/us-central1-a' does not have enough resources available to fulfill the request.  '(resource type:compute)'.", "", provider.Capacity, provider.ScopeOffer},
		{"UNSUPPORTED_OPERATION", "", "", provider.Capacity, provider.ScopeOffer},
		{"UNSUPPORTED_OPERATION", "Machine type with name 'a2-highgpu-1g' does not exist in zone 'europe-west3-b'.", "", provider.Unavailable, provider.ScopeOffer},
		// RESOURCE_NOT_FOUND is never a stockout: by what is missing.
		{"RESOURCE_NOT_FOUND", "The resource 'projects/p/regions/us-central1/subnetworks/gpu' was not found", "", provider.Failed, provider.ScopeRegion},
		{"RESOURCE_NOT_FOUND", "The resource 'projects/p/global/networks/gpu-net' was not found", "", provider.InvalidRequest, provider.ScopeOffer},
		{"RESOURCE_NOT_FOUND", "The resource 'projects/p/global/images/family/nope' was not found", "", provider.InvalidRequest, provider.ScopeOffer},
		{"RESOURCE_NOT_FOUND", "The resource 'projects/p/zones/us-central1-a/acceleratorTypes/nvidia-l4' was not found", "", provider.Unavailable, provider.ScopeOffer},
		{"RESOURCE_NOT_FOUND", "The resource 'projects/p/zones/us-central1-a/instances/gpuprov-x' was not found", "", provider.Failed, provider.ScopeOffer},
		{"RESOURCE_NOT_FOUND", "", "", provider.Failed, provider.ScopeOffer},
		{"MISSING_REQUIRED_FIELD", "Required field 'resource.disks[0]' not specified", "", provider.InvalidRequest, provider.ScopeOffer},
		{"NETWORK_NOT_FOUND", "Network 'gpu-net' was not found in project 'p'", "", provider.InvalidRequest, provider.ScopeOffer},
		{"PERMISSIONS_ERROR", "Required 'compute.instances.create' permission for 'projects/p/zones/z/instances/x'", "", provider.Credentials, provider.ScopeProvider},
		// [errors] QUOTA_EXCEEDED, its metric in QuotaExceededInfo (the
		// discovery document's Quota.metric names: CPUS, NVIDIA_L4_GPUS,
		// PREEMPTIBLE_NVIDIA_L4_GPUS, PREEMPTIBLE_CPUS, GPUS_ALL_REGIONS).
		{"QUOTA_EXCEEDED", "Quota 'CPUS' exceeded. Limit: 24.0 in region us-central1.", "compute.googleapis.com/cpus", provider.Quota, provider.ScopeRegion},
		{"QUOTA_EXCEEDED", "Quota 'NVIDIA_L4_GPUS' exceeded. Limit: 0.0 in region us-east4.", "compute.googleapis.com/nvidia_l4_gpus", provider.Quota, provider.ScopeFamily},
		{"QUOTA_EXCEEDED", "Quota 'PREEMPTIBLE_NVIDIA_L4_GPUS' exceeded. Limit: 0.0 in region us-east4.", "compute.googleapis.com/preemptible_nvidia_l4_gpus", provider.Quota, provider.ScopeFamily},
		{"QUOTA_EXCEEDED", "Quota 'PREEMPTIBLE_CPUS' exceeded. Limit: 0.0 in region us-east4.", "compute.googleapis.com/preemptible_cpus", provider.Quota, provider.ScopeSpot},
		{"QUOTA_EXCEEDED", "Quota exceeded", "compute.googleapis.com/gpus_all_regions", provider.Quota, provider.ScopeProvider},
		{"RESOURCE_OPERATION_RATE_EXCEEDED", "", "", provider.Transient, provider.ScopeOffer},
		{"RESOURCE_NOT_READY", "", "", provider.Transient, provider.ScopeOffer},
		{"INTERNAL_ERROR", "", "", provider.Transient, provider.ScopeOffer},
		{"RESOURCE_IN_USE_BY_ANOTHER_RESOURCE", "", "", provider.Transient, provider.ScopeOffer},
		{"INVALID_FIELD_VALUE", "", "", provider.InvalidRequest, provider.ScopeOffer},
		{"IAM_PERMISSION_DENIED", "", "", provider.Credentials, provider.ScopeProvider},
		{"CONDITION_NOT_MET", "", "", provider.Failed, provider.ScopeOffer},
		{"NEVER_SEEN_BEFORE", "", "", provider.Failed, provider.ScopeOffer},
	} {
		t.Run(fmt.Sprintf("%d_%s", i, tc.code), func(t *testing.T) {
			e := &computepb.Errors{Code: &tc.code, Message: &tc.message}
			if tc.metric != "" {
				e.ErrorDetails = []*computepb.ErrorDetails{{QuotaInfo: &computepb.QuotaExceededInfo{MetricName: &tc.metric}}}
			}
			status := int32(400)
			op := &computepb.Operation{Name: proto("operation-1"), HttpErrorStatusCode: &status,
				Error: &computepb.Error{Errors: []*computepb.Errors{e}}}
			pe := p.classifyOp("create", operationError(op))
			if pe.Kind != tc.kind || pe.Scope() != tc.scope || !IsCode(pe, tc.code) {
				t.Fatalf("got %s/%s, want %s/%s", pe.Kind, pe.Scope(), tc.kind, tc.scope)
			}
		})
	}
	if operationError(&computepb.Operation{}) != nil {
		t.Fatal("an operation without errors has an error")
	}
}

// A resource policy still named by instances (400
// resourceInUseByAnotherResource, or the operation's
// RESOURCE_IN_USE_BY_ANOTHER_RESOURCE) is Transient and matches
// provider.ErrInUse, also when masking a credential out of its text ended
// the vendor error's chain.
func TestInUseSurvivesMasking(t *testing.T) {
	secret := "ya29.a0-secret-access-token-value"
	p := &Provider{name: "gcp", fileSecrets: []string{secret}}
	ge := &googleapi.Error{Code: 400, Message: "The resource_policy resource 'projects/p/regions/r/resourcePolicies/gpuprov-x' is already being used by 'projects/p/zones/z/instances/gpuprov-x' (proxy saw " + secret + ")",
		Header: http.Header{}, Errors: []googleapi.ErrorItem{{Reason: "resourceInUseByAnotherResource"}}}
	wrapped, _ := apierror.FromError(ge)
	code, msg := "RESOURCE_IN_USE_BY_ANOTHER_RESOURCE", "in use by "+secret
	op := &computepb.Operation{Name: proto("operation-1"), Error: &computepb.Error{Errors: []*computepb.Errors{{Code: &code, Message: &msg}}}}
	for _, pe := range []*provider.Error{
		inUse(p.classify(opDeletePolicy, wrapped), "r", "gpuprov-x"),
		inUse(p.classifyOp(opDeletePolicy, operationError(op)), "r", "gpuprov-x"),
	} {
		if !errors.Is(pe, provider.ErrInUse) || pe.Kind != provider.Transient || strings.Contains(pe.Error(), secret) {
			t.Errorf("%v: in use %v, kind %s", pe, errors.Is(pe, provider.ErrInUse), pe.Kind)
		}
	}
	// Any other classified error does not match.
	if pe := p.classify(opDeletePolicy, &googleapi.Error{Code: 503, Header: http.Header{}}); errors.Is(pe, provider.ErrInUse) {
		t.Errorf("%v matches ErrInUse", pe)
	}
}
