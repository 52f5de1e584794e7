package ssh

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"
)

// Tests against a real OpenSSH sshd on loopback (see newRealSSHD).

func TestRealWaitReadyWhileSSHDStartsLate(t *testing.T) {
	r := newRealSSHD(t)
	var attempts []error
	progress := func(n int, err error) {
		attempts = append(attempts, err)
		if n == 1 {
			r.start(t) // sshd comes up only after a failed attempt
		}
	}
	c, err := WaitReady(testCtx(t), r.cfg(t, r.fixed(t)), WithSleep(noSleep), WithProgress(progress))
	if err != nil {
		t.Fatalf("WaitReady: %v", err)
	}
	closeClient(t, c)
	if len(attempts) == 0 || !errors.Is(attempts[0], syscall.ECONNREFUSED) {
		t.Fatalf("first attempt error = %v, want connection refused", attempts)
	}
	if len(attempts) != 1 {
		t.Errorf("%d failed attempts after sshd was listening: %v", len(attempts)-1, attempts[1:])
	}
	// Key authentication put us in as the configured user.
	res, err := c.Run(testCtx(t), "id -un")
	if err != nil || strings.TrimSpace(string(res.Stdout)) != r.user {
		t.Fatalf("id -un = %q, %v; want %q", res.Stdout, err, r.user)
	}
	if c.HostKey() != r.hostKey.AuthorizedKey {
		t.Errorf("HostKey() = %q, want %q", c.HostKey(), r.hostKey.AuthorizedKey)
	}
}

func TestRealKeyAuthRefusesUnknownKey(t *testing.T) {
	r := newRealSSHD(t)
	r.start(t)
	cfg := r.cfg(t, r.fixed(t))
	cfg.Signer = mustKey(t).Signer
	_, err := Dial(testCtx(t), cfg)
	if !errors.Is(err, ErrAuthFailed) {
		t.Fatalf("Dial with an unknown key = %v, want ErrAuthFailed", err)
	}
}

func TestRealTOFUPinsFirstKeyThenVerifies(t *testing.T) {
	r := newRealSSHD(t)
	r.start(t)
	var pins []string
	policy := TOFU("", func(k string) error { pins = append(pins, k); return nil })
	for i := range 2 {
		c, err := Dial(testCtx(t), r.cfg(t, policy))
		if err != nil {
			t.Fatalf("contact %d: %v", i+1, err)
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if len(pins) != 1 || pins[0] != r.hostKey.AuthorizedKey {
		t.Fatalf("pinned %q, want exactly the host key once", pins)
	}
	// A later run restores the pin from storage: pin is not called again.
	restored := TOFU(pins[0], func(string) error { t.Error("pin called with a key already pinned"); return nil })
	c, err := Dial(testCtx(t), r.cfg(t, restored))
	if err != nil {
		t.Fatalf("contact with a restored pin: %v", err)
	}
	_ = c.Close()

	// A pin that cannot be stored aborts the dial and is not retried.
	failing := TOFU("", func(string) error { return os.ErrPermission })
	_, err = WaitReady(testCtx(t), r.cfg(t, failing), WithSleep(noSleep),
		WithProgress(func(int, error) { t.Error("WaitReady retried a failed pin") }))
	if !errors.Is(err, os.ErrPermission) {
		t.Fatalf("failing pin: %v", err)
	}
}

func TestRealChangedHostKeyRefusedAtOnce(t *testing.T) {
	r := newRealSSHD(t)
	old := r.hostKey
	r.setHostKey(t, mustKey(t)) // the VM was replaced, or someone intercepts
	r.start(t)

	fixed, err := FixedHostKey(old.AuthorizedKey)
	if err != nil {
		t.Fatal(err)
	}
	for name, policy := range map[string]HostKeyPolicy{
		"fixed": fixed,
		"tofu":  TOFU(old.AuthorizedKey, nil),
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			begin := time.Now()
			_, err := WaitReady(ctx, r.cfg(t, policy),
				WithProgress(func(n int, err error) { t.Errorf("attempt %d retried: %v", n, err) }),
				WithSleep(func(context.Context, time.Duration) error { t.Error("WaitReady slept"); return nil }))
			if !errors.Is(err, ErrHostKeyMismatch) {
				t.Fatalf("WaitReady = %v, want ErrHostKeyMismatch", err)
			}
			if d := time.Since(begin); d > 10*time.Second {
				t.Errorf("took %v: not at once", d)
			}
			var mm *HostKeyMismatchError
			if !errors.As(err, &mm) {
				t.Fatalf("%T is not a *HostKeyMismatchError", err)
			}
			want, got := fingerprint(t, old.AuthorizedKey), fingerprint(t, r.hostKey.AuthorizedKey)
			if mm.Expected != want || mm.Presented != got ||
				!strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), got) {
				t.Errorf("error %q, want expected %s and presented %s", err, want, got)
			}
		})
	}
}

func fingerprint(t *testing.T, authorizedKey string) string {
	t.Helper()
	k, _, _, _, err := gossh.ParseAuthorizedKey([]byte(authorizedKey))
	if err != nil {
		t.Fatal(err)
	}
	return gossh.FingerprintSHA256(k)
}

// Output and exit status come back exactly, whatever the login user and
// its shell (root's is bash; the unprivileged user's is /bin/sh, dash on
// Debian), and through sudo.
func TestRealRun(t *testing.T) {
	r := newRealSSHD(t)
	users := r.logins(t)
	r.start(t)
	tests := []struct {
		name       string
		cmd        string
		opts       []RunOption
		stdin      string
		wantOut    string
		wantErrOut string
		wantCode   int
		wantTrunc  bool
	}{
		{name: "exit 0", cmd: "echo out", wantOut: "out\n"},
		{name: "no trailing newline, both streams", cmd: `printf 'a\nb'; printf 'e\n\nf' >&2`, wantOut: "a\nb", wantErrOut: "e\n\nf"},
		{name: "binary stderr", cmd: `printf '\000\377\n' >&2; exit 255`, wantErrOut: "\x00\xff\n", wantCode: 255},
		{name: "multi-line script", cmd: "set -e\nf() { echo \"$1\"; }\nf one\nfalse\necho never", wantOut: "one\n", wantCode: 1},
		{name: "killed by a signal", cmd: `kill -s KILL $$`, wantCode: 128 + 9},
		{name: "exit 3 with stderr", cmd: "echo out; echo 'it broke' >&2; exit 3", wantOut: "out\n", wantErrOut: "it broke\n", wantCode: 3},
		{name: "stdin", cmd: "tr a-z A-Z", stdin: "hello", wantOut: "HELLO"},
		{name: "output capped", cmd: "head -c 100000 /dev/zero | tr '\\0' x", opts: []RunOption{WithOutputLimit(10)},
			wantOut: "xxxxxxxxxx", wantTrunc: true},
	}
	for _, u := range users {
		t.Run(u.name, func(t *testing.T) {
			u.check(t)
			c := r.dialAs(t, u.user)
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					if u.sudo && tt.name == "killed by a signal" {
						// The login shell running sudo (dash) reports the
						// death itself, "Killed" and 137, with or without Run.
						t.Skip("the signal kills sudo's child, not the login shell")
					}
					opts := tt.opts[:len(tt.opts):len(tt.opts)]
					if tt.stdin != "" {
						opts = append(opts, WithStdin(strings.NewReader(tt.stdin)))
					}
					if u.sudo {
						opts = append(opts, WithSudo())
					}
					res, err := c.Run(testCtx(t), tt.cmd, opts...)
					if string(res.Stdout) != tt.wantOut || string(res.Stderr) != tt.wantErrOut ||
						res.ExitCode != tt.wantCode || res.Truncated != tt.wantTrunc {
						t.Errorf("Run = %+v (stdout %q stderr %q)", res, res.Stdout, res.Stderr)
					}
					var ee *ExitError
					switch {
					case tt.wantCode == 0 && err != nil:
						t.Errorf("err = %v, want nil", err)
					case tt.wantCode != 0 && !errors.As(err, &ee):
						t.Errorf("err = %v, want an *ExitError", err)
					case tt.wantCode != 0 && (ee.Code != tt.wantCode || string(ee.Stderr) != tt.wantErrOut):
						t.Errorf("ExitError = %+v (%v)", ee, err)
					}
				})
			}
		})
	}
}

func TestRealWriteFile(t *testing.T) {
	r := newRealSSHD(t)
	r.start(t)
	c := r.dial(t)
	dir := filepath.Join(r.dir, "etc", "rancher", "k3s") // does not exist yet
	path := filepath.Join(dir, "config.yaml")
	big := make([]byte, 1<<20)
	if _, err := rand.Read(big); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		content []byte
		mode    os.FileMode
	}{
		{[]byte("token: s3cret\n"), 0o600},
		{[]byte("token: s3cret\n"), 0o600}, // idempotent rewrite
		{big, 0o644},
		{[]byte{}, 0o640},
	}
	for i, st := range steps {
		if err := c.WriteFile(testCtx(t), path, st.content, st.mode); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		sum := sha256.Sum256(st.content)
		res, err := c.Run(testCtx(t), Command("sh", "-c", `stat -c %a "$1"; sha256sum < "$1"; ls -A "$2"`, "sh", path, dir))
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(string(res.Stdout)), "\n")
		wantLines := []string{fmt.Sprintf("%o", st.mode.Perm()), hex.EncodeToString(sum[:]) + "  -", "config.yaml"}
		if strings.Join(lines, "\n") != strings.Join(wantLines, "\n") {
			t.Errorf("step %d: remote stat/sha256/ls = %q, want %q", i, lines, wantLines)
		}
	}
	local, err := os.ReadFile(path) // the sshd runs on this machine
	if err != nil || len(local) != 0 {
		t.Fatalf("final content %q, %v", local, err)
	}
}

func TestRealQuoteRoundTrip(t *testing.T) {
	r := newRealSSHD(t)
	r.start(t)
	c := r.dial(t)
	// One command, through the login shell: printf '%s\0' Quote(s1) Quote(s2) ...
	words := make([]string, len(nastyStrings))
	for i, s := range nastyStrings {
		words[i] = Quote(s)
	}
	res, err := c.Run(testCtx(t), `printf '%s\0' `+strings.Join(words, " "))
	if err != nil || len(res.Stderr) != 0 {
		t.Fatalf("Run: %v (stderr %q)", err, res.Stderr)
	}
	got := strings.Split(strings.TrimSuffix(string(res.Stdout), "\x00"), "\x00")
	if len(got) != len(nastyStrings) {
		t.Fatalf("got %d words back, want %d: %q", len(got), len(nastyStrings), got)
	}
	for i, s := range nastyStrings {
		if got[i] != s {
			t.Errorf("Quote(%q) came back as %q", s, got[i])
		}
	}
}

func TestRealKnownHostsLineAcceptedByOpenSSH(t *testing.T) {
	r := newRealSSHD(t)
	r.start(t)
	sshBin, err := exec.LookPath("ssh")
	if err != nil {
		t.Skipf("no ssh client: %v", err)
	}
	run := func(hostKey string) (string, error) {
		kh := filepath.Join(t.TempDir(), "known_hosts")
		if err := os.WriteFile(kh, []byte(KnownHostsLine(r.addr, hostKey)+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(sshBin, "-F", "/dev/null", "-i", r.userKF, "-p", strings.TrimPrefix(r.addr, "127.0.0.1:"),
			"-o", "UserKnownHostsFile="+kh, "-o", "GlobalKnownHostsFile=/dev/null", "-o", "StrictHostKeyChecking=yes",
			"-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes", r.user+"@127.0.0.1", "echo", "ok").CombinedOutput()
		return string(out), err
	}
	if out, err := run(r.hostKey.AuthorizedKey); err != nil || strings.TrimSpace(out) != "ok" {
		t.Fatalf("ssh with KnownHostsLine: %q, %v", out, err)
	}
	if out, err := run(mustKey(t).AuthorizedKey); err == nil {
		t.Fatalf("ssh accepted a known_hosts line for another key: %q", out)
	}
}

// A cancelled Run must leave nothing running on the machine, whoever the
// login user is: OpenSSH refuses "signal" requests on root logins
// ("session signalling requires privilege separation", session.c in
// openssh-portable), so there only a kill sent by other means reaches the
// command. The remote command prints its pid and its child's; the sshd runs
// on this machine, so /proc tells whether they are gone.
func TestRealRunCancelKillsRemoteCommand(t *testing.T) {
	r := newRealSSHD(t)
	users := r.logins(t)
	r.start(t)
	tests := []struct {
		name string
		cmd  string
		opts []RunOption
	}{
		{name: "TERM", cmd: `sleep 30 & echo $$ $!; wait`},
		// With the default grace: TERM, then KILL DefaultKillGrace later,
		// still within the second.
		{name: "TERM ignored", cmd: `trap '' TERM; sleep 30 & echo $$ $!; wait`},
	}
	for _, u := range users {
		t.Run(u.name, func(t *testing.T) {
			u.check(t)
			c := r.dialAs(t, u.user)
			var as []RunOption
			if u.sudo {
				as = append(as, WithSudo())
				if res, err := c.Run(testCtx(t), "id -u", as...); err != nil || string(res.Stdout) != "0\n" {
					t.Fatalf("id -u through sudo = %q, %v", res.Stdout, err)
				}
			}
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					ctx, cancel := context.WithCancel(testCtx(t))
					defer cancel()
					line := newLineWriter()
					var cancelled time.Time
					// From the cancel on, the pids the command printed are
					// watched in /proc while Run stops it.
					type watched struct {
						pids [2]int
						gone [2]time.Time
						ok   [2]bool
					}
					watch := make(chan watched, 1)
					go func() {
						<-line.fired
						cancelled = time.Now()
						cancel()
						var w watched
						_, _ = fmt.Sscan(line.first(), &w.pids[0], &w.pids[1]) // checked against stdout below
						for i, pid := range w.pids {
							if pid > 1 {
								w.gone[i], w.ok[i] = whenGone(pid, cancelled.Add(time.Second))
							}
						}
						watch <- w
					}()
					opts := append(append(tt.opts[:len(tt.opts):len(tt.opts)], as...), WithOutput(line, nil))
					res, err := c.Run(ctx, tt.cmd, opts...)
					returned := time.Now()
					if !errors.Is(err, context.Canceled) {
						t.Fatalf("Run = %v, want context.Canceled", err)
					}
					w := <-watch
					d := returned.Sub(cancelled)
					if d > time.Second {
						t.Errorf("Run returned %v after the cancel, want within 1s", d.Round(time.Millisecond))
					}
					var pids [2]int
					if n, _ := fmt.Sscan(string(res.Stdout), &pids[0], &pids[1]); n != 2 || len(res.Stderr) != 0 || pids != w.pids {
						t.Fatalf("stdout %q, stderr %q: want the two pids %v and nothing else", res.Stdout, res.Stderr, w.pids)
					}
					var gone time.Duration // until the last of them was seen gone
					for i, pid := range pids {
						if !w.ok[i] {
							t.Errorf("remote %s (pid %d) still alive 1s after the cancel",
								[]string{"shell", "sleep"}[i], pid)
						}
						gone = max(gone, w.gone[i].Sub(cancelled))
					}
					t.Logf("after the cancel: remote shell and sleep gone in %v, Run returned in %v",
						gone.Round(time.Millisecond), d.Round(time.Millisecond))
					// The connection survives the cancelled session.
					if res, err := c.Run(testCtx(t), "echo ok"); err != nil || string(res.Stdout) != "ok\n" {
						t.Fatalf("Run after cancel = %+v, %v", res, err)
					}
				})
			}
		})
	}
}

// processGone polls /proc until pid is gone or a zombie (the container's
// init may not reap orphans), or until deadline.
func processGone(pid int, deadline time.Time) bool {
	_, ok := whenGone(pid, deadline)
	return ok
}

// whenGone is processGone that also tells when pid was first seen gone
// (within the 10 ms polling interval).
func whenGone(pid int, deadline time.Time) (time.Time, bool) {
	for {
		now := time.Now()
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return now, true
		}
		// The state follows the command name in parentheses.
		if i := strings.LastIndexByte(string(stat), ')'); i >= 0 && strings.HasPrefix(string(stat[i:]), ") Z") {
			return now, true
		}
		if now.After(deadline) {
			return now, false
		}
		time.Sleep(10 * time.Millisecond) // a real process on this machine: no clock to inject
	}
}

// lineWriter closes fired once a whole line was written.
type lineWriter struct {
	once  sync.Once
	fired chan struct{}
	mu    sync.Mutex
	buf   []byte // up to the first newline
}

func newLineWriter() *lineWriter { return &lineWriter{fired: make(chan struct{})} }

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	select {
	case <-w.fired:
		return len(p), nil
	default:
	}
	if i := bytes.IndexByte(p, '\n'); i >= 0 {
		w.buf = append(w.buf, p[:i]...)
		w.once.Do(func() { close(w.fired) })
	} else {
		w.buf = append(w.buf, p...)
	}
	return len(p), nil
}

// first returns the first line, once fired is closed.
func (w *lineWriter) first() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return string(w.buf)
}
