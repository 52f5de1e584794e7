package gpuprov_test

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/provider"
	pt "github.com/org/gpuprov/provider/providertest"
)

// history is what History returns of a VM.
type history struct {
	Attempts []journal.Attempt
	Events   []gpuprov.Event
}

func (e *env) history(name string) history {
	e.t.Helper()
	as, evs, err := e.p.History(context.Background(), name)
	if err != nil {
		e.t.Fatalf("History(%s): %v", name, err)
	}
	return history{as, evs}
}

// launchAndDelete launches the VM named name and deletes it.
func (e *env) launchAndDelete(name string) {
	e.t.Helper()
	ctx := context.Background()
	if _, err := e.p.Launch(ctx, h100(name)); err != nil {
		e.t.Fatalf("launch %s: %v", name, err)
	}
	if err := e.p.Delete(ctx, name); err != nil {
		e.t.Fatalf("delete %s: %v", name, err)
	}
}

// TestPruneRemovesWhatEndedBeforeTheRetention: a VM deleted and a VM that
// failed more than the retention ago are gone from the journal after
// Prune (Get and History say ErrNotFound), with the expired blocks; a ready
// VM and a VM deleted recently are intact, as are the live blocks.
func TestPruneRemovesWhatEndedBeforeTheRetention(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.launchAndDelete("old-deleted")
	e.fake("a").Script(&pt.Rule{Op: pt.OpPrepare, Match: func(c *pt.Call) bool { return c.VM == "old-failed" },
		Err: pe(provider.InvalidRequest, "bad image")})
	if _, err := e.p.Launch(ctx, h100("old-failed")); !errors.Is(err, gpuprov.ErrAborted) {
		t.Fatalf("launch old-failed: %v, want ErrAborted", err)
	}
	if _, err := e.p.Launch(ctx, h100("ready")); err != nil {
		t.Fatal(err)
	}
	removed := 0
	var removedAttempts, removedEvents int
	for _, name := range []string{"old-deleted", "old-failed"} {
		h := e.history(name)
		removed++
		removedAttempts += len(h.Attempts)
		removedEvents += len(h.Events)
	}

	e.clk.Advance(gpuprov.DefaultRetention + time.Hour)
	e.launchAndDelete("recent")
	now := e.clk.Now()
	expired := journal.Block{Key: "offer:a|x", Scope: "offer", Provider: "a", ErrorKind: "capacity", Until: now.Add(-time.Minute), CreatedAt: now.Add(-time.Hour)}
	live := journal.Block{Key: "offer:a|y", Scope: "offer", Provider: "a", ErrorKind: "capacity", Until: now.Add(time.Hour), CreatedAt: now}
	if err := e.j.Commit(ctx, &journal.Step{Blocks: []journal.Block{expired, live}}); err != nil {
		t.Fatal(err)
	}
	kept := map[string]history{}
	keptVMs := map[string]*gpuprov.VM{}
	for _, name := range []string{"ready", "recent"} {
		kept[name] = e.history(name)
		v, err := e.p.Get(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		keptVMs[name] = v
	}

	res, err := e.p.Prune(ctx)
	if err != nil {
		t.Fatalf("Prune: %v", err)
	}
	want := journal.PruneResult{VMs: removed, Attempts: removedAttempts, Events: removedEvents, Blocks: 1}
	if res != want || removedAttempts == 0 || removedEvents == 0 {
		t.Errorf("Prune = %+v, want %+v", res, want)
	}
	for _, name := range []string{"old-deleted", "old-failed"} {
		if _, err := e.p.Get(ctx, name); !errors.Is(err, gpuprov.ErrNotFound) {
			t.Errorf("Get(%s) after Prune: %v, want ErrNotFound", name, err)
		}
		if _, _, err := e.p.History(ctx, name); !errors.Is(err, gpuprov.ErrNotFound) {
			t.Errorf("History(%s) after Prune: %v, want ErrNotFound", name, err)
		}
	}
	for name, h := range kept {
		v, err := e.p.Get(ctx, name)
		if err != nil || !reflect.DeepEqual(v, keptVMs[name]) {
			t.Errorf("Get(%s) after Prune = %+v, %v; want it as before: %+v", name, v, err, keptVMs[name])
		}
		if got := e.history(name); !reflect.DeepEqual(got, h) {
			t.Errorf("History(%s) after Prune: %d attempts, %d events; want the %d and %d it had", name, len(got.Attempts), len(got.Events), len(h.Attempts), len(h.Events))
		}
	}
	if bs, err := e.j.Blocks(ctx, time.Time{}); err != nil || len(bs) != 1 || bs[0].Key != live.Key {
		t.Errorf("blocks after Prune: %+v, %v; want only %s", bs, err, live.Key)
	}
	// The ready VM still works: it can be deleted, and a pruned name used again.
	if err := e.p.Delete(ctx, "ready"); err != nil {
		t.Errorf("delete the ready VM after Prune: %v", err)
	}
	e.launchAndDelete("old-deleted")

	if res, err := e.p.Prune(ctx); err != nil || res != (journal.PruneResult{}) {
		t.Errorf("Prune again = %+v, %v; want nothing removed", res, err)
	}
}

// TestPruneWithRetentionZeroKeepsEverything: WithRetention(0) turns
// pruning off.
func TestPruneWithRetentionZeroKeepsEverything(t *testing.T) {
	e := newEnv(t, gpuprov.WithRetention(0))
	ctx := context.Background()
	e.launchAndDelete("old")
	before := e.history("old")
	e.clk.Advance(10 * 365 * 24 * time.Hour)
	if res, err := e.p.Prune(ctx); err != nil || res != (journal.PruneResult{}) {
		t.Fatalf("Prune with retention 0 = %+v, %v; want nothing removed, nil", res, err)
	}
	if v, err := e.p.Get(ctx, "old"); err != nil || v.State != journal.StateDeleted {
		t.Fatalf("Get after Prune with retention 0: %+v, %v", v, err)
	}
	if got := e.history("old"); !reflect.DeepEqual(got, before) {
		t.Errorf("History after Prune with retention 0 changed: %d attempts, %d events; want %d, %d",
			len(got.Attempts), len(got.Events), len(before.Attempts), len(before.Events))
	}
}

// TestPruneWithRetention: a shorter retention prunes sooner, and only what
// ended before it.
func TestPruneWithRetention(t *testing.T) {
	e := newEnv(t, gpuprov.WithRetention(time.Hour))
	ctx := context.Background()
	e.launchAndDelete("a")
	e.clk.Advance(30 * time.Minute)
	if res, err := e.p.Prune(ctx); err != nil || res.VMs != 0 {
		t.Fatalf("Prune 30 minutes after the delete = %+v, %v; want nothing removed", res, err)
	}
	e.clk.Advance(31 * time.Minute)
	if res, err := e.p.Prune(ctx); err != nil || res.VMs != 1 {
		t.Fatalf("Prune 61 minutes after the delete = %+v, %v; want the VM removed", res, err)
	}
	if _, err := e.p.Get(ctx, "a"); !errors.Is(err, gpuprov.ErrNotFound) {
		t.Errorf("Get after Prune: %v, want ErrNotFound", err)
	}
}

// noPrune is a journal that cannot prune.
type noPrune struct{ journal.Journal }

// TestPruneUnsupported: a journal that is not a journal.Pruner makes
// Prune fail with errors.ErrUnsupported, and changes nothing.
func TestPruneUnsupported(t *testing.T) {
	e := newEnv(t)
	p := e.provisioner(noPrune{e.j})
	_, err := p.Prune(context.Background())
	if !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Prune on a journal without Prune: %v, want errors.ErrUnsupported", err)
	}
}
