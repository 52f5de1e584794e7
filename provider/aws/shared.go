package aws

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"golang.org/x/sync/singleflight"

	"github.com/org/gpuprov/provider"
)

// The shared security group (provider.SharedCleaner). Every VM of the
// installation in a VPC that opens the same ports to the same sources
// launches in one security group, named provider.SharedName(installation,
// ports, sources) where ports are SSH (22/tcp) and the VM's OpenPorts and
// sources provider.SourcesFor(spec, Config.SourceRanges), and tagged with
// provider.SharedLabels(installation) and a Name: no VM's identity and no
// caller's labels, since many VMs share it. Prepare makes it once and
// remembers its id, so that the next Prepare in the VPC sends no security
// group request at all; Cleanup never touches it; CleanupShared deletes it
// once no instance uses it, which EC2 itself guarantees: DeleteSecurityGroup
// of a group that an instance's network interface still uses answers
// DependencyViolation. Each port admits the sources; when they are
// restricted, every port but SSH also admits the group's own members (a
// UserIdGroupPair naming the group: EC2 User Guide, "Security group
// rules", a security group as the source admits the instances whose
// network interfaces are in it). The error codes are the EC2 API
// Reference's client errors for specific actions ("Error codes for the
// Amazon EC2 API",
// https://docs.aws.amazon.com/AWSEC2/latest/APIReference/errors-overview.html):
//
//	InvalidGroup.Duplicate       a security group with that name exists in the VPC
//	InvalidGroup.NotFound        the security group does not exist (or its id has not
//	                             propagated yet); RunInstances answers it for a group id
//	                             that names no group
//	InvalidPermission.Duplicate  the inbound rule exists already in that group
//	DependencyViolation          the object has dependent resources (DeleteSecurityGroup
//	                             of a group still in use)

// sshPort is the port every gpuprov security group opens.
var sshPort = provider.Port{Number: 22, Protocol: "tcp"}

// groupCache remembers the id of each shared security group this provider
// made or adopted, by region, VPC and name, so that a Prepare whose group
// it knows sends no security-group request. Concurrent first Prepares of
// one key share one creation (or adoption) through flight. It is safe for
// concurrent use; the zero value is ready.
type groupCache struct {
	mu     sync.Mutex
	ids    map[string]string // groupKey(region, vpc, name) → group id
	flight singleflight.Group
}

func groupKey(region, vpc, name string) string { return region + "|" + vpc + "|" + name }

func (c *groupCache) get(key string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	id, ok := c.ids[key]
	return id, ok
}

func (c *groupCache) put(key, id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ids == nil {
		c.ids = map[string]string{}
	}
	c.ids[key] = id
}

// forget drops every entry of region that names group id.
func (c *groupCache) forget(region, id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for key, v := range c.ids {
		if v == id && strings.HasPrefix(key, region+"|") {
			delete(c.ids, key)
		}
	}
}

// groupPorts returns the ports spec's security group opens: SSH, then
// spec.OpenPorts, with their protocols in lower case (the form EC2 lists
// them in, and the one the group's name is derived from, so that "TCP" and
// "tcp" share one group).
func groupPorts(spec *provider.InstanceSpec) []provider.Port {
	ports := []provider.Port{sshPort}
	for _, pt := range spec.OpenPorts {
		pt.Protocol = strings.ToLower(pt.Protocol)
		if !slices.Contains(ports, pt) {
			ports = append(ports, pt)
		}
	}
	return ports
}

// sharedTags are the tags of a shared security group: its Name and
// provider.SharedLabels.
func (p *Provider) sharedTags(name string) []types.Tag {
	tags := []types.Tag{{Key: awssdk.String("Name"), Value: awssdk.String(name)}}
	labels := provider.SharedLabels(p.installation)
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		tags = append(tags, types.Tag{Key: awssdk.String(k), Value: awssdk.String(labels[k])})
	}
	return tags
}

// isShared reports whether tags are those of one of this installation's
// shared security groups.
func (p *Provider) isShared(tags []types.Tag) bool {
	return tagValue(tags, provider.LabelShared) == "true" && tagValue(tags, provider.LabelInstallation) == p.installation
}

// securityGroup returns the id of the installation's shared security group
// for spec's ports and sources (provider.SourcesFor: the request's ranges,
// else Config.SourceRanges, else anywhere) in vpc of region: from memory
// when this provider made or adopted it before (no request), else made or
// adopted (ensureGroup) by one flight that concurrent Prepares of the same
// group wait for. Groups are named by provider.SharedName over ports and
// sources, so VMs that admit other sources get another group.
func (p *Provider) securityGroup(ctx context.Context, c *ec2.Client, region, vpc string, spec *provider.InstanceSpec) (string, error) {
	ports := groupPorts(spec)
	sources := provider.SourcesFor(spec, p.cfg.SourceRanges)
	name := provider.SharedName(p.installation, ports, sources)
	key := groupKey(region, vpc, name)
	for again := true; ; again = false {
		if id, ok := p.groups.get(key); ok {
			return id, nil
		}
		v, err, shared := p.groups.flight.Do(key, func() (any, error) {
			if id, ok := p.groups.get(key); ok { // a flight that ended just before this one began
				return id, nil
			}
			id, err := p.ensureGroup(ctx, c, region, vpc, name, ports, sources)
			if err != nil {
				return "", err
			}
			p.groups.put(key, id)
			return id, nil
		})
		if err != nil && shared && again && ctx.Err() == nil && provider.IsContextError(err) {
			continue // the Prepare whose flight this was gave up; this one has not: fly once more
		}
		if err != nil {
			return "", err
		}
		return v.(string), nil
	}
}

// ensureGroup makes the shared group name in vpc (CreateSecurityGroup,
// tagged) or, when EC2 answers InvalidGroup.Duplicate (another process, or
// this one before a restart, made it), adopts it once DescribeSecurityGroups
// shows it is this installation's shared group; then, for every port of
// ports, it adds what the group does not admit yet (see wantedRule): one
// AuthorizeSecurityGroupIngress per port with the missing sources
// (InvalidPermission.Duplicate is success), so that a group whose maker died
// between creating it and opening its ports, or that lost a rule, is
// completed and admits the sources it is named for.
func (p *Provider) ensureGroup(ctx context.Context, c *ec2.Client, region, vpc, name string, ports []provider.Port, sources []string) (string, error) {
	var id string
	err := p.call(ctx, "prepare", func(ctx context.Context) error {
		out, e := c.CreateSecurityGroup(ctx, &ec2.CreateSecurityGroupInput{
			GroupName: awssdk.String(name), VpcId: awssdk.String(vpc),
			Description:       awssdk.String(groupDescription(ports, sources)),
			TagSpecifications: []types.TagSpecification{{ResourceType: types.ResourceTypeSecurityGroup, Tags: p.sharedTags(name)}},
		})
		if e == nil {
			id = awssdk.ToString(out.GroupId)
		}
		return e
	})
	var have []types.IpPermission
	switch {
	case err == nil:
		p.log.Info("aws: shared security group created", "provider", p.name, "group", name, "id", id, "region", region, "vpc", vpc)
	case IsCode(err, "InvalidGroup.Duplicate"):
		var out *ec2.DescribeSecurityGroupsOutput
		err = p.call(ctx, "prepare", func(ctx context.Context) (e error) {
			out, e = c.DescribeSecurityGroups(ctx, &ec2.DescribeSecurityGroupsInput{
				Filters: []types.Filter{filter("group-name", name), filter("vpc-id", vpc)}})
			return e
		})
		if err != nil {
			return "", err
		}
		i := slices.IndexFunc(out.SecurityGroups, func(sg types.SecurityGroup) bool { return awssdk.ToString(sg.GroupName) == name })
		if i < 0 {
			return "", provider.Errorf(provider.Transient, p.name, "prepare", "security group %s exists in %s but is not listed yet", name, vpc)
		}
		sg := out.SecurityGroups[i]
		if !p.isShared(sg.Tags) {
			return "", provider.Errorf(provider.InvalidRequest, p.name, "prepare",
				"security group %s in %s is not this installation's shared group (tags %s=%q, %s=%q); delete it or rename it",
				name, vpc, provider.LabelInstallation, tagValue(sg.Tags, provider.LabelInstallation),
				provider.LabelShared, tagValue(sg.Tags, provider.LabelShared))
		}
		id, have = awssdk.ToString(sg.GroupId), sg.IpPermissions
	default:
		return "", err
	}
	restricted := provider.Restricted(sources)
	for _, pt := range ports {
		want := wantedRule(pt, sources, restricted)
		if missing := want.less(admitted(have, id, pt)); !missing.empty() {
			if err := p.authorize(ctx, c, id, pt, missing); err != nil {
				return "", err
			}
		}
	}
	return id, nil
}

// groupDescription is the description of the group opening ports to
// sources (EC2 takes up to 255 characters).
func groupDescription(ports []provider.Port, sources []string) string {
	s := make([]string, 0, len(ports))
	for _, pt := range ports {
		s = append(s, pt.String())
	}
	slices.Sort(s)
	d := "gpuprov shared by the VMs of an installation: " + strings.Join(s, " ")
	if provider.Restricted(sources) {
		d += " from " + strings.Join(sources, " ") + " and the group's members"
	}
	if len(d) > 255 {
		d = d[:255]
	}
	return d
}

// ruleSources is what one port of a group admits: CIDRs (IPv4 and IPv6)
// and, with self, the group's own members (a UserIdGroupPair naming the
// group).
type ruleSources struct {
	cidrs []string
	self  bool
}

func (r ruleSources) empty() bool { return len(r.cidrs) == 0 && !r.self }

// less returns what r has that have lacks.
func (r ruleSources) less(have ruleSources) ruleSources {
	var out ruleSources
	for _, c := range r.cidrs {
		if !slices.Contains(have.cidrs, c) {
			out.cidrs = append(out.cidrs, c)
		}
	}
	out.self = r.self && !have.self
	return out
}

// wantedRule is what port pt of a shared group must admit: sources, and,
// when they are restricted (provider.Restricted), for every port but SSH
// the group's own members too, so that a cluster's nodes behind the group
// reach each other's API server and WireGuard ports. Rules a group has
// beyond these are left as they are.
func wantedRule(pt provider.Port, sources []string, restricted bool) ruleSources {
	return ruleSources{cidrs: sources, self: restricted && pt != sshPort}
}

// admitted returns what perms (the group's inbound rules, as
// DescribeSecurityGroups lists them) let in on pt: the CIDRs of every rule
// whose protocol and port range cover it, and whether one names the group
// id itself.
func admitted(perms []types.IpPermission, id string, pt provider.Port) ruleSources {
	var out ruleSources
	for _, perm := range perms {
		if strings.ToLower(awssdk.ToString(perm.IpProtocol)) != pt.Protocol ||
			int(awssdk.ToInt32(perm.FromPort)) > pt.Number || int(awssdk.ToInt32(perm.ToPort)) < pt.Number {
			continue
		}
		for _, r := range perm.IpRanges {
			out.cidrs = append(out.cidrs, awssdk.ToString(r.CidrIp))
		}
		for _, r := range perm.Ipv6Ranges {
			out.cidrs = append(out.cidrs, awssdk.ToString(r.CidrIpv6))
		}
		if slices.ContainsFunc(perm.UserIdGroupPairs, func(g types.UserIdGroupPair) bool { return awssdk.ToString(g.GroupId) == id }) {
			out.self = true
		}
	}
	return out
}

// authorize lets src in on pt in group id, in one
// AuthorizeSecurityGroupIngress (IPv4 ranges as IpRanges, IPv6 ones as
// Ipv6Ranges, the group itself as a UserIdGroupPair); a rule that is there
// already (InvalidPermission.Duplicate) is success.
func (p *Provider) authorize(ctx context.Context, c *ec2.Client, id string, pt provider.Port, src ruleSources) error {
	desc := awssdk.String("gpuprov " + pt.String())
	perm := types.IpPermission{IpProtocol: awssdk.String(pt.Protocol),
		FromPort: awssdk.Int32(int32(pt.Number)), ToPort: awssdk.Int32(int32(pt.Number))}
	for _, cidr := range src.cidrs {
		if pfx, err := netip.ParsePrefix(cidr); err == nil && pfx.Addr().Is6() {
			perm.Ipv6Ranges = append(perm.Ipv6Ranges, types.Ipv6Range{CidrIpv6: awssdk.String(cidr), Description: desc})
		} else {
			perm.IpRanges = append(perm.IpRanges, types.IpRange{CidrIp: awssdk.String(cidr), Description: desc})
		}
	}
	if src.self {
		perm.UserIdGroupPairs = []types.UserIdGroupPair{{GroupId: awssdk.String(id), Description: desc}}
	}
	err := p.call(ctx, "prepare", func(ctx context.Context) error {
		_, e := c.AuthorizeSecurityGroupIngress(ctx, &ec2.AuthorizeSecurityGroupIngressInput{
			GroupId: awssdk.String(id), IpPermissions: []types.IpPermission{perm}})
		return e
	})
	if IsCode(err, "InvalidPermission.Duplicate") {
		return nil
	}
	return err
}

// groupGone is Create's error for a RunInstances that EC2 refused with
// InvalidGroup.NotFound (cause) for the prepared group id of region: the
// group was deleted since Prepare (by CleanupShared in another process) or
// its id has not propagated yet. Nothing was launched. The group is
// forgotten, and the error is Transient and matches provider.ErrSharedGone:
// the core runs Prepare again, which makes or adopts the group, and sends
// the create again.
func (p *Provider) groupGone(region, id string, cause error) error {
	p.groups.forget(region, id)
	cause = apiCause(cause) // already classified and masked: keep the API error, not its kind
	p.log.Info("aws: security group gone at create", "provider", p.name, "region", region, "group", id)
	return &provider.Error{Kind: provider.Transient, Op: "create", Provider: p.name,
		Err: fmt.Errorf("security group %s in %s: %w: %w", id, region, provider.ErrSharedGone, cause)}
}

// regions returns loc's region, or, for a zero Location, every configured
// region (every catalog region when none is configured).
func (p *Provider) regions(loc provider.Location) []string {
	if loc.Region != "" {
		return []string{loc.Region}
	}
	if len(p.cfg.Regions) > 0 {
		return p.cfg.Regions
	}
	return p.cat.Regions()
}

// CleanupShared implements provider.SharedCleaner: it deletes this
// installation's shared security groups in loc's region, or in every
// region (see List) for a zero Location, found by their tags
// (DescribeSecurityGroups filtered on tag:gpuprov-installation and
// tag:gpuprov-shared) and deleted by id (DeleteSecurityGroup), and forgets
// what it deleted. Every group is tried. A group an instance or a network
// interface still uses is left: EC2 answers DependencyViolation, which is
// reported as a Transient error matching provider.ErrInUse. A group that is
// gone already (InvalidGroup.NotFound) is success. The errors of several
// groups are joined, those that are not ErrInUse first.
func (p *Provider) CleanupShared(ctx context.Context, loc provider.Location) error {
	var failed, inUse []error
	for _, r := range p.regions(loc) {
		if ctx.Err() != nil {
			failed = append(failed, p.classify(ctx, "cleanup", context.Cause(ctx)))
			break
		}
		for _, err := range p.cleanupSharedIn(ctx, r) {
			if errors.Is(err, provider.ErrInUse) {
				inUse = append(inUse, err)
			} else {
				failed = append(failed, err)
			}
		}
	}
	errs := append(failed, inUse...)
	if len(errs) == 1 {
		return errs[0]
	}
	return errors.Join(errs...)
}

// cleanupSharedIn deletes the shared groups of region and returns the
// error of each group it could not delete (or of the listing).
func (p *Provider) cleanupSharedIn(ctx context.Context, region string) []error {
	c := p.ec2For(region)
	var groups []types.SecurityGroup
	err := p.call(ctx, "cleanup", func(ctx context.Context) error {
		groups = nil // a page that failed is listed again whole
		pg := ec2.NewDescribeSecurityGroupsPaginator(c, &ec2.DescribeSecurityGroupsInput{Filters: []types.Filter{
			filter("tag:"+provider.LabelInstallation, p.installation), filter("tag:"+provider.LabelShared, "true")}})
		for pg.HasMorePages() {
			out, err := pg.NextPage(ctx)
			if err != nil {
				return err
			}
			groups = append(groups, out.SecurityGroups...)
		}
		return nil
	})
	if err != nil {
		return []error{err}
	}
	var errs []error
	for _, sg := range groups {
		if !p.isShared(sg.Tags) {
			continue // the filter's answer is checked, not trusted
		}
		id, name := awssdk.ToString(sg.GroupId), awssdk.ToString(sg.GroupName)
		err := p.call(ctx, "cleanup", func(ctx context.Context) error {
			_, e := c.DeleteSecurityGroup(ctx, &ec2.DeleteSecurityGroupInput{GroupId: awssdk.String(id)})
			return e
		})
		switch {
		case err == nil:
			p.groups.forget(region, id)
			p.log.Info("aws: shared security group deleted", "provider", p.name, "group", name, "id", id, "region", region)
		case IsCode(err, "InvalidGroup.NotFound"):
			p.groups.forget(region, id) // deleted since it was listed
		case IsCode(err, "DependencyViolation"):
			errs = append(errs, &provider.Error{Kind: provider.Transient, Op: "cleanup", Provider: p.name,
				Err: fmt.Errorf("security group %s (%s) in %s is %w by an instance or network interface: %w",
					name, id, region, provider.ErrInUse, apiCause(err))})
		default:
			errs = append(errs, err)
		}
	}
	return errs
}
