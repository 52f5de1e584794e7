package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/journal/postgres"
	"github.com/org/gpuprov/journal/postgres/pgtest"
	"github.com/org/gpuprov/provider/sim/simserver"
)

// s5Config is scenario S5: replicas of one service, each a Provisioner
// with its own pacer, launching at once on one rate-limited sim account
// through one PostgreSQL journal.
type s5Config struct {
	VMs        int
	Replicas   int
	RateLimit  float64       // the account's requests per second, server and each replica's adapter
	Burst      int           // each replica's adapter bucket; the server's is RateLimit (one second)
	APILatency time.Duration // per request
	Boot       time.Duration // create → running, ± BootJitter
	BootJitter time.Duration
	Poll       time.Duration
	// Stagger starts replica i (New, then its launches) i×Stagger after
	// the first; zero builds every replica first and then launches all at
	// once.
	Stagger time.Duration
	// Journal is a PostgreSQL URL; S5 makes a schema of its own there and
	// drops it at the end. Empty: a private server (pgtest.Start).
	Journal string
	// Share lets the replicas see the journal's journal.Members; false
	// hides it (the baseline: every replica paces the account's full
	// rate).
	Share bool
	Seed  uint64
	// Timeline reports every second's requests and 429s, not only the
	// first ones'.
	Timeline bool
}

// s5Cloud is S5's one sim account.
const s5Cloud = "sim-a"

// defaultS5 is S5 as the issue states it.
func defaultS5() s5Config {
	return s5Config{
		VMs: 1000, Replicas: 3, RateLimit: 50, Burst: 10, APILatency: 20 * time.Millisecond,
		Boot: 3 * time.Second, BootJitter: time.Second, Poll: 500 * time.Millisecond, Share: true, Seed: 1,
	}
}

// s5Result is what S5 measured.
type s5Result struct {
	Cfg     s5Config
	Members bool          // the replicas' journal implements journal.Members
	Wall    time.Duration // the first launch → every VM ended
	Ready   int
	Failed  int
	// FailedThrott counts the failed VMs whose error mentions throttling.
	FailedThrott int
	Errors       []string       // up to 5 failure messages
	Calls        map[string]int // requests by kind, the 429s included (the sim's Stats)
	TotalCalls   int
	RateLimited  int // 429s (the sim's Stats)
	// Requests are the requests the replicas sent after the first launch
	// began, timed from then.
	Requests []s5Request
}

// Answered is the requests the server did not answer with 429.
func (r *s5Result) Answered() int { return r.TotalCalls - r.RateLimited }

// FloorCalls is what one process needs for the requests the replicas got
// answered (429s left out), the way S1 counts it: those requests less the
// server bucket's initial second, at the account's rate, plus one mean
// boot.
func (r *s5Result) FloorCalls() time.Duration {
	n := float64(r.Answered()) - r.Cfg.RateLimit
	return time.Duration(max(n, 0)/r.Cfg.RateLimit*float64(time.Second)) + r.Cfg.Boot
}

// FloorLead is the floor: every VM's create at the account's rate,
// plus one mean boot.
func (r *s5Result) FloorLead() time.Duration {
	return time.Duration(float64(r.Cfg.VMs)/r.Cfg.RateLimit*float64(time.Second)) + r.Cfg.Boot
}

// Ratio is the wall time over FloorCalls.
func (r *s5Result) Ratio() float64 { return r.Wall.Seconds() / r.FloorCalls().Seconds() }

// RatioFromCreate is the wall time less the wait for the journal before the
// first create, over FloorCalls: what the pacing made of the floor.
func (r *s5Result) RatioFromCreate() float64 {
	first, _ := r.Creates()
	return (r.Wall - first).Seconds() / r.FloorCalls().Seconds()
}

// Creates returns when the first and the last create were sent: before
// the first, the launches wait for the journal.
func (r *s5Result) Creates() (first, last time.Duration) {
	first = -1
	for _, q := range r.Requests {
		if q.Create {
			if first < 0 || q.At < first {
				first = q.At
			}
			last = max(last, q.At)
		}
	}
	return max(first, 0), last
}

// Paced is the rate of the answered requests (429s left out) sent while
// every replica had creates to send: from the last replica's first create
// to the first replica's last. It is the account's rate if the replicas
// pace it whole between them.
func (r *s5Result) Paced() float64 {
	from, to := r.busy()
	n := 0
	for _, q := range r.Requests {
		if !q.Throttled && q.At >= from && q.At <= to {
			n++
		}
	}
	if to <= from {
		return 0
	}
	return float64(n) / (to - from).Seconds()
}

// busy is when every replica was sending creates: from the last
// replica's first create to the first replica's last (to ≤ from: never).
func (r *s5Result) busy() (from, to time.Duration) {
	first, last := r.replicaCreates()
	return slices.Max(first), slices.Min(last)
}

// replicaCreates returns, per replica, when it sent its first and its last
// create (-1: none).
func (r *s5Result) replicaCreates() (first, last []time.Duration) {
	first = make([]time.Duration, r.Cfg.Replicas)
	last = make([]time.Duration, r.Cfg.Replicas)
	for i := range first {
		first[i], last[i] = -1, -1
	}
	for _, q := range r.Requests {
		if q.Create {
			if first[q.Replica] < 0 || q.At < first[q.Replica] {
				first[q.Replica] = q.At
			}
			last[q.Replica] = max(last[q.Replica], q.At)
		}
	}
	return first, last
}

// Throttled429 returns the 429s in all, and those to requests sent after
// the first second.
func (r *s5Result) Throttled429() (all, late int) {
	for _, q := range r.Requests {
		if q.Throttled {
			all++
			if q.At >= time.Second {
				late++
			}
		}
	}
	return all, late
}

// perSecond counts, for each second since the start, the requests of
// replica (-1: all) that match.
func (r *s5Result) perSecond(replica int, match func(s5Request) bool) []int {
	var out []int
	for _, q := range r.Requests {
		if (replica >= 0 && q.Replica != replica) || !match(q) {
			continue
		}
		s := int(q.At / time.Second)
		for len(out) <= s {
			out = append(out, 0)
		}
		out[s]++
	}
	return out
}

// unshared is the baseline's journal: the backend's Journal methods and no
// other, so that a Provisioner finds no journal.Members.
type unshared struct{ journal.Journal }

// s5Journal makes a fresh schema for S5 on the server of the URL base (a
// private server, started here, when empty) and returns the schema's URL
// and what removes it (and stops the private server).
func s5Journal(ctx context.Context, base string) (url string, cleanup func() error, err error) {
	var srv *pgtest.Server
	if base == "" {
		if srv, err = pgtest.Start(); err != nil {
			return "", nil, fmt.Errorf("a private PostgreSQL server (or pass -journal URL): %w", err)
		}
		base = srv.URL
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on supported platforms
	schema := "s5_" + hex.EncodeToString(b)
	if err := pgExec(ctx, base, "CREATE SCHEMA "+schema); err != nil {
		if srv != nil {
			err = errors.Join(err, srv.Stop())
		}
		return "", nil, err
	}
	cleanup = func() error {
		if srv != nil {
			return srv.Stop()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return pgExec(ctx, base, "DROP SCHEMA "+schema+" CASCADE")
	}
	return pgtest.WithParam(base, "search_path", schema), cleanup, nil
}

// pgExec runs stmt on the database of u.
func pgExec(ctx context.Context, u, stmt string) error {
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		return fmt.Errorf("s5: connect to PostgreSQL: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, stmt); err != nil {
		return fmt.Errorf("s5: %s: %w", stmt, err)
	}
	return nil
}

// s5Replica is one replica: its journal connection, its adapter (and so
// its pacer) and its Provisioner.
type s5Replica struct {
	j    journal.Journal
	db   *postgres.DB
	p    *gpuprov.Provisioner
	reqs []gpuprov.Request
	out  []gpuprov.LaunchResult
}

// open connects replica i to the journal at url and builds its
// Provisioner, with an adapter of its own sending through tr.
func (rep *s5Replica) open(ctx context.Context, i int, url string, srv *simserver.Server, tr http.RoundTripper, cfg s5Config) error {
	db, err := postgres.Open(ctx, url)
	if err != nil {
		return err
	}
	rep.db, rep.j = db, db
	if !cfg.Share {
		rep.j = unshared{db}
	}
	adapters, err := newAdapters([]account{{Name: s5Cloud, Endpoint: srv.URL(), APIKey: srv.APIKey(s5Cloud)}}, db.Installation(), adapterConfig{
		RequestsPerSecond: cfg.RateLimit, Burst: cfg.Burst, PollInterval: cfg.Poll,
		ConsistencyWindow: 2 * time.Second, BootTimeout: 2 * time.Minute, DeleteTimeout: 5 * time.Minute,
		Transport: tr,
	})
	if err != nil {
		return err
	}
	rep.p, err = gpuprov.New(rep.j, gpuprov.WithProvider(adapters...), gpuprov.WithSSH("root", nil, false),
		gpuprov.WithOwner(fmt.Sprintf("s5-replica-%d", i)))
	return err
}

// close closes the Provisioner (which leaves the members) and the journal.
func (rep *s5Replica) close() error {
	var errs []error
	if rep.p != nil {
		errs = append(errs, rep.p.Close())
	}
	if rep.db != nil {
		errs = append(errs, rep.db.Close())
	}
	return errors.Join(errs...)
}

// runS5 runs S5 in this process: the sim server, the journal (a private
// PostgreSQL server unless cfg.Journal names one) and cfg.Replicas
// Provisioners.
func runS5(ctx context.Context, cfg s5Config) (res *s5Result, err error) {
	if cfg.Replicas < 1 || cfg.VMs < cfg.Replicas || cfg.RateLimit <= 0 {
		return nil, fmt.Errorf("s5: want replicas ≥ 1, VMs ≥ replicas and a positive rate (replicas %d, VMs %d, rate %v)", cfg.Replicas, cfg.VMs, cfg.RateLimit)
	}
	timing := simserver.Timing{APILatency: simserver.Duration(cfg.APILatency), BootTime: simserver.Duration(cfg.Boot),
		BootJitter: simserver.Duration(cfg.BootJitter), DeleteTime: simserver.Duration(300 * time.Millisecond)}
	srv, err := simserver.Start(simserver.Options{DisableSSH: true, Seed: cfg.Seed, Clouds: []simserver.CloudConfig{{
		Name: s5Cloud, Offers: scaleCatalog(0, s5Cloud), Timing: &timing,
		Faults: simserver.Faults{RateLimit: cfg.RateLimit, RateBurst: int(cfg.RateLimit)},
	}}})
	if err != nil {
		return nil, err
	}
	defer srv.Close()
	url, dropJournal, err := s5Journal(ctx, cfg.Journal)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, dropJournal()) }()

	base := &http.Transport{MaxIdleConns: 512, MaxIdleConnsPerHost: 256, IdleConnTimeout: 30 * time.Second}
	defer base.CloseIdleConnections()
	log := &requestLog{next: base}
	reps := make([]*s5Replica, cfg.Replicas)
	defer func() {
		for _, rep := range reps {
			if rep != nil {
				err = errors.Join(err, rep.close())
			}
		}
	}()
	for i := range reps {
		reps[i] = &s5Replica{}
		lo, hi := i*cfg.VMs/cfg.Replicas, (i+1)*cfg.VMs/cfg.Replicas
		for v := lo; v < hi; v++ {
			reps[i].reqs = append(reps[i].reqs, gpuprov.Request{Name: vmName(v), GPU: "H100-80GB",
				Providers: []string{s5Cloud}, Timeout: 10 * time.Minute})
		}
	}
	// The first replica is built before the start; the others too unless
	// they are staggered, in which case each is built when its turn comes,
	// as replicas started one after another.
	built := 1
	if cfg.Stagger == 0 {
		built = len(reps)
	}
	for i, rep := range reps[:built] {
		if err := rep.open(ctx, i, url, srv, log.replica(i), cfg); err != nil {
			return nil, err
		}
	}
	res = &s5Result{Cfg: cfg}
	_, res.Members = reps[0].j.(journal.Members)
	openErr := make([]error, len(reps))
	var wg sync.WaitGroup
	start := time.Now()
	log.begin(start)
	for i, rep := range reps {
		wg.Go(func() {
			if i >= built {
				select {
				case <-time.After(time.Duration(i) * cfg.Stagger):
				case <-ctx.Done():
					openErr[i] = ctx.Err()
					return
				}
				if openErr[i] = rep.open(ctx, i, url, srv, log.replica(i), cfg); openErr[i] != nil {
					return
				}
			}
			rep.out = rep.p.LaunchMany(ctx, rep.reqs)
		})
	}
	wg.Wait()
	res.Wall = time.Since(start)
	if err := errors.Join(openErr...); err != nil {
		return nil, err
	}
	res.Requests = log.requests()

	for _, rep := range reps {
		for _, r := range rep.out {
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
			}
		}
	}
	st, err := srv.Stats(s5Cloud)
	if err != nil {
		return nil, err
	}
	res.Calls = st.Calls
	for _, v := range st.Calls {
		res.TotalCalls += v
	}
	res.RateLimited = st.RateLimited
	return res, nil
}

// requestLog is an http.RoundTripper under the replicas' adapters that
// notes every request: when it was sent, by which replica, whether it was
// a create, and whether the answer was 429 (the sim's Stats count 429s,
// but not when).
type requestLog struct {
	next http.RoundTripper

	mu    sync.Mutex
	start time.Time // zero: not started, nothing noted
	reqs  []s5Request
}

// s5Request is one request the replicas sent.
type s5Request struct {
	At        time.Duration // since the start
	Replica   int
	Create    bool
	Throttled bool // answered 429
}

// begin starts the clock: requests before it are not noted.
func (l *requestLog) begin(start time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.start = start
}

// replica returns the RoundTripper of replica i.
func (l *requestLog) replica(i int) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		l.mu.Lock()
		started := !l.start.IsZero()
		req := s5Request{At: time.Since(l.start), Replica: i,
			Create: r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/instances")}
		l.mu.Unlock()
		resp, err := l.next.RoundTrip(r)
		if !started {
			return resp, err // New sends none today
		}
		req.Throttled = err == nil && resp.StatusCode == http.StatusTooManyRequests
		l.mu.Lock()
		l.reqs = append(l.reqs, req)
		l.mu.Unlock()
		return resp, err
	})
}

// requests returns the requests noted, in the order they were answered.
func (l *requestLog) requests() []s5Request {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.reqs)
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// Report renders the result as the lines docs/benchmarks.md quotes.
func (r *s5Result) Report() string {
	var b strings.Builder
	n := float64(r.Cfg.VMs)
	sharing := "off (journal.Members hidden)"
	switch {
	case r.Cfg.Share && r.Members:
		sharing = "on (journal.Members)"
	case r.Cfg.Share:
		sharing = "asked for, but the journal does not implement journal.Members: every replica paces the full rate"
	}
	fmt.Fprintf(&b, "S5: %d VMs by %d replicas (own adapter and pacer each) on one account, %.0f req/s (adapter burst %d), API %v, boot %v±%v, stagger %v, PostgreSQL journal; sharing %s\n",
		r.Cfg.VMs, r.Cfg.Replicas, r.Cfg.RateLimit, r.Cfg.Burst, r.Cfg.APILatency, r.Cfg.Boot, r.Cfg.BootJitter, r.Cfg.Stagger, sharing)
	fmt.Fprintf(&b, "  ready %d, failed %d (by throttling %d)\n", r.Ready, r.Failed, r.FailedThrott)
	for _, e := range r.Errors {
		fmt.Fprintf(&b, "  error: %s\n", e)
	}
	fmt.Fprintf(&b, "  wall to all ready %.2fs; single-process floor of the calls answered ((%d − %.0f) / %.0f req/s + boot) %.2fs → ratio %.2f (target ≤ 1.30); creates floor (%d / %.0f + boot) %.2fs → ratio %.2f\n",
		r.Wall.Seconds(), r.Answered(), r.Cfg.RateLimit, r.Cfg.RateLimit, r.FloorCalls().Seconds(), r.Ratio(),
		r.Cfg.VMs, r.Cfg.RateLimit, r.FloorLead().Seconds(), r.Wall.Seconds()/r.FloorLead().Seconds())
	first, last := r.Creates()
	fmt.Fprintf(&b, "  creates sent from %.2fs (before, the launches wait for the journal) to %.2fs; from the first create to all ready %.2fs → ratio %.2f to the floor\n",
		first.Seconds(), last.Seconds(), (r.Wall - first).Seconds(), r.RatioFromCreate())
	firsts, lasts := r.replicaCreates()
	b.WriteString("  each replica's creates sent:")
	for i := range firsts {
		fmt.Fprintf(&b, " %.2f–%.2fs", firsts[i].Seconds(), lasts[i].Seconds())
	}
	if from, to := r.busy(); to > from {
		fmt.Fprintf(&b, "; all sending from %.2fs to %.2fs: %.1f requests/s answered (the account's rate: %.0f)\n",
			from.Seconds(), to.Seconds(), r.Paced(), r.Cfg.RateLimit)
	} else {
		b.WriteString("; never all at once\n")
	}
	all, late := r.Throttled429()
	fmt.Fprintf(&b, "  429s %d (sim: %d), to requests sent after the first second %d (target 0); per replica", all, r.RateLimited, late)
	for i := range r.Cfg.Replicas {
		fmt.Fprintf(&b, " %d", sum(r.perSecond(i, throttled)))
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "  API calls per VM %.2f (answered %.2f):", float64(r.TotalCalls)/n, float64(r.Answered())/n)
	for _, k := range slices.Sorted(maps.Keys(r.Calls)) {
		fmt.Fprintf(&b, " %s %.3f", k, float64(r.Calls[k])/n)
	}
	b.WriteString("\n")
	shown, shownRep := 12, 8
	if r.Cfg.Timeline {
		shown, shownRep = math.MaxInt, math.MaxInt
	}
	fmt.Fprintf(&b, "  per second since the start, all replicas: sent %s\n", seconds(r.perSecond(-1, anyRequest), shown))
	fmt.Fprintf(&b, "                                            429s %s\n", seconds(r.perSecond(-1, throttled), shown))
	for i := range r.Cfg.Replicas {
		fmt.Fprintf(&b, "    replica %d: sent %s; 429s %s\n", i, seconds(r.perSecond(i, anyRequest), shownRep), seconds(r.perSecond(i, throttled), shownRep))
	}
	return b.String()
}

func anyRequest(s5Request) bool  { return true }
func throttled(q s5Request) bool { return q.Throttled }

func sum(ns []int) int {
	t := 0
	for _, n := range ns {
		t += n
	}
	return t
}

// seconds renders per-second counts: the first `first` seconds, then the
// peak of the rest.
func seconds(tot []int, first int) string {
	var b strings.Builder
	for i, n := range tot[:min(first, len(tot))] {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%d", n)
	}
	if len(tot) > first {
		rest := tot[first:]
		peak := slices.Max(rest)
		fmt.Fprintf(&b, " … (%d s more, peak %d in second %d)", len(rest), peak, first+slices.Index(rest, peak))
	}
	return b.String()
}
