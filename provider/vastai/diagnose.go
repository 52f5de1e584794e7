package vastai

import (
	"context"
	"fmt"

	"github.com/org/gpuprov/provider"
)

// Diagnose reads the instance (GET /api/v1/instances/, select_filters on its
// id): exited, unknown, offline, stopped and frozen are Critical, with Vast's
// status_msg; a booting instance, or one running without an SSH address, is
// Warn. Vast lists no destroyed instance, so one it does not list is Gone.
// Read-only.
func (p *Provider) Diagnose(ctx context.Context, loc provider.Location, vm, instanceID string) (provider.Diagnosis, error) {
	d := provider.Diagnosis{InstanceID: instanceID}
	var insts []wireInstance
	if id, ok := parseID(instanceID); ok {
		var err error
		if insts, err = p.listInstances(ctx, "diagnose", map[string]filter{"id": {"eq": id}}); err != nil {
			return d, err
		}
	}
	if len(insts) == 0 {
		d.Findings = append(d.Findings, provider.Finding{Severity: provider.Critical, Code: "gone",
			Message: fmt.Sprintf("Vast lists no instance %s (never created, or destroyed)", instanceID)})
		return d, nil
	}
	in := insts[0]
	if in.Label != Label(vm, p.base.Installation) {
		d.Findings = append(d.Findings, provider.Finding{Severity: provider.Critical, Code: "identity-mismatch",
			Message: fmt.Sprintf("instance %s is not labelled for VM %s in this installation", instanceID, vm)})
		return d, nil
	}
	d.Status, d.VendorStatus = status(in), vendorStatus(in)
	d.Exists = d.Status != provider.StatusTerminated
	msg := in.StatusMsg
	switch d.Status {
	case provider.StatusFailed:
		d.Findings = append(d.Findings, provider.Finding{Severity: provider.Critical, Code: "status-" + in.ActualStatus,
			Message: fmt.Sprintf("the instance is %s and will not run again on its own: %s", in.ActualStatus, msg)})
	case provider.StatusPending:
		d.Findings = append(d.Findings, provider.Finding{Severity: provider.Warn, Code: "status-pending",
			Message: fmt.Sprintf("the instance is %s: %s", d.VendorStatus, msg)})
	case provider.StatusUnknown:
		d.Findings = append(d.Findings, provider.Finding{Severity: provider.Critical, Code: "status-unknown",
			Message: fmt.Sprintf("unknown Vast status %q: %s", in.ActualStatus, msg)})
	}
	return d, nil
}

// UnknownID returns an id shaped like Vast's (an integer) that no instance has.
func (p *Provider) UnknownID() string { return "999999999" }
