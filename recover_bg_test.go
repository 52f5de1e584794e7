package gpuprov_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/provider"
	pt "github.com/org/gpuprov/provider/providertest"
)

// crashWhileWaiting launches a VM that waits for capacity (every offer out
// while out is set) on a journal that dies once the wait is journaled, as a
// process killed mid-wait, and returns once its lease has expired.
func crashWhileWaiting(t *testing.T, e *env, out *atomic.Bool) {
	t.Helper()
	out.Store(true)
	for _, f := range e.fakes {
		f.Script(&pt.Rule{Op: pt.OpCreate, Match: func(*pt.Call) bool { return out.Load() }, Err: pe(provider.Capacity, "no capacity")})
	}
	cj := &crashJournal{Journal: e.j, left: 1 << 30}
	p1 := e.provisioner(cj, gpuprov.WithEvents(func(ev gpuprov.Event) {
		if ev.Type == gpuprov.EvWaiting {
			cj.mu.Lock()
			cj.left = 0
			cj.mu.Unlock()
		}
	}))
	req := h100("waiter")
	req.WaitForCapacity, req.Timeout = true, 12*time.Hour
	if _, err := p1.Launch(context.Background(), req); !errors.Is(err, errCrash) {
		t.Fatalf("launch: %v; want the journal's crash", err)
	}
	p1.Close()
	e.clk.Advance(2 * time.Minute) // the dead process's lease expires
	if row, _ := e.j.GetVM(context.Background(), "waiter"); row.State != journal.StateWaiting {
		t.Fatalf("the crash left the VM %s; want waiting", row.State)
	}
}

// TestRecoverInBackgroundDoesNotBlockOnAWaitingVM: a service starting
// with RecoverInBackground gets its report at once, the waiting VM listed
// as continuing, while the VM goes on waiting in the background; Wait sees
// it ready a poll after capacity is back.
func TestRecoverInBackgroundDoesNotBlockOnAWaitingVM(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	var out atomic.Bool
	crashWhileWaiting(t, e, &out)

	p2 := e.provisioner(e.j)
	defer p2.Close()
	start := e.clk.Now()
	rep, err := p2.RecoverInBackground(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if took := e.clk.Now().Sub(start); took > time.Minute {
		t.Errorf("RecoverInBackground returned after %v of clock time; want at once", took)
	}
	if len(rep.VMs) != 1 || rep.VMs[0].Name != "waiter" || rep.VMs[0].Outcome != gpuprov.OutcomeContinuing {
		t.Fatalf("report %+v; want waiter continuing", rep.VMs)
	}
	if row, _ := e.j.GetVM(ctx, "waiter"); row.State.Terminal() || row.State == journal.StateReady {
		t.Fatalf("the VM is %s when RecoverInBackground returned; want it still waiting", row.State)
	}
	out.Store(false) // capacity is back
	vm, err := p2.Wait(ctx, "waiter")
	if err != nil || vm.State != gpuprov.StateReady {
		t.Fatalf("Wait: %v, %+v; want ready", err, vm)
	}
	e.assertClean("waiter")
}

// TestCloseStopsWhatRecoverInBackgroundLeftRunning: Close halts the
// background drivers where they are — nothing more is sent to a cloud, the
// VM stays as the journal has it (waiting), its lease is free — and the
// next Recover takes it over and finishes it.
func TestCloseStopsWhatRecoverInBackgroundLeftRunning(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	var out atomic.Bool
	crashWhileWaiting(t, e, &out)

	p2 := e.provisioner(e.j)
	if _, err := p2.RecoverInBackground(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p2.Close(); err != nil {
		t.Fatal(err)
	}
	calls := e.cloudCalls()
	row, err := e.j.GetVM(ctx, "waiter")
	if err != nil {
		t.Fatal(err)
	}
	if row.State != journal.StateWaiting || row.Owner != "" {
		t.Fatalf("after Close the VM is %s owned by %q; want waiting with its lease free", row.State, row.Owner)
	}
	if _, err := p2.RecoverInBackground(ctx); !errors.Is(err, gpuprov.ErrClosed) {
		t.Errorf("RecoverInBackground after Close: %v; want ErrClosed", err)
	}
	e.clk.Advance(time.Hour)
	if n := e.cloudCalls(); n != calls {
		t.Errorf("%d cloud calls after Close", n-calls)
	}

	out.Store(false)
	p3 := e.provisioner(e.j)
	defer p3.Close()
	rep, err := p3.Recover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Resumed["waiter"] != nil || len(rep.VMs) != 1 || rep.VMs[0].Outcome != gpuprov.OutcomeReady {
		t.Fatalf("recover after Close: %+v; want waiter ready", rep.VMs)
	}
	e.assertClean("waiter")
}

// TestWaitForAVMThatEnds: Wait returns ErrEnded with the reason for a VM
// that failed, and ErrNotFound for a name the journal lacks.
func TestWaitForAVMThatEnds(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	stockoutEverywhere(e.fakes, 0)
	if _, err := e.p.Launch(ctx, h100("doomed")); err == nil {
		t.Fatal("a launch with every offer out succeeded")
	}
	vm, err := e.p.Wait(ctx, "doomed")
	if !errors.Is(err, gpuprov.ErrEnded) || vm == nil || vm.State != gpuprov.StateFailed {
		t.Errorf("Wait on a failed VM: %v, %+v; want ErrEnded and the failed VM", err, vm)
	}
	if _, err := e.p.Wait(ctx, "nobody"); !errors.Is(err, gpuprov.ErrNotFound) {
		t.Errorf("Wait on an unknown VM: %v; want ErrNotFound", err)
	}
}
