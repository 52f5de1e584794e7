//go:build unix

package sshd

import (
	"bufio"
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/crypto/ssh"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// guard bounds a wait that must not hang the test run.
const guard = 10 * time.Second

func newSigner(t testing.TB) ssh.Signer {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

type fixture struct {
	srv  *Server
	host ssh.Signer
	user ssh.Signer
	dir  string
}

func start(t *testing.T, mutate func(*Config)) *fixture {
	t.Helper()
	f := &fixture{host: newSigner(t), user: newSigner(t), dir: t.TempDir()}
	cfg := Config{HostKey: f.host, AuthorizedKeys: []ssh.PublicKey{f.user.PublicKey()}, Dir: f.dir}
	if mutate != nil {
		mutate(&cfg)
	}
	srv, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.srv = srv
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return f
}

func (f *fixture) clientConfig(signer ssh.Signer) *ssh.ClientConfig {
	return &ssh.ClientConfig{
		User:            "ubuntu",
		Auth:            []ssh.AuthMethod{ssh.PublicKeys(signer)},
		HostKeyCallback: ssh.FixedHostKey(f.host.PublicKey()),
		Timeout:         guard,
	}
}

func (f *fixture) dial(t *testing.T) *ssh.Client {
	t.Helper()
	c, err := ssh.Dial("tcp", f.srv.Addr(), f.clientConfig(f.user))
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() }) // may already be closed by the test
	return c
}

// run executes cmd in a new session and returns stdout, stderr and the
// session's Wait error.
func run(t *testing.T, c *ssh.Client, cmd string, stdin string, env ...string) (string, string, error) {
	t.Helper()
	s, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := 0; i+1 < len(env); i += 2 {
		if err := s.Setenv(env[i], env[i+1]); err != nil {
			t.Fatalf("Setenv: %v", err)
		}
	}
	var out, errb bytes.Buffer
	s.Stdout, s.Stderr, s.Stdin = &out, &errb, strings.NewReader(stdin)
	err = s.Run(cmd)
	return out.String(), errb.String(), err
}

func TestStartValidatesAndListensOnLoopback(t *testing.T) {
	if _, err := Start(Config{Dir: t.TempDir()}); err == nil {
		t.Error("Start without HostKey succeeded")
	}
	if _, err := Start(Config{HostKey: newSigner(t)}); err == nil {
		t.Error("Start without Dir succeeded")
	}
	f := start(t, nil)
	host, port, err := net.SplitHostPort(f.srv.Addr())
	if err != nil || host != "127.0.0.1" || port == "0" {
		t.Fatalf("Addr() = %q (%v), want 127.0.0.1:<port>", f.srv.Addr(), err)
	}
	if f.srv.Port() == 0 {
		t.Fatal("Port() = 0")
	}
}

func TestExec(t *testing.T) {
	f := start(t, func(c *Config) { c.Env = []string{"FROM_CONFIG=cfg"} })
	c := f.dial(t)
	tests := []struct {
		name, cmd, stdin    string
		env                 []string
		wantOut, wantErrOut string
		wantCode            int
	}{
		{name: "stdout", cmd: "echo hello", wantOut: "hello\n"},
		{name: "stderr and code", cmd: "echo oops >&2; exit 3", wantErrOut: "oops\n", wantCode: 3},
		{name: "stdin", cmd: "tr a-z A-Z", stdin: "shout", wantOut: "SHOUT"},
		{name: "dir and home", cmd: `pwd; echo "$HOME"`, wantOut: f.dir + "\n" + f.dir + "\n"},
		{name: "env", cmd: `echo "$FROM_CONFIG $FROM_CLIENT"`, env: []string{"FROM_CLIENT", "cli"}, wantOut: "cfg cli\n"},
		{name: "large output", cmd: "head -c 1000000 /dev/zero", wantOut: strings.Repeat("\x00", 1000000)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, errOut, err := run(t, c, tt.cmd, tt.stdin, tt.env...)
			code := 0
			var ee *ssh.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitStatus()
			} else if err != nil {
				t.Fatalf("run: %v", err)
			}
			if out != tt.wantOut || errOut != tt.wantErrOut || code != tt.wantCode {
				t.Errorf("got stdout %.40q stderr %q code %d; want %.40q %q %d", out, errOut, code, tt.wantOut, tt.wantErrOut, tt.wantCode)
			}
		})
	}
}

// startFIFO runs cmd (which must open "$FIFO" for writing as fd 3 and then
// print "ready") and returns the session and a channel that is closed when
// every process holding the FIFO has died.
func startFIFO(t *testing.T, f *fixture, c *ssh.Client, cmd string) (*ssh.Session, <-chan struct{}) {
	t.Helper()
	fifo := filepath.Join(f.dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := s.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Setenv("FIFO", fifo); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(cmd); err != nil {
		t.Fatal(err)
	}
	r, err := os.Open(fifo) // returns once the command has opened it
	if err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if line != "ready\n" {
		t.Fatalf("first line %q, %v", line, err)
	}
	dead := make(chan struct{})
	go func() {
		defer close(dead)
		defer r.Close()
		_, _ = io.Copy(io.Discard, r) // EOF once all writers are gone
	}()
	t.Cleanup(func() { <-dead })
	return s, dead
}

func waitDead(t *testing.T, dead <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-dead:
	case <-time.After(guard):
		t.Fatalf("%s: processes still alive after %v", what, guard)
	}
}

func TestSignalReachesProcessGroup(t *testing.T) {
	f := start(t, nil)
	c := f.dial(t)
	// The shell waits for a child sleep: TERM must reach both.
	s, dead := startFIFO(t, f, c, `exec 3>"$FIFO"; echo ready; sleep 30; echo survived`)
	payload := ssh.Marshal(struct{ Signal string }{"TERM"})
	if ok, err := s.SendRequest("signal", true, payload); !ok || err != nil {
		t.Fatalf("signal: ok=%v err=%v", ok, err)
	}
	err := s.Wait()
	var ee *ssh.ExitError
	if !errors.As(err, &ee) || ee.Signal() != "TERM" {
		t.Fatalf("Wait = %v, want exit-signal TERM", err)
	}
	waitDead(t, dead, "after TERM")
}

func TestChannelCloseKillsCommand(t *testing.T) {
	f := start(t, nil)
	c := f.dial(t)
	s, dead := startFIFO(t, f, c, `exec 3>"$FIFO"; echo ready; sleep 30`)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	waitDead(t, dead, "after channel close")
}

func TestCloseKillsCommandsAndConnections(t *testing.T) {
	f := start(t, nil)
	c := f.dial(t)
	_, dead := startFIFO(t, f, c, `exec 3>"$FIFO"; echo ready; sleep 30`)
	begin := time.Now()
	if err := f.srv.Close(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(begin); d > 5*time.Second {
		t.Errorf("Close took %v: it waited for the command instead of killing it", d)
	}
	waitDead(t, dead, "after server Close")
	if err := c.Wait(); err == nil {
		t.Log("client connection ended cleanly")
	}
	if _, err := net.Dial("tcp", f.srv.Addr()); err == nil {
		t.Fatal("listener still accepts after Close")
	}
	if err := f.srv.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestRequestsAnsweredPolitely(t *testing.T) {
	f := start(t, nil)
	c := f.dial(t)
	if ok, _, err := c.SendRequest("keepalive@openssh.com", true, nil); err != nil || !ok {
		t.Errorf("keepalive = %v, %v; want true", ok, err)
	}
	if ok, _, err := c.SendRequest("tcpip-forward", true, ssh.Marshal(struct {
		Addr string
		Port uint32
	}{"127.0.0.1", 0})); err != nil || ok {
		t.Errorf("tcpip-forward = %v, %v; want refused", ok, err)
	}
	if _, err := c.Dial("tcp", "127.0.0.1:1"); err == nil {
		t.Error("direct-tcpip channel accepted")
	}
	s, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.RequestPty("xterm", 24, 80, nil); err == nil {
		t.Error("pty-req accepted")
	}
	if err := s.Shell(); err == nil {
		t.Error("shell accepted")
	}
	if err := s.Signal(ssh.SIGTERM); err != nil {
		t.Errorf("signal with nothing running: %v (want no transport error)", err)
	}
	// The session is still usable after the refusals.
	var out bytes.Buffer
	s.Stdout = &out
	if err := s.Run("echo still-here"); err != nil || out.String() != "still-here\n" {
		t.Fatalf("exec after refusals: %q, %v", out.String(), err)
	}
}

func TestAuthorizedKeys(t *testing.T) {
	f := start(t, nil)
	other := newSigner(t)
	if _, err := ssh.Dial("tcp", f.srv.Addr(), f.clientConfig(other)); err == nil {
		t.Fatal("unknown key accepted")
	}
	f.srv.SetAuthorizedKeys([]ssh.PublicKey{other.PublicKey()})
	c, err := ssh.Dial("tcp", f.srv.Addr(), f.clientConfig(other))
	if err != nil {
		t.Fatalf("newly authorized key refused: %v", err)
	}
	_ = c.Close()
	if _, err := ssh.Dial("tcp", f.srv.Addr(), f.clientConfig(f.user)); err == nil {
		t.Fatal("key removed by SetAuthorizedKeys still accepted")
	}
}

func TestFaultRejectAuth(t *testing.T) {
	f := start(t, nil)
	f.srv.SetFaults(Faults{RejectAuth: true})
	if _, err := ssh.Dial("tcp", f.srv.Addr(), f.clientConfig(f.user)); err == nil {
		t.Fatal("RejectAuth: key accepted")
	}
	f.srv.SetFaults(Faults{})
	c := f.dial(t)
	_ = c.Close()
}

// readBanner reads the first bytes the server sends, waiting at most d.
func readBanner(t *testing.T, addr string, d time.Duration) (string, error) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.SetReadDeadline(time.Now().Add(d)); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	return line, err
}

func TestFaultHandshakeHangAndBannerDelay(t *testing.T) {
	f := start(t, nil)
	f.srv.SetFaults(Faults{HandshakeHang: true})
	// A real network timeout is the thing under test here.
	if line, err := readBanner(t, f.srv.Addr(), 300*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) || line != "" {
		t.Fatalf("HandshakeHang: read %q, %v; want nothing until the deadline", line, err)
	}

	const delay = 200 * time.Millisecond
	f.srv.SetFaults(Faults{BannerDelay: delay})
	begin := time.Now()
	line, err := readBanner(t, f.srv.Addr(), guard)
	if err != nil || !strings.HasPrefix(line, "SSH-2.0-") {
		t.Fatalf("BannerDelay: read %q, %v", line, err)
	}
	if waited := time.Since(begin); waited < delay {
		t.Fatalf("banner after %v, want at least %v", waited, delay)
	}
}

func TestFaultDropMidCommand(t *testing.T) {
	f := start(t, nil)
	c := f.dial(t)
	f.srv.SetFaults(Faults{DropMidCommand: true})
	done := make(chan error, 1)
	s, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	go func() { done <- s.Run("sleep 30") }()
	select {
	case err := <-done:
		var ee *ssh.ExitError
		if err == nil || errors.As(err, &ee) {
			t.Fatalf("dropped command returned %v, want a connection error", err)
		}
	case <-time.After(guard):
		t.Fatal("client did not notice the dropped connection")
	}
	if err := c.Wait(); err == nil {
		t.Log("connection closed cleanly")
	}
}

func TestFaultStallHoldsThenResumes(t *testing.T) {
	f := start(t, nil)
	c := f.dial(t)
	f.srv.SetFaults(Faults{Stall: true})
	reply := make(chan error, 1)
	go func() {
		_, _, err := c.SendRequest("keepalive@openssh.com", true, nil)
		reply <- err
	}()
	// A real timeout is the thing under test: a stalled peer stays silent.
	select {
	case err := <-reply:
		t.Fatalf("stalled server answered (%v)", err)
	case <-time.After(200 * time.Millisecond):
	}
	f.srv.SetFaults(Faults{})
	select {
	case err := <-reply:
		if err != nil {
			t.Fatalf("keepalive after resume: %v", err)
		}
	case <-time.After(guard):
		t.Fatal("server did not resume after the stall was cleared")
	}
	if out, _, err := run(t, c, "echo alive", ""); err != nil || out != "alive\n" {
		t.Fatalf("after resume: %q, %v", out, err)
	}
}

func TestStallDoesNotBlockClose(t *testing.T) {
	f := start(t, nil)
	c := f.dial(t)
	f.srv.SetFaults(Faults{Stall: true})
	go func() { _, _, _ = c.SendRequest("keepalive@openssh.com", true, nil) }()
	if err := f.srv.Close(); err != nil {
		t.Fatal(err)
	}
	_ = c.Wait() // ends because Close closed the connection
}

// A command that exits at once must still have its exec acknowledged
// before its exit status and channel close.
func TestExecQuickCommandsAreAcknowledged(t *testing.T) {
	f := start(t, nil)
	c := f.dial(t)
	errs := make(chan error, 8)
	for range 8 {
		go func() {
			var err error
			for i := 0; i < 25 && err == nil; i++ {
				var s *ssh.Session
				if s, err = c.NewSession(); err == nil {
					err = s.Run("true")
					_ = s.Close()
				}
			}
			errs <- err
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

func TestFaultIgnoreSignals(t *testing.T) {
	f := start(t, nil)
	c := f.dial(t)
	f.srv.SetFaults(Faults{IgnoreSignals: true})
	s, dead := startFIFO(t, f, c, `exec 3>"$FIFO"; echo ready; sleep 30`)
	payload := ssh.Marshal(struct{ Signal string }{"KILL"})
	if ok, err := s.SendRequest("signal", true, payload); ok || err != nil {
		t.Fatalf("signal with IgnoreSignals: ok=%v err=%v, want refused", ok, err)
	}
	select {
	case <-dead:
		t.Fatal("the ignored KILL was delivered")
	default:
	}
	// Closing the channel is what ends the command.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	waitDead(t, dead, "after channel close")
}
