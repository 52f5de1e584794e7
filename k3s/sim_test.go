package k3s_test

// Integration tests: the package's real command sequence, over real SSH,
// against the simulated cloud's sandboxes with the k3s emulation
// (provider/sim/simserver/k3semu) wired in through the sim's hooks.

import (
	"context"
	"errors"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/org/gpuprov/clock"
	"github.com/org/gpuprov/k3s"
	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/sim"
	"github.com/org/gpuprov/provider/sim/simserver"
	"github.com/org/gpuprov/provider/sim/simserver/k3semu"
	"github.com/org/gpuprov/ssh"
)

const (
	simCloud = "sim-a"
	simBoot  = 3 * time.Second
)

// simNode is a k3s.Node over the project's SSH client, as the engine
// builds it: commands as root (sudo -n when the login is not root), files
// through ssh.Client.WriteFile. It records what it did.
type simNode struct {
	c  *ssh.Client
	id string // the sim instance id

	mu     sync.Mutex
	runs   []string
	writes []string
}

func (n *simNode) Run(ctx context.Context, cmd string) ([]byte, []byte, error) {
	n.mu.Lock()
	n.runs = append(n.runs, cmd)
	n.mu.Unlock()
	res, err := n.c.Run(ctx, cmd, ssh.WithSudo())
	return res.Stdout, res.Stderr, err
}

func (n *simNode) WriteFile(ctx context.Context, path string, content []byte, mode fs.FileMode) error {
	n.mu.Lock()
	n.writes = append(n.writes, path)
	n.mu.Unlock()
	return n.c.WriteFile(ctx, path, content, mode)
}

// take returns and forgets what n did.
func (n *simNode) take() (runs, writes []string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	runs, writes = n.runs, n.writes
	n.runs, n.writes = nil, nil
	return runs, writes
}

// simEnv is an in-process sim server with the k3s emulation: the VMs
// whose name starts with "gpu" get the instance's GPUs and the NVIDIA
// toolkit, "notk" a GPU without the toolkit; the part of the name before
// the first '-' names the emulated cluster.
type simEnv struct {
	srv *simserver.Server
	clk *clock.Fake
	p   *sim.Provider
}

func newSimEnv(t *testing.T) *simEnv {
	t.Helper()
	clusters := t.TempDir()
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	so := simserver.Options{Clock: clk, Clouds: []simserver.CloudConfig{{Name: simCloud,
		Timing: &simserver.Timing{BootTime: simserver.Duration(simBoot), DeleteTime: simserver.Duration(time.Second)}}}}
	k3semu.Attach(&so, func(inst simserver.Instance) k3semu.Options {
		vm := inst.Labels[provider.LabelVM]
		cluster, host, _ := strings.Cut(vm, "-")
		o := k3semu.Options{ClusterDir: filepath.Join(clusters, cluster)}
		switch {
		case strings.HasPrefix(host, "gpu"):
			o.GPUs, o.GPUName = inst.GPUCount, inst.GPU
		case strings.HasPrefix(host, "notk"):
			o.GPUs, o.NoToolkit = 1, true
		}
		return o
	})
	srv, err := simserver.Start(so)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Errorf("sim close: %v", err)
		}
	})
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	p, err := sim.New(sim.Config{Endpoint: srv.URL(), Cloud: simCloud, APIKey: srv.APIKey(simCloud), RequestTimeout: 5 * time.Second},
		sim.WithName(simCloud), sim.WithInstallation("k3s-test"), sim.WithHTTPClient(&http.Client{Transport: tr}))
	if err != nil {
		t.Fatal(err)
	}
	return &simEnv{srv: srv, clk: clk, p: p}
}

// launch creates one instance per VM name with spec.OpenPorts =
// k3s.Ports(mode), boots them, and connects to each over SSH, pinning the
// host key injected through cloud-init.
func (e *simEnv) launch(t *testing.T, mode k3s.Network, vms ...string) []*simNode {
	t.Helper()
	ctx := context.Background()
	offers, err := e.p.Plan(ctx, &provider.ResourceRequest{GPU: "H100-80GB", GPUCount: 1})
	if err != nil || len(offers) == 0 {
		t.Fatalf("plan: %v", err)
	}
	of := offers[0]
	user, err := ssh.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	hostKeys := make([]ssh.KeyPair, len(vms))
	for i, vm := range vms {
		if hostKeys[i], err = ssh.GenerateKey(); err != nil {
			t.Fatal(err)
		}
		spec := &provider.InstanceSpec{VM: vm, Installation: "k3s-test", Attempt: 1, IdempotencyToken: vm + "-1",
			SSHUser: "gpuprov", AuthorizedKeys: []string{user.AuthorizedKey},
			HostKey:   &provider.HostKey{PrivatePEM: string(hostKeys[i].PrivatePEM), Public: hostKeys[i].AuthorizedKey},
			OpenPorts: k3s.Ports(mode)}
		prep, err := e.p.Prepare(ctx, &of, spec)
		if err != nil {
			t.Fatalf("prepare %s: %v", vm, err)
		}
		if _, err := e.p.Create(ctx, &of, prep, spec); err != nil {
			t.Fatalf("create %s: %v", vm, err)
		}
	}
	e.clk.Advance(simBoot)
	nodes := make([]*simNode, len(vms))
	for i, vm := range vms {
		obs, err := e.p.Observe(ctx, of.Location, vm)
		if err != nil || len(obs) != 1 || obs[0].Status != provider.StatusRunning || obs[0].SSH == nil {
			t.Fatalf("observe %s: %+v, %v", vm, obs, err)
		}
		policy, err := ssh.FixedHostKey(hostKeys[i].AuthorizedKey)
		if err != nil {
			t.Fatal(err)
		}
		c, err := ssh.Dial(ctx, ssh.Config{Addr: obs[0].SSH.Address(), User: obs[0].SSH.User, Signer: user.Signer, HostKey: policy})
		if err != nil {
			t.Fatalf("ssh %s: %v", vm, err)
		}
		t.Cleanup(func() { _ = c.Close() }) // closed before the sim (cleanups run last-in first-out)
		nodes[i] = &simNode{c: c, id: obs[0].ID}
	}
	return nodes
}

func (e *simEnv) sandbox(n *simNode, rel string) string {
	return filepath.Join(e.srv.SandboxDir(simCloud, n.id), filepath.FromSlash(rel))
}

// simConfig is a cross-cloud Config on its own self-advancing fake clock.
func simConfig(t *testing.T) k3s.Config {
	cfg := testConfig(t)
	cfg.Network = k3s.CrossCloud
	cfg.ReadyTimeout, cfg.PollInterval = 20*time.Second, time.Second
	return cfg
}

func TestSimClusterFormsAndRerunIsHarmless(t *testing.T) {
	_, statErr := os.Stat("/etc/rancher/k3s/config.yaml")
	e := newSimEnv(t)
	nodes := e.launch(t, k3s.CrossCloud, "c1-n0", "c1-n1", "c1-gpu2", "c1-bad3")
	n0, n1, gpu2, bad3 := nodes[0], nodes[1], nodes[2], nodes[3]
	info := func(name string) k3s.NodeInfo { return k3s.NodeInfo{Name: name, PublicIP: "127.0.0.1"} }
	ctx := context.Background()
	cfg := simConfig(t)

	res, _ := e.srv.SideResources(simCloud)
	for _, fw := range res.Firewalls {
		if got := fw.Ports; len(got) != 3 || got[1].Number != 6443 || got[2].Number != 51820 || got[2].Protocol != "udp" {
			t.Errorf("firewall %s opens %+v, want 22/tcp, 6443/tcp, 51820/udp", fw.Name, got)
		}
	}

	agents := []k3s.Target{{Node: n1, Info: info("c1-n1")}, {Node: gpu2, Info: info("c1-gpu2")}}
	token, err := k3s.GenerateToken()
	if err != nil {
		t.Fatal(err)
	}
	s, err := k3s.Form(ctx, k3s.Target{Node: n0, Info: info("c1-n0")}, agents, token, cfg)
	if err != nil {
		t.Fatalf("form: %v", err)
	}
	if s.URL != "https://127.0.0.1:6443" || !strings.HasPrefix(s.JoinToken, "K10") {
		t.Errorf("server %v", s)
	}
	var kc kubeconfigDoc
	if err := yaml.Unmarshal(s.Kubeconfig, &kc); err != nil || len(kc.Clusters) != 1 || kc.Clusters[0].Cluster.Server != s.URL {
		t.Errorf("kubeconfig %+v, %v:\n%s", kc, err, s.Kubeconfig)
	}
	out, err := n0.c.Run(ctx, "./usr/local/bin/k3s kubectl get nodes")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"c1-n0 Ready server", "c1-n1 Ready agent", "c1-gpu2 Ready agent"} {
		if !strings.Contains(string(out.Stdout), want) {
			t.Errorf("kubectl get nodes lacks %q:\n%s", want, out.Stdout)
		}
	}
	if err := k3s.WaitNode(ctx, n0, "c1-gpu2", 1, cfg); err != nil {
		t.Errorf("GPU node: %v", err)
	}
	conf, err := os.ReadFile(e.sandbox(gpu2, "/etc/rancher/k3s/config.yaml"))
	if err != nil || !strings.Contains(string(conf), "nvidia.com/gpu.present=true") || !strings.Contains(string(conf), "token: "+s.JoinToken) {
		t.Errorf("GPU agent config.yaml: %v\n%s", err, conf)
	}
	if st, err := os.Stat(e.sandbox(gpu2, "/etc/rancher/k3s/config.yaml")); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("config.yaml mode: %v, %v", st, err)
	}
	if _, err := os.Stat(e.sandbox(n0, "/var/lib/rancher/k3s/server/manifests/gpuprov-nvidia-device-plugin.yaml")); err != nil {
		t.Errorf("device plugin manifest: %v", err)
	}
	for _, n := range nodes[:3] {
		runs, _ := n.take()
		assertNoSecret(t, prefixed(runs), token, s.JoinToken)
	}

	// Forming the same cluster again changes nothing.
	if _, err := k3s.Form(ctx, k3s.Target{Node: n0, Info: info("c1-n0")}, agents, token, cfg); err != nil {
		t.Fatalf("second form: %v", err)
	}
	for _, n := range nodes[:3] {
		runs, writes := n.take()
		if len(writes) != 0 {
			t.Errorf("re-run wrote %q", writes)
		}
		for _, r := range runs {
			if strings.Contains(r, "k3s-install.sh") || strings.Contains(r, "restart") {
				t.Errorf("re-run ran %q", r)
			}
		}
	}
	for _, n := range nodes[:3] {
		calls, _ := os.ReadFile(e.sandbox(n, "/var/log/k3semu/calls.log"))
		if got := strings.Count("\n"+string(calls), "\ninstall.sh "); got != 1 {
			t.Errorf("the install script ran %d times on %s", got, n.id)
		}
	}

	// An agent holding a wrong token never joins; the error shows why.
	wrong := *s
	wrong.JoinToken = s.JoinToken + "-not-it"
	_, err = k3s.Agent(ctx, bad3, info("c1-bad3"), wrong, cfg)
	var nre *k3s.NotReadyError
	if !errors.As(err, &nre) || nre.Unit != "k3s-agent" || !strings.Contains(nre.Journal, "401 Unauthorized") {
		t.Fatalf("want a NotReadyError with the journal tail, got %v", err)
	}

	if _, err := os.Stat("/etc/rancher/k3s/config.yaml"); errors.Is(statErr, fs.ErrNotExist) && !errors.Is(err, fs.ErrNotExist) {
		t.Error("the sim wrote /etc/rancher/k3s/config.yaml on the test machine")
	}
}

func TestSimAirGappedServer(t *testing.T) {
	e := newSimEnv(t)
	n := e.launch(t, k3s.Private, "ag-n0")[0]
	cfg := simConfig(t)
	cfg.Network = k3s.Private
	cfg.AirGap = &k3s.AirGap{
		Binary:         k3semu.Binary(k3s.DefaultVersion),
		InstallScript:  k3semu.InstallScript(),
		Images:         []k3s.File{{Name: "k3s-airgap-images-amd64.tar", Data: []byte("images")}},
		RegistriesYAML: []byte("mirrors:\n  registry.example.internal:\n    endpoint: [\"https://mirror.example.internal:5000\"]\n"),
	}
	info := k3s.NodeInfo{Name: "ag-n0", PrivateIP: "127.0.0.1"}
	s, err := k3s.Server(context.Background(), n, info, "airgapped-token", cfg)
	if err != nil {
		t.Fatal(err)
	}
	if s.URL != "https://127.0.0.1:6443" {
		t.Errorf("url %s", s.URL)
	}
	calls, _ := os.ReadFile(e.sandbox(n, "/var/log/k3semu/calls.log"))
	if strings.Contains(string(calls), "curl") {
		t.Errorf("air-gapped install fetched:\n%s", calls)
	}
	if _, err := os.Stat(e.sandbox(n, "/var/log/k3semu/downloads.log")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("air-gapped install downloaded the binary: %v", err)
	}
	for path, mode := range map[string]fs.FileMode{
		"/usr/local/bin/k3s": 0o755, "/etc/rancher/k3s/registries.yaml": 0o600,
		"/var/lib/rancher/k3s/agent/images/k3s-airgap-images-amd64.tar": 0o644,
	} {
		if st, err := os.Stat(e.sandbox(n, path)); err != nil || st.Mode().Perm() != mode {
			t.Errorf("%s: %v, %v", path, st, err)
		}
	}
}

func TestSimGPUWithoutToolkit(t *testing.T) {
	e := newSimEnv(t)
	n := e.launch(t, k3s.CrossCloud, "nt-notk0")[0]
	_, err := k3s.Server(context.Background(), n, k3s.NodeInfo{Name: "nt-notk0", PublicIP: "127.0.0.1"}, "tok", simConfig(t))
	if !errors.Is(err, k3s.ErrNoToolkit) {
		t.Fatalf("want ErrNoToolkit, got %v", err)
	}
	if _, err := os.Stat(e.sandbox(n, "/etc/rancher/k3s/config.yaml")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("config.yaml written on a node that cannot run GPU pods: %v", err)
	}
}

func prefixed(runs []string) []string {
	out := make([]string, len(runs))
	for i, r := range runs {
		out[i] = "run: " + r
	}
	return out
}
