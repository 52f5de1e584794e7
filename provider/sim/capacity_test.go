package sim_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/sim"
	"github.com/org/gpuprov/provider/sim/simserver"
)

// reserve gives the cloud a reservation of count slots of catalog A's
// cheapest single H100 offer (us-east, $2.49/h on-demand).
func reserve(id string, count int, targeted bool) func(*simserver.CloudConfig) {
	return func(c *simserver.CloudConfig) {
		c.Reservations = append(c.Reservations, simserver.Reservation{ID: id, OfferID: "a-h100x1-use1a", Count: count, Targeted: targeted})
	}
}

// reservationOf returns the reservation each live instance of the cloud
// was launched into, by VM name ("" for ordinary capacity).
func (e *engineEnv) reservationOf(t *testing.T) map[string]string {
	t.Helper()
	insts, err := e.srv.Instances(cloudName)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, in := range insts {
		if in.Status != simserver.StatusTerminated {
			out[in.Labels[provider.LabelVM]] = in.ReservationID
		}
	}
	return out
}

// TestReservationFilledFirstThenOnDemand is the first scene: a
// reservation with 2 free slots and on-demand stock of the same shape; 3
// launches put 2 in the reservation and the third on-demand, and the plan
// says why (the reservation first at a marginal $0/h, then full).
func TestReservationFilledFirstThenOnDemand(t *testing.T) {
	e := newEngineEnvOf(t, reserve("res-h100", 2, false), simserver.Faults{}, sim.Config{}, gpuprov.WithPlanCache(0))
	ctx := context.Background()
	plan, err := e.p.Plan(ctx, gpuprov.Request{GPU: "H100"})
	if err != nil {
		t.Fatal(err)
	}
	first := plan.Offers[0]
	if first.Reservation == nil || first.Reservation.ID != "res-h100" || first.Reservation.Free != 2 || first.MarginalPrice() != 0 || first.PricePerHour != 2.49 {
		t.Fatalf("first offer = %+v (reservation %+v), want res-h100 with 2 free at $0/h marginal, $2.49/h list", first, first.Reservation)
	}
	if plan.Offers[1].Reservation != nil || plan.Offers[1].PricePerHour != 1.39 && plan.Offers[1].PricePerHour != 2.49 {
		t.Fatalf("second offer = %+v, want the cheapest ordinary offer", plan.Offers[1])
	}
	for _, vm := range []string{"r1", "r2", "r3"} {
		if _, err := e.p.Launch(ctx, gpuprov.Request{Name: vm, GPU: "H100"}); err != nil {
			t.Fatalf("launch %s: %v", vm, err)
		}
	}
	got := e.reservationOf(t)
	if got["r1"] != "res-h100" || got["r2"] != "res-h100" || got["r3"] != "" {
		t.Fatalf("reservations by VM = %v, want r1 and r2 in res-h100, r3 on ordinary capacity", got)
	}
	vm3, err := e.p.Get(ctx, "r3")
	if err != nil {
		t.Fatal(err)
	}
	if vm3.Reservation != "" || vm3.Spot || vm3.Location.Region != "us-east" {
		t.Fatalf("r3 = %+v, want on-demand in us-east outside the reservation", vm3)
	}
	if vm1, _ := e.p.Get(ctx, "r1"); vm1 == nil || vm1.Reservation != "res-h100" {
		t.Fatalf("r1 = %+v, want reservation res-h100", vm1)
	}
	// A fresh plan shows the reservation full, and tried last.
	plan, err = e.p.Plan(ctx, gpuprov.Request{GPU: "H100"})
	if err != nil {
		t.Fatal(err)
	}
	last := plan.Offers[len(plan.Offers)-1]
	if last.Reservation == nil || !last.Reservation.Full() {
		t.Fatalf("last offer of a fresh plan = %+v, want the full reservation", last)
	}
}

// TestReservationFullRefusesOnlyItself: launches that share a plan made
// while the reservation had room all try it; the one it refuses
// (reservation_full) blocks the reservation's offer only, as Unavailable,
// and lands on the same shape's ordinary capacity, which is not blocked.
func TestReservationFullRefusesOnlyItself(t *testing.T) {
	e := newEngineEnvOf(t, reserve("res-h100", 1, false), simserver.Faults{}, sim.Config{})
	ctx := context.Background()
	if _, err := e.p.Plan(ctx, gpuprov.Request{GPU: "H100"}); err != nil { // cached: 1 free
		t.Fatal(err)
	}
	for _, vm := range []string{"f1", "f2"} {
		if _, err := e.p.Launch(ctx, gpuprov.Request{Name: vm, GPU: "H100"}); err != nil {
			t.Fatalf("launch %s: %v", vm, err)
		}
	}
	if got := e.reservationOf(t); got["f1"] != "res-h100" || got["f2"] != "" {
		t.Fatalf("reservations by VM = %v, want f1 in res-h100 and f2 outside", got)
	}
	as, _, err := e.p.History(ctx, "f2")
	if err != nil {
		t.Fatal(err)
	}
	if len(as) != 2 || as[0].ErrorKind != provider.Unavailable.String() || !strings.Contains(as[0].OfferKey, "res:res-h100") ||
		as[1].Zone != "us-east-1a" || strings.Contains(as[1].OfferKey, "res:") {
		t.Fatalf("f2's attempts = %+v, want the reservation refused as unavailable, then the same zone's on-demand offer", as)
	}
}

// TestReservedPolicies: "forbid" leaves a free reservation alone, "require"
// takes nothing else, and a targeted reservation is used only when named.
func TestReservedPolicies(t *testing.T) {
	ctx := context.Background()
	t.Run("forbid", func(t *testing.T) {
		e := newEngineEnvOf(t, reserve("res-h100", 2, false), simserver.Faults{}, sim.Config{})
		if _, err := e.p.Launch(ctx, gpuprov.Request{Name: "no-res", GPU: "H100", Reserved: provider.ForbidReserved}); err != nil {
			t.Fatal(err)
		}
		if got := e.reservationOf(t); got["no-res"] != "" {
			t.Fatalf("forbid landed in %q", got["no-res"])
		}
	})
	t.Run("require", func(t *testing.T) {
		e := newEngineEnvOf(t, reserve("res-h100", 1, false), simserver.Faults{}, sim.Config{}, gpuprov.WithPlanCache(0))
		if _, err := e.p.Launch(ctx, gpuprov.Request{Name: "req-1", GPU: "H100", Reserved: provider.RequireReserved}); err != nil {
			t.Fatal(err)
		}
		_, err := e.p.Launch(ctx, gpuprov.Request{Name: "req-2", GPU: "H100", Reserved: provider.RequireReserved})
		if err == nil || !strings.Contains(err.Error(), "res-h100") {
			t.Fatalf("second launch requiring a full reservation: %v, want a failure naming res-h100", err)
		}
		if got := e.reservationOf(t); got["req-1"] != "res-h100" || len(got) != 1 {
			t.Fatalf("instances = %v, want req-1 alone, in res-h100", got)
		}
	})
	t.Run("targeted", func(t *testing.T) {
		e := newEngineEnvOf(t, reserve("team-a", 2, true), simserver.Faults{}, sim.Config{})
		if _, err := e.p.Launch(ctx, gpuprov.Request{Name: "other", GPU: "H100"}); err != nil {
			t.Fatal(err)
		}
		if _, err := e.p.Launch(ctx, gpuprov.Request{Name: "mine", GPU: "H100", Reservation: "team-a"}); err != nil {
			t.Fatal(err)
		}
		if got := e.reservationOf(t); got["other"] != "" || got["mine"] != "team-a" {
			t.Fatalf("reservations by VM = %v, want only the launch naming team-a in it", got)
		}
	})
}

// TestNamedReservationErrors: a reservation that no provider holds, one of
// another shape, one that has ended: each fails the launch at plan time
// with an error naming it, and nothing is created.
func TestNamedReservationErrors(t *testing.T) {
	ended := func(c *simserver.CloudConfig) {
		c.Reservations = append(c.Reservations, simserver.Reservation{ID: "old", OfferID: "a-h100x1-use1a", Count: 1, EndsAt: t0.Add(-time.Hour)})
	}
	e := newEngineEnvOf(t, func(c *simserver.CloudConfig) { reserve("res-h100", 2, true)(c); ended(c) }, simserver.Faults{}, sim.Config{})
	ctx := context.Background()
	for _, tc := range []struct {
		req  gpuprov.Request
		want []string
	}{
		{gpuprov.Request{Name: "x1", GPU: "H100", Reservation: "nope"}, []string{`"nope"`, "no configured provider holds"}},
		{gpuprov.Request{Name: "x2", GPU: "A100-80GB", Reservation: "res-h100"}, []string{"reservation res-h100 holds gpu.h100.1x (H100-80GB×1)", "not A100-80GB×1"}},
		{gpuprov.Request{Name: "x3", GPU: "H100", Regions: []string{"eu-west"}, Reservation: "res-h100"}, []string{"res-h100", "outside the regions"}},
		{gpuprov.Request{Name: "x4", GPU: "H100", Reservation: "old"}, []string{"reservation old ended at"}},
	} {
		_, err := e.p.Launch(ctx, tc.req)
		if !errors.Is(err, gpuprov.ErrInvalidRequest) {
			t.Errorf("%s: %v, want an invalid request", tc.req.Name, err)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v, want it to say %q", tc.req.Name, err, w)
			}
		}
	}
	if st, _ := e.srv.Stats(cloudName); st.Creates != 0 {
		t.Fatalf("%d creates, want none", st.Creates)
	}
}

// TestQuotaLeavesRegionOut: a region whose GPU quota cannot fit the
// instance is left out before any create, the no-offers error names the
// quota, and the quotas are read once per region per plan, then cached.
func TestQuotaLeavesRegionOut(t *testing.T) {
	quota := func(c *simserver.CloudConfig) {
		c.Quotas = []simserver.Quota{{Region: "us-east", GPU: "H100-80GB", Limit: 0}, {Region: "eu-west", Limit: 8}}
	}
	e := newEngineEnvOf(t, quota, simserver.Faults{}, sim.Config{})
	ctx := context.Background()
	_, err := e.p.Launch(ctx, gpuprov.Request{Name: "q1", GPU: "H100", Regions: []string{"us-east"}})
	if !errors.Is(err, gpuprov.ErrNoOffers) || !strings.Contains(err.Error(), "quota 0 of 1 GPUs for H100-80GB GPUs in us-east (gpus-H100-80GB: limit 0, 0 in use)") {
		t.Fatalf("launch in a region without quota: %v, want no offers naming the quota", err)
	}
	st, _ := e.srv.Stats(cloudName)
	if st.Creates != 0 || st.Errors[simserver.CodeQuotaExceeded] != 0 || st.Calls["list_quotas"] != 1 {
		t.Fatalf("stats %+v: want no create, no quota error, one quota read", st)
	}
	vm, err := e.p.Launch(ctx, gpuprov.Request{Name: "q2", GPU: "H100"})
	if err != nil {
		t.Fatal(err)
	}
	if vm.Location.Region != "eu-west" {
		t.Fatalf("q2 in %s, want eu-west (us-east has no H100 quota)", vm.Location)
	}
	st, _ = e.srv.Stats(cloudName)
	if st.Calls["list_quotas"] != 2 || st.Errors[simserver.CodeQuotaExceeded] != 0 {
		t.Fatalf("quota reads = %d, quota errors = %d: want us-east's cached and eu-west's read once, no quota error", st.Calls["list_quotas"], st.Errors[simserver.CodeQuotaExceeded])
	}
}

// TestReservationThatReclaimsEndsTheLeashFirst: a reservation that deletes
// its instances 30 minutes before it ends (as an AWS Capacity Block does)
// puts the VM on a leash that ends 5 minutes before that; a reaper in
// another process deletes it through gpuprov before the cloud would.
func TestReservationThatReclaimsEndsTheLeashFirst(t *testing.T) {
	ends := t0.Add(3 * time.Hour)
	block := func(c *simserver.CloudConfig) {
		c.Reservations = append(c.Reservations, simserver.Reservation{ID: "block-1", OfferID: "a-h100x8-use1a", Count: 1, Targeted: true,
			EndsAt: ends, Reclaims: simserver.Duration(30 * time.Minute)})
	}
	e := newEngineEnvOf(t, block, simserver.Faults{}, sim.Config{})
	vm, err := e.p.Launch(context.Background(), gpuprov.Request{Name: "in-block", GPU: "H100", GPUCount: 8, Reservation: "block-1"})
	if err != nil {
		t.Fatal(err)
	}
	if want := ends.Add(-35 * time.Minute); !vm.ExpiresAt.Equal(want) || vm.Reservation != "block-1" {
		t.Fatalf("in-block expires at %v in %q, want %v in block-1", vm.ExpiresAt, vm.Reservation, want)
	}
	e.clk.Advance(vm.ExpiresAt.Sub(e.clk.Now()) + time.Second)
	got, err := e.p.Reap(context.Background())
	if err != nil || len(got) != 1 || got[0].Name != "in-block" || got[0].Err != nil {
		t.Fatalf("reap at the leash's end: %+v, %v", got, err)
	}
	e.noneReclaimed(t)
}

// noneReclaimed fails the test if the sim ended any instance's run itself
// (a reservation's reclaim, a flex-start run's end) before gpuprov deleted
// it.
func (e *engineEnv) noneReclaimed(t *testing.T) {
	t.Helper()
	insts, _ := e.srv.Instances(cloudName)
	for _, in := range insts {
		for _, ev := range in.Events {
			if ev.Type == simserver.EventRunEnded {
				t.Fatalf("the sim reclaimed %s before gpuprov deleted it: %+v", in.ID, in.Events)
			}
		}
	}
}
