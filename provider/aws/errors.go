package aws

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/org/gpuprov/provider"
)

// The tables below follow the EC2 API Reference's error-code page, "Error
// codes for the Amazon EC2 API"
// (https://docs.aws.amazon.com/AWSEC2/latest/APIReference/errors-overview.html):
// common client errors, client errors for specific actions, server errors.
// Client errors come with an HTTP 400-series status, server errors with a
// 500-series one. docs/clouds/aws.md gives every code's kind, block scope
// and block length with the section it comes from.

// codeKinds maps the EC2 (and SSM) error codes of that page to the failover
// policy. Codes are matched exactly and before the HTTP status, so a
// stockout that EC2 sends as a server error (HTTP 500) is Capacity, not
// Transient; a code missing here falls back to the status (see kindOf).
var codeKinds = map[string]provider.ErrorKind{
	// throttling and server-side trouble: retry
	"RequestLimitExceeded":     provider.Transient, // server: the request rate was exceeded
	"EC2ThrottledException":    provider.Transient,
	"ThrottlingException":      provider.Transient, // SSM
	"Throttling":               provider.Transient,
	"InternalError":            provider.Transient, // server: "Retry your request"
	"InternalFailure":          provider.Transient, // server: unknown error
	"InternalServerError":      provider.Transient, // SSM
	"ServerInternal":           provider.Transient, // server: "Retry your request"
	"ServiceUnavailable":       provider.Transient, // server: temporary failure of the server
	"Unavailable":              provider.Transient, // server: the server is overloaded
	"RequestTimeout":           provider.Transient,
	"RequestTimeoutException":  provider.Transient,
	"TooManyRequestsException": provider.Transient, // Service Quotas: throttled
	"ServiceException":         provider.Transient, // Service Quotas: "something went wrong" (HTTP 500)
	"DependencyViolation":      provider.Transient, // a security group still used by an instance shutting down
	"IncorrectState":           provider.Transient,
	"IncorrectInstanceState":   provider.Transient,
	// a security group that does not exist, or whose id has not propagated
	// yet: deleted since Prepare made or remembered it (CleanupShared of
	// another process), which the next Prepare repairs. RunInstances turns
	// it into provider.ErrSharedGone (shared.go); DeleteSecurityGroup reads
	// it as success.
	"InvalidGroup.NotFound": provider.Transient,
	// stockouts
	"InsufficientInstanceCapacity":          provider.Capacity, // server (HTTP 500): no capacity for this type here
	"InsufficientAddressCapacity":           provider.Capacity, // server: not enough addresses (zone)
	"InsufficientReservedInstanceCapacity":  provider.Capacity, // server: not enough Reserved Instances (of the type: offer)
	"InsufficientReservedInstancesCapacity": provider.Capacity, // the same, as the client-error table spells it (offer)
	"InsufficientVolumeCapacity":            provider.Capacity, // server: no EBS capacity for the root volume (zone)
	"InsufficientCapacityOnHost":            provider.Capacity,
	"InsufficientHostCapacity":              provider.Capacity, // server: Dedicated Host capacity
	"InsufficientCapacity":                  provider.Capacity, // server: import instance capacity
	"UnfulfillableCapacity":                 provider.Capacity, // not enough spare spot capacity
	"SpotMaxPriceTooLow":                    provider.Capacity,
	// account limits: block the region, or what codeScopes names
	"InstanceLimitExceeded":              provider.Quota,
	"VcpuLimitExceeded":                  provider.Quota,
	"MaxSpotInstanceCountExceeded":       provider.Quota,
	"VolumeLimitExceeded":                provider.Quota,
	"MaxIOPSLimitExceeded":               provider.Quota,
	"SecurityGroupLimitExceeded":         provider.Quota,
	"RulesPerSecurityGroupLimitExceeded": provider.Quota,
	"KeyPairLimitExceeded":               provider.Quota,
	"ResourceLimitExceeded":              provider.Quota,
	"PlacementGroupLimitExceeded":        provider.Quota, // EnsurePlacementGroup: the account's placement groups
	// AttachVolume (volume.go): the instance has as many volumes attached
	// as its type allows (client table; AttachVolume's reference: "If you
	// exceed the volume attachment limit for an instance type, the
	// attachment request fails with the AttachmentLimitExceeded error",
	// https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_AttachVolume.html):
	// a limit of the instance type, so it blocks the offer (codeScopes).
	"AttachmentLimitExceeded": provider.Quota,
	// not viable here; nothing was created
	"Unsupported":                       provider.Unavailable, // e.g. the instance type is not offered in the zone (offer)
	"UnsupportedOperation":              provider.Unavailable, // e.g. the type is not supported by the AMI
	"InvalidInstanceType":               provider.Unavailable, // the type is not supported for this request (region)
	"InvalidInstanceType.NotFound":      provider.Unavailable, // the type does not exist in the region
	"VolumeTypeNotAvailableInZone":      provider.Unavailable,
	"OptInRequired":                     provider.Unavailable,
	"InvalidAMIID.NotFound":             provider.Unavailable,
	"InvalidAMIID.Unavailable":          provider.Unavailable,
	"ParameterNotFound":                 provider.Unavailable, // SSM: no such image parameter in this region
	"VPCIdNotSpecified":                 provider.Unavailable,
	"DefaultVpcDoesNotExist":            provider.Unavailable,
	"InsufficientFreeAddressesInSubnet": provider.Unavailable, // the zone's subnet is full
	// RunInstances into a cluster placement group whose instances are in
	// another zone ("The placement group '…' is in use in another
	// availability zone: us-east-1c", as quoted in hashicorp/terraform#16183
	// and bcbio/bcbio-nextgen-vm#45): nothing was created, and this zone
	// cannot join the group. DeletePlacementGroup's InUse (instances still
	// in the group) is not this: it matches provider.ErrInUse (placement.go).
	"InvalidPlacementGroup.InUse": provider.Unavailable,
	// A launch into an On-Demand Capacity Reservation or a Capacity Block
	// (reservations.go) that the reservation cannot take: it is full
	// ("ReservationCapacityExceeded: The targeted Capacity Reservation does
	// not [have] enough available instance capacity", client table), it is
	// gone (cancelled or expired: InvalidCapacityReservationId.NotFound, the
	// code hashicorp/terraform-provider-aws's internal/service/ec2/errors.go
	// matches for a reservation that does not exist; not in the reference's
	// table), or a Capacity Block has not started
	// (InvalidCapacityReservationState.PendingActivation, client table).
	// Nothing was created and the reservation's other offers, and the
	// type's on-demand offers, are still tried: Unavailable blocks this
	// offer alone. Never Capacity: a full reservation is not a stockout of
	// the zone.
	"ReservationCapacityExceeded":                       provider.Unavailable,
	"InvalidCapacityReservationId.NotFound":             provider.Unavailable,
	"InvalidCapacityReservationState.PendingActivation": provider.Unavailable,
	// PurchaseCapacityBlock of an offering that is no longer on sale (the
	// reference's client table: InvalidCapacityBlockOfferingIdExpired "The
	// Capacity Block offering ID is no longer available",
	// InvalidCapacityBlockOfferingIdNotFound "… cannot be found for this
	// account"): offerings go first come, first served, so another buyer
	// took it or it lapsed. Nothing was bought; the offer (whose key names
	// the offering) is blocked and a fresh plan finds the others.
	"InvalidCapacityBlockOfferingIdExpired":  provider.Capacity,
	"InvalidCapacityBlockOfferingIdNotFound": provider.Capacity,
	// Service Quotas (quotas.go), "Common Errors" and GetServiceQuota's
	// errors in the Service Quotas API Reference: a quota the region does not
	// have. Quotas leaves such a quota out rather than failing.
	"NoSuchResourceException": provider.Unavailable,
	// the ask cannot be satisfied
	"InvalidParameterValue":       provider.InvalidRequest,
	"InvalidParameter":            provider.InvalidRequest,
	"InvalidParameterCombination": provider.InvalidRequest,
	"InvalidParameterDependency":  provider.InvalidRequest,
	"MissingParameter":            provider.InvalidRequest,
	"UnknownParameter":            provider.InvalidRequest,
	"ValidationError":             provider.InvalidRequest,
	"ValidationException":         provider.InvalidRequest, // SSM
	"TagPolicyViolation":          provider.InvalidRequest, // the account's tag policy refuses gpuprov's tags everywhere
	"InvalidZone.NotFound":        provider.InvalidRequest,
	"InvalidAvailabilityZone":     provider.InvalidRequest,
	"InvalidAMIID.Malformed":      provider.InvalidRequest,
	"InvalidKeyPair.NotFound":     provider.InvalidRequest,
	"InvalidKeyPair.Format":       provider.InvalidRequest,
	"InvalidSubnetID.NotFound":    provider.InvalidRequest,
	"InvalidVpcID.NotFound":       provider.InvalidRequest,
	"InvalidBlockDeviceMapping":   provider.InvalidRequest,
	"IdempotentParameterMismatch": provider.InvalidRequest,
	"InvalidInstanceID.Malformed": provider.InvalidRequest,
	"InvalidUserData.Malformed":   provider.InvalidRequest,
	// a reservation id that is not one (terraform-provider-aws's
	// errors.go as above); Plan asks only for ids of the cr- form
	"InvalidCapacityReservationId.Malformed":  provider.InvalidRequest,
	"InvalidCapacityBlockOfferingIdMalformed": provider.InvalidRequest, // client table: not an offering id
	"IllegalArgumentException":                provider.InvalidRequest, // Service Quotas: a bad argument
	// EBS volumes (volume.go), client table of the page above: the volume
	// does not exist, its id is malformed, it is in another zone than the
	// instance, it is attached to an instance (detach it first), or a
	// detach names an attachment that does not exist. volume.go reads some of
	// them first: VolumeInUse matches provider.ErrInUse (Transient while
	// the holder is being deleted); InvalidVolume.NotFound is success at
	// DetachVolume and DeleteVolume, InvalidAttachment.NotFound at
	// DetachVolume. InsufficientVolumeCapacity (Capacity, zone),
	// VolumeLimitExceeded, MaxIOPSLimitExceeded (Quota, region),
	// VolumeTypeNotAvailableInZone (Unavailable, zone) and IncorrectState
	// (Transient: a volume still being created) are above.
	"InvalidVolume.NotFound":       provider.InvalidRequest,
	"InvalidVolumeID.Malformed":    provider.InvalidRequest,
	"InvalidVolume.ZoneMismatch":   provider.InvalidRequest,
	"InvalidVolumeID.ZoneMismatch": provider.InvalidRequest,
	"VolumeInUse":                  provider.InvalidRequest,
	"InvalidAttachment.NotFound":   provider.InvalidRequest,
	// credentials and account standing: abort, block the provider
	"AuthFailure":                provider.Credentials,
	"UnauthorizedOperation":      provider.Credentials,
	"InvalidClientTokenId":       provider.Credentials,
	"SignatureDoesNotMatch":      provider.Credentials,
	"MissingAuthenticationToken": provider.Credentials,
	"IncompleteSignature":        provider.Credentials,
	"RequestExpired":             provider.Credentials,
	"ExpiredToken":               provider.Credentials,
	"AccessDeniedException":      provider.Credentials, // SSM, Service Quotas
	"Blocked":                    provider.Credentials,
	"PendingVerification":        provider.Credentials,
	"AccountDisabled":            provider.Credentials,
	// a replayed token whose instance is gone: the attempt is over
	"IdempotentInstanceTerminated": provider.Failed,
	// RunInstances names a placement group the region does not know ("The
	// Placement Group '…' is unknown."): it went since EnsurePlacementGroup
	// made it, or is not visible yet. Failed tears the attempt down and
	// blocks the offer; the next attempt's EnsurePlacementGroup makes the
	// group again. Not InvalidRequest, which would abort the whole launch
	// for what the next attempt repairs; not Transient, which would resend
	// into a group that may stay gone. DeletePlacementGroup reads it as
	// success (placement.go).
	"InvalidPlacementGroup.Unknown": provider.Failed,
}

// codeScopes sets the blocking scope of the codes that name more, or
// other, than the offer (instance type, zone, market): block only what the
// error names. A shortage or constraint of one instance type in a zone
// (InsufficientInstanceCapacity, Unsupported "Your requested instance type
// (…) is not supported in your requested Availability Zone (…)", the
// Reserved Instances of that type) is the offer's: the zone's other types
// are still tried. Zone: what every type launched there needs is short
// (public addresses, EBS capacity or the volume type, the subnet's free
// private addresses), or the zone cannot join the launch's placement
// group. Region: the instance type does not exist in the region (EC2's
// types are a regional catalog, every zone would refuse it alike, and
// there is no narrower "type in region" scope; not InvalidRequest, because
// the same type can exist in another region), or the region itself is not
// usable (opt-in, no default VPC). Spot: the account's Spot limit
// ("Max spot instance count exceeded"; EC2 User Guide, "Spot Instance
// quotas") stops Spot launches in the region, not on-demand ones. Family:
// VcpuLimitExceeded is the On-Demand vCPU quota of "the instance bucket
// that the specified instance type belongs to" (its message; EC2 User
// Guide, "On-Demand Instance quotas": Running On-Demand G and VT
// instances, Running On-Demand P instances, …), which Offer.Family names
// (quotaFamily): the region's other buckets are still tried.
var codeScopes = map[string]provider.Scope{
	"InsufficientAddressCapacity":       provider.ScopeZone,
	"InsufficientVolumeCapacity":        provider.ScopeZone,
	"VolumeTypeNotAvailableInZone":      provider.ScopeZone,
	"InsufficientFreeAddressesInSubnet": provider.ScopeZone,
	"InvalidPlacementGroup.InUse":       provider.ScopeZone,
	"InvalidInstanceType":               provider.ScopeRegion,
	"InvalidInstanceType.NotFound":      provider.ScopeRegion,
	"OptInRequired":                     provider.ScopeRegion,
	"VPCIdNotSpecified":                 provider.ScopeRegion,
	"DefaultVpcDoesNotExist":            provider.ScopeRegion,
	"MaxSpotInstanceCountExceeded":      provider.ScopeSpot,
	"VcpuLimitExceeded":                 provider.ScopeFamily,
	"AttachmentLimitExceeded":           provider.ScopeOffer,
}

// apiCause returns the vendor error inside err when err is already a
// classified (and masked) *provider.Error, so that a new *provider.Error
// wrapping it keeps the AWS error code (ErrorCode) without printing the
// "aws: <op>: <kind>: " of the first one again; any other err is returned
// as it is.
func apiCause(err error) error {
	var pe *provider.Error
	if errors.As(err, &pe) && pe.Err != nil {
		return pe.Err
	}
	return err
}

// ErrorCode returns the AWS error code in err's chain ("InsufficientInstanceCapacity"),
// or "" when err carries none.
func ErrorCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

// IsCode reports whether err carries one of the AWS error codes.
func IsCode(err error, codes ...string) bool {
	c := ErrorCode(err)
	if c == "" {
		return false
	}
	for _, x := range codes {
		if c == x {
			return true
		}
	}
	return false
}

// response returns the HTTP answer err carries, or nil.
func response(err error) *http.Response {
	var re *awshttp.ResponseError
	if errors.As(err, &re) && re.ResponseError != nil && re.Response != nil {
		return re.Response.Response
	}
	var sre *smithyhttp.ResponseError
	if errors.As(err, &sre) && sre.Response != nil {
		return sre.Response.Response
	}
	return nil
}

// httpStatus returns the HTTP status of err's answer, or 0 without one.
func httpStatus(err error) int {
	if r := response(err); r != nil {
		return r.StatusCode
	}
	return 0
}

// retryAfter reads a Retry-After header of err's answer (EC2 does not send
// one; a proxy in front of it may).
func retryAfter(err error) time.Duration {
	r := response(err)
	if r == nil {
		return 0
	}
	ra := r.Header.Get("Retry-After")
	if secs, perr := strconv.Atoi(ra); perr == nil && secs >= 0 {
		return time.Duration(secs) * time.Second
	}
	if t, perr := http.ParseTime(ra); perr == nil {
		return max(0, time.Until(t))
	}
	return 0
}

// kindOf classifies err: by error code first (InsufficientInstanceCapacity
// is an HTTP 500 that must not read as a server error), then by HTTP status
// (429 and 5xx Transient, 401/403 Credentials), then by transport (no
// answer at all, or an answer that could not be read, is Transient: the
// call may have landed). A success status whose body could not be read
// (the connection closed under it) is such an answer too, not a 2xx to
// judge by its status. Everything else is Failed.
func kindOf(err error) (provider.ErrorKind, provider.Scope) {
	code := ErrorCode(err)
	if k, ok := codeKinds[code]; ok {
		return k, codeScopes[code]
	}
	if strings.HasPrefix(code, "Throttling") {
		return provider.Transient, provider.ScopeDefault
	}
	st := httpStatus(err)
	var unread *smithy.DeserializationError
	if st >= 200 && st < 300 && errors.As(err, &unread) {
		return provider.Transient, provider.ScopeDefault
	}
	switch {
	case st == http.StatusTooManyRequests || st >= 500:
		return provider.Transient, provider.ScopeDefault
	case st == http.StatusUnauthorized || st == http.StatusForbidden:
		return provider.Credentials, provider.ScopeDefault
	case st != 0:
		return provider.Failed, provider.ScopeDefault
	}
	var de *smithy.DeserializationError
	var se *smithyhttp.RequestSendError
	var ne net.Error
	if errors.As(err, &de) || errors.As(err, &se) || errors.As(err, &ne) {
		return provider.Transient, provider.ScopeDefault
	}
	return provider.Failed, provider.ScopeDefault
}

// classify wraps err as the *provider.Error of op, with its kind and scope
// decided first and the adapter's credentials masked after (see scrub). A
// call cut short by the caller's own context is Transient and still matches
// context.Canceled or context.DeadlineExceeded; one cut short by the
// per-call timeout is Transient.
func (p *Provider) classify(ctx context.Context, op string, err error) *provider.Error {
	var pe *provider.Error
	switch {
	case ctx.Err() != nil:
		pe = &provider.Error{Kind: provider.Transient, Op: op, Provider: p.name,
			Err: fmt.Errorf("%w (%v)", context.Cause(ctx), err)}
	case errors.Is(err, context.DeadlineExceeded):
		pe = &provider.Error{Kind: provider.Transient, Op: op, Provider: p.name,
			Err: fmt.Errorf("no answer within %s: %w", p.requestTimeout(), err)}
	default:
		kind, scope := kindOf(err)
		pe = &provider.Error{Kind: kind, Op: op, Provider: p.name, Err: err, Block: scope, RetryAfter: retryAfter(err)}
	}
	p.scrub(ctx, pe)
	return pe
}

// scrub masks the adapter's credentials (access key id, secret access key,
// session token, in every form redact knows) in pe's text: an answer from
// EC2 or from a proxy in front of it may echo the request's Authorization
// or X-Amz-Security-Token header back, and the core journals, prints and
// hands on every error text. A masked error keeps what callers branch on:
// the AWS error code (ErrorCode, IsCode, errors.As to smithy.APIError) and
// the caller's context error; the rest of the vendor's chain is cut off,
// since a vendor type reached through errors.As could still hand out the
// unmasked text.
func (p *Provider) scrub(ctx context.Context, pe *provider.Error) {
	sec := p.secrets()
	if pe.Err == nil || !sec.Contains(pe.Err.Error()) {
		return
	}
	m := &maskedError{err: sec.Error(pe.Err), code: sec.String(ErrorCode(pe.Err))}
	var ae smithy.APIError
	if errors.As(pe.Err, &ae) {
		m.message, m.fault = sec.String(ae.ErrorMessage()), ae.ErrorFault()
	}
	if ctx.Err() != nil {
		m.cause = context.Cause(ctx)
	}
	pe.Err = m
}

// maskedError is an error whose text had credentials in it. It is a
// smithy.APIError when the original carried an AWS error code, and it
// unwraps to the caller's context error when that ended the call.
type maskedError struct {
	err     error // the masked text
	code    string
	message string
	fault   smithy.ErrorFault
	cause   error
}

func (m *maskedError) Error() string                 { return m.err.Error() }
func (m *maskedError) Unwrap() error                 { return m.cause }
func (m *maskedError) ErrorCode() string             { return m.code }
func (m *maskedError) ErrorMessage() string          { return m.message }
func (m *maskedError) ErrorFault() smithy.ErrorFault { return m.fault }
