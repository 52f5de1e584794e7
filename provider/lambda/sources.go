package lambda

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/org/gpuprov/provider"
)

// Who may connect. Every rule of a Lambda firewall ruleset admits one
// source network (FirewallRule.source_network, "format": "ipv4network" in
// testdata/openapi.json, #/components/schemas/FirewallRule): an IPv4 CIDR,
// or a bare IPv4 address, which Lambda reads as a /32. A rule cannot name
// the instances behind a ruleset as its source, so when the sources are
// restricted a cluster's nodes must themselves be inside them to reach
// each other's OpenPorts (docs/clouds/lambda.md).

// configuredSources returns the ranges cfg restricts the rulesets to,
// sorted: SourceRanges, else SourceNetwork (its older single-range form);
// nil when neither is set, so that provider.DefaultSourceRanges apply. It
// names the key and the value Lambda cannot take: a range that is not a
// CIDR, an IPv6 range, both keys set to different ranges, or a restricting
// range with NoFirewall, which leaves nothing to apply it.
func configuredSources(cfg Config) ([]string, error) {
	key, ranges := "source_ranges", cfg.SourceRanges
	if cfg.SourceNetwork != "" {
		network := hostRange(cfg.SourceNetwork)
		if len(ranges) > 0 && !slices.Equal(ranges, []string{network}) {
			return nil, fmt.Errorf("source_network %q and source_ranges %q are both set: source_network is the older form of "+
				"source_ranges; keep source_ranges", cfg.SourceNetwork, ranges)
		}
		if len(ranges) == 0 {
			key, ranges = "source_network", []string{network}
		}
	}
	if len(ranges) == 0 {
		return nil, nil
	}
	if err := provider.ValidateSourceRanges(ranges); err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	if err := ipv4Only(ranges); err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	sources := provider.SourcesFor(&provider.InstanceSpec{}, ranges)
	if cfg.NoFirewall && provider.Restricted(sources) {
		return nil, fmt.Errorf("%s: %q restrict who may connect, but no_firewall is set: no ruleset would apply them", key, ranges)
	}
	return sources, nil
}

// hostRange is s as a CIDR: a bare address is its /32 (or /128), as Lambda
// reads a source_network without a mask; anything else is s.
func hostRange(s string) string {
	if a, err := netip.ParseAddr(s); err == nil {
		return netip.PrefixFrom(a, a.BitLen()).String()
	}
	return s
}

// ipv4Only names the first range (checked CIDRs) that is not IPv4.
func ipv4Only(ranges []string) error {
	for _, r := range ranges {
		if pfx, err := netip.ParsePrefix(r); err == nil && !pfx.Addr().Is4() {
			return fmt.Errorf("source range %q is IPv6: Lambda's firewall rules admit IPv4 sources only", r)
		}
	}
	return nil
}

// sourcesFor returns the sources spec's ruleset admits
// (provider.SourcesFor of the request's and the configured ranges). A
// request's range that is not an IPv4 CIDR, or any request range with
// NoFirewall, is InvalidRequest: Lambda cannot apply it, and admitting more than asked is
// never the answer.
func (p *Provider) sourcesFor(spec *provider.InstanceSpec) ([]string, error) {
	if len(spec.SourceRanges) > 0 {
		if p.cfg.NoFirewall {
			return nil, provider.Errorf(provider.InvalidRequest, p.base.Name, "prepare",
				"source ranges %q: no_firewall is set, so no ruleset applies them", spec.SourceRanges)
		}
		err := provider.ValidateSourceRanges(spec.SourceRanges)
		if err == nil {
			err = ipv4Only(spec.SourceRanges)
		}
		if err != nil {
			return nil, provider.Errorf(provider.InvalidRequest, p.base.Name, "prepare", "%w", err)
		}
	}
	return provider.SourcesFor(spec, p.sources), nil
}
