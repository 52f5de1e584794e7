package gpuprov_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/provider"
	pt "github.com/org/gpuprov/provider/providertest"
)

// RecoverReport says per VM what Recover did: resumed to ready, failed,
// left a teardown incomplete, or skipped and who drives it.
func TestRecoverReportSaysWhatBecameOfEachVM(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	a, b := e.fake("a"), e.fake("b")
	a.BootTime = 30 * time.Second
	a.Script(&pt.Rule{Op: pt.OpCreate, Match: func(c *pt.Call) bool { return c.VM == "doomed" }, Err: pe(provider.InvalidRequest, "no such image")})

	// Two launches killed early: one resumes to ready, one fails.
	for _, name := range []string{"resume", "doomed"} {
		cj := &crashJournal{Journal: e.j, left: 3}
		p := e.provisioner(cj)
		if _, err := p.Launch(ctx, h100(name)); !errors.Is(err, errCrash) {
			t.Fatalf("%s: %v", name, err)
		}
		p.Close()
	}
	// One left deleting by a read outage on cloud b that is still on.
	stuck := h100("stuck")
	stuck.Providers = []string{"b"}
	if _, err := e.p.Launch(ctx, stuck); err != nil {
		t.Fatal(err)
	}
	outage := readOutage(b)
	outage.Store(true)
	b.Script(&pt.Rule{Op: pt.OpDelete, Err: pe(provider.Transient, "HTTP 503")})
	if err := e.p.Delete(ctx, "stuck"); !errors.Is(err, gpuprov.ErrTeardownIncomplete) {
		t.Fatalf("delete during the outage: %v", err)
	}
	// One a live process drives, parked in connect with a long lease.
	parked := &parkedConnector{in: make(chan struct{})}
	live := e.provisioner(e.j, gpuprov.WithConnector(parked), gpuprov.WithLeaseTTL(time.Hour))
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go live.Launch(lctx, h100("busy"))
	<-parked.in

	e.clk.Advance(2 * time.Minute) // the dead launches' leases expire
	rep, err := e.p.Recover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]gpuprov.Outcome{
		"busy":   gpuprov.OutcomeSkipped,
		"doomed": gpuprov.OutcomeFailed,
		"resume": gpuprov.OutcomeReady,
		"stuck":  gpuprov.OutcomeTeardownIncomplete,
	}
	if len(rep.VMs) != len(want) {
		t.Fatalf("report %+v, want one entry for each of %v", rep.VMs, want)
	}
	for i, v := range rep.VMs {
		if i > 0 && rep.VMs[i-1].Name >= v.Name {
			t.Fatalf("report not sorted by name: %+v", rep.VMs)
		}
		if v.Outcome != want[v.Name] {
			t.Errorf("%s: outcome %s (err %v, reason %q), want %s", v.Name, v.Outcome, v.Err, v.Reason, want[v.Name])
		}
		switch v.Name {
		case "busy":
			if v.Owner != live.Owner() || v.Reason == "" {
				t.Errorf("busy: skipped as owned by %q (%q), want %q with a reason", v.Owner, v.Reason, live.Owner())
			}
		case "doomed":
			if !errors.Is(v.Err, gpuprov.ErrAborted) || v.State != journal.StateProvisioning {
				t.Errorf("doomed: err %v from state %s", v.Err, v.State)
			}
		case "stuck":
			if v.State != journal.StateDeleting || !errors.Is(v.Err, gpuprov.ErrTeardownIncomplete) {
				t.Errorf("stuck: err %v from state %s", v.Err, v.State)
			}
		case "resume":
			if v.Err != nil {
				t.Errorf("resume: %v", v.Err)
			}
		}
	}
}

// RecoverReport says when Recover finished a teardown that a dead process
// had begun, and when it stopped driving a VM before an end (here its
// journal writes fail), leaving it for a later Recover, which resumes it.
func TestRecoverReportSaysWhenATeardownFinishedOrDrivingStopped(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()

	// A Delete whose process died once the VM was journaled deleting,
	// before anything was sent to the cloud.
	if _, err := e.p.Launch(ctx, h100("leaving")); err != nil {
		t.Fatal(err)
	}
	dying := e.provisioner(&crashJournal{Journal: e.j, left: 1})
	if err := dying.Delete(ctx, "leaving"); !errors.Is(err, errCrash) {
		t.Fatalf("delete: %v", err)
	}
	dying.Close()
	if row, err := e.j.GetVM(ctx, "leaving"); err != nil || row.State != journal.StateDeleting || len(e.liveOf("leaving")) != 1 {
		t.Fatalf("before recover: %+v %v, live %v; want deleting with its instance", row.State, err, e.liveOf("leaving"))
	}
	// A launch killed early, which the recovering process cannot journal.
	crashed := e.provisioner(&crashJournal{Journal: e.j, left: 3})
	if _, err := crashed.Launch(ctx, h100("cut")); !errors.Is(err, errCrash) {
		t.Fatalf("launch: %v", err)
	}
	crashed.Close()

	e.clk.Advance(2 * time.Minute) // the dead processes' leases expire
	rec := e.provisioner(&cutJournal{Journal: e.j, vm: "cut"})
	rep, err := rec.Recover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.VMs) != 2 {
		t.Fatalf("report %+v, want cut and leaving", rep.VMs)
	}
	cut, leaving := rep.VMs[0], rep.VMs[1]
	if leaving.Name != "leaving" || leaving.Outcome != gpuprov.OutcomeDeleted || leaving.State != journal.StateDeleting || leaving.Err != nil {
		t.Errorf("leaving: %+v, want deleted from state deleting without error", leaving)
	}
	if row := e.assertClean("leaving"); row.State != journal.StateDeleted {
		t.Errorf("leaving: journal says %s after Recover finished its teardown", row.State)
	}
	if cut.Name != "cut" || cut.Outcome != gpuprov.OutcomeInterrupted || !errors.Is(cut.Err, errJournalDown) || cut.State != journal.StateProvisioning {
		t.Errorf("cut: %+v, want interrupted with the journal's error, found provisioning", cut)
	}
	if row, err := e.j.GetVM(ctx, "cut"); err != nil || !row.State.Active() {
		t.Fatalf("cut after the interrupted recover: %s %v, want still active", row.State, err)
	}

	// The journal is back: the next Recover finishes what was interrupted.
	rep, err = e.p.Recover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.VMs) != 1 || rep.VMs[0].Name != "cut" || rep.VMs[0].Outcome != gpuprov.OutcomeReady {
		t.Fatalf("second recover: %+v, want cut ready", rep.VMs)
	}
	e.assertClean("cut")
}

var errJournalDown = errors.New("journal unreachable")

// cutJournal fails every write about one VM, as a journal a process has
// lost its connection to would, and lets every other through.
type cutJournal struct {
	journal.Journal
	vm string
}

func (c *cutJournal) Commit(ctx context.Context, s *journal.Step) error {
	about := (s.Update != nil && s.Update.Name == c.vm) || (s.Create != nil && s.Create.Name == c.vm)
	for _, ev := range s.Events {
		about = about || ev.VM == c.vm
	}
	if about {
		return errJournalDown
	}
	return c.Journal.Commit(ctx, s)
}

// liveOf returns the live instances of one VM on every fake.
func (e *env) liveOf(vm string) []pt.Instance {
	var out []pt.Instance
	for _, in := range e.live() {
		if in.VM == vm {
			out = append(out, in)
		}
	}
	return out
}

// TestRecoverAfterTheLaunchDeadlinePassed: the process launching a VM died
// after its create went out, and no process drove the VM until after the
// launch's deadline. Recover must end the launch as it would have ended in
// time (failed, everything it started torn down), not leave the VM
// provisioning with its instance billing: a takeover whose deadline has
// already passed still reads the VM's attempts and tears them down.
func TestRecoverAfterTheLaunchDeadlinePassed(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	f := e.fakes[0]
	cj := &crashAfterCreate{crashJournal: &crashJournal{Journal: e.j, left: -1}, f: f}
	dying := e.provisioner(cj)
	req := h100("late")
	req.Timeout = 20 * time.Minute
	if _, err := dying.Launch(ctx, req); !errors.Is(err, errCrash) {
		t.Fatalf("launch: %v, want the crash", err)
	}
	dying.Close()
	if live := e.liveOf("late"); len(live) != 1 {
		t.Fatalf("live before recover: %v, want the one instance the dead launch made", live)
	}

	e.clk.Advance(time.Hour) // past the launch's deadline and the dead lease
	rep, err := e.p.Recover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.VMs) != 1 || rep.VMs[0].Outcome != gpuprov.OutcomeFailed || !errors.Is(rep.VMs[0].Err, context.DeadlineExceeded) {
		t.Fatalf("report %+v, want late failed by its deadline", rep.VMs)
	}
	if row := e.assertClean("late"); row.State != journal.StateFailed {
		t.Fatalf("late ended %s (%s), want failed", row.State, row.LastError)
	}
	if live := e.liveOf("late"); len(live) != 0 {
		t.Fatalf("leaked %v", live)
	}
}
