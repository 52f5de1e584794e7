package azure_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/azure"
)

// nsgRule is a security rule as the mock received it.
type nsgRule struct {
	Name       string `json:"name"`
	Properties struct {
		Protocol              string   `json:"protocol"`
		SourceAddressPrefix   string   `json:"sourceAddressPrefix"`
		SourceAddressPrefixes []string `json:"sourceAddressPrefixes"`
		DestinationPortRange  string   `json:"destinationPortRange"`
		Priority              int      `json:"priority"`
	} `json:"properties"`
}

// admitted returns, per destination port/protocol, the sources the last
// PUT of the security group nsg admits: each rule's sourceAddressPrefix
// and sourceAddressPrefixes. Priorities must be distinct.
func admitted(t *testing.T, c *cloud, nsg string) map[string][]string {
	t.Helper()
	puts := c.calls(http.MethodPut, "/networkSecurityGroups/"+nsg)
	if len(puts) == 0 {
		t.Fatalf("no PUT of %s", nsg)
	}
	var body struct {
		Properties struct {
			SecurityRules []nsgRule `json:"securityRules"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(puts[len(puts)-1].Body, &body); err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	prio := map[int]bool{}
	for _, r := range body.Properties.SecurityRules {
		p := r.Properties
		if prio[p.Priority] {
			t.Fatalf("two rules of priority %d", p.Priority)
		}
		prio[p.Priority] = true
		k := p.DestinationPortRange + "/" + strings.ToLower(p.Protocol)
		if p.SourceAddressPrefix != "" {
			out[k] = append(out[k], p.SourceAddressPrefix)
		}
		out[k] = append(out[k], p.SourceAddressPrefixes...)
		slices.Sort(out[k])
	}
	return out
}

// Who may connect. By default SSH and the open ports admit "*". The
// configured source_ranges reach the security group the mock receives as
// the rules' sourceAddressPrefixes; the open ports (a cluster's 6443 and
// 51820) admit them and the service tag VirtualNetwork, in a rule of its
// own (sourceAddressPrefixes may not hold a service tag: 400
// SecurityRuleParameterContainsUnsupportedValue, kubernetes/kubernetes#71789),
// SSH only them. A request's ranges replace the configured ones; IPv4
// and IPv6 ranges go in separate rules (a rule may not mix families: 400
// ResourceCannotContainAddressPrefixesFromDifferentAddressFamilies,
// hashicorp/terraform-provider-azurerm#12534). The mock refuses either
// mistake as Azure does.
func TestSourceRanges(t *testing.T) {
	ctx := context.Background()
	c, mt := newCloud(t)
	open := c.provider(t, mt, azure.Config{})
	o := offerIn(t, open, t4, eastus, false)
	if _, err := open.Prepare(ctx, &o, newSpec(t, "open")); err != nil {
		t.Fatal(err)
	}
	star := []string{"*"}
	if got := admitted(t, c, "gpuprov-open-nsg"); len(got) != 3 || !slices.Equal(got["22/tcp"], star) ||
		!slices.Equal(got["6443/tcp"], star) || !slices.Equal(got["51820/udp"], star) {
		t.Fatalf("default rules %v", got)
	}

	fenced := c.provider(t, mt, azure.Config{SourceRanges: []string{"203.0.113.0/24"}})
	if _, err := fenced.Prepare(ctx, &o, newSpec(t, "fenced")); err != nil {
		t.Fatal(err)
	}
	mine, withVNet := []string{"203.0.113.0/24"}, []string{"203.0.113.0/24", "VirtualNetwork"}
	if got := admitted(t, c, "gpuprov-fenced-nsg"); len(got) != 3 || !slices.Equal(got["22/tcp"], mine) ||
		!slices.Equal(got["6443/tcp"], withVNet) || !slices.Equal(got["51820/udp"], withVNet) {
		t.Fatalf("configured ranges: rules %v", got)
	}

	spec := newSpec(t, "caller")
	spec.SourceRanges = []string{"2001:db8::/48", "198.51.100.7/32"}
	if _, err := fenced.Prepare(ctx, &o, spec); err != nil {
		t.Fatal(err)
	}
	callers := []string{"198.51.100.7/32", "2001:db8::/48"}
	if got := admitted(t, c, "gpuprov-caller-nsg"); !slices.Equal(got["22/tcp"], callers) ||
		!slices.Equal(got["6443/tcp"], append(slices.Clone(callers), "VirtualNetwork")) {
		t.Fatalf("the request's ranges: rules %v", got)
	}

	spec = newSpec(t, "bad")
	spec.SourceRanges = []string{"198.51.100.7/24"}
	before := len(c.calls("", ""))
	_, err := fenced.Prepare(ctx, &o, spec)
	kindOf(t, err, provider.InvalidRequest)
	if n := len(c.calls("", "")); n != before || !strings.Contains(err.Error(), "198.51.100.7/24") {
		t.Fatalf("%v; %d calls", err, n-before)
	}
}

// A bad source_ranges value is refused when the provider is built, naming
// the key and the value; nothing is sent.
func TestSourceRangesConfigRefused(t *testing.T) {
	c, mt := newCloud(t)
	for _, bad := range []string{"203.0.113.7/24", "office"} {
		_, err := azure.New(azure.Config{SubscriptionID: subscription, SourceRanges: []string{"198.51.100.0/24", bad}},
			azure.WithEndpoint(endpoint, &http.Client{Transport: mt}))
		if err == nil || !strings.Contains(err.Error(), "source_ranges") || !strings.Contains(err.Error(), bad) {
			t.Errorf("source_ranges %q: %v", bad, err)
		}
	}
	if n := len(c.calls("", "")); n != 0 {
		t.Fatalf("%d calls", n)
	}
}

// One prefix per layer: an error the adapter returns names the provider
// once, the factory's too (provider.Build already prefixes "provider
// azure:").
func TestErrorTextsNameTheProviderOnce(t *testing.T) {
	_, err := provider.Build(azure.ID, provider.Settings{Installation: installation, Config: azure.Config{SubscriptionID: "my-sub"}})
	if err == nil || strings.Count(err.Error(), "azure:") != 1 || !strings.Contains(err.Error(), "subscription_id") {
		t.Fatalf("build: %v", err)
	}
	c, mt := newCloud(t)
	p := c.provider(t, mt, azure.Config{})
	o := offerIn(t, p, t4, eastus, false)
	spec := newSpec(t, "once")
	prep, err := p.Prepare(context.Background(), &o, spec)
	if err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	c.dropOnVMPut = rgOf("eastus")
	c.mu.Unlock()
	_, err = p.Create(context.Background(), &o, prep, spec)
	if kindOf(t, err, provider.Transient); strings.Count(err.Error(), "azure:") != 1 || !errors.Is(err, provider.ErrSharedGone) {
		t.Fatalf("create: %v", err)
	}
}
