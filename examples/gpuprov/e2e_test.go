package main

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/org/gpuprov/journal/postgres/pgtest"
)

// simTimings: sim-a boots fast, sim-b slowly enough to kill a launch mid-boot.
var simTimings = simCloud("sim-a", "300ms") + simCloud("sim-b", "5s")

// simCloud is the sim configuration of one cloud, name, whose machines boot
// in boot, with the fast API and deletes the CLI tests share.
func simCloud(name, boot string) string {
	return `
[[clouds]]
name = "` + name + `"
[clouds.timing]
api_latency = "1ms"
boot_time = "` + boot + `"
delete_time = "100ms"
`
}

type listedVM struct {
	Name     string   `json:"name"`
	State    string   `json:"state"`
	Phase    string   `json:"phase"`
	Provider string   `json:"provider"`
	Price    float64  `json:"price_per_hour"`
	Cost     float64  `json:"cost_usd"`
	Age      float64  `json:"age_seconds"`
	Left     *float64 `json:"left_seconds"`
}

func listJSON(t *testing.T, c *cliEnv, args ...string) []listedVM {
	t.Helper()
	r := c.ok(append([]string{"list", "-o", "json"}, args...)...)
	var vms []listedVM
	if err := json.Unmarshal([]byte(r.stdout), &vms); err != nil {
		t.Fatalf("list -o json: %v\n%s", err, r.stdout)
	}
	return vms
}

// TestCLILifecycle drives one VM through the CLI binary against `gpuprov sim
// serve` in its own process: up, list, ssh, health, show, down.
func TestCLILifecycle(t *testing.T) {
	c := newCLIEnv(t)
	sim := startSim(t, c, simTimings)
	c.writeConfig(sim.config)

	r := c.ok("up", "--gpu", "h100", "--name", "e2e-1", "--provider", "sim-a", "--timeout", "60s")
	if !strings.Contains(r.stdout, "e2e-1 is ready") {
		t.Errorf("up output lacks the ready line:\n%s", r.stdout)
	}
	// Off a terminal: one RFC3339-stamped line per event.
	first := strings.SplitN(r.stdout, "\n", 2)[0]
	if f := strings.Fields(first); len(f) < 3 || f[1] != "e2e-1" || f[2] != "launch" {
		t.Errorf("first progress line %q: want <RFC3339> e2e-1 launch ...", first)
	} else if _, err := time.Parse(time.RFC3339, f[0]); err != nil {
		t.Errorf("first progress line %q: %v", first, err)
	}

	table := c.ok("list").stdout
	for _, want := range []string{"NAME", "COST", "e2e-1", "ready", "sim-a", "H100-80GB×1", "$2.49"} {
		if !strings.Contains(table, want) {
			t.Errorf("list lacks %q:\n%s", want, table)
		}
	}
	vms := listJSON(t, c)
	if len(vms) != 1 || vms[0].Name != "e2e-1" || vms[0].State != "ready" || vms[0].Provider != "sim-a" || vms[0].Price <= 0 || vms[0].Cost < 0 {
		t.Fatalf("list -o json = %+v", vms)
	}

	if r := c.ok("ssh", "e2e-1", "--", "echo", "ok"); r.stdout != "ok\n" {
		t.Errorf("ssh echo ok printed %q", r.stdout)
	}
	if r := c.run("ssh", "e2e-1", "--", "exit 7"); r.code != 7 {
		t.Errorf("ssh 'exit 7' exited %d, want the remote code 7", r.code)
	}

	if r := c.ok("health"); !strings.Contains(r.stdout, "e2e-1") || !strings.Contains(r.stdout, "healthy") {
		t.Errorf("health:\n%s", r.stdout)
	}
	var hs []struct {
		VM      string `json:"vm"`
		Verdict string `json:"verdict"`
	}
	if err := json.Unmarshal([]byte(c.ok("health", "e2e-1", "-o", "json").stdout), &hs); err != nil || len(hs) != 1 || hs[0].Verdict != "healthy" {
		t.Errorf("health -o json = %+v (%v)", hs, err)
	}
	var show struct {
		VM       struct{ Name string }   `json:"vm"`
		Attempts []struct{ N int }       `json:"attempts"`
		Events   []struct{ Type string } `json:"events"`
	}
	if err := json.Unmarshal([]byte(c.ok("show", "e2e-1", "-o", "json").stdout), &show); err != nil ||
		show.VM.Name != "e2e-1" || len(show.Attempts) != 1 || len(show.Events) < 3 {
		t.Errorf("show -o json = %+v (%v)", show, err)
	}
	if r := c.ok("offers", "--gpu", "h100", "-o", "json"); !strings.Contains(r.stdout, `"sim-b"`) {
		t.Errorf("offers -o json lacks sim-b:\n%s", r.stdout)
	}

	c.ok("down", "e2e-1")
	if vms := listJSON(t, c); len(vms) != 0 {
		t.Errorf("after down, list = %+v", vms)
	}
	if live := sim.live(t); len(live) != 0 {
		t.Errorf("after down, the sim runs %+v", live)
	}
}

// TestCLICrashRecover kills `up` with SIGKILL while its instance boots, then
// checks that `recover` leaves no orphan and `down --all` leaves nothing.
func TestCLICrashRecover(t *testing.T) {
	c := newCLIEnv(t)
	sim := startSim(t, c, simTimings)
	c.writeConfig(sim.config)

	// Mid-boot, per the journal: the VM's phase is boot.
	c.killUpWhen(t, func(vms []listedVM) bool { return len(vms) == 1 && vms[0].Phase == "boot" },
		"--gpu", "h100", "--name", "crash-1", "--provider", "sim-b", "--timeout", "60s")
	if live := sim.live(t); len(live) != 1 {
		t.Fatalf("mid-boot the sim runs %d instances, want 1: %+v", len(live), live)
	}

	if r := c.ok("recover"); !strings.Contains(r.stdout, "crash-1") {
		t.Errorf("recover did not resume crash-1:\n%s", r.stdout)
	}
	known := map[string]bool{}
	for _, v := range listJSON(t, c, "--all") {
		known[v.Name] = true
		if v.Name == "crash-1" && v.State != "ready" {
			t.Errorf("after recover crash-1 is %s, want ready (its boot resumed)", v.State)
		}
	}
	perVM := map[string]int{}
	for _, in := range sim.live(t) {
		vm := in.Labels["gpuprov"]
		if !known[vm] {
			t.Errorf("orphan: instance %s (vm label %q) belongs to no VM in the journal", in.ID, vm)
		}
		perVM[vm]++
	}
	for vm, n := range perVM {
		if n > 1 {
			t.Errorf("%s has %d instances, want at most one", vm, n)
		}
	}

	c.ok("down", "--all")
	if live := sim.live(t); len(live) != 0 {
		t.Errorf("after down --all the sim runs %+v", live)
	}
	if n := sim.sideResources(t); n != 0 {
		t.Errorf("after down --all the sim holds %d side resources", n)
	}
}

// TestSimServeRestart checks that `sim serve` keeps its state across a
// restart: the same API keys, and the instance that was running.
func TestSimServeRestart(t *testing.T) {
	c := newCLIEnv(t)
	dir := t.TempDir()
	sim := startSimAt(t, c, dir, simTimings)
	c.writeConfig(sim.config)
	c.ok("up", "--gpu", "h100", "--name", "keep-1", "--provider", "sim-a", "--timeout", "60s")
	before := sim.live(t)
	sim.stop()

	again := startSimAt(t, c, dir, simTimings)
	keys := func(cfg string) (ks []string) {
		for _, l := range strings.Split(cfg, "\n") {
			if strings.HasPrefix(l, "api_key") {
				ks = append(ks, l)
			}
		}
		return ks
	}
	if a, b := keys(sim.config), keys(again.config); len(a) != 2 || strings.Join(a, ",") != strings.Join(b, ",") {
		t.Errorf("API keys changed across a restart: %v then %v", a, b)
	}
	after := again.live(t)
	if len(before) != 1 || len(after) != 1 || before[0].ID != after[0].ID {
		t.Errorf("instances before the restart %+v, after %+v", before, after)
	}
	// Clean up through the CLI, against the restarted server.
	c.writeConfig(again.config)
	c.ok("down", "--all")
	if live := again.live(t); len(live) != 0 {
		t.Errorf("after down --all the sim runs %+v", live)
	}
}

// TestCLIWaitForCapacityAcrossAKill: `up --wait` finds every offer stocked
// out and waits; killed with SIGKILL while waiting, it leaves the VM waiting
// in the journal; once the stock returns, `recover` goes on with the wait
// and the VM becomes ready, with its --ttl shown by list.
func TestCLIWaitForCapacityAcrossAKill(t *testing.T) {
	c := newCLIEnv(t)
	sim := startSim(t, c, simTimings)
	c.writeConfig(sim.config)
	sim.adminPut(t, "/admin/clouds/sim-a/faults", map[string]any{"stockout_regions": []string{"*"}})

	upOut := c.killUpWhen(t, func(vms []listedVM) bool { return len(vms) == 1 && vms[0].State == "waiting" },
		"--gpu", "h100", "--name", "wait-1", "--provider", "sim-a", "--wait", "--wait-poll", "200ms", "--timeout", "2m", "--ttl", "1h")
	if table := c.ok("list").stdout; !strings.Contains(table, "waiting") || !strings.Contains(table, "retry in") {
		t.Errorf("list of a waiting VM lacks its state and next try:\n%s", table)
	}
	if !strings.Contains(upOut, "waiting for capacity") {
		t.Errorf("up printed no waiting line:\n%s", upOut)
	}
	if live := sim.live(t); len(live) != 0 {
		t.Fatalf("a waiting VM runs instances: %+v", live)
	}
	if vms := listJSON(t, c); len(vms) != 1 || vms[0].State != "waiting" {
		t.Fatalf("after the kill: %+v; want wait-1 still waiting", vms)
	}

	sim.adminPut(t, "/admin/clouds/sim-a/faults", map[string]any{}) // the stock returns
	if r := c.ok("recover"); !strings.Contains(r.stdout, "wait-1") || !strings.Contains(r.stdout, "recovered: ready") {
		t.Errorf("recover did not finish the wait:\n%s", r.stdout)
	}
	vms := listJSON(t, c)
	if len(vms) != 1 || vms[0].State != "ready" || vms[0].Left == nil || *vms[0].Left < 3500 || *vms[0].Left > 3600 {
		t.Fatalf("after recover: %+v; want wait-1 ready with about an hour left", vms)
	}
	if table := c.ok("list").stdout; !strings.Contains(table, "LEFT") || !strings.Contains(table, "59m") && !strings.Contains(table, "1h") {
		t.Errorf("list lacks the time left:\n%s", table)
	}
	if live := sim.live(t); len(live) != 1 {
		t.Errorf("the sim runs %d instances, want 1", len(live))
	}
	c.ok("down", "--all")
	if live := sim.live(t); len(live) != 0 {
		t.Errorf("after down --all the sim runs %+v", live)
	}
}

// TestCLIJobNeeds: offers filters and shows vCPUs, memory and disk; up puts
// the labels and the disk size on the sim's instance.
func TestCLIJobNeeds(t *testing.T) {
	c := newCLIEnv(t)
	sim := startSim(t, c, simTimings)
	c.writeConfig(sim.config)

	table := c.ok("offers", "--gpu", "h100", "--count", "8", "--min-vcpus", "100", "--disk", "500").stdout
	if !strings.Contains(table, "DISK") || !strings.Contains(table, "500G") || strings.Contains(table, "gpu.h100.1x") {
		t.Errorf("offers --min-vcpus 100 --disk 500 should list only big machines with a 500G disk:\n%s", table)
	}
	var offers []struct {
		VCPUs  int `json:"vcpus"`
		DiskGB int `json:"disk_gb"`
	}
	if err := json.Unmarshal([]byte(c.ok("offers", "--gpu", "h100", "--count", "8", "--min-vcpus", "100", "--disk", "500", "-o", "json").stdout), &offers); err != nil || len(offers) == 0 {
		t.Fatalf("offers -o json: %v %+v", err, offers)
	}
	for _, o := range offers {
		if o.VCPUs < 100 || o.DiskGB != 500 {
			t.Errorf("offer %+v: want ≥100 vCPUs and a 500 GB disk", o)
		}
	}

	c.ok("up", "--gpu", "h100", "--name", "needs-1", "--provider", "sim-a", "--timeout", "60s",
		"--disk", "300", "--label", "team=ml", "--label", "run=exp-42")
	live := sim.live(t)
	if len(live) != 1 || live[0].Labels["team"] != "ml" || live[0].Labels["run"] != "exp-42" || live[0].DiskGB != 300 {
		t.Fatalf("the sim runs %+v; want one instance with the labels and a 300 GB disk", live)
	}
	c.ok("down", "needs-1")

	// --allow-from restricts who may connect: the firewall the sim gets
	// admits that network only; a value that is not a CIDR is bad input.
	c.ok("up", "--gpu", "h100", "--name", "fenced-1", "--provider", "sim-a", "--timeout", "60s", "--allow-from", "203.0.113.0/24")
	type firewall struct {
		Sources []string `json:"sources"`
	}
	var res struct {
		Firewalls []firewall `json:"firewalls"`
	}
	sim.adminGet(t, "/admin/clouds/sim-a/resources", &res)
	if !slices.ContainsFunc(res.Firewalls, func(f firewall) bool { return slices.Equal(f.Sources, []string{"203.0.113.0/24"}) }) {
		t.Errorf("up --allow-from 203.0.113.0/24: the sim's firewalls are %+v; want one admitting that network only", res.Firewalls)
	}
	c.ok("down", "fenced-1")

	for _, args := range [][]string{
		{"--label", "team"}, {"--label", "Team=ml"}, {"--label", "gpuprov-x=1"}, {"--disk", "0"}, {"--min-vcpus", "0"},
		{"--allow-from", "office"}, {"--allow-from", "203.0.113.7/24"},
	} {
		r := c.run(append([]string{"up", "--gpu", "h100", "--name", "bad-1", "--provider", "sim-a"}, args...)...)
		if r.code != 2 {
			t.Errorf("up %v exited %d; want 2 (bad input)\n%s", args, r.code, r.stderr)
		}
	}
	if live := sim.live(t); len(live) != 0 {
		t.Errorf("bad input created %+v", live)
	}
}

// TestCLICompactCluster: `up --nodes 2 --placement compact` on the sim puts
// both nodes in one zone and one placement group, the cheapest zone having
// stock for only one of them; `down --all` leaves no instance and no group.
func TestCLICompactCluster(t *testing.T) {
	c := newCLIEnv(t)
	sim := startSim(t, c, simTimings)
	c.writeConfig(sim.config)
	sim.adminPut(t, "/admin/clouds/sim-a/faults", map[string]any{"offer_stock": map[string]int{"a-h100x1-use1a": 1}})

	out := c.ok("up", "--gpu", "h100", "--name", "tight", "--provider", "sim-a", "--timeout", "120s",
		"--nodes", "2", "--placement", "compact").stdout
	live := sim.live(t)
	if len(live) != 2 || live[0].Zone != live[1].Zone || live[0].Zone == "us-east-1a" ||
		live[0].PlacementGroup != "gpuprov-tight" || live[1].PlacementGroup != "gpuprov-tight" {
		t.Fatalf("the sim runs %+v; want both nodes in one zone past the stocked-out us-east-1a, in group gpuprov-tight\n%s", live, out)
	}
	var res struct {
		PlacementGroups []struct{ Name, Region string } `json:"placement_groups"`
	}
	sim.adminGet(t, "/admin/clouds/sim-a/resources", &res)
	if len(res.PlacementGroups) != 1 {
		t.Fatalf("placement groups %+v; want the cluster's one", res.PlacementGroups)
	}
	c.ok("down", "--all")
	sim.adminGet(t, "/admin/clouds/sim-a/resources", &res)
	if live := sim.live(t); len(live) != 0 || len(res.PlacementGroups) != 0 {
		t.Fatalf("after down --all: instances %+v, placement groups %+v; want none", live, res.PlacementGroups)
	}
}

// TestCLIClusterCrashRecover: `up --nodes 3` killed as soon as its first
// node is journaled, then `recover`: every node ends ready and in the
// cluster, the ones the kill kept from being journaled too, and the k3s
// emulation on the server lists all three.
func TestCLIClusterCrashRecover(t *testing.T) {
	c := newCLIEnv(t)
	sim := startSim(t, c, simTimings)
	c.writeConfig(sim.config)

	c.killUpWhen(t, func(vms []listedVM) bool { return len(vms) > 0 },
		"--gpu", "h100", "--name", "kc", "--provider", "sim-b", "--timeout", "120s", "--nodes", "3")
	journaled := len(listJSON(t, c))

	rec := c.ok("recover")
	vms := listJSON(t, c)
	if len(vms) != 3 {
		t.Fatalf("after recover %d nodes (%d journaled at the kill); want 3\n%s", len(vms), journaled, rec.stdout)
	}
	for _, v := range vms {
		if v.State != "ready" {
			t.Fatalf("after recover %s is %s, want ready\n%s", v.Name, v.State, rec.stdout)
		}
	}
	if live := sim.live(t); len(live) != 3 {
		t.Fatalf("the sim runs %d instances, want the cluster's 3: %+v", len(live), live)
	}
	var listed string
	for _, v := range vms {
		if r := c.run("ssh", v.Name, "--", `"${GPUPROV_ROOT:-}/usr/local/bin/k3s" kubectl get nodes`); r.code == 0 {
			listed = r.stdout
			break
		}
	}
	for _, v := range vms {
		if !strings.Contains(listed, v.Name) {
			t.Errorf("kubectl get nodes on the server does not list %s:\n%s", v.Name, listed)
		}
	}
	t.Logf("%d of 3 nodes journaled at the kill; kubectl get nodes:\n%s", journaled, listed)
	c.ok("down", "--all")
	if live := sim.live(t); len(live) != 0 {
		t.Errorf("after down --all the sim runs %+v", live)
	}
}

// TestCLIOffersAzureWithoutCredentials: an [azure] section with a
// subscription and no credentials anywhere lists Azure's H100 machines
// from its embedded catalog; planning makes no Azure call.
func TestCLIOffersAzureWithoutCredentials(t *testing.T) {
	c := newCLIEnv(t)
	c.writeConfig("[azure]\nsubscription_id = \"00000000-0000-0000-0000-000000000000\"\n")
	cmd := c.command("offers", "--gpu", "h100", "--count", "8", "-o", "json")
	var env []string
	for _, kv := range cmd.Env {
		if !strings.HasPrefix(kv, "AZURE_") {
			env = append(env, kv)
		}
	}
	cmd.Env = env
	r := c.runCmd(cmd, cmd.Args[1:])
	if r.code != 0 {
		t.Fatalf("offers exited %d:\n%s", r.code, r.stderr)
	}
	var offers []struct {
		Provider     string `json:"provider"`
		InstanceType string `json:"instance_type"`
		GPUCount     int    `json:"gpu_count"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &offers); err != nil {
		t.Fatalf("offers -o json: %v\n%s", err, r.stdout)
	}
	found := false
	for _, o := range offers {
		found = found || o.Provider == "azure" && o.InstanceType == "Standard_ND96isr_H100_v5" && o.GPUCount == 8
	}
	if !found {
		t.Fatalf("no Azure ND H100 v5 offer without credentials: %s", r.stdout)
	}
}

// TestCLIOnASharedPostgresJournal: with journal = "postgres://…" in its
// config, the CLI works on the journal a team's services share: one user
// launches a VM, another (another home, the same journal) lists it and
// takes it down. Before, the CLI knew only the sqlite scheme.
func TestCLIOnASharedPostgresJournal(t *testing.T) {
	url := pgtest.Require(t).NewSchema(t)
	alice, bob := newCLIEnv(t), newCLIEnv(t)
	sim := startSim(t, alice, simTimings)
	cfg := fmt.Sprintf("journal = %q\n%s", url, sim.config)
	alice.writeConfig(cfg)
	bob.writeConfig(cfg)

	alice.ok("up", "--gpu", "h100", "--name", "shared-1", "--provider", "sim-a", "--timeout", "60s")
	vms := listJSON(t, bob)
	if len(vms) != 1 || vms[0].Name != "shared-1" || vms[0].State != "ready" {
		t.Fatalf("bob lists %+v; want alice's shared-1, ready", vms)
	}
	bob.ok("down", "shared-1")
	if live := sim.live(t); len(live) != 0 {
		t.Errorf("after bob's down the sim runs %+v", live)
	}
	if vms := listJSON(t, alice); len(vms) != 0 {
		t.Errorf("alice lists %+v after bob's down; want nothing live", vms)
	}
}
