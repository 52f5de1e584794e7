package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/org/gpuprov/provider/sim/simserver"
)

func config(t *testing.T, srv *simserver.Server) Config {
	return Config{State: t.TempDir(), SimURL: srv.URL(), Cloud: "sim-a", APIKey: srv.APIKey("sim-a"), VMs: 5}
}

// fastSim is a sim whose machines boot in 300ms and go in 100ms, so that a
// test waits for what it asserts, not for the default timings.
func fastSim(t *testing.T, opts ...simserver.Option) *simserver.Server {
	fast := simserver.WithTiming(simserver.Timing{
		BootTime: simserver.Duration(300 * time.Millisecond), DeleteTime: simserver.Duration(100 * time.Millisecond)})
	return simserver.NewServer(t, append(opts, fast)...)
}

// The whole run on the public in-process sim: five VMs ready, a command
// run on each over SSH, health checked, all deleted, nothing left.
func TestRunOnTheSim(t *testing.T) {
	t.Parallel()
	srv := simserver.NewServer(t)
	var out bytes.Buffer
	if err := Run(context.Background(), config(t, srv), &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for i := range 5 {
		name := fmt.Sprintf("job-%d", i)
		for _, want := range []string{name + " ready on sim-a", "running on", name + " health: healthy", name + " deleted"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("output lacks %q:\n%s", want, out.String())
			}
		}
	}
	if left := running(t, srv); len(left) != 0 {
		t.Fatalf("instances left on the sim: %v", left)
	}
}

// The scheduler as a process, SIGKILLed while its launches are under way;
// the next run recovers in a new process, and in the end nothing is leaked
// and no VM has two instances.
func TestKilledRunIsRecovered(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds and runs the scheduler binary")
	}
	srv := simserver.NewServer(t, simserver.WithTiming(simserver.Timing{BootTime: simserver.Duration(2 * time.Second)}))
	cfg := config(t, srv)
	cmd := command(t, cfg, "-n", "5", "-hold")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Kill it once all five machines exist and boot (a boot takes 2s).
	deadline := time.Now().Add(time.Minute)
	for len(running(t, srv)) < 5 {
		if time.Now().After(deadline) {
			t.Fatal("the scheduler never created its five machines")
		}
		time.Sleep(20 * time.Millisecond) // polling another process, not waiting out time
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()

	var out bytes.Buffer
	if err := Run(context.Background(), cfg, &out); err != nil {
		t.Fatalf("run after the kill: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "recovered job-") {
		t.Errorf("the second run recovered nothing:\n%s", out.String())
	}
	if left := running(t, srv); len(left) != 0 {
		t.Fatalf("instances left after the second run deleted everything: %v\n%s", left, out.String())
	}
	// Every job got exactly one machine over both runs: no duplicate.
	all, err := srv.Instances("sim-a")
	if err != nil {
		t.Fatal(err)
	}
	per := map[string]int{}
	for _, in := range all {
		per[in.Labels["gpuprov"]]++
	}
	for vm, n := range per {
		if n > 1 {
			t.Errorf("%s had %d instances", vm, n)
		}
	}
}

// running lists the sim's instances that are not terminated.
func running(t *testing.T, srv *simserver.Server) []string {
	t.Helper()
	insts, err := srv.Instances("sim-a")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, in := range insts {
		if in.Status != "terminated" {
			out = append(out, in.ID+" "+in.Name+" "+in.Status)
		}
	}
	return out
}

var build struct {
	once sync.Once
	dir  string
	bin  string
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if build.dir != "" {
		os.RemoveAll(build.dir)
	}
	os.Exit(code)
}

// command is the scheduler binary (built once per test process) run with
// cfg's state, sim and key, and args.
func command(t *testing.T, cfg Config, args ...string) *exec.Cmd {
	t.Helper()
	build.once.Do(func() {
		if build.dir, build.err = os.MkdirTemp("", "scheduler-test-*"); build.err != nil {
			return
		}
		build.bin = filepath.Join(build.dir, "scheduler")
		if out, err := exec.Command("go", "build", "-o", build.bin, ".").CombinedOutput(); err != nil {
			build.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if build.err != nil {
		t.Fatal(build.err)
	}
	cmd := exec.Command(build.bin, append([]string{"-state", cfg.State, "-sim", cfg.SimURL, "-cloud", cfg.Cloud}, args...)...)
	cmd.Env = append(os.Environ(), "GPUPROV_SIM_KEY="+cfg.APIKey)
	return cmd
}

// syncBuffer is an output a test reads while Run writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// start runs Run in the background, cancelled when the test ends; the
// function it returns waits for Run's error.
func start(t *testing.T, cfg Config, out *syncBuffer) func() error {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var err error
	go func() {
		defer close(done)
		err = Run(ctx, cfg, out)
	}()
	t.Cleanup(func() { cancel(); <-done })
	return func() error {
		t.Helper()
		select {
		case <-done:
			return err
		case <-time.After(time.Minute):
			t.Fatalf("Run did not return in a minute:\n%s", out.String())
			return nil
		}
	}
}

// await returns the next value of c, failing the test after 30 seconds.
func await[T any](t *testing.T, c <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(30 * time.Second):
		t.Fatalf("no %s in 30s", what)
		panic("unreachable")
	}
}

// awaitOutput waits until out contains want (Run writes it from another
// goroutine or process), failing the test after 30 seconds.
func awaitOutput(t *testing.T, out fmt.Stringer, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(out.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("output lacks %q after 30s:\n%s", want, out.String())
		}
		time.Sleep(10 * time.Millisecond) // polling another goroutine's output
	}
}
