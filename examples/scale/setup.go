package main

import (
	"fmt"
	"net/http"
	"time"

	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/sim"
	"github.com/org/gpuprov/provider/sim/simserver"
)

// cloudNames are the simulated accounts the scenarios spread VMs over.
var cloudNames = []string{"sim-a", "sim-b"}

// offersPerCloud is the size of each cloud's scale catalog.
const offersPerCloud = 10

// scaleCatalog is a cloud's catalog for the scale scenarios: offersPerCloud
// single H100-80GB offers over five regions of two zones, 10 cents apart,
// the second cloud a cent dearer than the first at each rank.
func scaleCatalog(cloudIdx int, cloud string) []simserver.Offer {
	out := make([]simserver.Offer, offersPerCloud)
	for j := range out {
		region := fmt.Sprintf("r%d", j/2)
		out[j] = simserver.Offer{
			ID: fmt.Sprintf("%s-h100-%d", cloud, j), Region: region, Zone: fmt.Sprintf("%s%c", region, 'a'+j%2),
			InstanceType: "h100.1x", GPU: "H100-80GB", GPUCount: 1, GPUMemoryGB: 80, VCPUs: 26, MemoryGB: 200,
			PricePerHour: 2 + 0.1*float64(j) + 0.01*float64(cloudIdx), Availability: "medium",
		}
	}
	return out
}

// defaultStockoutRanks stock out 10% of the offers of the two scale
// catalogs: the cheapest offer of the first cloud (so every VM sent there
// meets a stockout first and fails over) and the second cheapest of the
// second (which no VM reaches unless it fails over).
var defaultStockoutRanks = []int{0, 1}

// simOptions are the options of an in-process or out-of-process sim
// serving cloudNames with the scale catalogs, the timing t and the faults f,
// plus a stockout of the offer of rank stockoutRanks[i] (cheapest first) on
// cloud i.
func simOptions(t simserver.Timing, f simserver.Faults, stockoutRanks []int, seed uint64) simserver.Options {
	opts := simserver.Options{DisableSSH: true, Seed: seed}
	for i, name := range cloudNames {
		cf := f
		if i < len(stockoutRanks) {
			cf.StockoutOffers = append(append([]string(nil), f.StockoutOffers...), fmt.Sprintf("%s-h100-%d", name, stockoutRanks[i]))
		}
		tt := t
		opts.Clouds = append(opts.Clouds, simserver.CloudConfig{Name: name, Offers: scaleCatalog(i, name), Timing: &tt, Faults: cf})
	}
	return opts
}

// account is how the harness reaches one simulated cloud.
type account struct {
	Name, Endpoint, APIKey string
}

// adapterConfig is what every scenario sets on the sim adapters.
type adapterConfig struct {
	RequestsPerSecond float64
	Burst             int
	PollInterval      time.Duration
	ConsistencyWindow time.Duration
	BootTimeout       time.Duration
	DeleteTimeout     time.Duration
	Transport         http.RoundTripper // nil: a pooled transport of its own
}

// newAdapters builds one sim adapter per account, labelling with the
// journal's installation id.
func newAdapters(accts []account, installation string, ac adapterConfig) ([]provider.CloudProvider, error) {
	tr := ac.Transport
	if tr == nil {
		tr = &http.Transport{MaxIdleConns: 512, MaxIdleConnsPerHost: 256, IdleConnTimeout: 30 * time.Second}
	}
	var out []provider.CloudProvider
	for _, a := range accts {
		p, err := sim.New(sim.Config{
			Endpoint: a.Endpoint, Cloud: a.Name, APIKey: a.APIKey,
			PollInterval: ac.PollInterval, ConsistencyWindow: ac.ConsistencyWindow, BootTimeout: ac.BootTimeout,
			DeleteTimeout:     ac.DeleteTimeout,
			RequestsPerSecond: ac.RequestsPerSecond, Burst: ac.Burst,
		}, sim.WithName(a.Name), sim.WithInstallation(installation), sim.WithHTTPClient(&http.Client{Transport: tr}))
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// inProcessAccounts are the accounts of an in-process server.
func inProcessAccounts(srv *simserver.Server) []account {
	var out []account
	for _, n := range srv.Clouds() {
		out = append(out, account{Name: n, Endpoint: srv.URL(), APIKey: srv.APIKey(n)})
	}
	return out
}
