package k3s

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
)

// ServerInfo is what agents and callers need from a formed server. It
// holds a secret (JoinToken): it redacts it when printed or logged, and
// must not be persisted in a journal.
type ServerInfo struct {
	// Name is the server's node name.
	Name string
	// URL is the public API endpoint, https://<public IP>:6443 (the
	// private IP when the server has no public one); Kubeconfig points
	// at it.
	URL string
	// JoinURL is the endpoint agents join: the private IP in Private mode
	// (when the server has one), else URL.
	JoinURL string
	// JoinToken is the CA-pinning token k3s wrote to
	// /var/lib/rancher/k3s/server/token ("K10<CA sha256>::server:<secret>"):
	// an agent holding it verifies the server's CA before trusting it.
	JoinToken string
	// Kubeconfig is k3s's admin kubeconfig with its server set to URL.
	Kubeconfig []byte
	// GPUs is how many GPUs nvidia-smi listed on the server.
	GPUs int
}

// String describes s without its token or kubeconfig.
func (s ServerInfo) String() string {
	return fmt.Sprintf("k3s server %s at %s (join %s, token redacted, %d GPUs)", s.Name, s.URL, s.JoinURL, s.GPUs)
}

// GoString is String, so that %#v does not print the token either.
func (s ServerInfo) GoString() string { return s.String() }

// LogValue logs s without its token or kubeconfig.
func (s ServerInfo) LogValue() slog.Value {
	return slog.GroupValue(slog.String("name", s.Name), slog.String("url", s.URL), slog.String("join_url", s.JoinURL))
}

// AgentInfo is what Agent found on an agent node.
type AgentInfo struct {
	Name string
	GPUs int // GPUs listed by nvidia-smi; WaitNode checks they are allocatable
}

// GenerateToken returns a fresh cluster secret for Server: 32 random
// bytes from crypto/rand, hex-encoded. Keep it in memory only: it lets
// any machine join the cluster.
func GenerateToken() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("k3s: generate token: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// Server makes n the k3s server of a cluster (see the package doc for the
// exact command sequence) and waits, for at most cfg.ReadyTimeout, until
// `k3s kubectl` on n reports the node Ready and, when n has GPUs,
// nvidia.com/gpu allocatable. token is the cluster secret (GenerateToken);
// it reaches n only inside config.yaml (0600). Pass the same token when
// re-running Server on a node: a re-run of a ready server writes nothing,
// installs nothing and returns the same ServerInfo, while a different
// token rewrites config.yaml, which k3s refuses once its datastore exists.
//
// A node that does not become ready in time yields a *NotReadyError
// (errors.Is ErrNotReady) carrying the tail of `journalctl -u k3s`.
func Server(ctx context.Context, n Node, info NodeInfo, token string, cfg Config) (*ServerInfo, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := info.validate(cfg.Network, true); err != nil {
		return nil, err
	}
	if token == "" || strings.ContainsFunc(token, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return nil, fmt.Errorf("%w: the cluster token must be non-empty, without spaces or control characters", ErrInvalid)
	}
	var extra []upload
	if !cfg.NoDevicePlugin {
		extra = append(extra, upload{path: pathPluginFile, data: DevicePluginManifest(cfg.DevicePluginVersion), mode: 0o644})
	}
	render := func(gpus int) ([]byte, error) { return cfg.renderConfig(info, token, gpus, nil) }
	r, gpu, err := cfg.setUp(ctx, n, info, roleServer, render, extra)
	if err != nil {
		return nil, err
	}
	if err := cfg.waitNode(ctx, r, r, roleServer.unit, info.Name, gpu.count); err != nil {
		return nil, err
	}
	join, err := readJoinToken(ctx, r)
	if err != nil {
		return nil, err
	}
	raw, err := r.run(ctx, "read the kubeconfig", "cat -- "+quote(r.p(pathKubeconfig)))
	if err != nil {
		return nil, err
	}
	s := &ServerInfo{Name: info.Name, JoinToken: join, GPUs: gpu.count}
	public := info.PublicIP
	if public == "" {
		public = info.PrivateIP
	}
	s.URL = "https://" + net.JoinHostPort(public, "6443")
	s.JoinURL = s.URL
	if cfg.Network == Private && info.PrivateIP != "" {
		s.JoinURL = "https://" + net.JoinHostPort(info.PrivateIP, "6443")
	}
	if s.Kubeconfig, err = RewriteKubeconfig(raw, s.URL); err != nil {
		return nil, fmt.Errorf("k3s: %s: %w", info.Name, err)
	}
	cfg.Logger.Info("k3s: server ready", "node", info.Name, "url", s.URL, "gpus", gpu.count)
	return s, nil
}

// Agent joins n to the cluster of server (see the package doc for the
// exact command sequence) and waits, for at most cfg.ReadyTimeout, until
// its k3s-agent unit is active, which k3s reports once the agent has
// verified the server's CA against the token, registered and started its
// kubelet. The join URL and token reach n only inside config.yaml (0600).
// A re-run on a joined node writes nothing and installs nothing. Call
// WaitNode on the server next to see the node Ready (and its GPUs
// allocatable); Form does both.
//
// A node that does not become active in time (a wrong token, an
// unreachable server) yields a *NotReadyError (errors.Is ErrNotReady)
// carrying the tail of `journalctl -u k3s-agent`.
func Agent(ctx context.Context, n Node, info NodeInfo, server ServerInfo, cfg Config) (AgentInfo, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return AgentInfo{}, err
	}
	if err := info.validate(cfg.Network, false); err != nil {
		return AgentInfo{}, err
	}
	if !strings.HasPrefix(server.JoinURL, "https://") || !strings.HasPrefix(server.JoinToken, "K10") {
		return AgentInfo{}, fmt.Errorf("%w: agent %s: the server's join URL and K10 token are required", ErrInvalid, info.Name)
	}
	render := func(gpus int) ([]byte, error) { return cfg.renderConfig(info, "", gpus, &server) }
	r, gpu, err := cfg.setUp(ctx, n, info, roleAgent, render, nil)
	if err != nil {
		return AgentInfo{}, err
	}
	var state string
	timedOut, err := cfg.waitFor(ctx, func(ctx context.Context) (bool, error) {
		out, err := r.run(ctx, "check k3s-agent", "systemctl is-active k3s-agent || true")
		state = strings.TrimSpace(string(out))
		if err != nil {
			return false, err
		}
		return state == "active", fmt.Errorf("k3s-agent is %q", state)
	})
	if timedOut {
		return AgentInfo{}, cfg.notReady(ctx, r, roleAgent.unit, info.Name, "k3s-agent active", err)
	}
	if err != nil {
		return AgentInfo{}, fmt.Errorf("k3s: %s: waiting for k3s-agent: %w", info.Name, err)
	}
	cfg.Logger.Info("k3s: agent active", "node", info.Name, "gpus", gpu.count)
	return AgentInfo{Name: info.Name, GPUs: gpu.count}, nil
}

// WaitNode waits, for at most cfg.ReadyTimeout, until `k3s kubectl` on the
// server reports node name Ready and, when gpus > 0, a non-zero
// nvidia.com/gpu allocatable (the device plugin is running there). It only
// reads. A timeout yields a *NotReadyError with the server's journal tail.
func WaitNode(ctx context.Context, server Node, name string, gpus int, cfg Config) error {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	r, err := dial(ctx, server, "server")
	if err != nil {
		return err
	}
	return cfg.waitNode(ctx, r, r, roleServer.unit, name, gpus)
}

// ReadJoinToken reads the CA-pinning join token ("K10…") of the running
// server n, for agents joining later (the cluster secret itself is not
// needed).
func ReadJoinToken(ctx context.Context, n Node) (string, error) {
	r, err := dial(ctx, n, "server")
	if err != nil {
		return "", err
	}
	return readJoinToken(ctx, r)
}

func readJoinToken(ctx context.Context, r *remote) (string, error) {
	out, err := r.run(ctx, "read the join token", "cat -- "+quote(r.p(pathToken)))
	if err != nil {
		return "", err
	}
	tok := strings.TrimSpace(string(out))
	if !strings.HasPrefix(tok, "K10") || !strings.Contains(tok, "::") {
		return "", fmt.Errorf("k3s: %s: %s does not hold a K10 join token", r.name, pathToken)
	}
	return tok, nil
}

// readyJSONPath prints the node's Ready status and its allocatable
// nvidia.com/gpu, e.g. "True 1" ("True " without GPUs).
const readyJSONPath = `jsonpath={.status.conditions[?(@.type=="Ready")].status} {.status.allocatable.nvidia\.com/gpu}`

// waitNode polls `k3s kubectl get node` on server; on timeout the journal
// of unit is read from journalNode.
func (c Config) waitNode(ctx context.Context, server, journalNode *remote, unit, name string, gpus int) error {
	cmd := quote(server.p(pathBinary)) + " kubectl --kubeconfig " + quote(server.p(pathKubeconfig)) +
		" get node " + quote(name) + " -o " + quote(readyJSONPath)
	waited := "node Ready"
	if gpus > 0 {
		waited = "node Ready with " + ResourceGPU + " allocatable"
	}
	timedOut, err := c.waitFor(ctx, func(ctx context.Context) (bool, error) {
		out, err := server.run(ctx, "check node "+name, cmd)
		if err != nil {
			return false, err
		}
		f := strings.Fields(string(out))
		if len(f) == 0 || f[0] != "True" {
			return false, fmt.Errorf("node %s Ready=%q", name, strings.TrimSpace(string(out)))
		}
		if gpus == 0 {
			return true, nil
		}
		alloc := 0
		if len(f) > 1 {
			alloc, _ = strconv.Atoi(f[1]) // not a number: not allocatable yet
		}
		return alloc > 0, fmt.Errorf("node %s: %s allocatable %d", name, ResourceGPU, alloc)
	})
	if timedOut {
		return c.notReady(ctx, journalNode, unit, name, waited, err)
	}
	if err != nil {
		return fmt.Errorf("k3s: waiting for node %s: %w", name, err)
	}
	return nil
}

// Target is one node of Form.
type Target struct {
	Node Node
	Info NodeInfo
}

// Form forms a cluster: Server on server, then every agent in parallel
// (Agent, then WaitNode on the server for it, with the agent's journal
// tail on a timeout). It returns the ServerInfo once the server is ready,
// even when some agents failed; their errors are joined, each naming its
// node. The server's Node is used from several goroutines at once.
func Form(ctx context.Context, server Target, agents []Target, token string, cfg Config) (*ServerInfo, error) {
	s, err := Server(ctx, server.Node, server.Info, token, cfg)
	if err != nil {
		return nil, err
	}
	cfg, _ = cfg.withDefaults() // Server validated it
	sr, err := dial(ctx, server.Node, server.Info.Name)
	if err != nil {
		return s, err
	}
	errs := make([]error, len(agents))
	var wg sync.WaitGroup
	for i, a := range agents {
		wg.Go(func() {
			ai, err := Agent(ctx, a.Node, a.Info, *s, cfg)
			if err == nil {
				var ar *remote
				if ar, err = dial(ctx, a.Node, a.Info.Name); err == nil {
					err = cfg.waitNode(ctx, sr, ar, roleAgent.unit, a.Info.Name, ai.GPUs)
				}
			}
			if err != nil {
				errs[i] = fmt.Errorf("agent %s: %w", a.Info.Name, err)
			}
		})
	}
	wg.Wait()
	return s, errors.Join(errs...)
}
