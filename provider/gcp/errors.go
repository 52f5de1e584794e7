package gcp

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/api/googleapi"

	"github.com/org/gpuprov/provider"
)

// Synchronous error reasons (googleapi.Error.Errors[].Reason) and their
// kinds. 404 notFound and 409 alreadyExists are decided by the callers
// (delete treats 404 as success, insert adopts on 409) and by notFoundKind.
var reasonKinds = map[string]provider.ErrorKind{
	"rateLimitExceeded":              provider.Transient,
	"userRateLimitExceeded":          provider.Transient,
	"backendError":                   provider.Transient,
	"internalError":                  provider.Transient,
	"resourceNotReady":               provider.Transient,
	"resourceInUseByAnotherResource": provider.Transient, // a dependency still shutting down
	"quotaExceeded":                  provider.Quota,
	"insufficientCapacity":           provider.Capacity,
	"invalid":                        provider.InvalidRequest,
	"invalidParameter":               provider.InvalidRequest,
	"required":                       provider.InvalidRequest,
	"badRequest":                     provider.InvalidRequest,
	"conditionNotMet":                provider.Failed,
	"forbidden":                      provider.Credentials,
	"insufficientPermissions":        provider.Credentials,
	"accessNotConfigured":            provider.Credentials,
	"authError":                      provider.Credentials,
	"alreadyExists":                  provider.Failed,
}

// Operation error codes (Operation.error.errors[].code) and their kinds.
// RESOURCE_NOT_FOUND and UNSUPPORTED_OPERATION are decided by their message
// in classifyOp; the codes are those of the Compute Engine API's error
// catalog (https://cloud.google.com/compute/docs/reference/rest/v1/errors)
// and its resource-availability troubleshooting page
// (https://cloud.google.com/compute/docs/troubleshooting/troubleshooting-resource-availability).
var opCodeKinds = map[string]provider.ErrorKind{
	"ZONE_RESOURCE_POOL_EXHAUSTED":              provider.Capacity, // the offer's type in the zone: see classifyOp
	"ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS": provider.Capacity,
	"QUOTA_EXCEEDED":                            provider.Quota,
	"RESOURCE_OPERATION_RATE_EXCEEDED":          provider.Transient,
	"RESOURCE_NOT_READY":                        provider.Transient,
	"INTERNAL_ERROR":                            provider.Transient,
	"RESOURCE_IN_USE_BY_ANOTHER_RESOURCE":       provider.Transient,
	"UNSUPPORTED_OPERATION":                     provider.Capacity, // seen when a Spot VM is preempted while being created
	"RESOURCE_NOT_FOUND":                        provider.Failed,   // by what is missing: see notFoundKind
	"INVALID_FIELD_VALUE":                       provider.InvalidRequest,
	"MISSING_REQUIRED_FIELD":                    provider.InvalidRequest,
	"FIELD_SIZE_TOO_LARGE":                      provider.InvalidRequest,
	"BAD_REQUEST":                               provider.InvalidRequest,
	"NETWORK_NOT_FOUND":                         provider.InvalidRequest,
	"PROJECT_NOT_FOUND":                         provider.InvalidRequest,
	"IAM_PERMISSION_DENIED":                     provider.Credentials,
	"PERMISSIONS_ERROR":                         provider.Credentials,
	"CONDITION_NOT_MET":                         provider.Failed,
}

// OperationError is a failed GCE operation: the codes and messages of its
// error list. It is wrapped in the *provider.Error a primitive returns.
type OperationError struct {
	Operation  string // the operation's name
	HTTPStatus int    // httpErrorStatusCode
	Codes      []string
	Messages   []string
	// QuotaMetric is the metric of a QUOTA_EXCEEDED detail, if any
	// ("NVIDIA_L4_GPUS", "GPUS_ALL_REGIONS").
	QuotaMetric string
}

func (e *OperationError) Error() string {
	return fmt.Sprintf("operation %s failed (HTTP %d): %s: %s", e.Operation, e.HTTPStatus,
		strings.Join(e.Codes, ","), strings.Join(e.Messages, "; "))
}

// IsCode reports whether err wraps an *OperationError with one of codes.
func IsCode(err error, codes ...string) bool {
	var oe *OperationError
	if !errors.As(err, &oe) {
		return false
	}
	for _, c := range oe.Codes {
		for _, want := range codes {
			if c == want {
				return true
			}
		}
	}
	return false
}

// operationError extracts the error list of a finished operation; nil when
// it has none.
func operationError(op *computepb.Operation) *OperationError {
	errs := op.GetError().GetErrors()
	if len(errs) == 0 {
		return nil
	}
	oe := &OperationError{Operation: op.GetName(), HTTPStatus: int(op.GetHttpErrorStatusCode())}
	for _, e := range errs {
		oe.Codes = append(oe.Codes, e.GetCode())
		oe.Messages = append(oe.Messages, e.GetMessage())
		for _, d := range e.GetErrorDetails() {
			if m := d.GetQuotaInfo().GetMetricName(); m != "" && oe.QuotaMetric == "" {
				oe.QuotaMetric = m
			}
		}
	}
	return oe
}

// classifyOp maps a failed operation to a *provider.Error: a machine or
// accelerator type the zone does not offer is Unavailable blocking the
// offer, a zone the project may not use Unavailable blocking the zone,
// whatever the code; otherwise the first code with a known kind decides; a
// zonal stockout blocks the offer (that machine type in that zone, Spot or
// not: the zone's other types are still tried); a quota blocks what its
// metric counts (quotaScope); RESOURCE_NOT_FOUND is decided by what is
// missing (notFoundKind). Unknown codes are Failed.
func (p *Provider) classifyOp(op string, oe *OperationError) *provider.Error {
	return p.seal(classifyOpError(p.name, op, oe))
}

func classifyOpError(name, op string, oe *OperationError) *provider.Error {
	pe := &provider.Error{Kind: provider.Failed, Op: op, Provider: name, Err: oe}
	for _, m := range oe.Messages {
		if reservationRefusal(m) {
			pe.Kind, pe.Block = provider.Unavailable, provider.ScopeOffer
			return pe
		}
	}
	for _, m := range oe.Messages {
		if scope, ok := notOfferedScope(m); ok {
			pe.Kind, pe.Block = provider.Unavailable, scope
			return pe
		}
	}
	for i, c := range oe.Codes {
		k, ok := opCodeKinds[c]
		if !ok {
			continue
		}
		pe.Kind = k
		if c == "RESOURCE_NOT_FOUND" && i < len(oe.Messages) {
			pe.Kind, pe.Block = notFoundKind(oe.Messages[i])
		}
		break
	}
	if pe.Kind == provider.Quota {
		pe.Block = quotaScope(oe.QuotaMetric, strings.Join(oe.Messages, " "))
	}
	return pe
}

// quotaMetricRE reads the metric of Compute Engine's quota message ("Quota
// 'NVIDIA_L4_GPUS' exceeded. Limit: 0.0 in region us-east4.").
var quotaMetricRE = regexp.MustCompile(`Quota '([A-Za-z0-9_-]+)' exceeded`)

// quotaScope is what a quota error blocks, by its metric (the operation's
// QuotaExceededInfo metricName, "compute.googleapis.com/nvidia_l4_gpus", or
// the one its message names) and text; "Allocation quotas" (Compute
// Engine documentation, GPU quotas and preemptible quotas) and the
// discovery document's Quota.metric enum name the metrics:
//   - *_ALL_REGIONS (GPUS_ALL_REGIONS, CPUS_ALL_REGIONS) or a quota met
//     "globally": every region of the project, the provider;
//   - NVIDIA_<model>_GPUS and PREEMPTIBLE_NVIDIA_<model>_GPUS, one GPU
//     model's quota in the region (standard, or Spot and preemptible): the
//     offer's family (Offer.Family is its GPU model's quota metric),
//     on-demand or Spot as the offer is;
//   - any other PREEMPTIBLE_* metric (PREEMPTIBLE_CPUS): the region's
//     Spot offers, whose VMs count against it, not its on-demand ones;
//   - anything else (CPUS, A2_CPUS, IN_USE_ADDRESSES, …): the region.
func quotaScope(metric, text string) provider.Scope {
	m := strings.ToUpper(metric[strings.LastIndexByte(metric, '/')+1:])
	if m == "" {
		if sub := quotaMetricRE.FindStringSubmatch(text); sub != nil {
			m = strings.ToUpper(sub[1])
		}
	}
	m = strings.ReplaceAll(m, "-", "_")
	switch {
	case strings.Contains(m, "ALL_REGIONS") || strings.Contains(strings.ToUpper(text), "GLOBAL"):
		return provider.ScopeProvider
	case strings.HasPrefix(strings.TrimPrefix(m, "PREEMPTIBLE_"), "NVIDIA_") && strings.HasSuffix(m, "_GPUS"):
		return provider.ScopeFamily
	case strings.HasPrefix(m, "PREEMPTIBLE_"):
		return provider.ScopeSpot
	}
	return provider.ScopeRegion
}

// apiFacts is what a synchronous error says: HTTP status, reasons,
// message, Retry-After.
type apiFacts struct {
	status     int
	reasons    []string
	message    string
	retryAfter time.Duration
}

func facts(err error) (apiFacts, bool) {
	var ge *googleapi.Error
	if !errors.As(err, &ge) {
		return apiFacts{}, false
	}
	f := apiFacts{status: ge.Code, message: ge.Message}
	for _, e := range ge.Errors {
		f.reasons = append(f.reasons, e.Reason)
		if f.message == "" {
			f.message = e.Message
		}
	}
	if ra := ge.Header.Get("Retry-After"); ra != "" {
		if s, err := strconv.Atoi(ra); err == nil && s >= 0 {
			f.retryAfter = time.Duration(s) * time.Second
		} else if t, err := http.ParseTime(ra); err == nil {
			f.retryAfter = time.Until(t)
		}
	}
	return f, true
}

// isStatus reports whether err is an API answer with HTTP status code.
func isStatus(err error, code int) bool {
	f, ok := facts(err)
	return ok && f.status == code
}

func isNotFound(err error) bool { return isStatus(err, http.StatusNotFound) }
func isAlreadyExists(err error) bool {
	return isStatus(err, http.StatusConflict) || hasReason(err, "alreadyExists")
}

func hasReason(err error, reason string) bool {
	f, ok := facts(err)
	if !ok {
		return false
	}
	for _, r := range f.reasons {
		if r == reason {
			return true
		}
	}
	return false
}

// classify maps a synchronous API error to a *provider.Error: a machine
// or accelerator type the zone does not offer first (Unavailable blocking
// the zone: HTTP 400 reason invalid, "Invalid value for field
// 'resource.machineType': '…'. Machine type with name '…' does not exist in
// zone '…'.", or the resource path of the type "was not found"); then 401
// (Credentials, whatever the reason: a missing credential is reason
// "required"); then by reason; then by status (429/5xx Transient, 403
// Credentials, 404 by what was not found, 400 InvalidRequest); a transport
// failure or timeout is Transient, and anything else Failed. The error's
// text is masked of the adapter's credentials (seal).
func (p *Provider) classify(op string, err error) *provider.Error {
	return p.seal(classifyError(p.name, op, err))
}

func classifyError(name, op string, err error) *provider.Error {
	pe := &provider.Error{Kind: provider.Failed, Op: op, Provider: name, Err: err}
	f, ok := facts(err)
	if !ok {
		// No answer: a connection reset, a timeout, a cancelled call. The
		// request may have landed; the core resolves that by observing.
		var ne interface{ Timeout() bool }
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) || errors.As(err, &ne) ||
			strings.Contains(err.Error(), "connection") || strings.Contains(err.Error(), "EOF") {
			pe.Kind = provider.Transient
		}
		return pe
	}
	pe.RetryAfter = f.retryAfter
	if reservationRefusal(f.message) {
		pe.Kind, pe.Block = provider.Unavailable, provider.ScopeOffer
		return pe
	}
	if scope, ok := notOfferedScope(f.message); ok {
		pe.Kind, pe.Block = provider.Unavailable, scope
		return pe
	}
	if f.status == http.StatusUnauthorized {
		pe.Kind = provider.Credentials
		return pe
	}
	for _, r := range f.reasons {
		if k, known := reasonKinds[r]; known {
			pe.Kind = k
			if k == provider.Quota {
				pe.Block = quotaScope("", f.message)
			}
			return pe
		}
	}
	switch {
	case f.status == http.StatusTooManyRequests || f.status >= 500:
		pe.Kind = provider.Transient
	case f.status == http.StatusForbidden:
		pe.Kind = provider.Credentials
	case f.status == http.StatusNotFound:
		pe.Kind, pe.Block = notFoundKind(f.message)
	case f.status == http.StatusBadRequest:
		pe.Kind = provider.InvalidRequest
	}
	return pe
}

// notOfferedRE matches what Compute Engine answers for a machine or
// accelerator type the zone does not offer: the insert is refused before
// any operation with HTTP 400, reason "invalid", and
//
//	Invalid value for field 'resource.machineType': 'zones/us-central1-a/machineTypes/a2-highgpu-1g'.
//	Machine type with name 'a2-highgpu-1g' does not exist in zone 'us-central1-a'.
//
// (the text gcloud compute instances create matches, lib/surface/compute/
// instances/create.py in google-cloud-sdk), the same for the field
// 'resource.guestAccelerators[0].acceleratorType', or, for a type named by
// its path, "The resource 'projects/p/zones/z/acceleratorTypes/nvidia-tesla-p4'
// was not found". That type is not in that zone; the zone's other types
// may be.
var notOfferedRE = regexp.MustCompile(`(?i)invalid value for field 'resource\.(machineType|guestAccelerators\[\d+\]\.acceleratorType)'.*(does not exist|not found|not available|unavailable)` +
	`|the resource '[^']*/zones/[^'/]+/(machineTypes|acceleratorTypes)/[^']*' was not found` +
	`|(machine|accelerator) type (with name )?'[^']*' does not exist in zone`)

// zoneDeniedRE matches what Compute Engine answers for a zone the project
// may not use: 403 "Location us-east1-d is not found or access is
// unauthorized." (recorded in skypilot-org/skypilot's GCP failover
// handler, which blocks the zone): no type can launch there, another zone
// may work.
var zoneDeniedRE = regexp.MustCompile(`(?i)location [a-z0-9-]+ is not found or access is unauthorized`)

var projectNotFoundRE = regexp.MustCompile(`the resource 'projects/[^/']+' was not found`)

// notOfferedScope reports whether msg says the offer cannot launch where it
// is asked for, and what to block: the offer for a machine or accelerator
// type the zone does not offer, the zone for a zone the project may not
// use.
func notOfferedScope(msg string) (provider.Scope, bool) {
	switch {
	case notOfferedRE.MatchString(msg):
		return provider.ScopeOffer, true
	case zoneDeniedRE.MatchString(msg):
		return provider.ScopeZone, true
	}
	return provider.ScopeDefault, false
}

// notFoundKind decides a 404 (or an operation's RESOURCE_NOT_FOUND) by
// what was not found, so that nothing missing everywhere fails over
// forever:
//   - a machine or accelerator type that the zone does not offer:
//     Unavailable, blocking the offer (the zone's other types, and other
//     zones, may have theirs);
//   - a location or zone: Unavailable, blocking the zone;
//   - the configured subnetwork in a region: Failed, blocking the region
//     (other regions may have a subnetwork of that name, no offer here can
//     work);
//   - the network, an image or image family, or the project: InvalidRequest
//     (global: no offer will work, the configuration must change);
//   - anything else, the instance itself included (deleted or preempted
//     while being created): Failed, blocking the offer.
func notFoundKind(msg string) (provider.ErrorKind, provider.Scope) {
	m := strings.ToLower(msg)
	if scope, ok := notOfferedScope(msg); ok {
		return provider.Unavailable, scope
	}
	switch {
	case strings.Contains(m, "/machinetypes/") || strings.Contains(m, "/acceleratortypes/"):
		return provider.Unavailable, provider.ScopeOffer
	case strings.Contains(m, "/subnetworks/"):
		return provider.Failed, provider.ScopeRegion
	case strings.Contains(m, "/networks/") || strings.Contains(m, "/images/") || projectNotFoundRE.MatchString(m):
		return provider.InvalidRequest, provider.ScopeDefault
	case strings.Contains(m, "location") || strings.Contains(m, "/zones/") && !strings.Contains(m, "/instances/"):
		return provider.Unavailable, provider.ScopeZone
	}
	return provider.Failed, provider.ScopeDefault
}

// reservationRefusalRE matches what Compute Engine answers an insert that
// targets a reservation which cannot take it: the operation fails with
// CONDITION_NOT_MET and one of these messages, as
// kubernetes/autoscaler's GCE client classifies them
// (cluster-autoscaler/cloudprovider/gce/autoscaling_gce_client.go and its
// test): "Specified reservation 'r' does not have available resources for
// the request." (full), "No available resources in specified reservations
// 'r'" (none fits the instance), "Cannot insert instance to a reservation
// with status: CREATING, as it requires reservation to be in READY state.",
// "Specified reservation 'r' does not exist." / "Specified reservations [r]
// do not exist." (deleted, or ended), "The reservation must exist in the
// same project as the instance."; and the synchronous 400 for an open
// reservation targeted by name, "Specified reservations [...] can not be
// targeted as specificReservationRequired is not set" (skypilot-org/
// skypilot#3327).
var reservationRefusalRE = regexp.MustCompile(`(?i)specified reservations? .*(does not have available resources|do(es)? not exist|can not be targeted)` +
	`|no available resources in specified reservations` +
	`|requires reservation to be in READY state` +
	`|reservation must exist in the same project`)

// reservationRefusal reports whether msg says the targeted reservation
// cannot take the instance. That is Unavailable for the reservation's offer
// alone (its Key names the reservation), never Capacity: the zone and the
// shape's on-demand offers are not out of anything.
func reservationRefusal(msg string) bool { return reservationRefusalRE.MatchString(msg) }
