package sim_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/org/gpuprov"
)

// Idle machines stop billing: three on-demand VMs with a one-second idle
// timeout, whose launcher has gone. One runs a GPU job (its GPUs at 97%),
// one downloads its data (its busy command says so), one does nothing. A
// reaper in another process deletes the idle one, saying why, and keeps
// the other two.
func TestIdleVMDeletedByAReaperBusyOnesKept(t *testing.T) {
	e := newSpotEnv(t)
	launcher := e.process(t)
	req := func(name, busy string) gpuprov.Request {
		return gpuprov.Request{Name: name, GPU: "H100-80GB", Timeout: time.Minute, IdleTimeout: time.Second, BusyCommand: busy}
	}
	for _, r := range []gpuprov.Request{req("idle-1", ""), req("job-1", ""), req("dl-1", "test -f downloading")} {
		if _, err := launcher.Launch(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	if _, err := launcher.Run(ctx, "job-1", "echo 97 > .sim-gpu/utilization"); err != nil {
		t.Fatal(err)
	}
	if _, err := launcher.Run(ctx, "dl-1", "touch downloading"); err != nil {
		t.Fatal(err)
	}
	if err := launcher.Close(); err != nil {
		t.Fatal(err)
	}

	reaper := e.process(t, gpuprov.WithReaper(50*time.Millisecond))
	deadline := time.Now().Add(20 * time.Second)
	var idle *gpuprov.VM
	for {
		v, err := reaper.Get(ctx, "idle-1")
		if err != nil {
			t.Fatal(err)
		}
		if v.State == gpuprov.StateDeleted {
			idle = v
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("idle-1 is %s, not deleted for its idle timeout", v.State)
		}
		time.Sleep(20 * time.Millisecond)
	}
	evs := e.events(t, "idle-1", gpuprov.EvDeleting)
	if len(evs) != 1 || !strings.Contains(evs[0].Message, "idle: every GPU under 5% utilization since ") ||
		!strings.Contains(evs[0].Message, "for its idle timeout of 1s") || evs[0].Owner != reaper.Owner() {
		t.Errorf("deleting events %+v, want one by the reaper saying the VM was idle", evs)
	}
	if got := e.live(t, "idle-1"); len(got) != 0 {
		t.Errorf("idle-1's instance still runs: %+v", got)
	}
	// The busy ones were sampled as long as idle-1 was, busy each time.
	for _, name := range []string{"job-1", "dl-1"} {
		v, err := reaper.Get(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if v.State != gpuprov.StateReady || len(e.live(t, name)) != 1 {
			t.Errorf("%s is %s; want it kept ready while busy", name, v.State)
		}
		if evs := e.events(t, name, gpuprov.EvDeleting); len(evs) != 0 {
			t.Errorf("%s: deleting events %+v", name, evs)
		}
	}
	if idle.EndedAt.Sub(idle.ReadyAt) < time.Second {
		t.Errorf("idle-1 deleted %v after ready, before its idle timeout", idle.EndedAt.Sub(idle.ReadyAt))
	}
}
