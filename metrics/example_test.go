package metrics_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/clock"
	"github.com/org/gpuprov/journal"
	_ "github.com/org/gpuprov/journal/sqlite"
	"github.com/org/gpuprov/metrics"
	"github.com/org/gpuprov/provider"
	pt "github.com/org/gpuprov/provider/providertest"
)

// Attach a Collector to a Provisioner and serve it on /metrics. The
// cheapest offer is out of stock, so the launch fails over once; the
// metrics say so.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "metrics-example")
	defer os.RemoveAll(dir)
	j, err := journal.Open(ctx, "sqlite:"+filepath.Join(dir, "journal.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer j.Close()

	// The collector reads the journal at scrape time for the live gauges,
	// and is fed by the Provisioner's events and cloud calls.
	mc := metrics.New(metrics.WithJournal(j))
	reg := prometheus.NewRegistry()
	reg.MustRegister(mc)
	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))

	// Two in-memory clouds stand in for real ones here.
	cheap := pt.NewFake("cheap", clock.Real, pt.Offer("us-east", "us-east-1a", "h100x1", "H100-80GB", 1, 1.99))
	cheap.Script(&pt.Rule{Op: pt.OpCreate, Err: provider.Errorf(provider.Capacity, "cheap", "create", "out of stock")})
	other := pt.NewFake("other", clock.Real, pt.Offer("eu-west", "", "gpu-h100", "H100-80GB", 1, 2.49))

	p, err := gpuprov.New(j, append(mc.Options(), gpuprov.WithProvider(cheap, other))...)
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()
	if _, err := p.Launch(ctx, gpuprov.Request{Name: "train-1", GPU: "h100", MaxPricePerHour: 3}); err != nil {
		log.Fatal(err)
	}

	fams, err := reg.Gather()
	if err != nil {
		log.Fatal(err)
	}
	for _, f := range fams {
		switch f.GetName() {
		case "gpuprov_attempts_total", "gpuprov_attempt_failures_total", "gpuprov_launches_total", "gpuprov_vms":
			for _, m := range f.GetMetric() {
				var labels []string
				for _, l := range m.GetLabel() {
					if l.GetValue() != "" {
						labels = append(labels, l.GetName()+"="+l.GetValue())
					}
				}
				fmt.Printf("%s{%s} %v\n", f.GetName(), strings.Join(labels, ","), m.GetCounter().GetValue()+m.GetGauge().GetValue())
			}
		}
	}
	// Output:
	// gpuprov_attempt_failures_total{error_type=capacity,provider=cheap} 1
	// gpuprov_attempts_total{provider=cheap} 1
	// gpuprov_attempts_total{provider=other} 1
	// gpuprov_launches_total{error_type=none,outcome=ready} 1
	// gpuprov_vms{provider=other,state=ready} 1
}
