package gcp

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/api/iterator"

	"github.com/org/gpuprov/provider"
)

// systemEvents are the zone operations GCE records against an instance on
// its own initiative, and the finding each becomes.
var systemEvents = map[string]struct {
	code     string
	severity provider.Severity
}{
	"compute.instances.preempted":                  {"preempted", provider.Critical},
	"compute.instances.hostError":                  {"host-error", provider.Critical},
	"compute.instances.guestTerminate":             {"guest-terminated", provider.Critical},
	"compute.instances.terminateOnHostMaintenance": {"terminated-on-host-maintenance", provider.Critical},
	"compute.instances.automaticRestart":           {"automatic-restart", provider.Warn},
	"compute.instances.migrateOnHostMaintenance":   {"live-migrated", provider.Info},
}

// Diagnose reads the instance gpuprov-<vm> in loc's zone and the zone
// operations whose targetId is instanceID, and reports: the status; a
// preemption, host error, guest shutdown, maintenance termination,
// automatic restart or live migration, with its time; the instance's
// statusMessage and lastStopTimestamp. An instance that is gone (deleted
// after a Spot preemption, say) is reported not existing, with the
// operations that explain it. It never mutates.
func (p *Provider) Diagnose(ctx context.Context, loc provider.Location, vm, instanceID string) (provider.Diagnosis, error) {
	d := provider.Diagnosis{InstanceID: instanceID}
	if loc.Zone == "" {
		return d, p.errorf(provider.InvalidRequest, "diagnose", "location %s has no zone", loc)
	}
	in, err := p.get(ctx, loc.Zone, provider.ResourceName(vm))
	gone := isNotFound(err)
	if err != nil && !gone {
		return d, p.classify("diagnose", err)
	}
	if !gone && !p.ours(in, vm) {
		d.Findings = append(d.Findings, provider.Finding{Severity: provider.Critical, Code: "identity-mismatch",
			Message: fmt.Sprintf("instance %s does not carry the identity of VM %s in this installation", in.GetName(), vm)})
		return d, nil
	}
	if !gone && strconv.FormatUint(in.GetId(), 10) != instanceID {
		gone = true // the name now belongs to a newer instance
	}
	if _, err := strconv.ParseUint(instanceID, 10, 64); err == nil {
		events, err := p.events(ctx, loc.Zone, instanceID)
		if err != nil {
			return d, err
		}
		d.Findings = append(d.Findings, events...)
	}
	if gone {
		if !slices.ContainsFunc(d.Findings, func(f provider.Finding) bool { return f.Severity == provider.Critical }) {
			d.Findings = append(d.Findings, provider.Finding{Severity: provider.Critical, Code: "gone",
				Message: fmt.Sprintf("instance %s no longer exists in %s", instanceID, loc.Zone)})
		}
		d.Status = provider.StatusTerminated
		return d, nil
	}
	d.Exists, d.Status, d.VendorStatus = true, status(in.GetStatus()), in.GetStatus()
	msg := in.GetStatusMessage()
	switch d.Status {
	case provider.StatusFailed:
		if msg == "" {
			msg = fmt.Sprintf("instance is %s", in.GetStatus())
		}
		f := provider.Finding{Severity: provider.Critical, Code: "stopped", Message: msg}
		if t, err := time.Parse(time.RFC3339, in.GetLastStopTimestamp()); err == nil {
			f.At = t
		}
		d.Findings = append(d.Findings, f)
	case provider.StatusPending, provider.StatusStopping, provider.StatusUnknown:
		d.Findings = append(d.Findings, provider.Finding{Severity: provider.Warn, Code: "status-" + string(d.Status),
			Message: fmt.Sprintf("instance is %s (vendor status %q) %s", d.Status, in.GetStatus(), msg)})
	case provider.StatusRunning:
		if o := observed(in); o.SSH == nil {
			d.Findings = append(d.Findings, provider.Finding{Severity: provider.Warn, Code: "no-ssh-endpoint",
				Message: "instance runs but has no external IP"})
		}
	}
	return d, nil
}

// events lists the zone operations targeting instance id and turns the
// system events among them into findings, oldest first.
func (p *Provider) events(ctx context.Context, zone, id string) ([]provider.Finding, error) {
	ctx, cancel := p.call(ctx)
	defer cancel()
	it := p.zoneOps.List(ctx, &computepb.ListZoneOperationsRequest{
		Project: p.cfg.Project, Zone: zone, Filter: proto("targetId = " + id),
	}, noRetry)
	var out []provider.Finding
	for {
		op, err := it.Next()
		if err == iterator.Done {
			break
		}
		if err != nil {
			return nil, p.classify("diagnose", err)
		}
		ev, ok := systemEvents[op.GetOperationType()]
		if !ok || strconv.FormatUint(op.GetTargetId(), 10) != id {
			continue
		}
		msg := op.GetStatusMessage()
		if msg == "" {
			msg = op.GetOperationType()
		}
		f := provider.Finding{Severity: ev.severity, Code: ev.code, Message: msg}
		if t, err := time.Parse(time.RFC3339, op.GetInsertTime()); err == nil {
			f.At = t
		}
		out = append(out, f)
	}
	slices.SortStableFunc(out, func(a, b provider.Finding) int { return a.At.Compare(b.At) })
	return out, nil
}
