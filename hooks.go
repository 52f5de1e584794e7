package gpuprov

import (
	"context"
	"fmt"
	"io/fs"
	"log/slog"

	"github.com/org/gpuprov/provider"
)

// Node is a VM whose instance runs and has an SSH endpoint: what the connect,
// bootstrap and join phases work on.
type Node struct {
	VM         string
	Cluster    string
	Provider   string
	Location   provider.Location
	InstanceID string
	SSH        provider.SSHEndpoint
	PublicIP   string
	PrivateIP  string
	GPU        string
	GPUCount   int
	// HostKey is the pinned public host key (authorized_keys form): the key
	// gpuprov injected, or the one seen on first contact. Empty before
	// first contact on clouds without user-data.
	HostKey string
}

// Conn is a live connection to a node. The ssh package's *Client satisfies it.
type Conn interface {
	// Run runs a shell command and returns its stdout and stderr; a non-zero
	// exit is an error.
	Run(ctx context.Context, cmd string) (stdout, stderr []byte, err error)
	// WriteFile writes content to path with mode, atomically.
	WriteFile(ctx context.Context, path string, content []byte, mode fs.FileMode) error
	// HostKey is the host key the node presented (authorized_keys form).
	HostKey() string
	Close() error
}

// Connector reaches a node once its instance runs (the connect phase). It
// waits, within ctx, until the node answers; it must verify the host key
// against n.HostKey when set and may accept the first key when not (the
// engine then pins Conn.HostKey in the journal). A host-key mismatch must be
// returned at once, not retried.
type Connector interface {
	Connect(ctx context.Context, n Node) (Conn, error)
}

// Bootstrapper prepares a connected node (the bootstrap phase): packages,
// drivers, the caller's setup. It must be idempotent, since a recovered
// launch runs it again.
type Bootstrapper interface {
	Bootstrap(ctx context.Context, n Node, c Conn) error
}

// Joiner forms a cluster out of bootstrapped nodes (the join phase of
// LaunchCluster). Serve makes the first ready node the server and returns
// what agents need to join; Join makes a node an agent. Both must be
// idempotent. JoinInfo holds no secret the journal would see: the engine
// keeps it in memory only.
type Joiner interface {
	Serve(ctx context.Context, n Node, c Conn) (JoinInfo, error)
	Join(ctx context.Context, server JoinInfo, n Node, c Conn) error
}

// JoinInfo is what agents need to join a cluster, and what the caller gets
// back (the kubeconfig).
type JoinInfo struct {
	Server     Node
	URL        string // the cluster's public API endpoint
	JoinURL    string // the endpoint agents join (may be private)
	Token      string // secret: never journaled or logged
	Kubeconfig []byte // secret: written by the caller with mode 0600
}

// String shows the join info without its secrets.
func (j JoinInfo) String() string {
	return fmt.Sprintf("JoinInfo{Server: %s, URL: %s, JoinURL: %s, Token: [redacted], Kubeconfig: [%d bytes redacted]}", j.Server.VM, j.URL, j.JoinURL, len(j.Kubeconfig))
}

// GoString is String, so %#v does not print the token either.
func (j JoinInfo) GoString() string { return j.String() }

// LogValue keeps the token out of structured logs.
func (j JoinInfo) LogValue() slog.Value { return slog.StringValue(j.String()) }
