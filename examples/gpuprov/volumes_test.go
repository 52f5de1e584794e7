package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestCLIVolumeKeptForTheNextVM: `up --volume data:20:/data` mounts a new
// volume on vm-1, which writes a file; `down vm-1` keeps the volume
// (`volumes` says available, in its zone); `up --volume data::/data` for
// vm-2 lands in that zone and reads the file.
func TestCLIVolumeKeptForTheNextVM(t *testing.T) {
	c := newCLIEnv(t)
	sim := startSim(t, c, simCloud("sim-a", "300ms")+simCloud("sim-b", "300ms"))
	c.writeConfig(sim.config)
	c.ok("up", "--gpu", "h100", "--name", "vm-1", "--provider", "sim-a", "--volume", "data:20:/data", "--timeout", "60s")
	c.ok("ssh", "vm-1", "--", `echo epoch-7 > "$GPUPROV_ROOT/data/ckpt"`)
	c.ok("down", "vm-1")
	var vols []struct {
		Name, State, Zone, VM string
	}
	if err := json.Unmarshal([]byte(c.ok("volumes", "-o", "json").stdout), &vols); err != nil {
		t.Fatal(err)
	}
	if len(vols) != 1 || vols[0].Name != "data" || vols[0].State != "available" || vols[0].VM != "" || vols[0].Zone == "" {
		t.Fatalf("volumes after down: %+v; want data kept, available, in its zone", vols)
	}
	c.ok("up", "--gpu", "h100", "--name", "vm-2", "--volume", "data::/data", "--timeout", "60s")
	vms := listJSON(t, c)
	if len(vms) != 1 {
		t.Fatalf("VMs: %+v", vms)
	}
	if out := c.ok("ssh", "vm-2", "--", `cat "$GPUPROV_ROOT/data/ckpt"`).stdout; strings.TrimSpace(out) != "epoch-7" {
		t.Errorf("vm-2 reads %q from the volume, want what vm-1 wrote", out)
	}
	if table := c.ok("volumes").stdout; !strings.Contains(table, "attached") || !strings.Contains(table, "vm-2") {
		t.Errorf("volumes should show data attached to vm-2:\n%s", table)
	}
	if r := c.run("up", "--gpu", "h100", "--name", "vm-3", "--volume", "data::/data"); r.code != 2 || !strings.Contains(r.stderr, `volume "data" is attached to VM vm-2`) {
		t.Errorf("a second VM asking for the attached volume: exit %d, %s", r.code, r.stderr)
	}
}
