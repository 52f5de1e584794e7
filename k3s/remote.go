package k3s

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"path"
	"strings"
)

// Node is one machine the package drives: in production an SSH connection
// (an adapter around ssh.Client), in tests a fake or a sandbox.
type Node interface {
	// Run runs cmd with `sh -c` semantics as root (an adapter for a non-root
	// login wraps it in `sudo -n`) and returns what it printed. A command
	// that exits non-zero returns an error; the adapter should include the
	// tail of stderr in it. cmd never contains a secret.
	Run(ctx context.Context, cmd string) (stdout, stderr []byte, err error)
	// WriteFile installs content at the absolute path, atomically (readers
	// see the old file or the new one), with mode, as root, creating the
	// parent folders. Secrets travel only this way, never on a command
	// line.
	WriteFile(ctx context.Context, path string, content []byte, mode fs.FileMode) error
}

// Remote paths, before the root prefix is prepended.
const (
	pathConfig      = "/etc/rancher/k3s/config.yaml"
	pathRegistries  = "/etc/rancher/k3s/registries.yaml"
	pathKubeconfig  = "/etc/rancher/k3s/k3s.yaml"
	pathBinary      = "/usr/local/bin/k3s"
	pathUnitDir     = "/etc/systemd/system"
	pathImages      = "/var/lib/rancher/k3s/agent/images"
	pathToken       = "/var/lib/rancher/k3s/server/token"
	pathManifests   = "/var/lib/rancher/k3s/server/manifests"
	pathPluginFile  = pathManifests + "/gpuprov-nvidia-device-plugin.yaml"
	pathInstallDir  = "/var/lib/gpuprov"
	pathInstallFile = pathInstallDir + "/k3s-install.sh"
)

// Commands that take no argument.
const (
	cmdRoot      = `printf '%s' "${GPUPROV_ROOT:-}"`
	cmdCloudInit = `if command -v cloud-init >/dev/null 2>&1; then cloud-init status --wait >/dev/null || [ $? -eq 2 ]; fi`
	cmdGPUProbe  = `if command -v nvidia-smi >/dev/null 2>&1; then nvidia-smi -L || exit; fi; ` +
		`if command -v nvidia-container-runtime >/dev/null 2>&1 || command -v nvidia-ctk >/dev/null 2>&1; then echo toolkit=yes; fi`
)

// remote is a Node with its root prefix resolved.
type remote struct {
	n    Node
	name string // the node name, for errors and logs
	root string // "" on a real machine; absolute
}

// dial resolves the root prefix of n: the value of GPUPROV_ROOT in the
// node's command environment, empty on a real machine. A relative value is
// taken relative to the login folder and resolved once with `cd && pwd -P`.
func dial(ctx context.Context, n Node, name string) (*remote, error) {
	r := &remote{n: n, name: name}
	out, err := r.run(ctx, "probe the root prefix", cmdRoot)
	if err != nil {
		return nil, err
	}
	root := string(out)
	if root != "" && !path.IsAbs(root) {
		out, err = r.run(ctx, "resolve the root prefix", "cd -- "+quote(root)+" && pwd -P")
		if err != nil {
			return nil, err
		}
		root = strings.TrimSpace(string(out))
		if !path.IsAbs(root) {
			return nil, fmt.Errorf("k3s: %s: root prefix %q is not absolute", name, root)
		}
	}
	r.root = strings.TrimSuffix(root, "/")
	return r, nil
}

// p returns the remote path of an absolute path p0: the root prefix plus p0.
func (r *remote) p(p0 string) string { return r.root + p0 }

// run runs cmd and returns its stdout; what names the step in errors.
func (r *remote) run(ctx context.Context, what, cmd string) ([]byte, error) {
	stdout, stderr, err := r.n.Run(ctx, cmd)
	if err != nil {
		if tail := lastLines(stderr, 5); tail != "" && !strings.Contains(err.Error(), tail) {
			return stdout, fmt.Errorf("k3s: %s: %s: %w: %s", r.name, what, err, tail)
		}
		return stdout, fmt.Errorf("k3s: %s: %s: %w", r.name, what, err)
	}
	return stdout, nil
}

// upload is one file WriteFile may have to install.
type upload struct {
	path string // without the root prefix
	data []byte
	mode fs.FileMode
}

// sync installs each file whose sha256 on the node differs from its
// content's (or which is missing), after one command that lists the sums
// of them all, and reports which it wrote.
func (r *remote) sync(ctx context.Context, files []upload) ([]bool, error) {
	wrote := make([]bool, len(files))
	if len(files) == 0 {
		return wrote, nil
	}
	words := make([]string, len(files))
	for i, f := range files {
		words[i] = quote(r.p(f.path))
	}
	cmd := "for f in " + strings.Join(words, " ") +
		`; do if [ -e "$f" ]; then sha256sum -- "$f" || exit; fi; done`
	out, err := r.run(ctx, "read file checksums", cmd)
	if err != nil {
		return wrote, err
	}
	have := map[string]string{}
	for line := range strings.Lines(string(out)) {
		sum, file, ok := strings.Cut(strings.TrimRight(line, "\n"), "  ")
		if ok {
			have[file] = sum
		}
	}
	for i, f := range files {
		sum := sha256.Sum256(f.data)
		if have[r.p(f.path)] == hex.EncodeToString(sum[:]) {
			continue
		}
		if err := r.n.WriteFile(ctx, r.p(f.path), f.data, f.mode); err != nil {
			return wrote, fmt.Errorf("k3s: %s: write %s: %w", r.name, f.path, err)
		}
		wrote[i] = true
	}
	return wrote, nil
}

// journal returns the last lines lines of `journalctl -u unit`, or a note
// saying why it could not be read.
func (r *remote) journal(ctx context.Context, unit string, lines int) string {
	out, err := r.run(ctx, "read the journal", fmt.Sprintf("journalctl -u %s --no-pager -n %d", unit, lines))
	if err != nil {
		return "(journal unavailable: " + err.Error() + ")"
	}
	return strings.TrimRight(string(out), "\n")
}

// quote returns s as one POSIX shell word (single-quoted unless it is made
// only of safe characters). s must not contain NUL; callers pass paths,
// names and literals.
func quote(s string) string {
	if s != "" && strings.IndexFunc(s, unsafeRune) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func unsafeRune(r rune) bool {
	switch {
	case 'a' <= r && r <= 'z', 'A' <= r && r <= 'Z', '0' <= r && r <= '9':
		return false
	}
	return !strings.ContainsRune("@%+:,./_-", r)
}

// lastLines returns the last n non-empty lines of b, joined by "; ".
func lastLines(b []byte, n int) string {
	var lines []string
	for l := range bytes.Lines(bytes.TrimSpace(b)) {
		if l = bytes.TrimSpace(l); len(l) > 0 {
			lines = append(lines, string(l))
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "; ")
}
