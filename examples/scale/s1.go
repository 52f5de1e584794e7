package main

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/journal/sqlite"
	"github.com/org/gpuprov/provider/sim/simserver"
)

// s1Config is scenario S1: VMs launched at once (LaunchMany) over the two
// sim clouds, each account rate limited.
type s1Config struct {
	VMs        int
	RateLimit  float64       // requests per second per account, server and adapter
	Burst      int           // the adapter's bucket; the server's is RateLimit (one second)
	APILatency time.Duration // per request
	Boot       time.Duration // create → running, ± BootJitter
	BootJitter time.Duration
	ErrorRate  float64 // 5xx per call
	LostCreate float64 // creates that land but whose answer is lost
	Poll       time.Duration
	Seed       uint64
	// StockoutRanks stocks out, on cloud i, its offer of rank
	// StockoutRanks[i] (0: the cheapest).
	StockoutRanks []int
	Dir           string // journal folder
	Teardown      bool   // delete every VM afterwards and check the sim is empty
}

// defaultS1 is S1 as the issue states it.
func defaultS1() s1Config {
	return s1Config{
		VMs: 1000, RateLimit: 50, Burst: 10, APILatency: 20 * time.Millisecond,
		Boot: 3 * time.Second, BootJitter: time.Second, ErrorRate: 0.02, LostCreate: 0.01,
		Poll: 500 * time.Millisecond, Seed: 1, StockoutRanks: defaultStockoutRanks,
	}
}

// s1Result is what S1 measured.
type s1Result struct {
	Cfg          s1Config
	Wall         time.Duration // LaunchMany start → every VM ended
	LastReady    time.Duration // start → the last ready event
	Slowest      string        // the last VM to be ready: its events, timed from the start
	Ready        int
	Failed       int
	FailedThrott int            // failed VMs whose error mentions throttling
	Errors       []string       // up to 5 failure messages
	Calls        map[string]int // API calls by kind, both clouds
	CloudCalls   map[string]int // API calls by cloud
	TotalCalls   int
	Creates      int // instances created (every successful or lost create)
	RateLimited  int // 429s answered
	Injected5xx  int
	LostCreates  int
	Duplicates   int // VMs with more than one live instance
	Orphans      int // live instances no ready VM owns
	CPU          time.Duration
	PeakRSS      int64
	PeakLive     uint64 // peak live heap (as of each GC)
	PeakInUse    uint64 // peak heap in use (garbage included)
	BaseLive     uint64
	Leftover     int   // instances and side resources left after teardown
	JournalBytes int64 // the journal's files (database and WAL) once every VM ended
}

// FloorLead is the floor of the issue: every VM's create at the allowed
// rate of both accounts, plus one mean boot.
func (r *s1Result) FloorLead() time.Duration {
	rate := r.Cfg.RateLimit * float64(len(cloudNames))
	return time.Duration(float64(r.Cfg.VMs)/rate*float64(time.Second)) + r.Cfg.Boot
}

// FloorCalls is the floor the rate limit really sets on this run: the
// busiest account's API calls, less its bucket's initial burst, at its
// allowed rate, plus one mean boot.
func (r *s1Result) FloorCalls() time.Duration {
	busiest := 0
	for _, n := range r.CloudCalls {
		busiest = max(busiest, n)
	}
	n := float64(busiest) - r.Cfg.RateLimit // the server bucket starts with one second's worth
	return time.Duration(max(n, 0)/r.Cfg.RateLimit*float64(time.Second)) + r.Cfg.Boot
}

func vmName(i int) string { return fmt.Sprintf("vm-%04d", i) }

// runS1 runs S1 in this process: the sim server, the journal and the
// Provisioner.
func runS1(ctx context.Context, cfg s1Config) (*s1Result, error) {
	timing := simserver.Timing{APILatency: simserver.Duration(cfg.APILatency), BootTime: simserver.Duration(cfg.Boot),
		BootJitter: simserver.Duration(cfg.BootJitter), DeleteTime: simserver.Duration(300 * time.Millisecond)}
	faults := simserver.Faults{RateLimit: cfg.RateLimit, RateBurst: int(cfg.RateLimit),
		ErrorRate: cfg.ErrorRate, LostCreateRate: cfg.LostCreate}
	srv, err := simserver.Start(simOptions(timing, faults, cfg.StockoutRanks, cfg.Seed))
	if err != nil {
		return nil, err
	}
	defer srv.Close()
	j, err := sqlite.Open(ctx, filepath.Join(cfg.Dir, "journal.db"))
	if err != nil {
		return nil, err
	}
	defer j.Close()
	adapters, err := newAdapters(inProcessAccounts(srv), j.Installation(), adapterConfig{
		RequestsPerSecond: cfg.RateLimit, Burst: cfg.Burst, PollInterval: cfg.Poll,
		ConsistencyWindow: 2 * time.Second, BootTimeout: 2 * time.Minute, DeleteTimeout: 5 * time.Minute,
	})
	if err != nil {
		return nil, err
	}
	// No authorized keys and no injected host keys: SSH is off in S1.
	// Every VM's events as they happen (retries included, which are not
	// journaled), for the slowest VM's timeline. Their times keep the
	// monotonic clock's reading: the journal's do not, and this machine's
	// wall clock is stepped now and then.
	var eventsMu sync.Mutex
	events := map[string][]gpuprov.Event{}
	sink := gpuprov.WithEvents(func(e gpuprov.Event) {
		eventsMu.Lock()
		events[e.VM] = append(events[e.VM], e)
		eventsMu.Unlock()
	})
	p, err := gpuprov.New(j, gpuprov.WithProvider(adapters...), gpuprov.WithSSH("root", nil, false), sink)
	if err != nil {
		return nil, err
	}
	defer p.Close()

	reqs := make([]gpuprov.Request, cfg.VMs)
	for i := range reqs {
		reqs[i] = gpuprov.Request{Name: vmName(i), GPU: "H100-80GB", Providers: []string{cloudNames[i%len(cloudNames)]},
			Timeout: 10 * time.Minute}
	}
	res := &s1Result{Cfg: cfg, Calls: map[string]int{}, CloudCalls: map[string]int{}}
	res.BaseLive = baselineHeap()
	hs := startHeapSampler(20 * time.Millisecond)
	cpu0 := cpuTime()
	start := time.Now()
	out := p.LaunchMany(ctx, reqs)
	res.Wall = time.Since(start)
	res.CPU = cpuTime() - cpu0
	res.PeakLive, res.PeakInUse = hs.Stop()
	res.PeakRSS = peakRSS()
	res.JournalBytes = dirSize(cfg.Dir)

	var last *gpuprov.VM // the last to be ready
	for _, r := range out {
		switch {
		case r.Err != nil:
			res.Failed++
			msg := r.Err.Error()
			if strings.Contains(msg, "rate_limited") || strings.Contains(msg, "429") {
				res.FailedThrott++
			}
			if len(res.Errors) < 5 {
				res.Errors = append(res.Errors, msg)
			}
		case r.VM != nil && r.VM.State == gpuprov.StateReady:
			res.Ready++
			if last == nil || r.VM.ReadyAt.After(last.ReadyAt) {
				last = r.VM
			}
		}
	}
	if last != nil {
		res.LastReady = last.ReadyAt.Sub(start)
		eventsMu.Lock()
		res.Slowest = timeline(last.Name, events[last.Name], start)
		eventsMu.Unlock()
	}
	ready := map[string]bool{}
	for _, r := range out {
		if r.Err == nil && r.VM != nil {
			ready[r.VM.Name+"/"+r.VM.InstanceID] = true
		}
	}
	perVM := map[string]int{}
	for _, c := range cloudNames {
		st, err := srv.Stats(c)
		if err != nil {
			return nil, err
		}
		for k, v := range st.Calls {
			res.Calls[k] += v
			res.CloudCalls[c] += v
			res.TotalCalls += v
		}
		res.Creates += st.Creates
		res.RateLimited += st.RateLimited
		res.LostCreates += st.LostCreates
		res.Injected5xx += st.Errors[simserver.CodeInternal] + st.Errors[simserver.CodeUnavailable] - st.LostCreates
		insts, err := srv.Instances(c)
		if err != nil {
			return nil, err
		}
		for _, in := range insts {
			if in.Status == simserver.StatusTerminated {
				continue
			}
			vm := in.Labels["gpuprov"]
			perVM[vm]++
			if !ready[vm+"/"+in.ID] {
				res.Orphans++
			}
		}
	}
	for _, n := range perVM {
		if n > 1 {
			res.Duplicates++
		}
	}
	if cfg.Teardown {
		if err := deleteAll(ctx, p, reqs); err != nil {
			return res, err
		}
		p.Close() // removes the shared firewalls waiting out their grace
		if res.Leftover, err = leftovers(srv); err != nil {
			return res, err
		}
	}
	return res, nil
}

// timeline is vm's events (in the order they were handed to the sinks),
// each timed from start: what the last VM to be ready waited for.
func timeline(vm string, evs []gpuprov.Event, start time.Time) string {
	var b strings.Builder
	b.WriteString(vm + ":")
	for _, e := range evs {
		fmt.Fprintf(&b, " %s", e.Type)
		if e.ErrorKind != "" {
			fmt.Fprintf(&b, "(%s)", e.ErrorKind)
		}
		fmt.Fprintf(&b, " %.2fs,", e.Time.Sub(start).Seconds())
	}
	return strings.TrimSuffix(b.String(), ",")
}

// dirSize is the size of the files in dir.
func dirSize(dir string) int64 {
	var n int64
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if fi, err := e.Info(); err == nil && fi.Mode().IsRegular() {
			n += fi.Size()
		}
	}
	return n
}

// deleteAll deletes every VM of reqs concurrently.
func deleteAll(ctx context.Context, p *gpuprov.Provisioner, reqs []gpuprov.Request) error {
	errs := make(chan error, len(reqs))
	for _, r := range reqs {
		go func() { errs <- p.Delete(ctx, r.Name) }()
	}
	var first error
	for range reqs {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// leftovers counts the live instances and side resources of every cloud.
func leftovers(srv *simserver.Server) (int, error) {
	n := 0
	for _, c := range srv.Clouds() {
		insts, err := srv.Instances(c)
		if err != nil {
			return 0, err
		}
		for _, in := range insts {
			if in.Status != simserver.StatusTerminated {
				n++
			}
		}
		res, err := srv.SideResources(c)
		if err != nil {
			return 0, err
		}
		n += len(res.Firewalls) + len(res.SSHKeys)
	}
	return n, nil
}

// Report renders the result as the lines docs/benchmarks.md quotes.
func (r *s1Result) Report() string {
	var b strings.Builder
	n := float64(r.Cfg.VMs)
	fmt.Fprintf(&b, "S1: %d VMs over %d clouds, %.0f req/s per account (adapter burst %d), API %v, boot %v±%v, 5xx %.0f%%, lost creates %.0f%%, stocked-out offer ranks %v\n",
		r.Cfg.VMs, len(cloudNames), r.Cfg.RateLimit, r.Cfg.Burst, r.Cfg.APILatency, r.Cfg.Boot, r.Cfg.BootJitter, r.Cfg.ErrorRate*100, r.Cfg.LostCreate*100, r.Cfg.StockoutRanks)
	fmt.Fprintf(&b, "  ready %d, failed %d (by throttling %d), duplicates %d, orphans %d\n", r.Ready, r.Failed, r.FailedThrott, r.Duplicates, r.Orphans)
	for _, e := range r.Errors {
		fmt.Fprintf(&b, "  error: %s\n", e)
	}
	fmt.Fprintf(&b, "  wall to all ready %.2fs (last ready at %.2fs); floor (creates/rate + boot) %.2fs → ratio %.2f (target ≤ 1.30)\n",
		r.Wall.Seconds(), r.LastReady.Seconds(), r.FloorLead().Seconds(), r.Wall.Seconds()/r.FloorLead().Seconds())
	if r.Slowest != "" {
		fmt.Fprintf(&b, "  the last ready: %s\n", r.Slowest)
	}
	fmt.Fprintf(&b, "  floor of the calls made (%v; the busiest account's at its rate, + boot) %.2fs → ratio %.2f\n",
		r.CloudCalls, r.FloorCalls().Seconds(), r.Wall.Seconds()/r.FloorCalls().Seconds())
	fmt.Fprintf(&b, "  API calls per VM %.2f, beyond the create %.2f (target ≤ 1.2); creates landed %d (%.2f/VM), 429s %d, injected 5xx %d, lost creates %d\n",
		float64(r.TotalCalls)/n, float64(r.TotalCalls-r.Cfg.VMs)/n, r.Creates, float64(r.Creates)/n, r.RateLimited, r.Injected5xx, r.LostCreates)
	for _, k := range slices.Sorted(maps.Keys(r.Calls)) {
		fmt.Fprintf(&b, "    %-16s %6d  %.3f/VM\n", k, r.Calls[k], float64(r.Calls[k])/n)
	}
	fmt.Fprintf(&b, "  CPU %.2fs (%.2f ms/VM); peak RSS %.1f MiB; peak live heap %.1f MiB (baseline %.1f MiB) → %.1f KiB per in-flight VM (target ≤ 64); peak heap in use %.1f MiB\n",
		r.CPU.Seconds(), r.CPU.Seconds()*1000/n, float64(r.PeakRSS)/(1<<20), float64(r.PeakLive)/(1<<20), float64(r.BaseLive)/(1<<20),
		r.HeapPerVM()/1024, float64(r.PeakInUse)/(1<<20))
	fmt.Fprintf(&b, "  journal %.1f MiB (%.0f bytes per VM)\n", float64(r.JournalBytes)/(1<<20), float64(r.JournalBytes)/n)
	if r.Cfg.Teardown {
		fmt.Fprintf(&b, "  after deleting every VM: %d instances and side resources left\n", r.Leftover)
	}
	return b.String()
}

// HeapPerVM is the peak live heap above the baseline per in-flight VM, in
// bytes (the in-process sim server's share included).
func (r *s1Result) HeapPerVM() float64 {
	if r.PeakLive < r.BaseLive {
		return 0
	}
	return float64(r.PeakLive-r.BaseLive) / float64(r.Cfg.VMs)
}
