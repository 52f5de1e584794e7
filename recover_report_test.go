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
