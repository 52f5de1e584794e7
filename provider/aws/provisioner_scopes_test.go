package aws_test

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/clock"
	"github.com/org/gpuprov/gpuprovtest"
	"github.com/org/gpuprov/journal/sqlite"
	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/aws"
)

// newFakeProvisioner returns a Provisioner with the SQLite journal and the
// adapter of cfg on the fake EC2 f, on the fake clock clk.
func newFakeProvisioner(t *testing.T, f *fakeEC2, clk *clock.Fake, cfg aws.Config, opts ...aws.Option) (*gpuprov.Provisioner, *sqlite.DB) {
	t.Helper()
	ctx := context.Background()
	db, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "journal.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	cfg.RequestsPerSecond = 1000
	opts = append(opts, aws.WithInstallation(db.Installation()), aws.WithEndpoint(f.endpoint()), aws.WithClock(clk))
	p, err := aws.New(cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	prov, err := gpuprov.New(db, gpuprov.WithProvider(p), gpuprov.WithClock(clk),
		gpuprov.WithBackoff(100*time.Millisecond, 5*time.Second, 1),
		gpuprov.WithSSH("ubuntu", []string{newSpec(t, "k").AuthorizedKeys[0]}, true))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { prov.Close() })
	return prov, db
}

// twoL4Types lists two instance types with one L4 each in us-east-1:
// g6.xlarge, the cheaper, in use1-az1 only, and g6.2xlarge in use1-az1
// and use1-az2. Offers in price order: g6.xlarge/az1, g6.2xlarge/az1,
// g6.2xlarge/az2.
const twoL4Types = `{"source": "test fixture", "as_of": "2026-01", "instance_types": [
 {"instance_type": "g6.xlarge", "gpu": "L4", "gpu_count": 1, "gpu_memory_mib": 22888, "vcpus": 4, "memory_gib": 16,
  "regions": {"us-east-1": {"price": 0.8048, "zones": ["use1-az1"]}}},
 {"instance_type": "g6.2xlarge", "gpu": "L4", "gpu_count": 1, "gpu_memory_mib": 22888, "vcpus": 8, "memory_gib": 32,
  "regions": {"us-east-1": {"price": 0.9776, "zones": ["use1-az1", "use1-az2"]}}}]}`

// Two GPU types sell in one zone and the cheaper one cannot launch there:
// the launch tries the other type in the same zone next, and blocks only
// the offer that failed (type, zone, market), not the zone. EC2 answers
// RunInstances for a type the zone has constraints on with Unsupported
// ("Error codes for the Amazon EC2 API", client errors: "you might be
// trying to launch an instance in an Availability Zone that currently has
// constraints on that instance type"; the message the fake sends is EC2's,
// as quoted in trailofbits/algo#314), and a stockout with
// InsufficientInstanceCapacity (server errors; "Insufficient instance
// capacity" troubleshooting page: "try a different instance type").
func TestProvisionerTriesTheZonesOtherType(t *testing.T) {
	cat, err := aws.ParseCatalog([]byte(twoL4Types))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		code, kind string
		setup      func(f *fakeEC2)
	}{
		{"Unsupported", "unavailable", func(f *fakeEC2) { f.offered = map[string][]string{"g6.xlarge": {"use1-az2"}} }},
		{"InsufficientInstanceCapacity", "capacity", func(f *fakeEC2) {
			f.rules = append(f.rules, &fakeRule{Action: "RunInstances", Code: "InsufficientInstanceCapacity",
				Match: func(r *fakeReq) bool { return r.Form.Get("InstanceType") == "g6.xlarge" }})
		}},
	} {
		t.Run(tc.code, func(t *testing.T) {
			clk := clock.NewFake(t0)
			t.Cleanup(clk.AutoAdvance())
			f := newFakeEC2(t, clk)
			tc.setup(f)
			prov, db := newFakeProvisioner(t, f, clk, aws.Config{Regions: []string{"us-east-1"}}, aws.WithCatalog(cat))
			vm, err := prov.Launch(context.Background(), gpuprov.Request{Name: "pair", GPU: "L4", Timeout: time.Hour})
			if err != nil {
				t.Fatalf("launch: %v", err)
			}
			if vm.State != gpuprov.StateReady || vm.Location.Zone != "use1-az1" || vm.InstanceType != "g6.2xlarge" {
				t.Fatalf("launched %s in %s, want g6.2xlarge in use1-az1, the zone the other type failed in", vm.InstanceType, vm.Location)
			}
			if got, want := gpuprovtest.OfferAttempts(t, db, "pair"), []string{"aws|us-east-1|use1-az1|g6.xlarge|od " + tc.kind,
				"aws|us-east-1|use1-az1|g6.2xlarge|od "}; !slices.Equal(got, want) {
				t.Fatalf("attempts %q, want %q", got, want)
			}
			if got, want := gpuprovtest.BlockKeys(t, db, clk.Now()), []string{"offer:aws|us-east-1|use1-az1|g6.xlarge|od"}; !slices.Equal(got, want) {
				t.Fatalf("blocks %v, want %v", got, want)
			}
			if err := prov.Delete(context.Background(), "pair"); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A quota blocks what it counts and no more. VcpuLimitExceeded is the
// On-Demand vCPU quota of the instance's bucket ("You have requested more
// vCPU capacity than your current vCPU limit of 0 allows for the instance
// bucket that the specified instance type belongs to"; EC2 User Guide,
// "On-Demand Instance quotas": Running On-Demand P instances, Running
// On-Demand G and VT instances, …): a P launch that meets it moves to
// another region, and an L4 (G) launch in the same region still lands
// there. MaxSpotInstanceCountExceeded is the Spot quota ("Max spot instance
// count exceeded"; EC2 User Guide, "Spot Instance quotas"): a launch that
// takes Spot or on-demand meets it on Spot and launches on-demand in the
// same zone. Before, both blocked the whole region for an hour.
func TestProvisionerQuotaBlocksOnlyItsBucket(t *testing.T) {
	ctx := context.Background()
	t.Run("family", func(t *testing.T) {
		clk := clock.NewFake(t0)
		t.Cleanup(clk.AutoAdvance())
		f := newFakeEC2(t, clk)
		f.fail(&fakeRule{Action: "RunInstances", Code: "VcpuLimitExceeded",
			Match: func(r *fakeReq) bool { return r.Region == "us-east-1" && r.Form.Get("InstanceType") == "p5.48xlarge" }})
		prov, db := newFakeProvisioner(t, f, clk, awsConfig())
		big, err := prov.Launch(ctx, gpuprov.Request{Name: "big", GPU: "H100", GPUCount: 8, Timeout: time.Hour})
		if err != nil {
			t.Fatalf("launch of the P instance: %v", err)
		}
		if big.Location.Region != "us-west-2" {
			t.Fatalf("P instance in %s, want us-west-2", big.Location)
		}
		gpuprovtest.CheckAttempts(t, db, "big", gpuprovtest.Attempt{Region: "us-east-1", Kind: "quota"}, gpuprovtest.Attempt{Region: "us-west-2"})
		if got, want := gpuprovtest.BlockKeys(t, db, clk.Now()), []string{"family:aws|us-east-1|P|od"}; !slices.Equal(got, want) {
			t.Fatalf("blocks %v, want %v", got, want)
		}
		small, err := prov.Launch(ctx, gpuprov.Request{Name: "small", GPU: "L4", Regions: []string{"us-east-1"}, Timeout: time.Hour})
		if err != nil {
			t.Fatalf("launch of a G instance in the region of the P quota: %v", err)
		}
		if small.Location.Region != "us-east-1" || small.InstanceType != "g6.xlarge" {
			t.Fatalf("G instance %s in %s", small.InstanceType, small.Location)
		}
	})
	t.Run("spot", func(t *testing.T) {
		clk := clock.NewFake(t0)
		t.Cleanup(clk.AutoAdvance())
		f := newFakeEC2(t, clk)
		f.spot["g6.xlarge|use1-az1"], f.spot["g6.xlarge|use1-az2"] = "0.3012", "0.3100"
		f.fail(&fakeRule{Action: "RunInstances", Code: "MaxSpotInstanceCountExceeded",
			Match: func(r *fakeReq) bool { return r.Form.Get("InstanceMarketOptions.MarketType") == "spot" }})
		prov, db := newFakeProvisioner(t, f, clk, aws.Config{Regions: []string{"us-east-1"}, Spot: true, Refine: true})
		vm, err := prov.Launch(ctx, gpuprov.Request{Name: "cheap", GPU: "L4", Spot: provider.SpotOrOnDemand, Timeout: time.Hour})
		if err != nil {
			t.Fatalf("launch: %v", err)
		}
		if vm.Spot || vm.Location != (provider.Location{Region: "us-east-1", Zone: "use1-az1"}) {
			t.Fatalf("launched spot=%v in %s, want on-demand in us-east-1/use1-az1", vm.Spot, vm.Location)
		}
		if got, want := gpuprovtest.OfferAttempts(t, db, "cheap"), []string{"aws|us-east-1|use1-az1|g6.xlarge|spot quota",
			"aws|us-east-1|use1-az1|g6.xlarge|od "}; !slices.Equal(got, want) {
			t.Fatalf("attempts %q, want %q", got, want)
		}
		if got, want := gpuprovtest.BlockKeys(t, db, clk.Now()), []string{"spot:aws|us-east-1"}; !slices.Equal(got, want) {
			t.Fatalf("blocks %v, want %v", got, want)
		}
		if n := len(f.requests("RunInstances")); n != 2 {
			t.Fatalf("%d RunInstances, want 2 (no second Spot try in the region)", n)
		}
	})
}
