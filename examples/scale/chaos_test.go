package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/sim/simserver"
)

var (
	chaosTrials = flag.Int("chaos.trials", 25, "chaos trials: `gpuprov up` killed at a random moment, then recover, check, down")
	chaosSeed   = flag.Uint64("chaos.seed", 0, "seed of the kill moments (0: time-based, printed)")
)

// chaosSim is the simulator configuration of the chaos runs: both clouds
// fast, with stockouts (the cheapest H100 offer, so launches fail over),
// 5xx, lost create responses, listing lag and slow deletes.
const chaosSim = `
retention = "30s"

[[clouds]]
name = "sim-a"
[clouds.timing]
api_latency = "2ms"
boot_time = "400ms"
boot_jitter = "200ms"
delete_time = "100ms"
[clouds.faults]
stockout_offers = ["a-h100x1-use1a"]
error_rate = 0.03
lost_create_rate = 0.1
listing_lag = "300ms"
slow_delete = "200ms"

[[clouds]]
name = "sim-b"
[clouds.timing]
api_latency = "2ms"
boot_time = "400ms"
boot_jitter = "200ms"
delete_time = "100ms"
[clouds.faults]
error_rate = 0.03
lost_create_rate = 0.1
listing_lag = "300ms"
slow_delete = "200ms"
`

// cli runs the gpuprov CLI in one user's environment.
type cli struct {
	t    *testing.T
	bin  string
	home string
}

func (c *cli) command(args ...string) *exec.Cmd {
	cmd := exec.Command(c.bin, args...)
	var env []string
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); k != "HOME" && !strings.HasPrefix(k, "XDG_") {
			env = append(env, kv)
		}
	}
	cmd.Env = append(env, "HOME="+c.home, "XDG_CONFIG_HOME="+filepath.Join(c.home, "config"),
		"XDG_STATE_HOME="+filepath.Join(c.home, "state"))
	cmd.Dir = c.home
	return cmd
}

// run runs the CLI to completion (bounded) and returns its exit code and
// output.
func (c *cli) run(args ...string) (int, string) {
	c.t.Helper()
	cmd := c.command(args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(2 * time.Minute):
		_ = cmd.Process.Kill()
		<-done
		c.t.Fatalf("gpuprov %s: still running after 2m\n%s", strings.Join(args, " "), out.String())
	}
	var xe *exec.ExitError
	switch {
	case errors.As(err, &xe):
		return xe.ExitCode(), out.String()
	case err != nil:
		c.t.Fatal(err)
	}
	return 0, out.String()
}

// startChaosSim starts `gpuprov sim serve` with chaosSim in its own process
// and writes the CLI's config for it.
func startChaosSim(t *testing.T, c *cli) (url, admin string) {
	t.Helper()
	s := startSimServe(t, c, t.TempDir(), chaosSim)
	c.writeConfig(s, "")
	return s.Endpoint, s.AdminToken
}

// trialOutcome is what one trial found.
type trialOutcome struct {
	killed     bool
	leaks      []string // live instances no ready VM of the journal owns
	duplicates []string // VMs with more than one live instance
	stuck      []string // VMs in an active state after recover
	left       int      // instances and side resources after down --all
	unjoined   []string // ready cluster nodes that never ran their join phase
	volumes    []string // a volume leaked, lost while kept, or held twice
	// keptVolumes are the trial's volumes at the sim after down --all.
	keptVolumes int
	states      map[string]int
	took        time.Duration
}

// TestChaos runs -chaos.trials trials against one `gpuprov sim serve` with
// faults on: `gpuprov up` (one VM, or a 3-node cluster, alternating) killed
// with SIGKILL at a uniformly drawn moment of its typical run, then
// `gpuprov recover`, then the checks (at most one instance per VM, every
// instance owned by a ready VM of the journal, no VM left in an active
// state), then `gpuprov down --all` and the check that the sim holds no
// instance and no side resource.
func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos trials run gpuprov processes for minutes")
	}
	c := &cli{t: t, bin: gpuprovCLI(t), home: t.TempDir()}
	url, admin := startChaosSim(t, c)
	seed := *chaosSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("chaos seed %d (-chaos.seed to replay the kill moments)", seed)
	rnd := rand.New(rand.NewPCG(seed, 0))

	// The typical run time of each kind, measured unkilled.
	typical := map[trialKind]time.Duration{}
	for _, kind := range []trialKind{oneVM, cluster3, withVolume} {
		o := chaosTrial(t, c, url, admin, fmt.Sprintf("cal%d", len(typical)), kind, time.Hour)
		if o.bad() {
			t.Errorf("calibration run (%s): leaks %v, duplicates %v, stuck %v, unjoined %v, volumes %v, left after down %d",
				kind, o.leaks, o.duplicates, o.stuck, o.unjoined, o.volumes, o.left)
		}
		if kind == withVolume && o.keptVolumes != 1 {
			t.Errorf("calibration run (%s): %d volumes kept after down, want its one", kind, o.keptVolumes)
		}
		typical[kind] = o.took
		t.Logf("typical run: %s %v", kind, o.took.Round(time.Millisecond))
	}
	var killed, leaks, dups, stuck, unjoined, vols, left int
	states := map[string]int{}
	start := time.Now()
	for i := range *chaosTrials {
		kind := trialKind(i % 3)
		at := time.Duration(rnd.Int64N(int64(typical[kind]) + 1))
		o := chaosTrial(t, c, url, admin, fmt.Sprintf("t%04d", i), kind, at)
		if o.killed {
			killed++
		}
		leaks += len(o.leaks)
		dups += len(o.duplicates)
		stuck += len(o.stuck)
		unjoined += len(o.unjoined)
		vols += len(o.volumes)
		left += o.left
		for s, n := range o.states {
			states[s] += n
		}
		if o.bad() {
			t.Errorf("trial %d (%s, kill at %v): leaks %v, duplicates %v, stuck %v, unjoined %v, volumes %v, left after down %d",
				i, kind, at, o.leaks, o.duplicates, o.stuck, o.unjoined, o.volumes, o.left)
		}
	}
	t.Logf("chaos: %d trials in %v (%d killed mid-run): leaks %d, duplicates %d, stuck %d, unjoined cluster nodes %d, volume faults %d, left after down %d; VM end states after recover %v",
		*chaosTrials, time.Since(start).Round(time.Second), killed, leaks, dups, stuck, unjoined, vols, left, states)
}

// trialKind is what a chaos trial launches.
type trialKind int

const (
	oneVM      trialKind = iota
	cluster3             // a 3-node cluster
	withVolume           // one VM with a new persistent volume, kept after it
)

func (k trialKind) String() string {
	return [...]string{"one VM", "3-node cluster", "VM with a volume"}[k]
}

func (o *trialOutcome) bad() bool {
	return len(o.leaks)+len(o.duplicates)+len(o.stuck)+len(o.unjoined)+len(o.volumes)+o.left > 0
}

// volumeFaults checks the volumes of trial name against the sim's, after
// recover (atRest: after down --all too): every volume at the sim is one
// the journal has, not deleted (none leaked); every volume the journal
// has, not deleted, is at the sim (none lost that was to be kept), held by
// at most the VM the journal names (after down: by none), whose instance
// is the one it is attached to (never two).
func volumeFaults(t *testing.T, c *cli, url, admin, name string, atRest bool) (faults []string, atSimNow int) {
	t.Helper()
	code, out := c.run("volumes", "-a", "-o", "json")
	if code != 0 {
		t.Fatalf("gpuprov volumes exited %d:\n%s", code, out)
	}
	var journaled []journal.Volume
	if err := json.Unmarshal([]byte(out), &journaled); err != nil {
		t.Fatalf("volumes -o json: %v\n%s", err, out)
	}
	mine := map[string]journal.Volume{}
	for _, v := range journaled {
		if strings.HasPrefix(v.Name, "v"+name) {
			mine[v.Name] = v
		}
	}
	vms, _, err := listVMs(c)
	if err != nil {
		t.Fatal(err)
	}
	instance := map[string]string{} // VM → its instance, if ready
	for _, vm := range vms {
		if vm.State == string(journal.StateReady) {
			instance[vm.Name] = vm.InstanceID
		}
	}
	atSim := map[string]bool{}
	for _, cloud := range cloudNames {
		var got struct {
			Volumes []simserver.Volume `json:"volumes"`
		}
		if err := adminGet(url, admin, "/admin/clouds/"+cloud+"/volumes", &got); err != nil {
			t.Fatal(err)
		}
		for _, sv := range got.Volumes {
			jname := sv.Labels[provider.LabelVM]
			if !strings.HasPrefix(jname, "v"+name) {
				continue
			}
			atSim[jname] = true
			jv, ok := mine[jname]
			switch {
			case !ok || jv.State == journal.VolumeDeleted:
				faults = append(faults, fmt.Sprintf("leaked: %s/%s (%s) the journal does not have", cloud, sv.ID, jname))
			case sv.AttachedTo != "" && (jv.VM == "" || instance[jv.VM] != sv.AttachedTo):
				faults = append(faults, fmt.Sprintf("held twice: %s attached to %s at the sim, journal says VM %q (instance %q)", jname, sv.AttachedTo, jv.VM, instance[jv.VM]))
			case atRest && sv.AttachedTo != "":
				faults = append(faults, fmt.Sprintf("still attached after down: %s to %s", jname, sv.AttachedTo))
			}
		}
	}
	for n, jv := range mine {
		if jv.State != journal.VolumeDeleted && jv.State != journal.VolumeCreating && !atSim[n] {
			faults = append(faults, fmt.Sprintf("lost: %s is %s in the journal and gone from the sim", n, jv.State))
		}
	}
	return faults, len(atSim)
}

// ranJoin reports whether the journal shows VM name entering its join
// phase (serving or joining its cluster) in the attempt that made it ready.
func ranJoin(t *testing.T, c *cli, name string) bool {
	t.Helper()
	code, out := c.run("show", name, "-o", "json")
	if code != 0 {
		t.Fatalf("gpuprov show %s exited %d:\n%s", name, code, out)
	}
	var shown struct {
		VM struct {
			Attempt int `json:"attempt"`
		} `json:"vm"`
		Events []struct {
			Type    string `json:"type"`
			Attempt int    `json:"attempt"`
			Message string `json:"message"`
		} `json:"events"`
	}
	if err := json.Unmarshal([]byte(out), &shown); err != nil {
		t.Fatalf("show -o json: %v\n%s", err, out)
	}
	for _, e := range shown.Events {
		if e.Type == "phase" && e.Message == "join" && e.Attempt == shown.VM.Attempt {
			return true
		}
	}
	return false
}

// chaosTrial runs one `gpuprov up` named name, SIGKILLs it after killAt if
// it is still running, recovers, checks and deletes everything.
func chaosTrial(t *testing.T, c *cli, url, admin, name string, kind trialKind, killAt time.Duration) trialOutcome {
	t.Helper()
	args := []string{"up", "--gpu", "h100", "--name", name, "--timeout", "60s"}
	switch kind {
	case cluster3:
		args = append(args, "--nodes", "3")
	case withVolume:
		args = append(args, "--volume", "v"+name+":10:/data")
	}
	up := c.command(args...)
	var upOut bytes.Buffer
	up.Stdout, up.Stderr = &upOut, &upOut
	var o trialOutcome
	start := time.Now()
	if err := up.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- up.Wait() }()
	timer := time.NewTimer(killAt)
	select {
	case <-done:
		timer.Stop()
	case <-timer.C:
		_ = up.Process.Signal(syscall.SIGKILL)
		<-done
		o.killed = true
	}
	o.took = time.Since(start)

	if code, out := c.run("recover"); code != 0 && code != 1 {
		t.Fatalf("%s: gpuprov recover exited %d:\n%s", name, code, out)
	}
	v := viewAtRest(t, c, url, admin, name)
	o.leaks, o.duplicates, o.stuck, o.states = v.leaks, v.duplicates, v.stuck, v.states
	if kind == withVolume {
		o.volumes, _ = volumeFaults(t, c, url, admin, name, false)
	}
	if kind == cluster3 {
		for _, vm := range v.ready {
			if !ranJoin(t, c, vm) {
				o.unjoined = append(o.unjoined, vm)
			}
		}
	}
	if left, out := downAll(t, c, url, admin); left > 0 {
		o.left = left
		t.Logf("%s: down --all printed:\n%s", name, out)
	}
	if kind == withVolume {
		faults, kept := volumeFaults(t, c, url, admin, name, true)
		o.volumes, o.keptVolumes = append(o.volumes, faults...), kept
	}
	if o.bad() {
		t.Logf("%s: up printed:\n%s", name, upOut.String())
	}
	return o
}
