package gpuprov

import (
	"context"
	"encoding/json"
	"io/fs"
	"log/slog"
	"net"
	"strconv"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/org/gpuprov/ssh"
)

// SSHConnector is the Connector that reaches nodes over SSH with the ssh
// package: it dials until sshd answers within the connect budget, verifies
// the node's pinned host key (the one gpuprov injected, or the one pinned on
// first contact), and accepts the first key only when nothing is pinned yet
// (the engine then pins it in the journal by instance id).
type SSHConnector struct {
	// Signer is the client key whose public half the Provisioner installs
	// on every VM (see WithSSH).
	Signer gossh.Signer
	// User overrides the login the provider reports. Given without WithSSH,
	// it is also the login the keys are installed for; New refuses one that
	// differs from WithSSH's user.
	User string
	// HandshakeTimeout bounds each SSH handshake (default 15s).
	HandshakeTimeout time.Duration
	// Sleep replaces the wait between dials (tests).
	Sleep  func(ctx context.Context, d time.Duration) error
	Logger *slog.Logger
}

// Connect implements Connector.
func (s *SSHConnector) Connect(ctx context.Context, n Node) (Conn, error) {
	var policy ssh.HostKeyPolicy
	if n.HostKey != "" {
		p, err := ssh.FixedHostKey(n.HostKey)
		if err != nil {
			return nil, err
		}
		policy = p
	} else {
		policy = ssh.TOFU("", nil) // pinned by the engine from Conn.HostKey
	}
	user := n.SSH.User
	if s.User != "" {
		user = s.User
	}
	var opts []ssh.WaitOption
	if s.Sleep != nil {
		opts = append(opts, ssh.WithSleep(s.Sleep))
	}
	c, err := ssh.WaitReady(ctx, ssh.Config{
		Addr: net.JoinHostPort(n.SSH.Host, strconv.Itoa(n.SSH.Port)), User: user, Signer: s.Signer,
		HostKey: policy, HandshakeTimeout: s.HandshakeTimeout, Logger: s.Logger,
	}, opts...)
	if err != nil {
		return nil, err
	}
	return sshConn{c}, nil
}

type sshConn struct{ c *ssh.Client }

func (s sshConn) Run(ctx context.Context, cmd string) ([]byte, []byte, error) {
	res, err := s.c.Run(ctx, cmd)
	return res.Stdout, res.Stderr, err
}

func (s sshConn) WriteFile(ctx context.Context, path string, content []byte, mode fs.FileMode) error {
	return s.c.WriteFile(ctx, path, content, mode)
}

func (s sshConn) HostKey() string { return s.c.HostKey() }
func (s sshConn) Close() error    { return s.c.Close() }

// SSH opens an SSH connection to the ready VM named name, as its login
// user, with the client key of WithSSHKey (or of the SSHConnector), and
// verifies the host key pinned in the journal: a VM without a pinned key is
// refused rather than trusted on sight. The caller closes the client.
func (p *Provisioner) SSH(ctx context.Context, name string) (*ssh.Client, error) {
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	row, err := p.j.GetVM(ctx, name)
	if err != nil {
		return nil, vmError(name, err)
	}
	if row.State != StateReady {
		return nil, errorf("VM %s is %s, not ready: nothing to log in to", name, row.State)
	}
	signer := p.loginKey()
	if signer == nil {
		return nil, errorf("VM %s: no client key: build the Provisioner WithSSHKey(signer)", name)
	}
	var jr journaledRequest
	_ = json.Unmarshal(row.Request, &jr) // a request that does not parse names no keys
	if err := p.checkClientKey(name, jr.ClientKeys); err != nil {
		return nil, err
	}
	if row.HostKey == "" || row.SSHHost == "" {
		return nil, errorf("VM %s has no pinned host key or SSH endpoint (it was launched without a connector)", name)
	}
	policy, err := ssh.FixedHostKey(row.HostKey)
	if err != nil {
		return nil, errorf("VM %s: its pinned host key: %w", name, err)
	}
	c, err := ssh.Dial(ctx, ssh.Config{Addr: net.JoinHostPort(row.SSHHost, strconv.Itoa(row.SSHPort)),
		User: row.SSHUser, Signer: signer, HostKey: policy, Logger: p.log})
	if err != nil {
		return nil, errorf("VM %s: %w", name, err)
	}
	return c, nil
}

// Run runs cmd on the ready VM named name over a connection of its own (see
// SSH) and returns its result; a non-zero exit is an *ssh.ExitError.
// Cancelling ctx stops the remote command (see ssh.Client.Run).
func (p *Provisioner) Run(ctx context.Context, name, cmd string, opts ...ssh.RunOption) (ssh.Result, error) {
	c, err := p.SSH(ctx, name)
	if err != nil {
		return ssh.Result{}, err
	}
	defer c.Close()
	return c.Run(ctx, cmd, opts...)
}
