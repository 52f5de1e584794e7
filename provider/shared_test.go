package provider

import (
	"regexp"
	"testing"
)

// SharedName is a function of the installation and the port set only: the
// order and the protocol's case do not matter, another port or another
// installation gives another name, and every name fits every cloud.
func TestSharedName(t *testing.T) {
	ssh, k8s := Port{Number: 22, Protocol: "tcp"}, Port{Number: 6443, Protocol: "tcp"}
	base := SharedName("inst-1", []Port{ssh, k8s})
	for _, same := range [][]Port{{k8s, ssh}, {ssh, k8s, ssh}, {{Number: 22, Protocol: "TCP"}, {Number: 6443, Protocol: "Tcp"}}} {
		if got := SharedName("inst-1", same); got != base {
			t.Errorf("SharedName(%v) = %s, want %s", same, got, base)
		}
	}
	for name, other := range map[string]string{
		"another port":         SharedName("inst-1", []Port{ssh}),
		"another protocol":     SharedName("inst-1", []Port{ssh, {Number: 6443, Protocol: "udp"}}),
		"another installation": SharedName("inst-2", []Port{ssh, k8s}),
	} {
		if other == base {
			t.Errorf("%s gives the same name %s", name, base)
		}
	}
	if !regexp.MustCompile(`^[a-z0-9-]{1,28}$`).MatchString(base) {
		t.Errorf("SharedName = %q, want at most 28 of [a-z0-9-]", base)
	}
}
