package ssh

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	gossh "golang.org/x/crypto/ssh"

	"github.com/org/gpuprov/internal/sshd"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// guard bounds waits that must not hang the test run; tests that check
// promptness assert much smaller durations.
const guard = 20 * time.Second

func mustKey(t testing.TB) KeyPair {
	t.Helper()
	kp, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	return kp
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	t.Cleanup(cancel)
	return ctx
}

// noSleep is a WaitReady sleep hook that retries at once.
func noSleep(ctx context.Context, _ time.Duration) error { return ctx.Err() }

func closeClient(t *testing.T, c *Client) {
	t.Helper()
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
}

// --- a real OpenSSH sshd on loopback -------------------------------------

// realSSHD is an OpenSSH server configured in a temp dir, run as a child.
type realSSHD struct {
	dir     string
	port    int
	addr    string
	user    string
	hostKey KeyPair
	userKey KeyPair
	userKF  string // the user's private key file, for the ssh client
	config  string
}

// newRealSSHD prepares, but does not start, a real sshd. Without
// /usr/sbin/sshd the test is skipped, or fails when $CI is set. With
// $SSHD_LOG set, sshd logs at DEBUG3 and the log is printed at cleanup.
func newRealSSHD(t *testing.T) *realSSHD {
	t.Helper()
	const bin = "/usr/sbin/sshd"
	if _, err := os.Stat(bin); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("real sshd tests need %s (apt-get install openssh-server): %v", bin, err)
		}
		t.Skipf("skipping: %s not installed (apt-get install openssh-server): %v", bin, err)
	}
	u, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	r := &realSSHD{dir: t.TempDir(), user: u.Username, userKey: mustKey(t)}
	r.port = freePort(t)
	r.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(r.port))
	r.userKF = filepath.Join(r.dir, "id_ed25519")
	if err := WritePrivateKey(r.userKF, r.userKey); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(r.dir, "authorized_keys"), []byte(r.userKey.AuthorizedKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r.setHostKey(t, mustKey(t))
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
		t.Fatalf("privilege separation dir: %v", err)
	}
	return r
}

// setHostKey writes a new host key and config; it takes effect at start.
func (r *realSSHD) setHostKey(t *testing.T, kp KeyPair) {
	t.Helper()
	r.hostKey = kp
	hk := filepath.Join(r.dir, fmt.Sprintf("host_%d", time.Now().UnixNano()))
	if err := WritePrivateKey(hk, kp); err != nil {
		t.Fatal(err)
	}
	r.config = filepath.Join(r.dir, "sshd_config")
	logLevel := "INFO"
	if os.Getenv("SSHD_LOG") != "" {
		logLevel = "DEBUG3"
	}
	cfg := strings.Join([]string{
		"Port " + strconv.Itoa(r.port),
		"ListenAddress 127.0.0.1",
		"HostKey " + hk,
		"AuthorizedKeysFile " + filepath.Join(r.dir, "authorized_keys"),
		"PasswordAuthentication no",
		"KbdInteractiveAuthentication no",
		"UsePAM no",
		"StrictModes no",
		"PidFile " + filepath.Join(r.dir, "sshd.pid"),
		"LogLevel " + logLevel,
	}, "\n") + "\n"
	if err := os.WriteFile(r.config, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
}

// start runs sshd and returns once it logs that it is listening; stop kills
// it (and runs at cleanup anyway).
func (r *realSSHD) start(t *testing.T) (stop func()) {
	t.Helper()
	cmd := exec.Command("/usr/sbin/sshd", "-f", r.config, "-D", "-e")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start sshd: %v", err)
	}
	var once sync.Once
	var mu sync.Mutex
	var logs []string
	drained := make(chan struct{})
	stop = func() {
		once.Do(func() {
			_ = cmd.Process.Kill() // an sshd that already died is fine
			<-drained
			_ = cmd.Wait() // "signal: killed" is the expected outcome
		})
	}
	t.Cleanup(func() {
		stop()
		if os.Getenv("SSHD_LOG") != "" { // set it to see sshd's debug log
			mu.Lock()
			defer mu.Unlock()
			t.Log(strings.Join(logs, "\n"))
		}
	})

	listening := make(chan struct{})
	go func() {
		defer close(drained)
		sc := bufio.NewScanner(stderr)
		ready := false
		for sc.Scan() {
			line := sc.Text()
			mu.Lock()
			logs = append(logs, line)
			mu.Unlock()
			if !ready && strings.Contains(line, "Server listening on") {
				ready = true
				close(listening)
			}
		}
	}()
	select {
	case <-listening:
		return stop
	case <-drained:
	case <-time.After(guard):
	}
	mu.Lock()
	defer mu.Unlock()
	t.Fatalf("sshd did not start listening:\n%s", strings.Join(logs, "\n"))
	return nil
}

func (r *realSSHD) cfg(t *testing.T, policy HostKeyPolicy) Config {
	t.Helper()
	return Config{Addr: r.addr, User: r.user, Signer: r.userKey.Signer, HostKey: policy, HandshakeTimeout: 5 * time.Second}
}

func (r *realSSHD) fixed(t *testing.T) HostKeyPolicy {
	t.Helper()
	p, err := FixedHostKey(r.hostKey.AuthorizedKey)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// dial starts nothing: it connects to a running sshd with the pinned key.
func (r *realSSHD) dial(t *testing.T) *Client {
	t.Helper()
	c, err := Dial(testCtx(t), r.cfg(t, r.fixed(t)))
	if err != nil {
		t.Fatalf("dial real sshd: %v", err)
	}
	closeClient(t, c)
	return c
}

// login is a user the real sshd lets in; check skips (or, under $CI, fails)
// the subtest when the user cannot be had on this machine.
type login struct {
	name, user string
	sudo       bool // run commands WithSudo
	check      func(t *testing.T)
}

// unprivilegedUser is the account the real-sshd tests create, when run as
// root, to log in as a user that is not root.
const unprivilegedUser = "gpuprovtest"

// logins returns root, an unprivileged user, and that user again running
// its commands through sudo. Running as root, it creates the unprivileged
// user (idempotently, with /bin/sh as its shell, which is not bash on
// Debian), makes the authorized keys readable by it and, when sudo is
// installed, lets it use sudo without a password until the test ends;
// running as another user, that user is the unprivileged one and the
// others are skipped. Call it before start.
func (r *realSSHD) logins(t *testing.T) []login {
	t.Helper()
	ok := func(*testing.T) {}
	unavailable := func(why string) func(*testing.T) {
		return func(t *testing.T) {
			t.Helper()
			if os.Getenv("CI") != "" {
				t.Fatalf("under $CI this must run: %s", why)
			}
			t.Skipf("skipping: %s", why)
		}
	}
	if os.Geteuid() != 0 {
		return []login{
			{name: "root", check: unavailable("logging in as root needs the tests to run as root")},
			{name: "unprivileged", user: r.user, check: ok},
			{name: "sudo", check: unavailable("granting sudo needs the tests to run as root")},
		}
	}
	users := []login{{name: "root", user: r.user, check: ok}}
	if err := ensureUser(unprivilegedUser); err != nil {
		return append(users, login{name: "unprivileged", check: unavailable(err.Error())},
			login{name: "sudo", check: unavailable(err.Error())})
	}
	// sshd reads AuthorizedKeysFile as the user.
	for _, p := range []string{filepath.Dir(r.dir), r.dir} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(r.dir, "authorized_keys"), 0o644); err != nil {
		t.Fatal(err)
	}
	users = append(users, login{name: "unprivileged", user: unprivilegedUser, check: ok})
	sudo := login{name: "sudo", user: unprivilegedUser, sudo: true, check: ok}
	if _, err := os.Stat("/etc/sudoers.d"); err != nil {
		// Not required by the CI machine, which has no sudo.
		sudo.check = func(t *testing.T) { t.Skipf("skipping: sudo is not installed: %v", err) }
		return append(users, sudo)
	}
	// A file of its own: another test binary may grant and revoke too.
	// (sudo skips names with a dot in /etc/sudoers.d.)
	grant := filepath.Join("/etc/sudoers.d", fmt.Sprintf("%s_%d_%d", unprivilegedUser, os.Getpid(), time.Now().UnixNano()))
	if err := os.WriteFile(grant, []byte(unprivilegedUser+" ALL=(root) NOPASSWD: ALL\n"), 0o440); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(grant) }) // gone already is fine
	return append(users, sudo)
}

// ensureUser creates a local user with a home and /bin/sh as its shell,
// unless it exists. Its password is "*": no password login, but not
// locked, which sshd without PAM would refuse.
func ensureUser(name string) error {
	if _, err := user.Lookup(name); err == nil {
		return nil
	}
	useradd, err := exec.LookPath("useradd")
	if err != nil {
		return fmt.Errorf("cannot create user %s: %w", name, err)
	}
	out, err := exec.Command(useradd, "--create-home", "--shell", "/bin/sh", "--password", "*", name).CombinedOutput()
	if _, lookErr := user.Lookup(name); lookErr != nil { // another test run may have created it meanwhile
		return fmt.Errorf("useradd %s: %v: %s", name, err, out)
	}
	return nil
}

func (r *realSSHD) dialAs(t *testing.T, user string) *Client {
	t.Helper()
	cfg := r.cfg(t, r.fixed(t))
	cfg.User = user
	c, err := Dial(testCtx(t), cfg)
	if err != nil {
		t.Fatalf("dial real sshd as %s: %v", user, err)
	}
	closeClient(t, c)
	return c
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// --- the in-process server -------------------------------------------------

type fakeVM struct {
	srv     *sshd.Server
	hostKey KeyPair
	userKey KeyPair
	dir     string
}

func newFakeVM(t *testing.T, env ...string) *fakeVM {
	t.Helper()
	vm := &fakeVM{hostKey: mustKey(t), userKey: mustKey(t), dir: t.TempDir()}
	srv, err := sshd.Start(sshd.Config{
		HostKey:        vm.hostKey.Signer,
		AuthorizedKeys: []gossh.PublicKey{vm.userKey.Signer.PublicKey()},
		Dir:            vm.dir,
		Env:            env,
	})
	if err != nil {
		t.Fatal(err)
	}
	vm.srv = srv
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Errorf("sshd Close: %v", err)
		}
	})
	return vm
}

func (vm *fakeVM) config(t *testing.T) Config {
	t.Helper()
	p, err := FixedHostKey(vm.hostKey.AuthorizedKey)
	if err != nil {
		t.Fatal(err)
	}
	return Config{Addr: vm.srv.Addr(), User: "ubuntu", Signer: vm.userKey.Signer, HostKey: p}
}

func (vm *fakeVM) dial(t *testing.T, mutate func(*Config)) *Client {
	t.Helper()
	cfg := vm.config(t)
	if mutate != nil {
		mutate(&cfg)
	}
	c, err := Dial(testCtx(t), cfg)
	if err != nil {
		t.Fatalf("dial fake VM: %v", err)
	}
	closeClient(t, c)
	return c
}

// signalWriter closes fired at the first write.
type signalWriter struct {
	once  sync.Once
	fired chan struct{}
}

func newSignalWriter() *signalWriter { return &signalWriter{fired: make(chan struct{})} }

func (w *signalWriter) Write(p []byte) (int, error) {
	w.once.Do(func() { close(w.fired) })
	return len(p), nil
}
