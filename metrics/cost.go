package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/org/gpuprov"
)

// CostEvery is how long the collector reuses what WithCosts read: counting
// the bill reads every attempt of the journal, so a scrape every 15 seconds
// reads it at most once a minute.
const CostEvery = time.Minute

// WithCosts makes the collector export gpuprov_billed_usd{provider}: the
// bill as gpuprov counts it (every attempt that made an instance, in its
// cloud's increments and minimum; docs/cost.md), summed per provider over
// the journal, read through costs (pass the Provisioner's Costs with a zero
// CostOptions) at most once per CostEvery. A read that fails serves the last
// sums, or none, and counts in gpuprov_journal_read_errors_total.
func WithCosts(costs func(context.Context) ([]gpuprov.AttemptCost, error)) Option {
	return func(c *config) { c.costs = costs }
}

// costCache is what WithCosts last read.
type costCache struct {
	read func(context.Context) ([]gpuprov.AttemptCost, error)
	desc *prometheus.Desc
	at   time.Time
	sums map[string]float64 // by provider
	now  func() time.Time
}

// collectCosts sends gpuprov_billed_usd, reading the costs again when the
// last read is older than CostEvery. The caller serializes scrapes.
func (c *Collector) collectCosts(ch chan<- prometheus.Metric) {
	cc := c.cost
	if cc.sums == nil || cc.now().Sub(cc.at) >= CostEvery {
		ctx, cancel := context.WithTimeout(context.Background(), ReadTimeout)
		costs, err := cc.read(ctx)
		cancel()
		if err != nil {
			c.readErrors.Inc()
		} else {
			sums := map[string]float64{}
			for _, a := range costs {
				p, _ := c.b.clean(providerC, a.Provider)
				sums[p] += a.USD
			}
			cc.sums, cc.at = sums, cc.now()
		}
	}
	for p, usd := range cc.sums {
		ch <- prometheus.MustNewConstMetric(cc.desc, prometheus.GaugeValue, usd, p)
	}
}
