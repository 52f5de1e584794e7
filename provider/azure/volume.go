package azure

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/arm"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v6"

	"github.com/org/gpuprov/provider"
)

// Persistent volumes (provider.VolumeManager) are Azure managed disks:
// zonal Premium SSD data disks, made empty by the Disks API and attached
// to a running VM by an update of the VM's data disk list. The REST
// references the calls follow (the SDK's armcompute/v6 v6.4.0 sends the
// disk calls as API version 2024-03-02, the VM calls as 2024-11-01):
//
//	Disks - Create Or Update   https://learn.microsoft.com/en-us/rest/api/compute/disks/create-or-update
//	Disks - Get                https://learn.microsoft.com/en-us/rest/api/compute/disks/get
//	Disks - Delete             https://learn.microsoft.com/en-us/rest/api/compute/disks/delete
//	Virtual Machines - Update  https://learn.microsoft.com/en-us/rest/api/compute/virtual-machines/update
//	Virtual Machines - Get     https://learn.microsoft.com/en-us/rest/api/compute/virtual-machines/get
//
// The VM's newer attachDetachDataDisks action (API 2024-03-01 and later)
// is not used: it was answered "The subscription is not enabled for using
// the attach detach data disks API" and "... is not enabled for the
// region" (Azure/azure-rest-api-specs#27476,
// Azure/azure-sdk-for-go#22773), while the update of
// properties.storageProfile.dataDisks is what every subscription takes
// (kubernetes-sigs/cloud-provider-azure,
// pkg/provider/azure_controller_standard.go, attaches and detaches so).

// The disks CreateVolume makes carry provider.LabelVolume ("true") beside
// the identity every gpuprov resource carries (provider.LabelVM = the
// volume's name, provider.LabelInstallation): a disk is this
// installation's volume only with all three. A VM's OS disk carries the
// VM's identity tags too.

// Volumes as gpuprov makes them: Premium SSD, locally redundant
// (Premium_LRS, "Best for production and performance sensitive
// workloads", the DiskSku enum of the Disks API), what a GPU training
// job's data and checkpoints want; no other type is offered or fallen
// back to. Their sizes are the Premium SSD sizes of "Azure managed disk
// types" (https://learn.microsoft.com/en-us/azure/virtual-machines/disks-types,
// the Premium SSD size table: P1 4 GiB to P80 32,767 GiB). VolumeSpec.SizeGB
// is sent as diskSizeGB, which is GiB.
const (
	volumeSKU   = armcompute.DiskStorageAccountTypesPremiumLRS
	minVolumeGB = 4
	maxVolumeGB = 32767
)

// noCacheFromGB is the size from which a data disk is attached with host
// caching None: "Disk caching isn't supported for disks 4 TiB and larger"
// ("Azure premium storage: design for high performance",
// https://learn.microsoft.com/en-us/azure/virtual-machines/premium-storage-performance#disk-caching).
// Smaller disks are attached ReadOnly, the default the VM API documents
// for Premium storage (the DataDisk caching description).
const noCacheFromGB = 4096

// maxLUN is the highest logical unit number of a data disk: LUNs 0 to 63.
const maxLUN = 63

// lunDevice is the prefix of the device path AttachVolume returns, the
// disk's LUN appended. "When the Azure Linux agent is installed on a VM,
// the agent uses Udev rules to construct a set of symbolic links under the
// /dev/disk/azure path", a data disk at /dev/disk/azure/scsi1/lun<LUN>
// ("Troubleshoot Linux VM device name changes",
// https://learn.microsoft.com/en-us/troubleshoot/azure/virtual-machines/linux/troubleshoot-device-names-problems):
// a path that does not depend on the order the kernel found the disks in,
// as /dev/sdc, /dev/sdd, ... do. A VM size whose data disks are NVMe
// devices (the NVMe disk controller of newer sizes) has no such link;
// azure-vm-utils links those as /dev/disk/azure/data/by-lun/<LUN> (not
// used here).
const lunDevice = "/dev/disk/azure/scsi1/lun"

// VolumeLimits implements provider.VolumeManager: zonal Premium SSD
// managed disks of 4 to 32,767 GiB, attached to a running VM by
// AttachVolume.
func (p *Provider) VolumeLimits() provider.VolumeLimits {
	return provider.VolumeLimits{Scope: provider.VolumeZonal, MinGB: minVolumeGB, MaxGB: maxVolumeGB}
}

// diskName is the managed disk of volume name: gpuprov--<name>
// (provider.VolumeResourceName), never the name of a VM's OS disk,
// gpuprov-<vm>-<attempt>-osdisk, which a volume "<vm>-<attempt>-osdisk"
// would take were it gpuprov-<name>. A volume's name is at most 50
// characters, as a VM's (the core's MaxNameLength), so the disk's is at
// most 59; Azure allows 80.
func diskName(name string) string { return provider.VolumeResourceName(name) }

func (p *Provider) diskID(rg, name string) string {
	return "/subscriptions/" + p.cfg.SubscriptionID + "/resourceGroups/" + rg + "/providers/Microsoft.Compute/disks/" + name
}

// parseDiskID reads the resource group and name of a disk id of this
// subscription.
func (p *Provider) parseDiskID(id string) (rg, name string, err error) {
	r, err := arm.ParseResourceID(id)
	if err != nil {
		return "", "", err
	}
	if !strings.EqualFold(r.ResourceType.String(), "Microsoft.Compute/disks") {
		return "", "", fmt.Errorf("%q is not a managed disk id", id)
	}
	if !strings.EqualFold(r.SubscriptionID, p.cfg.SubscriptionID) {
		return "", "", fmt.Errorf("%q is not in subscription %s", id, p.cfg.SubscriptionID)
	}
	return r.ResourceGroupName, r.Name, nil
}

func (p *Provider) volumeInstallation(spec *provider.VolumeSpec) string {
	if spec.Installation != "" {
		return spec.Installation
	}
	return p.installation
}

// volumeTags are the tags of spec's disk: the request's labels, the
// volume's identity and provider.LabelVolume.
func volumeTags(spec *provider.VolumeSpec, installation string) map[string]*string {
	m := maps.Clone(spec.UserLabels)
	if m == nil {
		m = map[string]string{}
	}
	m[provider.LabelVM], m[provider.LabelInstallation], m[provider.LabelVolume] = spec.Name, installation, "true"
	return tags(m)
}

// isVolume reports whether t are the tags of volume name of installation.
func isVolume(t map[string]*string, name, installation string) bool {
	return deref(t[provider.LabelVolume]) == "true" && deref(t[provider.LabelVM]) == name && deref(t[provider.LabelInstallation]) == installation
}

// checkVolumeSpec refuses, before any call, what no disk can be: no name,
// a size outside the Premium SSD sizes, a location without a region or an
// availability zone.
func (p *Provider) checkVolumeSpec(spec *provider.VolumeSpec) error {
	const op = "create volume"
	switch z := zoneOf(spec.Location); {
	case spec.Name == "":
		return p.errorf(provider.InvalidRequest, op, "the volume has no name")
	case spec.SizeGB < minVolumeGB || spec.SizeGB > maxVolumeGB:
		return p.errorf(provider.InvalidRequest, op, "volume %s: %d GB is not a Premium SSD size (%d to %d GiB)", spec.Name, spec.SizeGB, minVolumeGB, maxVolumeGB)
	case spec.Location.Region == "" || z == "":
		return p.errorf(provider.InvalidRequest, op, "volume %s: managed disks are zonal and location %s names no availability zone (configure zones)", spec.Name, spec.Location)
	case !zoneRE.MatchString(z):
		return p.errorf(provider.InvalidRequest, op, "volume %s: %q is not an availability zone of %s", spec.Name, spec.Location.Zone, spec.Location.Region)
	}
	return nil
}

// CreateVolume creates spec's volume: the managed disk gpuprov--<name> in
// the resource group of spec.Location's region (made first when it is the
// installation's own, as Prepare makes it), in its availability zone,
// Premium_LRS, empty, of spec.SizeGB GiB, tagged with the request's labels
// and the volume's identity. ARM has no idempotency token for a disk: the
// disk's name is the key. It reads the disk first: one of this
// installation's volume in that zone is returned as it is (a create sent
// again, or whose answer was lost); one that is not this installation's
// volume, or that is in another zone, is InvalidRequest, and nothing is
// sent; one whose provisioning failed (a create refused by its operation
// holds no data) is deleted and made again. Then one PUT, whose operation
// is waited for, bounded by OperationTimeout: a zone out of disk capacity
// is Capacity, a quota Quota (volumeRules); a disk still being made when
// the bound runs out is returned as creating, which ObserveVolume follows.
// A size outside VolumeLimits, or a location without a zone, is
// InvalidRequest before any call. spec.IdempotencyToken is not sent.
func (p *Provider) CreateVolume(ctx context.Context, spec provider.VolumeSpec) (provider.Volume, error) {
	const op = "create volume"
	if err := p.checkVolumeSpec(&spec); err != nil {
		return provider.Volume{}, err
	}
	installation := p.volumeInstallation(&spec)
	region, zone := strings.ToLower(spec.Location.Region), zoneOf(spec.Location)
	rg, name := p.resourceGroup(region), diskName(spec.Name)
	if p.cfg.ResourceGroup == "" {
		if err := p.ensureResourceGroup(ctx, rg, region); err != nil {
			return provider.Volume{}, err
		}
	}
	d, err := p.getDisk(ctx, op, rg, name)
	if err != nil {
		return provider.Volume{}, err
	}
	if d != nil {
		switch {
		case !isVolume(d.Tags, spec.Name, installation):
			return provider.Volume{}, p.errorf(provider.InvalidRequest, op,
				"disk %s in resource group %s exists and is not volume %s of installation %s", name, rg, spec.Name, installation)
		case strings.EqualFold(diskProvisioning(d), "Failed"):
			p.log.Warn("azure: volume's disk failed to provision; deleting it to make it again", "provider", p.name,
				"volume", spec.Name, "disk", name, "resource_group", rg)
			if err := p.deleteDisk(ctx, op, rg, name); err != nil {
				return provider.Volume{}, err
			}
		case !diskIn(d, spec.Location):
			v := p.volumeOf(rg, d)
			return provider.Volume{}, p.errorf(provider.InvalidRequest, op,
				"volume %s exists in %s, not in %s", spec.Name, v.Location, spec.Location)
		default:
			return p.volumeOf(rg, d), nil
		}
	}
	body := armcompute.Disk{
		Location: to(region), Zones: []*string{to(zone)}, Tags: volumeTags(&spec, installation),
		SKU: &armcompute.DiskSKU{Name: to(volumeSKU)},
		Properties: &armcompute.DiskProperties{
			CreationData: &armcompute.CreationData{CreateOption: to(armcompute.DiskCreateOptionEmpty)},
			DiskSizeGB:   to(int32(spec.SizeGB)),
		},
	}
	cctx, cancel := p.call(ctx)
	poller, err := p.disks.BeginCreateOrUpdate(cctx, rg, name, body, nil)
	cancel()
	if err != nil {
		if p.ownGroupGone(err) {
			// Deleted out of band: the next try makes it again.
			p.forgetGroup(rg)
			return provider.Volume{}, p.errorf(provider.Transient, op, "disk %s: resource group %s is gone: %w", name, rg, p.secrets().Error(err))
		}
		return provider.Volume{}, p.volumeError(op, "disk "+name, err)
	}
	res, done, werr := wait(ctx, p, poller)
	switch {
	case done && werr != nil:
		return provider.Volume{}, p.volumeError(op, "disk "+name, werr)
	case done:
		p.log.Info("azure: created volume", "provider", p.name, "volume", spec.Name, "disk", name, "zone", spec.Location.Zone, "size_gb", spec.SizeGB)
		return p.volumeOf(rg, &res.Disk), nil
	case werr != nil && ctx.Err() != nil:
		// The caller gave up; the PUT was accepted. The core observes.
		return provider.Volume{}, p.errorf(provider.Transient, op, "waiting for disk %s: %w", name, p.secrets().Error(werr))
	case werr != nil:
		p.log.Warn("azure: disk accepted, outcome not yet known", "provider", p.name, "volume", spec.Name, "disk", name, "err", p.maskErr(werr))
	}
	return provider.Volume{ID: p.diskID(rg, name), Name: spec.Name, Location: provider.Location{Region: region, Zone: region + "-" + zone},
		SizeGB: spec.SizeGB, Status: provider.VolumeCreating}, nil
}

// ObserveVolume implements provider.VolumeManager: the volume name of this
// installation in loc (its region's resource group, its zone when loc has
// one), read with one GET of its disk, or nil when there is none (or the
// resource group is gone).
func (p *Provider) ObserveVolume(ctx context.Context, loc provider.Location, name string) (*provider.Volume, error) {
	if loc.Region == "" || name == "" {
		return nil, p.errorf(provider.InvalidRequest, "observe volume", "volume %q in %q: a volume has a name and a region", name, loc)
	}
	rg := p.resourceGroup(strings.ToLower(loc.Region))
	d, err := p.getDisk(ctx, "observe volume", rg, diskName(name))
	if err != nil || d == nil {
		return nil, err
	}
	if !isVolume(d.Tags, name, p.installation) || !diskIn(d, loc) {
		return nil, nil
	}
	v := p.volumeOf(rg, d)
	return &v, nil
}

// AttachVolume implements provider.VolumeManager: it attaches the disk id
// to the VM instanceID at the lowest free LUN (one PATCH of the VM's
// properties.storageProfile.dataDisks: the list as the VM has it plus
// {lun, name, createOption Attach, managedDisk.id, caching, deleteOption
// Detach}, its operation waited for), then reads the disk and the VM
// until the VM lists the disk and the disk says it is attached to it
// (managedBy, diskState Attached), polling every PollInterval on the
// provider's clock, bounded by OperationTimeout and ctx. It returns
// /dev/disk/azure/scsi1/lun<LUN> (see lunDevice).
//
// A disk the VM lists already is not sent again: its attach is waited
// for, and one attached already returns at once, with the LUN it has. A
// disk attached to another VM is an error matching provider.ErrInUse:
// InvalidRequest, or Transient while that VM is being deleted or is gone
// (Azure releases its disks). Still attaching when the bound runs out is
// Transient; an attach the VM failed (the disk listed, the VM's
// provisioning state Failed) is Failed. Ids that are not a disk and a VM
// of this subscription are InvalidRequest before any call.
func (p *Provider) AttachVolume(ctx context.Context, loc provider.Location, id, instanceID string) (string, error) {
	const op = "attach volume"
	drg, dname, err := p.parseDiskID(id)
	if err != nil {
		return "", p.errorf(provider.InvalidRequest, op, "volume id: %w", err)
	}
	vrg, vname, err := p.parseVMID(instanceID)
	if err != nil {
		return "", p.errorf(provider.InvalidRequest, op, "instance id: %w", err)
	}
	deadline := p.clock.Now().Add(p.cfg.OperationTimeout)
	sent := false
	for {
		d, err := p.getDisk(ctx, op, drg, dname)
		if err != nil {
			return "", err
		}
		if d == nil {
			return "", p.errorf(provider.Failed, op, "disk %s in resource group %s is gone", dname, drg)
		}
		if holder := deref(d.ManagedBy); holder != "" && !strings.EqualFold(holder, instanceID) {
			return "", p.heldBy(ctx, op, dname, holder)
		}
		vm, err := p.getVM(ctx, op, vrg, vname)
		if err != nil {
			return "", err
		}
		if vm == nil {
			return "", p.errorf(provider.Failed, op, "VM %s in resource group %s is gone", vname, vrg)
		}
		dd := dataDiskOf(vm, id)
		switch {
		case dd == nil && !sent:
			if err := p.attach(ctx, vrg, vm, d); err != nil {
				return "", err
			}
			sent = true
			continue // read back what the operation did
		case dd == nil:
			// Sent, and not listed yet: the update is still being applied.
		case deref(dd.ToBeDetached):
			// Being detached from this very VM: attach it again once gone.
		case attachedTo(d, instanceID):
			lun := deref(dd.Lun)
			p.log.Info("azure: volume attached", "provider", p.name, "disk", dname, "instance", vname, "lun", lun)
			return lunDevice + strconv.Itoa(int(lun)), nil
		case strings.EqualFold(vmProvisioning(vm), "Failed"):
			return "", p.errorf(provider.Failed, op, "disk %s at LUN %d of VM %s: the VM's provisioning state is Failed (the attach failed)",
				dname, deref(dd.Lun), vname)
		}
		left := deadline.Sub(p.clock.Now())
		if left <= 0 {
			return "", p.errorf(provider.Transient, op, "disk %s is not attached to VM %s after %v", dname, vname, p.cfg.OperationTimeout)
		}
		if err := p.clock.Sleep(ctx, min(p.cfg.PollInterval, left)); err != nil {
			return "", p.errorf(provider.Transient, op, "waiting for disk %s to attach to VM %s: %w", dname, vname, err)
		}
	}
}

// attach sends the PATCH that adds disk d to vm at its lowest free LUN.
func (p *Provider) attach(ctx context.Context, rg string, vm *armcompute.VirtualMachine, d *armcompute.Disk) error {
	const op = "attach volume"
	disks := dataDisks(vm)
	lun, ok := freeLUN(disks)
	if !ok {
		return p.errorf(provider.Quota, op, "VM %s has no free LUN (0 to %d) for disk %s", deref(vm.Name), maxLUN, deref(d.Name))
	}
	caching := armcompute.CachingTypesReadOnly
	if d.Properties != nil && deref(d.Properties.DiskSizeGB) >= noCacheFromGB {
		caching = armcompute.CachingTypesNone
	}
	disks = append(slices.Clone(disks), &armcompute.DataDisk{
		Lun: to(lun), Name: d.Name, CreateOption: to(armcompute.DiskCreateOptionTypesAttach),
		ManagedDisk: &armcompute.ManagedDiskParameters{ID: d.ID}, Caching: to(caching),
		DeleteOption: to(armcompute.DiskDeleteOptionTypesDetach),
	})
	p.log.Info("azure: attaching volume", "provider", p.name, "disk", deref(d.Name), "instance", deref(vm.Name), "lun", lun)
	return p.updateDataDisks(ctx, op, rg, deref(vm.Name), disks)
}

// DetachVolume implements provider.VolumeManager: one PATCH of the VM's
// data disk list with the disk marked toBeDetached (the way Azure detaches
// a managed data disk; no ForceDetach), its operation waited for, then
// reads of the VM until it no longer lists the disk, bounded like
// AttachVolume. A VM that is gone, or that does not list the disk (it is
// detached, or attached elsewhere), is success: the disk is not attached
// to instanceID, which is what a detach asks.
func (p *Provider) DetachVolume(ctx context.Context, loc provider.Location, id, instanceID string) error {
	const op = "detach volume"
	if _, _, err := p.parseDiskID(id); err != nil {
		return p.errorf(provider.InvalidRequest, op, "volume id: %w", err)
	}
	vrg, vname, err := p.parseVMID(instanceID)
	if err != nil {
		return p.errorf(provider.InvalidRequest, op, "instance id: %w", err)
	}
	deadline := p.clock.Now().Add(p.cfg.OperationTimeout)
	sent := false
	for {
		vm, err := p.getVM(ctx, op, vrg, vname)
		if err != nil || vm == nil {
			return err
		}
		dd := dataDiskOf(vm, id)
		if dd == nil {
			return nil
		}
		if !sent && !deref(dd.ToBeDetached) {
			disks := slices.Clone(dataDisks(vm))
			for i, e := range disks {
				if e == dd {
					marked := *e
					marked.ToBeDetached = to(true)
					disks[i] = &marked
				}
			}
			p.log.Info("azure: detaching volume", "provider", p.name, "disk", deref(dd.Name), "instance", vname)
			if err := p.updateDataDisks(ctx, op, vrg, vname, disks); err != nil {
				return err
			}
			sent = true
			continue
		}
		left := deadline.Sub(p.clock.Now())
		if left <= 0 {
			return p.errorf(provider.Transient, op, "disk %s is still attached to VM %s after %v", deref(dd.Name), vname, p.cfg.OperationTimeout)
		}
		if err := p.clock.Sleep(ctx, min(p.cfg.PollInterval, left)); err != nil {
			return p.errorf(provider.Transient, op, "waiting for disk %s to detach from VM %s: %w", deref(dd.Name), vname, err)
		}
	}
}

// DeleteVolume implements provider.VolumeManager: a GET of the disk, then
// its DELETE, whose operation is waited for (bounded; still running is
// Transient). A disk that is gone (or its resource group) is success. A
// disk attached to a VM (managedBy, or the DELETE's OperationNotAllowed
// "Disk ... is attached to VM ...") is an error matching
// provider.ErrInUse: InvalidRequest while that VM lives, Transient while it
// is being deleted or is gone (its disks are released). An id that is not
// a gpuprov disk of this subscription, or a disk that is not a volume of
// this installation, is InvalidRequest and is not deleted; an id whose
// name is not a volume's (gpuprov--<name>) is refused before any call.
func (p *Provider) DeleteVolume(ctx context.Context, loc provider.Location, id string) error {
	const op = "delete volume"
	rg, name, err := p.parseDiskID(id)
	if err != nil || !strings.HasPrefix(name, provider.VolumeResourceName("")) {
		// A VM's own disks (gpuprov-<vm>-<n>-osdisk) are never a volume's.
		return p.errorf(provider.InvalidRequest, op, "%q is not a gpuprov volume's disk id of this subscription", id)
	}
	d, err := p.getDisk(ctx, op, rg, name)
	if err != nil || d == nil {
		return err
	}
	if deref(d.Tags[provider.LabelVolume]) != "true" || deref(d.Tags[provider.LabelInstallation]) != p.installation {
		return p.errorf(provider.InvalidRequest, op, "disk %s in resource group %s is not a volume of installation %s", name, rg, p.installation)
	}
	if holder := deref(d.ManagedBy); holder != "" {
		return p.heldBy(ctx, op, name, holder)
	}
	if err := p.deleteDisk(ctx, op, rg, name); err != nil {
		return err
	}
	p.log.Info("azure: deleted volume", "provider", p.name, "volume", deref(d.Tags[provider.LabelVM]), "disk", name)
	return nil
}

// deleteDisk deletes disk name in rg and waits for it, bounded: gone is
// success, still running when the bound runs out is Transient.
func (p *Provider) deleteDisk(ctx context.Context, op, rg, name string) error {
	cctx, cancel := p.call(ctx)
	poller, err := p.disks.BeginDelete(cctx, rg, name, nil)
	cancel()
	switch {
	case isNotFound(err):
		return nil
	case err != nil:
		return p.volumeError(op, "disk "+name, err)
	}
	_, done, err := wait(ctx, p, poller)
	switch {
	case err != nil:
		return p.volumeError(op, "disk "+name, err)
	case !done:
		return p.errorf(provider.Transient, op, "disk %s: delete still running after %v", name, p.cfg.OperationTimeout)
	}
	return nil
}

// heldBy is the error of disk name attached to VM holder, matching
// provider.ErrInUse: Transient when holder is being deleted or is gone,
// InvalidRequest otherwise (one GET of the holder tells).
func (p *Provider) heldBy(ctx context.Context, op, name, holder string) error {
	kind, why := provider.InvalidRequest, "attached to VM "+holder
	if rg, vm, err := p.parseVMID(holder); err == nil {
		m, err := p.getVM(ctx, op, rg, vm)
		switch {
		case err != nil:
			return err
		case m == nil:
			kind, why = provider.Transient, why+", which is gone (Azure releases its disks)"
		case strings.EqualFold(vmProvisioning(m), "Deleting"):
			kind, why = provider.Transient, why+", which is being deleted"
		}
	}
	return p.errorf(kind, op, "disk %s: %w: %s", name, provider.ErrInUse, why)
}

// updateDataDisks sends one PATCH of VM name's data disk list and waits
// for its operation (bounded): a failure is classified by volumeError;
// still running when the bound runs out is not an error (the caller reads
// the VM and the disk until they say the change is done).
func (p *Provider) updateDataDisks(ctx context.Context, op, rg, name string, disks []*armcompute.DataDisk) error {
	update := armcompute.VirtualMachineUpdate{Properties: &armcompute.VirtualMachineProperties{
		StorageProfile: &armcompute.StorageProfile{DataDisks: disks},
	}}
	cctx, cancel := p.call(ctx)
	poller, err := p.vms.BeginUpdate(cctx, rg, name, update, nil)
	cancel()
	if err != nil {
		return p.volumeError(op, "VM "+name, err)
	}
	_, done, err := wait(ctx, p, poller)
	switch {
	case done && err != nil:
		return p.volumeError(op, "VM "+name, err)
	case err != nil && ctx.Err() != nil:
		return p.errorf(provider.Transient, op, "waiting for the update of VM %s: %w", name, p.secrets().Error(err))
	case err != nil:
		p.log.Warn("azure: VM update accepted, outcome not yet known", "provider", p.name, "instance", name, "err", p.maskErr(err))
	}
	return nil
}

// getDisk reads disk name in rg; nil when it (or the group) is gone.
func (p *Provider) getDisk(ctx context.Context, op, rg, name string) (*armcompute.Disk, error) {
	cctx, cancel := p.call(ctx)
	defer cancel()
	r, err := p.disks.Get(cctx, rg, name, nil)
	if isNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, p.volumeError(op, "disk "+name, err)
	}
	return &r.Disk, nil
}

// getVM reads VM name in rg; nil when it (or the group) is gone.
func (p *Provider) getVM(ctx context.Context, op, rg, name string) (*armcompute.VirtualMachine, error) {
	cctx, cancel := p.call(ctx)
	defer cancel()
	r, err := p.vms.Get(cctx, rg, name, nil)
	if isNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, p.volumeError(op, "VM "+name, err)
	}
	return &r.VirtualMachine, nil
}

// volumeOf normalizes a disk of resource group rg: its name from the
// provider.LabelVM tag, its status from its provisioning state and owner
// (Failed, Deleting; attached while managedBy names a VM; available once
// Succeeded; creating before).
func (p *Provider) volumeOf(rg string, d *armcompute.Disk) provider.Volume {
	region := strings.ToLower(deref(d.Location))
	v := provider.Volume{ID: p.diskID(rg, deref(d.Name)), Name: deref(d.Tags[provider.LabelVM]),
		Location: provider.Location{Region: region}, AttachedTo: deref(d.ManagedBy)}
	if len(d.Zones) == 1 {
		v.Location.Zone = region + "-" + deref(d.Zones[0])
	}
	if pr := d.Properties; pr != nil {
		v.SizeGB = int(deref(pr.DiskSizeGB))
		if pr.TimeCreated != nil {
			v.Created = *pr.TimeCreated
		}
	}
	switch state := strings.ToLower(diskProvisioning(d)); {
	case state == "failed":
		v.Status = provider.VolumeFailed
	case state == "deleting":
		v.Status = provider.VolumeDeleting
	case v.AttachedTo != "":
		v.Status = provider.VolumeAttached
	case state == "succeeded":
		v.Status = provider.VolumeAvailable
	default:
		v.Status = provider.VolumeCreating
	}
	return v
}

func diskProvisioning(d *armcompute.Disk) string {
	if d.Properties == nil {
		return ""
	}
	return deref(d.Properties.ProvisioningState)
}

func vmProvisioning(vm *armcompute.VirtualMachine) string {
	if vm.Properties == nil {
		return ""
	}
	return deref(vm.Properties.ProvisioningState)
}

// diskIn reports whether d is in loc's region and, when loc has a zone,
// in that zone.
func diskIn(d *armcompute.Disk, loc provider.Location) bool {
	if !strings.EqualFold(deref(d.Location), loc.Region) {
		return false
	}
	if z := zoneOf(loc); z != "" {
		return len(d.Zones) == 1 && deref(d.Zones[0]) == z
	}
	return true
}

// attachedTo reports whether d says it is attached to VM vmID: managedBy
// names it and diskState is Attached (Reserved: the VM is deallocated).
// While an attach runs, a disk still reads Unattached
// (kubernetes/kubernetes#82714).
func attachedTo(d *armcompute.Disk, vmID string) bool {
	if !strings.EqualFold(deref(d.ManagedBy), vmID) || d.Properties == nil || d.Properties.DiskState == nil {
		return false
	}
	s := *d.Properties.DiskState
	return s == armcompute.DiskStateAttached || s == armcompute.DiskStateReserved
}

func dataDisks(vm *armcompute.VirtualMachine) []*armcompute.DataDisk {
	if vm.Properties == nil || vm.Properties.StorageProfile == nil {
		return nil
	}
	return vm.Properties.StorageProfile.DataDisks
}

// dataDiskOf is vm's data disk entry of disk id, nil when it has none.
func dataDiskOf(vm *armcompute.VirtualMachine, id string) *armcompute.DataDisk {
	for _, dd := range dataDisks(vm) {
		if dd != nil && dd.ManagedDisk != nil && strings.EqualFold(deref(dd.ManagedDisk.ID), id) {
			return dd
		}
	}
	return nil
}

// freeLUN is the lowest LUN no entry of disks uses (one being detached
// holds its LUN until it is gone).
func freeLUN(disks []*armcompute.DataDisk) (int32, bool) {
	used := map[int32]bool{}
	for _, dd := range disks {
		if dd != nil && dd.Lun != nil {
			used[*dd.Lun] = true
		}
	}
	for lun := int32(0); lun <= maxLUN; lun++ {
		if !used[lun] {
			return lun, true
		}
	}
	return 0, false
}

// volumeRule decides the kind of an ARM answer to a disk or data disk
// call that the adapter's code table (codeKinds) does not decide as a
// volume needs: code is the answer's code (top level or a detail's); text,
// when set, must match its message, target its target.
type volumeRule struct {
	code   string
	text   *regexp.Regexp
	target string
	kind   provider.ErrorKind
	block  provider.Scope
	inUse  bool // the error matches provider.ErrInUse
}

// volumeRules, first match wins. The codes and messages are those of
// "Understand common error messages when you manage virtual machines in
// Azure" ([errmsg],
// https://learn.microsoft.com/en-us/troubleshoot/azure/virtual-machines/windows/error-messages),
// with the answers others were given where that page has no row:
//   - AttachDiskWhileBeingDetached, "Cannot attach data disk '{0}' to VM
//     '{1}' because the disk is currently being detached" [errmsg]; HTTP
//     409 (kubernetes/kubernetes#78657): Transient, in use;
//   - ConflictingUserInput, "Disk '{0}' cannot be attached as the disk is
//     already owned by VM '{1}'" [errmsg], "... because it is already
//     attached to VM ..." (kubernetes-sigs/azuredisk-csi-driver#1378):
//     InvalidRequest, in use;
//   - OperationNotAllowed, "Disk {0} is attached to VM {1}", the answer to
//     the DELETE of an attached disk (ansible/ansible#54644): InvalidRequest,
//     in use;
//   - OperationNotAllowed, "The maximum number of data disks allowed to be
//     attached to a VM of this size is {0}" [errmsg]: Quota of the offer
//     (the VM size);
//   - OperationNotAllowed, "... since another operation is in progress"
//     [errmsg], and Conflict, "The request failed due to conflict with a
//     concurrent request" (kubernetes/kubernetes#50150): Transient;
//   - InvalidParameter, "A disk at LUN {0} already exists", "A disk named
//     '{0}' already uses the same LUN: {1}" [errmsg] (another attach took
//     the LUN meanwhile): Transient, the next try picks another;
//   - InvalidParameter with target sku, "SKU Premium_ZRS is not available"
//     (ansible-collections/azure#792): Unavailable for the region;
//   - OperationNotAllowed or QuotaExceeded naming a quota ("Resolve errors
//     for resource quotas",
//     https://learn.microsoft.com/en-us/azure/azure-resource-manager/troubleshooting/error-resource-quota):
//     Quota of the region.
//
// The rest falls to codeKinds: an allocation failure (AllocationFailed,
// ZonalAllocationFailed) or SkuNotAvailable, a zone out of disk capacity,
// is Capacity; a throttled answer Transient; a 404 is decided by the
// callers (gone).
var volumeRules = []volumeRule{
	{code: "AttachDiskWhileBeingDetached", kind: provider.Transient, inUse: true},
	{code: "ConflictingUserInput", text: regexp.MustCompile(`(?i)already (owned|attached)`), kind: provider.InvalidRequest, inUse: true},
	{code: "OperationNotAllowed", text: regexp.MustCompile(`(?i)\bis attached to (VM|virtual machine)\b`), kind: provider.InvalidRequest, inUse: true},
	{code: "OperationNotAllowed", text: regexp.MustCompile(`(?i)maximum number of data disks`), kind: provider.Quota, block: provider.ScopeOffer},
	{code: "OperationNotAllowed", text: regexp.MustCompile(`(?i)another operation is in progress`), kind: provider.Transient},
	{code: "Conflict", text: regexp.MustCompile(`(?i)concurrent request`), kind: provider.Transient},
	{code: "InvalidParameter", text: regexp.MustCompile(`(?i)disk at LUN \d+ already exists|already uses the same LUN`), kind: provider.Transient},
	{code: "InvalidParameter", target: "sku", kind: provider.Unavailable, block: provider.ScopeRegion},
	{code: "OperationNotAllowed", text: regexp.MustCompile(`(?i)\bquota`), kind: provider.Quota, block: provider.ScopeRegion},
	{code: "QuotaExceeded", kind: provider.Quota, block: provider.ScopeRegion},
}

// volumeError classifies err, the failure of a call about what (a disk or
// a VM) in op: by volumeRules, then as every call of the adapter is
// (classifyError); a throttled answer is Transient whatever its code. An
// error of a rule marked inUse matches provider.ErrInUse. The text is
// masked of the adapter's credentials (the in-use match survives the
// masking).
func (p *Provider) volumeError(op, what string, err error) *provider.Error {
	pe := classifyError(p.name, op, err)
	ae, ok := apiError(err)
	if !ok || ae.StatusCode == http.StatusTooManyRequests || slices.Contains(ae.codes(), throttledCode) {
		pe.Err = fmt.Errorf("%s: %w", what, pe.Err)
		return p.seal(pe)
	}
	for _, r := range volumeRules {
		if !slices.Contains(ae.codes(), r.code) || r.text != nil && !r.text.MatchString(ae.Message) ||
			r.target != "" && !strings.EqualFold(ae.Target, r.target) {
			continue
		}
		pe.Kind, pe.Block, pe.BlockFor = r.kind, r.block, 0
		if r.inUse {
			// Masked before it is wrapped, so that the match survives.
			pe.Err = fmt.Errorf("%s: %w: %w", what, provider.ErrInUse, p.secrets().Error(ae))
			return p.seal(pe)
		}
		break
	}
	pe.Err = fmt.Errorf("%s: %w", what, pe.Err)
	return p.seal(pe)
}
