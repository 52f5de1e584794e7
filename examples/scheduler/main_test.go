package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/org/gpuprov/provider/sim/simserver"
)

func config(t *testing.T, srv *simserver.Server) Config {
	return Config{State: t.TempDir(), SimURL: srv.URL(), Cloud: "sim-a", APIKey: srv.APIKey("sim-a"), VMs: 5}
}

// The whole run on the public in-process sim: five VMs ready, a command
// run on each over SSH, health checked, all deleted, nothing left.
func TestRunOnTheSim(t *testing.T) {
	srv := simserver.NewServer(t)
	var out bytes.Buffer
	if err := Run(context.Background(), config(t, srv), &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for i := range 5 {
		name := "job-" + string(rune('0'+i))
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
	if testing.Short() {
		t.Skip("builds and runs the scheduler binary")
	}
	srv := simserver.NewServer(t, simserver.WithTiming(simserver.Timing{BootTime: simserver.Duration(2 * time.Second)}))
	cfg := config(t, srv)
	bin := filepath.Join(t.TempDir(), "scheduler")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "-state", cfg.State, "-sim", cfg.SimURL, "-cloud", cfg.Cloud, "-n", "5", "-hold")
	cmd.Env = append(os.Environ(), "GPUPROV_SIM_KEY="+cfg.APIKey)
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
