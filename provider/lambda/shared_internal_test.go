package lambda

import (
	"testing"

	"github.com/org/gpuprov/provider"
)

// TestOwnShared: a ruleset is this installation's shared one only when its
// name is the SharedName of the installation and of the ports its rules
// open; the rules are what Prepare sends (rules), so every ruleset Prepare
// makes is recognized, whatever the ports' order, case or repetition, and
// with 22/tcp among them.
func TestOwnShared(t *testing.T) {
	p := &Provider{cfg: Config{SourceNetwork: "0.0.0.0/0"}}
	p.base.Installation = "inst"
	made := func(inst string, ports ...provider.Port) wireRuleset {
		q := &Provider{cfg: p.cfg}
		q.base.Installation = inst
		norm, rules, err := q.rules(ports)
		if err != nil {
			t.Fatal(err)
		}
		return wireRuleset{Name: provider.SharedName(inst, norm, nil), Rules: rules}
	}
	k8s := provider.Port{Number: 6443, Protocol: "tcp"}
	wg := provider.Port{Number: 51820, Protocol: "UDP"}
	ssh := provider.Port{Number: 22, Protocol: "tcp"}
	edited := made("inst", k8s)
	edited.Rules = append(edited.Rules, wireRule{Protocol: "tcp", PortRange: []int{443, 443}})
	ranged := made("inst", k8s)
	ranged.Rules[1].PortRange = []int{6443, 6450}
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
		{"another installation's", made("other", k8s), false},
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
