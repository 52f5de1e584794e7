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
	"github.com/org/gpuprov/journal"
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

// s2Result holds the failover latencies measured, and the journal commits
// made within them.
type s2Result struct {
	Cfg       s2Config
	Latencies []time.Duration // sorted
	Failed    int
	// Commits counts the journal commits (one fsync each) the failovers
	// waited for; CommitTimes are their durations, sorted; Rest are the
	// failover latencies less the commits within them, sorted: the part
	// of a failover that is not the disk's.
	Commits     int
	CommitTimes []time.Duration
	Rest        []time.Duration
}

// commitClock is a journal that times every commit, per VM.
type commitClock struct {
	journal.Journal

	mu      sync.Mutex
	commits []vmSpan
}

// vmSpan is a span of time of one VM's.
type vmSpan struct {
	vm         string
	start, end time.Time
}

func (c *commitClock) Commit(ctx context.Context, st *journal.Step) error {
	start := time.Now()
	err := c.Journal.Commit(ctx, st)
	end := time.Now()
	vm := ""
	switch {
	case st.Update != nil:
		vm = st.Update.Name
	case st.Create != nil:
		vm = st.Create.Name
	case len(st.Attempts) > 0:
		vm = st.Attempts[0].VM
	}
	c.mu.Lock()
	c.commits = append(c.commits, vmSpan{vm, start, end})
	c.mu.Unlock()
	return err
}

// failoverClock is an http.RoundTripper that timestamps, per VM, each
// out_of_capacity answer to a create and the next create request sent.
type failoverClock struct {
	next http.RoundTripper

	mu        sync.Mutex
	capacity  map[string]time.Time // VM → when its last create was answered out_of_capacity
	failovers []vmSpan             // from that answer to the VM's next create request
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
		f.failovers = append(f.failovers, vmSpan{vm, at, sent})
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
	cc := &commitClock{Journal: j}
	p, err := gpuprov.New(cc, gpuprov.WithProvider(adapters...), gpuprov.WithSSH("root", nil, false),
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
	defer fc.mu.Unlock()
	cc.mu.Lock()
	defer cc.mu.Unlock()
	for _, f := range fc.failovers {
		took := f.end.Sub(f.start)
		res.Latencies = append(res.Latencies, took)
		rest := took
		for _, c := range cc.commits {
			if c.vm == f.vm && !c.start.Before(f.start) && !c.end.After(f.end) {
				res.Commits++
				res.CommitTimes = append(res.CommitTimes, c.end.Sub(c.start))
				rest -= c.end.Sub(c.start)
			}
		}
		res.Rest = append(res.Rest, rest)
	}
	slices.Sort(res.Latencies)
	slices.Sort(res.CommitTimes)
	slices.Sort(res.Rest)
	return res, nil
}

// Report renders the latencies, then the journal commits within them and
// what is left of the failovers without them.
func (r *s2Result) Report() string {
	l := r.Latencies
	perFailover := 0.0
	if len(l) > 0 {
		perFailover = float64(r.Commits) / float64(len(l))
	}
	return fmt.Sprintf("S2: %d failovers (%d VMs × %d stockouts, %d at a time), failed VMs %d: p50 %v, p90 %v, p99 %v, max %v (target p99 < 3ms)\n"+
		"    journal commits (one fsync each) per failover %.2f: p50 %v, p99 %v, max %v; failover less its commits: p50 %v, p99 %v, max %v\n",
		len(l), r.Cfg.VMs, r.Cfg.Stockouts, r.Cfg.Concurrency, r.Failed,
		us(percentile(l, 50)), us(percentile(l, 90)), us(percentile(l, 99)), us(percentile(l, 100)),
		perFailover, us(percentile(r.CommitTimes, 50)), us(percentile(r.CommitTimes, 99)), us(percentile(r.CommitTimes, 100)),
		us(percentile(r.Rest, 50)), us(percentile(r.Rest, 99)), us(percentile(r.Rest, 100)))
}

func us(d time.Duration) time.Duration { return d.Round(time.Microsecond) }
