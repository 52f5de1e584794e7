package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

// simBilled is an instance as the sim's admin API lists it, with what its
// bill needs.
type simBilled struct {
	ID           string    `json:"id"`
	OfferID      string    `json:"offer_id"`
	Price        float64   `json:"price_per_hour"`
	CreatedAt    time.Time `json:"created_at"`
	TerminatedAt time.Time `json:"terminated_at"`
}

// TestCLICostCountsAFailedBoot: `up` on sim-a, whose cheapest H100 offer
// boots and fails, fails over to the next offer; `down` deletes it. `cost`
// lists both attempts, the failed boot billed; each matches the sim's own
// record (created to terminated, per second with a 60 s minimum, at the
// offer's price) within the teardown's confirmation (a poll interval), and
// `--by provider` sums them.
func TestCLICostCountsAFailedBoot(t *testing.T) {
	c := newCLIEnv(t)
	sim := startSim(t, c, simCloud("sim-a", "300ms")+`[clouds.faults]
boot_fail_offers = ["a-h100x1-use1a"]
`+simCloud("sim-b", "300ms"))
	c.writeConfig(sim.config)
	c.ok("up", "--gpu", "h100", "--name", "cost-1", "--provider", "sim-a", "--no-accept", "--timeout", "60s")
	c.ok("down", "cost-1")

	var costs []struct {
		Attempt     int      `json:"attempt"`
		Outcome     string   `json:"outcome"`
		InstanceIDs []string `json:"instance_ids"`
		USD         float64  `json:"usd"`
		Billing     struct {
			Minimum time.Duration `json:"minimum"`
		} `json:"billing"`
	}
	if err := json.Unmarshal([]byte(c.ok("cost", "-o", "json").stdout), &costs); err != nil {
		t.Fatal(err)
	}
	if len(costs) != 2 || !strings.HasPrefix(costs[0].Outcome, "failed") || costs[1].Outcome != "deleted" {
		t.Fatalf("cost -o json: %+v; want the failed boot, then the deleted machine", costs)
	}
	var insts struct {
		Instances []simBilled `json:"instances"`
	}
	sim.adminDo(t, http.MethodGet, "/admin/clouds/sim-a/instances", nil, &insts)
	byID := map[string]simBilled{}
	for _, in := range insts.Instances {
		byID[in.ID] = in
	}
	// The sim's billing (docs/clouds/sim.md#billing): per second from
	// created_at to terminated_at, at least 60 s, at the offer's price.
	bill := func(d time.Duration, price float64) float64 {
		if r := d % time.Second; r != 0 {
			d += time.Second - r
		}
		d = max(d, time.Minute)
		return d.Hours() * price
	}
	total := 0.0
	for _, co := range costs {
		in, ok := byID[co.InstanceIDs[0]]
		if !ok || in.TerminatedAt.IsZero() {
			t.Fatalf("the sim has no terminated instance %v: %+v", co.InstanceIDs, in)
		}
		if co.Billing.Minimum != time.Minute {
			t.Errorf("attempt %d billed with a minimum of %v, want the sim's 60s", co.Attempt, co.Billing.Minimum)
		}
		ran := in.TerminatedAt.Sub(in.CreatedAt)
		hand, slack := bill(ran, in.Price), bill(ran+time.Second, in.Price)
		if co.USD < hand-1e-9 || co.USD > slack+1e-9 {
			t.Errorf("attempt %d on %s: $%.6f; the sim's record (%v at $%.2f/h) gives $%.6f", co.Attempt, in.OfferID, co.USD, ran, in.Price, hand)
		}
		total += co.USD
	}
	if byProvider := c.ok("cost", "--by", "provider").stdout; !strings.Contains(byProvider, "sim-a     2         1       $") {
		t.Errorf("cost --by provider should sum 2 attempts, 1 failed, on sim-a:\n%s", byProvider)
	}
	if r := c.run("cost", "--by", "region"); r.code != 2 || !strings.Contains(r.stderr, "--by \"region\"") {
		t.Errorf("cost --by region: exit %d, %s", r.code, r.stderr)
	}
}
