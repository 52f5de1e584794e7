package aws

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strings"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/org/gpuprov/provider"
)

// Persistent volumes (provider.VolumeManager) are EBS volumes: zonal block
// storage, made by CreateVolume and attached by AttachVolume to a running
// instance of the same Availability Zone. The EC2 API Reference pages the
// calls follow:
//
//	CreateVolume    https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_CreateVolume.html
//	DescribeVolumes https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_DescribeVolumes.html
//	AttachVolume    https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_AttachVolume.html
//	DetachVolume    https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_DetachVolume.html
//	DeleteVolume    https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_DeleteVolume.html
//
// Their error codes, and the kinds errors.go maps them to, are in the
// reference's "Error codes for the Amazon EC2 API"
// (https://docs.aws.amazon.com/AWSEC2/latest/APIReference/errors-overview.html).

// The EBS volumes CreateVolume makes carry provider.LabelVolume ("true").
// The root volumes of gpuprov's instances carry the VM's identity tags too
// (RunInstances tags its volumes like the instance, provider.LabelVM =
// the VM's name), so a persistent volume is found by its name and that
// tag, never by its name alone: a volume named like a VM is not that VM's
// root disk. Its Name tag is provider.VolumeResourceName, gpuprov--<name>,
// never a VM's gpuprov-<vm>.

// EBS volumes as gpuprov makes them: General Purpose SSD gp3 (3,000 IOPS
// and 125 MiB/s included at any size, whatever the size: a dataset or
// checkpoint disk without IOPS to provision), between 1 and 65,536 GiB, the sizes CreateVolume accepts for
// gp3 (its Size parameter: "gp3: 1 - 65,536 GiB"). VolumeSpec.SizeGB is
// sent as GiB.
const (
	volumeType  = types.VolumeTypeGp3
	minVolumeGB = 1
	maxVolumeGB = 65536
)

// volumeDevices are the device names AttachVolume is given, in order: the
// EC2 User Guide's "Device names for volumes on Amazon EC2 instances"
// recommends /dev/sd[f-p] for EBS volumes
// (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/device_naming.html).
const volumeDevices = "fghijklmnop"

// nvmeByID is the prefix of the stable path of an EBS volume on an
// instance built on the Nitro System, where EBS volumes are NVMe devices
// whose model is "Amazon Elastic Block Store" and whose serial number is
// the volume id without its hyphen ("NVMe EBS volumes have the EBS volume
// ID set as the serial number in the device identification", Amazon EBS
// User Guide, "Map Amazon EBS volumes to NVMe device names",
// https://docs.aws.amazon.com/ebs/latest/userguide/identify-nvme-ebs-device.html);
// udev links it as /dev/disk/by-id/nvme-<model>_<serial>, spaces made
// underscores. The /dev/nvmeXn1 name itself follows the order devices
// answer in, and the /dev/sdX name given to AttachVolume is not created
// on such instances.
const nvmeByID = "/dev/disk/by-id/nvme-Amazon_Elastic_Block_Store_"

// VolumeLimits implements provider.VolumeManager: zonal gp3 volumes of 1 to
// 65,536 GiB, attached to a running instance by AttachVolume.
func (p *Provider) VolumeLimits() provider.VolumeLimits {
	return provider.VolumeLimits{Scope: provider.VolumeZonal, MinGB: minVolumeGB, MaxGB: maxVolumeGB}
}

// volumeInstallation is the installation spec's volume is tagged with.
func (p *Provider) volumeInstallation(spec *provider.VolumeSpec) string {
	return cmp.Or(spec.Installation, p.installation)
}

// volumeTags are the tags of spec's volume: its Name, the caller's labels,
// gpuprov's identity (the journal's name under provider.LabelVM, the
// installation) and provider.LabelVolume.
func (p *Provider) volumeTags(spec *provider.VolumeSpec) []types.Tag {
	tags := []types.Tag{{Key: awssdk.String("Name"), Value: awssdk.String(provider.VolumeResourceName(spec.Name))}}
	for _, k := range slices.Sorted(maps.Keys(spec.UserLabels)) {
		tags = append(tags, types.Tag{Key: awssdk.String(k), Value: awssdk.String(spec.UserLabels[k])})
	}
	return append(tags,
		types.Tag{Key: awssdk.String(provider.LabelVM), Value: awssdk.String(spec.Name)},
		types.Tag{Key: awssdk.String(provider.LabelInstallation), Value: awssdk.String(p.volumeInstallation(spec))},
		types.Tag{Key: awssdk.String(provider.LabelVolume), Value: awssdk.String("true")})
}

// volumeToken is CreateVolume's ClientToken for token: token itself when it
// fits EC2's 64 ASCII characters, else its SHA-256 in hex; "" lets the SDK
// send a random one (the lookup by name before the create is then the only
// guard against a second volume).
func volumeToken(token string) string {
	if token == "" || len(token) <= 64 && isASCII(token) {
		return token
	}
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// CreateVolume implements provider.VolumeManager: an empty gp3 volume of
// spec.SizeGB GiB in spec.Location's zone (a zone id such as use1-az4, or a
// zone name), tagged with volumeTags. A size outside 1 to 65,536 GiB, a
// location without a region or a zone, or a volume without a name is
// InvalidRequest before any call.
//
// It is idempotent twice over. First DescribeVolumes lists the volumes of
// that name (tag:gpuprov, tag:gpuprov-volume) in the region: one of this
// installation in the zone is returned as it is, without a create (a
// create whose answer was lost, or whose token EC2 has forgotten); one of
// another installation in the zone is InvalidRequest, since a name is one
// volume of a zone for gpuprov although EC2 would make a second. Then
// CreateVolume carries spec.IdempotencyToken as ClientToken (see
// volumeToken), so a create sent again before the first is listed returns
// the first's volume. A zone out of EBS capacity
// (InsufficientVolumeCapacity) is Capacity blocking the zone; the
// account's EBS storage limit (VolumeLimitExceeded) is Quota.
func (p *Provider) CreateVolume(ctx context.Context, spec provider.VolumeSpec) (provider.Volume, error) {
	const op = "create volume"
	loc := spec.Location
	switch {
	case spec.Name == "":
		return provider.Volume{}, provider.Errorf(provider.InvalidRequest, p.name, op, "the volume has no name")
	case spec.SizeGB < minVolumeGB || spec.SizeGB > maxVolumeGB:
		return provider.Volume{}, provider.Errorf(provider.InvalidRequest, p.name, op,
			"volume %s: size %d GiB is not between %d and %d (EBS %s)", spec.Name, spec.SizeGB, minVolumeGB, maxVolumeGB, volumeType)
	case loc.Region == "" || loc.Zone == "":
		return provider.Volume{}, provider.Errorf(provider.InvalidRequest, p.name, op,
			"volume %s: EBS volumes are zonal and location %q names no region and zone", spec.Name, loc)
	}
	inst := p.volumeInstallation(&spec)
	found, err := p.findVolumes(ctx, op, loc, spec.Name, "")
	if err != nil {
		return provider.Volume{}, err
	}
	found = slices.DeleteFunc(found, func(v types.Volume) bool { return v.State == types.VolumeStateDeleting })
	for _, v := range found {
		if owner := tagValue(v.Tags, provider.LabelInstallation); owner != inst {
			return provider.Volume{}, provider.Errorf(provider.InvalidRequest, p.name, op,
				"volume %s in %s: the name is installation %q's volume %s; use another name", spec.Name, loc, owner, awssdk.ToString(v.VolumeId))
		}
	}
	if len(found) > 0 {
		v, err := p.volumeOf(ctx, op, loc.Region, found[0])
		if err == nil {
			p.log.Info("aws: volume exists", "provider", p.name, "volume", spec.Name, "id", v.ID, "zone", v.Location.Zone)
		}
		return v, err
	}
	zoneName, err := p.zoneName(ctx, op, loc.Region, loc.Zone)
	if err != nil {
		return provider.Volume{}, err
	}
	in := &ec2.CreateVolumeInput{
		AvailabilityZone:  awssdk.String(zoneName),
		Size:              awssdk.Int32(int32(spec.SizeGB)),
		VolumeType:        volumeType,
		TagSpecifications: []types.TagSpecification{{ResourceType: types.ResourceTypeVolume, Tags: p.volumeTags(&spec)}},
	}
	if t := volumeToken(spec.IdempotencyToken); t != "" {
		in.ClientToken = awssdk.String(t)
	}
	var out *ec2.CreateVolumeOutput
	err = p.call(ctx, op, func(ctx context.Context) (e error) {
		out, e = p.ec2For(loc.Region).CreateVolume(ctx, in)
		return e
	})
	if err != nil {
		return provider.Volume{}, err
	}
	if awssdk.ToString(out.VolumeId) == "" {
		return provider.Volume{}, provider.Errorf(provider.Transient, p.name, op, "volume %s: CreateVolume answered without a volume id", spec.Name)
	}
	created := types.Volume{VolumeId: out.VolumeId, AvailabilityZone: out.AvailabilityZone, AvailabilityZoneId: out.AvailabilityZoneId,
		Size: out.Size, State: out.State, CreateTime: out.CreateTime, Attachments: out.Attachments, Tags: out.Tags}
	if tagValue(created.Tags, provider.LabelVM) == "" {
		created.Tags = in.TagSpecifications[0].Tags // an answer that does not echo the tags
	}
	if created.AvailabilityZone == nil && created.AvailabilityZoneId == nil {
		created.AvailabilityZone = awssdk.String(zoneName)
	}
	v, err := p.volumeOf(ctx, op, loc.Region, created)
	if err != nil {
		return provider.Volume{}, err
	}
	p.log.Info("aws: created volume", "provider", p.name, "volume", spec.Name, "id", v.ID, "region", loc.Region,
		"zone", v.Location.Zone, "size_gib", spec.SizeGB, "type", string(volumeType))
	return v, nil
}

// ObserveVolume implements provider.VolumeManager: the volume of this
// installation named name in loc (its zone too when loc names one), found
// by DescribeVolumes with tag:gpuprov, tag:gpuprov-installation and
// tag:gpuprov-volume, or nil. A volume EC2 lists as deleted is not
// returned. When several carry the name (made outside gpuprov), the oldest
// is.
func (p *Provider) ObserveVolume(ctx context.Context, loc provider.Location, name string) (*provider.Volume, error) {
	const op = "observe volume"
	if loc.Region == "" {
		return nil, provider.Errorf(provider.InvalidRequest, p.name, op, "volume %s: location %q names no region", name, loc)
	}
	found, err := p.findVolumes(ctx, op, loc, name, p.installation)
	if err != nil || len(found) == 0 {
		return nil, err
	}
	v, err := p.volumeOf(ctx, op, loc.Region, found[0])
	if err != nil {
		return nil, err
	}
	return &v, nil
}

// findVolumes lists the gpuprov volumes named name in loc's region (of
// installation inst, or of any when inst is ""), the filter's answer
// checked again here, those EC2 lists as deleted left out, and keeps those
// in loc's zone when loc names one: the oldest first.
func (p *Provider) findVolumes(ctx context.Context, op string, loc provider.Location, name, inst string) ([]types.Volume, error) {
	filters := []types.Filter{filter("tag:"+provider.LabelVM, name), filter("tag:"+provider.LabelVolume, "true")}
	if inst != "" {
		filters = append(filters, filter("tag:"+provider.LabelInstallation, inst))
	}
	var all []types.Volume
	err := p.call(ctx, op, func(ctx context.Context) error {
		all = nil // a page that failed is listed again whole
		pg := ec2.NewDescribeVolumesPaginator(p.ec2For(loc.Region), &ec2.DescribeVolumesInput{Filters: filters})
		for pg.HasMorePages() {
			out, err := pg.NextPage(ctx)
			if err != nil {
				return err
			}
			all = append(all, out.Volumes...)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var out []types.Volume
	for _, v := range all {
		if tagValue(v.Tags, provider.LabelVM) != name || tagValue(v.Tags, provider.LabelVolume) != "true" || v.State == types.VolumeStateDeleted ||
			inst != "" && tagValue(v.Tags, provider.LabelInstallation) != inst {
			continue
		}
		if loc.Zone != "" {
			zone, err := p.volumeZone(ctx, op, loc.Region, v)
			if err != nil {
				return nil, err
			}
			if zone != loc.Zone && awssdk.ToString(v.AvailabilityZone) != loc.Zone {
				continue
			}
		}
		out = append(out, v)
	}
	slices.SortFunc(out, func(a, b types.Volume) int {
		return cmp.Or(awssdk.ToTime(a.CreateTime).Compare(awssdk.ToTime(b.CreateTime)),
			cmp.Compare(awssdk.ToString(a.VolumeId), awssdk.ToString(b.VolumeId)))
	})
	return out, nil
}

// zoneName returns the name (us-east-1a) of zone in region, zone given as
// a zone id (use1-az4) or a name: CreateVolume is sent the name, which
// every EC2 endpoint knows (AvailabilityZoneId is newer). An unknown zone
// is InvalidRequest.
func (p *Provider) zoneName(ctx context.Context, op, region, zone string) (string, error) {
	ids, err := p.zoneIDsOf(ctx, op, region)
	if err != nil {
		return "", err
	}
	if _, ok := ids[zone]; ok {
		return zone, nil
	}
	for name, id := range ids {
		if id == zone {
			return name, nil
		}
	}
	return "", provider.Errorf(provider.InvalidRequest, p.name, op, "zone %q is not one of %s's zones", zone, region)
}

// volumeZone returns v's zone id, read from the volume or mapped from its
// zone name (an endpoint that names the zone only, as moto does), or its
// zone name when the region does not list it.
func (p *Provider) volumeZone(ctx context.Context, op, region string, v types.Volume) (string, error) {
	if id := awssdk.ToString(v.AvailabilityZoneId); id != "" {
		return id, nil
	}
	name := awssdk.ToString(v.AvailabilityZone)
	if name == "" {
		return "", nil
	}
	ids, err := p.zoneIDsOf(ctx, op, region)
	if err != nil {
		return "", err
	}
	return cmp.Or(ids[name], name), nil
}

// volumeOf normalizes an EBS volume of region.
func (p *Provider) volumeOf(ctx context.Context, op, region string, v types.Volume) (provider.Volume, error) {
	zone, err := p.volumeZone(ctx, op, region, v)
	if err != nil {
		return provider.Volume{}, err
	}
	out := provider.Volume{
		ID: awssdk.ToString(v.VolumeId), Name: tagValue(v.Tags, provider.LabelVM), Location: provider.Location{Region: region, Zone: zone},
		SizeGB: int(awssdk.ToInt32(v.Size)), Status: volumeStatus(v.State), Created: awssdk.ToTime(v.CreateTime),
	}
	if a := attachment(v, ""); a != nil {
		out.AttachedTo = awssdk.ToString(a.InstanceId)
	}
	return out, nil
}

// volumeStatus maps an EBS volume state to the normalized one.
func volumeStatus(s types.VolumeState) provider.VolumeStatus {
	switch s {
	case types.VolumeStateCreating:
		return provider.VolumeCreating
	case types.VolumeStateAvailable:
		return provider.VolumeAvailable
	case types.VolumeStateInUse:
		return provider.VolumeAttached
	case types.VolumeStateDeleting, types.VolumeStateDeleted:
		return provider.VolumeDeleting
	}
	return provider.VolumeFailed // error, or a state this adapter does not know
}

// attachment returns v's live attachment (attaching, attached, busy or
// detaching) to instanceID, or to any instance when instanceID is "", or
// nil.
func attachment(v types.Volume, instanceID string) *types.VolumeAttachment {
	for i := range v.Attachments {
		a := &v.Attachments[i]
		if a.State != types.VolumeAttachmentStateDetached && (instanceID == "" || awssdk.ToString(a.InstanceId) == instanceID) {
			return a
		}
	}
	return nil
}

// describeVolume returns volume id of region (DescribeVolumes by id), or
// nil when EC2 answers InvalidVolume.NotFound or lists it as deleted.
func (p *Provider) describeVolume(ctx context.Context, op, region, id string) (*types.Volume, error) {
	var out *ec2.DescribeVolumesOutput
	err := p.call(ctx, op, func(ctx context.Context) (e error) {
		out, e = p.ec2For(region).DescribeVolumes(ctx, &ec2.DescribeVolumesInput{VolumeIds: []string{id}})
		return e
	})
	if IsCode(err, "InvalidVolume.NotFound") {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	for i := range out.Volumes {
		if v := &out.Volumes[i]; awssdk.ToString(v.VolumeId) == id && v.State != types.VolumeStateDeleted {
			return v, nil
		}
	}
	return nil, nil
}

// describeInstance returns instance id of region (DescribeInstances by
// id).
func (p *Provider) describeInstance(ctx context.Context, op, region, id string) (*types.Instance, error) {
	ins, err := p.describe(ctx, op, region, &ec2.DescribeInstancesInput{InstanceIds: []string{id}})
	if err != nil {
		return nil, err
	}
	for i := range ins {
		if awssdk.ToString(ins[i].InstanceId) == id {
			return &ins[i], nil
		}
	}
	return nil, provider.Errorf(provider.Failed, p.name, op, "instance %s is not listed in %s", id, region)
}

// AttachVolume implements provider.VolumeManager: it attaches volume id to
// the running instance instanceID and waits, polling DescribeVolumes every
// PollInterval on the provider's clock until ctx ends, for EC2 to say the
// attachment is attached. The device name AttachVolume is given is the
// first of /dev/sd[f-p] that the instance's block device mappings
// (DescribeInstances) do not use; the path returned is the one the machine
// sees: /dev/disk/by-id/nvme-Amazon_Elastic_Block_Store_vol<id without its
// hyphen> (see nvmeByID), or, on the few GPU types not built on the Nitro
// System (p2, p3 but p3dn, g3), /dev/xvd<letter> of that device name.
//
// A volume attached, or being attached, to instanceID already is not
// attached again: its device is returned once attached. A volume attached
// to another instance is an error matching provider.ErrInUse:
// InvalidRequest while that instance lives, Transient while the volume is
// being detached from it or the instance is shutting down or terminated.
// A volume still creating is Transient; one that is gone is
// InvalidRequest. EC2's errors are classified as errors.go says (a volume
// and instance in different zones, InvalidVolume.ZoneMismatch, is
// InvalidRequest; the instance's attachment limit,
// AttachmentLimitExceeded, is Quota blocking the offer).
func (p *Provider) AttachVolume(ctx context.Context, loc provider.Location, id, instanceID string) (string, error) {
	const op = "attach volume"
	if id == "" || instanceID == "" || loc.Region == "" {
		return "", provider.Errorf(provider.InvalidRequest, p.name, op, "attach volume %q to instance %q in %q: a volume id, an instance id and a region are needed", id, instanceID, loc)
	}
	v, err := p.describeVolume(ctx, op, loc.Region, id)
	if err != nil {
		return "", err
	}
	if v == nil {
		return "", provider.Errorf(provider.InvalidRequest, p.name, op, "volume %s does not exist in %s", id, loc.Region)
	}
	in, err := p.describeInstance(ctx, op, loc.Region, instanceID)
	if err != nil {
		return "", err
	}
	if a := attachment(*v, instanceID); a == nil {
		if err := p.inUse(ctx, op, loc.Region, *v, nil); err != nil {
			return "", err
		}
		if v.State == types.VolumeStateCreating {
			return "", provider.Errorf(provider.Transient, p.name, op, "volume %s is still being created", id)
		}
		if err := p.attach(ctx, loc.Region, id, in); err != nil {
			return "", err
		}
	} else if a.State == types.VolumeAttachmentStateDetaching {
		return "", &provider.Error{Kind: provider.Transient, Op: op, Provider: p.name,
			Err: fmt.Errorf("volume %s is being detached from %s: %w", id, instanceID, provider.ErrInUse)}
	}
	a, err := p.waitAttachment(ctx, op, loc.Region, id, instanceID, true)
	if err != nil {
		return "", err
	}
	dev := devicePath(id, string(in.InstanceType), awssdk.ToString(a.Device))
	p.log.Info("aws: volume attached", "provider", p.name, "id", id, "instance", instanceID, "device", dev)
	return dev, nil
}

// attach sends AttachVolume of volume id to instance in with the first
// free recommended device name. A VolumeInUse answer (another attach won
// the race) is read again: the volume attached to in is not an error, to
// another instance it is (see inUse).
func (p *Provider) attach(ctx context.Context, region, id string, in *types.Instance) error {
	const op = "attach volume"
	instanceID := awssdk.ToString(in.InstanceId)
	dev, ok := freeDevice(in.BlockDeviceMappings)
	if !ok {
		return provider.Errorf(provider.InvalidRequest, p.name, op, "instance %s uses every device name /dev/sd[f-p]; volume %s has none left", instanceID, id)
	}
	err := p.call(ctx, op, func(ctx context.Context) error {
		_, e := p.ec2For(region).AttachVolume(ctx, &ec2.AttachVolumeInput{VolumeId: awssdk.String(id),
			InstanceId: awssdk.String(instanceID), Device: awssdk.String(dev)})
		return e
	})
	if !IsCode(err, "VolumeInUse") {
		return err
	}
	v, derr := p.describeVolume(ctx, op, region, id)
	switch {
	case derr != nil:
		return derr
	case v == nil:
		return provider.Errorf(provider.InvalidRequest, p.name, op, "volume %s does not exist in %s", id, region)
	case attachment(*v, instanceID) != nil:
		return nil
	}
	if ierr := p.inUse(ctx, op, region, *v, err); ierr != nil {
		return ierr
	}
	return &provider.Error{Kind: provider.Transient, Op: op, Provider: p.name,
		Err: fmt.Errorf("volume %s: %w: %w", id, provider.ErrInUse, apiCause(err))} // listed free again: try again
}

// inUse returns the error of volume v attached to an instance (nil when it
// is not): it matches provider.ErrInUse and wraps cause, EC2's answer if
// any; it is Transient when the volume is being detached, or its instance
// is shutting down, terminated or gone (EC2 detaches a volume from an
// instance that terminates), else InvalidRequest.
func (p *Provider) inUse(ctx context.Context, op, region string, v types.Volume, cause error) error {
	a := attachment(v, "")
	if a == nil {
		return nil
	}
	id, holder := awssdk.ToString(v.VolumeId), awssdk.ToString(a.InstanceId)
	wrap := func(kind provider.ErrorKind, why string) error {
		err := fmt.Errorf("volume %s is attached to instance %s (%s): %w", id, holder, why, provider.ErrInUse)
		if cause != nil {
			err = fmt.Errorf("%w: %w", err, apiCause(cause))
		}
		return &provider.Error{Kind: kind, Op: op, Provider: p.name, Err: err}
	}
	if a.State == types.VolumeAttachmentStateDetaching {
		return wrap(provider.Transient, "detaching")
	}
	ins, err := p.describe(ctx, op, region, &ec2.DescribeInstancesInput{InstanceIds: []string{holder}})
	if IsCode(err, "InvalidInstanceID.NotFound") {
		return wrap(provider.Transient, "the instance is gone")
	}
	if err != nil {
		return err
	}
	for _, in := range ins {
		if awssdk.ToString(in.InstanceId) != holder || in.State == nil {
			continue
		}
		switch st := in.State.Name; st {
		case types.InstanceStateNameShuttingDown, types.InstanceStateNameTerminated:
			return wrap(provider.Transient, "the instance is "+string(st))
		default:
			return wrap(provider.InvalidRequest, "the instance is "+string(st))
		}
	}
	return wrap(provider.Transient, "the instance is not listed")
}

// waitAttachment polls volume id until its attachment to instanceID is
// attached (attached true) or gone (false), every PollInterval on the
// provider's clock, until ctx ends. It returns the attachment it waited
// for (nil when waiting for it to go).
func (p *Provider) waitAttachment(ctx context.Context, op, region, id, instanceID string, attached bool) (*types.VolumeAttachment, error) {
	for {
		v, err := p.describeVolume(ctx, op, region, id)
		if err != nil {
			return nil, err
		}
		var a *types.VolumeAttachment
		if v != nil {
			a = attachment(*v, instanceID)
		}
		switch {
		case attached && v == nil:
			return nil, provider.Errorf(provider.InvalidRequest, p.name, op, "volume %s went while being attached to %s", id, instanceID)
		case attached && a == nil:
			return nil, provider.Errorf(provider.Failed, p.name, op, "volume %s is no longer being attached to %s", id, instanceID)
		case attached && (a.State == types.VolumeAttachmentStateAttached || a.State == types.VolumeAttachmentStateBusy):
			return a, nil
		case attached && a.State == types.VolumeAttachmentStateDetaching:
			return nil, &provider.Error{Kind: provider.Transient, Op: op, Provider: p.name,
				Err: fmt.Errorf("volume %s is being detached from %s: %w", id, instanceID, provider.ErrInUse)}
		case !attached && a == nil:
			return nil, nil
		}
		state := "attaching"
		if a != nil {
			state = string(a.State)
		}
		if err := p.clock.Sleep(ctx, p.Capabilities().PollInterval); err != nil {
			return nil, &provider.Error{Kind: provider.Transient, Op: op, Provider: p.name,
				Err: fmt.Errorf("volume %s still %s on %s: %w", id, state, instanceID, err)}
		}
	}
}

// freeDevice returns the first device name of volumeDevices that none of
// mappings uses (as /dev/sdX, /dev/xvdX, sdX or xvdX, which EC2 treats as
// one device letter).
func freeDevice(mappings []types.InstanceBlockDeviceMapping) (string, bool) {
	used := map[byte]bool{}
	for _, m := range mappings {
		if l := deviceLetter(awssdk.ToString(m.DeviceName)); l != 0 {
			used[l] = true
		}
	}
	for i := range len(volumeDevices) {
		if l := volumeDevices[i]; !used[l] {
			return "/dev/sd" + string(l), true
		}
	}
	return "", false
}

// deviceLetter returns the drive letter of a device name (/dev/sdf,
// /dev/xvdf1, sdf: 'f'), or 0.
func deviceLetter(name string) byte {
	name = strings.TrimPrefix(name, "/dev/")
	for _, p := range []string{"xvd", "sd", "hd"} {
		if rest, ok := strings.CutPrefix(name, p); ok && rest != "" && rest[0] >= 'a' && rest[0] <= 'z' {
			return rest[0]
		}
	}
	return 0
}

// devicePath is the path the machine sees volume id at, attached as
// device on an instance of instanceType (see AttachVolume).
func devicePath(id, instanceType, device string) string {
	if xenGPU(instanceType) {
		if l := deviceLetter(device); l != 0 {
			return "/dev/xvd" + string(l)
		}
	}
	return nvmeByID + strings.ReplaceAll(id, "-", "")
}

// xenGPU reports whether instanceType is a GPU type on the Xen hypervisor,
// where EBS volumes are not NVMe devices: the families the EC2 User
// Guide's "Instances built on the AWS Nitro System" does not list (P2, P3
// but P3dn, G2, G3; https://docs.aws.amazon.com/ec2/latest/instancetypes/ec2-nitro-instances.html).
func xenGPU(instanceType string) bool {
	family, _, _ := strings.Cut(instanceType, ".")
	switch family {
	case "p2", "p3", "g2", "g3", "g3s":
		return true
	}
	return false
}

// DetachVolume implements provider.VolumeManager: DetachVolume of volume id
// from instanceID, then a wait (polling as AttachVolume does, until ctx
// ends) until EC2 no longer lists the attachment. A volume that is gone,
// or not attached to instanceID (detached already, or attached to another
// instance), is success with no DetachVolume sent: it is not attached to
// instanceID, which is what a detach asks; so are InvalidVolume.NotFound
// and InvalidAttachment.NotFound answers. A volume being detached from
// instanceID already is only waited for. A file system still mounted on
// the machine keeps the attachment busy: the wait then lasts until ctx
// ends (nothing is forced).
func (p *Provider) DetachVolume(ctx context.Context, loc provider.Location, id, instanceID string) error {
	const op = "detach volume"
	if id == "" || instanceID == "" || loc.Region == "" {
		return provider.Errorf(provider.InvalidRequest, p.name, op, "detach volume %q from instance %q in %q: a volume id, an instance id and a region are needed", id, instanceID, loc)
	}
	v, err := p.describeVolume(ctx, op, loc.Region, id)
	if err != nil || v == nil {
		return err
	}
	a := attachment(*v, instanceID)
	if a == nil {
		return nil
	}
	if a.State != types.VolumeAttachmentStateDetaching {
		err = p.call(ctx, op, func(ctx context.Context) error {
			_, e := p.ec2For(loc.Region).DetachVolume(ctx, &ec2.DetachVolumeInput{VolumeId: awssdk.String(id), InstanceId: awssdk.String(instanceID)})
			return e
		})
		if IsCode(err, "InvalidVolume.NotFound", "InvalidAttachment.NotFound") {
			return nil
		}
		if err != nil {
			return err
		}
	}
	if _, err := p.waitAttachment(ctx, op, loc.Region, id, instanceID, false); err != nil {
		return err
	}
	p.log.Info("aws: volume detached", "provider", p.name, "id", id, "instance", instanceID)
	return nil
}

// DeleteVolume implements provider.VolumeManager: DeleteVolume of volume id
// (not waited for: EC2 lists it deleting, then deleted). A volume that is
// gone (InvalidVolume.NotFound) is success. One attached to an instance
// (VolumeInUse) is an error matching provider.ErrInUse: InvalidRequest
// while that instance lives, Transient while it is being detached or its
// instance is shutting down or terminated (see inUse). A volume still
// creating (IncorrectState) is Transient.
func (p *Provider) DeleteVolume(ctx context.Context, loc provider.Location, id string) error {
	const op = "delete volume"
	if id == "" || loc.Region == "" {
		return provider.Errorf(provider.InvalidRequest, p.name, op, "delete volume %q in %q: a volume id and a region are needed", id, loc)
	}
	err := p.call(ctx, op, func(ctx context.Context) error {
		_, e := p.ec2For(loc.Region).DeleteVolume(ctx, &ec2.DeleteVolumeInput{VolumeId: awssdk.String(id)})
		return e
	})
	switch {
	case err == nil:
		p.log.Info("aws: volume deleted", "provider", p.name, "id", id, "region", loc.Region)
		return nil
	case IsCode(err, "InvalidVolume.NotFound"):
		return nil
	case !IsCode(err, "VolumeInUse"):
		return err
	}
	v, derr := p.describeVolume(ctx, op, loc.Region, id)
	if derr != nil {
		return derr
	}
	if v == nil {
		return nil // gone since EC2 answered
	}
	if ierr := p.inUse(ctx, op, loc.Region, *v, err); ierr != nil {
		return ierr
	}
	// Detached since EC2 answered: the next try deletes it.
	return &provider.Error{Kind: provider.Transient, Op: op, Provider: p.name,
		Err: fmt.Errorf("volume %s: %w: %w", id, provider.ErrInUse, apiCause(err))}
}

var _ provider.VolumeManager = (*Provider)(nil)
