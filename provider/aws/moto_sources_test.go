package aws_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/org/gpuprov/internal/mototest"
	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/aws"
)

// motoRules returns what group id admits, as moto lists it
// (DescribeSecurityGroups ipPermissions): one "proto/port from source"
// per source, the source a CIDR or, for a UserIdGroupPair, "group <id>",
// sorted.
func motoRules(t *testing.T, raw *ec2.Client, id string) []string {
	t.Helper()
	out, err := raw.DescribeSecurityGroups(context.Background(), &ec2.DescribeSecurityGroupsInput{GroupIds: []string{id}})
	if err != nil || len(out.SecurityGroups) != 1 {
		t.Fatalf("moto DescribeSecurityGroups %s: %+v, %v", id, out, err)
	}
	var rules []string
	for _, perm := range out.SecurityGroups[0].IpPermissions {
		port := fmt.Sprintf("%s/%d", awssdk.ToString(perm.IpProtocol), awssdk.ToInt32(perm.FromPort))
		if awssdk.ToInt32(perm.FromPort) != awssdk.ToInt32(perm.ToPort) {
			port += fmt.Sprintf("-%d", awssdk.ToInt32(perm.ToPort))
		}
		for _, r := range perm.IpRanges {
			rules = append(rules, port+" from "+awssdk.ToString(r.CidrIp))
		}
		for _, r := range perm.Ipv6Ranges {
			rules = append(rules, port+" from "+awssdk.ToString(r.CidrIpv6))
		}
		for _, g := range perm.UserIdGroupPairs {
			rules = append(rules, port+" from group "+awssdk.ToString(g.GroupId))
		}
	}
	slices.Sort(rules)
	return rules
}

// Against moto's EC2 server: the configured source_ranges reach the
// shared security group's rules, which EC2 documents as IpPermissions with
// IpRanges (EC2 API Reference, AuthorizeSecurityGroupIngress and
// IpPermission; "Security group rules" in the EC2 User Guide: a rule whose
// source is a security group admits the instances whose network interfaces
// are in it). A cluster's ports (6443/tcp, 51820/udp) admit the configured
// range and the group's own members, SSH the range only, nothing admits
// 0.0.0.0/0; the group is named provider.SharedName over the ports and the
// sources. Both nodes of the cluster launch into it. A request's own
// ranges (an IPv6 one among them, which EC2 takes as Ipv6Ranges) make
// another group. A provider that meets the group first adopts it and adds
// back the self-reference a revoke took away, and nothing else.
func TestMotoSourceRanges(t *testing.T) {
	url := mototest.URL(t)
	raw := mototest.EC2(url)
	inst := motoInstallation(t)
	const caller = "198.51.100.0/24"
	cfg := aws.Config{Regions: []string{"us-east-1"}, Image: mototest.AMI, SourceRanges: []string{caller}}
	newP := func() (motoProvider, *actionCounter) {
		c := &actionCounter{next: mototest.Client.Transport}
		p, err := aws.New(cfg, aws.WithInstallation(inst),
			aws.WithEndpoint(aws.Endpoint{URL: url, Client: &http.Client{Transport: c}, AccessKeyID: mototest.KeyID, SecretAccessKey: mototest.Secret}))
		if err != nil {
			t.Fatal(err)
		}
		return motoProvider{Provider: p, raw: raw}, c
	}
	p, _ := newP()
	ctx := context.Background()
	offers, err := p.Plan(ctx, &l4)
	if err != nil || len(offers) == 0 {
		t.Fatalf("plan: %d offers, %v", len(offers), err)
	}
	o := offers[0]
	cluster := []provider.Port{{Number: 6443, Protocol: "tcp"}, {Number: 51820, Protocol: "udp"}}
	node := func(vm string) *provider.InstanceSpec {
		spec := newSpec(t, vm)
		spec.Installation, spec.OpenPorts = inst, cluster
		return spec
	}

	var group string
	var ids []string
	for _, vm := range []string{"moto-src-0", "moto-src-1"} {
		spec := node(vm)
		prep, err := p.Prepare(ctx, &o, spec)
		if err != nil {
			t.Fatalf("prepare %s: %v", vm, err)
		}
		if g := securityGroupOf(t, prep); group == "" {
			group = g
		} else if g != group {
			t.Fatalf("cluster node %s in group %s, the first in %s", vm, g, group)
		}
		id, err := p.Create(ctx, &o, prep, spec)
		if err != nil {
			t.Fatalf("create %s: %v", vm, err)
		}
		ids = append(ids, id)
	}
	groups := motoSharedGroups(t, raw, o.Location.Region, inst)
	wantName := provider.SharedName(inst, append([]provider.Port{{Number: 22, Protocol: "tcp"}}, cluster...), []string{caller})
	if len(groups) != 1 || awssdk.ToString(groups[0].GroupId) != group || awssdk.ToString(groups[0].GroupName) != wantName {
		t.Fatalf("moto holds shared groups %+v, want %s named %s", groups, group, wantName)
	}
	want := []string{"tcp/22 from " + caller, "tcp/6443 from " + caller, "tcp/6443 from group " + group,
		"udp/51820 from " + caller, "udp/51820 from group " + group}
	slices.Sort(want)
	if got := motoRules(t, raw, group); !slices.Equal(got, want) {
		t.Fatalf("group %s admits %v, want %v", group, got, want)
	}
	out, err := raw.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: ids})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range out.Reservations {
		for _, in := range r.Instances {
			if len(in.NetworkInterfaces) != 1 || !slices.ContainsFunc(in.NetworkInterfaces[0].Groups,
				func(g types.GroupIdentifier) bool { return awssdk.ToString(g.GroupId) == group }) {
				t.Fatalf("node %s is not in group %s: %+v", awssdk.ToString(in.InstanceId), group, in.NetworkInterfaces)
			}
		}
	}

	// The request's ranges win over the configured ones: another group.
	own := node("moto-src-own")
	own.SourceRanges = []string{"203.0.113.7/32", "2001:db8::/48"}
	prep, err := p.Prepare(ctx, &o, own)
	if err != nil {
		t.Fatal(err)
	}
	other := securityGroupOf(t, prep)
	want = []string{"tcp/22 from 203.0.113.7/32", "tcp/22 from 2001:db8::/48", "tcp/6443 from 203.0.113.7/32",
		"tcp/6443 from 2001:db8::/48", "tcp/6443 from group " + other, "udp/51820 from 203.0.113.7/32",
		"udp/51820 from 2001:db8::/48", "udp/51820 from group " + other}
	slices.Sort(want)
	if got := motoRules(t, raw, other); other == group || !slices.Equal(got, want) {
		t.Fatalf("a request's own ranges: group %s (the configured one is %s) admits %v, want %v", other, group, got, want)
	}

	// A fresh provider adopts the group and adds back the self-reference
	// of 6443 that a revoke took away, and nothing else. (Moto 5.2.1 finds
	// a group pair to revoke only with the description it was authorized
	// with; EC2 needs none.)
	if _, err := raw.RevokeSecurityGroupIngress(ctx, &ec2.RevokeSecurityGroupIngressInput{GroupId: awssdk.String(group),
		IpPermissions: []types.IpPermission{{IpProtocol: awssdk.String("tcp"), FromPort: awssdk.Int32(6443), ToPort: awssdk.Int32(6443),
			UserIdGroupPairs: []types.UserIdGroupPair{{GroupId: awssdk.String(group), Description: awssdk.String("gpuprov 6443/tcp")}}}}}); err != nil {
		t.Fatalf("moto RevokeSecurityGroupIngress: %v", err)
	}
	fresh, count := newP()
	if prep, err = fresh.Prepare(ctx, &o, node("moto-src-2")); err != nil {
		t.Fatal(err)
	}
	if g := securityGroupOf(t, prep); g != group || count.count("AuthorizeSecurityGroupIngress") != 1 {
		t.Fatalf("fresh provider: group %s after %d AuthorizeSecurityGroupIngress, want %s adopted and one rule added",
			g, count.count("AuthorizeSecurityGroupIngress"), group)
	}
	want = []string{"tcp/22 from " + caller, "tcp/6443 from " + caller, "tcp/6443 from group " + group,
		"udp/51820 from " + caller, "udp/51820 from group " + group}
	slices.Sort(want)
	if got := motoRules(t, raw, group); !slices.Equal(got, want) {
		t.Fatalf("adopted group %s admits %v, want %v", group, got, want)
	}

	for i, vm := range []string{"moto-src-0", "moto-src-1"} {
		if err := p.Delete(ctx, o.Location, vm, ids[i:i+1]); err != nil {
			t.Fatal(err)
		}
	}
	for _, vm := range []string{"moto-src-0", "moto-src-1", "moto-src-2", "moto-src-own"} {
		if err := p.Cleanup(ctx, o.Location, vm); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.CleanupShared(ctx, provider.Location{}); err != nil {
		t.Fatalf("CleanupShared: %v", err)
	}
}

// A source_ranges entry that is no CIDR, or has bits past its prefix, is
// refused when the provider is built: the error names the key and the bad
// value, carries one "aws: " prefix, and nothing reaches moto.
func TestMotoBadSourceRangesCreateNothing(t *testing.T) {
	url := mototest.URL(t)
	for _, bad := range []string{"198.51.100.1/24", "198.51.100.0", "not-a-range"} {
		c := &actionCounter{next: mototest.Client.Transport}
		_, err := aws.New(aws.Config{Regions: []string{"us-east-1"}, Image: mototest.AMI, SourceRanges: []string{"203.0.113.0/24", bad}},
			aws.WithInstallation(motoInstallation(t)),
			aws.WithEndpoint(aws.Endpoint{URL: url, Client: &http.Client{Transport: c}, AccessKeyID: mototest.KeyID, SecretAccessKey: mototest.Secret}))
		if err == nil || !strings.HasPrefix(err.Error(), "aws: config: source_ranges: ") || !strings.Contains(err.Error(), fmt.Sprintf("%q", bad)) ||
			strings.Count(err.Error(), "aws:") != 1 {
			t.Fatalf("source_ranges with %q: %v; want one aws: prefix, the key and the value named", bad, err)
		}
		c.mu.Lock()
		sent := len(c.n)
		c.mu.Unlock()
		if sent != 0 {
			t.Fatalf("a refused config sent requests: %v", c.n)
		}
	}
}

// A configured subnet that the region does not hold: moto answers
// DescribeSubnets with InvalidSubnetID.NotFound ("Error codes for the
// Amazon EC2 API", client errors: the subnet ID does not exist), which
// Prepare turns into Unavailable for the region. The error prints the
// adapter's prefix once ("aws: prepare: unavailable: configured subnet …:
// api error InvalidSubnetID.NotFound …"), not again before the vendor's
// text, and still carries the AWS code.
func TestMotoErrorsPrintOnePrefix(t *testing.T) {
	url := mototest.URL(t)
	p, err := aws.New(aws.Config{Regions: []string{"us-east-1"}, Image: mototest.AMI, Subnet: "subnet-0123456789abcdef0"},
		aws.WithInstallation(motoInstallation(t)),
		aws.WithEndpoint(aws.Endpoint{URL: url, Client: mototest.Client, AccessKeyID: mototest.KeyID, SecretAccessKey: mototest.Secret}))
	if err != nil {
		t.Fatal(err)
	}
	offers, err := p.Plan(context.Background(), &l4)
	if err != nil || len(offers) == 0 {
		t.Fatalf("plan: %d offers, %v", len(offers), err)
	}
	_, err = p.Prepare(context.Background(), &offers[0], newSpec(t, "moto-prefix"))
	pe := errKind(t, err, provider.Unavailable)
	if pe.Scope() != provider.ScopeRegion || aws.ErrorCode(err) != "InvalidSubnetID.NotFound" ||
		!strings.HasPrefix(err.Error(), "aws: prepare: unavailable: configured subnet subnet-0123456789abcdef0 is not in this region: ") ||
		strings.Count(err.Error(), "aws:") != 1 {
		t.Fatalf("%v (scope %s, code %q); want one aws: prefix, region scope and the AWS code", err, pe.Scope(), aws.ErrorCode(err))
	}
}
