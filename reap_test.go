package gpuprov_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/clock"
	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/journal/sqlite"
)

// TestTTLAndMaxCostEnforcedByAnotherProcess: the launcher becomes ready and
// dies; a second process on the same journal deletes each VM exactly when
// its TTL or its cost cap expires (not before), and confirms the teardown.
func TestTTLAndMaxCostEnforcedByAnotherProcess(t *testing.T) {
	clk := clock.NewFake(t0)
	e := newEnvWith(t, clk, standardFakes(clk))
	stop := clk.AutoAdvance()
	ttl := h100("leashed")
	ttl.TTL = 8 * time.Hour
	capped := h100("capped") // the $2.00/h offer: $5 lasts 2h30m
	capped.MaxCost = 5
	both := h100("both") // $2.00/h: its TTL of 1h comes before $50 (25h)
	both.TTL, both.MaxCost = time.Hour, 50
	free := h100("free")
	var ready = map[string]time.Time{}
	for _, r := range []gpuprov.Request{ttl, capped, both, free} {
		vm, err := e.p.Launch(context.Background(), r)
		if err != nil {
			t.Fatalf("launch %s: %v", r.Name, err)
		}
		ready[r.Name] = vm.ReadyAt
	}
	stop()
	e.p.Close() // the launcher is gone

	rows := map[string]journal.VM{}
	for name := range ready {
		rows[name], _ = e.j.GetVM(context.Background(), name)
	}
	if got, want := rows["leashed"].ExpiresAt, ready["leashed"].Add(8*time.Hour); !got.Equal(want) {
		t.Errorf("leashed expires at %v; want ready + 8h = %v", got, want)
	}
	// The cap is on the bill, which counts from the create's acceptance
	// (docs/cost.md), not from ready.
	price := rows["capped"].PricePerHour
	as, err := e.j.Attempts(context.Background(), "capped")
	if err != nil || len(as) != 1 {
		t.Fatalf("capped's attempts: %+v, %v", as, err)
	}
	if got, want := rows["capped"].ExpiresAt, as[0].CreateSent.Add(time.Duration(5/price*float64(time.Hour))); !got.Equal(want) {
		t.Errorf("capped ($%v/h, $5 cap) expires at %v; want its create + $5 of time, %v", price, got, want)
	}
	if got, want := rows["both"].ExpiresAt, ready["both"].Add(time.Hour); !got.Equal(want) {
		t.Errorf("both expires at %v; want its TTL first, %v", got, want)
	}
	if !rows["free"].ExpiresAt.IsZero() {
		t.Errorf("a VM without limits expires at %v", rows["free"].ExpiresAt)
	}

	// Another process: its own journal handle and owner.
	db2, err := sqlite.Open(context.Background(), e.path)
	if err != nil {
		t.Fatal(err)
	}
	defer db2.Close()
	e.j = db2
	p2 := e.provisioner(db2, gpuprov.WithOwner("reaper-host/1/1/x"))
	reapAt := func(at time.Time) map[string]string {
		t.Helper()
		clk.Advance(at.Sub(clk.Now()))
		stop := clk.AutoAdvance()
		defer stop()
		got, err := p2.Reap(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, r := range got {
			if r.Err != nil {
				t.Fatalf("reap %s: %v", r.Name, r.Err)
			}
			out[r.Name] = r.Why
		}
		return out
	}
	if got := reapAt(rows["both"].ExpiresAt.Add(-time.Second)); len(got) != 0 {
		t.Fatalf("reaped %v a second before any expiry", got)
	}
	if got := reapAt(rows["both"].ExpiresAt); len(got) != 1 || !strings.Contains(got["both"], "TTL of 1h0m0s") {
		t.Fatalf("at both's TTL reaped %v; want both, by its TTL", got)
	}
	if got := reapAt(rows["capped"].ExpiresAt.Add(time.Second)); len(got) != 1 || !strings.Contains(got["capped"], "cap of $5.00") {
		t.Fatalf("after capped's cost cap reaped %v; want capped, by its cost", got)
	}
	if got := reapAt(rows["leashed"].ExpiresAt.Add(time.Minute)); len(got) != 1 || got["leashed"] == "" {
		t.Fatalf("after leashed's TTL reaped %v; want leashed", got)
	}
	if got := reapAt(rows["leashed"].ExpiresAt.Add(1000 * time.Hour)); len(got) != 0 {
		t.Fatalf("reaped %v again; only free is left and it has no limit", got)
	}
	for _, name := range []string{"leashed", "capped", "both"} {
		if row := e.assertClean(name); row.State != journal.StateDeleted {
			t.Errorf("%s ended %s; want deleted", name, row.State)
		}
		_, evs, err := p2.History(context.Background(), name)
		if err != nil {
			t.Fatal(err)
		}
		var deleting string
		for _, ev := range evs {
			if ev.Type == gpuprov.EvDeleting {
				deleting = ev.Message
			}
		}
		if !strings.HasPrefix(deleting, "expired: ") {
			t.Errorf("%s's deleting event says %q; want why it expired", name, deleting)
		}
	}
	if row := e.assertClean("free"); row.State != journal.StateReady {
		t.Errorf("free ended %s; want still ready", row.State)
	}
}

// TestReaperInTheBackgroundAndRecover: WithReaper deletes an expired VM of
// a launcher that crashed with no call from its owner, and Recover reaps too.
func TestReaperInTheBackgroundAndRecover(t *testing.T) {
	for _, how := range []string{"WithReaper", "Recover"} {
		t.Run(how, func(t *testing.T) {
			clk := clock.NewFake(t0)
			e := newEnvWith(t, clk, standardFakes(clk))
			stop := clk.AutoAdvance()
			defer stop()
			req := h100("short")
			req.TTL = 30 * time.Minute
			if _, err := e.p.Launch(context.Background(), req); err != nil {
				t.Fatal(err)
			}
			e.p.Close()
			db2, err := sqlite.Open(context.Background(), e.path)
			if err != nil {
				t.Fatal(err)
			}
			defer db2.Close()
			e.j = db2
			switch how {
			case "WithReaper":
				p2 := e.provisioner(db2, gpuprov.WithReaper(time.Minute))
				deadline := time.Now().Add(30 * time.Second)
				for {
					row, err := db2.GetVM(context.Background(), "short")
					if err != nil {
						t.Fatal(err)
					}
					if row.State == journal.StateDeleted {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("the reaper did not delete the expired VM (state %s, clock %v, expiry %v)", row.State, clk.Now(), row.ExpiresAt)
					}
					time.Sleep(time.Millisecond)
				}
				p2.Close()
			case "Recover":
				clk.Advance(31 * time.Minute)
				p2 := e.provisioner(db2)
				rep, err := p2.Recover(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				if len(rep.Reaped) != 1 || rep.Reaped[0].Name != "short" || rep.Reaped[0].Err != nil {
					t.Fatalf("recover reaped %+v; want short", rep.Reaped)
				}
			}
			if row := e.assertClean("short"); row.State != journal.StateDeleted || row.EndedAt.Before(row.ExpiresAt) {
				t.Fatalf("ended %s at %v (expiry %v); want deleted after its expiry", row.State, row.EndedAt, row.ExpiresAt)
			}
		})
	}
}
