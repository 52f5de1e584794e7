package gcp

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"cloud.google.com/go/compute/apiv1/computepb"

	"github.com/org/gpuprov/provider"
)

// The firewall rules of a VM. Who may connect is the VM's sources,
// provider.SourcesFor(spec, Config.SourceRanges): the request's ranges, else
// the configured ones, else anywhere (0.0.0.0/0). Prepare makes:
//
//   - the VM's own rule gpuprov-<vm>, INGRESS from the sources to the
//     instances tagged gpuprov-<vm>: tcp:22 and, unless the sources are
//     restricted, the VM's OpenPorts. Cleanup deletes it.
//   - when the sources are restricted (provider.Restricted) and the VM opens
//     ports besides SSH, the installation's shared rule for those ports and
//     sources, named and tagged provider.SharedName(installation, ports,
//     sources): INGRESS to the instances tagged with its name, from the
//     sources and from the instances tagged with its name (sourceTags, which
//     Compute Engine matches against the primary internal addresses of the
//     instances that carry the tag: "VPC firewall rules", source tags), so
//     that a cluster's nodes reach each other's 6443/tcp and 51820/udp. The
//     VM's instance carries the tag. Cleanup leaves it; nothing deletes it
//     (Compute Engine deletes a rule whatever instances it serves, so it
//     cannot be shared under provider.SharedCleaner's contract); it admits
//     nothing once no instance carries its tag.
//
// A rule that exists already (409 alreadyExists, or the operation's
// RESOURCE_ALREADY_EXISTS) is read back (firewalls.get) and, if its
// sources, tags, ports or state are not the ones wanted, replaced whole
// (firewalls.update, "all fields will be updated if using PUT"), so that a
// rule made with other sources, by an earlier version or by hand, never
// admits more than the VM's sources say.

// validateSources checks ranges as provider.ValidateSourceRanges does and
// refuses IPv6 ones: the adapter's instances have IPv4 addresses only (one
// ONE_TO_ONE_NAT access config), and a firewall rule takes IPv4 or IPv6
// ranges, not both ("Use VPC firewall rules", Create VPC firewall rules).
func validateSources(ranges []string) error {
	if err := provider.ValidateSourceRanges(ranges); err != nil {
		return err
	}
	for _, r := range ranges {
		if netip.MustParsePrefix(r).Addr().Is6() {
			return fmt.Errorf("source range %q is IPv6: GCP instances made by gpuprov have IPv4 addresses only", r)
		}
	}
	return nil
}

// firewallRules returns the VM's own rule and, when its sources are
// restricted and it opens ports besides SSH, the shared rule that admits
// those ports from the sources and from its own members (nil otherwise).
// Sources it cannot admit (IPv6) are Unavailable: nothing is made.
func (p *Provider) firewallRules(spec *provider.InstanceSpec) (own, shared *computepb.Firewall, err error) {
	sources := provider.SourcesFor(spec, p.cfg.SourceRanges)
	if err := validateSources(sources); err != nil {
		return nil, nil, p.errorf(provider.Unavailable, "prepare", "%w", err)
	}
	open := openPorts(spec.OpenPorts)
	restricted := provider.Restricted(sources) && len(open) > 0
	name := provider.ResourceName(spec.VM)
	own = &computepb.Firewall{
		Name:         proto(name),
		Network:      proto(p.networkPath()),
		Direction:    proto("INGRESS"),
		Allowed:      allowed(open, !restricted),
		SourceRanges: sources,
		TargetTags:   []string{name},
		Description:  proto(fmt.Sprintf("gpuprov VM %s, installation %s", spec.VM, spec.Installation)),
	}
	if restricted {
		own.Allowed = allowed(nil, true)
		tag := provider.SharedName(p.installation, open, sources)
		shared = &computepb.Firewall{
			Name:         proto(tag),
			Network:      proto(p.networkPath()),
			Direction:    proto("INGRESS"),
			Allowed:      allowed(open, false),
			SourceRanges: sources,
			SourceTags:   []string{tag},
			TargetTags:   []string{tag},
			Description: proto(fmt.Sprintf("gpuprov shared by the VMs of installation %s: %s from %s and the instances tagged %s",
				p.installation, portList(open), strings.Join(sources, " "), tag)),
		}
	}
	return own, shared, nil
}

// openPorts returns ports with their protocols in lower case (tcp when
// empty), without duplicates and without SSH (tcp/22), which the VM's own
// rule opens.
func openPorts(ports []provider.Port) []provider.Port {
	var out []provider.Port
	for _, pt := range ports {
		pt.Protocol = strings.ToLower(cmpOr(pt.Protocol, "tcp"))
		if (pt != provider.Port{Number: 22, Protocol: "tcp"}) && !slices.Contains(out, pt) {
			out = append(out, pt)
		}
	}
	return out
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// portList renders ports as "6443/tcp 51820/udp", sorted.
func portList(ports []provider.Port) string {
	s := make([]string, 0, len(ports))
	for _, pt := range ports {
		s = append(s, pt.String())
	}
	slices.Sort(s)
	return strings.Join(s, " ")
}

// allowed renders ports (as openPorts returns them), with tcp:22 first
// when ssh, grouped by protocol, protocols sorted.
func allowed(ports []provider.Port, ssh bool) []*computepb.Allowed {
	byProto := map[string][]string{}
	if ssh {
		byProto["tcp"] = []string{"22"}
	}
	for _, pt := range ports {
		n := strconv.Itoa(pt.Number)
		if !slices.Contains(byProto[pt.Protocol], n) {
			byProto[pt.Protocol] = append(byProto[pt.Protocol], n)
		}
	}
	out := make([]*computepb.Allowed, 0, len(byProto))
	for _, k := range slices.Sorted(maps.Keys(byProto)) {
		out = append(out, &computepb.Allowed{IPProtocol: proto(k), Ports: byProto[k]})
	}
	return out
}

// ensureFirewall makes fw (firewalls.insert, waited for) or, when a rule of
// its name exists, makes that rule what fw says (repairFirewall).
func (p *Provider) ensureFirewall(ctx context.Context, fw *computepb.Firewall) error {
	cctx, cancel := p.call(ctx)
	op, err := p.firewalls.Insert(cctx, &computepb.InsertFirewallRequest{Project: p.cfg.Project, FirewallResource: fw}, noRetry)
	cancel()
	switch {
	case err != nil && isAlreadyExists(err):
		return p.repairFirewall(ctx, fw)
	case err != nil:
		return p.classify("prepare", err)
	}
	oe, werr := p.wait(ctx, op)
	switch {
	case oe != nil && IsCode(oe, "RESOURCE_ALREADY_EXISTS"):
		return p.repairFirewall(ctx, fw)
	case oe != nil:
		return p.classifyOp("prepare", oe)
	case werr != nil && !p.stillRunning(ctx, werr):
		return p.classify("prepare", werr)
	}
	return nil
}

// repairFirewall reads the existing rule of fw's name and, unless it is
// what fw says (sameRule), replaces it with fw (firewalls.update, waited
// for). A rule deleted in between is Transient: the next Prepare makes it.
func (p *Provider) repairFirewall(ctx context.Context, fw *computepb.Firewall) error {
	cctx, cancel := p.call(ctx)
	got, err := p.firewalls.Get(cctx, &computepb.GetFirewallRequest{Project: p.cfg.Project, Firewall: fw.GetName()}, noRetry)
	cancel()
	if err != nil {
		pe := p.classify("prepare", err)
		if isNotFound(err) {
			pe.Kind = provider.Transient // deleted since the insert found it
		}
		return pe
	}
	if sameRule(got, fw) {
		p.log.Debug("gcp: firewall rule exists; adopted", "provider", p.name, "firewall", fw.GetName())
		return nil
	}
	p.log.Info("gcp: firewall rule exists with other sources, tags or ports; replacing it", "provider", p.name,
		"firewall", fw.GetName(), "had_sources", got.GetSourceRanges(), "sources", fw.GetSourceRanges())
	cctx, cancel = p.call(ctx)
	op, err := p.firewalls.Update(cctx, &computepb.UpdateFirewallRequest{Project: p.cfg.Project, Firewall: fw.GetName(),
		FirewallResource: fw}, noRetry)
	cancel()
	if err != nil {
		return p.classify("prepare", err)
	}
	oe, werr := p.wait(ctx, op)
	switch {
	case oe != nil:
		return p.classifyOp("prepare", oe)
	case werr != nil && !p.stillRunning(ctx, werr):
		return p.classify("prepare", werr)
	}
	return nil
}

// sameRule reports whether got admits what want does and nothing else:
// the same source ranges, source tags and target tags (as sets), the same
// protocols and ports, and not disabled.
func sameRule(got, want *computepb.Firewall) bool {
	set := func(s []string) []string { return slices.Compact(slices.Sorted(slices.Values(s))) }
	ports := func(fw *computepb.Firewall) map[string][]string {
		m := map[string][]string{}
		for _, a := range fw.GetAllowed() {
			k := strings.ToLower(a.GetIPProtocol())
			m[k] = set(append(m[k], a.GetPorts()...))
		}
		return m
	}
	return !got.GetDisabled() && len(got.GetDenied()) == 0 &&
		slices.Equal(set(got.GetSourceRanges()), set(want.GetSourceRanges())) &&
		slices.Equal(set(got.GetSourceTags()), set(want.GetSourceTags())) &&
		slices.Equal(set(got.GetTargetTags()), set(want.GetTargetTags())) &&
		maps.EqualFunc(ports(got), ports(want), slices.Equal)
}
