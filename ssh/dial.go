package ssh

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/org/gpuprov/internal/backoff"
)

// Dial makes one attempt to connect: a TCP connect bounded by
// ConnectTimeout, then the SSH handshake and public-key authentication
// bounded by HandshakeTimeout, both also bounded by ctx. It returns:
//   - the HostKeyPolicy's error as is when it rejects the host key
//     (a *[HostKeyMismatchError] for the pinning policies);
//   - an error wrapping [ErrAuthFailed] when the server refuses the key;
//   - an error wrapping [ErrHandshakeTimeout] when TCP connected but SSH
//     did not finish in time;
//   - an error wrapping ctx.Err() when ctx ended first;
//   - an error wrapping [ErrInvalidConfig] for an unusable Config;
//   - otherwise the network error, wrapped (connection refused, reset...).
func Dial(ctx context.Context, cfg Config) (*Client, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	c, derr := dial(ctx, cfg)
	return c, derr.error()
}

// dialError keeps what WaitReady needs to decide whether to retry.
type dialError struct {
	err   error
	final bool // retrying cannot help: the host key was rejected
}

func (e *dialError) error() error {
	if e == nil {
		return nil
	}
	return e.err
}

// handshakeState records, from the callbacks, how far a handshake got.
type handshakeState struct {
	mu         sync.Mutex
	presented  gossh.PublicKey
	hostKeyErr error
	keyChecked bool // the host key was checked: failures after are auth
}

func dial(ctx context.Context, cfg Config) (*Client, *dialError) {
	target := cfg.target()
	if err := ctx.Err(); err != nil {
		return nil, &dialError{err: fmt.Errorf("ssh: dial %s: %w", target, err)}
	}
	d := net.Dialer{Timeout: cfg.ConnectTimeout}
	conn, err := d.DialContext(ctx, "tcp", cfg.Addr)
	if err != nil {
		return nil, &dialError{err: fmt.Errorf("ssh: connect to %s: %w", cfg.Addr, err)}
	}

	st := &handshakeState{}
	ccfg := &gossh.ClientConfig{
		User: cfg.User,
		Auth: []gossh.AuthMethod{gossh.PublicKeys(cfg.Signer)},
		HostKeyCallback: func(_ string, _ net.Addr, key gossh.PublicKey) error {
			err := cfg.HostKey.CheckHostKey(cfg.Addr, key)
			st.mu.Lock()
			defer st.mu.Unlock()
			st.presented, st.hostKeyErr, st.keyChecked = key, err, true
			return err
		},
	}
	if h, ok := cfg.HostKey.(AlgorithmHinter); ok {
		ccfg.HostKeyAlgorithms = h.HostKeyAlgorithms()
	}

	// ClientConfig.Timeout covers only net.Dial; the handshake gets its own
	// deadline, cut short if ctx ends.
	deadline := time.Now().Add(cfg.HandshakeTimeout)
	if err := conn.SetDeadline(deadline); err != nil {
		_ = conn.Close() // the deadline error is the one to report
		return nil, &dialError{err: fmt.Errorf("ssh: handshake with %s: %w", target, err)}
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	sc, chans, reqs, err := gossh.NewClientConn(conn, cfg.Addr, ccfg)
	if !stop() && err == nil {
		// ctx ended as the handshake finished; honour ctx.
		_ = sc.Close() // discarding a connection nobody will use
		err = ctx.Err()
	}
	if err != nil {
		_ = conn.Close() // may be closed already; the handshake error matters
		return nil, classify(ctx, cfg, st, deadline, err)
	}
	if err := conn.SetDeadline(time.Time{}); err != nil {
		_ = sc.Close()
		return nil, &dialError{err: fmt.Errorf("ssh: handshake with %s: %w", target, err)}
	}
	st.mu.Lock()
	presented := st.presented
	st.mu.Unlock()
	return newClient(cfg, sc, chans, reqs, presented), nil
}

func classify(ctx context.Context, cfg Config, st *handshakeState, deadline time.Time, err error) *dialError {
	target := cfg.target()
	st.mu.Lock()
	hostKeyErr, keyChecked := st.hostKeyErr, st.keyChecked
	st.mu.Unlock()
	switch {
	case hostKeyErr != nil:
		return &dialError{err: hostKeyErr, final: true}
	case ctx.Err() != nil:
		return &dialError{err: fmt.Errorf("ssh: handshake with %s: %w (%v)", target, ctx.Err(), err)}
	case isNetError(err) && !time.Now().Before(deadline):
		return &dialError{err: fmt.Errorf("ssh: handshake with %s: no answer within %v: %w: %w",
			target, cfg.HandshakeTimeout, ErrHandshakeTimeout, err)}
	case keyChecked && !isNetError(err):
		return &dialError{err: fmt.Errorf("ssh: %s refused key %s: %w: %w",
			target, gossh.FingerprintSHA256(cfg.Signer.PublicKey()), ErrAuthFailed, err)}
	default:
		return &dialError{err: fmt.Errorf("ssh: handshake with %s: %w", target, err)}
	}
}

// isNetError reports a transport failure, as opposed to a protocol answer.
func isNetError(err error) bool {
	var ne net.Error
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.As(err, &ne)
}

// Defaults of WaitReady's backoff.
const (
	DefaultBackoffBase = 250 * time.Millisecond
	DefaultBackoffMax  = 5 * time.Second
)

// WaitOption configures WaitReady.
type WaitOption func(*waitOptions)

type waitOptions struct {
	base, max time.Duration
	sleep     func(context.Context, time.Duration) error
	progress  func(attempt int, err error)
}

// WithBackoff sets the backoff: before retry n (from 1) WaitReady sleeps a
// uniformly random duration in [0, min(max, base·2ⁿ⁻¹)] ("full jitter").
// Defaults: DefaultBackoffBase and DefaultBackoffMax.
func WithBackoff(base, max time.Duration) WaitOption {
	return func(o *waitOptions) { o.base, o.max = base, max }
}

// WithSleep replaces the sleep between attempts, for example with a fake
// clock's Sleep method. sleep must return early with a non-nil error when
// ctx ends; WaitReady then stops.
func WithSleep(sleep func(ctx context.Context, d time.Duration) error) WaitOption {
	return func(o *waitOptions) { o.sleep = sleep }
}

// WithProgress calls fn after every failed attempt that will be retried,
// with the attempt number (from 1) and its error, before the sleep.
func WithProgress(fn func(attempt int, err error)) WaitOption {
	return func(o *waitOptions) { o.progress = fn }
}

// WaitReady dials until a connection is established or ctx ends: the way
// to reach a VM that is still booting. Everything is retried with
// exponential backoff and full jitter — connection refused, reset or timed
// out, a port that does not speak SSH yet, and authentication failures
// (cloud-init may not have installed the key yet) — except:
//   - a rejected host key, whose error (errors.Is ErrHostKeyMismatch for the
//     pinning policies) is returned at once;
//   - an invalid Config (ErrInvalidConfig), returned at once.
//
// When ctx ends, the error wraps ctx.Err() and the last dial error, so both
// errors.Is(err, context.DeadlineExceeded) and, say, errors.Is(err,
// ErrAuthFailed) hold.
func WaitReady(ctx context.Context, cfg Config, opts ...WaitOption) (*Client, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	o := waitOptions{base: DefaultBackoffBase, max: DefaultBackoffMax, sleep: sleepCtx}
	for _, opt := range opts {
		opt(&o)
	}
	policy := backoff.New(o.base, o.max, rand.Uint64())
	log := cfg.Logger.With("addr", cfg.Addr, "user", cfg.User)

	var last error
	for attempt := 1; ; attempt++ {
		c, derr := dial(ctx, cfg)
		if derr == nil {
			log.Debug("ssh ready", "attempt", attempt)
			return c, nil
		}
		if derr.final {
			return nil, derr.err
		}
		if ctx.Err() != nil {
			if !errors.Is(derr.err, ctx.Err()) {
				last = derr.err // a real failure that raced with ctx
			}
			return nil, waitFailed(ctx, cfg, attempt, last)
		}
		last = derr.err
		log.Debug("ssh not ready", "attempt", attempt, "err", last)
		if o.progress != nil {
			o.progress(attempt, last)
		}
		if err := o.sleep(ctx, policy.Delay(attempt-1, 0)); err != nil || ctx.Err() != nil {
			return nil, waitFailed(ctx, cfg, attempt, last)
		}
	}
}

func waitFailed(ctx context.Context, cfg Config, attempts int, last error) error {
	if last == nil {
		return fmt.Errorf("ssh: %s not ready: %w", cfg.target(), ctx.Err())
	}
	return fmt.Errorf("ssh: %s not ready after %d attempts: %w; last error: %w", cfg.target(), attempts, ctx.Err(), last)
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
