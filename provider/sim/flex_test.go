package sim_test

import (
	"context"
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/journal/journaltest"
	"github.com/org/gpuprov/journal/sqlite"
	"github.com/org/gpuprov/provider/sim"
	"github.com/org/gpuprov/provider/sim/simserver"
)

// flexQueue gives the cloud a flex-start queue of d.
func flexQueue(d time.Duration) func(*simserver.CloudConfig) {
	return func(c *simserver.CloudConfig) { c.Timing.FlexQueue = simserver.Duration(d) }
}

// TestFlexStartQueuesThenRunsWithItsLeash: a flex-start launch waits in the
// sim's queue longer than the boot timeout (phase queued, journaled), then
// boots; the VM's leash ends before the cloud's run duration does, and the
// sim's record shows the queue.
func TestFlexStartQueuesThenRunsWithItsLeash(t *testing.T) {
	e := newEngineEnvOf(t, flexQueue(10*time.Minute), simserver.Faults{}, sim.Config{BootTimeout: 2 * time.Minute})
	req := engineReq("flex-1")
	req.FlexStart = 2 * time.Hour
	vm, err := e.p.Launch(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	insts := e.live(t, "flex-1")
	if len(insts) != 1 || insts[0].MaxRunSeconds != 7200 {
		t.Fatalf("sim instances %+v, want one flex-start instance with a 2h run", insts)
	}
	queued := false
	for _, ev := range insts[0].Events {
		queued = queued || ev.Type == simserver.EventDequeued && ev.At.Sub(insts[0].CreatedAt) == 10*time.Minute
	}
	if !queued || !e.has("flex-1", gpuprov.EvQueued) {
		t.Fatalf("no 10-minute queue in the sim's record (%+v) or no queued event", insts[0].Events)
	}
	// The leash: 2h from running, less a tenth (12 min, capped at 10).
	running := insts[0].Events[len(insts[0].Events)-1].At
	if want := running.Add(2*time.Hour - 10*time.Minute); !vm.ExpiresAt.Equal(want) {
		t.Fatalf("expires at %v, want %v (running at %v + 2h − 10m)", vm.ExpiresAt, want, running)
	}
}

// crashAt launches req through a process that dies right after it emits
// an event of type ev (its journal refuses every write from then on), on a
// fresh SQLite journal of its own, which it returns.
func (e *engineEnv) crashAt(t *testing.T, ev string, req gpuprov.Request) journal.Journal {
	t.Helper()
	db, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "journal.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	var dead atomic.Bool
	p1, _ := newProviderWithInstallation(t, e.srv, sim.Config{PollInterval: time.Second, ConsistencyWindow: 10 * time.Second}, db.Installation(), e.clk)
	launcher, err := gpuprov.New(&journaltest.Killable{Journal: db, Dead: dead.Load}, gpuprov.WithProvider(p1), gpuprov.WithClock(e.clk),
		gpuprov.WithOwner("host-a/1/1/x"), gpuprov.WithEvents(func(got gpuprov.Event) {
			if got.Type == ev {
				dead.Store(true)
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := launcher.Launch(context.Background(), req); !errors.Is(err, journaltest.ErrKilled) {
		t.Fatalf("launch %s through a journal killed at %s: %v, want it killed", req.Name, ev, err)
	}
	launcher.Close()
	return db
}

// recoverIn runs, once the dead launcher's lease has run out, another
// process's Recover on db, and returns that process.
func (e *engineEnv) recoverIn(t *testing.T, db journal.Journal) *gpuprov.Provisioner {
	t.Helper()
	pp, _ := newProviderWithInstallation(t, e.srv, sim.Config{PollInterval: time.Second, ConsistencyWindow: 10 * time.Second}, db.Installation(), e.clk)
	p, err := gpuprov.New(db, gpuprov.WithProvider(pp), gpuprov.WithClock(e.clk), gpuprov.WithOwner("host-b/1/1/x"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	e.clk.Advance(time.Minute) // the dead launcher's lease runs out
	if _, err := p.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestFlexStartQueuedSurvivesACrash: the launching process dies while its
// VM is queued (right after the queued phase is journaled); another
// process's Recover goes on waiting and the VM becomes ready with its
// leash set, with one instance.
func TestFlexStartQueuedSurvivesACrash(t *testing.T) {
	e := newEngineEnvOf(t, flexQueue(time.Minute), simserver.Faults{}, sim.Config{})
	req := engineReq("flex-2")
	req.FlexStart = time.Hour
	db := e.crashAt(t, gpuprov.EvQueued, req)
	if row, _ := db.GetVM(context.Background(), "flex-2"); row.State != journal.StateProvisioning || row.Phase != gpuprov.PhaseQueued {
		t.Fatalf("after the crash flex-2 is %s/%s, want provisioning/queued", row.State, row.Phase)
	}
	vm, err := e.recoverIn(t, db).Get(context.Background(), "flex-2")
	if err != nil || vm.State != gpuprov.StateReady || vm.ExpiresAt.IsZero() || vm.ExpiresAt.Sub(vm.ReadyAt) > time.Hour {
		t.Fatalf("after recover: %+v, %v; want flex-2 ready with a leash under an hour", vm, err)
	}
	if live := e.live(t, "flex-2"); len(live) != 1 || live[0].MaxRunSeconds != 3600 {
		t.Fatalf("the sim runs %+v, want the one flex-start instance", live)
	}
}
