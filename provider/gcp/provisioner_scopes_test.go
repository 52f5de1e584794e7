package gcp_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jarcoal/httpmock"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/clock"
	"github.com/org/gpuprov/gpuprovtest"
	"github.com/org/gpuprov/journal/sqlite"
	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/gcp"
)

// newProvisioner returns a Provisioner with the SQLite journal and the
// adapter of cfg on the mock c, on a fake clock that advances by itself.
func newProvisioner(t *testing.T, c *cloud, mt *httpmock.MockTransport, cfg gcp.Config) (*gpuprov.Provisioner, *sqlite.DB, *clock.Fake) {
	t.Helper()
	ctx := context.Background()
	clk := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	t.Cleanup(clk.AutoAdvance())
	j, err := sqlite.Open(ctx, t.TempDir()+"/journal.db")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	p := c.provider(t, mt, cfg, gcp.WithInstallation(j.Installation()))
	prov, err := gpuprov.New(j, gpuprov.WithProvider(p), gpuprov.WithClock(clk), gpuprov.WithBackoff(100*time.Millisecond, time.Second, 1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { prov.Close() })
	return prov, j, clk
}

// Two machine types with one L4 each sell in us-central1-a (g2-standard-4,
// the cheaper, and g2-standard-8). The cheaper one's insert ends in a
// zonal stockout; the launch, pinned to that zone, then tries the other
// type there and runs. "Troubleshooting resource availability errors"
// (ZONE_RESOURCE_POOL_EXHAUSTED, ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS:
// "The zone '…' does not have enough resources available to fulfill the
// request", with "'(resource type:compute)'" for the latter): the zone
// lacks the resources of this request; SkyPilot's GCP failover handler
// (FailoverCloudErrorHandlerV2._gcp_handler) blocks that request's
// resources in that zone only. Only the offer is blocked: blocking the zone, as
// before, left the launch nothing to try.
func TestProvisionerTriesTheZonesOtherType(t *testing.T) {
	for _, fault := range []opFault{
		{Code: "ZONE_RESOURCE_POOL_EXHAUSTED", HTTP: 503,
			Message: "The zone 'projects/proj-test/zones/us-central1-a' does not have enough resources available to fulfill the request.  Try a different zone, or try again later."},
		{Code: "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS", HTTP: 503,
			Message: "The zone 'projects/proj-test/zones/us-central1-a' does not have enough resources available to fulfill the request.  '(resource type:compute)'."},
	} {
		t.Run(fault.Code, func(t *testing.T) {
			c, mt := newCloud(t)
			c.autoRun = true
			c.insertFaults["us-central1-a"] = []opFault{fault}
			prov, j, clk := newProvisioner(t, c, mt, gcp.Config{})
			vm, err := prov.Launch(context.Background(), gpuprov.Request{Name: "pair", GPU: "l4", Zones: []string{"us-central1-a"}, Timeout: time.Hour})
			if err != nil {
				t.Fatalf("launch: %v", err)
			}
			if vm.State != gpuprov.StateReady || vm.Location.Zone != "us-central1-a" || vm.InstanceType != "g2-standard-8" {
				t.Fatalf("launched %s in %s, want g2-standard-8 in us-central1-a", vm.InstanceType, vm.Location)
			}
			if got, want := gpuprovtest.OfferAttempts(t, j, "pair"), []string{"gcp|us-central1|us-central1-a|g2-standard-4|od capacity",
				"gcp|us-central1|us-central1-a|g2-standard-8|od "}; !slices.Equal(got, want) {
				t.Fatalf("attempts %q, want %q", got, want)
			}
			if got, want := gpuprovtest.BlockKeys(t, j, clk.Now()), []string{"offer:gcp|us-central1|us-central1-a|g2-standard-4|od"}; !slices.Equal(got, want) {
				t.Fatalf("blocks %v, want %v", got, want)
			}
			if err := prov.Delete(context.Background(), "pair"); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A quota blocks what its metric counts ("Allocation quotas": GPU quotas
// per model and region, preemptible quotas for Spot VMs; the metric names
// are the discovery document's Quota.metric). NVIDIA_L4_GPUS exhausted in
// us-central1 sends an L4 launch to us-east1, and a T4 launch still lands
// in us-central1. PREEMPTIBLE_NVIDIA_L4_GPUS (the L4 model, Spot) and
// PREEMPTIBLE_CPUS (every Spot VM of the region) exhausted send a launch
// that takes Spot or on-demand to on-demand in the same zone. Before, each
// blocked the whole region for an hour.
func TestProvisionerQuotaBlocksWhatItCounts(t *testing.T) {
	ctx := context.Background()
	t.Run("GPU model", func(t *testing.T) {
		c, mt := newCloud(t)
		c.autoRun = true
		c.insertFaults["us-central1-a"] = []opFault{{Code: "QUOTA_EXCEEDED", HTTP: 403,
			Message: "Quota 'NVIDIA_L4_GPUS' exceeded.  Limit: 0.0 in region us-central1.", QuotaMetric: "compute.googleapis.com/nvidia_l4_gpus"}}
		prov, j, clk := newProvisioner(t, c, mt, gcp.Config{})
		l4vm, err := prov.Launch(ctx, gpuprov.Request{Name: "l4", GPU: "l4", Regions: []string{"us-central1", "us-east1"}, Timeout: time.Hour})
		if err != nil {
			t.Fatalf("L4 launch: %v", err)
		}
		if l4vm.Location.Region != "us-east1" {
			t.Fatalf("L4 in %s, want us-east1", l4vm.Location)
		}
		if got, want := gpuprovtest.BlockKeys(t, j, clk.Now()), []string{"family:gcp|us-central1|NVIDIA_L4_GPUS|od"}; !slices.Equal(got, want) {
			t.Fatalf("blocks %v, want %v", got, want)
		}
		t4, err := prov.Launch(ctx, gpuprov.Request{Name: "t4", GPU: "t4", Regions: []string{"us-central1"}, Timeout: time.Hour})
		if err != nil {
			t.Fatalf("T4 launch in the region of the L4 quota: %v", err)
		}
		if t4.Location.Region != "us-central1" {
			t.Fatalf("T4 in %s", t4.Location)
		}
	})
	for _, tc := range []struct {
		metric string
		block  string
	}{
		{"PREEMPTIBLE_NVIDIA_L4_GPUS", "family:gcp|us-central1|NVIDIA_L4_GPUS|spot"},
		{"PREEMPTIBLE_CPUS", "spot:gcp|us-central1"},
	} {
		t.Run(tc.metric, func(t *testing.T) {
			c, mt := newCloud(t)
			c.autoRun = true
			c.insertFaults["us-central1-a"] = []opFault{{Code: "QUOTA_EXCEEDED", HTTP: 403,
				Message:     "Quota '" + tc.metric + "' exceeded.  Limit: 0.0 in region us-central1.",
				QuotaMetric: "compute.googleapis.com/" + strings.ToLower(tc.metric)}}
			prov, j, clk := newProvisioner(t, c, mt, gcp.Config{Spot: true})
			vm, err := prov.Launch(ctx, gpuprov.Request{Name: "cheap", GPU: "l4", Spot: provider.SpotOrOnDemand,
				Regions: []string{"us-central1"}, Timeout: time.Hour})
			if err != nil {
				t.Fatalf("launch: %v", err)
			}
			if vm.Spot || vm.Location != (provider.Location{Region: "us-central1", Zone: "us-central1-a"}) {
				t.Fatalf("launched spot=%v in %s, want on-demand in us-central1-a", vm.Spot, vm.Location)
			}
			if got, want := gpuprovtest.OfferAttempts(t, j, "cheap"), []string{"gcp|us-central1|us-central1-a|g2-standard-4|spot quota",
				"gcp|us-central1|us-central1-a|g2-standard-4|od "}; !slices.Equal(got, want) {
				t.Fatalf("attempts %q, want %q", got, want)
			}
			if got := gpuprovtest.BlockKeys(t, j, clk.Now()); !slices.Equal(got, []string{tc.block}) {
				t.Fatalf("blocks %v, want %v", got, tc.block)
			}
		})
	}
}
