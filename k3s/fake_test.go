package k3s_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/org/gpuprov/clock"
	"github.com/org/gpuprov/k3s"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeNode is a recording k3s.Node that models just enough of a machine
// for the package's command sequence: files (for checksums and reads), the
// installed version and unit files, unit states and readiness polls. Every
// Run and WriteFile is appended to ops as "run: CMD" or "write: PATH MODE".
type fakeNode struct {
	t *testing.T

	mu         sync.Mutex
	root       string // what the root probe prints
	resolved   string // what `cd && pwd -P` prints for a relative root
	gpus       int
	toolkit    bool
	readyAfter int  // readiness polls before the unit is up
	neverReady bool // the unit never comes up
	alloc      int  // nvidia.com/gpu allocatable once ready
	files      map[string][]byte
	modes      map[string]fs.FileMode
	version    string // installed k3s version, "" when none
	polls      int
	ops        []string
}

func newFakeNode(t *testing.T) *fakeNode {
	return &fakeNode{t: t, readyAfter: 2, files: map[string][]byte{}, modes: map[string]fs.FileMode{}}
}

const (
	joinToken  = "K10cafe0123456789::server:s3cret-cluster-token"
	kubeconfig = `apiVersion: v1
clusters:
- cluster:
    certificate-authority-data: Q0E=
    server: https://127.0.0.1:6443
  name: default
contexts:
- context:
    cluster: default
    user: default
  name: default
current-context: default
kind: Config
preferences: {}
users:
- name: default
  user:
    client-certificate-data: Q0VSVA==
    client-key-data: S0VZ
`
)

var (
	installRE = regexp.MustCompile(`INSTALL_K3S_VERSION=(\S+) .* sh (\S+) (server|agent)$`)
	forRE     = regexp.MustCompile(`^for f in (.*); do if`)
)

func (f *fakeNode) Run(ctx context.Context, cmd string) ([]byte, []byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ops = append(f.ops, "run: "+cmd)
	p := func(s string) string { return f.prefix() + s }
	fail := func(stderr string) ([]byte, []byte, error) {
		return nil, []byte(stderr), errors.New("exit status 1")
	}
	switch {
	case cmd == `printf '%s' "${GPUPROV_ROOT:-}"`:
		return []byte(f.root), nil, nil
	case strings.HasPrefix(cmd, "cd -- "):
		return []byte(f.resolved + "\n"), nil, nil
	case strings.HasPrefix(cmd, "if command -v cloud-init"):
		return nil, nil, nil
	case strings.HasPrefix(cmd, "if command -v nvidia-smi"):
		var out strings.Builder
		for i := range f.gpus {
			fmt.Fprintf(&out, "GPU %d: NVIDIA H100 80GB HBM3 (UUID: GPU-%d)\n", i, i)
		}
		if f.toolkit {
			out.WriteString("toolkit=yes\n")
		}
		return []byte(out.String()), nil, nil
	case forRE.MatchString(cmd):
		var out strings.Builder
		for _, path := range strings.Fields(forRE.FindStringSubmatch(cmd)[1]) {
			if b, ok := f.files[path]; ok {
				sum := sha256.Sum256(b)
				fmt.Fprintf(&out, "%s  %s\n", hex.EncodeToString(sum[:]), path)
			}
		}
		return []byte(out.String()), nil, nil
	case strings.HasSuffix(cmd, " --version; fi"):
		if f.version != "" && (f.has(p("/etc/systemd/system/k3s.service")) && strings.Contains(cmd, "k3s.service") ||
			f.has(p("/etc/systemd/system/k3s-agent.service")) && strings.Contains(cmd, "k3s-agent.service")) {
			return []byte("k3s version " + f.version + " (e22f9be3)\ngo version go1.24.6\n"), nil, nil
		}
		return nil, nil, nil
	case installRE.MatchString(cmd):
		m := installRE.FindStringSubmatch(cmd)
		if strings.Contains(cmd, "INSTALL_K3S_SKIP_DOWNLOAD=true") && !f.has(p("/usr/local/bin/k3s")) {
			return fail("[ERROR]  Executable k3s binary not found at /usr/local/bin/k3s")
		}
		f.version = m[1]
		unit := map[string]string{"server": "k3s", "agent": "k3s-agent"}[m[3]]
		f.files[p("/etc/systemd/system/"+unit+".service")] = []byte("[Unit]\n")
		return []byte("[INFO]  installed\n"), nil, nil
	case strings.HasPrefix(cmd, "systemctl start --no-block "), strings.HasPrefix(cmd, "systemctl restart --no-block "):
		if strings.HasPrefix(cmd, "systemctl restart") || f.polls < f.readyAfter {
			f.polls = 0
		}
		return nil, nil, nil
	case cmd == "systemctl is-active k3s-agent || true":
		if f.up() {
			return []byte("active\n"), nil, nil
		}
		return []byte("activating\n"), nil, nil
	case strings.Contains(cmd, " kubectl --kubeconfig "):
		if !f.up() {
			return fail("The connection to the server 127.0.0.1:6443 was refused")
		}
		if f.alloc > 0 {
			return []byte(fmt.Sprintf("True %d", f.alloc)), nil, nil
		}
		return []byte("True "), nil, nil
	case strings.HasPrefix(cmd, "journalctl -u "):
		var out strings.Builder
		for i := 1; i <= 40; i++ {
			fmt.Fprintf(&out, "journal line %d\n", i)
		}
		lines := strings.SplitAfter(strings.TrimSuffix(out.String(), "\n"), "\n")
		return []byte(strings.Join(lines[len(lines)-30:], "")), nil, nil
	case cmd == "cat -- "+p("/var/lib/rancher/k3s/server/token"):
		return []byte(joinToken + "\n"), nil, nil
	case cmd == "cat -- "+p("/etc/rancher/k3s/k3s.yaml"):
		return []byte(kubeconfig), nil, nil
	}
	f.t.Errorf("fake node: unexpected command %q", cmd)
	return fail("unexpected")
}

// up counts a readiness poll and reports whether the unit is up.
func (f *fakeNode) up() bool {
	f.polls++
	return !f.neverReady && f.polls >= f.readyAfter
}

func (f *fakeNode) prefix() string {
	if f.resolved != "" {
		return f.resolved
	}
	return f.root
}

func (f *fakeNode) has(path string) bool { _, ok := f.files[path]; return ok }

func (f *fakeNode) WriteFile(ctx context.Context, path string, content []byte, mode fs.FileMode) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ops = append(f.ops, fmt.Sprintf("write: %s %04o", path, mode))
	f.files[path] = append([]byte(nil), content...)
	f.modes[path] = mode
	return nil
}

// takeOps returns the operations recorded so far and forgets them.
func (f *fakeNode) takeOps() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	ops := f.ops
	f.ops = nil
	return ops
}

func (f *fakeNode) file(path string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return string(f.files[path])
}

// testConfig is a Config on a fake clock that advances by itself, so
// polling and timeouts cost no real time.
func testConfig(t *testing.T) k3s.Config {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	t.Cleanup(clk.AutoAdvance())
	return k3s.Config{Clock: clk, ReadyTimeout: time.Minute, PollInterval: time.Second}
}

// assertOps compares a recorded sequence with the expected one, line by line.
func assertOps(t *testing.T, got, want []string) {
	t.Helper()
	for i := 0; i < max(len(got), len(want)); i++ {
		var g, w string
		if i < len(got) {
			g = got[i]
		}
		if i < len(want) {
			w = want[i]
		}
		if g != w {
			t.Errorf("op %d:\n got  %s\n want %s", i, g, w)
		}
	}
}
