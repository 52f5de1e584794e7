package ssh

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	gossh "golang.org/x/crypto/ssh"
)

// Defaults of Run.
const (
	// DefaultOutputLimit caps each of stdout and stderr kept by Run; the
	// rest is read and discarded, and Result.Truncated is set.
	DefaultOutputLimit = 16 << 20
	// DefaultKillGrace is how long a cancelled Run waits for the command
	// to die after TERM before KILL, and after KILL before closing the
	// session. It is the main part of the one-second budget for a command
	// that ignores TERM: the KILL after it reaches the VM in milliseconds
	// when the Client's kill loop is ready (see [Client.Run]), and the
	// rest of the second absorbs a loaded machine and a loop still
	// starting.
	DefaultKillGrace = 300 * time.Millisecond
	// stderrTail is how much of stderr an ExitError keeps.
	stderrTail = 4 << 10
)

// Result is what a command printed and how it ended.
type Result struct {
	Stdout, Stderr []byte
	// ExitCode is the exit status; 128+n when killed by signal n; -1 when
	// unknown (the connection was lost or the command never started).
	ExitCode int
	// Truncated reports that stdout or stderr exceeded the output limit and
	// only its beginning was kept.
	Truncated bool
}

// ExitError is the error of a command that ran and exited non-zero or was
// killed by a signal. Run wraps it with the host and command; use
// errors.As to get it.
type ExitError struct {
	Code   int    // exit status; 128+n when killed by signal n
	Signal string // SSH signal name ("TERM", "KILL") if killed, else ""
	Stderr []byte // the last 4 KiB of stderr
}

// Error gives the exit status or signal and the last lines of stderr.
func (e *ExitError) Error() string {
	msg := fmt.Sprintf("exit status %d", e.Code)
	if e.Signal != "" {
		msg = "killed by signal " + e.Signal
	}
	if tail := lastLines(e.Stderr, 3, 512); tail != "" {
		msg += ": " + tail
	}
	return msg
}

// errNoStatus says that a session ended, or was abandoned, without an
// exit status.
var errNoStatus = errors.New("the command reported no exit status")

// RunOption configures one Run.
type RunOption func(*runOptions)

type runOptions struct {
	stdin          io.Reader
	limit          int
	grace          time.Duration
	stdout, stderr io.Writer
	sudo           bool
}

// WithStdin feeds r to the command's stdin, then EOF. Run returns when the
// command ends, even if r has more to give.
func WithStdin(r io.Reader) RunOption { return func(o *runOptions) { o.stdin = r } }

// WithOutputLimit caps the bytes of stdout and of stderr that Run keeps
// (default DefaultOutputLimit); n <= 0 keeps the default.
func WithOutputLimit(n int) RunOption { return func(o *runOptions) { o.limit = n } }

// WithKillGrace sets how long a cancelled command gets to die after TERM,
// then after KILL, before the session is closed (default DefaultKillGrace).
// A command that ignores TERM outlives the cancel by d and then some: with
// d much over half a second it is no longer gone within the second.
func WithKillGrace(d time.Duration) RunOption { return func(o *runOptions) { o.grace = d } }

// WithOutput also copies stdout and stderr, as they arrive, to the given
// writers (either may be nil), for example to stream an installer's log.
// Their errors are ignored, and nothing is written to them after Run
// returns.
func WithOutput(stdout, stderr io.Writer) RunOption {
	return func(o *runOptions) { o.stdout, o.stderr = stdout, stderr }
}

// WithSudo runs the command as root: through `sudo -n` when the login user
// is not root (see [Client.WriteFile] for the rules), as is otherwise. The
// command is passed to `sh -c`.
func WithSudo() RunOption { return func(o *runOptions) { o.sudo = true } }

// Run runs cmd through the login shell of the remote user and returns its
// output and exit status. The login shell must be a POSIX one (sh, dash,
// bash, zsh, ksh): Run puts a line of its own before cmd, which prints the
// shell's pid on stderr, and takes that line out of stderr again, so
// stdout, stderr and the exit status are byte for byte what cmd gave.
//
// A command that exits non-zero or is killed returns its Result and an
// error wrapping *[ExitError]. If ctx ends first, Run kills the command's
// whole process group (the login shell and everything it started that did
// not leave the group): TERM, then KILL after the grace period (see
// [WithKillGrace]); it then closes the session after the grace period
// again, and returns what was printed and an error wrapping ctx.Err().
// Each signal is sent both as an SSH "signal" request, which reaches only
// the login shell and which OpenSSH ignores on root logins, and as a line
// to the Client's kill loop: a session of its own on the same connection
// running a shell loop that kills the group (through `sudo -n` when the
// command ran so). The first Run starts the loop in the background and
// later ones reuse it (starting it again if it ended), so that no session
// has to open, and no login shell start, after a cancel. Thus the group is
// gone, and Run has returned, within a second of the cancel even when the
// command ignores TERM, for root logins too; only a cancel arriving before
// the loop has finished starting waits for it. When the loop cannot start
// (a broken connection; or sshd's MaxSessions, 10 by default, taken by
// other Runs on this Client) only the signal requests are left, and when
// the connection is broken not even they arrive: closing the session is
// all that is left, and the remote command may outlive it until it next
// writes output. If the connection dies before an exit status
// arrives, the error wraps [ErrConnectionLost] (and [ErrPeerUnresponsive]
// if keepalives found the peer dead): the command may or may not have run.
// cmd must not contain NUL; build it with [Command] or [Quote] when it has
// arguments.
func (c *Client) Run(ctx context.Context, cmd string, opts ...RunOption) (Result, error) {
	o := runOptions{limit: DefaultOutputLimit, grace: DefaultKillGrace}
	for _, opt := range opts {
		opt(&o)
	}
	if o.limit <= 0 {
		o.limit = DefaultOutputLimit
	}
	if strings.ContainsRune(cmd, 0) {
		return Result{ExitCode: -1}, fmt.Errorf("%w: command contains NUL", ErrInvalidConfig)
	}
	if o.sudo {
		wrapped, err := c.asRootCommand(ctx, cmd)
		if err != nil {
			return Result{ExitCode: -1}, err
		}
		cmd = wrapped
	}
	return c.run(ctx, cmd, o)
}

func (c *Client) run(ctx context.Context, cmd string, o runOptions) (Result, error) {
	short := shorten(cmd)
	fail := func(err error) (Result, error) {
		return Result{ExitCode: -1}, fmt.Errorf("ssh: %s: %s: %w", c.target, short, err)
	}
	// A command wrapped in sudo is killed through sudo too.
	viaSudo := o.sudo && c.viaSudo()
	sess, err := c.newSession(ctx)
	if err != nil {
		return fail(err)
	}
	// Have the kill loop ready before any cancel: starting one then would
	// cost the start of a login shell, which the kill cannot wait for.
	_ = c.killer(viaSudo) // nil once the client is closing, which Start notices
	stdout := &capBuffer{limit: o.limit, tee: o.stdout}
	stderr := &capBuffer{limit: o.limit, tee: o.stderr}
	group := newGroupReport(stderr)
	sess.Stdout, sess.Stderr = stdout, group
	var stdin io.WriteCloser
	if o.stdin != nil {
		if stdin, err = sess.StdinPipe(); err != nil {
			_ = sess.Close()
			return fail(err)
		}
	}

	begin := time.Now()
	waited := make(chan error, 1)
	started := c.spawn(func() {
		if err := sess.Start(group.wrap(cmd)); err != nil {
			waited <- fmt.Errorf("start: %w", err)
			return
		}
		if stdin != nil {
			// Owned by the client: it ends when r does, or when a write
			// fails because the session is gone.
			c.spawn(func() {
				_, _ = io.Copy(stdin, o.stdin) // a write error means the command stopped reading
				_ = stdin.Close()              // EOF for the command; fails only if the session is gone
			})
		}
		waited <- sess.Wait()
	})
	if !started {
		_ = sess.Close() // the client is closing; the session is moot
		return fail(c.lost())
	}

	var waitErr error
	cancelled := false
	select {
	case waitErr = <-waited:
	case <-ctx.Done():
		cancelled = true
		waitErr = c.stop(sess, waited, o.grace, group, viaSudo)
	}
	_ = sess.Close() // usually already closed by the server; nothing to report

	group.finish()
	res := Result{ExitCode: -1}
	res.Stdout, res.Truncated = stdout.seal()
	var errTrunc bool
	res.Stderr, errTrunc = stderr.seal()
	res.Truncated = res.Truncated || errTrunc

	var exitErr *gossh.ExitError
	var missing *gossh.ExitMissingError
	switch {
	case waitErr == nil: // it exited 0, even if ctx ended meanwhile
		res.ExitCode = 0
	case errors.As(waitErr, &exitErr):
		res.ExitCode = exitErr.ExitStatus()
	}
	c.log.Debug("ssh run", "cmd", short, "code", res.ExitCode, "elapsed", time.Since(begin).Round(time.Millisecond))

	switch {
	case cancelled:
		return res, fmt.Errorf("ssh: %s: %s: %w", c.target, short, ctx.Err())
	case waitErr == nil:
		return res, nil
	case exitErr != nil:
		return res, fmt.Errorf("ssh: %s: %s: %w", c.target, short, &ExitError{
			Code:   res.ExitCode,
			Signal: exitErr.Signal(),
			Stderr: tail(res.Stderr, stderrTail),
		})
	case c.lost() != nil:
		return res, fmt.Errorf("ssh: %s: %s: %w", c.target, short, c.lost())
	case errors.As(waitErr, &missing), errors.Is(waitErr, io.EOF):
		// No exit status, or a start the channel's end cut short: the
		// connection went (the transport may say so a moment later).
		return res, fmt.Errorf("ssh: %s: %s: %w: %w", c.target, short, ErrConnectionLost, errNoStatus)
	default:
		return res, fmt.Errorf("ssh: %s: %s: %w", c.target, short, waitErr)
	}
}

// stop ends a cancelled command: TERM, then KILL after grace, then
// closing the session after grace again. Each signal goes both as an SSH
// "signal" request, which OpenSSH ignores on root logins, and as a kill of
// the command's process group through the Client's kill loop; nothing
// waits for either before the next step. It returns the session's Wait
// error if it came in time.
func (c *Client) stop(sess *gossh.Session, waited <-chan error, grace time.Duration, group *groupReport, sudo bool) error {
	// Closed once the command is seen to end: kills not yet sent are moot.
	// A kill already decided is sent even if Run gives up waiting first.
	exited := make(chan struct{})
	for _, sig := range []gossh.Signal{gossh.SIGTERM, gossh.SIGKILL} {
		_ = sess.Signal(sig) // a server that ignores signals still gets the kill
		// Usually the loop the Run started, by now ready; a fresh one if
		// that one failed or ended.
		k := c.killer(sudo)
		if k == nil || !c.spawn(func() { c.killGroup(k, group, sig, exited) }) {
			break // the client is closing: so is the session
		}
		t := time.NewTimer(grace)
		select {
		case err := <-waited:
			t.Stop()
			close(exited)
			return err
		case <-t.C:
		}
	}
	// The wait goroutine stays with the client, which ends it at Close.
	return errNoStatus
}

// capBuffer keeps the first limit bytes written to it, discards the rest,
// and stops writing (to itself and to tee) once sealed.
type capBuffer struct {
	mu        sync.Mutex
	buf       []byte
	limit     int
	truncated bool
	sealed    bool
	tee       io.Writer
}

func (b *capBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.sealed {
		return len(p), nil
	}
	if b.tee != nil {
		_, _ = b.tee.Write(p) // documented: tee errors do not fail the command
	}
	keep := min(len(p), b.limit-len(b.buf))
	if keep < len(p) {
		b.truncated = true
	}
	b.buf = append(b.buf, p[:keep]...)
	return len(p), nil
}

func (b *capBuffer) seal() ([]byte, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.sealed = true
	return b.buf, b.truncated
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return append([]byte(nil), b...)
}

// lastLines returns up to n non-empty last lines of b, at most max bytes,
// joined with " | ", for error messages.
func lastLines(b []byte, n, max int) string {
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	s := strings.Join(lines, " | ")
	if len(s) > max {
		s = "…" + s[len(s)-max:]
	}
	return strings.ToValidUTF8(s, "?")
}

// shorten names a command in messages: its first line, at most 80 runes.
func shorten(cmd string) string {
	line, _, more := strings.Cut(cmd, "\n")
	if utf8.RuneCountInString(line) > 80 {
		line, more = string([]rune(line)[:80]), true
	}
	if more {
		line += " …"
	}
	return fmt.Sprintf("%q", line)
}
