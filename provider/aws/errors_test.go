package aws

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
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

// Sections of the EC2 API Reference's "Error codes for the Amazon EC2 API"
// (https://docs.aws.amazon.com/AWSEC2/latest/APIReference/errors-overview.html,
// read 2026-06 through a Markdown copy of the page) that the rows of
// TestClassify cite, and the User Guide pages the quota scopes follow. Client errors come with a 400-series
// status, server errors with a 500-series one.
const (
	refCommon = "errors-overview#CommonErrors"
	refClient = "errors-overview#api-error-codes-table-client"
	refServer = "errors-overview#api-error-codes-table-server"
	refSSM    = "SSM API Reference, common errors"
	refNone   = "not in the reference"
	// refTerraform: the code hashicorp/terraform-provider-aws matches in
	// internal/service/ec2/errors.go (errCodeInvalidCapacityReservationIdNotFound)
	// and steampipe's aws_ec2_capacity_reservation table ignores as "not
	// found"; the EC2 reference's table does not list it.
	refTerraform = "terraform-provider-aws ec2/errors.go"
	// refQuotas: the Service Quotas API Reference, GetServiceQuota's
	// errors (AccessDeniedException, NoSuchResourceException,
	// IllegalArgumentException, ServiceException, TooManyRequestsException).
	refQuotas = "Service Quotas API Reference, GetServiceQuota errors"
	// refODQuota: EC2 User Guide, "On-Demand Instance quotas": one vCPU
	// quota per instance bucket and region (Running On-Demand G and VT
	// instances, Running On-Demand P instances, …); VcpuLimitExceeded's
	// message names "the instance bucket that the specified instance type
	// belongs to".
	refODQuota = "User Guide, On-Demand Instance quotas"
	// refSpotQuota: EC2 User Guide, "Spot Instance quotas": Spot vCPU
	// quotas per region; exceeding one answers "Max spot instance count
	// exceeded".
	refSpotQuota = "User Guide, Spot Instance quotas"
)

// TestClassify is the error table of that page: each code with the
// status EC2 sends it with, the kind and scope it maps to, and what the
// reference says about it. The code decides before the status: the server
// errors below that are stockouts or zone constraints would otherwise read
// as Transient (retried in the same zone), the client ones as Failed.
func TestClassify(t *testing.T) {
	p := &Provider{name: "aws"}
	type row struct {
		code   string
		status int
		kind   provider.ErrorKind
		scope  provider.Scope
		ref    string // section + what it says
	}
	rows := []row{
		// server errors: capacity
		{"InsufficientInstanceCapacity", 500, provider.Capacity, provider.ScopeOffer, refServer + ": not enough capacity to fulfill your request; try other instance types"},
		{"InsufficientAddressCapacity", 500, provider.Capacity, provider.ScopeZone, refServer + ": not enough available addresses to satisfy your minimum request"},
		// Reserved Instances are of one type in one zone: the offer's.
		{"InsufficientReservedInstanceCapacity", 500, provider.Capacity, provider.ScopeOffer, refServer + ": not enough available Reserved Instances to satisfy your minimum request"},
		{"InsufficientReservedInstancesCapacity", 400, provider.Capacity, provider.ScopeOffer, refClient + ": insufficient capacity for the requested Reserved Instances"},
		{"InsufficientVolumeCapacity", 500, provider.Capacity, provider.ScopeZone, refServer + ": not enough capacity for the EBS volume; try another Availability Zone"},
		{"InsufficientHostCapacity", 500, provider.Capacity, provider.ScopeOffer, refServer + ": not enough capacity for the Dedicated Host request"},
		{"InsufficientCapacity", 500, provider.Capacity, provider.ScopeOffer, refServer + ": not enough capacity for the import instance request"},
		{"InsufficientCapacityOnHost", 400, provider.Capacity, provider.ScopeOffer, refClient + ": not enough capacity on the Dedicated Host"},
		{"UnfulfillableCapacity", 400, provider.Capacity, provider.ScopeOffer, refClient + ": not enough spare capacity for Spot Instances"},
		{"SpotMaxPriceTooLow", 400, provider.Capacity, provider.ScopeOffer, refClient + ": maximum price below the Spot price"},
		// server errors: retry
		{"RequestLimitExceeded", 503, provider.Transient, provider.ScopeOffer, refServer + ": maximum request rate exceeded; sleep between requests"},
		{"InternalError", 500, provider.Transient, provider.ScopeOffer, refServer + ": an internal error; retry your request"},
		{"ServerInternal", 500, provider.Transient, provider.ScopeOffer, refServer + ": an internal error; retry your request"},
		{"InternalFailure", 500, provider.Transient, provider.ScopeOffer, refServer + ": unknown error, exception or failure"},
		{"ServiceUnavailable", 503, provider.Transient, provider.ScopeOffer, refServer + ": temporary failure of the server"},
		{"Unavailable", 503, provider.Transient, provider.ScopeOffer, refServer + ": the server is overloaded"},
		{"EC2ThrottledException", 400, provider.Transient, provider.ScopeOffer, refNone + " (SDK throttle code)"},
		{"ThrottlingException", 400, provider.Transient, provider.ScopeOffer, refSSM},
		{"ThrottlingSomethingElse", 400, provider.Transient, provider.ScopeOffer, refNone + " (Throttling* prefix)"},
		{"RequestTimeout", 400, provider.Transient, provider.ScopeOffer, refNone},
		{"DependencyViolation", 400, provider.Transient, provider.ScopeOffer, refClient + ": the object has dependent resources; remove them, then retry"},
		{"IncorrectInstanceState", 400, provider.Transient, provider.ScopeOffer, refClient + ": the instance is in an incorrect state for the action"},
		{"InvalidGroup.NotFound", 400, provider.Transient, provider.ScopeOffer, refClient + ": the security group does not exist; the id of a recently created one may not have propagated"},
		// account limits
		{"InstanceLimitExceeded", 400, provider.Quota, provider.ScopeRegion, refClient + ": limit on instances you can run concurrently"},
		{"VcpuLimitExceeded", 400, provider.Quota, provider.ScopeFamily, refClient + ": limit on vCPUs of running On-Demand instances; " + refODQuota + ": one limit per instance bucket"},
		{"MaxSpotInstanceCountExceeded", 400, provider.Quota, provider.ScopeSpot, refClient + ": limit on Spot Instances; " + refSpotQuota + ": Spot limits, on-demand launches unaffected"},
		{"VolumeLimitExceeded", 400, provider.Quota, provider.ScopeRegion, refClient + ": limit on EBS volume storage"},
		{"MaxIOPSLimitExceeded", 400, provider.Quota, provider.ScopeRegion, refClient + ": limit on IOPS in the Region"},
		{"SecurityGroupLimitExceeded", 400, provider.Quota, provider.ScopeRegion, refClient + ": limit on security groups"},
		{"KeyPairLimitExceeded", 400, provider.Quota, provider.ScopeRegion, refClient + ": limit on key pairs in the Region"},
		{"ResourceLimitExceeded", 400, provider.Quota, provider.ScopeRegion, refClient + ": an EC2 resource limit"},
		{"PlacementGroupLimitExceeded", 400, provider.Quota, provider.ScopeRegion, refClient + ": limit on placement groups"},
		// not viable here; nothing created
		// The constraint is on the type in the zone: the zone's other types are tried.
		{"Unsupported", 400, provider.Unavailable, provider.ScopeOffer, refClient + ": e.g. an Availability Zone that has constraints on that instance type"},
		{"InvalidInstanceType", 400, provider.Unavailable, provider.ScopeRegion, refClient + ": the instance type is not supported for this request"},
		{"InvalidInstanceType.NotFound", 400, provider.Unavailable, provider.ScopeRegion, refNone + " (moto 5.2.1: \"The instance type '…' does not exist\" in the region)"},
		{"UnsupportedOperation", 400, provider.Unavailable, provider.ScopeOffer, refCommon + ": e.g. an instance type not supported by the AMI"},
		{"VolumeTypeNotAvailableInZone", 400, provider.Unavailable, provider.ScopeZone, refClient + ": try a different Availability Zone"},
		{"InsufficientFreeAddressesInSubnet", 400, provider.Unavailable, provider.ScopeZone, refClient + ": the subnet lacks free private IP addresses"},
		{"InvalidPlacementGroup.InUse", 400, provider.Unavailable, provider.ScopeZone, refClient + ": the placement group is in use (at RunInstances: in another Availability Zone)"},
		{"OptInRequired", 401, provider.Unavailable, provider.ScopeRegion, refCommon + ": not subscribed to the service"},
		{"InvalidAMIID.NotFound", 400, provider.Unavailable, provider.ScopeOffer, refClient + ": the AMI doesn't exist in this Region"},
		{"InvalidAMIID.Unavailable", 400, provider.Unavailable, provider.ScopeOffer, refClient + ": the AMI was deregistered"},
		{"VPCIdNotSpecified", 400, provider.Unavailable, provider.ScopeRegion, refClient + ": no default VPC"},
		{"DefaultVpcDoesNotExist", 400, provider.Unavailable, provider.ScopeRegion, refClient + ": no default VPC"},
		{"ParameterNotFound", 400, provider.Unavailable, provider.ScopeOffer, refSSM},
		// a reservation that cannot take the launch blocks that offer, never
		// Capacity (the contract: Offer.Reservation)
		{"ReservationCapacityExceeded", 400, provider.Unavailable, provider.ScopeOffer, refClient + ": the targeted Capacity Reservation does not have enough available instance capacity"},
		{"InvalidCapacityReservationState.PendingActivation", 400, provider.Unavailable, provider.ScopeOffer, refClient + ": your Capacity Block is not active yet"},
		{"InvalidCapacityReservationId.NotFound", 400, provider.Unavailable, provider.ScopeOffer, refTerraform + ": a capacity reservation that does not exist (cancelled, expired)"},
		{"InvalidCapacityBlockOfferingIdExpired", 400, provider.Capacity, provider.ScopeOffer, refClient + ": the Capacity Block offering ID is no longer available"},
		{"InvalidCapacityBlockOfferingIdNotFound", 400, provider.Capacity, provider.ScopeOffer, refClient + ": the Capacity Block offering ID cannot be found for this account"},
		{"InvalidCapacityBlockOfferingIdMalformed", 400, provider.InvalidRequest, provider.ScopeOffer, refClient + ": the Capacity Block offering ID is malformed"},
		{"InvalidCapacityReservationId.Malformed", 400, provider.InvalidRequest, provider.ScopeOffer, refTerraform + ": not a capacity reservation id"},
		// Service Quotas (Quotas)
		{"NoSuchResourceException", 400, provider.Unavailable, provider.ScopeOffer, refQuotas + ": the resource does not exist (a quota the region lacks)"},
		{"AccessDeniedException", 400, provider.Credentials, provider.ScopeProvider, refQuotas + ": not permitted to perform the action"},
		{"TooManyRequestsException", 400, provider.Transient, provider.ScopeOffer, refQuotas + ": throttled"},
		{"ServiceException", 500, provider.Transient, provider.ScopeOffer, refQuotas + ": something went wrong"},
		{"IllegalArgumentException", 400, provider.InvalidRequest, provider.ScopeOffer, refQuotas + ": invalid input"},
		// the ask cannot be satisfied
		{"InvalidParameterValue", 400, provider.InvalidRequest, provider.ScopeOffer, refCommon + ": a value is not valid"},
		{"InvalidParameter", 400, provider.InvalidRequest, provider.ScopeOffer, refCommon + ": a parameter is not valid"},
		{"InvalidParameterCombination", 400, provider.InvalidRequest, provider.ScopeOffer, refCommon + ": incorrect combination of parameters"},
		{"InvalidParameterDependency", 400, provider.InvalidRequest, provider.ScopeOffer, refCommon + ": incorrect combination of parameters"},
		{"MissingParameter", 400, provider.InvalidRequest, provider.ScopeOffer, refCommon + ": a required parameter is missing"},
		{"UnknownParameter", 400, provider.InvalidRequest, provider.ScopeOffer, refCommon + ": an unknown parameter"},
		{"ValidationError", 400, provider.InvalidRequest, provider.ScopeOffer, refCommon + ": input fails the constraints"},
		{"TagPolicyViolation", 400, provider.InvalidRequest, provider.ScopeOffer, refCommon + ": tags not compliant with the account's tag policy"},
		{"InvalidZone.NotFound", 400, provider.InvalidRequest, provider.ScopeOffer, refClient + ": the Availability Zone does not exist"},
		{"InvalidAvailabilityZone", 400, provider.InvalidRequest, provider.ScopeOffer, refClient + ": the Availability Zone is not valid"},
		{"InvalidAMIID.Malformed", 400, provider.InvalidRequest, provider.ScopeOffer, refClient + ": malformed AMI id"},
		{"InvalidKeyPair.NotFound", 400, provider.InvalidRequest, provider.ScopeOffer, refClient + ": the key pair does not exist"},
		{"InvalidSubnetID.NotFound", 400, provider.InvalidRequest, provider.ScopeOffer, refClient + ": the subnet does not exist"},
		{"InvalidBlockDeviceMapping", 400, provider.InvalidRequest, provider.ScopeOffer, refClient + ": a block device mapping is not valid"},
		{"IdempotentParameterMismatch", 400, provider.InvalidRequest, provider.ScopeOffer, refCommon + ": client token reused with another request"},
		{"InvalidInstanceID.Malformed", 400, provider.InvalidRequest, provider.ScopeOffer, refClient + ": malformed instance id"},
		// credentials and account standing
		{"AuthFailure", 401, provider.Credentials, provider.ScopeProvider, refCommon + ": credentials could not be validated"},
		{"UnauthorizedOperation", 403, provider.Credentials, provider.ScopeProvider, refCommon + ": not authorized to perform this operation"},
		{"InvalidClientTokenId", 403, provider.Credentials, provider.ScopeProvider, refCommon + ": credentials do not exist in our records"},
		{"SignatureDoesNotMatch", 403, provider.Credentials, provider.ScopeProvider, refClient + ": signature does not match"},
		{"MissingAuthenticationToken", 403, provider.Credentials, provider.ScopeProvider, refCommon + ": the request must contain valid credentials"},
		{"IncompleteSignature", 400, provider.Credentials, provider.ScopeProvider, refCommon + ": signature does not conform"},
		{"RequestExpired", 400, provider.Credentials, provider.ScopeProvider, refCommon + ": request too old, or temporary credentials expired"},
		{"Blocked", 403, provider.Credentials, provider.ScopeProvider, refCommon + ": the account is blocked"},
		{"PendingVerification", 401, provider.Credentials, provider.ScopeProvider, refCommon + ": the account is pending verification"},
		{"AccountDisabled", 401, provider.Credentials, provider.ScopeProvider, refClient + ": administratively disabled for this account"},
		{"IdempotentInstanceTerminated", 400, provider.Failed, provider.ScopeOffer, refClient + ": the token's instance has been terminated"},
		{"InvalidPlacementGroup.Unknown", 400, provider.Failed, provider.ScopeOffer, refClient + ": the placement group cannot be found in the Region"},
		// codes the table does not know fall back to the status
		{"NewCode", 400, provider.Failed, provider.ScopeOffer, refNone},
		{"NewCode", 500, provider.Transient, provider.ScopeOffer, refNone},
		{"NewCode", 429, provider.Transient, provider.ScopeOffer, refNone},
		{"NewCode", 403, provider.Credentials, provider.ScopeProvider, refNone},
	}
	for _, r := range rows {
		t.Run(r.code+"_"+http.StatusText(r.status), func(t *testing.T) {
			err := apiErr(r.status, r.code)
			pe := p.classify(context.Background(), "create", err)
			if pe.Kind != r.kind || pe.Scope() != r.scope {
				t.Fatalf("%s/%d (%s): %s %s, want %s %s", r.code, r.status, r.ref, pe.Kind, pe.Scope(), r.kind, r.scope)
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

// EC2 answers 200 and the connection ends before the body is read (the
// net/http transport can close it under the reader when the request's
// write reports an error after the answer came; seen against moto as "read
// tcp ...: use of closed network connection"). The call may have landed,
// like a lost answer: Transient, which the core retries (Prepare and Cleanup
// are idempotent; a retried Create is replayed with its ClientToken), never Failed, which
// would block the offer and fail over for nothing.
func TestClassifyAnAnswerCutShort(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, buf, err := w.(http.Hijacker).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		buf.WriteString("HTTP/1.1 200 OK\r\nContent-Type: text/xml\r\nContent-Length: 4096\r\n\r\n" +
			`<?xml version="1.0" encoding="UTF-8"?><DescribeInstancesResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/"><reservationSet><item>`)
		buf.Flush()
	}))
	defer srv.Close()
	p, err := New(Config{Regions: []string{"us-east-1"}}, WithInstallation("inst"),
		WithEndpoint(Endpoint{URL: srv.URL, Client: srv.Client(), AccessKeyID: "AKIDCUT", SecretAccessKey: "cut-secret"}))
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.Observe(context.Background(), provider.Location{Region: "us-east-1"}, "vm")
	if got := provider.KindOf(err); got != provider.Transient {
		t.Fatalf("an answer cut short: %s (%v), want transient", got, err)
	}
}
