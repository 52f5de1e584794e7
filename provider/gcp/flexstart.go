package gcp

import (
	"context"
	"strings"
	"time"

	compute "cloud.google.com/go/compute/apiv1"
	"cloud.google.com/go/compute/apiv1/computepb"

	"github.com/org/gpuprov/provider"
)

// Flex-start VMs (Dynamic Workload Scheduler, provisioningModel
// FLEX_START) are created with instances.insert like any VM; Compute
// Engine holds the request until it finds the capacity, then runs the VM
// for its maxRunDuration and deletes it. The rules below are Google's,
// read 2026-12-06 through the search tool's stored copies:
//
//   - "Create a Flex-start VM"
//     (https://cloud.google.com/compute/docs/instances/create-flex-start-vm,
//     REST tab): the body sets reservationAffinity NO_RESERVATION and
//     scheduling {provisioningModel FLEX_START, maxRunDuration {seconds},
//     instanceTerminationAction, onHostMaintenance TERMINATE}; "The value
//     [of maxRunDuration] must be between 10 minutes and seven days"; the
//     request stays valid for requestValidForDuration, "between 90
//     seconds (90) and two hours (7200)" for a VM that must run in one
//     zone, as gpuprov's offers do (0 means "only if immediately
//     available"). In compute v1 that field is Instance.params.
//     requestValidForDuration ("Relative deadline for waiting for
//     capacity. Relevant only for Instances.Insert API", discovery
//     document InstanceParams).
//   - "About Flex-start VMs"
//     (https://cloud.google.com/compute/docs/instances/about-flex-start-vms):
//     "Flex-start VMs support all accelerator-optimized machine types
//     (except A4X and G4) and H4D machine types. For A4, A3, A2, and H4D
//     machine types, you obtain vCPUs, memory, and any attached GPUs at a
//     discounted price." N1 with attached GPUs is general-purpose, not
//     accelerator-optimized: no flex-start.
//   - "GPUs when you need them: Introducing Flex-start VMs" (Google Cloud
//     blog, 2025-09-25): requests "persist in a queue for up to two
//     hours"; Flex-start VMs "consume preemptible quota".
//   - The discovery document's Instance.status enum: PENDING is "For Flex
//     Start provisioning instance is waiting for available capacity from
//     Dynamic Workload Scheduler (DWS)", PROVISIONING "Resources are being
//     allocated for the instance".
const (
	// MinFlexStart and MaxFlexStart bound ResourceRequest.FlexStart, the
	// VM's maxRunDuration.
	MinFlexStart = 10 * time.Minute
	MaxFlexStart = 7 * 24 * time.Hour
	// flexQueue is the insert's requestValidForDuration: the longest a
	// zonal flex-start request may wait for capacity. The core bounds the
	// wait by the launch's deadline too, and deletes a VM still queued
	// past it.
	flexQueue = 2 * time.Hour
)

// flexSeries are the machine series of the catalog that run as Flex-start
// VMs: the accelerator-optimized ones (A4, A3 Ultra/Mega/High, A2, G2).
// A3 Ultra and A4 are reserved-only in the catalog (no zones, no price),
// so they get no flex-start offer.
var flexSeries = []string{"a4", "a3", "a2", "g2"}

// flexSupported reports whether machineType runs as a Flex-start VM.
func flexSupported(machineType string) bool {
	series, _, _ := strings.Cut(machineType, "-")
	for _, s := range flexSeries {
		if series == s {
			return true
		}
	}
	return false
}

// checkFlexStart refuses a run duration outside Compute Engine's bounds.
func (p *Provider) checkFlexStart(d time.Duration) error {
	switch {
	case d < MinFlexStart:
		return p.errorf(provider.InvalidRequest, "plan",
			"flex-start run duration %s is below Compute Engine's minimum maxRunDuration of %s", d, MinFlexStart)
	case d > MaxFlexStart:
		return p.errorf(provider.InvalidRequest, "plan",
			"flex-start run duration %s is above Compute Engine's maximum maxRunDuration of %s (7 days)", d, MaxFlexStart)
	}
	return nil
}

// flexFamily is a flex-start offer's Offer.Family: the preemptible twin of
// its GPU model's quota metric, which Flex-start VMs draw on. A quota
// error on a flex-start create then blocks the flex-start offers of that
// model in the region, not its on-demand or Spot ones, and Quotas' flex
// entries cover these offers alone.
func flexFamily(metric string) string {
	if metric == "" {
		return ""
	}
	return "PREEMPTIBLE_" + metric
}

// flexScheduling turns sched into a Flex-start VM's: FLEX_START, deleted
// at the end of its run (gpuprov never stops a VM to keep it), and in
// keeps out of reservations and waits for capacity for flexQueue.
func flexScheduling(in *computepb.Instance, sched *computepb.Scheduling, seconds int64) {
	sched.ProvisioningModel = proto("FLEX_START")
	sched.MaxRunDuration = &computepb.Duration{Seconds: proto(seconds)}
	sched.InstanceTerminationAction = proto("DELETE")
	in.ReservationAffinity = &computepb.ReservationAffinity{ConsumeReservationType: proto(consumeNone)}
	in.Params = &computepb.InstanceParams{RequestValidForDuration: &computepb.Duration{Seconds: proto(int64(flexQueue / time.Second))}}
}

// checkOnce reads the insert operation of a Flex-start VM once, without
// waiting: the operation stays RUNNING while the request waits in the
// queue, up to flexQueue, longer than any bounded wait. An error the
// operation already carries (a refused machine type, a quota) is returned
// as Wait's would be; a failed poll is not an error (the insert was
// accepted, Observe shows what became of it).
func (p *Provider) checkOnce(ctx context.Context, op *compute.Operation) (*OperationError, error) {
	if op.Done() {
		return operationError(op.Proto()), nil
	}
	cctx, cancel := p.call(ctx)
	defer cancel()
	perr := op.Poll(cctx, noRetry)
	if oe := operationError(op.Proto()); oe != nil {
		return oe, nil
	}
	return nil, perr
}
