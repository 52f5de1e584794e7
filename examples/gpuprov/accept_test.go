package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// acceptSim: sim-a's cheapest single-H100 offer's machines have
// uncorrectable ECC errors.
var acceptSim = simCloud("sim-b", "300ms") + simCloud("sim-a", "300ms") + `[[clouds.faults.gpu_faults]]
kind = "ecc"
offers = ["a-h100x1-use1a"]
`

// TestCLIGPUAcceptance: up refuses the machine with ECC errors and is
// ready on the next offer, saying why; show prints both verdicts and the
// accepted GPUs; offers marks the refused offer blocked, with its
// history; health --gpu finds an Xid 79 logged after ready, plain health
// does not look.
func TestCLIGPUAcceptance(t *testing.T) {
	c := newCLIEnv(t)
	sim := startSim(t, c, acceptSim)
	c.writeConfig(sim.config)

	r := c.ok("up", "--gpu", "h100", "--name", "acc", "--timeout", "60s")
	if !strings.Contains(r.stdout, "uncorrectable ECC errors") || !strings.Contains(r.stdout, "acc is ready") {
		t.Errorf("up does not say why the first machine went:\n%s", r.stdout)
	}
	show := c.ok("show", "acc").stdout
	for _, want := range []string{"GPU acceptance:", "rejected: GPU 0 (0000:", "uncorrectable ECC errors", "accepted: 1 GPU H100-80GB healthy",
		"NVIDIA H100 80GB HBM3", "GPU-"} {
		if !strings.Contains(show, want) {
			t.Errorf("show lacks %q:\n%s", want, show)
		}
	}
	offers := c.ok("offers", "--gpu", "h100").stdout
	var bad string
	for _, l := range strings.Split(offers, "\n") {
		if strings.Contains(l, "us-east-1a") && strings.Contains(l, "gpu.h100.1x") && strings.Contains(l, "2.49") {
			bad = l
		}
	}
	if !strings.Contains(bad, "0/1 ready, 1 rejected") || !strings.Contains(bad, "blocked until") || !strings.Contains(bad, "(accept)") {
		t.Errorf("offers' line for the refused offer: %q\n%s", bad, offers)
	}

	var vm struct {
		VM struct {
			InstanceID string `json:"instance_id"`
			Provider   string `json:"provider"`
		} `json:"vm"`
	}
	if err := json.Unmarshal([]byte(c.ok("show", "acc", "-o", "json").stdout), &vm); err != nil || vm.VM.InstanceID == "" {
		t.Fatalf("show -o json: %v %+v", err, vm)
	}
	if r := c.ok("health", "--gpu", "acc"); !strings.Contains(r.stdout, "healthy") {
		t.Errorf("health --gpu before any fault:\n%s", r.stdout)
	}
	var echo json.RawMessage
	sim.adminDo(t, "POST", "/admin/clouds/"+vm.VM.Provider+"/instances/"+vm.VM.InstanceID+"/gpu-faults", map[string]any{"kind": "xid", "xid": 79}, &echo)
	if r := c.run("health", "--gpu", "acc"); r.code != 1 || !strings.Contains(r.stdout, "unhealthy") || !strings.Contains(r.stdout, "gpu-xid-79") {
		t.Errorf("health --gpu after an Xid 79: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := c.ok("health", "acc"); strings.Contains(r.stdout, "gpu-xid") {
		t.Errorf("health without --gpu looked at the GPUs:\n%s", r.stdout)
	}
	c.ok("down", "acc")
}
