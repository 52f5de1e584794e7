package gpuprov_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/clock"
	"github.com/org/gpuprov/journal/sqlite"
	pt "github.com/org/gpuprov/provider/providertest"
)

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkLaunch measures the engine's own cost per launched VM against a
// zero-latency fake cloud with a durable SQLite journal: CPU time (user +
// system, journal included) and allocations per VM, 16 launches at a time.
// The fake is observed per VM (its List is hidden): listing a growing
// in-memory fleet on every poll would measure the fake, not the engine.
//
//	go test -run x -bench Launch -benchtime 2000x .
func BenchmarkLaunch(b *testing.B) { benchLaunch(b) }

// benchLaunch is BenchmarkLaunch with the Provisioner's extra options.
func benchLaunch(b *testing.B, opts ...gpuprov.Option) {
	db, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "journal.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	f := pt.NewFake("zero", clock.Real, pt.Offer("r1", "", "t", "H100-80GB", 1, 2))
	f.Installation = db.Installation()
	p, err := gpuprov.New(db, append([]gpuprov.Option{gpuprov.WithProvider(noList{f})}, opts...)...)
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	var next atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				if _, err := p.Launch(context.Background(), gpuprov.Request{Name: fmt.Sprintf("vm-%d", i), GPU: "H100"}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(time.Millisecond)/float64(b.N), "cpu-ms/vm")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "vms/s")
}
