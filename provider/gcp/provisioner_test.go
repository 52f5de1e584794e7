package gcp_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/clock"
	"github.com/org/gpuprov/gpuprovtest"
	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/journal/sqlite"
	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/gcp"
)

// A launch meets ZONE_RESOURCE_POOL_EXHAUSTED in the cheapest zone
// (us-east4-a), QUOTA_EXCEEDED on NVIDIA_L4_GPUS in the next zone of that
// region (us-east4-c), and succeeds in the next region (us-central1-a). The
// journal shows the three attempts, the blocks of the stocked-out offer and
// of us-east4's L4 offers (the quota counts that GPU model there), and the
// teardowns; deleting the VM leaves nothing on the mock cloud.
func TestProvisionerFailsOverAcrossZonesAndRegions(t *testing.T) {
	ctx := context.Background()
	c, mt := newCloud(t)
	c.autoRun = true
	c.insertFaults["us-east4-a"] = []opFault{{Code: "ZONE_RESOURCE_POOL_EXHAUSTED",
		Message: "The zone 'projects/proj-test/zones/us-east4-a' does not have enough resources available to fulfill the request.", HTTP: 503}}
	c.insertFaults["us-east4-c"] = []opFault{{Code: "QUOTA_EXCEEDED", Message: "Quota 'NVIDIA_L4_GPUS' exceeded. Limit: 0.0 in region us-east4.",
		QuotaMetric: "compute.googleapis.com/nvidia_l4_gpus", HTTP: 403}}

	clk := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	t.Cleanup(clk.AutoAdvance())
	j, err := sqlite.Open(ctx, t.TempDir()+"/journal.db")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	p := c.provider(t, mt, gcp.Config{}, gcp.WithInstallation(j.Installation()))
	var events []gpuprov.Event
	prov, err := gpuprov.New(j, gpuprov.WithProvider(p), gpuprov.WithClock(clk),
		gpuprov.WithBackoff(100*time.Millisecond, time.Second, 1),
		gpuprov.WithEvents(func(e gpuprov.Event) { events = append(events, e) }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { prov.Close() })

	vm, err := prov.Launch(ctx, gpuprov.Request{Name: "train", GPU: "l4", Timeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if vm.State != gpuprov.StateReady || vm.Location != (provider.Location{Region: "us-central1", Zone: "us-central1-a"}) ||
		vm.SSH == nil || vm.SSH.Port != 22 || vm.PricePerHour != 0.70682 {
		t.Fatalf("vm %+v", vm)
	}

	gpuprovtest.CheckAttempts(t, j, "train", gpuprovtest.Attempt{Zone: "us-east4-a", Kind: "capacity"}, gpuprovtest.Attempt{Zone: "us-east4-c", Kind: "quota"},
		gpuprovtest.Attempt{Zone: "us-central1-a"})
	blocks, err := j.Blocks(ctx, clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	scopes := map[string]string{}
	for _, b := range blocks {
		scopes[b.Scope] = b.Key + " " + b.ErrorKind
	}
	if len(blocks) != 2 || scopes["offer"] != "offer:gcp|us-east4|us-east4-a|g2-standard-4|od capacity" ||
		scopes["family"] != "family:gcp|us-east4|NVIDIA_L4_GPUS|od quota" {
		t.Fatalf("blocks %+v", blocks)
	}
	var types []string
	for _, e := range events {
		types = append(types, e.Type)
	}
	for _, want := range []string{gpuprov.EvFailure, gpuprov.EvBlocked, gpuprov.EvTeardown, gpuprov.EvTornDown, gpuprov.EvReady} {
		if !slices.Contains(types, want) {
			t.Fatalf("events %v lack %s", types, want)
		}
	}
	jevs, err := j.Events(ctx, journal.EventQuery{VM: "train"})
	if err != nil || len(jevs) != len(events) {
		t.Fatalf("journal has %d events, sinks saw %d (%v)", len(jevs), len(events), err)
	}
	// Every insert carried the VM's identity and a distinct requestId per attempt.
	ins := c.calls("/instances")
	var ids []string
	for _, r := range ins {
		if r.Method == "POST" {
			ids = append(ids, r.Query["requestId"][0])
		}
	}
	if len(ids) != 3 || ids[0] == ids[1] || ids[1] == ids[2] {
		t.Fatalf("requestIds %v", ids)
	}
	if live := c.live(); len(live) != 1 || live[0].GetLabels()["gpuprov"] != "train" {
		t.Fatalf("live instances %v", live)
	}

	if err := prov.Delete(ctx, "train"); err != nil {
		t.Fatal(err)
	}
	c.settle()
	if live, fws := c.live(), c.firewallNames(); len(live) != 0 || len(fws) != 0 {
		t.Fatalf("left on the cloud: instances %v firewalls %v", live, fws)
	}
}

// The cheapest zone does not offer the cheapest L4 machine type: the insert
// is refused with 400 invalid "… does not exist in zone …". The launch
// blocks that offer and succeeds elsewhere, instead of aborting.
func TestProvisionerMovesOnWhenTheZoneLacksTheMachineType(t *testing.T) {
	ctx := context.Background()
	c, mt := newCloud(t)
	c.autoRun = true
	clk := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	t.Cleanup(clk.AutoAdvance())
	j, err := sqlite.Open(ctx, t.TempDir()+"/journal.db")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	p := c.provider(t, mt, gcp.Config{}, gcp.WithInstallation(j.Installation()))
	offers, err := p.Plan(ctx, &provider.ResourceRequest{GPU: "L4", GPUCount: 1})
	if err != nil || len(offers) < 2 {
		t.Fatalf("plan: %d offers, %v", len(offers), err)
	}
	first := offers[0]
	c.notOffered[first.Location.Zone+"/"+first.InstanceType] = true

	prov, err := gpuprov.New(j, gpuprov.WithProvider(p), gpuprov.WithClock(clk), gpuprov.WithBackoff(100*time.Millisecond, time.Second, 1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { prov.Close() })
	vm, err := prov.Launch(ctx, gpuprov.Request{Name: "zonal", GPU: "l4", Timeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if vm.State != gpuprov.StateReady || vm.Location.Zone == first.Location.Zone {
		t.Fatalf("vm %+v", vm)
	}
	as, err := j.Attempts(ctx, "zonal")
	if err != nil || len(as) != 2 || as[0].Zone != first.Location.Zone || as[0].ErrorKind != "unavailable" || as[1].ErrorKind != "" {
		t.Fatalf("attempts %+v (%v)", as, err)
	}
	blocks, err := j.Blocks(ctx, clk.Now())
	if err != nil || len(blocks) != 1 || blocks[0].Scope != "offer" || blocks[0].Key != "offer:"+first.Key() {
		t.Fatalf("blocks %+v (%v)", blocks, err)
	}
	if err := prov.Delete(ctx, "zonal"); err != nil {
		t.Fatal(err)
	}
}
