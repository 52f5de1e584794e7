package ssh

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	gossh "golang.org/x/crypto/ssh"
)

// keepAliveMisses is how many intervals a keepalive may stay unanswered
// before the peer is declared dead.
const keepAliveMisses = 3

// Client is an authenticated connection to one VM. Its methods are safe
// for concurrent use; each Run opens its own session, and from the first
// Run on the Client keeps one more open for killing cancelled commands
// (two once a non-root login has run commands through sudo): count them
// against sshd's MaxSessions. Close it when done.
type Client struct {
	cfg     Config
	target  string
	log     *slog.Logger
	conn    *gossh.Client
	hostKey string

	goMu      sync.Mutex
	stopping  bool           // Close has begun: no new goroutines
	wg        sync.WaitGroup // watch, keepalive, and session waits Run gave up on
	done      chan struct{}  // closed once the transport has ended
	closeOnce sync.Once

	mu     sync.Mutex
	cause  error // why the transport ended; nil while it lives
	closed bool  // ended by Close

	privMu    sync.Mutex
	privKnown bool
	asRoot    bool // the login user is root: no sudo needed

	killMu  sync.Mutex
	killers [2]*killer // the kill loops, plain and through sudo; see kill.go
}

func newClient(cfg Config, sc gossh.Conn, chans <-chan gossh.NewChannel, reqs <-chan *gossh.Request, hostKey gossh.PublicKey) *Client {
	c := &Client{
		cfg:     cfg,
		target:  cfg.target(),
		log:     cfg.Logger.With("addr", cfg.Addr, "user", cfg.User),
		conn:    gossh.NewClient(sc, chans, reqs),
		hostKey: AuthorizedKey(hostKey),
		done:    make(chan struct{}),
	}
	c.spawn(c.watch)
	if cfg.KeepAlive > 0 {
		c.spawn(c.keepAlive)
	}
	return c
}

// HostKey returns the host key the server presented, in authorized_keys
// form ("ssh-ed25519 AAAA..."); the value TOFU pins.
func (c *Client) HostKey() string { return c.hostKey }

// Close closes the connection, failing the commands still running with
// ErrConnectionLost, and waits for the client's goroutines. Calling it
// again returns nil.
func (c *Client) Close() error {
	var err error
	c.closeOnce.Do(func() {
		c.mu.Lock()
		alive := c.cause == nil
		if alive {
			c.closed = true
			c.cause = fmt.Errorf("%w: client closed", net.ErrClosed)
		}
		c.mu.Unlock()
		err = c.conn.Close()
		if !alive {
			err = nil // the transport had already ended; nothing to report
		}
		c.goMu.Lock()
		c.stopping = true
		c.goMu.Unlock()
	})
	c.wg.Wait()
	return err
}

// Wait blocks until the connection ends and returns why: nil after Close,
// an error wrapping ErrPeerUnresponsive when keepalives went unanswered,
// or one wrapping ErrConnectionLost when the transport failed.
func (c *Client) Wait() error {
	<-c.done
	return c.err()
}

func (c *Client) err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	return c.cause
}

// spawn runs f in a goroutine that Close waits for, and reports false
// (without running f) once Close has begun.
func (c *Client) spawn(f func()) bool {
	c.goMu.Lock()
	defer c.goMu.Unlock()
	if c.stopping {
		return false
	}
	c.wg.Go(f)
	return true
}

// lost returns the reason the transport ended (or is ending), or nil.
func (c *Client) lost() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cause
}

// fail ends the transport with cause.
func (c *Client) fail(cause error) {
	c.mu.Lock()
	if c.cause == nil {
		c.cause = cause
	}
	c.mu.Unlock()
	_ = c.conn.Close() // the cause recorded above is the error to report
}

func (c *Client) watch() {
	err := c.conn.Wait()
	c.mu.Lock()
	if c.cause == nil {
		c.cause = fmt.Errorf("%w: %s: %v", ErrConnectionLost, c.target, err)
	}
	c.mu.Unlock()
	close(c.done)
}

func (c *Client) keepAlive() {
	tick := time.NewTicker(c.cfg.KeepAlive)
	defer tick.Stop()
	for {
		select {
		case <-c.done:
			return
		case <-tick.C:
		}
		reply := make(chan error, 1)
		// Ends with a reply or when the transport closes.
		if !c.spawn(func() {
			_, _, err := c.conn.SendRequest("keepalive@openssh.com", true, nil)
			reply <- err
		}) {
			return
		}
		timeout := time.NewTimer(keepAliveMisses * c.cfg.KeepAlive)
		select {
		case err := <-reply:
			timeout.Stop()
			if err != nil {
				return // the transport ended; watch records why
			}
		case <-timeout.C:
			c.log.Warn("ssh peer unresponsive; closing", "keepalive", c.cfg.KeepAlive)
			c.fail(fmt.Errorf("%w: %w: %s did not answer for %v",
				ErrConnectionLost, ErrPeerUnresponsive, c.target, keepAliveMisses*c.cfg.KeepAlive))
			return
		case <-c.done:
			timeout.Stop()
			return
		}
	}
}

// newSession opens a session channel, giving up when ctx ends or the
// transport dies.
func (c *Client) newSession(ctx context.Context) (*gossh.Session, error) {
	type result struct {
		s   *gossh.Session
		err error
	}
	ch := make(chan result, 1)
	abandoned := make(chan struct{})
	if !c.spawn(func() {
		s, err := c.conn.NewSession()
		select {
		case ch <- result{s, err}:
		case <-abandoned:
			if s != nil {
				_ = s.Close() // nobody waits for this session any more
			}
		}
	}) {
		return nil, c.lost()
	}
	select {
	case r := <-ch:
		if r.err != nil {
			if cause := c.lost(); cause != nil {
				return nil, cause
			}
			return nil, fmt.Errorf("%w: open session on %s: %w", ErrConnectionLost, c.target, r.err)
		}
		return r.s, nil
	case <-ctx.Done():
		close(abandoned)
		return nil, ctx.Err()
	case <-c.done:
		close(abandoned)
		return nil, c.lost()
	}
}
