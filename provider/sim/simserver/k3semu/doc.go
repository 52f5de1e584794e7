// Package k3semu emulates, inside the simulated cloud's sandboxes, the
// few machine tools that github.com/org/gpuprov/k3s drives, so that its
// real command sequence runs end to end over real SSH without a real
// Kubernetes. A cluster formed on the sim is simulated: the demo says so.
//
// Wire it into a sim server through its hooks (nothing in simserver
// changes):
//
//	so := simserver.DefaultOptions()
//	k3semu.Attach(&so, func(inst simserver.Instance) k3semu.Options {
//		return k3semu.Options{ClusterDir: clusterDir, GPUs: inst.GPUCount}
//	})
//	srv, err := simserver.Start(so)
//
// Attach sets PrepareSandbox to Install each new sandbox and appends
// SandboxEnv ("GPUPROV_ROOT=.") to the sandbox environment: the sim runs
// every command in the sandbox folder with its bin/ first on PATH, so the
// relative root names the sandbox, and the k3s package prefixes every path
// with it (resolved to an absolute path). The emulated tools refuse to run
// when GPUPROV_ROOT is unset, so they never touch the real /etc. (A
// per-sandbox absolute GPUPROV_ROOT would need simserver to add
// "GPUPROV_ROOT=<dir>" to the environment it builds in newSSH; the
// relative form makes that unnecessary.)
//
// # Where k3s and kubectl are
//
// R below is the root prefix: the instance's sandbox folder,
// simserver.Server.SandboxDir(cloud, instanceID), which is
// <state-dir>/<cloud>/<instance-id> (the state dir is Options.StateDir,
// else Options.StateFile + ".d", else a temporary folder that Close
// removes; `gpuprov sim serve` uses its --state file, by default
// $XDG_STATE_HOME/gpuprov/sim/state.json, so .../sim/state.json.d/sim-a/i-...).
// The instance's SSH commands run with R as their working folder and HOME,
// GPUPROV_ROOT=".", and PATH = R/bin, then the sim server's own PATH.
//
// Once the k3s package's install step has run, the emulated k3s binary is
// R/usr/local/bin/k3s on every node and the cluster's kubeconfig is
// R/etc/rancher/k3s/k3s.yaml on the server node. R/usr/local/bin is not on
// PATH, so a bare `k3s` is not found, and there is no kubectl command: the
// emulated install script makes no kubectl link, and a bare `kubectl`
// runs whatever the host machine has on its PATH, if anything. Run kubectl
// as k3s's subcommand, on the server node (gpuprov.Cluster.Server), from
// the login folder, as `gpuprov demo` does (prov is a *gpuprov.Provisioner):
//
//	res, err := prov.Run(ctx, cl.Server, `"${GPUPROV_ROOT:-}/usr/local/bin/k3s" kubectl get nodes`)
//
// or `gpuprov ssh SERVER -- '"${GPUPROV_ROOT:-}/usr/local/bin/k3s" kubectl
// get nodes'`. The same string runs /usr/local/bin/k3s on a real machine,
// where GPUPROV_ROOT is unset (there the kubeconfig is written 0600, so
// log in as root or put `sudo -n` first). A relative path
// (usr/local/bin/k3s) works too, but only while the working folder is R.
// On an agent node the command fails like k3s without a local server: "The
// connection to the server 127.0.0.1:6443 was refused". Only `kubectl get
// nodes` and the k3s package's readiness query are answered (see below).
//
// # What is real
//
// SSH, the shell, every file the k3s package writes (config.yaml 0600,
// manifests, the air-gapped uploads through ssh.Client.WriteFile with its
// sha256 check), the checksums it compares, the order of its commands, its
// polling and timeouts, and the token exchange: the emulated server
// derives the K10 join token from a random CA exactly in k3s's format, and
// an agent's token is checked against it, so a wrong token fails the way
// k3s does (CA hash mismatch, or 401 Unauthorized) and the journal tail
// shows it. A server restarted with another token refuses its datastore,
// like k3s.
//
// # What is faked
//
// The tools written to <sandbox>/bin, all POSIX sh scripts embedded in the
// package, with state under the sandbox (see scripts/lib.sh):
//
//   - curl: no network. It serves the emulated install script for the one
//     install URL (Options.InstallScriptURL) and fails like an unresolvable
//     host for anything else.
//   - the install script: copies the emulated k3s binary stamped with
//     INSTALL_K3S_VERSION to R/usr/local/bin/k3s (or, with
//     INSTALL_K3S_SKIP_DOWNLOAD=true, requires the uploaded one), writes
//     R/etc/systemd/system/k3s.service or k3s-agent.service, and starts the
//     unit unless INSTALL_K3S_SKIP_START=true.
//   - systemctl: units are state files, no process runs. A started unit
//     stays "activating" for Options.ReadyAfter status checks (is-active,
//     or kubectl on the server), then comes up from config.yaml: the
//     server writes its token file and k3s.yaml and publishes its secret
//     and CA hash in Options.ClusterDir; an agent checks its token and
//     registers there. A unit that cannot come up logs why and retries at
//     the next check, like Restart=always.
//   - the k3s binary: `--version`, and `kubectl get node NAME -o
//     jsonpath=...` for exactly the k3s package's readiness query,
//     answered from ClusterDir ("True" once registered; nvidia.com/gpu
//     allocatable = the node's GPUs when it carries
//     nvidia.com/gpu.present=true, has the toolkit, and the server's
//     manifests hold the device plugin with runtimeClassName: nvidia);
//     `kubectl get nodes` for people. Anything else fails loudly.
//   - journalctl -u UNIT -n N: the unit's emulated journal.
//   - cloud-init status --wait: done at once.
//   - sudo: passwordless; runs the command as the sandbox user.
//   - nvidia-smi -L, nvidia-ctk, nvidia-container-runtime: only in GPU
//     sandboxes (Options.GPUs > 0; the toolkit unless Options.NoToolkit).
//
// No container runs, no image is pulled, no pod is scheduled, and there is
// no network between nodes: flannel, wireguard, the API server and the
// device plugin are not emulated, only the answers the k3s package reads.
// Every emulated tool appends its arguments to
// R/var/log/k3semu/calls.log, and "downloads" to downloads.log, so tests
// can check what ran.
package k3semu
