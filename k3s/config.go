package k3s

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"path"
	"regexp"
	"strings"
	"time"

	"github.com/org/gpuprov/clock"
	"github.com/org/gpuprov/provider"
)

// Defaults of Config.
const (
	// DefaultVersion is the pinned k3s release: v1.33.5+k3s1, which k3s
	// made its stable channel on 2025-10-02 (k3s-io/k3s pull request 13017,
	// "Update stable channel to v1.33.5+k3s1").
	DefaultVersion = "v1.33.5+k3s1"
	// DefaultInstallScriptURL is where the official k3s install script is
	// served. Only the online mode fetches it.
	DefaultInstallScriptURL = "https://get.k3s.io"
	// DefaultReadyTimeout bounds each readiness wait.
	DefaultReadyTimeout = 5 * time.Minute
	// DefaultPollInterval is the pause between two readiness checks.
	DefaultPollInterval = 2 * time.Second
	// DefaultJournalLines is how many lines of the unit's journal a
	// readiness failure carries.
	DefaultJournalLines = 30
)

// Network says how the nodes of a cluster reach each other.
type Network int

const (
	// Private: every node is in one private network (one VPC). Nodes
	// register with their private IP (node-ip) and flannel uses its default
	// VXLAN backend, on NodeInfo.Iface when given; agents join the server's
	// private IP. Only 6443/tcp needs to be open to the world, for the
	// kubeconfig's public endpoint.
	Private Network = iota
	// CrossCloud: nodes are in different networks or clouds and talk over
	// their public IPs. flannel runs its wireguard-native backend with the
	// nodes' external IPs (flannel-external-ip); agents join the server's
	// public IP. The firewall of every node must open 6443/tcp and
	// 51820/udp (see Ports).
	CrossCloud
)

func (n Network) String() string {
	switch n {
	case Private:
		return "private"
	case CrossCloud:
		return "cross-cloud"
	}
	return fmt.Sprintf("Network(%d)", int(n))
}

// Ports are the inbound ports the firewall of every node of a cluster in
// mode n must open to the world, for provider.InstanceSpec.OpenPorts:
// 6443/tcp (the Kubernetes API, which agents and the kubeconfig reach) in
// both modes, plus 51820/udp (wireguard-native flannel over IPv4) across
// clouds. In Private mode the node-to-node ports (8472/udp VXLAN, 10250/tcp
// kubelet) must be allowed inside the private network by its own rules and
// never opened to the world: VXLAN is unauthenticated.
func Ports(n Network) []provider.Port {
	ports := []provider.Port{{Number: 6443, Protocol: "tcp"}}
	if n == CrossCloud {
		ports = append(ports, provider.Port{Number: 51820, Protocol: "udp"})
	}
	return ports
}

// Config is how a cluster is formed. The zero value is a private-network
// cluster of DefaultVersion installed online, with the default timeouts.
// Pass the same Config to Server, Agent and WaitNode of one cluster.
type Config struct {
	// Version is the pinned k3s release (default DefaultVersion). A node
	// whose `k3s --version` reports another one is reinstalled.
	Version string
	// Network is Private (the default) or CrossCloud.
	Network Network
	// ClusterCIDR and ServiceCIDR override k3s's pod and service networks
	// (server only); empty keeps k3s's defaults.
	ClusterCIDR, ServiceCIDR string
	// AirGap, when set, installs from uploaded files and fetches nothing.
	AirGap *AirGap
	// InstallScriptURL is the install script fetched with curl in online
	// mode (default DefaultInstallScriptURL).
	InstallScriptURL string
	// NoDevicePlugin keeps the server from deploying the NVIDIA device
	// plugin. By default the server always drops it into server/manifests:
	// it runs only on nodes labelled nvidia.com/gpu.present=true, so it
	// costs nothing in a cluster without GPUs. With NoDevicePlugin the
	// caller deploys its own (a GPU operator, say): GPU nodes are still
	// waited for until nvidia.com/gpu is allocatable.
	NoDevicePlugin bool
	// DevicePluginVersion is the NVIDIA device plugin release deployed
	// (default DefaultDevicePluginVersion).
	DevicePluginVersion string
	// ReadyTimeout bounds each readiness wait (default
	// DefaultReadyTimeout); PollInterval is the pause between checks
	// (default DefaultPollInterval).
	ReadyTimeout, PollInterval time.Duration
	// JournalLines is the length of the journal tail a readiness failure
	// carries (default DefaultJournalLines).
	JournalLines int
	// Clock times the readiness waits; nil means the wall clock. Tests
	// hand a fake clock so that a timeout costs no real time.
	Clock clock.Clock
	// Logger receives progress (node, step); never a token. nil discards.
	Logger *slog.Logger
}

// AirGap is what an air-gapped install uploads instead of downloading:
// the k3s binary (to /usr/local/bin/k3s, 0755), the image archives (to
// /var/lib/rancher/k3s/agent/images/, 0644), an optional registries.yaml
// (to /etc/rancher/k3s/registries.yaml, 0600: it may hold registry
// credentials) and the install script, which then runs with
// INSTALL_K3S_SKIP_DOWNLOAD=true. Every file is uploaded only when its
// sha256 differs from the one on the node. For GPU nodes the images must
// include the NVIDIA device plugin image (or registries.yaml must point at
// a mirror holding it).
type AirGap struct {
	Binary         []byte
	Images         []File
	InstallScript  []byte
	RegistriesYAML []byte
}

// File is a named file to upload; Name is a base name.
type File struct {
	Name string
	Data []byte
}

// NodeInfo describes one node.
type NodeInfo struct {
	// Name is the Kubernetes node name: lowercase letters, digits, '-'
	// and '.', at most 63 characters, starting and ending alphanumeric.
	Name string
	// PublicIP is the address the world reaches the node on. It is
	// required for CrossCloud and for a server whose kubeconfig must be
	// usable from outside (it becomes a TLS SAN).
	PublicIP string
	// PrivateIP is the node's address in its private network (node-ip in
	// Private mode); optional.
	PrivateIP string
	// Iface is the interface flannel uses in Private mode; optional.
	Iface string
	// Labels are extra node labels. GPU nodes also get
	// nvidia.com/gpu.present=true.
	Labels map[string]string
}

// Errors callers branch on, matched with errors.Is.
var (
	// ErrInvalid means a Config, NodeInfo or argument is unusable; nothing
	// ran on the node.
	ErrInvalid = errors.New("k3s: invalid argument")
	// ErrNotReady means a node did not become ready before ReadyTimeout;
	// the error is a *NotReadyError carrying the unit's journal tail.
	ErrNotReady = errors.New("k3s: node not ready")
	// ErrNoToolkit means the node has NVIDIA GPUs (nvidia-smi lists them)
	// but no NVIDIA container toolkit (neither nvidia-container-runtime
	// nor nvidia-ctk): k3s could not run GPU containers. Install the
	// toolkit first (the package nvidia-container-toolkit from NVIDIA's
	// repository); k3s detects it by itself at start. Nothing was
	// installed or started.
	ErrNoToolkit = errors.New("k3s: NVIDIA GPU present but the NVIDIA container toolkit is not installed; install nvidia-container-toolkit before k3s")
)

// NotReadyError is the error of a readiness wait that ran out of time.
type NotReadyError struct {
	Node    string // the node waited for
	Unit    string // k3s or k3s-agent
	Waited  string // what was waited for, e.g. "node Ready"
	Last    error  // the last check's failure, if any
	Journal string // the tail of `journalctl -u Unit` on the node
}

func (e *NotReadyError) Error() string {
	msg := fmt.Sprintf("k3s: %s: %s not reached", e.Node, e.Waited)
	if e.Last != nil {
		msg += " (last check: " + e.Last.Error() + ")"
	}
	return msg + "; journalctl -u " + e.Unit + ":\n" + e.Journal
}

// Is makes errors.Is(err, ErrNotReady) true.
func (e *NotReadyError) Is(target error) bool { return target == ErrNotReady }

// Unwrap returns the last check's failure.
func (e *NotReadyError) Unwrap() error { return e.Last }

// withDefaults validates c and fills its zero fields.
func (c Config) withDefaults() (Config, error) {
	if c.Version == "" {
		c.Version = DefaultVersion
	}
	if !versionRE.MatchString(c.Version) {
		return c, fmt.Errorf("%w: version %q is not a k3s release like %s", ErrInvalid, c.Version, DefaultVersion)
	}
	if c.Network != Private && c.Network != CrossCloud {
		return c, fmt.Errorf("%w: network %v", ErrInvalid, c.Network)
	}
	for _, cidr := range []string{c.ClusterCIDR, c.ServiceCIDR} {
		if cidr == "" {
			continue
		}
		if _, err := netip.ParsePrefix(cidr); err != nil {
			return c, fmt.Errorf("%w: CIDR %q: %v", ErrInvalid, cidr, err)
		}
	}
	if c.InstallScriptURL == "" {
		c.InstallScriptURL = DefaultInstallScriptURL
	}
	if !strings.HasPrefix(c.InstallScriptURL, "https://") {
		return c, fmt.Errorf("%w: install script URL %q must be https", ErrInvalid, c.InstallScriptURL)
	}
	if c.DevicePluginVersion == "" {
		c.DevicePluginVersion = DefaultDevicePluginVersion
	}
	if !pluginVersionRE.MatchString(c.DevicePluginVersion) {
		return c, fmt.Errorf("%w: device plugin version %q", ErrInvalid, c.DevicePluginVersion)
	}
	if a := c.AirGap; a != nil {
		if len(a.Binary) == 0 || len(a.InstallScript) == 0 {
			return c, fmt.Errorf("%w: air-gapped install needs the k3s binary and the install script", ErrInvalid)
		}
		for _, f := range a.Images {
			if f.Name == "" || f.Name != path.Base(f.Name) || strings.HasPrefix(f.Name, ".") {
				return c, fmt.Errorf("%w: image file name %q must be a plain base name", ErrInvalid, f.Name)
			}
		}
	}
	if c.ReadyTimeout <= 0 {
		c.ReadyTimeout = DefaultReadyTimeout
	}
	if c.PollInterval <= 0 {
		c.PollInterval = DefaultPollInterval
	}
	if c.JournalLines <= 0 {
		c.JournalLines = DefaultJournalLines
	}
	if c.Clock == nil {
		c.Clock = clock.Real
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c, nil
}

var (
	versionRE       = regexp.MustCompile(`^v[0-9]+\.[0-9]+\.[0-9]+(-rc[0-9]+)?\+k3s[0-9]+$`)
	pluginVersionRE = regexp.MustCompile(`^v[0-9]+\.[0-9]+\.[0-9]+$`)
	nodeNameRE      = regexp.MustCompile(`^[a-z0-9]([a-z0-9.-]{0,61}[a-z0-9])?$`)
	labelKeyRE      = regexp.MustCompile(`^([a-z0-9]([a-z0-9.-]*[a-z0-9])?/)?[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$`)
	labelValueRE    = regexp.MustCompile(`^([A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?)?$`)
	ifaceRE         = regexp.MustCompile(`^[A-Za-z0-9._-]{1,15}$`)
)

// validate checks n for network mode net; server says whether n is the
// server (which needs an address for the kubeconfig).
func (n NodeInfo) validate(mode Network, server bool) error {
	if !nodeNameRE.MatchString(n.Name) {
		return fmt.Errorf("%w: node name %q (lowercase letters, digits, '-', '.'; at most 63)", ErrInvalid, n.Name)
	}
	for _, ip := range []string{n.PublicIP, n.PrivateIP} {
		if ip == "" {
			continue
		}
		if _, err := netip.ParseAddr(ip); err != nil {
			return fmt.Errorf("%w: node %s: IP %q: %v", ErrInvalid, n.Name, ip, err)
		}
	}
	if mode == CrossCloud && n.PublicIP == "" {
		return fmt.Errorf("%w: node %s: a cross-cloud node needs a public IP", ErrInvalid, n.Name)
	}
	if server && n.PublicIP == "" && n.PrivateIP == "" {
		return fmt.Errorf("%w: server %s needs a public or a private IP", ErrInvalid, n.Name)
	}
	if n.Iface != "" && !ifaceRE.MatchString(n.Iface) {
		return fmt.Errorf("%w: node %s: interface %q", ErrInvalid, n.Name, n.Iface)
	}
	for k, v := range n.Labels {
		if !labelKeyRE.MatchString(k) || !labelValueRE.MatchString(v) {
			return fmt.Errorf("%w: node %s: label %q=%q", ErrInvalid, n.Name, k, v)
		}
	}
	return nil
}
