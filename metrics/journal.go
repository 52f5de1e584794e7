package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/org/gpuprov/journal"
)

// JournalReader is what a Collector reads at scrape time for the gauges
// gpuprov_vms and gpuprov_active_blocks; every journal.Journal implements
// it. Each scrape makes one ListVMs of the live VMs and one Blocks, bounded
// by ReadTimeout. A read that fails leaves its gauge out of that scrape and
// counts in gpuprov_journal_read_errors_total: the other metrics are still
// served, and a stale number is never shown as a current one.
type JournalReader interface {
	ListVMs(ctx context.Context, opts journal.ListOptions) ([]journal.VM, error)
	Blocks(ctx context.Context, now time.Time) ([]journal.Block, error)
}

// ReadTimeout bounds a scrape's reads of the journal (WithJournal), below
// Prometheus' default scrape timeout of 10s.
const ReadTimeout = 5 * time.Second

// collectJournal sends the gauges read from the journal.
func (c *Collector) collectJournal(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), ReadTimeout)
	defer cancel()
	if vms, err := c.j.ListVMs(ctx, journal.ListOptions{Live: true}); err != nil {
		c.readErrors.Inc()
	} else {
		n := map[key]int{}
		for _, v := range vms {
			n[c.clean(key{v.Provider, string(v.State)}, providerC, stateC)]++
		}
		for k, v := range n {
			ch <- prometheus.MustNewConstMetric(c.vmsDesc, prometheus.GaugeValue, float64(v), k[0], k[1])
		}
	}
	if blocks, err := c.j.Blocks(ctx, time.Now()); err != nil {
		c.readErrors.Inc()
	} else {
		n := map[key]int{}
		for _, b := range blocks {
			n[c.clean(key{b.Provider, b.ErrorKind, b.Scope}, providerC, kindC, scopeC)]++
		}
		for k, v := range n {
			ch <- prometheus.MustNewConstMetric(c.activeDesc, prometheus.GaugeValue, float64(v), k[0], k[1], k[2])
		}
	}
}

// clean returns k's values as label values of the classes given.
func (c *Collector) clean(k key, classes ...class) key {
	for i, cl := range classes {
		k[i], _ = c.b.clean(cl, k[i])
	}
	return k
}
