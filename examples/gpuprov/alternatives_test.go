package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestCLIGPUAlternatives: `up --gpu h100,a100-80gb --gpu-order given` with
// sim-a's H100 offers stocked out tries both H100 offers and is ready on
// the A100 in one command; list and show say which GPU it got; `offers`
// shows the offers of every alternative in one table; a request whose
// alternatives have no offer names each with why.
func TestCLIGPUAlternatives(t *testing.T) {
	c := newCLIEnv(t)
	sim := startSim(t, c, simTimings)
	c.writeConfig(sim.config)

	// offers: both models side by side, by price across both.
	var offers []struct {
		GPU          string `json:"gpu"`
		GPUCount     int    `json:"gpu_count"`
		InstanceType string `json:"instance_type"`
	}
	r := c.ok("offers", "--gpu", "h100,a100-80gb:2", "--provider", "sim-a", "-o", "json")
	if err := json.Unmarshal([]byte(r.stdout), &offers); err != nil {
		t.Fatalf("offers -o json: %v\n%s", err, r.stdout)
	}
	var got []string
	for _, o := range offers {
		got = append(got, o.InstanceType)
	}
	if want := "gpu.h100.1x gpu.h100.1x gpu.a100.2x"; strings.Join(got, " ") != want {
		t.Errorf("offers %q, want %s (H100×1 $2.49, $2.89, then A100-80GB×2 $3.58)", got, want)
	}
	table := c.ok("offers", "--gpu", "h100,a100-80gb:2", "--provider", "sim-a").stdout
	if !strings.Contains(table, "H100-80GB×1") || !strings.Contains(table, "A100-80GB×2") {
		t.Errorf("offers table lacks an alternative:\n%s", table)
	}

	sim.adminPut(t, "/admin/clouds/sim-a/faults", map[string]any{"stockout_offers": []string{"a-h100x1-use1a", "a-h100x1-euw1b"}})
	up := c.ok("up", "--gpu", "h100,a100-80gb", "--gpu-order", "given", "--name", "alt-1", "--provider", "sim-a")
	if !strings.Contains(up.stdout, "alt-1 is ready: sim-a us-east/us-east-1b") || !strings.Contains(up.stdout, "A100-80GB×1, $1.79/h") {
		t.Errorf("up did not end on the A100:\n%s", up.stdout)
	}
	if live := sim.live(t); len(live) != 1 || live[0].Zone != "us-east-1b" {
		t.Errorf("the sim runs %+v, want the one A100 instance", live)
	}
	var vms []struct {
		Name     string `json:"name"`
		State    string `json:"state"`
		GPU      string `json:"gpu"`
		GPUCount int    `json:"gpu_count"`
	}
	if err := json.Unmarshal([]byte(c.ok("list", "-o", "json").stdout), &vms); err != nil {
		t.Fatal(err)
	}
	if len(vms) != 1 || vms[0].State != "ready" || vms[0].GPU != "A100-80GB" || vms[0].GPUCount != 1 {
		t.Errorf("list -o json: %+v, want alt-1 ready on A100-80GB×1", vms)
	}
	if table := c.ok("list").stdout; !strings.Contains(table, "A100-80GB×1") {
		t.Errorf("list does not show the A100:\n%s", table)
	}
	show := c.ok("show", "alt-1").stdout
	for _, w := range []string{"Request:    H100-80GB×1 or A100-80GB×1 (in that order)", "accepted: 1 GPU A100-80GB healthy"} {
		if !strings.Contains(show, w) {
			t.Errorf("show lacks %q:\n%s", w, show)
		}
	}
	if n := strings.Count(show, "capacity: sim-a: create"); n != 2 { // the attempts' ERROR column
		t.Errorf("show lists %d stocked-out attempts, want the 2 H100 offers:\n%s", n, show)
	}
	c.ok("down", "alt-1")
	if live := sim.live(t); len(live) != 0 {
		t.Errorf("after down the sim runs %+v", live)
	}

	// No alternative has an offer: the error names each, with why.
	r = c.run("up", "--gpu", "l4:8,h100", "--max-price", "1", "--name", "alt-2", "--provider", "sim-a")
	if r.code != 1 {
		t.Fatalf("exit %d, want 1\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, w := range []string{"no offers for L4×8 or H100-80GB×1", "L4×8: no configured provider offers L4×8 in any region",
		"H100-80GB×1: no offer passes the request's filters", "none under $1.00/h: the cheapest is $2.49/h"} {
		if !strings.Contains(r.stderr, w) {
			t.Errorf("stderr lacks %q:\n%s", w, r.stderr)
		}
	}
	if live := sim.live(t); len(live) != 0 {
		t.Errorf("a request without offers left %+v", live)
	}
}
