package sim_test

import (
	"context"
	"testing"
	"time"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/provider/sim"
	"github.com/org/gpuprov/provider/sim/simserver"
)

// The bill as gpuprov counts it matches the simulated cloud's own record:
// a launch whose first machine booted and failed (billed: it ran) fails
// over to a second machine that runs ten minutes and is deleted. Costs
// reports both attempts; each matches, within the teardown's confirmation
// (one poll interval), what the sim's created/terminated times give under
// the cloud's billing model, at each offer's price.
func TestCostMatchesTheSimsRecordIncludingAFailedBoot(t *testing.T) {
	e := newEngineEnv(t, simserver.Faults{BootFailOffers: []string{"a-h100x1-use1a"}}, sim.Config{})
	vm, err := e.p.Launch(context.Background(), engineReq("billed"))
	if err != nil {
		t.Fatal(err)
	}
	e.clk.Advance(10 * time.Minute) // the job runs
	if err := e.p.Delete(context.Background(), "billed"); err != nil {
		t.Fatal(err)
	}

	costs, err := e.p.Costs(context.Background(), gpuprov.CostOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(costs) != 2 {
		t.Fatalf("costs %+v, want the failed boot and the machine that ran", costs)
	}
	billing := e.env.p.Capabilities().Billing
	poll := time.Second // sim.Config.PollInterval in newEngineEnv
	total := 0.0
	for i, c := range costs {
		if len(c.InstanceIDs) != 1 || c.Running {
			t.Fatalf("attempt %d: %+v", c.Attempt, c)
		}
		in, err := e.srv.Instance(cloudName, c.InstanceIDs[0])
		if err != nil {
			t.Fatal(err)
		}
		hand := billing.Cost(in.TerminatedAt.Sub(in.CreatedAt), in.PricePerHour)
		slack := billing.Cost(in.TerminatedAt.Sub(in.CreatedAt)+poll, in.PricePerHour) - hand
		if c.USD < hand || c.USD > hand+slack+1e-9 {
			t.Errorf("attempt %d (%s, %s): gpuprov counts $%.6f; the sim's record ($%.2f/h from %v to %v) gives $%.6f",
				c.Attempt, in.OfferID, c.Outcome, c.USD, in.PricePerHour, in.CreatedAt, in.TerminatedAt, hand)
		}
		t.Logf("attempt %d on %s (%s): ran %v at $%.2f/h by the sim's record: $%.6f by hand; gpuprov counts %v billed, $%.6f",
			c.Attempt, in.OfferID, c.Outcome, in.TerminatedAt.Sub(in.CreatedAt), in.PricePerHour, hand, c.Billed, c.USD)
		if i == 0 && (in.OfferID != "a-h100x1-use1a" || c.Outcome != "failed: failed") {
			t.Errorf("first attempt on %s, %s; want the failed boot on a-h100x1-use1a", in.OfferID, c.Outcome)
		}
		if i == 1 && c.Outcome != "deleted" {
			t.Errorf("second attempt %s, want deleted", c.Outcome)
		}
		total += c.USD
	}
	if costs[0].USD <= 0 {
		t.Error("the machine that booted and failed is not billed")
	}
	if vm.Cost(vm.ReadyAt.Add(10*time.Minute)) >= total {
		t.Errorf("the bill $%.4f should exceed the ready machine's own $%.4f: the failed boot billed", total, vm.Cost(vm.ReadyAt.Add(10*time.Minute)))
	}
}
