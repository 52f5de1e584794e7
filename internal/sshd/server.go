package sshd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"
)

// Config describes a server. HostKey and Dir are required.
type Config struct {
	// HostKey is the key the server proves its identity with.
	HostKey ssh.Signer
	// AuthorizedKeys are the client keys that may log in, as any user.
	// Public-key authentication is the only method; there are no passwords.
	// An empty list refuses everyone until [Server.SetAuthorizedKeys].
	AuthorizedKeys []ssh.PublicKey
	// Dir is the working directory of every command and its $HOME.
	Dir string
	// Env is added to the commands' environment, after PATH (inherited from
	// this process) and HOME=Dir, so it can override both. "env" requests
	// from the client come last.
	Env []string
	// Logger receives connection and command events at debug level; nil
	// discards them.
	Logger *slog.Logger
}

// Faults make the server misbehave; set them with [Server.SetFaults] at any
// time. The zero value is a healthy server.
type Faults struct {
	// HandshakeHang accepts TCP connections but never sends the SSH banner.
	// It is read when a connection is accepted.
	HandshakeHang bool
	// BannerDelay waits this long after accepting a connection before the
	// SSH handshake starts. It is read when a connection is accepted.
	BannerDelay time.Duration
	// DropMidCommand closes the TCP connection right after an exec request
	// has started its command and been acknowledged, so the client sees the
	// connection die while the command runs. It is read at each exec.
	DropMidCommand bool
	// RejectAuth refuses every key, as if the authorized key had not been
	// installed yet. It is read at each authentication attempt.
	RejectAuth bool
	// IgnoreSignals drops "signal" requests, like OpenSSH before 7.9: the
	// client must fall back to closing the channel. It is read at each
	// signal request.
	IgnoreSignals bool
	// Stall freezes every live connection: the server stops reading and
	// writing (data already sent to it is held, not lost), like a peer that
	// vanished without closing TCP. Clearing it resumes the connections.
	Stall bool
}

// Server is a running SSH server. Its methods are safe for concurrent use.
type Server struct {
	cfg    Config
	env    []string
	log    *slog.Logger
	ln     net.Listener
	sshCfg *ssh.ServerConfig
	ctx    context.Context // ends at Close; kills running commands
	cancel context.CancelFunc
	wg     sync.WaitGroup // the accept loop and every connection

	mu     sync.Mutex
	faults Faults
	resume chan struct{} // closed when Stall is cleared
	keys   []ssh.PublicKey
	conns  map[*faultConn]struct{}
	closed bool
}

// Start listens on 127.0.0.1 on a free port and serves until Close. It
// returns an error if HostKey or Dir is missing or the listener fails.
func Start(cfg Config) (*Server, error) {
	if cfg.HostKey == nil {
		return nil, errors.New("sshd: Config.HostKey is required")
	}
	if cfg.Dir == "" {
		return nil, errors.New("sshd: Config.Dir is required")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("sshd: listen on 127.0.0.1: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{
		cfg:    cfg,
		env:    baseEnv(cfg),
		log:    log.With("sshd", ln.Addr().String()),
		ln:     ln,
		ctx:    ctx,
		cancel: cancel,
		keys:   slices.Clone(cfg.AuthorizedKeys),
		conns:  make(map[*faultConn]struct{}),
	}
	s.sshCfg = &ssh.ServerConfig{
		PublicKeyCallback: s.checkKey,
		ServerVersion:     "SSH-2.0-gpuprov-sshd",
	}
	s.sshCfg.AddHostKey(cfg.HostKey)
	s.wg.Add(1)
	go s.serve()
	return s, nil
}

// Addr returns the listening address, "127.0.0.1:port".
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Port returns the listening port.
func (s *Server) Port() int { return s.ln.Addr().(*net.TCPAddr).Port }

// SetFaults replaces the active faults. See [Faults] for when each is read.
func (s *Server) SetFaults(f Faults) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case f.Stall && !s.faults.Stall:
		s.resume = make(chan struct{})
	case !f.Stall && s.faults.Stall:
		close(s.resume)
	}
	s.faults = f
}

// Faults returns the active faults.
func (s *Server) Faults() Faults {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.faults
}

// SetAuthorizedKeys replaces the keys that may log in; established
// connections are not affected.
func (s *Server) SetAuthorizedKeys(keys []ssh.PublicKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keys = slices.Clone(keys)
}

// Close stops listening, closes every live connection, kills the process
// groups of the commands still running and waits until every goroutine of
// the server has returned. It returns the listener's close error, and nil
// when called again.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.wg.Wait()
		return nil
	}
	s.closed = true
	conns := make([]*faultConn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()

	s.cancel()
	err := s.ln.Close()
	for _, c := range conns {
		_ = c.Close() // the connection is being torn down; its error says nothing
	}
	s.wg.Wait()
	return err
}

func (s *Server) checkKey(meta ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
	s.mu.Lock()
	reject, keys := s.faults.RejectAuth, s.keys
	s.mu.Unlock()
	if reject {
		return nil, fmt.Errorf("sshd: key of %s refused (fault RejectAuth)", meta.User())
	}
	want := key.Marshal()
	for _, k := range keys {
		if bytes.Equal(k.Marshal(), want) {
			return &ssh.Permissions{}, nil
		}
	}
	return nil, fmt.Errorf("sshd: key of %s is not authorized", meta.User())
}

func (s *Server) serve() {
	defer s.wg.Done()
	for {
		nc, err := s.ln.Accept()
		if err != nil {
			if s.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			// A transient accept error (out of file descriptors): back off
			// briefly, as net/http does, instead of spinning.
			s.log.Debug("accept failed", "err", err)
			t := time.NewTimer(10 * time.Millisecond)
			select {
			case <-t.C:
			case <-s.ctx.Done():
				t.Stop()
				return
			}
			continue
		}
		c := &faultConn{Conn: nc, s: s, closed: make(chan struct{})}
		if !s.track(c) {
			_ = nc.Close() // the server closed while we accepted
			return
		}
		go s.handleConn(c)
	}
}

// track registers c and accounts for its goroutine; it reports false once
// the server is closed.
func (s *Server) track(c *faultConn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.conns[c] = struct{}{}
	s.wg.Add(1)
	return true
}

func (s *Server) untrack(c *faultConn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.conns, c)
}

func (s *Server) handleConn(c *faultConn) {
	defer s.wg.Done()
	defer s.untrack(c)
	defer c.Close()
	log := s.log.With("client", c.RemoteAddr().String())

	f := s.Faults()
	if f.HandshakeHang {
		log.Debug("fault: handshake hang")
		// Swallow what the client sends until it gives up or Close closes c.
		_, _ = io.Copy(io.Discard, c)
		return
	}
	if f.BannerDelay > 0 {
		t := time.NewTimer(f.BannerDelay)
		select {
		case <-t.C:
		case <-s.ctx.Done():
			t.Stop()
			return
		}
	}

	sc, chans, reqs, err := ssh.NewServerConn(c, s.sshCfg)
	if err != nil {
		log.Debug("handshake failed", "err", err)
		return
	}
	log = log.With("user", sc.User())
	log.Debug("connected")

	var wg sync.WaitGroup
	wg.Go(func() { globalRequests(reqs) })
	for nch := range chans {
		if nch.ChannelType() != "session" {
			_ = nch.Reject(ssh.UnknownChannelType, "only session channels are supported")
			continue
		}
		ch, creqs, err := nch.Accept()
		if err != nil {
			log.Debug("accept channel failed", "err", err)
			continue
		}
		wg.Go(func() { s.session(c, ch, creqs, log) })
	}
	// chans is closed: the connection is gone.
	_ = sc.Close()
	wg.Wait()
	log.Debug("disconnected")
}

// globalRequests answers keepalives and refuses everything else (port
// forwarding, hostkeys-00@openssh.com, ...).
func globalRequests(reqs <-chan *ssh.Request) {
	for req := range reqs {
		_ = req.Reply(req.Type == "keepalive@openssh.com", nil) // a failed reply means the connection is gone
	}
}

// faultConn applies the Stall fault to a connection and tells blocked
// readers and writers when it is closed.
type faultConn struct {
	net.Conn
	s         *Server
	closed    chan struct{}
	closeOnce sync.Once
}

func (c *faultConn) Read(p []byte) (int, error) {
	if err := c.s.waitUnstalled(c.closed); err != nil {
		return 0, err
	}
	n, err := c.Conn.Read(p)
	if n > 0 {
		// Hold data that arrived while stalled until the stall ends.
		if werr := c.s.waitUnstalled(c.closed); werr != nil {
			return 0, werr
		}
	}
	return n, err
}

func (c *faultConn) Write(p []byte) (int, error) {
	if err := c.s.waitUnstalled(c.closed); err != nil {
		return 0, err
	}
	return c.Conn.Write(p)
}

func (c *faultConn) Close() error {
	c.closeOnce.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

// waitUnstalled returns nil at once unless the Stall fault is set, then
// waits for it to clear or for closed.
func (s *Server) waitUnstalled(closed <-chan struct{}) error {
	for {
		s.mu.Lock()
		stalled, resume := s.faults.Stall, s.resume
		s.mu.Unlock()
		if !stalled {
			return nil
		}
		select {
		case <-resume:
		case <-closed:
			return net.ErrClosed
		}
	}
}
