package vastai

import (
	"slices"
	"strings"
	"testing"

	"github.com/org/gpuprov/provider"
)

// TestCanonical maps Vast's gpu_name values (the CLI's --gpu-name choices)
// and their per-GPU memory (gpu_ram, MB) to canonical GPUs.
func TestCanonical(t *testing.T) {
	for _, tc := range []struct {
		name  string
		ramMB float64
		want  string // "" for no canonical GPU
	}{
		{"H100 SXM", 81559, "H100-80GB"},
		{"H100 PCIE", 81559, "H100-80GB"},
		{"H100 NVL", 95830, "H100-NVL"},
		{"A100 SXM4", 81920, "A100-80GB"},
		{"A100 SXM4", 40960, "A100-40GB"},
		{"A100 PCIE", 81920, "A100-80GB"},
		{"A100 PCIE", 0, "A100-40GB"}, // no memory: the name's own model
		{"Tesla V100", 16384, "V100"},
		{"Tesla V100", 32768, "V100-32GB"},
		{"RTX 4090", 24564, "RTX4090"},
		{"RTX A6000", 49140, "A6000"},
		{"RTX 6000Ada", 49140, "RTX6000-ADA"},
		{"L40S", 46068, "L40S"},
		{"L4", 23034, "L4"},
		{"A10g", 23028, "A10G"},
		{"Tesla T4", 15360, "T4"},
		{"H200", 143771, "H200"},
		{"B200", 183359, "B200"},
		{"RTX 3090", 24576, ""},
		{"A100X", 81920, ""},
	} {
		g, ok := canonical(tc.name, tc.ramMB)
		if got := map[bool]string{true: g.Name}[ok]; got != tc.want {
			t.Errorf("canonical(%q, %v) = %q, want %q", tc.name, tc.ramMB, got, tc.want)
		}
	}
}

func TestSearchNamesCoverEveryFamilyMember(t *testing.T) {
	for gpu, want := range map[string][]string{
		"H100-80GB": {"H100 PCIE", "H100 SXM"},
		"A100-80GB": {"A100 PCIE", "A100 SXM4"},
		"A100-40GB": {"A100 PCIE", "A100 SXM4"},
		"V100-32GB": {"Tesla V100"},
		"RTX4090":   {"RTX 4090"},
	} {
		for _, n := range want {
			if !slices.Contains(searchNames[gpu], n) {
				t.Errorf("searchNames[%s] = %v lacks %q", gpu, searchNames[gpu], n)
			}
		}
	}
	for gpu, names := range searchNames {
		if c, err := provider.CanonicalGPU(gpu); err != nil || c != gpu {
			t.Errorf("searchNames key %q is not canonical", gpu)
		}
		for _, n := range names {
			if !slices.Contains(vastGPUNames, n) {
				t.Errorf("searchNames[%s] holds %q, which Vast does not name", gpu, n)
			}
		}
	}
	if _, ok := searchNames["GH200"]; ok {
		t.Error("GH200 has a Vast name")
	}
}

func TestStatusMapping(t *testing.T) {
	direct := map[string][]wirePort{"22/tcp": {{HostIP: "0.0.0.0", HostPort: "40123"}}}
	for _, tc := range []struct {
		in   wireInstance
		want provider.InstanceStatus
	}{
		{wireInstance{}, provider.StatusPending}, // actual_status null
		{wireInstance{ActualStatus: "loading"}, provider.StatusPending},
		{wireInstance{ActualStatus: "rebooting"}, provider.StatusPending},
		{wireInstance{ActualStatus: "running"}, provider.StatusPending}, // no address yet
		{wireInstance{ActualStatus: "running", PublicIPAddr: "192.0.2.1", Ports: direct}, provider.StatusRunning},
		{wireInstance{ActualStatus: "running", SSHHost: "ssh5.vast.ai", SSHPort: 10600}, provider.StatusRunning},
		{wireInstance{ActualStatus: "exited"}, provider.StatusFailed},
		{wireInstance{ActualStatus: "unknown"}, provider.StatusFailed},
		{wireInstance{ActualStatus: "offline"}, provider.StatusFailed},
		{wireInstance{ActualStatus: "stopped"}, provider.StatusFailed},
		{wireInstance{ActualStatus: "frozen"}, provider.StatusFailed},
		{wireInstance{ActualStatus: "running", CurState: "unloaded"}, provider.StatusTerminated},
		{wireInstance{ActualStatus: "migrating"}, provider.StatusUnknown},
	} {
		if got := status(tc.in); got != tc.want {
			t.Errorf("status(%+v) = %s, want %s", tc.in, got, tc.want)
		}
	}
	// The direct port wins over the proxy, as in the CLI's ssh-url.
	both := wireInstance{ID: 9, Label: "gpuprov-train.inst", ActualStatus: "running", PublicIPAddr: " 192.0.2.1\n", Ports: direct, SSHHost: "ssh5.vast.ai", SSHPort: 10600}
	if o := observed(both); o.SSH == nil || *o.SSH != (provider.SSHEndpoint{Host: "192.0.2.1", Port: 40123, User: "root"}) || o.VM != "train" {
		t.Fatalf("observed %+v ssh %+v", o, o.SSH)
	}
	both.Ports = nil
	if o := observed(both); o.SSH == nil || *o.SSH != (provider.SSHEndpoint{Host: "ssh5.vast.ai", Port: 10600, User: "root"}) {
		t.Fatalf("proxy ssh %+v", o.SSH)
	}
}

func TestLabel(t *testing.T) {
	l := Label("train-1", "0123456789abcdef")
	if l != "gpuprov-train-1.0123456789abcdef" {
		t.Fatal(l)
	}
	for label, want := range map[string][3]string{
		l:                         {"train-1", "0123456789abcdef", "ok"},
		"gpuprov-x.inst.with.dot": {"x", "inst.with.dot", "ok"},
		"gpuprov-.inst":           {"", "", ""},
		"gpuprov-noinst":          {"", "", ""},
		"My ML Training Job":      {"", "", ""},
	} {
		vm, inst, ok := parseLabel(label)
		if got := [3]string{vm, inst, map[bool]string{true: "ok"}[ok]}; ok != (want[2] == "ok") || ok && got != want {
			t.Errorf("parseLabel(%q) = %v, want %v", label, got, want)
		}
	}
}

func TestOnstart(t *testing.T) {
	s := &provider.InstanceSpec{VM: "v", AuthorizedKeys: []string{"ssh-ed25519 AAAA a@b"},
		HostKey: &provider.HostKey{PrivatePEM: "-----BEGIN OPENSSH PRIVATE KEY-----\nAAAA\n-----END OPENSSH PRIVATE KEY-----\n", Public: "ssh-ed25519 BBBB"}}
	plain, err := onstart(s, false)
	if err != nil {
		t.Fatal(err)
	}
	if want := "umask 077; mkdir -p /root/.ssh\ncat >> /root/.ssh/authorized_keys <<'GPUPROV_KEYS'\nssh-ed25519 AAAA a@b\nGPUPROV_KEYS\nchmod 600 /root/.ssh/authorized_keys\n"; plain != want {
		t.Fatalf("onstart\n%s\nwant\n%s", plain, want)
	}
	withKey, err := onstart(s, true)
	if err != nil || !strings.HasPrefix(withKey, plain) ||
		!strings.Contains(withKey, "<<'GPUPROV_HOSTKEY'\n-----BEGIN OPENSSH PRIVATE KEY-----\nAAAA\n-----END OPENSSH PRIVATE KEY-----\nGPUPROV_HOSTKEY\n") {
		t.Fatalf("%q %v", withKey, err)
	}
	for _, bad := range [][]string{{"ssh-ed25519 AAAA\nrm -rf /"}, {"ssh-ed25519 AAAA GPUPROV_KEYS"}} {
		if _, err := onstart(&provider.InstanceSpec{AuthorizedKeys: bad}, false); err == nil {
			t.Errorf("key %q accepted", bad)
		}
	}
	many := make([]string, 60)
	for i := range many {
		many[i] = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJ5Vf0zdfBx5i9nRYkuGAOI4dqnA7BD6IVn0i60HNmDH ops@example"
	}
	if _, err := onstart(&provider.InstanceSpec{AuthorizedKeys: many}, false); err == nil {
		t.Errorf("a script over %d characters accepted", MaxOnstart)
	}
}
