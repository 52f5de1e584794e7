package azure

import (
	"context"
	"fmt"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v6"

	"github.com/org/gpuprov/provider"
)

// Diagnose reads the VM instanceID with its instance view (one GET,
// $expand=instanceView) and reports: the status; a failed provisioning
// with its code and message (ProvisioningState/failed/<code>: an
// allocation failure that arrived after Create's bounded wait, an OS
// provisioning timeout); a VM stopped or deallocated, or stopping,
// deallocating or starting; a Spot VM; a VM agent that reports an error.
// A VM that is gone is reported not existing; when the NIC Prepare made
// for it says it was Spot (Spot VMs here are evicted with policy Delete,
// which deletes the VM and its OS disk), the finding is spot-evicted, so
// the reclaim is attributed; its text says the eviction is inferred (Azure
// keeps no record of a deleted VM to ask). It never mutates.
func (p *Provider) Diagnose(ctx context.Context, loc provider.Location, vm, instanceID string) (provider.Diagnosis, error) {
	d := provider.Diagnosis{InstanceID: instanceID}
	rg, name, err := p.parseVMID(instanceID)
	if err != nil {
		return d, p.errorf(provider.InvalidRequest, "diagnose", "%q is not a VM id of this subscription: %w", instanceID, err)
	}
	cctx, cancel := p.call(ctx)
	got, err := p.vms.Get(cctx, rg, name, &armcompute.VirtualMachinesClientGetOptions{Expand: to(armcompute.InstanceViewTypesInstanceView)})
	cancel()
	if isNotFound(err) {
		return p.gone(ctx, d, loc, rg, vm, name)
	}
	if err != nil {
		return d, p.classify("diagnose", err)
	}
	if !p.ours(got.Tags, vm) {
		d.Findings = append(d.Findings, provider.Finding{Severity: provider.Critical, Code: "identity-mismatch",
			Message: fmt.Sprintf("VM %s does not carry the identity of VM %s in this installation", name, vm)})
		return d, nil
	}
	var iv *armcompute.VirtualMachineInstanceView
	var provState string
	spot := false
	if pr := got.Properties; pr != nil {
		iv, provState = pr.InstanceView, deref(pr.ProvisioningState)
		spot = pr.Priority != nil && *pr.Priority == armcompute.VirtualMachinePriorityTypesSpot
	}
	codes := statusCodes(iv)
	power := powerState(codes)
	d.Exists, d.Status, d.VendorStatus = true, status(provState, power), strings.Join(codes, " ")
	if iv != nil {
		for _, s := range iv.Statuses {
			if c, ok := strings.CutPrefix(deref(s.Code), "ProvisioningState/failed/"); ok {
				f := provider.Finding{Severity: provider.Critical, Code: "provisioning-failed",
					Message: strings.TrimSpace(c + ": " + deref(s.Message))}
				if s.Time != nil {
					f.At = *s.Time
				}
				d.Findings = append(d.Findings, f)
			}
		}
	}
	switch power {
	case "stopped", "deallocated":
		code, msg := power, fmt.Sprintf("VM %s is %s", name, power)
		if spot && power == "deallocated" {
			code, msg = "spot-evicted", msg+"; inferred to be a Spot eviction from its Spot priority, not reported by Azure"
		}
		d.Findings = append(d.Findings, provider.Finding{Severity: provider.Critical, Code: code, Message: msg})
	case "stopping", "deallocating", "starting":
		d.Findings = append(d.Findings, provider.Finding{Severity: provider.Warn, Code: "status-" + power,
			Message: fmt.Sprintf("VM %s is %s", name, power)})
	case "running":
		if spot {
			d.Findings = append(d.Findings, provider.Finding{Severity: provider.Info, Code: "spot",
				Message: "Spot VM: Azure may evict it when it needs the capacity back (eviction policy Delete)"})
		}
	}
	if d.Status == provider.StatusPending && len(d.Findings) == 0 {
		d.Findings = append(d.Findings, provider.Finding{Severity: provider.Warn, Code: "status-pending",
			Message: fmt.Sprintf("VM %s is still provisioning (%s)", name, provState)})
	}
	if iv != nil && iv.VMAgent != nil {
		for _, s := range iv.VMAgent.Statuses {
			if s.Level != nil && *s.Level == armcompute.StatusLevelTypesError {
				d.Findings = append(d.Findings, provider.Finding{Severity: provider.Warn, Code: "vm-agent",
					Message: strings.TrimSpace(deref(s.DisplayStatus) + " " + deref(s.Message))})
			}
		}
	}
	return d, nil
}

// gone reports a VM that no longer exists, attributing it to a Spot
// eviction when its NIC says it was Spot.
func (p *Provider) gone(ctx context.Context, d provider.Diagnosis, loc provider.Location, rg, vm, name string) (provider.Diagnosis, error) {
	d.Status = provider.StatusTerminated
	nicName := p.sideName(vm, loc.Region, "nic")
	cctx, cancel := p.call(ctx)
	nic, err := p.nics.Get(cctx, rg, nicName, nil)
	cancel()
	if err != nil && !isNotFound(err) {
		return d, p.classify("diagnose", err)
	}
	if err == nil && p.ours(nic.Tags, vm) && deref(nic.Tags[tagSpot]) == "true" {
		d.Findings = append(d.Findings, provider.Finding{Severity: provider.Critical, Code: "spot-evicted",
			Message: fmt.Sprintf("Spot VM %s no longer exists; inferred to be a Spot eviction (an evicted Spot VM with eviction "+
				"policy Delete is deleted with its OS disk), not reported by Azure: its NIC says it was Spot, and a delete by "+
				"someone else would look the same", name)})
		return d, nil
	}
	d.Findings = append(d.Findings, provider.Finding{Severity: provider.Critical, Code: "gone",
		Message: fmt.Sprintf("VM %s no longer exists in %s", name, rg)})
	return d, nil
}
