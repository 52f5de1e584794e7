package aws

import (
	"context"
	"fmt"
	"maps"
	"slices"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/org/gpuprov/provider"
)

// A compact cluster's nodes share an EC2 cluster placement group: a
// regional resource, named by the core (provider.PlacementGroupName), whose
// instances EC2 packs into one Availability Zone close together. The error
// codes below are the EC2 API Reference's client errors for specific
// actions ("Error codes for the Amazon EC2 API",
// https://docs.aws.amazon.com/AWSEC2/latest/APIReference/errors-overview.html):
//
//	InvalidPlacementGroup.Duplicate  the group already exists in that Region
//	InvalidPlacementGroup.InUse      the group is in use; to delete it, terminate its instances
//	InvalidPlacementGroup.Unknown    the group cannot be found in that Region
//	PlacementGroupLimitExceeded      the account's limit on placement groups

// placementTags are the tags of a placement group: labels as the core gave
// them (the cluster's identity and the caller's labels), with this
// installation's identity, which wins.
func (p *Provider) placementTags(labels map[string]string) []types.Tag {
	m := maps.Clone(labels)
	if m == nil {
		m = map[string]string{}
	}
	m[provider.LabelInstallation] = p.installation
	tags := make([]types.Tag, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		tags = append(tags, types.Tag{Key: awssdk.String(k), Value: awssdk.String(m[k])})
	}
	return tags
}

// EnsurePlacementGroup implements provider.PlacementGrouper: it creates the
// cluster placement group name in loc's region, tagged with labels and the
// installation (CreatePlacementGroup, Strategy cluster, TagSpecifications
// on placement-group). When EC2 answers InvalidPlacementGroup.Duplicate the
// group is looked up (DescribePlacementGroups by group-name) and adopted if
// it is a cluster group of this installation; a group of another
// installation, or of another strategy, is refused as InvalidRequest (its
// name is the cluster's: use another cluster name). A group that exists but
// is not listed yet, or is being deleted, is Transient.
func (p *Provider) EnsurePlacementGroup(ctx context.Context, loc provider.Location, name string, labels map[string]string) error {
	c := p.ec2For(loc.Region)
	err := p.call(ctx, "prepare", func(ctx context.Context) error {
		_, e := c.CreatePlacementGroup(ctx, &ec2.CreatePlacementGroupInput{
			GroupName: awssdk.String(name), Strategy: types.PlacementStrategyCluster,
			TagSpecifications: []types.TagSpecification{{ResourceType: types.ResourceTypePlacementGroup, Tags: p.placementTags(labels)}},
		})
		return e
	})
	if !IsCode(err, "InvalidPlacementGroup.Duplicate") {
		if err == nil {
			p.log.Info("aws: placement group created", "provider", p.name, "group", name, "region", loc.Region)
		}
		return err
	}
	g, err := p.placementGroup(ctx, "prepare", loc.Region, name)
	if err != nil {
		return err
	}
	if g == nil {
		return provider.Errorf(provider.Transient, p.name, "prepare", "placement group %s in %s exists but is not listed yet", name, loc.Region)
	}
	if inst := tagValue(g.Tags, provider.LabelInstallation); inst != p.installation {
		return provider.Errorf(provider.InvalidRequest, p.name, "prepare",
			"placement group %s in %s belongs to installation %q, not this one; use another cluster name", name, loc.Region, inst)
	}
	if g.Strategy != types.PlacementStrategyCluster {
		return provider.Errorf(provider.InvalidRequest, p.name, "prepare",
			"placement group %s in %s has strategy %q, not cluster; use another cluster name", name, loc.Region, g.Strategy)
	}
	if g.State == types.PlacementGroupStateDeleting {
		return provider.Errorf(provider.Transient, p.name, "prepare", "placement group %s in %s is %s", name, loc.Region, g.State)
	}
	return nil
}

// DeletePlacementGroup implements provider.PlacementGrouper: it deletes the
// placement group name in loc's region (DeletePlacementGroup by GroupName)
// when it carries this installation's tag. A group that is not there
// (not listed, or InvalidPlacementGroup.Unknown) is success, and so is one
// of another installation, which is left alone: it is not this
// installation's to delete. A group that instances still use, including
// instances still shutting down (InvalidPlacementGroup.InUse), is a
// Transient error that matches provider.ErrInUse.
func (p *Provider) DeletePlacementGroup(ctx context.Context, loc provider.Location, name string) error {
	g, err := p.placementGroup(ctx, "cleanup", loc.Region, name)
	if err != nil {
		return err
	}
	if g == nil {
		return nil
	}
	if inst := tagValue(g.Tags, provider.LabelInstallation); inst != p.installation {
		p.log.Warn("aws: placement group of another installation left alone", "provider", p.name, "group", name,
			"region", loc.Region, "installation", inst)
		return nil
	}
	err = p.call(ctx, "cleanup", func(ctx context.Context) error {
		_, e := p.ec2For(loc.Region).DeletePlacementGroup(ctx, &ec2.DeletePlacementGroupInput{GroupName: awssdk.String(name)})
		return e
	})
	switch {
	case err == nil:
		p.log.Info("aws: placement group deleted", "provider", p.name, "group", name, "region", loc.Region)
		return nil
	case IsCode(err, "InvalidPlacementGroup.Unknown"):
		return nil // deleted since it was listed
	case IsCode(err, "InvalidPlacementGroup.InUse"):
		return &provider.Error{Kind: provider.Transient, Op: "cleanup", Provider: p.name,
			Err: fmt.Errorf("placement group %s in %s is %w by instances: %w", name, loc.Region, provider.ErrInUse, apiCause(err))}
	}
	return err
}

// placementGroup returns the placement group name of region, or nil when
// DescribePlacementGroups does not list it but as deleted. It filters on
// group-name rather than passing GroupName.1, which EC2 answers for an
// unknown name with InvalidPlacementGroup.Unknown.
func (p *Provider) placementGroup(ctx context.Context, op, region, name string) (*types.PlacementGroup, error) {
	var out *ec2.DescribePlacementGroupsOutput
	err := p.call(ctx, op, func(ctx context.Context) (e error) {
		out, e = p.ec2For(region).DescribePlacementGroups(ctx, &ec2.DescribePlacementGroupsInput{
			Filters: []types.Filter{filter("group-name", name)}})
		return e
	})
	if err != nil {
		return nil, err
	}
	for i := range out.PlacementGroups {
		if g := &out.PlacementGroups[i]; awssdk.ToString(g.GroupName) == name && g.State != types.PlacementGroupStateDeleted {
			return g, nil
		}
	}
	return nil, nil
}
