package main

import (
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestCLIRecoverPrunes: `recover` prunes the journal after recovering: a
// VM deleted longer ago than --retention is gone (show says there is no
// such VM), a ready VM stays; a retention longer than the VM's age, 0, and
// the default (720h) prune nothing, and a negative one is a usage error.
func TestCLIRecoverPrunes(t *testing.T) {
	c := newCLIEnv(t)
	sim := startSim(t, c, simTimings)
	c.writeConfig(sim.config)

	c.ok("up", "--gpu", "h100", "--name", "old-1", "--provider", "sim-a", "--timeout", "60s")
	c.ok("up", "--gpu", "h100", "--name", "keep-1", "--provider", "sim-a", "--timeout", "60s")
	c.ok("down", "old-1")
	show := c.ok("show", "old-1", "-o", "json").stdout

	for _, args := range [][]string{{"recover"}, {"recover", "--retention", "1h"}, {"recover", "--retention", "0"}} {
		r := c.ok(args...)
		if strings.Contains(r.stdout, "pruned") {
			t.Errorf("gpuprov %s pruned a VM deleted a moment ago:\n%s", strings.Join(args, " "), r.stdout)
		}
		if got := c.ok("show", "old-1", "-o", "json").stdout; got != show {
			t.Errorf("after gpuprov %s, show old-1 changed:\n%s\nwant\n%s", strings.Join(args, " "), got, show)
		}
	}

	time.Sleep(10 * time.Millisecond) // old-1 ended at least this long ago (the commands above took longer)
	r := c.ok("recover", "--retention", "10ms")
	line := regexp.MustCompile(`(?m)^pruned 1 VM ended before (\S+) \(1 attempt, (\d+) events\), 0 expired blocks$`)
	m := line.FindStringSubmatch(r.stdout)
	if m == nil {
		t.Fatalf("recover --retention 10ms: no line saying old-1 was pruned:\n%s", r.stdout)
	}
	t.Log(m[0])
	if before, err := time.Parse(time.RFC3339, m[1]); err != nil || time.Since(before) > time.Minute {
		t.Errorf("pruned line names the cutoff %q (%v), want about now minus 10ms", m[1], err)
	}
	if m[2] == "0" {
		t.Errorf("pruned line says old-1 had no events:\n%s", r.stdout)
	}
	if !strings.Contains(r.stdout, "nothing to recover") {
		t.Errorf("recover with nothing to recover and something to prune:\n%s", r.stdout)
	}
	if r := c.run("show", "old-1"); r.code != 2 || !strings.Contains(r.stderr, "no VM named old-1 in the journal") {
		t.Errorf("show of the pruned VM: exit %d, stderr %q; want 2 and no such VM", r.code, r.stderr)
	}
	vms := listJSON(t, c, "-a")
	if len(vms) != 1 || vms[0].Name != "keep-1" || vms[0].State != "ready" {
		t.Errorf("list -a after the prune = %+v, want only keep-1, ready", vms)
	}
	if r := c.ok("recover", "--retention", "10ms"); strings.Contains(r.stdout, "pruned") {
		t.Errorf("a second prune found more to remove:\n%s", r.stdout)
	}

	if r := c.run("recover", "--retention", "-1h"); r.code != 2 || !strings.Contains(r.stderr, "--retention") {
		t.Errorf("recover --retention -1h: exit %d, stderr %q; want 2 naming the flag", r.code, r.stderr)
	}
	c.ok("down", "keep-1")
}
