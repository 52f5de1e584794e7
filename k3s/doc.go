// Package k3s forms a k3s cluster over connections to machines (a [Node]:
// run a command, write a file): a server on the first node, agents joining
// it in parallel, NVIDIA GPU nodes made schedulable, and a kubeconfig that
// points at the server's public endpoint. It never imports the root
// gpuprov package; the engine hands it SSH connections.
//
// The smallest real use:
//
//	token, err := k3s.GenerateToken() // keep it in memory only
//	cfg := k3s.Config{Network: k3s.CrossCloud}
//	srv, err := k3s.Form(ctx,
//		k3s.Target{Node: n0, Info: k3s.NodeInfo{Name: "node-0", PublicIP: "203.0.113.10"}},
//		[]k3s.Target{{Node: n1, Info: k3s.NodeInfo{Name: "node-1", PublicIP: "198.51.100.7"}}},
//		token, cfg)
//	// srv.Kubeconfig talks to https://203.0.113.10:6443
//
// # Secrets
//
// The cluster token (GenerateToken) and the agents' CA-pinning join token
// ("K10<sha256 of the cluster CA>::server:<secret>", read back from the
// server's /var/lib/rancher/k3s/server/token) reach a node only inside
// /etc/rancher/k3s/config.yaml, written 0600 through Node.WriteFile: never
// on a command line, never logged. ServerInfo redacts its token when
// printed or logged.
//
// # The root prefix
//
// The first command on every node is
//
//	printf '%s' "${GPUPROV_ROOT:-}"
//
// and its output is prepended to every path the package reads or writes:
// empty on a real machine, a sandbox folder in the simulated cloud, whose
// "VMs" are folders on the test machine where /etc must never be written
// (provider/sim/simserver/k3semu sets it). A relative value is resolved once,
// against the login folder, with `cd -- ROOT && pwd -P`. Below, R stands
// for the prefix.
//
// # Command sequence
//
// Server and Agent run, in order (exact strings; Q() is POSIX quoting):
//
//  1. printf '%s' "${GPUPROV_ROOT:-}"   (then `cd -- R && pwd -P` if relative)
//  2. if command -v cloud-init >/dev/null 2>&1; then cloud-init status --wait >/dev/null || [ $? -eq 2 ]; fi
//  3. if command -v nvidia-smi >/dev/null 2>&1; then nvidia-smi -L || exit; fi; if command -v
//     nvidia-container-runtime >/dev/null 2>&1 || command -v nvidia-ctk >/dev/null 2>&1; then echo toolkit=yes; fi
//     — the GPU count is the number of "GPU " lines; GPUs without the
//     toolkit stop here with ErrNoToolkit, before anything is written.
//  4. for f in FILES; do if [ -e "$f" ]; then sha256sum -- "$f" || exit; fi; done
//     — then WriteFile for each file whose sha256 differs or is missing:
//     R/etc/rancher/k3s/config.yaml (0600); air-gapped: R/usr/local/bin/k3s
//     (0755), R/var/lib/rancher/k3s/agent/images/NAME (0644),
//     R/etc/rancher/k3s/registries.yaml (0600), R/var/lib/gpuprov/k3s-install.sh
//     (0755); server unless Config.NoDevicePlugin:
//     R/var/lib/rancher/k3s/server/manifests/gpuprov-nvidia-device-plugin.yaml (0644).
//  5. if [ -x R/usr/local/bin/k3s ] && [ -f R/etc/systemd/system/UNIT.service ]; then R/usr/local/bin/k3s --version; fi
//     — UNIT is k3s (server) or k3s-agent; when it reports Config.Version
//     the install is skipped.
//  6. install, online:
//     mkdir -p R/var/lib/gpuprov && curl -sfL -o R/var/lib/gpuprov/k3s-install.sh URL &&
//     INSTALL_K3S_VERSION=V INSTALL_K3S_SKIP_START=true sh R/var/lib/gpuprov/k3s-install.sh ROLE
//     air-gapped (no fetch at all):
//     INSTALL_K3S_SKIP_DOWNLOAD=true INSTALL_K3S_VERSION=V INSTALL_K3S_SKIP_START=true sh R/var/lib/gpuprov/k3s-install.sh ROLE
//     — ROLE is server or agent.
//  7. systemctl start --no-block UNIT, or systemctl restart --no-block UNIT
//     when step 4 rewrote a file k3s reads at start or step 6 installed
//     (restart also starts a stopped unit). Neither blocks.
//  8. readiness, every PollInterval until ReadyTimeout (on Config.Clock):
//     server: R/usr/local/bin/k3s kubectl --kubeconfig R/etc/rancher/k3s/k3s.yaml get node NAME
//     -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status} {.status.allocatable.nvidia\.com/gpu}'
//     until "True", and with GPUs a non-zero allocatable nvidia.com/gpu;
//     agent: systemctl is-active k3s-agent || true until "active" (k3s
//     notifies systemd once the agent verified the CA and registered).
//     Timeout: journalctl -u UNIT --no-pager -n 30, returned in a
//     *NotReadyError.
//  9. server only: cat -- R/var/lib/rancher/k3s/server/token and
//     cat -- R/etc/rancher/k3s/k3s.yaml (parsed as YAML, server rewritten).
//
// WaitNode (and Form, for each agent) runs step 1 and the step-8 kubectl
// query on the server for the agent's name.
//
// # Idempotency
//
// Re-running Server or Agent on a node that is ready runs steps 1–5, a
// `systemctl start --no-block` that does nothing, one readiness check and,
// on the server, the two reads: no file is written, nothing is installed
// or restarted. A node half-way (crashed mid-join) resumes from where it
// is. A different token, labels or IPs rewrite config.yaml and restart the
// unit; note that k3s refuses a new cluster token once its datastore
// exists, so keep the token for the cluster's lifetime (agents joining
// later need only ReadJoinToken).
//
// # Networks
//
// Private: node-ip is NodeInfo.PrivateIP, flannel-iface NodeInfo.Iface,
// agents join the server's private IP. CrossCloud: flannel-backend
// wireguard-native, flannel-external-ip: true on the server,
// node-external-ip the public IP on every node (node-ip stays the private
// one: public IPs are often NAT'ed), agents join the public IP. In both
// the server's public IP is a tls-san, so the rewritten kubeconfig
// verifies. The nodes' firewalls must open Ports(mode): 6443/tcp, plus
// 51820/udp across clouds (give them to provider.InstanceSpec.OpenPorts).
//
// # GPUs
//
// A node where nvidia-smi lists GPUs must have the NVIDIA container
// toolkit (nvidia-container-runtime or nvidia-ctk on PATH) before k3s
// starts; this package does not install drivers or the toolkit (that is
// the image's or cloud-init's job) and fails with ErrNoToolkit instead.
// k3s finds the runtime by itself at start. GPU nodes get the label
// nvidia.com/gpu.present=true in config.yaml; the server drops
// DevicePluginManifest (RuntimeClass nvidia, the device plugin DaemonSet
// with runtimeClassName: nvidia) into server/manifests, which k3s applies;
// the last step checks that nvidia.com/gpu is allocatable on each GPU node.
package k3s
