package simserver

import (
	"net/http"
	"net/netip"
	"slices"
)

// DefaultSources are the sources of a firewall whose PUT names none: every
// IPv4 address.
var DefaultSources = []string{"0.0.0.0/0"}

// checkSources returns a firewall request's sources as the firewall keeps
// them: sorted, without duplicates, DefaultSources when there are none. A
// source that is not a CIDR ("203.0.113.0/24", "2001:db8::/32"), or that
// has bits set past its prefix length, is 400 invalid_request.
func checkSources(sources []string) ([]string, *apiError) {
	if len(sources) == 0 {
		return slices.Clone(DefaultSources), nil
	}
	for _, src := range sources {
		pfx, err := netip.ParsePrefix(src)
		if err != nil || pfx.Masked() != pfx {
			return nil, errorf(http.StatusBadRequest, CodeInvalidRequest, "invalid source %q: want a CIDR with no bits set past its prefix length", src)
		}
	}
	out := slices.Clone(sources)
	slices.Sort(out)
	return slices.Compact(out), nil
}

// Admits reports whether f lets a connection to port number/protocol in:
// from src, an address inside one of f's Sources, or, when peer is true
// (the connection comes from an instance that uses f), to a port whose
// Peers is set. The sim does not enforce it, since every SSH endpoint is
// on loopback: it is the firewall's rules as a cloud would apply them.
func (f Firewall) Admits(number int, protocol string, src netip.Addr, peer bool) bool {
	open, peers := false, false
	for _, p := range f.Ports {
		if p.Number == number && p.Protocol == protocol {
			open, peers = true, peers || p.Peers
		}
	}
	if !open {
		return false
	}
	if peer && peers {
		return true
	}
	sources := f.Sources
	if len(sources) == 0 {
		sources = DefaultSources
	}
	return slices.ContainsFunc(sources, func(s string) bool {
		pfx, err := netip.ParsePrefix(s)
		return err == nil && pfx.Contains(src)
	})
}
