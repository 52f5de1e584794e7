package lambda_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/lambda"
)

// Who may connect. Lambda's rulesets take one source network per rule:
// testdata/openapi.json, #/components/schemas/FirewallRule (protocol,
// port_range [min, max], source_network of "format": "ipv4network",
// description) inside FirewallRulesetCreateRequest.rules, the body of
// POST /api/v1/firewall-rulesets. Every exchange below is checked against
// that document (newEnv).

// rule is one FirewallRule as the adapter sent it.
type rule struct {
	Protocol      string `json:"protocol"`
	PortRange     []int  `json:"port_range"`
	SourceNetwork string `json:"source_network"`
}

func (r rule) String() string {
	return fmt.Sprintf("%d/%s from %s", r.PortRange[0], r.Protocol, r.SourceNetwork)
}

// rulesetPosts returns the name and rules of each POST /firewall-rulesets
// the mock received, in order.
func (e *env) rulesetPosts(t *testing.T) (names []string, rules [][]string) {
	t.Helper()
	for _, c := range e.api.Calls(http.MethodPost, "/firewall-rulesets") {
		var in struct {
			Name  string `json:"name"`
			Rules []rule `json:"rules"`
		}
		if err := json.Unmarshal(c.Body, &in); err != nil {
			t.Fatal(err)
		}
		var rs []string
		for _, r := range in.Rules {
			rs = append(rs, r.String())
		}
		slices.Sort(rs)
		names, rules = append(names, in.Name), append(rules, rs)
	}
	return names, rules
}

// TestConfiguredSourceRangesReachTheRuleset: with source_ranges set, the
// shared ruleset admits those ranges, and only those, to SSH and to each
// OpenPort (one rule per port and source, as a FirewallRule takes one
// source_network), and is named for them; the instance is launched with
// it.
func TestConfiguredSourceRangesReachTheRuleset(t *testing.T) {
	office := []string{"203.0.113.0/24", "192.0.2.0/24"}
	e := newEnv(t, lambda.Config{SourceRanges: office})
	s := spec("train")
	e.launch(t, s)
	names, rules := e.rulesetPosts(t)
	want := []string{"22/tcp from 192.0.2.0/24", "22/tcp from 203.0.113.0/24", "6443/tcp from 192.0.2.0/24", "6443/tcp from 203.0.113.0/24"}
	if len(rules) != 1 || !slices.Equal(rules[0], want) {
		t.Fatalf("the ruleset admits %v, want %v", rules, want)
	}
	if name := provider.SharedName(installation, s.OpenPorts, office); names[0] != name ||
		name == provider.SharedName(installation, s.OpenPorts, nil) {
		t.Fatalf("ruleset named %s, want %s, the name of these ports and sources", names[0], name)
	}
	if rs := rulesetsOf(e.api)["gpuprov-train"]; len(rs) != 1 {
		t.Fatalf("instance launched with rulesets %v", rs)
	}
}

// TestRequestSourceRangesReachTheRuleset: a request's ranges override the
// configured ones (provider.SourcesFor) and get a ruleset of their own
// beside the one of the configured ranges; the older source_network still
// works, a bare address read as its /32 as Lambda reads it
// (FirewallRule.source_network: "If no mask is provided, the API assumes
// /32").
func TestRequestSourceRangesReachTheRuleset(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, lambda.Config{SourceNetwork: "198.51.100.7"})
	o := e.offer(t)
	mine := spec("mine")
	mine.SourceRanges = []string{"203.0.113.0/24"}
	if _, err := e.p.Prepare(ctx, &o, mine); err != nil {
		t.Fatal(err)
	}
	if _, err := e.p.Prepare(ctx, &o, spec("theirs")); err != nil {
		t.Fatal(err)
	}
	names, rules := e.rulesetPosts(t)
	wantRules := [][]string{{"22/tcp from 203.0.113.0/24", "6443/tcp from 203.0.113.0/24"},
		{"22/tcp from 198.51.100.7/32", "6443/tcp from 198.51.100.7/32"}}
	if !slices.EqualFunc(rules, wantRules, slices.Equal) {
		t.Fatalf("rulesets admit %v, want %v", rules, wantRules)
	}
	ports := spec("x").OpenPorts
	wantNames := []string{provider.SharedName(installation, ports, mine.SourceRanges),
		provider.SharedName(installation, ports, []string{"198.51.100.7/32"})}
	if !slices.Equal(names, wantNames) {
		t.Fatalf("rulesets %v, want %v", names, wantNames)
	}
}

// TestSourcesLambdaCannotApplyAreRefusedBeforeAnyRequest: a request's IPv6
// range (FirewallRule.source_network is "format": "ipv4network"), a range
// that is not a CIDR, and any range with no_firewall are InvalidRequest
// from Prepare, which then sends nothing: never a ruleset admitting more
// than asked. The mock refuses an IPv6 source_network as Lambda's
// document says it must.
func TestSourcesLambdaCannotApplyAreRefusedBeforeAnyRequest(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		cfg    lambda.Config
		ranges []string
		want   string
	}{
		{"IPv6", lambda.Config{}, []string{"203.0.113.0/24", "2001:db8::/32"}, "2001:db8::/32"},
		{"not a CIDR", lambda.Config{}, []string{"203.0.113.7"}, "203.0.113.7"},
		{"no firewall", lambda.Config{NoFirewall: true}, []string{"203.0.113.0/24"}, "no_firewall"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, tc.cfg)
			o := e.offer(t)
			s := spec("vm")
			s.SourceRanges = tc.ranges
			before := len(e.api.Calls("", ""))
			_, err := e.p.Prepare(ctx, &o, s)
			pe := kindOf(t, err, provider.InvalidRequest)
			if !strings.Contains(pe.Error(), tc.want) {
				t.Fatalf("%v does not name %s", pe, tc.want)
			}
			if got := e.calls(before); len(got) != 0 {
				t.Fatalf("Prepare sent %v", got)
			}
		})
	}
	e := newEnv(t, lambda.Config{})
	resp, err := e.RT.RoundTrip(e.Request(t, http.MethodPost, base+"/firewall-rulesets", `{"name":"v6","region":"us-east-1","rules":[`+
		`{"protocol":"tcp","port_range":[22,22],"source_network":"2001:db8::/32","description":"v6"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), lambda.CodeInvalidParameters) {
		t.Fatalf("an IPv6 source_network: %d %s, want 400 %s", resp.StatusCode, body, lambda.CodeInvalidParameters)
	}
}

// postRuleset makes a ruleset in the mock as another process (or an
// earlier version) would, and returns its id.
func (e *env) postRuleset(t *testing.T, name, source string, ports ...int) string {
	t.Helper()
	var rules []string
	for _, n := range append([]int{22}, ports...) {
		rules = append(rules, fmt.Sprintf(`{"protocol":"tcp","port_range":[%d,%d],"source_network":%q,"description":"gpuprov: %d/tcp"}`, n, n, source, n))
	}
	resp, err := e.RT.RoundTrip(e.Request(t, http.MethodPost, base+"/firewall-rulesets",
		fmt.Sprintf(`{"name":%q,"region":"us-east-1","rules":[%s]}`, name, strings.Join(rules, ","))))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var made struct{ Data struct{ ID string } }
	if err := json.NewDecoder(resp.Body).Decode(&made); err != nil || made.Data.ID == "" {
		t.Fatalf("ruleset %s: %v", name, err)
	}
	return made.Data.ID
}

// TestRulesetsOfAnEarlierVersion: an earlier version named the shared
// ruleset for its ports alone, whatever source_network it admitted. One
// admitting the default sources has the name this version gives them, and
// is adopted (no ruleset is made). One admitting 10.0.0.0/8 is not adopted
// by a process that admits anywhere, although its name is the one that
// process looks for: a new one is made. CleanupShared removes both once
// no instance uses them.
func TestRulesetsOfAnEarlierVersion(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, lambda.Config{})
	o := e.offer(t)
	name := provider.SharedName(installation, spec("x").OpenPorts, nil)

	old := e.postRuleset(t, name, "0.0.0.0/0", 6443)
	posts := len(e.api.Calls(http.MethodPost, "/firewall-rulesets"))
	prep, err := e.p.Prepare(ctx, &o, spec("a"))
	if err != nil {
		t.Fatal(err)
	}
	var pr struct {
		ID string `json:"firewall_ruleset_id"`
	}
	if err := json.Unmarshal(prep, &pr); err != nil || pr.ID != old {
		t.Fatalf("prepared ruleset %q (%v), want the earlier version's %s adopted", pr.ID, err, old)
	}
	if n := len(e.api.Calls(http.MethodPost, "/firewall-rulesets")); n != posts {
		t.Fatalf("Prepare made %d rulesets beside the one it should adopt", n-posts)
	}

	e2 := newEnv(t, lambda.Config{})
	narrow := e2.postRuleset(t, name, "10.0.0.0/8", 6443)
	prep, err = e2.p.Prepare(ctx, &o, spec("b"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(prep, &pr); err != nil || pr.ID == narrow {
		t.Fatalf("prepared ruleset %q (%v): the earlier version's, which admits 10.0.0.0/8 only, was adopted", pr.ID, err)
	}
	_, rules := e2.rulesetPosts(t)
	if last := rules[len(rules)-1]; !slices.Equal(last, []string{"22/tcp from 0.0.0.0/0", "6443/tcp from 0.0.0.0/0"}) {
		t.Fatalf("the ruleset made admits %v", last)
	}
	if err := e2.p.CleanupShared(ctx, o.Location); err != nil {
		t.Fatal(err)
	}
	if got := e2.api.Rulesets(); len(got) != 0 {
		t.Fatalf("rulesets left by CleanupShared: %v", got)
	}
}

// TestSourceRangesCapability: the adapter restricts who may connect unless
// no_firewall leaves no ruleset to do it with (provider.FeatureSourceRanges,
// which the core reads before planning a request with source ranges).
func TestSourceRangesCapability(t *testing.T) {
	if c := newEnv(t, lambda.Config{}).p.Capabilities(); !c.Supports(provider.FeatureSourceRanges) {
		t.Fatalf("capabilities %+v: source ranges unsupported", c)
	}
	if c := newEnv(t, lambda.Config{NoFirewall: true}).p.Capabilities(); c.Supports(provider.FeatureSourceRanges) {
		t.Fatalf("capabilities %+v with no_firewall: source ranges supported", c)
	}
}

// TestErrorsNameTheProviderOnce: the *provider.Error of each layer prints
// "lambda: <op>: <kind>: ..." once; what it wraps never starts with the
// provider's name again.
func TestErrorsNameTheProviderOnce(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, lambda.Config{LaunchInterval: 1})
	wrong, err := lambda.New(lambda.Config{APIKey: "wrong"}, lambda.WithHTTP(base, e.Client()))
	if err != nil {
		t.Fatal(err)
	}
	req := h100
	_, planErr := wrong.Plan(ctx, &req)

	o, id := e.launch(t, spec("train"))
	inUseErr := e.p.CleanupShared(ctx, o.Location)

	s := spec("v6")
	s.SourceRanges = []string{"2001:db8::/32"}
	_, v6Err := e.p.Prepare(ctx, &o, s)

	s = spec("gone")
	prep, err := e.p.Prepare(ctx, &o, s)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.p.Delete(ctx, o.Location, "train", []string{id}); err != nil {
		t.Fatal(err)
	}
	e.api.Settle()
	if err := e.p.CleanupShared(ctx, o.Location); err != nil {
		t.Fatal(err)
	}
	_, goneErr := e.p.Create(ctx, &o, prep, s)

	for name, err := range map[string]error{"plan 401": planErr, "in use": inUseErr, "IPv6 source": v6Err, "shared gone": goneErr} {
		var pe *provider.Error
		if !errors.As(err, &pe) {
			t.Fatalf("%s: %v is not a *provider.Error", name, err)
		}
		if msg := err.Error(); !strings.HasPrefix(msg, "lambda: ") || strings.Count(msg, "lambda:") != 1 {
			t.Errorf("%s: %q names the provider other than once, at the start", name, msg)
		}
	}
}
