package aws

import (
	"context"
	"errors"
	"net"
	"net/http"
	"testing"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/org/gpuprov/provider"
)

// apiErr builds the error chain the SDK returns for an error answer.
func apiErr(status int, code string) error {
	return &smithy.OperationError{ServiceID: "EC2", OperationName: "RunInstances", Err: &awshttp.ResponseError{
		ResponseError: &smithyhttp.ResponseError{Response: &smithyhttp.Response{Response: &http.Response{StatusCode: status, Header: http.Header{}}},
			Err: &smithy.GenericAPIError{Code: code, Message: "m"}}, RequestID: "r"}}
}

// TestClassify is the error table of the notes (EC2 API Reference, error
// codes): each documented code with the status EC2 sends it with.
func TestClassify(t *testing.T) {
	p := &Provider{name: "aws"}
	type row struct {
		code   string
		status int
		kind   provider.ErrorKind
		scope  provider.Scope
	}
	rows := []row{
		{"InsufficientInstanceCapacity", 500, provider.Capacity, provider.ScopeOffer},
		{"InsufficientCapacityOnHost", 500, provider.Capacity, provider.ScopeOffer},
		{"InsufficientHostCapacity", 500, provider.Capacity, provider.ScopeOffer},
		{"InsufficientCapacity", 500, provider.Capacity, provider.ScopeOffer},
		{"UnfulfillableCapacity", 400, provider.Capacity, provider.ScopeOffer},
		{"SpotMaxPriceTooLow", 400, provider.Capacity, provider.ScopeOffer},
		{"ReservationCapacityExceeded", 400, provider.Capacity, provider.ScopeOffer},
		{"RequestLimitExceeded", 503, provider.Transient, provider.ScopeOffer},
		{"EC2ThrottledException", 400, provider.Transient, provider.ScopeOffer},
		{"ThrottlingException", 400, provider.Transient, provider.ScopeOffer},
		{"ThrottlingSomethingElse", 400, provider.Transient, provider.ScopeOffer},
		{"InternalError", 500, provider.Transient, provider.ScopeOffer},
		{"InternalFailure", 500, provider.Transient, provider.ScopeOffer},
		{"ServerInternal", 500, provider.Transient, provider.ScopeOffer},
		{"ServiceUnavailable", 503, provider.Transient, provider.ScopeOffer},
		{"Unavailable", 503, provider.Transient, provider.ScopeOffer},
		{"RequestTimeout", 400, provider.Transient, provider.ScopeOffer},
		{"DependencyViolation", 400, provider.Transient, provider.ScopeOffer},
		{"InstanceLimitExceeded", 400, provider.Quota, provider.ScopeRegion},
		{"VcpuLimitExceeded", 400, provider.Quota, provider.ScopeRegion},
		{"MaxSpotInstanceCountExceeded", 400, provider.Quota, provider.ScopeRegion},
		{"VolumeLimitExceeded", 400, provider.Quota, provider.ScopeRegion},
		{"MaxIOPSLimitExceeded", 400, provider.Quota, provider.ScopeRegion},
		{"SecurityGroupLimitExceeded", 400, provider.Quota, provider.ScopeRegion},
		{"KeyPairLimitExceeded", 400, provider.Quota, provider.ScopeRegion},
		{"ResourceLimitExceeded", 400, provider.Quota, provider.ScopeRegion},
		{"Unsupported", 400, provider.Unavailable, provider.ScopeOffer},
		{"UnsupportedOperation", 400, provider.Unavailable, provider.ScopeOffer},
		{"OptInRequired", 401, provider.Unavailable, provider.ScopeRegion},
		{"InvalidAMIID.NotFound", 400, provider.Unavailable, provider.ScopeOffer},
		{"VPCIdNotSpecified", 400, provider.Unavailable, provider.ScopeRegion},
		{"DefaultVpcDoesNotExist", 400, provider.Unavailable, provider.ScopeRegion},
		{"InsufficientFreeAddressesInSubnet", 400, provider.Unavailable, provider.ScopeOffer},
		{"ParameterNotFound", 400, provider.Unavailable, provider.ScopeOffer},
		{"InvalidParameterValue", 400, provider.InvalidRequest, provider.ScopeOffer},
		{"InvalidParameter", 400, provider.InvalidRequest, provider.ScopeOffer},
		{"InvalidParameterCombination", 400, provider.InvalidRequest, provider.ScopeOffer},
		{"MissingParameter", 400, provider.InvalidRequest, provider.ScopeOffer},
		{"UnknownParameter", 400, provider.InvalidRequest, provider.ScopeOffer},
		{"ValidationError", 400, provider.InvalidRequest, provider.ScopeOffer},
		{"InvalidZone.NotFound", 400, provider.InvalidRequest, provider.ScopeOffer},
		{"InvalidAvailabilityZone", 400, provider.InvalidRequest, provider.ScopeOffer},
		{"InvalidAMIID.Malformed", 400, provider.InvalidRequest, provider.ScopeOffer},
		{"InvalidKeyPair.NotFound", 400, provider.InvalidRequest, provider.ScopeOffer},
		{"InvalidSubnetID.NotFound", 400, provider.InvalidRequest, provider.ScopeOffer},
		{"InvalidBlockDeviceMapping", 400, provider.InvalidRequest, provider.ScopeOffer},
		{"IdempotentParameterMismatch", 400, provider.InvalidRequest, provider.ScopeOffer},
		{"InvalidInstanceID.Malformed", 400, provider.InvalidRequest, provider.ScopeOffer},
		{"AuthFailure", 401, provider.Credentials, provider.ScopeProvider},
		{"UnauthorizedOperation", 403, provider.Credentials, provider.ScopeProvider},
		{"InvalidClientTokenId", 403, provider.Credentials, provider.ScopeProvider},
		{"SignatureDoesNotMatch", 403, provider.Credentials, provider.ScopeProvider},
		{"MissingAuthenticationToken", 403, provider.Credentials, provider.ScopeProvider},
		{"IncompleteSignature", 400, provider.Credentials, provider.ScopeProvider},
		{"RequestExpired", 400, provider.Credentials, provider.ScopeProvider},
		{"Blocked", 403, provider.Credentials, provider.ScopeProvider},
		{"PendingVerification", 401, provider.Credentials, provider.ScopeProvider},
		{"AccountDisabled", 401, provider.Credentials, provider.ScopeProvider},
		{"IdempotentInstanceTerminated", 400, provider.Failed, provider.ScopeOffer},
		// codes the table does not know fall back to the status
		{"NewCode", 400, provider.Failed, provider.ScopeOffer},
		{"NewCode", 500, provider.Transient, provider.ScopeOffer},
		{"NewCode", 429, provider.Transient, provider.ScopeOffer},
		{"NewCode", 403, provider.Credentials, provider.ScopeProvider},
	}
	for _, r := range rows {
		t.Run(r.code+"_"+http.StatusText(r.status), func(t *testing.T) {
			err := apiErr(r.status, r.code)
			pe := p.classify(context.Background(), "create", err)
			if pe.Kind != r.kind || pe.Scope() != r.scope {
				t.Fatalf("%s/%d: %s %s, want %s %s", r.code, r.status, pe.Kind, pe.Scope(), r.kind, r.scope)
			}
			var ae smithy.APIError
			if !errors.As(pe, &ae) || ae.ErrorCode() != r.code || !errors.Is(pe, r.kind) {
				t.Fatalf("%v does not wrap the API error", pe)
			}
		})
	}
}

func TestClassifyTransport(t *testing.T) {
	p := &Provider{name: "aws"}
	bg := context.Background()
	for name, tc := range map[string]struct {
		err  error
		kind provider.ErrorKind
	}{
		"no answer":       {&smithy.OperationError{Err: &smithyhttp.RequestSendError{Err: &net.OpError{Op: "dial", Err: errors.New("refused")}}}, provider.Transient},
		"unreadable":      {&smithy.OperationError{Err: &smithy.DeserializationError{Err: errors.New("bad xml")}}, provider.Transient},
		"proxy 502":       {&smithy.OperationError{Err: &awshttp.ResponseError{ResponseError: &smithyhttp.ResponseError{Response: &smithyhttp.Response{Response: &http.Response{StatusCode: 502, Header: http.Header{}}}, Err: errors.New("html")}}}, provider.Transient},
		"nothing known":   {errors.New("strange"), provider.Failed},
		"per-call expiry": {context.DeadlineExceeded, provider.Transient},
	} {
		if pe := p.classify(bg, "observe", tc.err); pe.Kind != tc.kind {
			t.Errorf("%s: %s, want %s", name, pe.Kind, tc.kind)
		}
	}
	ctx, cancel := context.WithCancel(bg)
	cancel()
	pe := p.classify(ctx, "observe", errors.New("canceled underneath"))
	if pe.Kind != provider.Transient || !provider.IsContextError(pe) {
		t.Fatalf("caller's cancellation: %v (kind %s), want Transient matching context.Canceled", pe, pe.Kind)
	}
}

func TestClientToken(t *testing.T) {
	spec := &provider.InstanceSpec{VM: "a", Installation: "i", Attempt: 2, IdempotencyToken: "tok-1"}
	if got := clientToken(spec); got != "tok-1" {
		t.Fatalf("short token changed: %q", got)
	}
	spec.IdempotencyToken = ""
	a := clientToken(spec)
	spec.Attempt = 3
	if b := clientToken(spec); len(a) != 64 || a == b {
		t.Fatalf("derived tokens %q %q: want 64 characters, distinct per attempt", a, b)
	}
	spec.IdempotencyToken = "ü-not-ascii"
	if got := clientToken(spec); len(got) != 64 {
		t.Fatalf("non-ASCII token sent as %q", got)
	}
}

func TestStatusMapping(t *testing.T) {
	for state, want := range map[string]provider.InstanceStatus{
		"pending": provider.StatusPending, "running": provider.StatusRunning, "shutting-down": provider.StatusStopping,
		"stopping": provider.StatusStopping, "stopped": provider.StatusFailed, "terminated": provider.StatusTerminated,
		"rebooting": provider.StatusUnknown,
	} {
		if got := status(state); got != want {
			t.Errorf("status(%q) = %s, want %s", state, got, want)
		}
	}
}
