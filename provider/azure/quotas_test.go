package azure_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/azure"
)

// eastus2Usages is a usages list as Usage_List answers it: the regional
// and Spot vCPUs, the vCPU families (spelt as the API spells them, T4's
// without the spaces the catalog's has), and usages that bound no GPU
// offer.
func eastus2Usages(c *cloud) {
	c.setUsages("eastus2",
		usage("availabilitySets", "Availability Sets", 0, 2500),
		usage("cores", "Total Regional vCPUs", 100, 350),
		usage("lowPriorityCores", "Total Regional Low-priority vCPUs", 0, 100),
		usage("standardDSv3Family", "Standard DSv3 Family vCPUs", 8, 350),
		usage("standardNDISRH200V5Family", "Standard NDISRH200V5 Family vCPUs", 0, 96),
		usage("StandardNCADSA100v4Family", "Standard NCADSA100v4 Family vCPUs", 24, 24),
		usage("standardNCASv3_T4Family", "Standard NCASv3_T4 Family vCPUs", 0, 64),
	)
}

// Quotas reads the region's usages in one call and returns the regional
// vCPUs (on-demand), the Spot vCPUs and the GPU families' vCPUs, each with
// its use; QuotaLimit.Covers then bounds the offers the quota counts, and
// a family whose quota is used up does not fit one more VM.
func TestQuotas(t *testing.T) {
	c, mt := newCloud(t)
	eastus2Usages(c)
	p := c.checkedProvider(t, mt, azure.Config{Regions: []string{"eastus2"}, Spot: true})
	qs, err := p.Quotas(context.Background(), "eastus2")
	if err != nil {
		t.Fatal(err)
	}
	if calls := c.capacityCalls(); !slices.Equal(calls, []string{"GET /providers/Microsoft.Compute/locations/eastus2/usages"}) {
		t.Fatalf("calls %v", calls)
	}
	byName := map[string]provider.QuotaLimit{}
	for _, q := range qs {
		if q.Unit != provider.QuotaVCPUs || !q.UsageKnown || q.Region != "eastus2" {
			t.Fatalf("quota %+v", q)
		}
		byName[q.Name] = q
	}
	want := map[string]provider.QuotaLimit{
		"Total Regional vCPUs (cores)":                         {What: "on-demand VMs", Limit: 350, Usage: 100, OnDemand: true},
		"Total Regional Low-priority vCPUs (lowPriorityCores)": {What: "Spot VMs", Limit: 100, Spot: true},
		"Standard NDISRH200V5 Family vCPUs (standardNDISRH200V5Family)": {What: "standardNDISRH200V5Family", Limit: 96,
			Families: []string{"standardNDISRH200V5Family"}, OnDemand: true},
		"Standard NCADSA100v4 Family vCPUs (StandardNCADSA100v4Family)": {What: "StandardNCADSA100v4Family", Limit: 24, Usage: 24,
			Families: []string{"StandardNCADSA100v4Family"}, OnDemand: true},
		"Standard NCASv3_T4 Family vCPUs (standardNCASv3_T4Family)": {What: "Standard NCASv3_T4 Family", Limit: 64,
			Families: []string{"Standard NCASv3_T4 Family"}, OnDemand: true},
	}
	if len(byName) != len(want) {
		t.Fatalf("quotas %+v", qs)
	}
	for name, w := range want {
		q, ok := byName[name]
		if !ok || q.What != w.What || q.Limit != w.Limit || q.Usage != w.Usage || !slices.Equal(q.Families, w.Families) ||
			q.Spot != w.Spot || q.OnDemand != w.OnDemand {
			t.Fatalf("%s: %+v, want %+v", name, q, w)
		}
	}

	offers, err := p.Plan(context.Background(), &provider.ResourceRequest{Spot: provider.SpotOrOnDemand, Regions: []string{"eastus2"}})
	if err != nil {
		t.Fatal(err)
	}
	covering := func(o provider.Offer) []string {
		var out []string
		for _, q := range qs {
			if q.Covers(&o) {
				out = append(out, q.Name)
			}
		}
		slices.Sort(out)
		return out
	}
	find := func(size string, spot bool) provider.Offer {
		for _, o := range offers {
			if o.InstanceType == size && o.Spot == spot {
				return o
			}
		}
		t.Fatalf("no offer of %s (spot %v)", size, spot)
		return provider.Offer{}
	}
	h200 := find("Standard_ND96isr_H200_v5", false)
	if got := covering(h200); !slices.Equal(got, []string{"Standard NDISRH200V5 Family vCPUs (standardNDISRH200V5Family)", "Total Regional vCPUs (cores)"}) {
		t.Fatalf("H200 on demand is bounded by %v", got)
	}
	t4 := find("Standard_NC4as_T4_v3", true)
	if got := covering(t4); !slices.Equal(got, []string{"Total Regional Low-priority vCPUs (lowPriorityCores)"}) {
		t.Fatalf("Spot T4 is bounded by %v", got)
	}
	a100 := find("Standard_NC24ads_A100_v4", false)
	a100q := byName["Standard NCADSA100v4 Family vCPUs (StandardNCADSA100v4Family)"]
	if a100q.Fits(&a100) || !strings.Contains(a100q.Shortfall(&a100), "StandardNCADSA100v4Family") {
		t.Fatalf("A100 family used up, yet fits: %s", a100q.Shortfall(&a100))
	}
	if q := byName["Standard NDISRH200V5 Family vCPUs (standardNDISRH200V5Family)"]; !q.Fits(&h200) {
		t.Fatal("one H200 VM (96 vCPUs) does not fit 96 free")
	}
	// A reservation's VM draws on no quota.
	reserved := h200
	reserved.Reservation = &provider.Reservation{ID: "gpu-crg", Targeted: true, Total: 1, Free: 1}
	if got := covering(reserved); len(got) != 0 {
		t.Fatalf("reservation offer bounded by %v", got)
	}
}

// Quotas classifies a refusal as every call does: an identity that may
// not read usages is Credentials, a throttled list Transient; a region
// that is not an ARM name is refused before any call.
func TestQuotasErrors(t *testing.T) {
	c, mt := newCloud(t)
	p := c.provider(t, mt, azure.Config{})
	c.syncFaults["GET /usages"] = []fault{
		{Status: 403, Code: "AuthorizationFailed", Message: "The client does not have authorization to perform action 'Microsoft.Compute/locations/usages/read'."},
		{Status: 429, Body: azure.ThrottledBody, RetryAfter: "17"},
	}
	_, err := p.Quotas(context.Background(), "eastus2")
	kindOf(t, err, provider.Credentials)
	_, err = p.Quotas(context.Background(), "eastus2")
	if pe := kindOf(t, err, provider.Transient); pe.RetryAfter.Seconds() != 17 {
		t.Fatalf("retry after %v", pe.RetryAfter)
	}
	n := len(c.capacityCalls())
	_, err = p.Quotas(context.Background(), "East US")
	kindOf(t, err, provider.InvalidRequest)
	if len(c.capacityCalls()) != n {
		t.Fatal("a call for a malformed region")
	}
}
