package sim_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/provider/sim"
	"github.com/org/gpuprov/provider/sim/simserver"
)

// blocks gives the cloud two offerings of one 8×H100 instance for 24 h:
// a cheap one starting in 2 h and a dear one starting in 1 h.
func blocks(c *simserver.CloudConfig) {
	c.BlockOfferings = []simserver.BlockOffering{
		{ID: "blk-cheap", OfferID: "a-h100x8-use1a", Count: 1, StartIn: simserver.Duration(2 * time.Hour),
			Duration: simserver.Duration(24 * time.Hour), UpfrontFee: 900, Reclaims: simserver.Duration(30 * time.Minute)},
		{ID: "blk-dear", OfferID: "a-h100x8-use1a", Count: 1, StartIn: simserver.Duration(time.Hour),
			Duration: simserver.Duration(24 * time.Hour), UpfrontFee: 1500, Reclaims: simserver.Duration(30 * time.Minute)},
	}
}

func blockReq(name string, most float64) gpuprov.Request {
	return gpuprov.Request{Name: name, GPU: "H100", GPUCount: 8, Timeout: 4 * time.Hour,
		Block: &gpuprov.BlockRequest{Duration: 24 * time.Hour, MaxUpfrontUSD: most}}
}

// TestBlockBoughtUnderTheCapThenLaunchedAtItsStart: the block over the cap
// is left out; the other is bought once, journaled before it is sent; the
// launch waits for its start, lands in it, and is leashed 35 minutes
// before its end (it reclaims its instances 30 minutes before).
func TestBlockBoughtUnderTheCapThenLaunchedAtItsStart(t *testing.T) {
	e := newEngineEnvOf(t, blocks, simserver.Faults{}, sim.Config{})
	start := e.clk.Now().Add(2 * time.Hour)
	vm, err := e.p.Launch(context.Background(), blockReq("blk-1", 1000))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(vm.Reservation, "cb-") || vm.ReadyAt.Before(start) {
		t.Fatalf("blk-1: reservation %q ready at %v; want a bought block, ready after its start %v", vm.Reservation, vm.ReadyAt, start)
	}
	if want := start.Add(24*time.Hour - 35*time.Minute); !vm.ExpiresAt.Equal(want) {
		t.Fatalf("expires at %v, want %v", vm.ExpiresAt, want)
	}
	if st, _ := e.srv.Stats(cloudName); st.BlocksBought != 1 {
		t.Fatalf("%d blocks bought, want 1", st.BlocksBought)
	}
	if got := e.reservationOf(t)["blk-1"]; got != vm.Reservation {
		t.Fatalf("the sim's instance is in %q, want %q", got, vm.Reservation)
	}
	_, evs, err := e.p.History(context.Background(), "blk-1")
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, ev := range evs {
		switch ev.Type {
		case gpuprov.EvBlockPurchase, gpuprov.EvBlockBought, gpuprov.EvCreateSent:
			order = append(order, ev.Type)
		}
	}
	if strings.Join(order, ",") != "block-purchase,block-bought,create-sent" {
		t.Fatalf("journaled %v; want the purchase, the bought block, then the create", order)
	}
	// At the leash's end a reaper deletes it, before the block reclaims it.
	e.clk.Advance(vm.ExpiresAt.Sub(e.clk.Now()) + time.Second)
	if got, err := e.p.Reap(context.Background()); err != nil || len(got) != 1 || got[0].Name != "blk-1" || got[0].Err != nil {
		t.Fatalf("reap at the leash's end: %+v, %v", got, err)
	}
	e.noneReclaimed(t)
	// A cluster buys no blocks: one per node would be bought otherwise.
	_, err = e.p.LaunchCluster(context.Background(), gpuprov.ClusterRequest{Name: "blk-c", Nodes: 2, Node: blockReq("", 1000)})
	if !errors.Is(err, gpuprov.ErrInvalidRequest) || !strings.Contains(err.Error(), "node.block") {
		t.Fatalf("a cluster with a block: %v, want an invalid request naming node.block", err)
	}
	if st, _ := e.srv.Stats(cloudName); st.BlocksBought != 1 {
		t.Fatalf("%d blocks bought, want still 1", st.BlocksBought)
	}
}

// TestBlockOverTheCapIsNotBought: every offering costs more than the cap:
// the launch fails saying so, and nothing is bought.
func TestBlockOverTheCapIsNotBought(t *testing.T) {
	e := newEngineEnvOf(t, blocks, simserver.Faults{}, sim.Config{})
	_, err := e.p.Launch(context.Background(), blockReq("blk-2", 500))
	if !errors.Is(err, gpuprov.ErrNoOffers) || !strings.Contains(err.Error(), "block blk-cheap costs $900.00 upfront, over the cap of $500.00") {
		t.Fatalf("launch under a $500 cap: %v; want no offers naming the cheapest block's fee", err)
	}
	if st, _ := e.srv.Stats(cloudName); st.BlocksBought != 0 {
		t.Fatalf("%d blocks bought, want none", st.BlocksBought)
	}
	_, err = e.p.Launch(context.Background(), gpuprov.Request{Name: "blk-3", GPU: "H100", Block: &gpuprov.BlockRequest{Duration: time.Hour}})
	if !errors.Is(err, gpuprov.ErrInvalidRequest) || !strings.Contains(err.Error(), "max_upfront_usd") {
		t.Fatalf("a block without a price cap: %v, want an invalid request naming max_upfront_usd", err)
	}
}

// TestBlockPurchaseSurvivesACrash: the process dies right after sending
// the purchase, before it could journal the block; another process's
// Recover finds the block by its labels, does not buy a second, and
// launches into it.
func TestBlockPurchaseSurvivesACrash(t *testing.T) {
	e := newEngineEnvOf(t, blocks, simserver.Faults{}, sim.Config{})
	// The purchase goes out; nothing after it is journaled.
	db := e.crashAt(t, gpuprov.EvBlockPurchase, blockReq("blk-4", 1000))
	if row, _ := db.GetVM(context.Background(), "blk-4"); row.Phase != gpuprov.PhasePurchaseSent {
		t.Fatalf("after the crash blk-4 is in phase %q, want %q", row.Phase, gpuprov.PhasePurchaseSent)
	}
	if st, _ := e.srv.Stats(cloudName); st.BlocksBought != 1 {
		t.Fatalf("%d blocks bought before the crash, want 1", st.BlocksBought)
	}
	vm, err := e.recoverIn(t, db).Get(context.Background(), "blk-4")
	if err != nil || vm.State != gpuprov.StateReady || !strings.HasPrefix(vm.Reservation, "cb-") {
		t.Fatalf("after recover: %+v, %v; want blk-4 ready in the bought block", vm, err)
	}
	if st, _ := e.srv.Stats(cloudName); st.BlocksBought != 1 {
		t.Fatalf("%d blocks bought after recover, want still 1", st.BlocksBought)
	}
}

// TestBlockBoughtIsNeverReplaced: the machine in a bought block fails to
// boot; the launch ends failed saying the block stays bought, and no
// second block is bought, though another offering fits the cap.
func TestBlockBoughtIsNeverReplaced(t *testing.T) {
	e := newEngineEnvOf(t, blocks, simserver.Faults{BootFailOffers: []string{"a-h100x8-use1a"}}, sim.Config{})
	_, err := e.p.Launch(context.Background(), blockReq("blk-5", 2000))
	if err == nil || !strings.Contains(err.Error(), "stays bought until") || !strings.Contains(err.Error(), "launch into it with reservation cb-") {
		t.Fatalf("launch whose block's machine fails: %v; want a failure naming the block that stays bought", err)
	}
	if st, _ := e.srv.Stats(cloudName); st.BlocksBought != 1 {
		t.Fatalf("%d blocks bought, want 1", st.BlocksBought)
	}
	if vm, _ := e.p.Get(context.Background(), "blk-5"); vm.State != journal.StateFailed || len(e.live(t, "blk-5")) != 0 {
		t.Fatalf("blk-5 is %s with %d instances; want failed, torn down", vm.State, len(e.live(t, "blk-5")))
	}
}
