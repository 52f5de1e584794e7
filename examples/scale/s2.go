package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/journal/sqlite"
	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/sim/simserver"
)

// s2Config is scenario S2: failover latency, from a Capacity answer to the
// same VM's next create request, against a zero-latency sim.
type s2Config struct {
	VMs         int // each fails over Stockouts times
	Stockouts   int // offers stocked out before the one that has capacity
	Concurrency int // VMs launched at a time
	Dir         string
}

func defaultS2() s2Config { return s2Config{VMs: 50, Stockouts: 5, Concurrency: 1} }

// s2Result holds the failover latencies measured.
type s2Result struct {
	Cfg       s2Config
	Latencies []time.Duration // sorted
	Failed    int
}

// failoverClock is an http.RoundTripper that timestamps, per VM, each
// out_of_capacity answer to a create and the next create request sent.
type failoverClock struct {
	next http.RoundTripper

	mu        sync.Mutex
	capacity  map[string]time.Time // VM → when its last create was answered out_of_capacity
	latencies []time.Duration
}

func (f *failoverClock) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/instances") || r.Body == nil {
		return f.next.RoundTrip(r)
	}
	body, err := io.ReadAll(r.Body)
	r.Body.Close()
	if err != nil {
		return nil, err
	}
	sent := time.Now()
	r.Body = io.NopCloser(bytes.NewReader(body))
	var req struct {
		Labels map[string]string `json:"labels"`
	}
	_ = json.Unmarshal(body, &req) // a body that does not parse is not measured
	vm := req.Labels[provider.LabelVM]
	f.mu.Lock()
	if at, ok := f.capacity[vm]; ok && vm != "" {
		f.latencies = append(f.latencies, sent.Sub(at))
		delete(f.capacity, vm)
	}
	f.mu.Unlock()
	resp, err := f.next.RoundTrip(r)
	if err != nil || resp.StatusCode != http.StatusConflict {
		return resp, err
	}
	// Read the answer in full before stamping it: the adapter sees the
	// Capacity error only once it has the body.
	b, rerr := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(b))
	if rerr == nil && bytes.Contains(b, []byte(simserver.CodeOutOfCapacity)) {
		f.mu.Lock()
		f.capacity[vm] = time.Now()
		f.mu.Unlock()
	}
	return resp, nil
}

// runS2 launches cfg.VMs VMs, cfg.Concurrency at a time, each of which
// meets cfg.Stockouts stockouts before an offer with capacity. Blocks expire
// at once, so that every VM meets every stockout.
func runS2(ctx context.Context, cfg s2Config) (*s2Result, error) {
	offers := scaleCatalog(0, cloudNames[0])[:cfg.Stockouts+1]
	var out []string
	for _, o := range offers[:cfg.Stockouts] {
		out = append(out, o.ID)
	}
	timing := simserver.Timing{} // zero latency, instant boot and delete
	srv, err := simserver.Start(simserver.Options{DisableSSH: true, Clouds: []simserver.CloudConfig{{
		Name: cloudNames[0], Offers: offers, Timing: &timing, Faults: simserver.Faults{StockoutOffers: out}}}})
	if err != nil {
		return nil, err
	}
	defer srv.Close()
	j, err := sqlite.Open(ctx, filepath.Join(cfg.Dir, "journal.db"))
	if err != nil {
		return nil, err
	}
	defer j.Close()
	fc := &failoverClock{next: &http.Transport{MaxIdleConnsPerHost: 64}, capacity: map[string]time.Time{}}
	adapters, err := newAdapters(inProcessAccounts(srv), j.Installation(), adapterConfig{
		PollInterval: 50 * time.Millisecond, ConsistencyWindow: time.Second, Transport: fc})
	if err != nil {
		return nil, err
	}
	p, err := gpuprov.New(j, gpuprov.WithProvider(adapters...), gpuprov.WithSSH("root", nil, false),
		gpuprov.WithBlockTTL(provider.Capacity, time.Nanosecond))
	if err != nil {
		return nil, err
	}
	defer p.Close()
	res := &s2Result{Cfg: cfg}
	for i := 0; i < cfg.VMs; i += cfg.Concurrency {
		var reqs []gpuprov.Request
		for k := i; k < min(i+cfg.Concurrency, cfg.VMs); k++ {
			reqs = append(reqs, gpuprov.Request{Name: vmName(k), GPU: "H100-80GB", Timeout: time.Minute})
		}
		for _, r := range p.LaunchMany(ctx, reqs) {
			if r.Err != nil {
				res.Failed++
			}
		}
	}
	fc.mu.Lock()
	res.Latencies = slices.Clone(fc.latencies)
	fc.mu.Unlock()
	slices.Sort(res.Latencies)
	return res, nil
}

// Report renders the latencies.
func (r *s2Result) Report() string {
	l := r.Latencies
	return fmt.Sprintf("S2: %d failovers (%d VMs × %d stockouts, %d at a time), failed VMs %d: p50 %v, p90 %v, p99 %v, max %v (target p99 < 3ms)\n",
		len(l), r.Cfg.VMs, r.Cfg.Stockouts, r.Cfg.Concurrency, r.Failed,
		percentile(l, 50).Round(time.Microsecond), percentile(l, 90).Round(time.Microsecond),
		percentile(l, 99).Round(time.Microsecond), percentile(l, 100).Round(time.Microsecond))
}
