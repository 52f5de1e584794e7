package gpuprov

import (
	"context"
	"fmt"
	"io/fs"
	"strings"
	"sync"

	"github.com/org/gpuprov/k3s"
	"github.com/org/gpuprov/ssh"
)

// K3sJoiner is the Joiner that forms a k3s cluster with the k3s package: the
// server node gets a cluster token generated here (in memory only), agents
// join with the CA-pinning K10 token read back from the server, and each
// agent is waited for until the server reports it Ready (with its GPUs
// allocatable). It is safe to re-run on a node: a recovered server keeps the
// token it already has.
type K3sJoiner struct {
	Config k3s.Config
	// Connector reaches the server again to check each agent's readiness;
	// New sets it to the Provisioner's Connector when it is nil.
	Connector Connector
}

// Serve implements Joiner.
func (k *K3sJoiner) Serve(ctx context.Context, n Node, c Conn) (JoinInfo, error) {
	token, err := existingSecret(ctx, c)
	if err != nil {
		return JoinInfo{}, err
	}
	if token == "" {
		if token, err = k3s.GenerateToken(); err != nil {
			return JoinInfo{}, err
		}
	}
	si, err := k3s.Server(ctx, asRoot(c), nodeInfo(n), token, k.Config)
	if err != nil {
		return JoinInfo{}, err
	}
	return JoinInfo{Server: n, URL: si.URL, JoinURL: si.JoinURL, Token: si.JoinToken, Kubeconfig: si.Kubeconfig}, nil
}

// existingSecret returns the cluster secret of a server that already runs
// (from its K10 token, "K10<hash>::server:<secret>"), or "" for a fresh node.
func existingSecret(ctx context.Context, c Conn) (string, error) {
	tok, err := k3s.ReadJoinToken(ctx, asRoot(c))
	if err != nil {
		return "", nil // no server token yet: a fresh node
	}
	if _, secret, ok := strings.Cut(tok, "::server:"); ok && secret != "" {
		return secret, nil
	}
	return "", fmt.Errorf("k3s server token has an unexpected form; refusing to overwrite the cluster secret")
}

// Join implements Joiner.
func (k *K3sJoiner) Join(ctx context.Context, s JoinInfo, n Node, c Conn) error {
	si := k3s.ServerInfo{Name: s.Server.VM, URL: s.URL, JoinURL: s.JoinURL, JoinToken: s.Token}
	ai, err := k3s.Agent(ctx, asRoot(c), nodeInfo(n), si, k.Config)
	if err != nil {
		return err
	}
	sc, err := k.Connector.Connect(ctx, s.Server)
	if err != nil {
		return fmt.Errorf("reaching server %s to check %s: %w", s.Server.VM, n.VM, err)
	}
	defer sc.Close()
	return k3s.WaitNode(ctx, asRoot(sc), n.VM, ai.GPUs, k.Config)
}

func nodeInfo(n Node) k3s.NodeInfo {
	pub := n.PublicIP
	if pub == "" {
		pub = n.SSH.Host
	}
	return k3s.NodeInfo{Name: n.VM, PublicIP: pub, PrivateIP: n.PrivateIP,
		Labels: map[string]string{"gpuprov.io/provider": n.Provider, "gpuprov.io/region": n.Location.Region}}
}

// rootConn runs a Conn's commands as root, as the k3s package requires:
// through `sudo -n` (never a password prompt) when the login is not root.
// WriteFile is privileged already (see Conn).
type rootConn struct {
	Conn
	once sync.Once
	sudo bool
	err  error
}

func asRoot(c Conn) *rootConn { return &rootConn{Conn: c} }

func (r *rootConn) Run(ctx context.Context, cmd string) ([]byte, []byte, error) {
	r.once.Do(func() {
		out, _, err := r.Conn.Run(ctx, "id -u")
		if err != nil {
			r.err = fmt.Errorf("probing the login user (id -u): %w", err)
			return
		}
		r.sudo = strings.TrimSpace(string(out)) != "0"
	})
	if r.err != nil {
		return nil, nil, r.err
	}
	if r.sudo {
		cmd = "sudo -n sh -c " + ssh.Quote(cmd)
	}
	return r.Conn.Run(ctx, cmd)
}

func (r *rootConn) WriteFile(ctx context.Context, path string, content []byte, mode fs.FileMode) error {
	return r.Conn.WriteFile(ctx, path, content, mode)
}
