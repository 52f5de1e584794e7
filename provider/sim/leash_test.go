package sim_test

import (
	"context"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/journal/sqlite"
	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/sim"
	"github.com/org/gpuprov/provider/sim/simserver"
)

// TestEngineWaitsForTheSimsStock: every offer of the sim is stocked out; a
// launch that waits for capacity waits (only listing offers while it
// waits: one plan refresh per poll interval) and becomes ready as soon as
// the sim's stock returns, before its stockout blocks expire.
func TestEngineWaitsForTheSimsStock(t *testing.T) {
	var (
		mu        sync.Mutex
		e         *engineEnv
		waitStart time.Time
		cleared   time.Time
		last      simserver.Stats
		dirty     bool // an attempt since the last waiting event
		pureWaits int
		pureCalls = map[string]int{}
	)
	sink := func(ev gpuprov.Event) {
		mu.Lock()
		defer mu.Unlock()
		switch ev.Type {
		case gpuprov.EvAttempt:
			dirty = true
		case gpuprov.EvWaiting:
			st, err := e.srv.Stats(cloudName)
			if err != nil {
				t.Error(err)
				return
			}
			if waitStart.IsZero() {
				waitStart = e.clk.Now()
			} else if !dirty {
				// A wake that found nothing: what it cost the cloud.
				pureWaits++
				for k, n := range st.Calls {
					if d := n - last.Calls[k]; d > 0 {
						pureCalls[k] += d
					}
				}
			}
			last, dirty = simserver.Stats{Calls: maps.Clone(st.Calls)}, false
			if cleared.IsZero() && e.clk.Now().Sub(waitStart) >= 25*time.Minute {
				// The stock returns.
				if err := e.srv.SetFaults(cloudName, simserver.Faults{}); err != nil {
					t.Error(err)
				}
				cleared = e.clk.Now()
			}
		}
	}
	// With no grace the shared firewall goes in the teardown of the wake
	// that tried an offer, instead of a grace later in a wake that found
	// nothing, so that each wake's calls are its own.
	e = newEngineEnv(t, simserver.Faults{StockoutRegions: []string{"*"}}, sim.Config{},
		gpuprov.WithCapacityPoll(time.Minute), gpuprov.WithEvents(sink), gpuprov.WithSharedGrace(0))
	req := engineReq("scarce")
	req.WaitForCapacity, req.Timeout = true, 6*time.Hour
	vm, err := e.p.Launch(context.Background(), req)
	if err != nil {
		t.Fatalf("launch: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if cleared.IsZero() {
		t.Fatal("the launch never waited 25 minutes")
	}
	if vm.State != gpuprov.StateReady || len(e.live(t, "scarce")) != 1 {
		t.Fatalf("ended %s with %d instances; want ready with one", vm.State, len(e.live(t, "scarce")))
	}
	// Blocks last 10 minutes; the stock signal must beat them: ready within
	// a poll interval (and the plan cache) of the stock's return.
	if after := vm.ReadyAt.Sub(cleared); after < 0 || after > time.Minute+30*time.Second {
		t.Errorf("ready %v after the stock returned; want within the 1-minute poll", after)
	}
	if pureWaits < 10 {
		t.Fatalf("only %d wakes found nothing in %v of waiting", pureWaits, cleared.Sub(waitStart))
	}
	for k, n := range pureCalls {
		if k != "list_offers" && k != "list_quotas" {
			t.Errorf("%d %s calls while waiting; only offer listings and quota reads are allowed", n, k)
		}
	}
	// Quotas are read once per region (H100s are offered in two) per
	// DefaultQuotaTTL, not at every plan.
	if n, most := pureCalls["list_quotas"], 2*(int(cleared.Sub(waitStart)/gpuprov.DefaultQuotaTTL)+1); n > most {
		t.Errorf("%d quota reads in %v of waiting; want at most %d", n, cleared.Sub(waitStart), most)
	}
	if n := pureCalls["list_offers"]; n > pureWaits {
		t.Errorf("%d offer listings in %d wakes; want at most one each", n, pureWaits)
	}
	t.Logf("waited %v: %d wakes that found nothing, %v calls in them", cleared.Sub(waitStart), pureWaits, pureCalls)
}

// TestEngineTTLAndMaxCostReapedByAnotherProcess: VMs launched on the sim by
// one process, which then dies, are deleted by another process's Reap when
// their TTL or cost cap expires; the sim confirms nothing of them is left.
func TestEngineTTLAndMaxCostReapedByAnotherProcess(t *testing.T) {
	e := newEngineEnv(t, simserver.Faults{}, sim.Config{})
	ttl := engineReq("ttl-1")
	ttl.TTL = 2 * time.Hour
	capped := engineReq("cost-1")
	capped.MaxCost = 1 // at the sim's H100 price, under an hour
	for _, r := range []gpuprov.Request{ttl, capped} {
		if _, err := e.p.Launch(context.Background(), r); err != nil {
			t.Fatalf("launch %s: %v", r.Name, err)
		}
	}
	e.p.Close() // the launcher is gone
	path := e.j.(interface{ Path() string }).Path()

	db, err := sqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	p, _ := newProviderWithInstallation(t, e.srv, sim.Config{PollInterval: time.Second, ConsistencyWindow: 10 * time.Second}, db.Installation(), e.clk)
	p2, err := gpuprov.New(db, gpuprov.WithProvider(p), gpuprov.WithClock(e.clk), gpuprov.WithOwner("other-host/1/1/x"))
	if err != nil {
		t.Fatal(err)
	}
	defer p2.Close()
	for _, name := range []string{"cost-1", "ttl-1"} {
		row, err := db.GetVM(context.Background(), name)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := p2.Reap(context.Background()); err != nil || len(got) != 0 {
			t.Fatalf("reap before %s's expiry: %+v, %v", name, got, err)
		}
		e.clk.Advance(row.ExpiresAt.Sub(e.clk.Now()) + time.Second)
		got, err := p2.Reap(context.Background())
		if err != nil || len(got) != 1 || got[0].Name != name || got[0].Err != nil {
			t.Fatalf("reap after %s's expiry: %+v, %v; want %s deleted", name, got, err, name)
		}
		if live := e.live(t, name); len(live) != 0 {
			t.Errorf("the sim still runs %s: %+v", name, live)
		}
		if row, _ := db.GetVM(context.Background(), name); row.State != journal.StateDeleted {
			t.Errorf("%s is %s; want deleted", name, row.State)
		}
	}
}

// TestEngineJobNeedsReachTheSim: a request's disk size and labels reach the
// sim's instance and firewall; its vCPU and memory needs pick the offer.
func TestEngineJobNeedsReachTheSim(t *testing.T) {
	e := newEngineEnv(t, simserver.Faults{}, sim.Config{})
	req := engineReq("needs-1")
	req.DiskGB, req.MinVCPUs, req.MinMemoryGB = 750, 100, 1000
	req.GPUCount = 8 // only the 8-GPU machine has the vCPUs and memory
	req.Labels = map[string]string{"team": "ml", "run": "exp-42"}
	vm, err := e.p.Launch(context.Background(), req)
	if err != nil {
		t.Fatalf("launch: %v", err)
	}
	live := e.live(t, "needs-1")
	if len(live) != 1 {
		t.Fatalf("%d instances", len(live))
	}
	in := live[0]
	if in.DiskGB != 750 || in.VCPUs < 100 || in.MemoryGB < 1000 || in.InstanceType != "gpu.h100.8x" {
		t.Errorf("instance %s: disk %d GB, %d vCPUs, %g GB; want 750, ≥100, ≥1000", in.InstanceType, in.DiskGB, in.VCPUs, in.MemoryGB)
	}
	if in.Labels["team"] != "ml" || in.Labels["run"] != "exp-42" || in.Labels[provider.LabelVM] != "needs-1" {
		t.Errorf("instance labels %v; want the request's beside the identity", in.Labels)
	}
	side, err := e.srv.SideResources(cloudName)
	if err != nil {
		t.Fatal(err)
	}
	for _, fw := range side.Firewalls {
		if fw.Labels[provider.LabelVM] == "needs-1" && fw.Labels["team"] != "ml" {
			t.Errorf("firewall %s labels %v lack the request's", fw.Name, fw.Labels)
		}
	}
	if vm.Request.DiskGB != 750 {
		t.Errorf("the journaled request lost its disk: %+v", vm.Request)
	}
}
