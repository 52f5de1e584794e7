package provider

import (
	"fmt"
	"net/netip"
	"slices"
)

// DefaultSourceRanges are the sources a firewall admits when neither the
// request nor the provider's config restricts them: every IPv4 address, so
// that a launch works out of the box. SSH is still key-only and host-key
// pinned; a cluster's API server still asks for its token.
var DefaultSourceRanges = []string{"0.0.0.0/0"}

// ValidateSourceRanges checks that every range is a CIDR ("203.0.113.0/24",
// "2001:db8::/32") with no host bits set, and names the first that is not.
// Callers check a config's ranges when it is built and a request's before
// anything is journaled.
func ValidateSourceRanges(ranges []string) error {
	for _, r := range ranges {
		pfx, err := netip.ParsePrefix(r)
		if err != nil {
			return fmt.Errorf("source range %q is not a CIDR (want an address and a prefix length, such as 203.0.113.0/24)", r)
		}
		if pfx.Masked() != pfx {
			return fmt.Errorf("source range %q has bits set past its prefix length: did you mean %s?", r, pfx.Masked())
		}
	}
	return nil
}

// SourcesFor returns the sources a VM's firewall admits: the request's
// (spec.SourceRanges) if it gave any, else the provider's configured ranges,
// else DefaultSourceRanges; sorted, without duplicates.
func SourcesFor(spec *InstanceSpec, configured []string) []string {
	switch {
	case len(spec.SourceRanges) > 0:
		return normalSources(spec.SourceRanges)
	case len(configured) > 0:
		return normalSources(configured)
	}
	return slices.Clone(DefaultSourceRanges)
}

// Restricted reports whether sources admit less than DefaultSourceRanges,
// in which case OpenPorts also admit the instances behind the same shared
// firewall (see InstanceSpec.SourceRanges).
func Restricted(sources []string) bool {
	return !slices.Equal(normalSources(sources), DefaultSourceRanges)
}

func normalSources(sources []string) []string {
	if len(sources) == 0 {
		return slices.Clone(DefaultSourceRanges)
	}
	out := slices.Clone(sources)
	slices.Sort(out)
	return slices.Compact(out)
}
