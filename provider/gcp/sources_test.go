package gcp_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"cloud.google.com/go/compute/apiv1/computepb"

	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/gcp"
)

// admits returns who the mock's rules let reach an instance carrying tags
// on port ("6443/tcp"): "range <CIDR>" and "tag <tag>" for every INGRESS
// rule that is not disabled, targets one of the tags and allows the port
// (Firewall.targetTags, sourceRanges and sourceTags as the discovery
// document describes them: a rule with both admits a source in the ranges
// OR an instance with one of the source tags), sorted.
func (c *cloud) admits(tags []string, port string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	number, proto, _ := strings.Cut(port, "/")
	var out []string
	for _, fw := range c.firewalls {
		if fw.GetDirection() != "INGRESS" || fw.GetDisabled() ||
			!slices.ContainsFunc(fw.GetTargetTags(), func(t string) bool { return slices.Contains(tags, t) }) ||
			!slices.ContainsFunc(fw.GetAllowed(), func(a *computepb.Allowed) bool {
				return a.GetIPProtocol() == proto && slices.Contains(a.GetPorts(), number)
			}) {
			continue
		}
		for _, r := range fw.GetSourceRanges() {
			out = append(out, "range "+r)
		}
		for _, t := range fw.GetSourceTags() {
			out = append(out, "tag "+t)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// checkBodies checks every firewalls.insert, firewalls.update and
// instances.insert the mock received against the discovery document.
func checkBodies(t *testing.T, c *cloud) {
	t.Helper()
	doc := loadDiscovery(t)
	for _, r := range c.calls("/compute/v1/projects/" + project + "/") {
		var m *discoveryMethod
		switch {
		case r.Method == "POST" && strings.HasSuffix(r.Path, "/global/firewalls"):
			m = doc.method(t, "firewalls", "insert")
		case r.Method == "PUT" && strings.Contains(r.Path, "/global/firewalls/"):
			m = doc.method(t, "firewalls", "update")
		case r.Method == "POST" && strings.HasSuffix(r.Path, "/instances"):
			m = doc.method(t, "instances", "insert")
		default:
			continue
		}
		// The body is not printed: an instance's user-data holds a host key.
		if v := doc.checkRequest(m, url.Values(r.Query), r.Body); len(v) > 0 {
			t.Errorf("%s %s breaks the discovery document (revision %s):\n%s", r.Method, r.Path, doc.Revision, joinViolations(v))
		}
	}
}

// instanceTags returns the network tags of the instance inserted as vm.
func (c *cloud) instanceTags(t *testing.T, vm string) []string {
	t.Helper()
	for _, in := range c.live() {
		if in.GetName() == provider.ResourceName(vm) {
			return in.GetTags().GetItems()
		}
	}
	t.Fatalf("no instance of %s", vm)
	return nil
}

// The configured source_ranges reach the firewall rules the API receives
// (firewalls.insert bodies checked against the discovery document). A
// cluster's two nodes (OpenPorts 6443/tcp, 51820/udp) each get their own
// rule, SSH from the configured range only, and share one rule, named and
// tagged provider.SharedName over those ports and the range, whose
// sourceRanges are the range and whose sourceTags and targetTags are its
// own tag, which both instances carry: 6443 and 51820 admit the range and
// the nodes, SSH the range, nothing admits 0.0.0.0/0. The second node's
// Prepare finds the shared rule (409 alreadyExists), reads it back and
// keeps it. A request's own ranges win over the configured ones.
func TestSourceRangesReachTheFirewall(t *testing.T) {
	const caller = "198.51.100.0/24"
	c, mt := newCloud(t)
	c.autoRun = true
	p := c.provider(t, mt, gcp.Config{SourceRanges: []string{caller}})
	ctx := context.Background()
	o := offerIn(t, p, l4, "us-central1-a", false)
	cluster := []provider.Port{{Number: 6443, Protocol: "tcp"}, {Number: 51820, Protocol: "udp"}}
	shared := provider.SharedName(installation, cluster, []string{caller})
	for _, vm := range []string{"node-0", "node-1"} {
		spec := newSpec(t, vm)
		prep, err := p.Prepare(ctx, &o, spec)
		if err != nil {
			t.Fatalf("prepare %s: %v", vm, err)
		}
		if _, err := p.Create(ctx, &o, prep, spec); err != nil {
			t.Fatalf("create %s: %v", vm, err)
		}
		if tags := c.instanceTags(t, vm); !slices.Equal(tags, []string{provider.ResourceName(vm), shared}) {
			t.Fatalf("%s carries tags %v, want its own and %s", vm, tags, shared)
		}
	}
	checkBodies(t, c)
	if fws := c.firewallNames(); !slices.Equal(fws, slices.Sorted(slices.Values([]string{"gpuprov-node-0", "gpuprov-node-1", shared}))) {
		t.Fatalf("firewalls %v", fws)
	}
	fw := c.firewall(shared)
	if !slices.Equal(fw.GetSourceRanges(), []string{caller}) || !slices.Equal(fw.GetSourceTags(), []string{shared}) ||
		!slices.Equal(fw.GetTargetTags(), []string{shared}) || fw.GetDirection() != "INGRESS" {
		t.Fatalf("shared rule %v", fw)
	}
	if n := len(c.calls("PUT /compute/v1/projects/" + project + "/global/firewalls/")); n != 0 {
		t.Fatalf("%d firewalls.update for rules that were as wanted", n)
	}
	for _, vm := range []string{"node-0", "node-1"} {
		tags := c.instanceTags(t, vm)
		for port, want := range map[string][]string{
			"22/tcp":    {"range " + caller},
			"6443/tcp":  {"range " + caller, "tag " + shared},
			"51820/udp": {"range " + caller, "tag " + shared},
		} {
			if got := c.admits(tags, port); !slices.Equal(got, want) {
				t.Fatalf("%s's %s admits %v, want %v", vm, port, got, want)
			}
		}
	}

	// The request's ranges win over the configured ones.
	own := newSpec(t, "own")
	own.SourceRanges = []string{"203.0.113.7/32"}
	prep, err := p.Prepare(ctx, &o, own)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Create(ctx, &o, prep, own); err != nil {
		t.Fatal(err)
	}
	tags := c.instanceTags(t, "own")
	if got, want := c.admits(tags, "22/tcp"), []string{"range 203.0.113.7/32"}; !slices.Equal(got, want) {
		t.Fatalf("a request's own range: SSH admits %v, want %v", got, want)
	}
	if got := c.admits(tags, "6443/tcp"); len(got) != 2 || got[0] != "range 203.0.113.7/32" || got[1] == "tag "+shared {
		t.Fatalf("a request's own range: 6443 admits %v, want that range and its own shared rule's tag", got)
	}
	checkBodies(t, c)
}

// Without source ranges the rules are as before: the VM's own rule opens
// SSH and its OpenPorts from anywhere and no shared rule is made.
func TestDefaultSourcesOpenEverythingToAnywhere(t *testing.T) {
	c, mt := newCloud(t)
	p := c.provider(t, mt, gcp.Config{})
	o := offerIn(t, p, l4, "us-central1-a", false)
	if _, err := p.Prepare(context.Background(), &o, newSpec(t, "open")); err != nil {
		t.Fatal(err)
	}
	if fws := c.firewallNames(); !slices.Equal(fws, []string{"gpuprov-open"}) {
		t.Fatalf("firewalls %v, want the VM's own", fws)
	}
	for _, port := range []string{"22/tcp", "6443/tcp", "51820/udp"} {
		if got := c.admits([]string{"gpuprov-open"}, port); !slices.Equal(got, []string{"range 0.0.0.0/0"}) {
			t.Fatalf("%s admits %v, want 0.0.0.0/0", port, got)
		}
	}
}

// A rule that exists when Prepare makes it (made by an earlier version
// from anywhere, or edited by hand) is read back (firewalls.get) and, since
// it admits more than the VM's sources, replaced whole (firewalls.update,
// PUT: "all fields will be updated if using PUT", the discovery document's
// method description; the body checked against it): afterwards SSH admits
// the configured range only. A rule already as wanted is kept as it is.
func TestExistingRuleIsRepairedToTheSources(t *testing.T) {
	const caller = "198.51.100.0/24"
	c, mt := newCloud(t)
	p := c.provider(t, mt, gcp.Config{SourceRanges: []string{caller}})
	c.mu.Lock()
	c.firewalls["gpuprov-old"] = &computepb.Firewall{Name: strp("gpuprov-old"), Direction: strp("INGRESS"),
		Network:      strp("projects/" + project + "/global/networks/default"),
		Allowed:      []*computepb.Allowed{{IPProtocol: strp("tcp"), Ports: []string{"22", "6443"}}, {IPProtocol: strp("udp"), Ports: []string{"51820"}}},
		SourceRanges: []string{"0.0.0.0/0"}, TargetTags: []string{"gpuprov-old"}}
	c.mu.Unlock()
	o := offerIn(t, p, l4, "us-central1-a", false)
	if _, err := p.Prepare(context.Background(), &o, newSpec(t, "old")); err != nil {
		t.Fatal(err)
	}
	if n := len(c.calls("PUT /compute/v1/projects/" + project + "/global/firewalls/gpuprov-old")); n != 1 {
		t.Fatalf("%d firewalls.update of the open rule, want 1", n)
	}
	checkBodies(t, c)
	if got := c.admits([]string{"gpuprov-old"}, "22/tcp"); !slices.Equal(got, []string{"range " + caller}) {
		t.Fatalf("SSH admits %v after the repair, want %s only", got, caller)
	}
	if got := c.admits([]string{"gpuprov-old"}, "6443/tcp"); len(got) != 0 {
		t.Fatalf("the VM's own rule still admits 6443 from %v; the shared rule admits it", got)
	}
	if _, err := p.Prepare(context.Background(), &o, newSpec(t, "old")); err != nil {
		t.Fatal(err)
	}
	if n := len(c.calls("PUT /compute/v1/projects/" + project + "/global/firewalls/")); n != 1 {
		t.Fatalf("%d firewalls.update in all, want the one repair", n)
	}
}

// A source range that is no IPv4 CIDR is refused when the provider is
// built, naming the key and the value, with one "gcp: " prefix and no
// request sent; an IPv6 range of a request is Unavailable at Prepare,
// before any rule is made (the instances have IPv4 addresses only, and a
// rule takes IPv4 or IPv6 ranges, not both: "Use VPC firewall rules").
func TestSourceRangesThatCannotApply(t *testing.T) {
	for _, bad := range []string{"198.51.100.1/24", "198.51.100.0", "2001:db8::/32"} {
		c, mt := newCloud(t)
		_, err := gcp.New(gcp.Config{Project: project, SourceRanges: []string{bad}}, gcp.WithInstallation(installation),
			gcp.WithEndpoint(endpoint, &http.Client{Transport: mt}))
		if err == nil || !strings.HasPrefix(err.Error(), "gcp: source_ranges: ") || !strings.Contains(err.Error(), fmt.Sprintf("%q", bad)) ||
			strings.Count(err.Error(), "gcp:") != 1 {
			t.Fatalf("source_ranges %q: %v", bad, err)
		}
		if n := len(c.calls("")); n != 0 {
			t.Fatalf("a refused config sent %d requests", n)
		}
	}
	c, mt := newCloud(t)
	p := c.provider(t, mt, gcp.Config{})
	o := offerIn(t, p, l4, "us-central1-a", false)
	spec := newSpec(t, "v6")
	spec.SourceRanges = []string{"2001:db8::/32"}
	_, err := p.Prepare(context.Background(), &o, spec)
	if pe := kindOf(t, err, provider.Unavailable); strings.Count(pe.Error(), "gcp:") != 1 {
		t.Fatalf("%v: want one gcp: prefix", err)
	}
	if n := len(c.calls("/global/firewalls")); n != 0 {
		t.Fatalf("%d firewall calls for a range the rule cannot take", n)
	}
}

// Through provider.Build, which puts "provider gcp: " before what the
// adapter's factory returns, the adapter's name is not printed again, and
// the key and the value at fault are named.
func TestBuildNamesTheBadSourceRangeOnce(t *testing.T) {
	_, err := provider.Build("gcp", provider.Settings{Installation: installation,
		Config: gcp.Config{Project: project, SourceRanges: []string{"198.51.100.1/24"}}})
	if err == nil || !strings.HasPrefix(err.Error(), `provider gcp: source_ranges: source range "198.51.100.1/24"`) ||
		strings.Count(err.Error(), "gcp:") != 1 {
		t.Fatalf("build with a bad source range: %v", err)
	}
}
