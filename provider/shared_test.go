package provider

import (
	"regexp"
	"testing"
)

// SharedName is a function of the installation, the port set and the source
// set: the order and the protocol's case do not matter, another port,
// another installation or other sources give another name, the default
// sources name the resource as an earlier version did, and every name fits
// every cloud.
func TestSharedName(t *testing.T) {
	ssh, k8s := Port{Number: 22, Protocol: "tcp"}, Port{Number: 6443, Protocol: "tcp"}
	base := SharedName("inst-1", []Port{ssh, k8s}, nil)
	// The name an earlier version gave this installation and port set,
	// before sources could be chosen: such a resource is adopted.
	if base != "gpuprov-fw-663ff5c50534" {
		t.Errorf("SharedName with default sources = %s, want the earlier name gpuprov-fw-663ff5c50534", base)
	}
	if got := SharedName("inst-1", []Port{ssh, k8s}, DefaultSourceRanges); got != base {
		t.Errorf("SharedName with DefaultSourceRanges = %s, want %s (as with none)", got, base)
	}
	office := []string{"203.0.113.0/24", "198.51.100.7/32"}
	if a, b := SharedName("inst-1", []Port{ssh}, office), SharedName("inst-1", []Port{ssh}, []string{office[1], office[0], office[1]}); a != b {
		t.Errorf("the same sources in another order give %s and %s", a, b)
	}
	for _, same := range [][]Port{{k8s, ssh}, {ssh, k8s, ssh}, {{Number: 22, Protocol: "TCP"}, {Number: 6443, Protocol: "Tcp"}}} {
		if got := SharedName("inst-1", same, nil); got != base {
			t.Errorf("SharedName(%v) = %s, want %s", same, got, base)
		}
	}
	for name, other := range map[string]string{
		"another port":         SharedName("inst-1", []Port{ssh}, nil),
		"another protocol":     SharedName("inst-1", []Port{ssh, {Number: 6443, Protocol: "udp"}}, nil),
		"another installation": SharedName("inst-2", []Port{ssh, k8s}, nil),
		"other sources":        SharedName("inst-1", []Port{ssh, k8s}, []string{"203.0.113.0/24"}),
	} {
		if other == base {
			t.Errorf("%s gives the same name %s", name, base)
		}
	}
	if !regexp.MustCompile(`^[a-z0-9-]{1,28}$`).MatchString(base) {
		t.Errorf("SharedName = %q, want at most 28 of [a-z0-9-]", base)
	}
}
