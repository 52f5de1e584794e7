package k3semu

import (
	"embed"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/org/gpuprov/provider/sim/simserver"
)

//go:embed scripts
var scripts embed.FS

// Defaults of Options.
const (
	DefaultReadyAfter       = 2
	DefaultGPUName          = "NVIDIA H100 80GB HBM3"
	DefaultInstallScriptURL = "https://get.k3s.io"
)

// Options configure the emulation in one sandbox.
type Options struct {
	// ClusterDir is the folder the sandboxes of one emulated cluster share:
	// the emulated server publishes its token and CA hash there and every
	// node registers in it. Required. One cluster per folder.
	ClusterDir string
	// ReadyAfter is how many status checks (systemctl is-active, k3s
	// kubectl) a started unit stays "activating" before it comes up
	// (default DefaultReadyAfter): a boot that takes a few polls, without
	// any timer.
	ReadyAfter int
	// GPUs is the number of NVIDIA GPUs nvidia-smi -L lists; 0 installs no
	// nvidia-smi at all, like a CPU machine (and removes the one the sim
	// installs for a GPU offer). Where the sim has installed its own
	// emulated nvidia-smi (every GPU instance), that one answers.
	GPUs int
	// GPUName is the model nvidia-smi reports (default DefaultGPUName).
	GPUName string
	// NoToolkit leaves out nvidia-ctk and nvidia-container-runtime: a GPU
	// machine whose NVIDIA container toolkit is not installed.
	NoToolkit bool
	// InstallScriptURL is the one URL the emulated curl serves (with the
	// emulated install script); default DefaultInstallScriptURL.
	InstallScriptURL string
}

// tools are the emulated commands written to <dir>/bin.
var tools = []string{"systemctl", "journalctl", "cloud-init", "curl", "sudo"}

// Install writes the emulation into the sandbox folder dir: the emulated
// commands into dir/bin (0755, meant to be first on PATH) and the shared
// library, the emulated install script, the k3s binary template and the
// options into dir/.k3semu. It creates o.ClusterDir. Running the commands
// needs GPUPROV_ROOT to name dir (see Env and SandboxEnv).
func Install(dir string, o Options) error {
	if o.ClusterDir == "" {
		return errors.New("k3semu: Options.ClusterDir is required")
	}
	if o.ReadyAfter <= 0 {
		o.ReadyAfter = DefaultReadyAfter
	}
	if o.GPUName == "" {
		o.GPUName = DefaultGPUName
	}
	if o.InstallScriptURL == "" {
		o.InstallScriptURL = DefaultInstallScriptURL
	}
	if o.GPUs < 0 {
		return fmt.Errorf("k3semu: GPUs %d < 0", o.GPUs)
	}
	cluster, err := filepath.Abs(o.ClusterDir)
	if err != nil {
		return fmt.Errorf("k3semu: %w", err)
	}
	bin, emu := filepath.Join(dir, "bin"), filepath.Join(dir, ".k3semu")
	for _, d := range []string{bin, emu, filepath.Join(cluster, "nodes")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("k3semu: %w", err)
		}
	}
	names := tools
	if o.GPUs == 0 {
		// A CPU machine: not even the sim's own emulated nvidia-smi.
		if err := os.Remove(filepath.Join(bin, "nvidia-smi")); err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("k3semu: %w", err)
		}
	}
	if o.GPUs > 0 {
		names = append(names[:len(names):len(names)], "nvidia-smi")
		if !o.NoToolkit {
			names = append(names, "nvidia-ctk", "nvidia-container-runtime")
		}
	}
	for _, name := range names {
		if _, err := os.Stat(filepath.Join(bin, name)); err == nil && name == "nvidia-smi" {
			continue // the sim's own emulated GPUs answer, and answer -L alike
		}
		if err := copyScript(filepath.Join(bin, name), name, 0o755); err != nil {
			return err
		}
	}
	for _, name := range []string{"lib.sh", "install.sh", "k3s.tmpl"} {
		if err := copyScript(filepath.Join(emu, name), name, 0o644); err != nil {
			return err
		}
	}
	toolkit := "yes"
	if o.NoToolkit {
		toolkit = "no"
	}
	env := fmt.Sprintf("K3SEMU_CLUSTER=%s\nK3SEMU_READY_AFTER=%d\nK3SEMU_GPUS=%d\nK3SEMU_GPU_NAME=%s\nK3SEMU_TOOLKIT=%s\nK3SEMU_INSTALL_URL=%s\n",
		shellQuote(cluster), o.ReadyAfter, o.GPUs, shellQuote(o.GPUName), toolkit, shellQuote(o.InstallScriptURL))
	if err := os.WriteFile(filepath.Join(emu, "env"), []byte(env), 0o644); err != nil {
		return fmt.Errorf("k3semu: %w", err)
	}
	return nil
}

func copyScript(dst, name string, mode os.FileMode) error {
	b, err := scripts.ReadFile("scripts/" + name)
	if err != nil {
		return fmt.Errorf("k3semu: %w", err)
	}
	if err := os.WriteFile(dst, b, mode); err != nil {
		return fmt.Errorf("k3semu: %w", err)
	}
	return os.Chmod(dst, mode) // WriteFile keeps the mode of an existing file
}

// Env returns the environment that runs commands in sandbox dir with the
// emulation: PATH with dir/bin first, and GPUPROV_ROOT=dir. Append it to
// os.Environ() for exec.Cmd.Env.
func Env(dir string) []string {
	return []string{
		"PATH=" + filepath.Join(dir, "bin") + string(os.PathListSeparator) + os.Getenv("PATH"),
		"GPUPROV_ROOT=" + dir,
	}
}

// SandboxEnv is the environment to add to every sandbox of a sim server
// (simserver.Options.SandboxEnv): GPUPROV_ROOT=".". The server already puts
// the sandbox's bin folder first on PATH and runs every command in the
// sandbox folder, so the relative root names each sandbox; the k3s package
// resolves it to an absolute path with `cd && pwd -P`, and the emulated
// commands do the same.
func SandboxEnv() []string { return []string{"GPUPROV_ROOT=."} }

// Attach wires the emulation into a sim server's options: every new
// sandbox gets Install(dir, opts(instance)), chained after a PrepareSandbox
// hook already set, and SandboxEnv is appended to so.SandboxEnv. opts
// decides per instance, e.g. GPUs only for some. It runs under the sim
// server's lock and must not call the server.
func Attach(so *simserver.Options, opts func(inst simserver.Instance) Options) {
	prev := so.PrepareSandbox
	so.PrepareSandbox = func(dir string, inst simserver.Instance) error {
		if prev != nil {
			if err := prev(dir, inst); err != nil {
				return err
			}
		}
		return Install(dir, opts(inst))
	}
	so.SandboxEnv = append(so.SandboxEnv, SandboxEnv()...)
}

// Binary returns the emulated k3s binary reporting version, for an
// air-gapped install (k3s.AirGap.Binary) in a sandbox.
func Binary(version string) []byte {
	b, _ := scripts.ReadFile("scripts/k3s.tmpl") // embedded: cannot fail
	return []byte(strings.ReplaceAll(string(b), "@VERSION@", version))
}

// InstallScript returns the emulated k3s install script, for an
// air-gapped install (k3s.AirGap.InstallScript) in a sandbox.
func InstallScript() []byte {
	b, _ := scripts.ReadFile("scripts/install.sh") // embedded: cannot fail
	return b
}

// shellQuote returns s as one single-quoted POSIX shell word.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
