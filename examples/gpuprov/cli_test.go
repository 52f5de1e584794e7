package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/org/gpuprov/journal/postgres/pgtest"
)

// cliBin is the gpuprov binary built by TestMain.
var cliBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "gpuprov-cli-test-*")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	cliBin = filepath.Join(dir, "gpuprov")
	build := exec.Command("go", "build", "-o", cliBin, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building the CLI:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := pgtest.Main(m) // a private PostgreSQL for the shared-journal test
	os.RemoveAll(dir)
	os.Exit(code)
}

// cliEnv is one user's environment: HOME and the XDG directories in a temp
// folder.
type cliEnv struct {
	t    *testing.T
	home string
}

func newCLIEnv(t *testing.T) *cliEnv {
	return &cliEnv{t: t, home: t.TempDir()}
}

func (c *cliEnv) configDir() string  { return filepath.Join(c.home, "config", "gpuprov") }
func (c *cliEnv) configPath() string { return filepath.Join(c.configDir(), "config.toml") }
func (c *cliEnv) stateDir() string   { return filepath.Join(c.home, "state", "gpuprov") }

func (c *cliEnv) environ() []string {
	var env []string
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); k != "HOME" && !strings.HasPrefix(k, "XDG_") {
			env = append(env, kv)
		}
	}
	return append(env, "HOME="+c.home,
		"XDG_CONFIG_HOME="+filepath.Join(c.home, "config"),
		"XDG_STATE_HOME="+filepath.Join(c.home, "state"))
}

func (c *cliEnv) writeConfig(s string) {
	c.t.Helper()
	if err := os.MkdirAll(c.configDir(), 0o700); err != nil {
		c.t.Fatal(err)
	}
	if err := os.WriteFile(c.configPath(), []byte(s), 0o600); err != nil {
		c.t.Fatal(err)
	}
}

func (c *cliEnv) command(args ...string) *exec.Cmd {
	cmd := exec.Command(cliBin, args...)
	cmd.Env = c.environ()
	cmd.Dir = c.home
	return cmd
}

type result struct {
	code           int
	stdout, stderr string
}

// run runs the CLI to completion (bounded) and returns its exit code and
// output.
func (c *cliEnv) run(args ...string) result {
	c.t.Helper()
	return c.runCmd(c.command(args...), args)
}

func (c *cliEnv) runCmd(cmd *exec.Cmd, args []string) result {
	c.t.Helper()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(90 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		c.t.Fatalf("gpuprov %s: still running after 90s\n%s\n%s", strings.Join(args, " "), out.String(), errb.String())
	}
	r := result{stdout: out.String(), stderr: errb.String()}
	var xe *exec.ExitError
	switch {
	case errors.As(err, &xe):
		r.code = xe.ExitCode()
	case err != nil:
		c.t.Fatal(err)
	}
	return r
}

// ok runs the CLI and fails the test unless it exits 0.
func (c *cliEnv) ok(args ...string) result {
	c.t.Helper()
	r := c.run(args...)
	if r.code != 0 {
		c.t.Fatalf("gpuprov %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r
}

// simServer is `gpuprov sim serve` running as its own process.
type simServer struct {
	url, admin string
	config     string // the provider tables it printed
	cmd        *exec.Cmd
	done       chan error
	once       sync.Once
}

// startSim starts `gpuprov sim serve` on a free loopback port with a state
// file and the given simulator options, and waits until it printed its config.
func startSim(t *testing.T, c *cliEnv, simConfig string) *simServer {
	t.Helper()
	return startSimAt(t, c, t.TempDir(), simConfig)
}

// startSimAt is startSim with the state kept in dir.
func startSimAt(t *testing.T, c *cliEnv, dir, simConfig string) *simServer {
	t.Helper()
	args := []string{"sim", "serve", "--addr", "127.0.0.1:0", "--state", filepath.Join(dir, "state.json")}
	if simConfig != "" {
		path := filepath.Join(dir, "sim.toml")
		if err := os.WriteFile(path, []byte(simConfig), 0o600); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--config", path)
	}
	cmd := c.command(args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &simServer{cmd: cmd, done: make(chan error, 1)}
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		s.done <- cmd.Wait()
	}()
	t.Cleanup(s.stop)
	// Keep draining, from the moment this returns or fails, so that the
	// server never blocks on stdout and stop's wait ends.
	defer func() {
		go func() {
			for range lines {
			}
		}()
	}()
	var cfg strings.Builder
	tables := 0
	timeout := time.After(20 * time.Second)
	for tables < 2 {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("sim serve exited early: %s", stderr.String())
			}
			cfg.WriteString(l + "\n")
			if v, ok := strings.CutPrefix(l, "# endpoint: "); ok {
				s.url = v
			}
			if v, ok := strings.CutPrefix(l, "# admin token: "); ok {
				s.admin = v
			}
			if strings.HasPrefix(l, "poll_interval") {
				tables++
			}
		case <-timeout:
			t.Fatalf("sim serve printed no config in 20s: %s", stderr.String())
		}
	}
	s.config = cfg.String()
	return s
}

// stop stops the server with SIGTERM, as a user's Ctrl-C would, and waits.
func (s *simServer) stop() {
	s.once.Do(func() {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.done:
		case <-time.After(10 * time.Second):
			_ = s.cmd.Process.Kill()
			<-s.done
		}
	})
}

// simInstance is an instance as the sim's admin API lists it.
type simInstance struct {
	ID     string            `json:"id"`
	Status string            `json:"status"`
	Labels map[string]string `json:"labels"`
	DiskGB int               `json:"disk_gb"`
	Zone   string            `json:"zone"`
	// PlacementGroup is the compact cluster's group the instance is in.
	PlacementGroup string `json:"placement_group"`
	// ReservationID is the reservation it was launched into.
	ReservationID string `json:"reservation_id"`
}

func (s *simServer) adminGet(t *testing.T, path string, into any) {
	t.Helper()
	s.adminDo(t, http.MethodGet, path, nil, into)
}

// adminPut sends body as JSON to the admin API (faults, for instance).
func (s *simServer) adminPut(t *testing.T, path string, body any) {
	t.Helper()
	var echo json.RawMessage
	s.adminDo(t, http.MethodPut, path, body, &echo)
}

func (s *simServer) adminDo(t *testing.T, method, path string, body, into any) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, s.url+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+s.admin)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s %s: %s: %s", method, path, resp.Status, b)
	}
	if err := json.Unmarshal(b, into); err != nil {
		t.Fatalf("%s %s: %v: %s", method, path, err, b)
	}
}

// live returns the instances of every cloud that are not terminated.
func (s *simServer) live(t *testing.T) []simInstance {
	t.Helper()
	var out []simInstance
	for _, c := range []string{"sim-a", "sim-b"} {
		var insts struct {
			Instances []simInstance `json:"instances"`
		}
		s.adminGet(t, "/admin/clouds/"+c+"/instances", &insts)
		for _, in := range insts.Instances {
			if in.Status != "terminated" {
				out = append(out, in)
			}
		}
	}
	return out
}

// sideResources counts the firewalls and SSH keys of every cloud.
func (s *simServer) sideResources(t *testing.T) int {
	t.Helper()
	n := 0
	for _, c := range []string{"sim-a", "sim-b"} {
		var res struct {
			Firewalls []json.RawMessage `json:"firewalls"`
			SSHKeys   []json.RawMessage `json:"ssh_keys"`
		}
		s.adminGet(t, "/admin/clouds/"+c+"/resources", &res)
		n += len(res.Firewalls) + len(res.SSHKeys)
	}
	return n
}

// killUpWhen runs `gpuprov up args...` until the journal's VMs (list -o
// json) satisfy when, then kills it with SIGKILL, as a crash would, and
// returns what it printed. It fails the test when that does not happen
// within 20 seconds.
func (c *cliEnv) killUpWhen(t *testing.T, when func([]listedVM) bool, args ...string) string {
	t.Helper()
	up := c.command(append([]string{"up"}, args...)...)
	var out strings.Builder
	up.Stdout, up.Stderr = &out, &out
	if err := up.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- up.Wait() }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		vms := listJSON(t, c)
		if when(vms) {
			break
		}
		if time.Now().After(deadline) {
			_ = up.Process.Kill()
			<-waited
			t.Fatalf("up %v: the journal never got there: %+v\nup printed:\n%s", args, vms, out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := up.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-waited
	return out.String()
}
