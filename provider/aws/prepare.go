package aws

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/aws-sdk-go-v2/service/ssm"

	"github.com/org/gpuprov/provider"
)

// prepared is what Prepare returns and Create reads (journaled; no secret).
type prepared struct {
	Region        string `json:"region"`
	ZoneID        string `json:"zone_id,omitempty"`
	VPC           string `json:"vpc"`
	Subnet        string `json:"subnet"`
	SecurityGroup string `json:"security_group"`
	KeyName       string `json:"key_name,omitempty"`
	AMI           string `json:"ami"`
	// RootDevice is the AMI's root device name, read when the offer asks
	// for a boot disk size (Offer.DiskGB).
	RootDevice string `json:"root_device,omitempty"`
}

func filter(name string, values ...string) types.Filter {
	return types.Filter{Name: awssdk.String(name), Values: values}
}

// tags are what every resource of the VM carries: its Name, the caller's
// labels (InstanceSpec.UserLabels) and gpuprov's identity.
func (p *Provider) tags(spec *provider.InstanceSpec) []types.Tag {
	tags := []types.Tag{{Key: awssdk.String("Name"), Value: awssdk.String(provider.ResourceName(spec.VM))}}
	for _, k := range slices.Sorted(maps.Keys(spec.UserLabels)) {
		tags = append(tags, types.Tag{Key: awssdk.String(k), Value: awssdk.String(spec.UserLabels[k])})
	}
	return append(tags,
		types.Tag{Key: awssdk.String(provider.LabelVM), Value: awssdk.String(spec.VM)},
		types.Tag{Key: awssdk.String(provider.LabelInstallation), Value: awssdk.String(p.installation)})
}

func tagValue(tags []types.Tag, key string) string {
	for _, t := range tags {
		if awssdk.ToString(t.Key) == key {
			return awssdk.ToString(t.Value)
		}
	}
	return ""
}

// Prepare finds the subnet of the offer's zone (the configured subnet, or
// the default-for-zone subnet of the configured or default VPC), makes or
// adopts the installation's shared security group for SSH and
// spec.OpenPorts in that VPC (shared.go: one per installation, VPC and port
// set, named provider.SharedName; no request at all when this provider
// made or adopted it before), imports spec.AuthorizedKeys[0] as key pair
// gpuprov-<vm>, and resolves the image. Everything it finds already made
// for this VM in this installation is adopted, so a second Prepare is
// harmless.
func (p *Provider) Prepare(ctx context.Context, offer *provider.Offer, spec *provider.InstanceSpec) (json.RawMessage, error) {
	region, zone := offer.Location.Region, offer.Location.Zone
	c := p.ec2For(region)
	pr := prepared{Region: region, ZoneID: zone}
	var err error
	if pr.VPC, pr.Subnet, err = p.subnet(ctx, c, zone); err != nil {
		return nil, err
	}
	if pr.SecurityGroup, err = p.securityGroup(ctx, c, region, pr.VPC, spec); err != nil {
		return nil, err
	}
	if len(spec.AuthorizedKeys) > 0 {
		if pr.KeyName, err = p.keyPair(ctx, c, spec); err != nil {
			return nil, err
		}
	}
	if pr.AMI, err = p.image(ctx, region, spec); err != nil {
		return nil, err
	}
	if offer.DiskGB > 0 {
		if pr.RootDevice, err = p.rootDevice(ctx, c, pr.AMI, offer.DiskGB); err != nil {
			return nil, err
		}
	}
	b, err := json.Marshal(pr)
	if err != nil {
		return nil, provider.Errorf(provider.Failed, p.name, "prepare", "encode: %w", err)
	}
	return b, nil
}

// subnet returns the VPC and subnet to launch into in zone.
func (p *Provider) subnet(ctx context.Context, c *ec2.Client, zone string) (vpc, subnet string, err error) {
	if p.cfg.Subnet != "" {
		var out *ec2.DescribeSubnetsOutput
		err = p.call(ctx, "prepare", func(ctx context.Context) (e error) {
			out, e = c.DescribeSubnets(ctx, &ec2.DescribeSubnetsInput{SubnetIds: []string{p.cfg.Subnet}})
			return e
		})
		if IsCode(err, "InvalidSubnetID.NotFound") {
			// the configured subnet lives in another region: this region is not viable
			return "", "", &provider.Error{Kind: provider.Unavailable, Op: "prepare", Provider: p.name, Block: provider.ScopeRegion,
				Err: fmt.Errorf("configured subnet %s is not in this region: %w", p.cfg.Subnet, apiCause(err))}
		}
		if err != nil {
			return "", "", err
		}
		if len(out.Subnets) == 0 {
			return "", "", provider.Errorf(provider.Unavailable, p.name, "prepare", "configured subnet %s not found", p.cfg.Subnet)
		}
		s := out.Subnets[0]
		if zone != "" && zone != awssdk.ToString(s.AvailabilityZoneId) && zone != awssdk.ToString(s.AvailabilityZone) {
			return "", "", provider.Errorf(provider.Unavailable, p.name, "prepare", "configured subnet %s is in zone %s, not %s",
				p.cfg.Subnet, awssdk.ToString(s.AvailabilityZoneId), zone)
		}
		return awssdk.ToString(s.VpcId), p.cfg.Subnet, nil
	}
	vpc = p.cfg.VPC
	if vpc == "" {
		var out *ec2.DescribeVpcsOutput
		err = p.call(ctx, "prepare", func(ctx context.Context) (e error) {
			out, e = c.DescribeVpcs(ctx, &ec2.DescribeVpcsInput{Filters: []types.Filter{filter("is-default", "true")}})
			return e
		})
		if err != nil {
			return "", "", err
		}
		if len(out.Vpcs) == 0 {
			return "", "", &provider.Error{Kind: provider.Unavailable, Op: "prepare", Provider: p.name, Block: provider.ScopeRegion,
				Err: fmt.Errorf("the region has no default VPC; set vpc or subnet in the [aws] config")}
		}
		vpc = awssdk.ToString(out.Vpcs[0].VpcId)
	}
	// The zone is matched here, by id or name, not with the
	// availability-zone-id filter, which not every endpoint serves (moto
	// does not).
	filters := []types.Filter{filter("vpc-id", vpc)}
	if p.cfg.VPC == "" {
		filters = append(filters, filter("default-for-az", "true"))
	}
	var out *ec2.DescribeSubnetsOutput
	err = p.call(ctx, "prepare", func(ctx context.Context) (e error) {
		out, e = c.DescribeSubnets(ctx, &ec2.DescribeSubnetsInput{Filters: filters})
		return e
	})
	if err != nil {
		return "", "", err
	}
	var ids []string
	for _, s := range out.Subnets {
		if zone == "" || awssdk.ToString(s.AvailabilityZoneId) == zone || awssdk.ToString(s.AvailabilityZone) == zone {
			ids = append(ids, awssdk.ToString(s.SubnetId))
		}
	}
	if len(ids) == 0 {
		return "", "", provider.Errorf(provider.Unavailable, p.name, "prepare", "VPC %s has no subnet in zone %s", vpc, zone)
	}
	slices.Sort(ids)
	return vpc, ids[0], nil
}

// keyPair imports spec.AuthorizedKeys[0] as gpuprov-<vm>; one that exists
// already is kept (cloud-init installs every authorized key anyway).
func (p *Provider) keyPair(ctx context.Context, c *ec2.Client, spec *provider.InstanceSpec) (string, error) {
	name := provider.ResourceName(spec.VM)
	err := p.call(ctx, "prepare", func(ctx context.Context) error {
		_, e := c.ImportKeyPair(ctx, &ec2.ImportKeyPairInput{KeyName: awssdk.String(name),
			PublicKeyMaterial: []byte(strings.TrimSpace(spec.AuthorizedKeys[0])),
			TagSpecifications: []types.TagSpecification{{ResourceType: types.ResourceTypeKeyPair, Tags: p.tags(spec)}}})
		return e
	})
	if err != nil && !IsCode(err, "InvalidKeyPair.Duplicate") {
		return "", err
	}
	return name, nil
}

// image returns the AMI: the request's, the configured one, or the public
// SSM parameter's value in region.
func (p *Provider) image(ctx context.Context, region string, spec *provider.InstanceSpec) (string, error) {
	switch {
	case spec.Image != "":
		return spec.Image, nil
	case p.cfg.Image != "":
		return p.cfg.Image, nil
	}
	param := p.cfg.ImageParameter
	if param == "" {
		param = DefaultImageParameter
	}
	var ami string
	err := p.call(ctx, "prepare", func(ctx context.Context) error {
		out, e := p.ssmFor(region).GetParameter(ctx, &ssm.GetParameterInput{Name: awssdk.String(param)})
		if e == nil && out.Parameter != nil {
			ami = awssdk.ToString(out.Parameter.Value)
		}
		return e
	})
	if err != nil {
		return "", err
	}
	if !amiRE.MatchString(ami) {
		return "", provider.Errorf(provider.Unavailable, p.name, "prepare", "SSM parameter %s in %s holds %q, not an AMI id", param, region, ami)
	}
	return ami, nil
}

// rootDevice returns the root device name of ami, for a block device
// mapping that sizes the boot disk to diskGB, and refuses a size below the
// image's own root snapshot (RunInstances would answer
// InvalidBlockDeviceMapping). EC2 reference: DescribeImages (rootDeviceName,
// blockDeviceMapping ebs.volumeSize).
func (p *Provider) rootDevice(ctx context.Context, c *ec2.Client, ami string, diskGB int) (string, error) {
	var out *ec2.DescribeImagesOutput
	err := p.call(ctx, "prepare", func(ctx context.Context) (e error) {
		out, e = c.DescribeImages(ctx, &ec2.DescribeImagesInput{ImageIds: []string{ami}})
		return e
	})
	if err != nil {
		return "", err
	}
	if len(out.Images) == 0 || awssdk.ToString(out.Images[0].RootDeviceName) == "" {
		return "", provider.Errorf(provider.InvalidRequest, p.name, "prepare", "image %s has no root device to size", ami)
	}
	img := out.Images[0]
	root := awssdk.ToString(img.RootDeviceName)
	for _, m := range img.BlockDeviceMappings {
		if awssdk.ToString(m.DeviceName) == root && m.Ebs != nil && int(awssdk.ToInt32(m.Ebs.VolumeSize)) > diskGB {
			return "", provider.Errorf(provider.InvalidRequest, p.name, "prepare", "a %d GB boot disk is smaller than image %s's %d GB root snapshot",
				diskGB, ami, awssdk.ToInt32(m.Ebs.VolumeSize))
		}
	}
	return root, nil
}
