package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestCLIReservationThenOnDemand is the scene through the CLI and
// a `gpuprov sim serve` process: sim-a holds a reservation of 2 single-H100
// slots and has on-demand stock of the same shape at $2.49/h; `offers`
// shows the reservation first at $0.00/h and why; 3 `up`s put 2 in the
// reservation and the third on-demand; then `offers` shows it full and
// tried last. eu-west has no H100 quota: `offers` says it is left out.
func TestCLIReservationThenOnDemand(t *testing.T) {
	c := newCLIEnv(t)
	sim := startSim(t, c, simCloud("sim-b", "300ms")+simCloud("sim-a", "300ms")+`
[[clouds.reservations]]
id = "res-h100"
offer_id = "a-h100x1-use1a"
count = 2
[[clouds.quotas]]
region = "eu-west"
gpu = "H100-80GB"
limit = 0
`)
	c.writeConfig(sim.config)

	table := c.ok("offers", "--gpu", "h100").stdout
	lines := strings.Split(strings.TrimSpace(table), "\n")
	if len(lines) < 3 || !strings.Contains(lines[1], "$0.00") || !strings.Contains(lines[1], "reservation res-h100 (2 of 2 free), already paid: $2.49/h list") {
		t.Fatalf("offers should list the reservation first at $0.00/h, saying why:\n%s", table)
	}
	if !strings.Contains(table, "left out: quota 0 of 1 GPUs for H100-80GB GPUs in eu-west") {
		t.Errorf("offers should say eu-west's H100 is left out for its quota:\n%s", table)
	}
	for _, vm := range []string{"res-1", "res-2", "od-3"} {
		c.ok("up", "--gpu", "h100", "--name", vm, "--timeout", "60s", "--no-accept")
	}
	byVM := map[string]string{}
	for _, in := range sim.live(t) {
		byVM[in.Labels["gpuprov"]] = in.ReservationID
	}
	if byVM["res-1"] != "res-h100" || byVM["res-2"] != "res-h100" || byVM["od-3"] != "" || len(byVM) != 3 {
		t.Fatalf("instances by VM and reservation = %v; want res-1, res-2 in res-h100 and od-3 outside", byVM)
	}
	if show := c.ok("show", "res-1").stdout; !strings.Contains(show, "Reserved:   in res-h100") {
		t.Errorf("show res-1 should say it is in res-h100:\n%s", show)
	}
	if show := c.ok("show", "od-3").stdout; strings.Contains(show, "Reserved:") {
		t.Errorf("show od-3 should not say it is reserved:\n%s", show)
	}
	var items []struct {
		Reservation *struct {
			ID   string `json:"id"`
			Free int    `json:"free"`
		} `json:"reservation"`
		Marginal float64 `json:"marginal_price_per_hour"`
		Price    float64 `json:"price_per_hour"`
		LeftOut  string  `json:"left_out"`
	}
	if err := json.Unmarshal([]byte(c.ok("offers", "--gpu", "h100", "-o", "json").stdout), &items); err != nil {
		t.Fatal(err)
	}
	var last = -1
	for i, it := range items {
		if it.LeftOut == "" {
			last = i
		}
	}
	if last < 0 || items[last].Reservation == nil || items[last].Reservation.Free != 0 || items[last].Marginal != 2.49 || items[last].Price != 2.49 {
		t.Fatalf("offers -o json = %+v; want the full reservation last of the offers tried, at its $2.49 list price (a full one may bill on top)", items)
	}
	c.ok("down", "--all")
}

// TestCLIFlexStartSurvivesSIGKILL: `up --flex-start 2h` queues in sim-a's
// flex-start queue (4 s here); killed with SIGKILL while queued, it leaves
// the VM queued in the journal and one queued instance; `recover` goes on
// waiting and the VM becomes ready with its leash set 2h − 10m after the
// instance started running.
func TestCLIFlexStartSurvivesSIGKILL(t *testing.T) {
	c := newCLIEnv(t)
	sim := startSim(t, c, simCloud("sim-b", "300ms")+simCloud("sim-a", "300ms")+`flex_queue = "4s"
`)
	c.writeConfig(sim.config)

	c.killUpWhen(t, func(vms []listedVM) bool { return len(vms) == 1 && vms[0].Phase == "queued" },
		"--gpu", "h100", "--name", "flex-1", "--flex-start", "2h", "--timeout", "60s", "--no-accept")
	if live := sim.live(t); len(live) != 1 || live[0].Status != "queued" {
		t.Fatalf("after the kill the sim runs %+v, want one queued instance", live)
	}
	if r := c.ok("recover"); !strings.Contains(r.stdout, "flex-1") {
		t.Errorf("recover did not resume flex-1:\n%s", r.stdout)
	}
	vms := listJSON(t, c)
	if len(vms) != 1 || vms[0].State != "ready" || vms[0].Left == nil || *vms[0].Left < (110*time.Minute-time.Minute).Seconds() || *vms[0].Left > (110*time.Minute).Seconds() {
		t.Fatalf("after recover: %+v; want flex-1 ready with about 1h50m of leash left", vms)
	}
	if live := sim.live(t); len(live) != 1 {
		t.Fatalf("after recover the sim runs %+v, want the one instance", live)
	}
	c.ok("down", "--all")
}

// TestCLIBlockBoughtBehindTheOptIn: `offers --block 24h` lists sim-a's
// capacity blocks with their upfront fee and buys nothing; `up --block`
// without a fee cap is refused before anything is bought; with one, the
// block is bought, the VM launched into it at its start (3 s after the sim
// started) and leashed 35 minutes before its end.
func TestCLIBlockBoughtBehindTheOptIn(t *testing.T) {
	c := newCLIEnv(t)
	sim := startSim(t, c, simCloud("sim-b", "300ms")+simCloud("sim-a", "300ms")+`
[[clouds.block_offerings]]
id = "blk-1"
offer_id = "a-h100x8-use1a"
count = 1
start_in = "3s"
duration = "24h"
upfront_fee = 900
reclaims = "30m"
`)
	c.writeConfig(sim.config)

	table := c.ok("offers", "--gpu", "h100", "--count", "8", "--block", "24h").stdout
	if !strings.Contains(table, "UPFRONT") || !strings.Contains(table, "gpu.h100.8x") || !strings.Contains(table, "$900.00") {
		t.Fatalf("offers --block 24h should list sim-a's block for $900.00:\n%s", table)
	}
	if r := c.run("up", "--gpu", "h100", "--count", "8", "--name", "blk-0", "--block", "24h", "--timeout", "60s"); r.code == 0 ||
		!strings.Contains(r.stderr, "max_upfront_usd") {
		t.Fatalf("up --block without a fee cap: exit %d\n%s", r.code, r.stderr)
	}
	c.ok("up", "--gpu", "h100", "--count", "8", "--name", "blk-1", "--block", "24h", "--block-max-fee", "1000", "--timeout", "60s", "--no-accept")
	live := sim.live(t)
	if len(live) != 1 || !strings.HasPrefix(live[0].ReservationID, "cb-") {
		t.Fatalf("the sim runs %+v; want one instance in a bought block", live)
	}
	vms := listJSON(t, c)
	if len(vms) != 1 || vms[0].Left == nil || *vms[0].Left > (24*time.Hour-35*time.Minute).Seconds() || *vms[0].Left < (24*time.Hour-36*time.Minute).Seconds() {
		t.Fatalf("list: %+v; want blk-1 with about 23h25m of leash left", vms)
	}
	if show := c.ok("show", "blk-1").stdout; !strings.Contains(show, "Reserved:   in cb-") || !strings.Contains(show, "Expires:") {
		t.Errorf("show blk-1 should name its block and its leash:\n%s", show)
	}
	if r := c.ok("offers", "--gpu", "h100", "--count", "8", "--block", "24h"); strings.Contains(r.stdout, "$900.00") {
		t.Errorf("the bought block is still for sale:\n%s", r.stdout)
	}
	c.ok("down", "--all")
}
