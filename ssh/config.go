package ssh

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	gossh "golang.org/x/crypto/ssh"
)

// Defaults for the zero fields of [Config].
const (
	DefaultConnectTimeout   = 10 * time.Second
	DefaultHandshakeTimeout = 15 * time.Second
	DefaultKeepAlive        = 30 * time.Second
)

// Config says how to reach one VM. Addr, User, Signer and HostKey are
// required; the rest have defaults.
type Config struct {
	// Addr is the sshd address, "host:port".
	Addr string
	// User is the remote login.
	User string
	// Signer is the client key. It is never logged.
	Signer gossh.Signer
	// HostKey decides whether the server's host key is accepted. It is
	// required: there is no insecure default.
	HostKey HostKeyPolicy
	// ConnectTimeout bounds the TCP connect (default 10s).
	ConnectTimeout time.Duration
	// HandshakeTimeout bounds the SSH handshake, authentication included,
	// once TCP is connected (default 15s). It is enforced with a deadline on
	// the connection, so a port that accepts TCP but never speaks SSH fails
	// in time.
	HandshakeTimeout time.Duration
	// KeepAlive is the interval of keepalive@openssh.com requests (default
	// 30s; negative disables them). A peer that leaves one unanswered for
	// three intervals is declared dead and the client is closed, failing
	// the commands in flight with [ErrPeerUnresponsive].
	KeepAlive time.Duration
	// Logger receives debug events (dial attempts, commands, exit codes)
	// and a warning when keepalives find the peer dead — never a key or
	// file content; nil discards them.
	Logger *slog.Logger
}

// Errors that callers branch on. They are matched with errors.Is.
var (
	// ErrInvalidConfig means a Config or an argument is unusable; retrying
	// cannot help.
	ErrInvalidConfig = errors.New("ssh: invalid config")
	// ErrHostKeyMismatch means the server presented a host key other than
	// the pinned one. It is never retried: either the VM was replaced (its
	// pin must be dropped deliberately) or the connection is intercepted.
	ErrHostKeyMismatch = errors.New("ssh: host key mismatch")
	// ErrAuthFailed means the server refused the client key. During boot
	// this is expected until cloud-init installs the key, so WaitReady
	// retries it.
	ErrAuthFailed = errors.New("ssh: authentication failed")
	// ErrHandshakeTimeout means TCP connected but the SSH handshake did not
	// finish within HandshakeTimeout.
	ErrHandshakeTimeout = errors.New("ssh: handshake timed out")
	// ErrConnectionLost means the connection ended while a command ran,
	// before it reported an exit status: the command may or may not have
	// taken effect.
	ErrConnectionLost = errors.New("ssh: connection lost")
	// ErrPeerUnresponsive means the server stopped answering keepalives;
	// the client has been closed. It accompanies ErrConnectionLost.
	ErrPeerUnresponsive = errors.New("ssh: peer stopped answering keepalives")
	// ErrNoSudo means the remote user is not root and `sudo -n` refused to
	// run without a password: grant the user NOPASSWD sudo.
	ErrNoSudo = errors.New("ssh: passwordless sudo (NOPASSWD) is not available")
	// ErrChecksumMismatch means the file that arrived on the VM does not
	// have the sha256 of the content sent; nothing was renamed into place.
	ErrChecksumMismatch = errors.New("ssh: remote sha256 differs from the content sent")
)

// withDefaults validates c and fills its zero fields.
func (c Config) withDefaults() (Config, error) {
	var problems []string
	if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		problems = append(problems, fmt.Sprintf("Addr %q is not host:port", c.Addr))
	}
	if c.User == "" {
		problems = append(problems, "User is empty")
	}
	if c.Signer == nil {
		problems = append(problems, "Signer is nil")
	}
	if c.HostKey == nil {
		problems = append(problems, "HostKey is nil (a host key policy is required)")
	}
	if len(problems) > 0 {
		return c, fmt.Errorf("%w: %v", ErrInvalidConfig, problems)
	}
	if c.ConnectTimeout <= 0 {
		c.ConnectTimeout = DefaultConnectTimeout
	}
	if c.HandshakeTimeout <= 0 {
		c.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if c.KeepAlive == 0 {
		c.KeepAlive = DefaultKeepAlive
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c, nil
}

// target names the connection in messages: "user@host:port".
func (c Config) target() string { return c.User + "@" + c.Addr }
