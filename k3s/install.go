package k3s

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/org/gpuprov/clock"
)

// role is what a node runs: the server or an agent.
type role struct {
	arg  string // the install script's command: server or agent
	unit string // the systemd unit: k3s or k3s-agent
}

var (
	roleServer = role{arg: "server", unit: "k3s"}
	roleAgent  = role{arg: "agent", unit: "k3s-agent"}
)

// fileConfig is /etc/rancher/k3s/config.yaml. Field order is the file's.
type fileConfig struct {
	Server              string   `yaml:"server,omitempty"`
	Token               string   `yaml:"token"`
	NodeName            string   `yaml:"node-name"`
	NodeIP              string   `yaml:"node-ip,omitempty"`
	NodeExternalIP      string   `yaml:"node-external-ip,omitempty"`
	NodeLabel           []string `yaml:"node-label,omitempty"`
	TLSSAN              []string `yaml:"tls-san,omitempty"`
	FlannelBackend      string   `yaml:"flannel-backend,omitempty"`
	FlannelExternalIP   bool     `yaml:"flannel-external-ip,omitempty"`
	FlannelIface        string   `yaml:"flannel-iface,omitempty"`
	ClusterCIDR         string   `yaml:"cluster-cidr,omitempty"`
	ServiceCIDR         string   `yaml:"service-cidr,omitempty"`
	WriteKubeconfigMode string   `yaml:"write-kubeconfig-mode,omitempty"`
}

// renderConfig returns config.yaml for a node. join is nil for the server;
// for an agent it names the server URL and the K10 join token.
func (c Config) renderConfig(info NodeInfo, token string, gpus int, join *ServerInfo) ([]byte, error) {
	fc := fileConfig{Token: token, NodeName: info.Name}
	labels := maps.Clone(info.Labels)
	if gpus > 0 {
		if labels == nil {
			labels = map[string]string{}
		}
		labels[LabelGPUPresent] = "true"
	}
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		fc.NodeLabel = append(fc.NodeLabel, k+"="+labels[k])
	}
	switch c.Network {
	case Private:
		fc.NodeIP = info.PrivateIP
		fc.FlannelIface = info.Iface
	case CrossCloud:
		// The public IP is often NAT'ed (not on any interface), so it is
		// the external IP; node-ip stays the local address.
		fc.NodeIP = info.PrivateIP
		fc.NodeExternalIP = info.PublicIP
	}
	if join != nil {
		fc.Server, fc.Token = join.JoinURL, join.JoinToken
	} else {
		if info.PublicIP != "" {
			fc.TLSSAN = []string{info.PublicIP}
		}
		if c.Network == CrossCloud {
			fc.FlannelBackend, fc.FlannelExternalIP = "wireguard-native", true
		}
		fc.ClusterCIDR, fc.ServiceCIDR = c.ClusterCIDR, c.ServiceCIDR
		fc.WriteKubeconfigMode = "0600"
	}
	var buf bytes.Buffer
	buf.WriteString("# Written by gpuprov; edits are overwritten when gpuprov joins this node again.\n")
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&fc); err != nil {
		return nil, fmt.Errorf("k3s: render config.yaml: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("k3s: render config.yaml: %w", err)
	}
	return buf.Bytes(), nil
}

// setUp runs the steps every node shares, in order: resolve the root
// prefix, wait for cloud-init, probe the GPUs, upload config.yaml (and
// whatever else changed), install k3s unless the pinned version is
// already installed, and start the unit (restart it when its config,
// binary, images or registries changed). render builds config.yaml from
// the GPU count; extra are more files the role needs (the server's
// manifests), which k3s picks up without a restart.
func (c Config) setUp(ctx context.Context, n Node, info NodeInfo, ro role,
	render func(gpus int) ([]byte, error), extra []upload) (*remote, gpuInfo, error) {
	log := c.Logger.With("node", info.Name, "role", ro.arg)
	r, err := dial(ctx, n, info.Name)
	if err != nil {
		return nil, gpuInfo{}, err
	}
	log.Debug("k3s: waiting for cloud-init")
	if _, err := r.run(ctx, "wait for cloud-init", cmdCloudInit); err != nil {
		return nil, gpuInfo{}, err
	}
	gpu, err := r.probeGPUs(ctx)
	if err != nil {
		return nil, gpu, err
	}
	conf, err := render(gpu.count)
	if err != nil {
		return nil, gpu, err
	}
	restartFiles := []upload{{path: pathConfig, data: conf, mode: 0o600}}
	if a := c.AirGap; a != nil {
		restartFiles = append(restartFiles, upload{path: pathBinary, data: a.Binary, mode: 0o755})
		for _, img := range a.Images {
			restartFiles = append(restartFiles, upload{path: pathImages + "/" + img.Name, data: img.Data, mode: 0o644})
		}
		if len(a.RegistriesYAML) > 0 {
			restartFiles = append(restartFiles, upload{path: pathRegistries, data: a.RegistriesYAML, mode: 0o600})
		}
		restartFiles = append(restartFiles, upload{path: pathInstallFile, data: a.InstallScript, mode: 0o755})
	}
	wrote, err := r.sync(ctx, append(restartFiles, extra...))
	if err != nil {
		return nil, gpu, err
	}
	changed := slices.Contains(wrote[:len(restartFiles)], true)
	installed, err := c.ensureInstalled(ctx, r, ro)
	if err != nil {
		return nil, gpu, err
	}
	verb := "start"
	if changed || installed {
		verb = "restart" // also starts a stopped unit
	}
	log.Info("k3s: starting", "unit", ro.unit, "gpus", gpu.count, "config_changed", changed, "installed", installed)
	if _, err := r.run(ctx, verb+" "+ro.unit, "systemctl "+verb+" --no-block "+ro.unit); err != nil {
		return nil, gpu, err
	}
	return r, gpu, nil
}

// ensureInstalled installs k3s for ro unless `k3s --version` already
// reports the pinned version and ro's unit exists; it reports whether it
// installed.
func (c Config) ensureInstalled(ctx context.Context, r *remote, ro role) (bool, error) {
	bin, unit := quote(r.p(pathBinary)), quote(r.p(pathUnitDir+"/"+ro.unit+".service"))
	out, err := r.run(ctx, "read the installed k3s version",
		"if [ -x "+bin+" ] && [ -f "+unit+" ]; then "+bin+" --version; fi")
	if err != nil {
		return false, err
	}
	if have := parseVersion(out); have == c.Version {
		return false, nil
	} else if have != "" {
		c.Logger.Info("k3s: replacing installed version", "node", r.name, "have", have, "want", c.Version)
	}
	script := quote(r.p(pathInstallFile))
	env := "INSTALL_K3S_VERSION=" + quote(c.Version) + " INSTALL_K3S_SKIP_START=true"
	var cmd string
	if c.AirGap != nil {
		cmd = "INSTALL_K3S_SKIP_DOWNLOAD=true " + env + " sh " + script + " " + ro.arg
	} else {
		cmd = "mkdir -p " + quote(r.p(pathInstallDir)) + " && curl -sfL -o " + script + " " + quote(c.InstallScriptURL) +
			" && " + env + " sh " + script + " " + ro.arg
	}
	c.Logger.Info("k3s: installing", "node", r.name, "version", c.Version, "airgap", c.AirGap != nil)
	if _, err := r.run(ctx, "install k3s "+c.Version, cmd); err != nil {
		return false, err
	}
	return true, nil
}

// parseVersion returns the version in `k3s --version` output ("k3s
// version v1.33.5+k3s1 (e22f9be3)"), or "".
func parseVersion(out []byte) string {
	first, _, _ := strings.Cut(string(out), "\n")
	f := strings.Fields(first)
	if len(f) >= 3 && f[0] == "k3s" && f[1] == "version" {
		return f[2]
	}
	return ""
}

// waitFor calls check at PollInterval until it reports done, for at most
// ReadyTimeout on c.Clock. It returns (false, nil) when done, (true, last
// check error) when the deadline passed, and (false, cause) when ctx ended.
func (c Config) waitFor(ctx context.Context, check func(context.Context) (bool, error)) (timedOut bool, err error) {
	dctx, cancel := clock.WithDeadline(ctx, c.Clock, c.Clock.Now().Add(c.ReadyTimeout))
	defer cancel()
	var last error
	for {
		done, err := check(dctx)
		if done {
			return false, nil
		}
		if ctx.Err() != nil {
			return false, context.Cause(ctx)
		}
		if dctx.Err() != nil {
			return true, last
		}
		last = err
		if c.Clock.Sleep(dctx, c.PollInterval) != nil {
			if ctx.Err() != nil {
				return false, context.Cause(ctx)
			}
			return true, last
		}
	}
}

// notReady builds the error of a wait that timed out, with the journal
// tail of unit on r (read with ctx, not the expired deadline).
func (c Config) notReady(ctx context.Context, r *remote, unit, node, waited string, last error) error {
	return &NotReadyError{Node: node, Unit: unit, Waited: waited, Last: last, Journal: r.journal(ctx, unit, c.JournalLines)}
}
