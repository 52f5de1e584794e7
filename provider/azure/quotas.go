package azure

import (
	"context"
	"fmt"
	"strings"

	"github.com/org/gpuprov/provider"
)

// Usage names (name.value) of the Compute usages list that are not a
// family: the regional vCPU total and the regional Spot vCPUs ("Check
// vCPU quotas", Microsoft Learn: "Total Regional vCPUs" counts every
// family, Spot VMs count against "Total Regional Low-priority vCPUs"
// only).
const (
	usageRegional = "cores"
	usageSpot     = "lowPriorityCores"
)

// Quotas implements provider.QuotaReader: one GET of
// Microsoft.Compute/locations/{region}/usages (Usage_List, every page),
// which returns the subscription's limits in region with their current
// use. It returns, in vCPUs with Usage known:
//   - the regional vCPUs ("cores"), which bound on-demand offers (OnDemand);
//   - the regional Spot vCPUs ("lowPriorityCores"), which bound Spot offers;
//   - each vCPU family quota of a catalog size, with Families set to the
//     catalog's spelling of the family (Offer.Family) and OnDemand: Spot
//     VMs draw on the Spot quota only.
//
// Other usages (the family quotas of sizes the adapter does not offer,
// availability sets, disks) are left out. Azure has no quota counted
// across regions for VMs: no limit has an empty Region. It caches nothing;
// an error is classified as every call's (an account that may not read
// usages is Credentials).
func (p *Provider) Quotas(ctx context.Context, region string) ([]provider.QuotaLimit, error) {
	if !regionRE.MatchString(region) {
		return nil, p.errorf(provider.InvalidRequest, "quotas", "%q is not an ARM region name (like eastus)", region)
	}
	families := map[string]string{} // normalized → as the catalog spells it
	for _, s := range p.catalog.Sizes {
		if s.Family != "" {
			families[normFamily(s.Family)] = s.Family
		}
	}
	var out []provider.QuotaLimit
	pager := p.usage.NewListPager(region, nil)
	for pager.More() {
		cctx, cancel := p.call(ctx)
		page, err := pager.NextPage(cctx)
		cancel()
		if err != nil {
			return nil, p.classify("quotas", fmt.Errorf("usages in %s: %w", region, err))
		}
		for _, u := range page.Value {
			if u == nil || u.Name == nil || u.Name.Value == nil || u.Limit == nil {
				continue
			}
			code := *u.Name.Value
			q := provider.QuotaLimit{
				Name: quotaName(deref(u.Name.LocalizedValue), code), Region: region, Unit: provider.QuotaVCPUs,
				Limit: float64(*u.Limit), Usage: float64(deref(u.CurrentValue)), UsageKnown: u.CurrentValue != nil,
			}
			switch family, ok := families[normFamily(code)]; {
			case strings.EqualFold(code, usageRegional):
				q.What, q.OnDemand = "on-demand VMs", true
			case strings.EqualFold(code, usageSpot):
				q.What, q.Spot = "Spot VMs", true
			case ok:
				q.What, q.Families, q.OnDemand = family, []string{family}, true
			default:
				continue
			}
			out = append(out, q)
		}
	}
	return out, nil
}

// normFamily compares family names as the usages list, the Resource SKUs
// API and quota refusals spell them: case and spaces aside
// ("Standard NCASv3_T4 Family" is standardNCASv3_T4Family).
func normFamily(s string) string { return strings.ToLower(strings.ReplaceAll(s, " ", "")) }

// quotaName is the quota as the portal shows it, with its code.
func quotaName(localized, code string) string {
	if localized == "" || localized == code {
		return code
	}
	return localized + " (" + code + ")"
}
