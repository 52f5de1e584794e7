package gpuprov_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/provider"
	pt "github.com/org/gpuprov/provider/providertest"
)

// quotaFake is a fake cloud that reads its quotas: limits per region, or
// err for every read, counting the reads.
type quotaFake struct {
	*pt.Fake
	limits map[string][]provider.QuotaLimit
	err    error
	reads  *atomic.Int32
}

func (q quotaFake) Quotas(_ context.Context, region string) ([]provider.QuotaLimit, error) {
	q.reads.Add(1)
	return q.limits[region], q.err
}

func quotaEnv(t *testing.T, limits map[string][]provider.QuotaLimit, err error) (*env, *atomic.Int32) {
	t.Helper()
	e := newEnv(t)
	reads := new(atomic.Int32)
	qf := quotaFake{Fake: e.fakes[0], limits: limits, err: err, reads: reads}
	p, perr := gpuprov.New(e.j, gpuprov.WithProvider(qf), gpuprov.WithClock(e.clk), gpuprov.WithPlanCache(0))
	if perr != nil {
		t.Fatal(perr)
	}
	t.Cleanup(func() { p.Close() })
	e.p = p
	return e, reads
}

// TestQuotaInUseLeavesTheRegionOut: us-east's GPU quota is used up
// (known usage): its offers are left out before any create, the plan says
// which quota, and the launch lands in eu-west.
func TestQuotaInUseLeavesTheRegionOut(t *testing.T) {
	full := []provider.QuotaLimit{{Name: "NVIDIA_H100_GPUS", What: "H100-80GB GPUs", Region: "us-east", Unit: provider.QuotaGPUs,
		Limit: 8, Usage: 8, UsageKnown: true, GPUs: []string{"H100-80GB"}}}
	e, reads := quotaEnv(t, map[string][]provider.QuotaLimit{"us-east": full}, nil)
	ctx := context.Background()
	res, err := e.p.Plan(ctx, gpuprov.Request{GPU: "H100"})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Offers) != 1 || res.Offers[0].Location.Region != "eu-west" || len(res.Skipped) != 2 ||
		res.Skipped[0].Reason != "quota 0 of 1 GPUs for H100-80GB GPUs in us-east (NVIDIA_H100_GPUS: limit 8, 8 in use)" {
		t.Fatalf("plan: offers %+v, skipped %+v; want eu-west only, both us-east zones left out for the quota", res.Offers, res.Skipped)
	}
	vm, err := e.p.Launch(ctx, gpuprov.Request{Name: "q1", GPU: "H100"})
	if err != nil || vm.Location.Region != "eu-west" {
		t.Fatalf("launch: %+v, %v; want eu-west", vm, err)
	}
	if n := reads.Load(); n != 2 {
		t.Fatalf("%d quota reads, want 2 (one per region, then cached)", n)
	}
	// A launch that may go to us-east only fails, naming the quota.
	_, err = e.p.Launch(ctx, gpuprov.Request{Name: "q2", GPU: "H100", Regions: []string{"us-east"}})
	if err == nil || !strings.Contains(err.Error(), "left out: quota 0 of 1 GPUs for H100-80GB GPUs in us-east") || !strings.Contains(err.Error(), "a us-east: 2 offers") {
		t.Fatalf("launch in us-east: %v; want no offers naming the quota", err)
	}
	if creates := len(e.fakes[0].Calls(pt.OpCreate)); creates != 1 {
		t.Fatalf("%d creates, want 1 (q1 only)", creates)
	}
}

// TestQuotaUnreadablePlansAsBefore: an account that may not read its
// quotas plans as if the cloud could not tell, and is not asked again at
// every plan: the failed read is kept for the quota cache's TTL.
func TestQuotaUnreadablePlansAsBefore(t *testing.T) {
	denied := provider.Errorf(provider.Credentials, "a", "quotas", "not allowed to read quotas")
	e, reads := quotaEnv(t, nil, denied)
	ctx := context.Background()
	vm, err := e.p.Launch(ctx, gpuprov.Request{Name: "u1", GPU: "H100"})
	if err != nil || vm.Location.Zone != "us-east-1a" {
		t.Fatalf("launch: %+v, %v; want the cheapest offer, us-east-1a", vm, err)
	}
	before := reads.Load()
	if _, err := e.p.Plan(ctx, gpuprov.Request{GPU: "H100"}); err != nil {
		t.Fatal(err)
	}
	if reads.Load() != before {
		t.Fatalf("a failed quota read was asked again within its TTL (%d → %d reads)", before, reads.Load())
	}
	e.clk.Advance(gpuprov.DefaultQuotaTTL + time.Second)
	if _, err := e.p.Plan(ctx, gpuprov.Request{GPU: "H100"}); err != nil {
		t.Fatal(err)
	}
	if reads.Load() <= before {
		t.Fatalf("quotas not read again after their TTL (%d reads)", reads.Load())
	}
}
