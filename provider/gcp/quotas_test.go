package gcp_test

import (
	"context"
	"strings"
	"testing"

	"cloud.google.com/go/compute/apiv1/computepb"

	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/gcp"
)

// regionQuotaFixture is us-central1's quotas as regions.get lists them
// (metric names of the discovery document's Quota.metric enum and, for
// H100, the Quotas page's): H100 with a Spot quota of its own, L4 without
// one (limit 0), vCPUs, and metrics gpuprov does not read.
func regionQuotaFixture() []*computepb.Quota {
	return []*computepb.Quota{
		quota("CPUS", 24, 20), quota("A2_CPUS", 96, 0), quota("IN_USE_ADDRESSES", 8, 1),
		quota("NVIDIA_H100_GPUS", 16, 8), quota("PREEMPTIBLE_NVIDIA_H100_GPUS", 8, 8),
		quota("NVIDIA_L4_GPUS", 4, 4), quota("PREEMPTIBLE_NVIDIA_L4_GPUS", 0, 0),
		quota("NVIDIA_K80_GPUS", 0, 0), quota("PREEMPTIBLE_CPUS", 0, 0),
	}
}

func quotaProvider(t *testing.T) (*cloud, *gcp.Provider) {
	t.Helper()
	c, mt := newCloud(t)
	c.capacity.regionQuotas = map[string][]*computepb.Quota{"us-central1": regionQuotaFixture()}
	c.capacity.projectQuotas = []*computepb.Quota{quota("GPUS_ALL_REGIONS", 12, 4), quota("FIREWALLS", 200, 12)}
	return c, c.provider(t, mt, gcp.Config{Regions: []string{"us-central1"}, Spot: true})
}

// fitsAll reports whether o fits every quota that covers it, and which
// quotas cover it.
func fitsAll(qs []provider.QuotaLimit, o *provider.Offer) (bool, []string) {
	fits, covering := true, []string(nil)
	for i := range qs {
		if qs[i].Covers(o) {
			covering = append(covering, qs[i].Name)
			fits = fits && qs[i].Fits(o)
		}
	}
	return fits, covering
}

// Quotas reads regions.get and projects.get once each and returns the GPU
// and vCPU quotas that bound the offers, so that the core's Covers and Fits
// say what a launch would meet.
func TestQuotasBoundTheOffers(t *testing.T) {
	c, p := quotaProvider(t)
	ctx := context.Background()
	qs, err := p.Quotas(ctx, "us-central1")
	if err != nil {
		t.Fatal(err)
	}
	if r, pr := c.calls("GET /compute/v1/projects/"+project+"/regions/us-central1"), c.calls("GET /compute/v1/projects/"+project); len(r) != 1 || len(pr) != 2 {
		// pr matches the region call too: it is a prefix.
		t.Fatalf("%d regions.get, %d calls under the project; want one regions.get and one projects.get", len(r), len(pr))
	}
	names := map[string]provider.QuotaLimit{}
	for _, q := range qs {
		names[q.Name] = q
	}
	for _, n := range []string{"PREEMPTIBLE_NVIDIA_L4_GPUS", "NVIDIA_K80_GPUS", "IN_USE_ADDRESSES", "FIREWALLS", "PREEMPTIBLE_CPUS"} {
		if _, ok := names[n]; ok {
			t.Errorf("%s returned: it bounds no offer (a zero preemptible quota leaves Spot VMs on the standard one)", n)
		}
	}
	if g := names["GPUS_ALL_REGIONS"]; g.Region != "" || g.Unit != provider.QuotaGPUs || g.Limit != 12 || g.Usage != 4 || !g.UsageKnown {
		t.Errorf("GPUS_ALL_REGIONS %+v", g)
	}
	if h := names["NVIDIA_H100_GPUS"]; h.Region != "us-central1" || !h.OnDemand || h.Spot || len(h.Families) != 1 || h.Families[0] != "NVIDIA_H100_GPUS" {
		t.Errorf("NVIDIA_H100_GPUS %+v: on-demand only, since H100 has a Spot quota of its own", h)
	}
	if l := names["NVIDIA_L4_GPUS"]; l.OnDemand || l.Spot {
		t.Errorf("NVIDIA_L4_GPUS %+v: counts Spot VMs too, since its preemptible quota is 0", l)
	}

	offer := func(req provider.ResourceRequest, instanceType string, spot bool) provider.Offer {
		t.Helper()
		offers, err := p.Plan(ctx, &req)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range offers {
			if o.InstanceType == instanceType && o.Spot == spot && o.Location.Region == "us-central1" && o.Reservation == nil {
				return o
			}
		}
		t.Fatalf("no %s (spot %v) offer in us-central1", instanceType, spot)
		return provider.Offer{}
	}
	for _, tc := range []struct {
		name     string
		o        provider.Offer
		fits     bool
		covering string
	}{
		// 8 of 16 H100 used and 8 of 12 across regions free: 8 more fit both.
		{"H100 on demand", offer(h100x8, "a3-highgpu-8g", false), true, "NVIDIA_H100_GPUS,GPUS_ALL_REGIONS"},
		// The H100 Spot quota is used up.
		{"H100 Spot", offer(provider.ResourceRequest{GPU: "H100-80GB", GPUCount: 8, Spot: provider.SpotOnly}, "a3-highgpu-8g", true),
			false, "PREEMPTIBLE_NVIDIA_H100_GPUS,GPUS_ALL_REGIONS"},
		// A3 Mega counts against its own metric, which the region does not list.
		{"H100 Mega on demand", offer(h100x8, "a3-megagpu-8g", false), true, "GPUS_ALL_REGIONS"},
		// The L4 quota is used up, Spot or not.
		{"L4 Spot", offer(provider.ResourceRequest{GPU: "L4", GPUCount: 1, Spot: provider.SpotOnly}, "g2-standard-4", true),
			false, "NVIDIA_L4_GPUS,GPUS_ALL_REGIONS"},
		// N1: 4 vCPUs of CPUS's 4 free.
		{"T4 on n1-standard-4", offer(provider.ResourceRequest{GPU: "T4", GPUCount: 1}, "n1-standard-4+1xnvidia-tesla-t4", false),
			true, "CPUS,GPUS_ALL_REGIONS"},
		// N1: 8 vCPUs, 4 free.
		{"T4 on n1-standard-8", offer(provider.ResourceRequest{GPU: "T4", GPUCount: 1}, "n1-standard-8+1xnvidia-tesla-t4", false),
			false, "CPUS,GPUS_ALL_REGIONS"},
		{"A100 on a2-highgpu-1g", offer(provider.ResourceRequest{GPU: "A100-40GB", GPUCount: 1}, "a2-highgpu-1g", false),
			true, "A2_CPUS,GPUS_ALL_REGIONS"},
	} {
		fits, covering := fitsAll(qs, &tc.o)
		got := strings.Join(covering, ",")
		if want := tc.covering; !sameSet(got, want) || fits != tc.fits {
			t.Errorf("%s: covered by %s, fits %v; want %s, %v", tc.name, got, fits, want, tc.fits)
		}
	}

	// A reservation's offer draws on no quota.
	c.setReservations(reservation("open-h100", "us-central1-b", "a3-highgpu-8g", 2, 0, false))
	res := offer(h100x8, "a3-highgpu-8g", false)
	offers, _ := p.Plan(ctx, &h100x8)
	for _, o := range offers {
		if o.Reservation != nil {
			res = o
		}
	}
	if res.Reservation == nil {
		t.Fatal("no reservation offer")
	}
	if fits, covering := fitsAll(qs, &res); !fits || len(covering) != 0 {
		t.Errorf("reservation offer covered by %v", covering)
	}
}

func sameSet(a, b string) bool {
	as, bs := strings.Split(a, ","), strings.Split(b, ",")
	if len(as) != len(bs) {
		return false
	}
	for _, x := range as {
		if !strings.Contains(","+b+",", ","+x+",") {
			return false
		}
	}
	return true
}

// A bad region is refused before any call; an API refusal is classified.
func TestQuotasErrors(t *testing.T) {
	c, p := quotaProvider(t)
	_, err := p.Quotas(context.Background(), "us-central1-a")
	kindOf(t, err, provider.InvalidRequest)
	if !strings.Contains(err.Error(), `"us-central1-a" is not a region`) || len(c.calls("GET")) != 0 {
		t.Fatalf("err %v after %d calls", err, len(c.calls("GET")))
	}
	c.syncFaults["GET regions/us-central1"] = []apiFault{{Status: 403, Reason: "forbidden", Message: "Required 'compute.regions.get' permission"}}
	_, err = p.Quotas(context.Background(), "us-central1")
	kindOf(t, err, provider.Credentials)
	c.syncFaults["GET regions/"] = []apiFault{{Status: 503, Reason: "backendError", Message: "try again"}}
	_, err = p.Quotas(context.Background(), "us-east4")
	kindOf(t, err, provider.Transient)
}
