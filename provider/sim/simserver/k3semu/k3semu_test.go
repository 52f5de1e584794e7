package k3semu_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/org/gpuprov/provider/sim/simserver"
	"github.com/org/gpuprov/provider/sim/simserver/k3semu"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// sandbox is one emulated machine in a temporary folder.
type sandbox struct {
	t   *testing.T
	dir string
}

func newSandbox(t *testing.T, cluster string, o k3semu.Options) *sandbox {
	t.Helper()
	dir := t.TempDir()
	o.ClusterDir = cluster
	if err := k3semu.Install(dir, o); err != nil {
		t.Fatal(err)
	}
	return &sandbox{t: t, dir: dir}
}

// sh runs script in the sandbox as the sim would: cwd the sandbox, its bin
// first on PATH, GPUPROV_ROOT set. It returns stdout, stderr and the exit
// code.
func (s *sandbox) sh(script string) (string, string, int) {
	s.t.Helper()
	cmd := exec.Command("sh", "-c", script)
	cmd.Dir = s.dir
	cmd.Env = append(os.Environ(), k3semu.Env(s.dir)...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		s.t.Fatalf("%s: %v", script, err)
	}
	return out.String(), errb.String(), cmd.ProcessState.ExitCode()
}

func (s *sandbox) must(script string) string {
	s.t.Helper()
	out, errOut, code := s.sh(script)
	if code != 0 {
		s.t.Fatalf("%s: exit %d: %s", script, code, errOut)
	}
	return out
}

// install runs the emulated install script as the k3s package does.
func (s *sandbox) install(role string) {
	s.t.Helper()
	s.must("curl -sfL -o ./k3s-install.sh https://get.k3s.io && INSTALL_K3S_VERSION=v1.33.5+k3s1 INSTALL_K3S_SKIP_START=true sh ./k3s-install.sh " + role)
}

func (s *sandbox) writeConfig(content string) {
	s.t.Helper()
	p := filepath.Join(s.dir, "etc/rancher/k3s/config.yaml")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		s.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		s.t.Fatal(err)
	}
}

const readyQuery = `./usr/local/bin/k3s kubectl --kubeconfig ./etc/rancher/k3s/k3s.yaml get node %s -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status} {.status.allocatable.nvidia\.com/gpu}'`

func query(node string) string { return strings.Replace(readyQuery, "%s", node, 1) }

func TestInstallWritesToolsPerOptions(t *testing.T) {
	cluster := t.TempDir()
	cases := []struct {
		name string
		o    k3semu.Options
		want map[string]bool
	}{
		{"cpu", k3semu.Options{}, map[string]bool{"nvidia-smi": false, "nvidia-ctk": false}},
		{"gpu", k3semu.Options{GPUs: 2}, map[string]bool{"nvidia-smi": true, "nvidia-ctk": true, "nvidia-container-runtime": true}},
		{"gpu without toolkit", k3semu.Options{GPUs: 1, NoToolkit: true}, map[string]bool{"nvidia-smi": true, "nvidia-ctk": false}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newSandbox(t, cluster, c.o)
			for _, tool := range []string{"systemctl", "journalctl", "cloud-init", "curl", "sudo"} {
				if st, err := os.Stat(filepath.Join(s.dir, "bin", tool)); err != nil || st.Mode().Perm() != 0o755 {
					t.Errorf("%s: %v, %v", tool, st, err)
				}
			}
			for tool, want := range c.want {
				if _, err := os.Stat(filepath.Join(s.dir, "bin", tool)); (err == nil) != want {
					t.Errorf("%s present = %v, want %v", tool, err == nil, want)
				}
			}
		})
	}
	if err := k3semu.Install(t.TempDir(), k3semu.Options{}); err == nil {
		t.Error("Install without ClusterDir succeeded")
	}
	s := newSandbox(t, cluster, k3semu.Options{GPUs: 2})
	if out := s.must("nvidia-smi -L"); strings.Count(out, "GPU ") != 2 || !strings.Contains(out, "H100") {
		t.Errorf("nvidia-smi -L: %q", out)
	}
}

func TestToolsRefuseToRunOutsideASandbox(t *testing.T) {
	s := newSandbox(t, t.TempDir(), k3semu.Options{})
	cmd := exec.Command(filepath.Join(s.dir, "bin", "systemctl"), "start", "k3s")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")} // no GPUPROV_ROOT
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "GPUPROV_ROOT is not set") {
		t.Fatalf("ran without GPUPROV_ROOT: %v: %s", err, out)
	}
}

func TestCurlServesOnlyTheInstallScript(t *testing.T) {
	s := newSandbox(t, t.TempDir(), k3semu.Options{})
	if out := s.must("curl -sfL https://get.k3s.io"); string(k3semu.InstallScript()) != out {
		t.Error("curl did not serve the emulated install script")
	}
	_, errOut, code := s.sh("curl -sfL -o x https://example.com/payload")
	if code != 6 || !strings.Contains(errOut, "Could not resolve host: example.com") {
		t.Errorf("other URL: exit %d: %s", code, errOut)
	}
}

func TestSudoKeepsTheSandbox(t *testing.T) {
	s := newSandbox(t, t.TempDir(), k3semu.Options{})
	if out := s.must(`sudo -n true && sudo -n -- sh -c 'printf %s "$GPUPROV_ROOT"; command -v systemctl'`); out != s.dir+s.dir+"/bin/systemctl\n" {
		t.Errorf("sudo: %q", out)
	}
}

func TestServerAndAgentsTokenChecks(t *testing.T) {
	cluster := t.TempDir()
	server := newSandbox(t, cluster, k3semu.Options{ReadyAfter: 2})
	agent := newSandbox(t, cluster, k3semu.Options{GPUs: 1})

	// An agent that starts before any server keeps retrying.
	agent.install("agent")
	agent.writeConfig("server: https://10.0.0.1:6443\ntoken: K10abc::server:pw\nnode-name: a1\nnode-label:\n  - nvidia.com/gpu.present=true\n")
	agent.must("systemctl start --no-block k3s-agent")
	if out, _, _ := agent.sh("systemctl is-active k3s-agent; systemctl is-active k3s-agent"); out != "activating\nactivating\n" {
		t.Errorf("agent without server: %q", out)
	}
	if j := agent.must("journalctl -u k3s-agent --no-pager -n 1"); !strings.Contains(j, "connection refused") {
		t.Errorf("journal: %q", j)
	}

	server.install("server")
	if out := server.must("./usr/local/bin/k3s --version"); !strings.HasPrefix(out, "k3s version v1.33.5+k3s1 ") {
		t.Errorf("version: %q", out)
	}
	server.writeConfig("token: pw\nnode-name: s0\n")
	if _, errOut, code := server.sh(query("s0")); code != 1 || !strings.Contains(errOut, "refused") {
		t.Errorf("before start: exit %d: %s", code, errOut)
	}
	server.must("systemctl start --no-block k3s")
	if _, _, code := server.sh(query("s0")); code != 1 {
		t.Error("server ready on the first look; ReadyAfter is 2")
	}
	if out := server.must(query("s0")); out != "True " {
		t.Errorf("server node: %q", out)
	}
	tok := strings.TrimSpace(server.must("cat var/lib/rancher/k3s/server/token"))
	if !strings.HasPrefix(tok, "K10") || !strings.HasSuffix(tok, "::server:pw") {
		t.Errorf("token file %q", tok)
	}

	// A K10 token with another CA hash fails like k3s.
	agent.must("systemctl restart --no-block k3s-agent")
	agent.sh("systemctl is-active k3s-agent; systemctl is-active k3s-agent")
	if j := agent.must("journalctl -u k3s-agent --no-pager -n 1"); !strings.Contains(j, "token CA hash does not match") {
		t.Errorf("journal: %q", j)
	}
	// The server's token joins; the GPU becomes allocatable once the
	// server holds the device plugin manifest.
	agent.writeConfig("server: https://10.0.0.1:6443\ntoken: \"" + tok + "\"\nnode-name: a1\nnode-label:\n  - nvidia.com/gpu.present=true\n")
	agent.must("systemctl restart --no-block k3s-agent")
	if out := agent.must("systemctl is-active k3s-agent || true; systemctl is-active k3s-agent"); out != "activating\nactive\n" {
		t.Errorf("agent with the right token: %q", out)
	}
	if out := server.must(query("a1")); out != "True " {
		t.Errorf("GPU node without the device plugin: %q", out)
	}
	manifests := filepath.Join(server.dir, "var/lib/rancher/k3s/server/manifests")
	if err := os.MkdirAll(manifests, 0o755); err != nil {
		t.Fatal(err)
	}
	plugin := "kind: RuntimeClass\n---\nmetadata:\n  name: nvidia-device-plugin-daemonset\n    runtimeClassName: nvidia\n"
	if err := os.WriteFile(filepath.Join(manifests, "p.yaml"), []byte(plugin), 0o644); err != nil {
		t.Fatal(err)
	}
	if out := server.must(query("a1")); out != "True 1" {
		t.Errorf("GPU node with the device plugin: %q", out)
	}
	if _, errOut, code := server.sh(query("nobody")); code != 1 || !strings.Contains(errOut, `nodes "nobody" not found`) {
		t.Errorf("unknown node: %d %s", code, errOut)
	}
	if _, errOut, code := server.sh("./usr/local/bin/k3s kubectl get pods -A"); code != 1 || !strings.Contains(errOut, "unsupported kubectl") {
		t.Errorf("unsupported kubectl: %d %s", code, errOut)
	}

	// A server restarted with another token refuses its datastore.
	server.writeConfig("token: other\nnode-name: s0\n")
	server.must("systemctl restart --no-block k3s")
	server.sh("systemctl is-active k3s; systemctl is-active k3s")
	if j := server.must("journalctl -u k3s --no-pager -n 1"); !strings.Contains(j, "bootstrap data already found and encrypted with different token") {
		t.Errorf("journal: %q", j)
	}
}

func TestAirGappedInstallNeedsTheBinary(t *testing.T) {
	s := newSandbox(t, t.TempDir(), k3semu.Options{})
	if err := os.WriteFile(filepath.Join(s.dir, "install.sh"), k3semu.InstallScript(), 0o755); err != nil {
		t.Fatal(err)
	}
	_, errOut, code := s.sh("INSTALL_K3S_SKIP_DOWNLOAD=true INSTALL_K3S_SKIP_START=true sh ./install.sh server")
	if code == 0 || !strings.Contains(errOut, "Executable k3s binary not found") {
		t.Errorf("without binary: exit %d: %s", code, errOut)
	}
	bin := filepath.Join(s.dir, "usr/local/bin/k3s")
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, k3semu.Binary("v1.32.9+k3s1"), 0o755); err != nil {
		t.Fatal(err)
	}
	s.must("INSTALL_K3S_SKIP_DOWNLOAD=true INSTALL_K3S_SKIP_START=true sh ./install.sh server")
	if out := s.must("./usr/local/bin/k3s --version"); !strings.HasPrefix(out, "k3s version v1.32.9+k3s1 ") {
		t.Errorf("uploaded binary replaced: %q", out)
	}
	if out := s.must("systemctl is-active k3s || true"); out != "inactive\n" {
		t.Errorf("INSTALL_K3S_SKIP_START ignored: %q", out)
	}
}

func TestAttachChainsHooks(t *testing.T) {
	var so simserver.Options
	so.SandboxEnv = []string{"A=1"}
	var prevCalled bool
	so.PrepareSandbox = func(string, simserver.Instance) error { prevCalled = true; return nil }
	cluster := t.TempDir()
	k3semu.Attach(&so, func(inst simserver.Instance) k3semu.Options {
		return k3semu.Options{ClusterDir: cluster, GPUs: inst.GPUCount}
	})
	if strings.Join(so.SandboxEnv, " ") != "A=1 GPUPROV_ROOT=." {
		t.Errorf("env %q", so.SandboxEnv)
	}
	dir := t.TempDir()
	if err := so.PrepareSandbox(dir, simserver.Instance{GPUCount: 1}); err != nil || !prevCalled {
		t.Fatalf("prepare: %v, previous hook called %v", err, prevCalled)
	}
	if _, err := os.Stat(filepath.Join(dir, "bin", "nvidia-smi")); err != nil {
		t.Errorf("GPU sandbox: %v", err)
	}
}
