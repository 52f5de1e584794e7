package gcp

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"cloud.google.com/go/compute/apiv1/computepb"

	"github.com/org/gpuprov/provider"
)

// Quotas implements provider.QuotaReader: regions.get for region's quotas
// and projects.get for the project's (two calls, not cached: the core
// caches). Of the region's it returns, in GPUs, each GPU model's
// NVIDIA_<model>_GPUS quota (Families: that metric, Offer.Family) and its
// PREEMPTIBLE_ twin for Spot offers, and in vCPUs the CPUS quota for the
// N1 offers and A2_CPUS for the A2 ones; of the project's, GPUS_ALL_REGIONS
// with an empty Region, covering every offer. Limit and usage are as the
// API reports them (UsageKnown). Other metrics are left out.
//
// Spot VMs count against a model's preemptible quota when the project has
// one, and against its standard quota otherwise ("Allocation quotas",
// Compute Engine documentation: preemptible quotas): so a PREEMPTIBLE_
// quota is returned only with a limit above zero, and the standard quota
// then covers on-demand offers only.
//
// Flex-start VMs "consume preemptible quota" (Google Cloud blog,
// "Introducing Flex-start VMs"): each PREEMPTIBLE_ GPU quota above zero is
// returned a second time for the flex-start offers (Families: the
// PREEMPTIBLE_ metric, their Offer.Family). Where the project has no
// preemptible quota for a model, no regional quota is returned for its
// flex-start offers (which quota they then draw on is not documented): a
// create refused for quota says which.
//
// A bad region is InvalidRequest before any call; API errors are
// classified as every call's.
func (p *Provider) Quotas(ctx context.Context, region string) ([]provider.QuotaLimit, error) {
	if !regionRE.MatchString(region) {
		return nil, p.errorf(provider.InvalidRequest, "quotas", "%q is not a region (like us-central1)", region)
	}
	rctx, cancel := p.call(ctx)
	reg, err := p.regions.Get(rctx, &computepb.GetRegionRequest{Project: p.cfg.Project, Region: region}, noRetry)
	cancel()
	if err != nil {
		return nil, p.classify("quotas", err)
	}
	pctx, cancel := p.call(ctx)
	proj, err := p.projects.Get(pctx, &computepb.GetProjectRequest{Project: p.cfg.Project}, noRetry)
	cancel()
	if err != nil {
		return nil, p.classify("quotas", err)
	}
	out := p.regionQuotas(region, reg.GetQuotas())
	for _, q := range proj.GetQuotas() {
		if q.GetMetric() == "GPUS_ALL_REGIONS" {
			out = append(out, provider.QuotaLimit{Name: q.GetMetric(), What: "GPUs of every model", Unit: provider.QuotaGPUs,
				Limit: q.GetLimit(), Usage: q.GetUsage(), UsageKnown: true})
		}
	}
	return out, nil
}

// regionQuotas maps a region's quotas (see Quotas).
func (p *Provider) regionQuotas(region string, qs []*computepb.Quota) []provider.QuotaLimit {
	byMetric := map[string]*computepb.Quota{}
	for _, q := range qs {
		byMetric[q.GetMetric()] = q
	}
	accelOf := map[string]string{} // NVIDIA_<model>_GPUS → accelerator type
	for a, m := range gpuQuotaMetric {
		accelOf[m] = a
	}
	var out []provider.QuotaLimit
	for _, metric := range sortedMetrics(byMetric) {
		q := byMetric[metric]
		ql := provider.QuotaLimit{Name: metric, Region: region, Limit: q.GetLimit(), Usage: q.GetUsage(), UsageKnown: true}
		standard := strings.TrimPrefix(metric, "PREEMPTIBLE_")
		switch accel, isGPU := accelOf[standard]; {
		case isGPU:
			g, _ := provider.LookupGPU(accel)
			ql.Unit, ql.Families = provider.QuotaGPUs, []string{standard}
			ql.What = fmt.Sprintf("%s GPUs (%s)", g.Name, accel)
			if metric != standard {
				if q.GetLimit() <= 0 {
					continue // Spot VMs then count against the standard quota
				}
				ql.Spot, ql.What = true, "Spot "+ql.What
			} else if twin := byMetric["PREEMPTIBLE_"+metric]; twin != nil && twin.GetLimit() > 0 {
				ql.OnDemand = true
			}
		case metric == "CPUS" || metric == "A2_CPUS":
			series := map[string]string{"CPUS": "n1", "A2_CPUS": "a2"}[metric]
			ql.Unit, ql.Families = provider.QuotaVCPUs, p.familiesOfSeries(series)
			ql.What = strings.ToUpper(series) + " vCPUs"
			if len(ql.Families) == 0 {
				continue
			}
		default:
			continue
		}
		out = append(out, ql)
		if ql.Spot {
			// Flex-start VMs draw on the same preemptible quota; their
			// offers carry it as their Family (flexFamily).
			flex := ql
			flex.Spot, flex.Families = false, []string{metric}
			flex.What = "Flex-start " + strings.TrimPrefix(ql.What, "Spot ")
			out = append(out, flex)
		}
	}
	return out
}

// familiesOfSeries is the Offer.Family values of the catalog's shapes of a
// machine series ("n1", "a2").
func (p *Provider) familiesOfSeries(series string) []string {
	seen := map[string]bool{}
	var out []string
	for _, m := range p.catalog.MachineTypes {
		f := gpuQuotaMetric[m.AcceleratorType]
		if strings.HasPrefix(m.Name, series+"-") && f != "" && !seen[f] {
			seen[f] = true
			out = append(out, f)
		}
	}
	sort.Strings(out)
	return out
}

func sortedMetrics(m map[string]*computepb.Quota) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
