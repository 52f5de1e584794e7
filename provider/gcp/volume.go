package gcp

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"
	"github.com/google/uuid"

	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/gcp/internal/catalog"
)

// Persistent volumes (provider.VolumeManager) are Compute Engine zonal
// persistent disks of type pd-balanced, one per volume, named
// gpuprov--<volume> (provider.VolumeResourceName: never the name of a VM's
// boot disk, which takes its instance's name, gpuprov-<vm>) and labelled
// with the volume's name (provider.LabelVM), the installation
// (provider.LabelInstallation) and provider.LabelVolume. A disk is
// made empty by disks.insert, attached to a running instance by
// instances.attachDisk with its own name as device name, detached by
// instances.detachDisk and deleted by disks.delete; every mutation's zonal
// operation is waited for as Create waits for its insert (wait, bounded by
// OperationTimeout), and its error codes decide the kind. A volume's ID is
// the disk's numeric id, which disks.get and instances.attachDisk take in
// place of a name (the discovery document's patterns for their disk and
// instance parameters), so that a stale id never reaches a newer disk of
// the same name.

const (
	opCreateVolume  = "create volume"
	opObserveVolume = "observe volume"
	opAttachVolume  = "attach volume"
	opDetachVolume  = "detach volume"
	opDeleteVolume  = "delete volume"
)

// volumeDiskType is the type of every volume's disk: Balanced Persistent
// Disk, the SSD-backed type the Google Cloud console makes by default
// ("About Persistent Disk", https://cloud.google.com/compute/docs/disks/persistent-disks),
// the type the adapter's boot disks already use. The machine type of the
// instances a volume will serve is not known when it is made, so it is
// not chosen by machine series: a series that takes only Hyperdisk cannot
// attach it (docs/clouds/gcp.md, Volumes).
const volumeDiskType = "pd-balanced"

// Volume sizes, in GB as Disk.sizeGb counts them (base-2). "Persistent Disk
// volumes can be up to 64 TiB in size" ("About Persistent Disk"). The
// floor is the 10 GB the discovery document gives for a disk made with an
// instance (AttachedDiskInitializeParams.diskSizeGb: "The size must be at
// least 10 GB"); Disk.sizeGb itself says only "greater than 0", and
// Compute Engine refuses a disk under its type's minimum ("Disk size
// cannot be smaller than 4 GB for disk type hyperdisk-balanced", as
// kubernetes-sigs/gcp-compute-persistent-disk-csi-driver#2038 records).
const (
	minVolumeGB = 10
	maxVolumeGB = 64 * 1024
)

// devicePrefix is where a Linux guest sees a disk attached with a device
// name: "google-DEVICE_NAME" in /dev/disk/by-id, made by the guest
// environment's udev rules for Persistent Disk and Hyperdisk, stable across
// reboots ("Use symbolic links to access disks attached to a Linux VM",
// https://cloud.google.com/compute/docs/disks/disk-symlinks).
const devicePrefix = "/dev/disk/by-id/google-"

// diskNameRE is the pattern of a disk's name (Disk.name in the discovery
// document, RFC 1035), the pattern of every resource name.
var diskNameRE = policyNameRE

// VolumeLimits implements provider.VolumeManager: zonal persistent disks
// of 10 to 65,536 GB, attached to a running instance by AttachVolume.
func (p *Provider) VolumeLimits() provider.VolumeLimits {
	return provider.VolumeLimits{Scope: provider.VolumeZonal, MinGB: minVolumeGB, MaxGB: maxVolumeGB}
}

// volumeInstallation is the installation spec's volume belongs to.
func (p *Provider) volumeInstallation(spec *provider.VolumeSpec) string {
	if spec.Installation != "" {
		return spec.Installation
	}
	return p.installation
}

// oursDisk reports whether d is a gpuprov volume of installation. The
// label provider.LabelVolume tells a volume from the disks of a VM, which
// carry the VM's identity labels (provider.LabelVM, LabelInstallation)
// too. Keys that start with "gpuprov" are gpuprov's own
// (provider.ValidateUserLabels).
func oursDisk(d *computepb.Disk, installation string) bool {
	return provider.IsVolumeOf(d.GetLabels(), installation)
}

// volumeRequestID is the disks.insert requestId of token: the token when
// it is a non-zero UUID (the core's are UUIDv5), else a UUIDv5 derived from
// it; none for no token (a fixed id would make Compute Engine ignore the
// create of a volume deleted and made again within the hour).
func volumeRequestID(token string) string {
	if token == "" {
		return ""
	}
	if u, err := uuid.Parse(token); err == nil && u != uuid.Nil {
		return u.String()
	}
	return uuid.NewSHA1(requestNamespace, []byte("volume/"+token)).String()
}

// volumeZone refuses, before any call, a location whose zone is missing
// or is no zone name.
func (p *Provider) volumeZone(op string, loc provider.Location) error {
	if !zoneRE.MatchString(loc.Zone) {
		return p.errorf(provider.InvalidRequest, op,
			"location %s names no zone: persistent disks are zonal (a zone such as us-central1-a)", loc)
	}
	return nil
}

// diskPath is the partial URL an attachDisk names a disk by.
func (p *Provider) diskPath(zone, name string) string {
	return "projects/" + p.cfg.Project + "/zones/" + zone + "/disks/" + name
}

// CreateVolume implements provider.VolumeManager: disks.insert of an empty
// pd-balanced disk named provider.VolumeResourceName(spec.Name) in
// spec.Location.Zone, with the volume's labels and, as requestId,
// spec.IdempotencyToken (a create sent again within the hour is the same
// request: Compute Engine answers it with the first one's operation).
// It waits for the operation, bounded by OperationTimeout, and returns the
// disk as disks.get reads it: creating until it is READY, which the core
// observes.
//
// A size outside VolumeLimits, a name that makes no disk name, or a
// location without a zone is InvalidRequest before any call. A disk of
// that name that exists (409 alreadyExists, or the operation's
// RESOURCE_ALREADY_EXISTS: a create whose answer was lost, sent again
// after the requestId was forgotten) is returned when it is this
// volume of this installation, and is InvalidRequest otherwise (another
// installation's volume, or a disk gpuprov did not make). The disk
// name, gpuprov--<name>, is at most 63 characters (a name of at most 54).
// A zone out of disk capacity (ZONE_RESOURCE_POOL_EXHAUSTED) is Capacity
// blocking the zone; a disk quota (SSD_TOTAL_GB, DISKS_TOTAL_GB) is Quota
// blocking the region; other errors are
// classified as every call's are (errors.go).
func (p *Provider) CreateVolume(ctx context.Context, spec provider.VolumeSpec) (provider.Volume, error) {
	name, zone := provider.VolumeResourceName(spec.Name), spec.Location.Zone
	switch {
	case spec.Name == "" || !diskNameRE.MatchString(name):
		return provider.Volume{}, p.errorf(provider.InvalidRequest, opCreateVolume,
			"volume %q: disk name %q is not 1-63 lowercase letters, digits or -, starting with a letter", spec.Name, name)
	case spec.SizeGB < minVolumeGB || spec.SizeGB > maxVolumeGB:
		return provider.Volume{}, p.errorf(provider.InvalidRequest, opCreateVolume,
			"volume %s: size %d GB is not between %d and %d (persistent disk sizes)", spec.Name, spec.SizeGB, minVolumeGB, maxVolumeGB)
	}
	if err := p.volumeZone(opCreateVolume, spec.Location); err != nil {
		return provider.Volume{}, err
	}
	installation := p.volumeInstallation(&spec)
	req := &computepb.InsertDiskRequest{Project: p.cfg.Project, Zone: zone, DiskResource: &computepb.Disk{
		Name:        proto(name),
		Description: proto("gpuprov volume " + spec.Name),
		SizeGb:      proto(int64(spec.SizeGB)),
		Type:        proto("projects/" + p.cfg.Project + "/zones/" + zone + "/diskTypes/" + volumeDiskType),
		Labels:      spec.VolumeLabels(installation),
	}}
	if id := volumeRequestID(spec.IdempotencyToken); id != "" {
		req.RequestId = proto(id)
	}
	cctx, cancel := p.call(ctx)
	op, err := p.disks.Insert(cctx, req, noRetry)
	cancel()
	if err != nil {
		if isAlreadyExists(err) {
			return p.adoptVolume(ctx, zone, &spec, installation)
		}
		return provider.Volume{}, p.volumeError(opCreateVolume, err)
	}
	oe, werr := p.wait(ctx, op)
	switch {
	case oe != nil && IsCode(oe, "RESOURCE_ALREADY_EXISTS"):
		return p.adoptVolume(ctx, zone, &spec, installation)
	case oe != nil:
		return provider.Volume{}, p.volumeOpError(opCreateVolume, oe)
	case werr != nil && ctx.Err() != nil:
		// The caller gave up; the insert was accepted and may land. A
		// create sent again carries the same requestId.
		return provider.Volume{}, p.errorf(provider.Transient, opCreateVolume, "waiting for %s: %w", op.Name(), werr)
	case werr != nil && !p.stillRunning(ctx, werr):
		return provider.Volume{}, p.volumeError(opCreateVolume, werr)
	case op.Proto().GetHttpErrorStatusCode() >= 300:
		return provider.Volume{}, p.volumeOpError(opCreateVolume, &OperationError{Operation: op.Name(),
			HTTPStatus: int(op.Proto().GetHttpErrorStatusCode()), Messages: []string{op.Proto().GetHttpErrorMessage()}})
	}
	// Done, or still running when the bounded wait ran out: the disk reads
	// CREATING until it is made.
	d, err := p.getDisk(ctx, zone, name)
	switch {
	case isNotFound(err):
		return provider.Volume{}, p.errorf(provider.Transient, opCreateVolume,
			"disk %s in %s: the insert was accepted and the disk is not listed yet", name, zone)
	case err != nil:
		return provider.Volume{}, p.volumeError(opCreateVolume, err)
	case !oursDisk(d, installation) || d.GetLabels()[provider.LabelVM] != spec.Name:
		return provider.Volume{}, p.errorf(provider.InvalidRequest, opCreateVolume,
			"disk %s in %s does not carry the identity of volume %s of installation %s", name, zone, spec.Name, installation)
	}
	p.log.Info("gcp: created volume", "provider", p.name, "volume", spec.Name, "zone", zone, "disk", d.GetId(),
		"size_gb", spec.SizeGB, "status", d.GetStatus())
	return volumeOf(d), nil
}

// adoptVolume returns the disk gpuprov--<spec.Name> in zone when it is
// that volume of installation.
func (p *Provider) adoptVolume(ctx context.Context, zone string, spec *provider.VolumeSpec, installation string) (provider.Volume, error) {
	name := provider.VolumeResourceName(spec.Name)
	d, err := p.getDisk(ctx, zone, name)
	switch {
	case isNotFound(err):
		// Deleted between the conflict and the read: the next create may
		// make it.
		return provider.Volume{}, p.errorf(provider.Transient, opCreateVolume, "disk %s in %s exists and then did not", name, zone)
	case err != nil:
		return provider.Volume{}, p.volumeError(opCreateVolume, err)
	case !oursDisk(d, installation) || d.GetLabels()[provider.LabelVM] != spec.Name:
		return provider.Volume{}, p.errorf(provider.InvalidRequest, opCreateVolume,
			"disk %s in %s exists and is not volume %s of installation %s (another installation's volume, or a disk gpuprov did not make)",
			name, zone, spec.Name, installation)
	}
	p.log.Info("gcp: volume exists; adopted", "provider", p.name, "volume", spec.Name, "zone", zone, "disk", d.GetId())
	return volumeOf(d), nil
}

// ObserveVolume implements provider.VolumeManager: disks.get of
// gpuprov--<name> in loc's zone (never a VM's boot disk, gpuprov-<vm>),
// returned when it is that volume of this installation; nil when there is
// no such disk, or the disk of that name is not this installation's
// volume. A location without a zone is InvalidRequest.
func (p *Provider) ObserveVolume(ctx context.Context, loc provider.Location, name string) (*provider.Volume, error) {
	if err := p.volumeZone(opObserveVolume, loc); err != nil {
		return nil, err
	}
	disk := provider.VolumeResourceName(name)
	if name == "" || !diskNameRE.MatchString(disk) {
		return nil, p.errorf(provider.InvalidRequest, opObserveVolume, "volume %q: disk name %q is not a resource name", name, disk)
	}
	d, err := p.getDisk(ctx, loc.Zone, disk)
	switch {
	case isNotFound(err):
		return nil, nil
	case err != nil:
		return nil, p.volumeError(opObserveVolume, err)
	case !oursDisk(d, p.installation) || d.GetLabels()[provider.LabelVM] != name:
		return nil, nil
	}
	v := volumeOf(d)
	return &v, nil
}

// AttachVolume implements provider.VolumeManager: it reads the disk id and
// the instance instanceID (disks.get, instances.get), and returns at once
// when the disk is attached to that instance already. Otherwise it sends
// instances.attachDisk (READ_WRITE, not auto-deleted, device name the disk's
// name), waits for the operation bounded by OperationTimeout, and reads the
// instance again: the device is returned once the instance lists the disk.
// The device is /dev/disk/by-id/google-<device name>.
//
// A disk attached to another instance is an error matching
// provider.ErrInUse: Transient when every instance holding it is gone or
// STOPPING (being deleted: its end detaches the disk), InvalidRequest
// otherwise; so is an attachDisk refused with resourceInUseByAnotherResource
// or RESOURCE_IN_USE_BY_ANOTHER_RESOURCE that did not attach it here. A
// disk still being made, an attach still running when the wait runs out,
// or one the instance does not list yet is Transient (the next call finds
// it). A disk or instance that is gone is Failed, another installation's
// disk InvalidRequest, a location without a zone InvalidRequest before any
// call.
func (p *Provider) AttachVolume(ctx context.Context, loc provider.Location, id, instanceID string) (string, error) {
	if err := p.volumeZone(opAttachVolume, loc); err != nil {
		return "", err
	}
	zone := loc.Zone
	d, gone, err := p.volumeDisk(ctx, opAttachVolume, zone, id)
	switch {
	case err != nil:
		return "", err
	case gone:
		return "", p.errorf(provider.Failed, opAttachVolume, "disk %s is not in %s", id, zone)
	}
	in, err := p.get(ctx, zone, instanceID)
	switch {
	case isNotFound(err):
		return "", p.errorf(provider.Failed, opAttachVolume, "instance %s is not in %s", instanceID, zone)
	case err != nil:
		return "", p.volumeError(opAttachVolume, err)
	}
	if dev, ok := p.deviceOf(in, zone, d.GetName()); ok {
		return devicePrefix + dev, nil
	}
	if len(d.GetUsers()) > 0 {
		return "", p.volumeInUse(ctx, opAttachVolume, zone, d, nil)
	}
	switch s := d.GetStatus(); s {
	case "READY":
	case "CREATING", "RESTORING":
		return "", p.errorf(provider.Transient, opAttachVolume, "disk %s in %s is %s", d.GetName(), zone, s)
	default:
		return "", p.errorf(provider.Failed, opAttachVolume, "disk %s in %s is %s", d.GetName(), zone, s)
	}
	cctx, cancel := p.call(ctx)
	op, err := p.instances.AttachDisk(cctx, &computepb.AttachDiskInstanceRequest{
		Project: p.cfg.Project, Zone: zone, Instance: in.GetName(),
		AttachedDiskResource: &computepb.AttachedDisk{
			Source:     proto(p.diskPath(zone, d.GetName())),
			DeviceName: proto(d.GetName()),
			Mode:       proto("READ_WRITE"),
			Type:       proto("PERSISTENT"),
			Boot:       proto(false),
			AutoDelete: proto(false),
		},
	}, noRetry)
	cancel()
	if err != nil {
		if hasReason(err, "resourceInUseByAnotherResource") {
			return p.attachRefused(ctx, zone, d, instanceID, err)
		}
		return "", p.volumeError(opAttachVolume, err)
	}
	oe, werr := p.wait(ctx, op)
	switch {
	case oe != nil && IsCode(oe, "RESOURCE_IN_USE_BY_ANOTHER_RESOURCE"):
		return p.attachRefused(ctx, zone, d, instanceID, oe)
	case oe != nil:
		return "", p.volumeOpError(opAttachVolume, oe)
	case werr != nil && ctx.Err() != nil:
		return "", p.errorf(provider.Transient, opAttachVolume, "waiting for %s: %w", op.Name(), werr)
	case werr != nil && p.stillRunning(ctx, werr):
		return "", p.errorf(provider.Transient, opAttachVolume,
			"attaching disk %s to instance %s: operation %s still running", d.GetName(), in.GetName(), op.Name())
	case werr != nil:
		return "", p.volumeError(opAttachVolume, werr)
	}
	if in, err = p.get(ctx, zone, instanceID); err != nil {
		return "", p.volumeError(opAttachVolume, err)
	}
	dev, ok := p.deviceOf(in, zone, d.GetName())
	if !ok {
		return "", p.errorf(provider.Transient, opAttachVolume,
			"disk %s: operation %s is done and instance %s does not list it yet", d.GetName(), op.Name(), in.GetName())
	}
	p.log.Info("gcp: attached volume", "provider", p.name, "volume", d.GetLabels()[provider.LabelVM], "zone", zone,
		"disk", d.GetName(), "instance", in.GetName(), "device", devicePrefix+dev)
	return devicePrefix + dev, nil
}

// attachRefused decides an attach that Compute Engine refused as in use:
// the disk may be attached to instanceID after all (an attach sent twice),
// else it is held elsewhere.
func (p *Provider) attachRefused(ctx context.Context, zone string, d *computepb.Disk, instanceID string, cause error) (string, error) {
	if in, err := p.get(ctx, zone, instanceID); err == nil {
		if dev, ok := p.deviceOf(in, zone, d.GetName()); ok {
			return devicePrefix + dev, nil
		}
	}
	return "", p.reloadInUse(ctx, opAttachVolume, zone, d, cause)
}

// DetachVolume implements provider.VolumeManager: it reads the disk and
// the instance and, when the instance lists the disk, sends
// instances.detachDisk with the device name it is attached under and waits
// for the operation, bounded by OperationTimeout. A disk or instance that
// is gone, or a disk not attached to that instance (to none, or to
// another), is success: it is not attached there, which is what a detach
// asks. A detach still running when the wait runs out is Transient; another
// installation's disk is InvalidRequest, a location without a zone
// InvalidRequest before any call.
func (p *Provider) DetachVolume(ctx context.Context, loc provider.Location, id, instanceID string) error {
	if err := p.volumeZone(opDetachVolume, loc); err != nil {
		return err
	}
	zone := loc.Zone
	d, gone, err := p.volumeDisk(ctx, opDetachVolume, zone, id)
	if err != nil || gone {
		return err
	}
	in, err := p.get(ctx, zone, instanceID)
	switch {
	case isNotFound(err):
		return nil
	case err != nil:
		return p.volumeError(opDetachVolume, err)
	}
	dev, ok := p.deviceOf(in, zone, d.GetName())
	if !ok {
		return nil
	}
	cctx, cancel := p.call(ctx)
	op, err := p.instances.DetachDisk(cctx, &computepb.DetachDiskInstanceRequest{
		Project: p.cfg.Project, Zone: zone, Instance: in.GetName(), DeviceName: dev,
	}, noRetry)
	cancel()
	switch {
	case err != nil && isNotFound(err):
		return nil
	case err != nil:
		return p.volumeError(opDetachVolume, err)
	}
	oe, werr := p.wait(ctx, op)
	switch {
	case oe != nil && IsCode(oe, "RESOURCE_NOT_FOUND"):
		return nil
	case oe != nil:
		return p.volumeOpError(opDetachVolume, oe)
	case werr != nil && ctx.Err() != nil:
		return p.errorf(provider.Transient, opDetachVolume, "waiting for %s: %w", op.Name(), werr)
	case werr != nil && p.stillRunning(ctx, werr):
		return p.errorf(provider.Transient, opDetachVolume,
			"detaching disk %s from instance %s: operation %s still running", d.GetName(), in.GetName(), op.Name())
	case werr != nil:
		return p.volumeError(opDetachVolume, werr)
	}
	p.log.Info("gcp: detached volume", "provider", p.name, "volume", d.GetLabels()[provider.LabelVM], "zone", zone,
		"disk", d.GetName(), "instance", in.GetName())
	return nil
}

// DeleteVolume implements provider.VolumeManager: it reads the disk id
// and, when it is this installation's volume and attached to nothing,
// sends disks.delete and waits for the operation, bounded by
// OperationTimeout; a delete still running when the wait runs out was
// accepted and is success. A disk that is gone (404, or the operation's
// RESOURCE_NOT_FOUND) is success. A disk attached to an instance (its
// users, or a delete refused with resourceInUseByAnotherResource /
// RESOURCE_IN_USE_BY_ANOTHER_RESOURCE) is an error matching
// provider.ErrInUse: Transient when every holder is gone or STOPPING
// (being deleted), InvalidRequest otherwise. Another installation's disk is
// left in place and is InvalidRequest; a location without a zone is
// InvalidRequest before any call.
func (p *Provider) DeleteVolume(ctx context.Context, loc provider.Location, id string) error {
	if err := p.volumeZone(opDeleteVolume, loc); err != nil {
		return err
	}
	zone := loc.Zone
	d, gone, err := p.volumeDisk(ctx, opDeleteVolume, zone, id)
	if err != nil || gone {
		return err
	}
	if len(d.GetUsers()) > 0 {
		return p.volumeInUse(ctx, opDeleteVolume, zone, d, nil)
	}
	cctx, cancel := p.call(ctx)
	op, err := p.disks.Delete(cctx, &computepb.DeleteDiskRequest{Project: p.cfg.Project, Zone: zone, Disk: d.GetName()}, noRetry)
	cancel()
	switch {
	case err != nil && isNotFound(err):
		return nil
	case err != nil && hasReason(err, "resourceInUseByAnotherResource"):
		return p.reloadInUse(ctx, opDeleteVolume, zone, d, err)
	case err != nil:
		return p.volumeError(opDeleteVolume, err)
	}
	oe, werr := p.wait(ctx, op)
	switch {
	case oe != nil && IsCode(oe, "RESOURCE_NOT_FOUND"):
		return nil
	case oe != nil && IsCode(oe, "RESOURCE_IN_USE_BY_ANOTHER_RESOURCE"):
		return p.reloadInUse(ctx, opDeleteVolume, zone, d, oe)
	case oe != nil:
		return p.volumeOpError(opDeleteVolume, oe)
	case werr != nil && ctx.Err() != nil:
		return p.errorf(provider.Transient, opDeleteVolume, "waiting for %s: %w", op.Name(), werr)
	case werr != nil && !p.stillRunning(ctx, werr):
		return p.volumeError(opDeleteVolume, werr)
	}
	p.log.Info("gcp: deleted volume", "provider", p.name, "volume", d.GetLabels()[provider.LabelVM], "zone", zone, "disk", d.GetName())
	return nil
}

// volumeDisk reads the disk id (a numeric id or a name) in zone and
// returns it when it is this installation's volume; gone when there is no
// such disk. Another installation's disk, or an id that is neither, is
// InvalidRequest.
func (p *Provider) volumeDisk(ctx context.Context, op, zone, id string) (d *computepb.Disk, gone bool, err error) {
	if !diskNameRE.MatchString(id) && !diskIDRE.MatchString(id) {
		return nil, false, p.errorf(provider.InvalidRequest, op, "volume id %q is neither a disk id nor a disk name", id)
	}
	d, err = p.getDisk(ctx, zone, id)
	switch {
	case isNotFound(err):
		return nil, true, nil
	case err != nil:
		return nil, false, p.volumeError(op, err)
	case !oursDisk(d, p.installation):
		return nil, false, p.errorf(provider.InvalidRequest, op, "disk %s (%s) in %s is not a volume of installation %s; left alone",
			d.GetName(), id, zone, p.installation)
	}
	return d, false, nil
}

// diskIDRE is a disk's numeric id as disks.get takes it (the disk
// parameter's pattern in the discovery document).
var diskIDRE = regexp.MustCompile(`^[1-9][0-9]{0,19}$`)

// getDisk reads one disk by name or numeric id.
func (p *Provider) getDisk(ctx context.Context, zone, disk string) (*computepb.Disk, error) {
	cctx, cancel := p.call(ctx)
	defer cancel()
	return p.disks.Get(cctx, &computepb.GetDiskRequest{Project: p.cfg.Project, Zone: zone, Disk: disk}, noRetry)
}

// deviceOf returns the device name the disk name in zone is attached to in
// under, if it is.
func (p *Provider) deviceOf(in *computepb.Instance, zone, name string) (string, bool) {
	want := p.diskPath(zone, name)
	for _, ad := range in.GetDisks() {
		src := ad.GetSource()
		if i := strings.Index(src, "projects/"); i >= 0 {
			src = src[i:]
		}
		if src != want {
			continue
		}
		if dev := ad.GetDeviceName(); dev != "" {
			return dev, true
		}
		return name, true
	}
	return "", false
}

// reloadInUse reads the disk again (its users as they are now) and returns
// volumeInUse's error.
func (p *Provider) reloadInUse(ctx context.Context, op, zone string, d *computepb.Disk, cause error) error {
	if now, err := p.getDisk(ctx, zone, d.GetName()); err == nil {
		d = now
	}
	return p.volumeInUse(ctx, op, zone, d, cause)
}

// volumeInUse is the error of disk d held by instances (its users): it
// matches provider.ErrInUse, and is Transient when every holder is gone or
// STOPPING (an instance being deleted stops first; its end detaches the
// disk) and InvalidRequest while one runs, is stopped, or cannot be read.
// cause is the API's refusal, if any.
func (p *Provider) volumeInUse(ctx context.Context, op, zone string, d *computepb.Disk, cause error) *provider.Error {
	var holders []string
	leaving := true
	for _, u := range d.GetUsers() {
		name := lastSegment(u)
		holders = append(holders, name)
		in, err := p.get(ctx, zone, name)
		switch {
		case isNotFound(err):
		case err != nil || in.GetStatus() != "STOPPING":
			leaving = false
		}
	}
	kind := provider.InvalidRequest
	if leaving {
		kind = provider.Transient
	}
	who := strings.Join(holders, ", ")
	if who == "" {
		who = "(none listed any more)"
	}
	inUse := fmt.Errorf("disk %s in %s is %w by instance %s", d.GetName(), zone, provider.ErrInUse, who)
	var pe *provider.Error
	switch oe, ok := cause.(*OperationError); {
	case ok:
		pe = p.classifyOp(op, oe)
	case cause != nil:
		pe = p.classify(op, cause)
	default:
		return &provider.Error{Kind: kind, Provider: p.name, Op: op, Err: inUse}
	}
	// Wrapped after sealing: a masked error does not unwrap, ErrInUse must
	// survive it.
	pe.Kind, pe.Block, pe.RetryAfter = kind, provider.ScopeDefault, 0
	pe.Err = fmt.Errorf("%w: %w", inUse, pe.Err)
	return pe
}

// volumeError classifies a synchronous error of a volume call: as every
// call's (errors.go: reasonKinds, opCodeKinds), except that a stockout
// blocks the zone, where no disk of the volume can be made whatever the
// offer. The codes a volume call meets and where each is recorded; the
// rest are the v1 error catalog's
// (https://cloud.google.com/compute/docs/reference/rest/v1/errors), and
// the resource-availability page
// (https://cloud.google.com/compute/docs/troubleshooting/troubleshooting-resource-availability)
// names disks among what a zone can run out of:
//
//	ZONE_RESOURCE_POOL_EXHAUSTED[_WITH_DETAILS],  Capacity, the zone (disk creates get it: "'(resource
//	  insufficientCapacity                        type:pd-standard)'", cirruslabs/cirrus-ci-docs#131;
//	                                              kubernetes-sigs/gcp-compute-persistent-disk-csi-driver#1837)
//	QUOTA_EXCEEDED, quotaExceeded                 Quota, by metric (quotaScope): SSD_TOTAL_GB and
//	                                              DISKS_TOTAL_GB are regional
//	RESOURCE_IN_USE_BY_ANOTHER_RESOURCE,          the disk is attached ("The disk resource '…' is already
//	  resourceInUseByAnotherResource              being used by '…'", hashicorp/terraform-provider-google#2078,
//	                                              hashicorp/terraform#23698): volumeInUse, ErrInUse
//	RESOURCE_NOT_FOUND, 404                       gone: success for detach and delete
//	RESOURCE_ALREADY_EXISTS, 409 alreadyExists    the name is taken: adoptVolume
func (p *Provider) volumeError(op string, err error) *provider.Error {
	pe := p.classify(op, err)
	if pe.Kind == provider.Capacity {
		pe.Block = provider.ScopeZone
	}
	return pe
}

// volumeOpError is volumeError for a failed operation.
func (p *Provider) volumeOpError(op string, oe *OperationError) *provider.Error {
	pe := p.classifyOp(op, oe)
	if pe.Kind == provider.Capacity {
		pe.Block = provider.ScopeZone
	}
	return pe
}

// volumeOf normalizes a disk: creating while CREATING or RESTORING,
// available when READY and attached to nothing, attached when READY with
// users (AttachedTo is the first user's instance name), deleting while
// DELETING, failed when FAILED, UNAVAILABLE or anything else.
func volumeOf(d *computepb.Disk) provider.Volume {
	zone := lastSegment(d.GetZone())
	v := provider.Volume{
		ID: strconv.FormatUint(d.GetId(), 10), Name: d.GetLabels()[provider.LabelVM],
		Location: provider.Location{Region: catalog.RegionOf(zone), Zone: zone},
		SizeGB:   int(d.GetSizeGb()),
	}
	if users := d.GetUsers(); len(users) > 0 {
		v.AttachedTo = lastSegment(users[0])
	}
	switch d.GetStatus() {
	case "CREATING", "RESTORING":
		v.Status = provider.VolumeCreating
	case "READY":
		v.Status = provider.VolumeAvailable
		if v.AttachedTo != "" {
			v.Status = provider.VolumeAttached
		}
	case "DELETING":
		v.Status = provider.VolumeDeleting
	default:
		v.Status = provider.VolumeFailed
	}
	if t, err := time.Parse(time.RFC3339, d.GetCreationTimestamp()); err == nil {
		v.Created = t
	}
	return v
}

var _ provider.VolumeManager = (*Provider)(nil)
