package lambda

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"

	"golang.org/x/sync/singleflight"

	"github.com/org/gpuprov/provider"
)

// The shared firewall (provider.SharedCleaner). Every VM of the
// installation in a region that opens the same ports to the same sources
// is launched with one firewall ruleset, named
// provider.SharedName(installation, ports, sources), instead of one
// ruleset per VM. Lambda's rulesets carry no tags, so the installation
// lives in the name, as in SideName: the name is a hash of the
// installation, the port set and the source set, and a ruleset is this
// installation's only when its name is the SharedName of the installation
// and of the ports and sources its own rules name (ownShared). Lambda
// refuses to delete a ruleset an instance uses (DELETE
// /firewall-rulesets/{id} answers 400
// firewall-rulesets/firewall-ruleset-in-use), which is what makes removing
// it safe while other processes of the installation launch with it.

// sharedPrefix begins every provider.SharedName. A per-VM SideName
// (gpuprov-<vm>-<5 characters>) never has that form: SharedName is the
// prefix and 12 hex digits, with no '-' after it.
const sharedPrefix = "gpuprov-fw-"

// rulesetCache remembers the id of each shared ruleset this provider made
// or adopted, by region and name, so that a Prepare in a region whose
// ruleset it knows sends no firewall request. Concurrent first Prepares of
// one key share one lookup (and at most one create) through group.
type rulesetCache struct {
	mu    sync.Mutex
	ids   map[string]string // rulesetKey(region, name) → ruleset id
	group singleflight.Group
}

func rulesetKey(region, name string) string { return region + "/" + name }

func (c *rulesetCache) get(key string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	id, ok := c.ids[key]
	return id, ok
}

func (c *rulesetCache) put(key, id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ids == nil {
		c.ids = map[string]string{}
	}
	c.ids[key] = id
}

// forget drops key if it still names id: an entry another Prepare has
// replaced since is left alone.
func (c *rulesetCache) forget(key, id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ids[key] == id {
		delete(c.ids, key)
	}
}

// sharedRuleset returns the id and name of the installation's ruleset for
// ports and sources in region, admitting sources to SSH and ports: from
// memory when this provider made or adopted it before (no request), else
// found by name and sources in GET /firewall-rulesets, else made with POST
// /firewall-rulesets.
func (p *Provider) sharedRuleset(ctx context.Context, region string, ports []provider.Port, sources []string) (id, name string, err error) {
	ports, rules, err := p.rules(ports, sources)
	if err != nil {
		return "", "", err
	}
	name = provider.SharedName(p.base.Installation, ports, sources)
	key := rulesetKey(region, name)
	if id, ok := p.rulesets.get(key); ok {
		return id, name, nil
	}
	v, err, _ := p.rulesets.group.Do(key, func() (any, error) {
		if id, ok := p.rulesets.get(key); ok { // a lookup that ended just before this one began
			return id, nil
		}
		rs, err := p.ensureRuleset(ctx, name, region, sources, rules)
		if err != nil {
			return "", err
		}
		p.rulesets.put(key, rs.ID)
		return rs.ID, nil
	})
	if err != nil {
		return "", "", err
	}
	return v.(string), name, nil
}

// ensureRuleset adopts the ruleset named name in region whose rules admit
// sources (the oldest, when processes racing on an empty cache made two)
// or creates it with rules. A ruleset of that name admitting other sources
// is one an earlier version made, whose name did not depend on
// source_network: it is not adopted, and CleanupShared removes it once no
// instance uses it.
func (p *Provider) ensureRuleset(ctx context.Context, name, region string, sources []string, rules []wireRule) (wireRuleset, error) {
	list, err := p.listRulesets(ctx, "prepare")
	if err != nil {
		return wireRuleset{}, err
	}
	var found []wireRuleset
	for _, rs := range list {
		if rs.Name == name && rs.Region.Name == region && slices.Equal(sourcesOf(rs.Rules), sources) {
			found = append(found, rs)
		}
	}
	if len(found) > 0 {
		return slices.MinFunc(found, func(a, b wireRuleset) int {
			return cmp.Or(cmp.Compare(a.Created, b.Created), cmp.Compare(a.ID, b.ID))
		}), nil
	}
	var out struct {
		Data wireRuleset `json:"data"`
	}
	in := map[string]any{"name": name, "region": region, "rules": rules}
	if err := p.call(ctx, "prepare", http.MethodPost, "/firewall-rulesets", nil, in, &out); err != nil {
		return wireRuleset{}, err
	}
	p.base.Log.Info("lambda: created shared firewall ruleset", "provider", p.base.Name, "ruleset", name, "region", region)
	return out.Data, nil
}

// rules returns ports with their protocols in lower case (the form the
// ruleset's name is derived from, so that "TCP" and "tcp" share one) and
// the ruleset's rules, one per (port, source): SSH from each source, then
// each port from each source. A FirewallRule takes one source_network
// (testdata/openapi.json, #/components/schemas/FirewallRule: protocol,
// port_range [min, max], source_network, description, all but port_range
// required). NetworkProtocol is the enum tcp, udp, icmp, all, in lower
// case; a port range goes with tcp and udp only, so any other protocol is
// refused before a request.
func (p *Provider) rules(ports []provider.Port, sources []string) ([]provider.Port, []wireRule, error) {
	norm := make([]provider.Port, 0, len(ports))
	var rules []wireRule
	for _, src := range sources {
		rules = append(rules, wireRule{Protocol: "tcp", PortRange: []int{22, 22}, SourceNetwork: src, Description: "gpuprov: ssh"})
	}
	for _, pt := range ports {
		proto := strings.ToLower(pt.Protocol)
		if proto != "tcp" && proto != "udp" {
			return nil, nil, provider.Errorf(provider.InvalidRequest, p.base.Name, "prepare",
				"port %s: Lambda firewall rules open ports for tcp or udp only", pt)
		}
		pt.Protocol = proto
		norm = append(norm, pt)
		for _, src := range sources {
			rules = append(rules, wireRule{Protocol: proto, PortRange: []int{pt.Number, pt.Number},
				SourceNetwork: src, Description: "gpuprov: " + pt.String()})
		}
	}
	return norm, rules, nil
}

// sourcesOf returns the sources rules admit, as a sorted set (a bare
// address as its /32).
func sourcesOf(rules []wireRule) []string {
	var out []string
	for _, r := range rules {
		out = append(out, hostRange(r.SourceNetwork))
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// ownShared reports whether rs is one of this installation's shared
// rulesets: its name is the SharedName of the installation, of the ports
// its rules open (with or without the SSH rule's 22/tcp, which is in the
// port set only when a VM asked for it besides SSH) and of the sources
// they admit, or of those ports alone (what an earlier version named a
// ruleset, whatever its source_network). Another installation's ruleset, a
// per-VM one or one whose ports were edited is not.
func (p *Provider) ownShared(rs wireRuleset) bool {
	if !strings.HasPrefix(rs.Name, sharedPrefix) {
		return false
	}
	ssh := provider.Port{Number: 22, Protocol: "tcp"}
	var ports []provider.Port
	for _, r := range rs.Rules {
		if len(r.PortRange) != 2 || r.PortRange[0] != r.PortRange[1] {
			return false // gpuprov opens single ports only
		}
		ports = append(ports, provider.Port{Number: r.PortRange[0], Protocol: r.Protocol})
	}
	withoutSSH := slices.DeleteFunc(slices.Clone(ports), func(pt provider.Port) bool { return pt == ssh })
	for _, sources := range [][]string{sourcesOf(rs.Rules), nil} {
		if provider.SharedName(p.base.Installation, withoutSSH, sources) == rs.Name ||
			provider.SharedName(p.base.Installation, ports, sources) == rs.Name {
			return true
		}
	}
	return false
}

// sharedGone answers a launch refused with global/object-does-not-exist
// (launchErr) that named the shared ruleset pr.RulesetID. Lambda's answer
// (ApiErrorLaunchResourceNotFound) does not say which resource it could not
// find, and its message is no contract, so the ruleset listing decides:
// when the ruleset is not in pr.Region any more, the cache forgets it and
// the error is Transient and matches provider.ErrSharedGone (the core
// prepares again and sends the launch again); when it is there, something
// else is missing (the key, the type, the image) and launchErr stands. A
// listing that fails is returned instead: the launch did not land, and the
// core sends it again after its backoff.
func (p *Provider) sharedGone(ctx context.Context, pr prepared, launchErr error) error {
	list, err := p.listRulesets(ctx, "create")
	if err != nil {
		p.base.Log.Warn("lambda: launch refused and the firewall rulesets could not be listed", "provider", p.base.Name,
			"region", pr.Region, "ruleset", pr.RulesetName, "err", launchErr)
		return err
	}
	if slices.ContainsFunc(list, func(rs wireRuleset) bool { return rs.ID == pr.RulesetID && rs.Region.Name == pr.Region }) {
		return launchErr
	}
	p.rulesets.forget(rulesetKey(pr.Region, pr.RulesetName), pr.RulesetID)
	cause := launchErr
	var ae *APIError
	if errors.As(launchErr, &ae) {
		cause = ae
	}
	return &provider.Error{Kind: provider.Transient, Op: "create", Provider: p.base.Name,
		Err: fmt.Errorf("firewall ruleset %s (%s) in %s: %w: %w", pr.RulesetName, pr.RulesetID, pr.Region, provider.ErrSharedGone, cause)}
}

// CleanupShared implements provider.SharedCleaner: it deletes this
// installation's shared rulesets (ownShared) in loc's region, or in every
// configured region (every region, when none is configured) for a zero
// loc, with one GET /firewall-rulesets and one DELETE
// /firewall-rulesets/{id} each. Lambda refuses to delete a ruleset an
// instance uses (400 firewall-rulesets/firewall-ruleset-in-use): such a
// ruleset is left, and reported with a Transient error matching
// provider.ErrInUse once every other one was tried. A ruleset already gone
// (404) is success. Any other failure is returned in preference to an
// in-use one, so that the core, which ignores ErrInUse, does not hide it.
// The memory of what it deleted is dropped.
func (p *Provider) CleanupShared(ctx context.Context, loc provider.Location) error {
	list, err := p.listRulesets(ctx, "cleanup")
	if err != nil {
		return err
	}
	slices.SortFunc(list, func(a, b wireRuleset) int { return cmp.Compare(a.ID, b.ID) })
	var failed, inUse error
	var busy []string
	for _, rs := range list {
		if !p.inScope(rs.Region.Name, loc) || !p.ownShared(rs) {
			continue
		}
		err := p.call(ctx, "cleanup", http.MethodDelete, "/firewall-rulesets/"+url.PathEscape(rs.ID), nil, nil, nil)
		switch {
		case err == nil || isGone(err):
			p.rulesets.forget(rulesetKey(rs.Region.Name, rs.Name), rs.ID)
			if err == nil {
				p.base.Log.Info("lambda: deleted shared firewall ruleset", "provider", p.base.Name, "ruleset", rs.Name, "region", rs.Region.Name)
			}
		case IsAPIError(err, CodeRulesetInUse):
			busy = append(busy, rs.Name+" in "+rs.Region.Name)
			if inUse == nil {
				inUse = err
			}
		case failed == nil:
			failed = err
		}
	}
	if failed != nil {
		return failed
	}
	if inUse != nil {
		var ae *APIError
		if errors.As(inUse, &ae) {
			inUse = ae
		}
		return &provider.Error{Kind: provider.Transient, Op: "cleanup", Provider: p.base.Name,
			Err: fmt.Errorf("firewall rulesets %s: %w by instances: %w", strings.Join(busy, ", "), provider.ErrInUse, inUse)}
	}
	return nil
}

// inScope reports whether region is one CleanupShared of loc covers.
func (p *Provider) inScope(region string, loc provider.Location) bool {
	if loc.Region != "" {
		return region == loc.Region
	}
	return len(p.cfg.Regions) == 0 || slices.Contains(p.cfg.Regions, region)
}

// listRulesets returns every firewall ruleset of the account (GET
// /firewall-rulesets; the API does not paginate it).
func (p *Provider) listRulesets(ctx context.Context, op string) ([]wireRuleset, error) {
	var out struct {
		Data []wireRuleset `json:"data"`
	}
	if err := p.call(ctx, op, http.MethodGet, "/firewall-rulesets", nil, nil, &out); err != nil {
		return nil, err
	}
	return out.Data, nil
}
