package azure

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/arm"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v6"

	"github.com/org/gpuprov/provider"
)

// Observe lists the VMs of loc's resource group (every page) and returns
// those in loc (its region, and its zone when it has one) that carry both
// identity tags of vm, each with its instance view (one call per VM) and,
// once running, its public and private address (the NIC and the public IP,
// two calls). A VM whose provisioning failed or that is stopped or
// deallocated is listed as Failed; one being deleted as Stopping. A
// resource group that does not exist holds no VM.
func (p *Provider) Observe(ctx context.Context, loc provider.Location, vm string) ([]provider.Observed, error) {
	rg := p.resourceGroup(loc.Region)
	vms, err := p.listVMs(ctx, "observe", rg)
	if err != nil {
		return nil, err
	}
	out := []provider.Observed{}
	for _, m := range vms {
		if !p.ours(m.Tags, vm) || !inLocation(m, loc) {
			continue
		}
		o, ok, err := p.observed(ctx, "observe", rg, m)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, o)
		}
	}
	return out, nil
}

// List returns every VM of this installation that carries a VM tag: in
// loc, or in every configured region (every region of the catalog when
// none is configured) when loc is zero. One paged list per resource group.
func (p *Provider) List(ctx context.Context, loc provider.Location) ([]provider.Observed, error) {
	regions := p.regions()
	if !loc.IsZero() {
		regions = []string{loc.Region}
	}
	var rgs []string
	for _, r := range regions {
		if rg := p.resourceGroup(r); !slices.Contains(rgs, rg) {
			rgs = append(rgs, rg)
		}
	}
	out := []provider.Observed{}
	for _, rg := range rgs {
		vms, err := p.listVMs(ctx, "list", rg)
		if err != nil {
			return nil, err
		}
		for _, m := range vms {
			if deref(m.Tags[provider.LabelInstallation]) != p.installation || deref(m.Tags[provider.LabelVM]) == "" ||
				!slices.Contains(regions, strings.ToLower(deref(m.Location))) || (!loc.IsZero() && !inLocation(m, loc)) {
				continue
			}
			o, ok, err := p.observed(ctx, "list", rg, m)
			if err != nil {
				return nil, err
			}
			if ok {
				out = append(out, o)
			}
		}
	}
	return out, nil
}

// listVMs lists a resource group's VMs, every page; a missing group has none.
func (p *Provider) listVMs(ctx context.Context, op, rg string) ([]*armcompute.VirtualMachine, error) {
	ctx, cancel := p.call(ctx)
	defer cancel()
	pager := p.vms.NewListPager(rg, nil)
	var out []*armcompute.VirtualMachine
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			if isNotFound(err) {
				return nil, nil
			}
			return nil, p.classify(op, err)
		}
		out = append(out, page.Value...)
	}
	return out, nil
}

// inLocation reports whether m is in loc's region and, when loc has a
// zone, in that zone.
func inLocation(m *armcompute.VirtualMachine, loc provider.Location) bool {
	if !strings.EqualFold(deref(m.Location), loc.Region) {
		return false
	}
	if z := zoneOf(loc); z != "" {
		return len(m.Zones) == 1 && deref(m.Zones[0]) == z
	}
	return true
}

// observed normalizes a listed VM with its instance view; ok is false when
// the VM went away between the list and the view.
func (p *Provider) observed(ctx context.Context, op, rg string, m *armcompute.VirtualMachine) (provider.Observed, bool, error) {
	name := deref(m.Name)
	cctx, cancel := p.call(ctx)
	iv, err := p.vms.InstanceView(cctx, rg, name, nil)
	cancel()
	if isNotFound(err) {
		return provider.Observed{}, false, nil
	}
	if err != nil {
		return provider.Observed{}, false, p.classify(op, err)
	}
	region := strings.ToLower(deref(m.Location))
	o := provider.Observed{
		ID: p.vmID(rg, name), VM: deref(m.Tags[provider.LabelVM]),
		Location: provider.Location{Region: region},
	}
	if len(m.Zones) == 1 {
		o.Location.Zone = region + "-" + deref(m.Zones[0])
	}
	var provState, user string
	if pr := m.Properties; pr != nil {
		provState = deref(pr.ProvisioningState)
		if pr.HardwareProfile != nil && pr.HardwareProfile.VMSize != nil {
			o.InstanceType = string(*pr.HardwareProfile.VMSize)
		}
		if pr.TimeCreated != nil {
			o.Created = *pr.TimeCreated
		}
		if pr.OSProfile != nil {
			user = deref(pr.OSProfile.AdminUsername)
		}
	}
	codes := statusCodes(&iv.VirtualMachineInstanceView)
	o.Status = status(provState, powerState(codes))
	o.VendorStatus = strings.Join(codes, " ")
	if o.VendorStatus == "" {
		o.VendorStatus = "ProvisioningState/" + strings.ToLower(provState)
	}
	if o.Status == provider.StatusRunning {
		pub, priv, err := p.addresses(ctx, op, m)
		if err != nil {
			return provider.Observed{}, false, err
		}
		o.PublicIP, o.PrivateIP = pub, priv
		if pub != "" {
			o.SSH = &provider.SSHEndpoint{Host: pub, Port: 22, User: user}
		}
	}
	return o, true, nil
}

// addresses reads the public and private IPv4 of m's primary NIC: the NIC,
// then the public IP it references. What is gone reads as "".
func (p *Provider) addresses(ctx context.Context, op string, m *armcompute.VirtualMachine) (public, private string, err error) {
	if m.Properties == nil || m.Properties.NetworkProfile == nil || len(m.Properties.NetworkProfile.NetworkInterfaces) == 0 {
		return "", "", nil
	}
	nicID, err := arm.ParseResourceID(deref(m.Properties.NetworkProfile.NetworkInterfaces[0].ID))
	if err != nil {
		return "", "", nil // not a NIC id this adapter wrote: no address to report
	}
	cctx, cancel := p.call(ctx)
	defer cancel()
	nic, err := p.nics.Get(cctx, nicID.ResourceGroupName, nicID.Name, nil)
	if isNotFound(err) {
		return "", "", nil
	}
	if err != nil {
		return "", "", p.classify(op, fmt.Errorf("network interface %s: %w", nicID.Name, err))
	}
	if nic.Properties == nil || len(nic.Properties.IPConfigurations) == 0 || nic.Properties.IPConfigurations[0].Properties == nil {
		return "", "", nil
	}
	ipc := nic.Properties.IPConfigurations[0].Properties
	private = deref(ipc.PrivateIPAddress)
	if ipc.PublicIPAddress == nil {
		return "", private, nil
	}
	ipID, err := arm.ParseResourceID(deref(ipc.PublicIPAddress.ID))
	if err != nil {
		return "", private, nil
	}
	ip, err := p.ips.Get(cctx, ipID.ResourceGroupName, ipID.Name, nil)
	if isNotFound(err) {
		return "", private, nil
	}
	if err != nil {
		return "", "", p.classify(op, fmt.Errorf("public IP %s: %w", ipID.Name, err))
	}
	if ip.Properties != nil {
		public = deref(ip.Properties.IPAddress)
	}
	return public, private, nil
}

// statusCodes are the codes of an instance view's statuses
// ("ProvisioningState/succeeded", "PowerState/running").
func statusCodes(iv *armcompute.VirtualMachineInstanceView) []string {
	if iv == nil {
		return nil
	}
	var out []string
	for _, s := range iv.Statuses {
		if c := deref(s.Code); c != "" {
			out = append(out, c)
		}
	}
	return out
}

// powerState is the state of the PowerState/... code, "" when there is none.
func powerState(codes []string) string {
	for _, c := range codes {
		if s, ok := strings.CutPrefix(c, "PowerState/"); ok {
			return strings.ToLower(s)
		}
	}
	return ""
}

// status maps a VM's provisioning state and power state
// (https://learn.microsoft.com/en-us/azure/virtual-machines/states-billing):
// provisioning Failed is Failed and Deleting is Stopping, whatever the power;
// then power running is Running; starting, or no power state yet
// (creating), Pending; stopping and deallocating Stopping; stopped and
// deallocated Failed: the VM exists (a stopped one still bills its
// compute, a deallocated one its disks) but does not run, which for a
// gpuprov VM means someone or something else stopped it.
func status(provisioning, power string) provider.InstanceStatus {
	switch strings.ToLower(provisioning) {
	case "failed":
		return provider.StatusFailed
	case "deleting":
		return provider.StatusStopping
	}
	switch power {
	case "running":
		return provider.StatusRunning
	case "starting", "":
		return provider.StatusPending
	case "stopping", "deallocating":
		return provider.StatusStopping
	case "stopped", "deallocated":
		return provider.StatusFailed
	}
	return provider.StatusUnknown
}

// Delete requests the deletion of each id (one DELETE per VM, not waited
// for). An id is the VM's resource id; one that is not a VM of this
// subscription named by gpuprov is refused as InvalidRequest before any
// call. A VM (or resource group) that is gone is success. The OS disk goes
// with the VM (deleteOption Delete); the NIC is detached and left to
// Cleanup. It tries every id and returns the first error.
func (p *Provider) Delete(ctx context.Context, loc provider.Location, vm string, ids []string) error {
	var first error
	for _, id := range ids {
		if err := p.delete(ctx, id); err != nil && first == nil {
			first = err
		}
	}
	return first
}

func (p *Provider) delete(ctx context.Context, id string) error {
	rg, name, err := p.parseVMID(id)
	if err != nil || !strings.HasPrefix(name, "gpuprov-") {
		return p.errorf(provider.InvalidRequest, "delete", "%q is not a gpuprov VM id of this subscription", id)
	}
	cctx, cancel := p.call(ctx)
	defer cancel()
	if _, err := p.vms.BeginDelete(cctx, rg, name, nil); err != nil && !isNotFound(err) {
		return p.classify("delete", err)
	}
	return nil
}
