package lambda

import (
	"testing"

	"github.com/org/gpuprov/provider"
)

// TestOwnShared: a ruleset is this installation's shared one only when its
// name is the SharedName of the installation and of the ports and sources
// its rules name (or, as an earlier version named it, of the ports alone);
// the rules are what Prepare sends (rules), so every ruleset Prepare makes
// is recognized, whatever the ports' order, case or repetition, with
// 22/tcp among them, and whatever sources it admits.
func TestOwnShared(t *testing.T) {
	p := &Provider{}
	p.base.Installation = "inst"
	office := []string{"192.0.2.0/24", "203.0.113.0/24"}
	admitting := func(inst string, sources []string, ports ...provider.Port) wireRuleset {
		q := &Provider{}
		q.base.Installation = inst
		norm, rules, err := q.rules(ports, provider.SourcesFor(&provider.InstanceSpec{}, sources))
		if err != nil {
			t.Fatal(err)
		}
		return wireRuleset{Name: provider.SharedName(inst, norm, sources), Rules: rules}
	}
	made := func(inst string, ports ...provider.Port) wireRuleset { return admitting(inst, nil, ports...) }
	k8s := provider.Port{Number: 6443, Protocol: "tcp"}
	wg := provider.Port{Number: 51820, Protocol: "UDP"}
	ssh := provider.Port{Number: 22, Protocol: "tcp"}
	edited := made("inst", k8s)
	edited.Rules = append(edited.Rules, wireRule{Protocol: "tcp", PortRange: []int{443, 443}})
	ranged := made("inst", k8s)
	ranged.Rules[1].PortRange = []int{6443, 6450}
	// What an earlier version made with source_network = 10.0.0.0/8: the
	// name of the ports alone, the rules from that network.
	earlier := made("inst", k8s)
	for i := range earlier.Rules {
		earlier.Rules[i].SourceNetwork = "10.0.0.0/8"
	}
	moved := admitting("inst", office, k8s)
	for i := range moved.Rules {
		moved.Rules[i].SourceNetwork = "198.51.100.0/24"
	}
	for _, tc := range []struct {
		name string
		rs   wireRuleset
		want bool
	}{
		{"no ports", made("inst"), true},
		{"one port", made("inst", k8s), true},
		{"upper-case protocol", made("inst", wg, k8s), true},
		{"22/tcp asked for besides SSH", made("inst", ssh, k8s), true},
		{"a port twice", made("inst", k8s, k8s), true},
		{"restricted sources", admitting("inst", office, k8s, wg), true},
		{"an earlier version's, whatever its source_network", earlier, true},
		{"another installation's", made("other", k8s), false},
		{"another installation's, restricted", admitting("other", office, k8s), false},
		{"sources edited", moved, false},
		{"rules edited", edited, false},
		{"a port range", ranged, false},
		{"a per-VM ruleset", wireRuleset{Name: SideName("fw-0123456789ab", "inst"), Rules: made("inst").Rules}, false},
		{"a user's", wireRuleset{Name: "web", Rules: made("inst").Rules}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := p.ownShared(tc.rs); got != tc.want {
				t.Fatalf("ownShared(%s %+v) = %v, want %v", tc.rs.Name, tc.rs.Rules, got, tc.want)
			}
		})
	}
}
