package aws

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/org/gpuprov/provider"
)

// liveStates are the instance states Observe and List return.
var liveStates = []string{"pending", "running", "shutting-down", "stopping", "stopped"}

// clientToken returns the RunInstances idempotency token for spec: its
// IdempotencyToken when it fits EC2's 64 ASCII characters, else a
// SHA-256 of it (or of installation, VM and attempt when it is empty).
func clientToken(spec *provider.InstanceSpec) string {
	t := spec.IdempotencyToken
	if t != "" && len(t) <= 64 && isASCII(t) {
		return t
	}
	if t == "" {
		t = fmt.Sprintf("%s/%s/%d", spec.Installation, spec.VM, spec.Attempt)
	}
	sum := sha256.Sum256([]byte(t))
	return hex.EncodeToString(sum[:]) // 64 characters
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// Create sends one RunInstances for the offer: one instance in the
// prepared subnet (with a public IP), security group and key pair, tagged
// with the VM identity on the instance and its volumes, carrying the
// cloud-init user-data (host key, authorized keys) and the idempotency
// token, terminating itself on shutdown, on the spot market when the offer
// is spot, in spec.PlacementGroup when it names one (Placement.GroupName),
// into the offer's capacity reservation when it has one (an error saying
// the reservation cannot take it is Unavailable, see reservationError),
// and outside every open reservation for a request that forbids them.
// A replay with the same token returns the same instance. A security group
// that is gone (InvalidGroup.NotFound) is a Transient error matching
// provider.ErrSharedGone (see groupGone).
func (p *Provider) Create(ctx context.Context, offer *provider.Offer, prep json.RawMessage, spec *provider.InstanceSpec) (string, error) {
	var d offerDetail
	if err := json.Unmarshal(offer.Detail, &d); err != nil || d.InstanceType == "" {
		return "", provider.Errorf(provider.InvalidRequest, p.name, "create", "offer has no AWS instance type in its detail (%s)", offer.Detail)
	}
	var pr prepared
	if err := json.Unmarshal(prep, &pr); err != nil || pr.Subnet == "" || pr.SecurityGroup == "" || pr.AMI == "" {
		return "", provider.Errorf(provider.InvalidRequest, p.name, "create", "prepared data lacks subnet, security group or image (%s)", prep)
	}
	region := offer.Location.Region
	in := &ec2.RunInstancesInput{
		ClientToken:  awssdk.String(clientToken(spec)),
		ImageId:      awssdk.String(pr.AMI),
		InstanceType: types.InstanceType(d.InstanceType),
		MinCount:     awssdk.Int32(1),
		MaxCount:     awssdk.Int32(1),
		NetworkInterfaces: []types.InstanceNetworkInterfaceSpecification{{
			DeviceIndex: awssdk.Int32(0), SubnetId: awssdk.String(pr.Subnet), Groups: []string{pr.SecurityGroup},
			AssociatePublicIpAddress: awssdk.Bool(true), DeleteOnTermination: awssdk.Bool(true),
		}},
		TagSpecifications: []types.TagSpecification{
			{ResourceType: types.ResourceTypeInstance, Tags: p.tags(spec)},
			{ResourceType: types.ResourceTypeVolume, Tags: p.tags(spec)},
		},
		UserData:                          awssdk.String(base64.StdEncoding.EncodeToString([]byte(provider.CloudInit(spec)))),
		InstanceInitiatedShutdownBehavior: types.ShutdownBehaviorTerminate,
		MetadataOptions:                   &types.InstanceMetadataOptionsRequest{HttpTokens: types.HttpTokensStateRequired},
	}
	if pr.KeyName != "" {
		in.KeyName = awssdk.String(pr.KeyName)
	}
	if offer.DiskGB > 0 && pr.RootDevice != "" {
		in.BlockDeviceMappings = []types.BlockDeviceMapping{{DeviceName: awssdk.String(pr.RootDevice),
			Ebs: &types.EbsBlockDevice{VolumeSize: awssdk.Int32(int32(offer.DiskGB)), VolumeType: types.VolumeTypeGp3,
				DeleteOnTermination: awssdk.Bool(true)}}}
	}
	if spec.PlacementGroup != "" {
		// The subnet already pins the zone; a cluster placement group
		// lives in one zone, which the core keeps every node in.
		in.Placement = &types.Placement{GroupName: awssdk.String(spec.PlacementGroup)}
	}
	if d.Spot {
		in.InstanceMarketOptions = &types.InstanceMarketOptionsRequest{MarketType: types.MarketTypeSpot,
			SpotOptions: &types.SpotMarketOptions{SpotInstanceType: types.SpotInstanceTypeOneTime,
				InstanceInterruptionBehavior: types.InstanceInterruptionBehaviorTerminate}}
	}
	switch {
	case d.Reservation != "":
		// Targeting by id works for open and targeted reservations alike
		// (EC2 User Guide, "Launch instances into an existing Capacity
		// Reservation"); a Capacity Block takes the capacity-block market
		// type besides ("Launch instances using Capacity Blocks").
		in.CapacityReservationSpecification = &types.CapacityReservationSpecification{
			CapacityReservationTarget: &types.CapacityReservationTarget{CapacityReservationId: awssdk.String(d.Reservation)}}
		if d.CapacityBlock {
			in.InstanceMarketOptions = &types.InstanceMarketOptionsRequest{MarketType: types.MarketTypeCapacityBlock}
		}
	case d.NoReservation && !d.Spot:
		// Without it EC2 runs a matching on-demand launch in an open
		// reservation of the account (preference "open", its default),
		// taking a slot the request said it must not take.
		in.CapacityReservationSpecification = &types.CapacityReservationSpecification{
			CapacityReservationPreference: types.CapacityReservationPreferenceNone}
	}
	var id string
	err := p.call(ctx, "create", func(ctx context.Context) error {
		out, e := p.ec2For(region).RunInstances(ctx, in)
		if e == nil && len(out.Instances) > 0 {
			id = awssdk.ToString(out.Instances[0].InstanceId)
		}
		return e
	})
	if IsCode(err, "InvalidGroup.NotFound") {
		return "", p.groupGone(region, pr.SecurityGroup, err)
	}
	if err != nil && d.Reservation != "" {
		return "", reservationError(err, d.Reservation)
	}
	if err != nil {
		return "", err
	}
	if id == "" {
		return "", provider.Errorf(provider.Transient, p.name, "create", "RunInstances answered without an instance id")
	}
	p.remember(region, spec.VM, id)
	p.log.Info("aws: created", "provider", p.name, "vm", spec.VM, "instance", id, "region", region,
		"zone", offer.Location.Zone, "type", d.InstanceType, "spot", d.Spot, "placement_group", spec.PlacementGroup,
		"reservation", d.Reservation)
	return id, nil
}

// describe pages through DescribeInstances.
func (p *Provider) describe(ctx context.Context, op, region string, in *ec2.DescribeInstancesInput) ([]types.Instance, error) {
	var all []types.Instance
	err := p.call(ctx, op, func(ctx context.Context) error {
		pg := ec2.NewDescribeInstancesPaginator(p.ec2For(region), in)
		for pg.HasMorePages() {
			out, err := pg.NextPage(ctx)
			if err != nil {
				return err
			}
			for _, r := range out.Reservations {
				all = append(all, r.Instances...)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return all, p.fillZoneIDs(ctx, op, region, all)
}

// fillZoneIDs sets the zone id of instances whose placement names only the
// zone (an endpoint that predates Placement.AvailabilityZoneId, like moto),
// from the region's zones, asked once per region (DescribeAvailabilityZones)
// and only when needed: zones are compared and reported by id.
func (p *Provider) fillZoneIDs(ctx context.Context, op, region string, ins []types.Instance) error {
	var ids map[string]string
	for i := range ins {
		pl := ins[i].Placement
		if pl == nil || awssdk.ToString(pl.AvailabilityZoneId) != "" || awssdk.ToString(pl.AvailabilityZone) == "" {
			continue
		}
		if ids == nil {
			var err error
			if ids, err = p.zoneIDsOf(ctx, op, region); err != nil {
				return err
			}
		}
		if id := ids[awssdk.ToString(pl.AvailabilityZone)]; id != "" {
			pl.AvailabilityZoneId = awssdk.String(id)
		}
	}
	return nil
}

// zoneIDsOf returns region's zone ids by zone name.
func (p *Provider) zoneIDsOf(ctx context.Context, op, region string) (map[string]string, error) {
	p.mu.Lock()
	ids, ok := p.zoneIDs[region]
	p.mu.Unlock()
	if ok {
		return ids, nil
	}
	var out *ec2.DescribeAvailabilityZonesOutput
	err := p.call(ctx, op, func(ctx context.Context) (e error) {
		out, e = p.ec2For(region).DescribeAvailabilityZones(ctx, &ec2.DescribeAvailabilityZonesInput{})
		return e
	})
	if err != nil {
		return nil, err
	}
	ids = map[string]string{}
	for _, z := range out.AvailabilityZones {
		ids[awssdk.ToString(z.ZoneName)] = awssdk.ToString(z.ZoneId)
	}
	p.mu.Lock()
	p.zoneIDs[region] = ids
	p.mu.Unlock()
	return ids, nil
}

// Observe returns the live instances of vm in loc (the zone too when loc
// names one, filtered here: see inZone) carrying both identity tags. An instance Create returned
// within the consistency window that the tag filter does not list yet is
// looked up by id; InvalidInstanceID.NotFound for it means "not visible
// yet", not an error.
func (p *Provider) Observe(ctx context.Context, loc provider.Location, vm string) ([]provider.Observed, error) {
	filters := []types.Filter{filter("tag:"+provider.LabelVM, vm), filter("tag:"+provider.LabelInstallation, p.installation),
		filter("instance-state-name", liveStates...)}
	ins, err := p.describe(ctx, "observe", loc.Region, &ec2.DescribeInstancesInput{Filters: filters})
	if err != nil {
		return nil, err
	}
	out := make([]provider.Observed, 0, len(ins))
	seen := map[string]bool{}
	for _, in := range ins {
		if tagValue(in.Tags, provider.LabelVM) != vm || tagValue(in.Tags, provider.LabelInstallation) != p.installation {
			continue
		}
		seen[awssdk.ToString(in.InstanceId)] = true // listed: no lookup by id, whatever its zone
		if inZone(in, loc.Zone) {
			out = append(out, p.observed(loc.Region, in))
		}
	}
	for _, id := range p.recentIDs(loc.Region, vm) {
		if seen[id] {
			continue
		}
		byID, err := p.describe(ctx, "observe", loc.Region, &ec2.DescribeInstancesInput{InstanceIds: []string{id}})
		if IsCode(err, "InvalidInstanceID.NotFound") {
			p.log.Debug("aws: new instance not visible yet", "provider", p.name, "vm", vm, "instance", id)
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, in := range byID {
			o := p.observed(loc.Region, in)
			if o.Status == provider.StatusTerminated || !inZone(in, loc.Zone) {
				continue
			}
			if v := tagValue(in.Tags, provider.LabelVM); v != "" && v != vm {
				continue
			}
			o.VM = vm
			out = append(out, o)
		}
	}
	return out, nil
}

// List returns every live instance of this installation in loc, or in
// every configured region (every catalog region when none is configured)
// when loc is zero: one DescribeInstances (all pages) per region, with the
// zone, when loc names one, filtered here (see inZone).
func (p *Provider) List(ctx context.Context, loc provider.Location) ([]provider.Observed, error) {
	regions := p.regions(loc)
	filters := []types.Filter{filter("tag:"+provider.LabelInstallation, p.installation), filter("tag-key", provider.LabelVM),
		filter("instance-state-name", liveStates...)}
	var out []provider.Observed
	for _, r := range regions {
		ins, err := p.describe(ctx, "list", r, &ec2.DescribeInstancesInput{Filters: filters})
		if err != nil {
			return nil, err
		}
		for _, in := range ins {
			if tagValue(in.Tags, provider.LabelInstallation) == p.installation && tagValue(in.Tags, provider.LabelVM) != "" && inZone(in, loc.Zone) {
				out = append(out, p.observed(r, in))
			}
		}
	}
	return out, nil
}

// maxFilterValues is the most values the adapter puts in one
// DescribeInstances filter. The EC2 API reference's Filter
// (https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_Filter.html)
// says a filter's values are joined with OR but states no maximum; 200
// values per filter is the limit users report meeting (for example
// apache/druid#1954, which keeps to 100). The core names at most
// provider.MaxListNames VMs per ListNamed, within it; the split is for a
// core that names more.
const maxFilterValues = 200

// ListNamed implements provider.NameLister: List with a tag:gpuprov filter
// of vms instead of the tag-key filter, so that a listing's pages follow
// the VMs named, not the account. The tags are checked again here, as in
// List.
func (p *Provider) ListNamed(ctx context.Context, loc provider.Location, vms []string) ([]provider.Observed, error) {
	named := make(map[string]bool, len(vms))
	for _, vm := range vms {
		named[vm] = true
	}
	out := []provider.Observed{}
	for _, r := range p.regions(loc) {
		for chunk := range slices.Chunk(vms, maxFilterValues) {
			filters := []types.Filter{filter("tag:"+provider.LabelInstallation, p.installation), filter("tag:"+provider.LabelVM, chunk...),
				filter("instance-state-name", liveStates...)}
			ins, err := p.describe(ctx, "list", r, &ec2.DescribeInstancesInput{Filters: filters})
			if err != nil {
				return nil, err
			}
			for _, in := range ins {
				if tagValue(in.Tags, provider.LabelInstallation) == p.installation && named[tagValue(in.Tags, provider.LabelVM)] && inZone(in, loc.Zone) {
					out = append(out, p.observed(r, in))
				}
			}
		}
	}
	return out, nil
}

// inZone reports whether in is placed in zone, given as a zone id
// (use1-az4) or a zone name (us-east-1a); every zone matches "". Zones are
// filtered here rather than with DescribeInstances' availability-zone-id
// filter, which not every EC2 endpoint serves (the moto emulator answers
// it with HTTP 500).
func inZone(in types.Instance, zone string) bool {
	if zone == "" {
		return true
	}
	if in.Placement == nil {
		return false
	}
	return awssdk.ToString(in.Placement.AvailabilityZoneId) == zone || awssdk.ToString(in.Placement.AvailabilityZone) == zone
}

// observed normalizes an instance.
func (p *Provider) observed(region string, in types.Instance) provider.Observed {
	var state string
	if in.State != nil {
		state = string(in.State.Name)
	}
	zone := ""
	if in.Placement != nil {
		zone = awssdk.ToString(in.Placement.AvailabilityZoneId)
		if zone == "" {
			zone = awssdk.ToString(in.Placement.AvailabilityZone)
		}
	}
	o := provider.Observed{
		ID: awssdk.ToString(in.InstanceId), VM: tagValue(in.Tags, provider.LabelVM), Status: status(state),
		PublicIP: awssdk.ToString(in.PublicIpAddress), PrivateIP: awssdk.ToString(in.PrivateIpAddress),
		Location: provider.Location{Region: region, Zone: zone}, InstanceType: string(in.InstanceType),
		VendorStatus: state,
	}
	if in.LaunchTime != nil {
		o.Created = *in.LaunchTime
	}
	if in.StateReason != nil && awssdk.ToString(in.StateReason.Code) != "" {
		o.VendorStatus += " (" + awssdk.ToString(in.StateReason.Code) + ")"
	}
	if o.Status == provider.StatusRunning && o.PublicIP != "" {
		o.SSH = &provider.SSHEndpoint{Host: o.PublicIP, Port: 22, User: p.sshUser()}
	}
	return o
}

// status maps an EC2 instance state to the normalized one. A stopped
// instance is Failed: gpuprov never stops instances, so one that stopped
// (a spot stop, a capacity or host problem, a retirement) is broken.
func status(state string) provider.InstanceStatus {
	switch state {
	case "pending":
		return provider.StatusPending
	case "running":
		return provider.StatusRunning
	case "shutting-down", "stopping":
		return provider.StatusStopping
	case "stopped":
		return provider.StatusFailed
	case "terminated":
		return provider.StatusTerminated
	}
	return provider.StatusUnknown
}

// Delete terminates ids. An id EC2 does not know (gone, or never there)
// is success; when a batch fails on one, the others are terminated one by
// one.
func (p *Provider) Delete(ctx context.Context, loc provider.Location, vm string, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	terminate := func(ids []string) error {
		err := p.call(ctx, "delete", func(ctx context.Context) error {
			_, e := p.ec2For(loc.Region).TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: ids})
			return e
		})
		if IsCode(err, "InvalidInstanceID.NotFound", "InvalidInstanceID.Malformed") && len(ids) == 1 {
			return nil
		}
		return err
	}
	err := terminate(ids)
	if !IsCode(err, "InvalidInstanceID.NotFound", "InvalidInstanceID.Malformed") {
		return err
	}
	var first error
	for _, id := range ids {
		if err := terminate([]string{id}); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Cleanup deletes the key pair Prepare made for vm in loc's region, and
// the per-VM security group gpuprov-<vm> that Prepare made before security
// groups were shared (an attempt journaled by an older version), both
// found by name and tags: the group by its name, this installation and
// the VM's own tag (gpuprov=<vm>), which a shared group never carries, so
// that a shared group is never touched, even one whose name gpuprov-fw-…
// a VM named fw-… would share (CleanupShared removes those). A group still
// used by an instance that is shutting down answers DependencyViolation,
// which is Transient; what is already gone is success.
func (p *Provider) Cleanup(ctx context.Context, loc provider.Location, vm string) error {
	c := p.ec2For(loc.Region)
	name := provider.ResourceName(vm)
	var sgs *ec2.DescribeSecurityGroupsOutput
	err := p.call(ctx, "cleanup", func(ctx context.Context) (e error) {
		sgs, e = c.DescribeSecurityGroups(ctx, &ec2.DescribeSecurityGroupsInput{Filters: []types.Filter{
			filter("group-name", name), filter("tag:"+provider.LabelInstallation, p.installation),
			filter("tag:"+provider.LabelVM, vm)}})
		return e
	})
	if err != nil {
		return err
	}
	var ids []string
	for _, sg := range sgs.SecurityGroups {
		if awssdk.ToString(sg.GroupName) != name || tagValue(sg.Tags, provider.LabelInstallation) != p.installation ||
			tagValue(sg.Tags, provider.LabelVM) != vm || tagValue(sg.Tags, provider.LabelShared) != "" {
			continue // the filter's answer is checked, not trusted
		}
		ids = append(ids, awssdk.ToString(sg.GroupId))
	}
	slices.Sort(ids)
	for _, id := range ids {
		err := p.call(ctx, "cleanup", func(ctx context.Context) error {
			_, e := c.DeleteSecurityGroup(ctx, &ec2.DeleteSecurityGroupInput{GroupId: awssdk.String(id)})
			return e
		})
		if err != nil && !IsCode(err, "InvalidGroup.NotFound") {
			return err
		}
	}
	var keys *ec2.DescribeKeyPairsOutput
	err = p.call(ctx, "cleanup", func(ctx context.Context) (e error) {
		keys, e = c.DescribeKeyPairs(ctx, &ec2.DescribeKeyPairsInput{Filters: []types.Filter{
			filter("key-name", name), filter("tag:"+provider.LabelInstallation, p.installation)}})
		return e
	})
	if IsCode(err, "InvalidKeyPair.NotFound") {
		return nil
	}
	if err != nil {
		return err
	}
	for _, k := range keys.KeyPairs {
		err := p.call(ctx, "cleanup", func(ctx context.Context) error {
			// by name, which EC2 accepts as well as the id (moto ignores the id)
			_, e := c.DeleteKeyPair(ctx, &ec2.DeleteKeyPairInput{KeyName: k.KeyName})
			return e
		})
		if err != nil && !IsCode(err, "InvalidKeyPair.NotFound") {
			return err
		}
	}
	return nil
}
