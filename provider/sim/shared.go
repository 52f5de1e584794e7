package sim

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"

	"github.com/org/gpuprov/provider"
)

// sharedFirewall returns the name of the installation's firewall opening
// SSH and ports to sources in region, putting it first unless this adapter
// already did: the thousandth VM of a region makes no firewall call. When
// sources are restricted (provider.Restricted), ports other than SSH are
// also open to the firewall's own instances (peers), so that a cluster's
// nodes reach each other's API server and tunnels.
func (p *Provider) sharedFirewall(ctx context.Context, region string, ports []provider.Port, sources []string) (string, error) {
	all := append([]provider.Port{{Number: 22, Protocol: "tcp"}}, ports...)
	name := provider.SharedName(p.installation, all, sources)
	peers := provider.Restricted(sources)
	key := region + "/" + name
	p.firewallMu.Lock()
	known := p.firewalls[key]
	p.firewallMu.Unlock()
	if known {
		return name, nil
	}
	_, err, _ := p.firewallMade.Do(key, func() (any, error) {
		var wire []wirePort
		for i, pt := range all {
			w := wirePort{Number: pt.Number, Protocol: pt.Protocol, Peers: peers && i > 0}
			if !slices.ContainsFunc(wire, func(x wirePort) bool { return x.Number == w.Number && x.Protocol == w.Protocol }) {
				wire = append(wire, w)
			}
		}
		if err := p.do(ctx, call{op: "prepare", method: http.MethodPut, path: "firewalls/" + url.PathEscape(name),
			query: url.Values{"region": {region}},
			in:    wireFirewall{Ports: wire, Sources: sources, Labels: provider.SharedLabels(p.installation)}}); err != nil {
			return nil, err
		}
		p.firewallMu.Lock()
		if p.firewalls == nil {
			p.firewalls = map[string]bool{}
		}
		p.firewalls[key] = true
		p.firewallMu.Unlock()
		return nil, nil
	})
	return name, err
}

// forgetFirewall drops a firewall that turned out to be gone.
func (p *Provider) forgetFirewall(region, name string) {
	p.firewallMu.Lock()
	delete(p.firewalls, region+"/"+name)
	p.firewallMu.Unlock()
}

// CleanupShared deletes the installation's shared firewalls in loc's
// region (every region for a zero Location). The server refuses to delete
// one that a live instance uses (409 conflict): it is left, and the error
// matches provider.ErrInUse. What is gone already is success.
func (p *Provider) CleanupShared(ctx context.Context, loc provider.Location) error {
	q := url.Values{}
	if loc.Region != "" {
		q.Set("region", loc.Region)
	}
	var resp struct {
		Firewalls []wireFirewallView `json:"firewalls"`
	}
	if err := p.do(ctx, call{op: "cleanup", method: http.MethodGet, path: "firewalls", query: q, out: &resp}); err != nil {
		return err
	}
	var errs, inUse []error
	for _, fw := range resp.Firewalls {
		if fw.Labels[provider.LabelShared] != "true" || fw.Labels[provider.LabelInstallation] != p.installation {
			continue
		}
		err := p.do(ctx, call{op: "cleanup", method: http.MethodDelete, path: "firewalls/" + url.PathEscape(fw.Name),
			query: url.Values{"region": {fw.Region}}})
		switch {
		case err == nil || isNotFound(err):
			p.forgetFirewall(fw.Region, fw.Name)
		case IsAPIError(err, "conflict"):
			inUse = append(inUse, err)
		default:
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return errors.Join(append(errs, inUse...)...) // a real failure's kind first
	}
	if len(inUse) > 0 {
		return &provider.Error{Kind: provider.Transient, Provider: p.name, Op: "cleanup",
			Err: fmt.Errorf("%w: %w", provider.ErrInUse, errors.Join(apiErrors(inUse)...))}
	}
	return nil
}
