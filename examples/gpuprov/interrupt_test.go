package main

import (
	"bufio"
	"bytes"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// twoSpotOffers is sim-a with two spot H100 offers in two zones and the
// on-demand one.
var twoSpotOffers = simOffer("spot-a", "us-east-1a", 1.00, true) + simOffer("spot-b", "us-east-1b", 1.20, true) +
	simOffer("od-a", "us-east-1a", 3.00, false)

// simOffer is one single-H100 offer of a sim cloud's table, in us-east.
func simOffer(id, zone string, price float64, spot bool) string {
	return fmt.Sprintf(`
[[clouds.offers]]
id = %q
region = "us-east"
zone = %q
instance_type = "gpu.h100.1x"
gpu = "H100-80GB"
gpu_count = 1
gpu_memory_gb = 80
vcpus = 26
memory_gb = 200
price_per_hour = %.2f
spot = %v
availability = "high"
`, id, zone, price, spot)
}

// simInstanceDetail is an instance of the sim's admin API with its
// history.
type simInstanceDetail struct {
	ID           string    `json:"id"`
	OfferID      string    `json:"offer_id"`
	Status       string    `json:"status"`
	TerminatedAt time.Time `json:"terminated_at"`
	Events       []struct {
		At   time.Time `json:"at"`
		Type string    `json:"type"`
	} `json:"events"`
}

// TestCLISpotNoticeReplacedByAWatcher is the scene through the CLI,
// every part its own process: `up --spot --on-interruption replace`
// launches a spot VM and exits; `recover --watch` runs; the sim announces
// the machine's preemption 30 s ahead on its metadata endpoint; the
// watcher hears it over SSH, runs its hook, and replaces the VM on the
// other spot offer before the reclaim, deleting the interrupted machine.
// `list` then says the VM is spot and was interrupted once.
func TestCLISpotNoticeReplacedByAWatcher(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl is not installed: the simulated instances read their metadata endpoint with it")
	}
	c := newCLIEnv(t)
	sim := startSim(t, c, simCloud("sim-a", "300ms")+twoSpotOffers+simCloud("sim-b", "300ms"))
	c.writeConfig(sim.config)
	c.ok("up", "--gpu", "h100", "--name", "spot-1", "--provider", "sim-a", "--spot", "--on-interruption", "replace", "--timeout", "60s")
	live := sim.live(t)
	if len(live) != 1 {
		t.Fatalf("live instances after up: %+v", live)
	}
	old := live[0].ID

	watcher := c.command("recover", "--watch", "--interval", "300ms")
	stdout, err := watcher.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	watcher.Stderr = &stderr
	if err := watcher.Start(); err != nil {
		t.Fatal(err)
	}
	var (
		mu  sync.Mutex
		out strings.Builder
	)
	watching := make(chan struct{})
	exited := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		once := sync.Once{}
		for sc.Scan() {
			mu.Lock()
			out.WriteString(sc.Text() + "\n")
			mu.Unlock()
			if strings.HasPrefix(sc.Text(), "watching:") {
				once.Do(func() { close(watching) })
			}
		}
		exited <- watcher.Wait()
	}()
	t.Cleanup(func() { _ = watcher.Process.Kill() })
	select {
	case <-watching:
	case err := <-exited:
		t.Fatalf("recover --watch exited: %v\n%s", err, stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatal("recover --watch did not start watching")
	}

	var echo struct{}
	sim.adminDo(t, http.MethodPost, "/admin/clouds/sim-a/instances/"+old+"/preempt?notice=30s", nil, &echo)
	announced := time.Now()

	var repl simInstance
	deadline := time.Now().Add(40 * time.Second)
	for {
		live := sim.live(t)
		vms := listJSON(t, c)
		if len(live) == 1 && live[0].ID != old && len(vms) == 1 && vms[0].State == "ready" {
			repl = live[0]
			break
		}
		if time.Now().After(deadline) {
			mu.Lock()
			t.Fatalf("no replacement ready: live %+v, VMs %+v\nwatcher:\n%s\n%s", live, vms, out.String(), stderr.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	gone := simDetail(t, sim, old)
	if gone.Status != "terminated" || gone.TerminatedAt.IsZero() || gone.TerminatedAt.After(announced.Add(30*time.Second)) {
		t.Errorf("interrupted instance: %s, terminated at %v; want deleted before the reclaim", gone.Status, gone.TerminatedAt)
	}
	for _, ev := range gone.Events {
		if ev.Type == "preempted" {
			t.Error("the cloud reclaimed the machine before gpuprov deleted it")
		}
	}
	if nw := simDetail(t, sim, repl.ID); nw.OfferID != "spot-b" {
		t.Errorf("replacement on %s, want the other spot offer spot-b", nw.OfferID)
	}

	if err := watcher.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("recover --watch after Ctrl-C: %v\n%s", err, stderr.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("recover --watch did not stop on Ctrl-C")
	}
	mu.Lock()
	text := out.String()
	mu.Unlock()

	for _, want := range []string{"interruption  preempt notice for " + old, "hook          preempt notice, ", "replacing     replacing " + old,
		"retired       interrupted " + old + " deleted: its replacement is ready", "spot-1                   ready"} {
		if !strings.Contains(text, want) {
			t.Errorf("the watcher's output lacks %q:\n%s", want, text)
		}
	}
	if table := c.ok("list").stdout; !strings.Contains(table, "yes, 1 interruption") {
		t.Errorf("list should say spot-1 is spot and was interrupted once:\n%s", table)
	}
}

// simDetail returns sim-a's record of instance id, with its history.
func simDetail(t *testing.T, sim *simServer, id string) simInstanceDetail {
	t.Helper()
	var insts struct {
		Instances []simInstanceDetail `json:"instances"`
	}
	sim.adminGet(t, "/admin/clouds/sim-a/instances", &insts)
	for _, in := range insts.Instances {
		if in.ID == id {
			return in
		}
	}
	t.Fatalf("sim-a has no instance %s", id)
	return simInstanceDetail{}
}
