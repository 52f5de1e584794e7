package k3s_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/org/gpuprov/k3s"
	"github.com/org/gpuprov/provider"
)

const clusterToken = "f00dfeedf00dfeedf00dfeedf00dfeed"

// The exact commands, as the package doc lists them.
const (
	opRoot      = `run: printf '%s' "${GPUPROV_ROOT:-}"`
	opCloudInit = `run: if command -v cloud-init >/dev/null 2>&1; then cloud-init status --wait >/dev/null || [ $? -eq 2 ]; fi`
	opGPUProbe  = `run: if command -v nvidia-smi >/dev/null 2>&1; then nvidia-smi -L || exit; fi; ` +
		`if command -v nvidia-container-runtime >/dev/null 2>&1 || command -v nvidia-ctk >/dev/null 2>&1; then echo toolkit=yes; fi`
	opAgentActive = "run: systemctl is-active k3s-agent || true"
)

func opSums(paths ...string) string {
	return "run: for f in " + strings.Join(paths, " ") + `; do if [ -e "$f" ]; then sha256sum -- "$f" || exit; fi; done`
}

func opVersion(root, unit string) string {
	return fmt.Sprintf("run: if [ -x %[1]s/usr/local/bin/k3s ] && [ -f %[1]s/etc/systemd/system/%[2]s.service ]; then %[1]s/usr/local/bin/k3s --version; fi", root, unit)
}

func opInstallOnline(role string) string {
	return "run: mkdir -p /var/lib/gpuprov && curl -sfL -o /var/lib/gpuprov/k3s-install.sh https://get.k3s.io && " +
		"INSTALL_K3S_VERSION=v1.33.5+k3s1 INSTALL_K3S_SKIP_START=true sh /var/lib/gpuprov/k3s-install.sh " + role
}

func opKubectl(root, node string) string {
	return fmt.Sprintf(`run: %[1]s/usr/local/bin/k3s kubectl --kubeconfig %[1]s/etc/rancher/k3s/k3s.yaml get node %[2]s -o `+
		`'jsonpath={.status.conditions[?(@.type=="Ready")].status} {.status.allocatable.nvidia\.com/gpu}'`, root, node)
}

const (
	pConfig   = "/etc/rancher/k3s/config.yaml"
	pManifest = "/var/lib/rancher/k3s/server/manifests/gpuprov-nvidia-device-plugin.yaml"
)

// assertNoSecret fails if any command line carries one of the secrets.
func assertNoSecret(t *testing.T, ops []string, secrets ...string) {
	t.Helper()
	for _, op := range ops {
		for _, s := range secrets {
			if strings.HasPrefix(op, "run: ") && strings.Contains(op, s) {
				t.Errorf("a command line carries a secret: %s", op)
			}
		}
	}
}

var serverInfo = k3s.NodeInfo{Name: "s0", PublicIP: "203.0.113.10", PrivateIP: "10.0.0.10", Iface: "ens5",
	Labels: map[string]string{"pool": "a"}}

func TestServerFreshThenIdempotentRerun(t *testing.T) {
	ctx := context.Background()
	n := newFakeNode(t)
	cfg := testConfig(t)
	s, err := k3s.Server(ctx, n, serverInfo, clusterToken, cfg)
	if err != nil {
		t.Fatal(err)
	}
	first := n.takeOps()
	assertOps(t, first, []string{
		opRoot, opCloudInit, opGPUProbe,
		opSums(pConfig, pManifest),
		"write: " + pConfig + " 0600",
		"write: " + pManifest + " 0644",
		opVersion("", "k3s"),
		opInstallOnline("server"),
		"run: systemctl restart --no-block k3s",
		opKubectl("", "s0"), opKubectl("", "s0"),
		"run: cat -- /var/lib/rancher/k3s/server/token",
		"run: cat -- /etc/rancher/k3s/k3s.yaml",
	})
	assertNoSecret(t, first, clusterToken, "s3cret-cluster-token")
	wantConfig := `# Written by gpuprov; edits are overwritten when gpuprov joins this node again.
token: ` + clusterToken + `
node-name: s0
node-ip: 10.0.0.10
node-label:
  - pool=a
tls-san:
  - 203.0.113.10
flannel-iface: ens5
write-kubeconfig-mode: "0600"
`
	if got := n.file(pConfig); got != wantConfig {
		t.Errorf("config.yaml:\n%s\nwant:\n%s", got, wantConfig)
	}
	if s.URL != "https://203.0.113.10:6443" || s.JoinURL != "https://10.0.0.10:6443" || s.JoinToken != joinToken || s.GPUs != 0 {
		t.Errorf("server info: %#v (token %q)", s, s.JoinToken)
	}
	if !strings.Contains(string(s.Kubeconfig), "server: https://203.0.113.10:6443") || strings.Contains(string(s.Kubeconfig), "127.0.0.1") {
		t.Errorf("kubeconfig not rewritten:\n%s", s.Kubeconfig)
	}

	// The same join again on the ready node: nothing written, nothing
	// installed, a harmless start, one check.
	s2, err := k3s.Server(ctx, n, serverInfo, clusterToken, cfg)
	if err != nil {
		t.Fatal(err)
	}
	assertOps(t, n.takeOps(), []string{
		opRoot, opCloudInit, opGPUProbe,
		opSums(pConfig, pManifest),
		opVersion("", "k3s"),
		"run: systemctl start --no-block k3s",
		opKubectl("", "s0"),
		"run: cat -- /var/lib/rancher/k3s/server/token",
		"run: cat -- /etc/rancher/k3s/k3s.yaml",
	})
	if s2.JoinToken != s.JoinToken || string(s2.Kubeconfig) != string(s.Kubeconfig) {
		t.Error("a re-run returned a different ServerInfo")
	}

	// A changed label rewrites config.yaml and restarts, without reinstalling.
	info := serverInfo
	info.Labels = map[string]string{"pool": "b"}
	if _, err := k3s.Server(ctx, n, info, clusterToken, cfg); err != nil {
		t.Fatal(err)
	}
	assertOps(t, n.takeOps(), []string{
		opRoot, opCloudInit, opGPUProbe,
		opSums(pConfig, pManifest),
		"write: " + pConfig + " 0600",
		opVersion("", "k3s"),
		"run: systemctl restart --no-block k3s",
		opKubectl("", "s0"), opKubectl("", "s0"),
		"run: cat -- /var/lib/rancher/k3s/server/token",
		"run: cat -- /etc/rancher/k3s/k3s.yaml",
	})
}

func TestAgentCrossCloudWithGPUThenRerun(t *testing.T) {
	ctx := context.Background()
	n := newFakeNode(t)
	n.gpus, n.toolkit = 2, true
	cfg := testConfig(t)
	cfg.Network = k3s.CrossCloud
	server := k3s.ServerInfo{Name: "s0", URL: "https://203.0.113.10:6443", JoinURL: "https://203.0.113.10:6443", JoinToken: joinToken}
	info := k3s.NodeInfo{Name: "gpu-1", PublicIP: "198.51.100.7", PrivateIP: "172.16.0.7"}
	ai, err := k3s.Agent(ctx, n, info, server, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if ai.GPUs != 2 || ai.Name != "gpu-1" {
		t.Errorf("agent info %+v", ai)
	}
	first := n.takeOps()
	assertOps(t, first, []string{
		opRoot, opCloudInit, opGPUProbe,
		opSums(pConfig),
		"write: " + pConfig + " 0600",
		opVersion("", "k3s-agent"),
		opInstallOnline("agent"),
		"run: systemctl restart --no-block k3s-agent",
		opAgentActive, opAgentActive,
	})
	assertNoSecret(t, first, clusterToken, joinToken, "s3cret-cluster-token")
	wantConfig := `# Written by gpuprov; edits are overwritten when gpuprov joins this node again.
server: https://203.0.113.10:6443
token: ` + joinToken + `
node-name: gpu-1
node-ip: 172.16.0.7
node-external-ip: 198.51.100.7
node-label:
  - nvidia.com/gpu.present=true
`
	if got := n.file(pConfig); got != wantConfig {
		t.Errorf("config.yaml:\n%s\nwant:\n%s", got, wantConfig)
	}

	if _, err := k3s.Agent(ctx, n, info, server, cfg); err != nil {
		t.Fatal(err)
	}
	assertOps(t, n.takeOps(), []string{
		opRoot, opCloudInit, opGPUProbe,
		opSums(pConfig),
		opVersion("", "k3s-agent"),
		"run: systemctl start --no-block k3s-agent",
		opAgentActive,
	})
}

func TestServerCrossCloudConfig(t *testing.T) {
	n := newFakeNode(t)
	cfg := testConfig(t)
	cfg.Network, cfg.ClusterCIDR = k3s.CrossCloud, "10.42.0.0/16"
	info := k3s.NodeInfo{Name: "s0", PublicIP: "203.0.113.10"}
	s, err := k3s.Server(context.Background(), n, info, clusterToken, cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := `# Written by gpuprov; edits are overwritten when gpuprov joins this node again.
token: ` + clusterToken + `
node-name: s0
node-external-ip: 203.0.113.10
tls-san:
  - 203.0.113.10
flannel-backend: wireguard-native
flannel-external-ip: true
cluster-cidr: 10.42.0.0/16
write-kubeconfig-mode: "0600"
`
	if got := n.file(pConfig); got != want {
		t.Errorf("config.yaml:\n%s\nwant:\n%s", got, want)
	}
	if s.JoinURL != s.URL || s.URL != "https://203.0.113.10:6443" {
		t.Errorf("cross-cloud agents must join the public endpoint: %v", s)
	}
	if got := k3s.Ports(k3s.CrossCloud); len(got) != 2 || got[0] != (provider.Port{Number: 6443, Protocol: "tcp"}) ||
		got[1] != (provider.Port{Number: 51820, Protocol: "udp"}) {
		t.Errorf("cross-cloud ports %v", got)
	}
	if got := k3s.Ports(k3s.Private); len(got) != 1 || got[0].Number != 6443 {
		t.Errorf("private ports %v", got)
	}
}

func TestServerWithGPUWaitsForAllocatable(t *testing.T) {
	n := newFakeNode(t)
	n.gpus, n.toolkit, n.alloc = 1, true, 1
	s, err := k3s.Server(context.Background(), n, serverInfo, clusterToken, testConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	if s.GPUs != 1 || !strings.Contains(n.file(pConfig), "  - nvidia.com/gpu.present=true\n") {
		t.Errorf("GPUs %d, config:\n%s", s.GPUs, n.file(pConfig))
	}
	if got := n.file(pManifest); got != string(k3s.DevicePluginManifest(k3s.DefaultDevicePluginVersion)) {
		t.Errorf("manifest:\n%s", got)
	}

	// Ready, but the device plugin never advertises the GPU: not ready.
	n2 := newFakeNode(t)
	n2.gpus, n2.toolkit = 1, true
	_, err = k3s.Server(context.Background(), n2, serverInfo, clusterToken, testConfig(t))
	var nre *k3s.NotReadyError
	if !errors.As(err, &nre) || !strings.Contains(nre.Waited, "nvidia.com/gpu allocatable") {
		t.Fatalf("want a NotReadyError about nvidia.com/gpu, got %v", err)
	}
}

func TestGPUWithoutToolkitFailsBeforeAnyChange(t *testing.T) {
	n := newFakeNode(t)
	n.gpus = 1
	_, err := k3s.Server(context.Background(), n, serverInfo, clusterToken, testConfig(t))
	if !errors.Is(err, k3s.ErrNoToolkit) || !strings.Contains(err.Error(), "install nvidia-container-toolkit") {
		t.Fatalf("want ErrNoToolkit, got %v", err)
	}
	assertOps(t, n.takeOps(), []string{opRoot, opCloudInit, opGPUProbe})
}

func TestAirGappedInSandboxRoot(t *testing.T) {
	ctx := context.Background()
	n := newFakeNode(t)
	n.root, n.resolved = ".", "/srv/sandbox" // a relative root, as the sim sets it
	cfg := testConfig(t)
	cfg.AirGap = &k3s.AirGap{
		Binary:         []byte("k3s binary"),
		Images:         []k3s.File{{Name: "k3s-airgap-images-amd64.tar.zst", Data: []byte("images")}},
		InstallScript:  []byte("#!/bin/sh\n"),
		RegistriesYAML: []byte("mirrors: {}\n"),
	}
	cfg.NoDevicePlugin = true
	const r = "/srv/sandbox"
	if _, err := k3s.Server(ctx, n, serverInfo, clusterToken, cfg); err != nil {
		t.Fatal(err)
	}
	ops := n.takeOps()
	assertOps(t, ops, []string{
		opRoot,
		"run: cd -- . && pwd -P",
		opCloudInit, opGPUProbe,
		opSums(r+pConfig, r+"/usr/local/bin/k3s", r+"/var/lib/rancher/k3s/agent/images/k3s-airgap-images-amd64.tar.zst",
			r+"/etc/rancher/k3s/registries.yaml", r+"/var/lib/gpuprov/k3s-install.sh"),
		"write: " + r + pConfig + " 0600",
		"write: " + r + "/usr/local/bin/k3s 0755",
		"write: " + r + "/var/lib/rancher/k3s/agent/images/k3s-airgap-images-amd64.tar.zst 0644",
		"write: " + r + "/etc/rancher/k3s/registries.yaml 0600",
		"write: " + r + "/var/lib/gpuprov/k3s-install.sh 0755",
		opVersion(r, "k3s"),
		"run: INSTALL_K3S_SKIP_DOWNLOAD=true INSTALL_K3S_VERSION=v1.33.5+k3s1 INSTALL_K3S_SKIP_START=true sh " + r + "/var/lib/gpuprov/k3s-install.sh server",
		"run: systemctl restart --no-block k3s",
		opKubectl(r, "s0"), opKubectl(r, "s0"),
		"run: cat -- " + r + "/var/lib/rancher/k3s/server/token",
		"run: cat -- " + r + "/etc/rancher/k3s/k3s.yaml",
	})
	for _, op := range ops {
		if strings.Contains(op, "curl") || strings.Contains(op, "https://") {
			t.Errorf("air-gapped install fetched something: %s", op)
		}
	}
	if _, err := k3s.Server(ctx, n, serverInfo, clusterToken, cfg); err != nil {
		t.Fatal(err)
	}
	for _, op := range n.takeOps() {
		if strings.HasPrefix(op, "write: ") || strings.Contains(op, "install.sh server") {
			t.Errorf("air-gapped re-run changed something: %s", op)
		}
	}
}

func TestNotReadyReportsJournalTail(t *testing.T) {
	for _, role := range []string{"server", "agent"} {
		t.Run(role, func(t *testing.T) {
			n := newFakeNode(t)
			n.neverReady = true
			cfg := testConfig(t)
			var err error
			unit := "k3s"
			if role == "server" {
				_, err = k3s.Server(context.Background(), n, serverInfo, clusterToken, cfg)
			} else {
				unit = "k3s-agent"
				server := k3s.ServerInfo{JoinURL: "https://10.0.0.10:6443", JoinToken: joinToken}
				_, err = k3s.Agent(context.Background(), n, k3s.NodeInfo{Name: "a1"}, server, cfg)
			}
			var nre *k3s.NotReadyError
			if !errors.Is(err, k3s.ErrNotReady) || !errors.As(err, &nre) {
				t.Fatalf("want ErrNotReady, got %v", err)
			}
			if nre.Unit != unit || !strings.HasPrefix(nre.Journal, "journal line 11\n") ||
				!strings.HasSuffix(nre.Journal, "journal line 40") || !strings.Contains(err.Error(), "journal line 40") {
				t.Errorf("unit %q, journal:\n%s", nre.Unit, nre.Journal)
			}
			ops := n.takeOps()
			if last := ops[len(ops)-1]; last != "run: journalctl -u "+unit+" --no-pager -n 30" {
				t.Errorf("last op %q", last)
			}
			// One check per second for a minute, then the journal.
			if polls := len(ops) - 9; polls < 55 || polls > 62 {
				t.Errorf("%d readiness checks in a 1m timeout at 1s", polls)
			}
		})
	}
}

func TestFormServerThenAgentsInParallel(t *testing.T) {
	server := newFakeNode(t)
	a1, a2 := newFakeNode(t), newFakeNode(t)
	a2.gpus, a2.toolkit = 1, true
	server.alloc = 1 // what kubectl on the server reports for GPU nodes
	s, err := k3s.Form(context.Background(), k3s.Target{Node: server, Info: serverInfo},
		[]k3s.Target{{Node: a1, Info: k3s.NodeInfo{Name: "a1"}}, {Node: a2, Info: k3s.NodeInfo{Name: "a2"}}},
		clusterToken, testConfig(t))
	if err != nil || s == nil {
		t.Fatalf("form: %v, %v", s, err)
	}
	var checks []string
	for _, op := range server.takeOps() {
		if strings.Contains(op, " get node a") {
			checks = append(checks, op)
		}
	}
	if len(checks) != 2 {
		t.Errorf("server checked the agents %d times: %q", len(checks), checks)
	}
	for _, a := range []*fakeNode{a1, a2} {
		if !strings.Contains(a.file(pConfig), "token: "+joinToken) || !strings.Contains(a.file(pConfig), "server: https://10.0.0.10:6443") {
			t.Errorf("agent config:\n%s", a.file(pConfig))
		}
	}
}

func TestInvalidArgumentsRunNothing(t *testing.T) {
	cases := map[string]func(n k3s.Node) error{
		"bad node name": func(n k3s.Node) error {
			_, err := k3s.Server(context.Background(), n, k3s.NodeInfo{Name: "Bad_Name", PublicIP: "1.2.3.4"}, clusterToken, k3s.Config{})
			return err
		},
		"empty token": func(n k3s.Node) error {
			_, err := k3s.Server(context.Background(), n, serverInfo, "", k3s.Config{})
			return err
		},
		"cross-cloud without public IP": func(n k3s.Node) error {
			_, err := k3s.Agent(context.Background(), n, k3s.NodeInfo{Name: "a1"},
				k3s.ServerInfo{JoinURL: "https://1.2.3.4:6443", JoinToken: joinToken}, k3s.Config{Network: k3s.CrossCloud})
			return err
		},
		"agent without K10 token": func(n k3s.Node) error {
			_, err := k3s.Agent(context.Background(), n, k3s.NodeInfo{Name: "a1"},
				k3s.ServerInfo{JoinURL: "https://1.2.3.4:6443", JoinToken: clusterToken}, k3s.Config{})
			return err
		},
		"bad version": func(n k3s.Node) error {
			_, err := k3s.Server(context.Background(), n, serverInfo, clusterToken, k3s.Config{Version: "latest"})
			return err
		},
		"air gap without binary": func(n k3s.Node) error {
			_, err := k3s.Server(context.Background(), n, serverInfo, clusterToken, k3s.Config{AirGap: &k3s.AirGap{InstallScript: []byte("x")}})
			return err
		},
	}
	for name, call := range cases {
		t.Run(name, func(t *testing.T) {
			n := newFakeNode(t)
			if err := call(n); !errors.Is(err, k3s.ErrInvalid) {
				t.Errorf("want ErrInvalid, got %v", err)
			}
			if ops := n.takeOps(); len(ops) != 0 {
				t.Errorf("ran %q", ops)
			}
		})
	}
}

func TestGenerateTokenAndRedaction(t *testing.T) {
	a, err := k3s.GenerateToken()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := k3s.GenerateToken()
	if len(a) != 64 || a == b || strings.Trim(a, "0123456789abcdef") != "" {
		t.Errorf("tokens %q, %q", a, b)
	}
	s := k3s.ServerInfo{Name: "s0", URL: "https://1.2.3.4:6443", JoinToken: joinToken}
	var logged strings.Builder
	slog.New(slog.NewTextHandler(&logged, nil)).Info("x", "server", s)
	for _, out := range []string{fmt.Sprint(s), fmt.Sprintf("%+v", s), fmt.Sprintf("%#v", &s), logged.String()} {
		if strings.Contains(out, "s3cret") {
			t.Errorf("token printed: %s", out)
		}
	}
}
