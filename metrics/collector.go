package metrics

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/org/gpuprov"
)

// DefaultLaunchBuckets are the buckets of gpuprov_launch_duration_seconds:
// from a second (the simulated cloud) to two hours (a launch that waited
// for capacity).
var DefaultLaunchBuckets = []float64{1, 2.5, 5, 10, 20, 30, 60, 90, 120, 180, 300, 600, 900, 1200, 1800, 3600, 7200}

// DefaultCallBuckets are the buckets of gpuprov_api_call_duration_seconds:
// the OpenTelemetry semantic conventions' advice for
// http.client.request.duration, and 30s to 2m for the calls that wait on a
// cloud's long-running operation.
var DefaultCallBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 30, 60, 120}

// maxStarted bounds the launches a Collector remembers the start of. A
// launch is forgotten when it ends (ready, failed or deleted); one that
// another process finished is never seen to end here, so past the bound
// the oldest start is dropped (and that launch's duration not observed).
const maxStarted = 10000

// Collector is a prometheus.Collector of a Provisioner's metrics. Feed it
// with Options (its Event and Call methods); register it with a registry.
// It is safe for concurrent use: Event and Call are called from every
// goroutine that drives a VM. Once a label set has been seen, Call and the
// counting events allocate nothing; a launch event stores its start in a
// map until the launch ends.
type Collector struct {
	b bounds
	j JournalReader // nil: no gauges read from the journal

	launchDuration *prometheus.HistogramVec
	attempts       *prometheus.CounterVec
	failures       *prometheus.CounterVec
	launches       *prometheus.CounterVec
	blocks         *prometheus.CounterVec
	retries        *prometheus.CounterVec
	teardowns      *prometheus.CounterVec
	recoveries     prometheus.Counter
	calls          *prometheus.CounterVec
	callDuration   *prometheus.HistogramVec
	throttled      *prometheus.CounterVec
	retryAfter     *prometheus.CounterVec
	readErrors     prometheus.Counter // with j only
	vmsDesc        *prometheus.Desc   // with j only
	activeDesc     *prometheus.Desc   // with j only

	durationOf *cached[prometheus.Observer]
	attemptsOf *cached[prometheus.Counter]
	failuresOf *cached[prometheus.Counter]
	launchesOf *cached[prometheus.Counter]
	blocksOf   *cached[prometheus.Counter]
	retriesOf  *cached[prometheus.Counter]
	teardownOf *cached[prometheus.Counter]
	callsOf    *cached[callSeries]

	// cost is WithCosts' reader and its last sums (nil without it);
	// scrapes are serialized by costMu.
	cost   *costCache
	costMu sync.Mutex

	mu         sync.Mutex
	started    map[string]time.Time // VM → its launch event's time, while it launches
	maxStarted int
}

// callSeries are the children one Call updates.
type callSeries struct {
	calls      prometheus.Counter
	duration   prometheus.Observer
	throttled  prometheus.Counter
	retryAfter prometheus.Counter
}

// Option configures a Collector.
type Option func(*config)

type config struct {
	j                          JournalReader
	costs                      func(context.Context) ([]gpuprov.AttemptCost, error)
	launchBuckets, callBuckets []float64
}

// WithJournal makes the collector read j at each scrape for the gauges of
// live VMs and of blocks in force (see JournalReader). Pass the journal the
// Provisioner writes to.
func WithJournal(j JournalReader) Option { return func(c *config) { c.j = j } }

// WithLaunchBuckets replaces DefaultLaunchBuckets (upper bounds in seconds,
// increasing).
func WithLaunchBuckets(b ...float64) Option { return func(c *config) { c.launchBuckets = b } }

// WithCallBuckets replaces DefaultCallBuckets (upper bounds in seconds,
// increasing).
func WithCallBuckets(b ...float64) Option { return func(c *config) { c.callBuckets = b } }

// New returns a Collector. Register it (prometheus.Registerer.Register)
// and pass its Options to gpuprov.New. It panics if bucket bounds are not
// increasing, as prometheus.NewHistogramVec does.
func New(opts ...Option) *Collector {
	cfg := config{launchBuckets: DefaultLaunchBuckets, callBuckets: DefaultCallBuckets}
	for _, o := range opts {
		o(&cfg)
	}
	c := &Collector{
		j:          cfg.j,
		b:          bounds{max: MaxProviders, providers: map[string]bool{}},
		started:    map[string]time.Time{},
		maxStarted: maxStarted,
		launchDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "gpuprov_launch_duration_seconds", Buckets: cfg.launchBuckets,
			Help: "Time from a launch request to its VM being ready, by the provider it is ready on (launches this process saw requested).",
		}, []string{"provider"}),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpuprov_attempts_total", Help: "Attempts started on an offer, by provider.",
		}, []string{"provider"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpuprov_attempt_failures_total", Help: "Attempts that failed, by provider and error kind (capacity, quota, transient, connect, ...).",
		}, []string{"provider", "error_type"}),
		launches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpuprov_launches_total", Help: "Launches that ended, by outcome (ready, failed) and error kind (none for ready ones).",
		}, []string{"outcome", "error_type"}),
		blocks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpuprov_blocks_total", Help: "Blocks recorded on an offer, zone, region or provider after a failure, by provider and error kind.",
		}, []string{"provider", "error_type"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpuprov_retries_total", Help: "Steps of an attempt retried after a transient error, by provider.",
		}, []string{"provider"}),
		teardowns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpuprov_teardowns_incomplete_total", Help: "Teardowns that could not confirm an instance gone (the VM stays deleting until Delete, Recover or Sweep finishes it), by error kind.",
		}, []string{"error_type"}),
		recoveries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gpuprov_recoveries_total", Help: "VMs this process took over to resume them (Recover).",
		}),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpuprov_api_calls_total", Help: "Cloud primitive calls, by provider, op and error kind (none: it succeeded).",
		}, []string{"provider", "op", "error_type"}),
		callDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "gpuprov_api_call_duration_seconds", Buckets: cfg.callBuckets,
			Help: "Duration of cloud primitive calls, pacing waits excluded, by provider and op.",
		}, []string{"provider", "op"}),
		throttled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpuprov_api_throttled_calls_total", Help: "Cloud primitive calls the cloud answered with a rate limit (429 or Retry-After), by provider and op.",
		}, []string{"provider", "op"}),
		retryAfter: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpuprov_api_retry_after_seconds_total", Help: "Pauses the cloud asked of the account with Retry-After, summed, by provider and op.",
		}, []string{"provider", "op"}),
	}
	if cfg.costs != nil {
		c.cost = &costCache{read: cfg.costs, now: time.Now, desc: prometheus.NewDesc("gpuprov_billed_usd",
			"What the journal's VMs billed, as gpuprov counts the bill (every attempt that made an instance, failed ones included, in its cloud's billing increments and minimum), by provider; read at most once a minute.",
			[]string{"provider"}, nil)}
	}
	if c.j != nil || c.cost != nil {
		c.readErrors = prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gpuprov_journal_read_errors_total", Help: "Reads of the journal at scrape time that failed; the gauge each feeds (gpuprov_vms, gpuprov_active_blocks, gpuprov_billed_usd) is missing from that scrape.",
		})
	}
	if c.j != nil {
		c.vmsDesc = prometheus.NewDesc("gpuprov_vms",
			"VMs of the journal that are not over (they may hold a machine or get one), by provider and state, read at scrape time.",
			[]string{"provider", "state"}, nil)
		c.activeDesc = prometheus.NewDesc("gpuprov_active_blocks",
			"Blocks of the journal in force, by provider, error kind and scope (offer, zone, region, spot, family, provider), read at scrape time.",
			[]string{"provider", "error_type", "scope"}, nil)
	}
	b := &c.b
	c.durationOf = newCached(b, c.launchDuration.WithLabelValues, providerC)
	c.attemptsOf = newCached(b, c.attempts.WithLabelValues, providerC)
	c.failuresOf = newCached(b, c.failures.WithLabelValues, providerC, kindC)
	c.launchesOf = newCached(b, c.launches.WithLabelValues, fixed, kindC)
	c.blocksOf = newCached(b, c.blocks.WithLabelValues, providerC, kindC)
	c.retriesOf = newCached(b, c.retries.WithLabelValues, providerC)
	c.teardownOf = newCached(b, c.teardowns.WithLabelValues, kindC)
	c.callsOf = newCached(b, func(lvs ...string) callSeries {
		return callSeries{
			calls:      c.calls.WithLabelValues(lvs...),
			duration:   c.callDuration.WithLabelValues(lvs[0], lvs[1]),
			throttled:  c.throttled.WithLabelValues(lvs[0], lvs[1]),
			retryAfter: c.retryAfter.WithLabelValues(lvs[0], lvs[1]),
		}
	}, providerC, opC, kindC)
	return c
}

// Options returns the gpuprov options that feed c: gpuprov.WithEvents with
// c.Event and gpuprov.WithCallObserver with c.Call.
func (c *Collector) Options() []gpuprov.Option {
	return []gpuprov.Option{gpuprov.WithEvents(c.Event), gpuprov.WithCallObserver(c.Call)}
}

// Event updates the metrics from one engine event. It is a gpuprov.WithEvents
// sink: quick, non-blocking, safe from many goroutines. Events of types it
// does not count are ignored.
func (c *Collector) Event(e gpuprov.Event) {
	switch e.Type {
	case gpuprov.EvLaunch:
		c.start(e.VM, e.Time)
	case gpuprov.EvAttempt:
		c.attemptsOf.with(key{e.Provider}).Inc()
	case gpuprov.EvFailure:
		c.failuresOf.with(key{e.Provider, e.ErrorKind}).Inc()
	case gpuprov.EvBlocked:
		c.blocksOf.with(key{e.Provider, e.ErrorKind}).Inc()
	case gpuprov.EvRetry:
		c.retriesOf.with(key{e.Provider}).Inc()
	case gpuprov.EvRecovered:
		c.recoveries.Inc()
	case gpuprov.EvTeardownError:
		c.teardownOf.with(key{e.ErrorKind}).Inc()
	case gpuprov.EvReady:
		c.launchesOf.with(key{"ready", ""}).Inc()
		if start, ok := c.end(e.VM); ok {
			c.durationOf.with(key{e.Provider}).Observe(max(e.Time.Sub(start), 0).Seconds())
		}
	case gpuprov.EvFailed:
		c.launchesOf.with(key{"failed", e.ErrorKind}).Inc()
		c.end(e.VM)
	case gpuprov.EvDeleted:
		c.end(e.VM)
	}
}

// Call updates the API call metrics from one cloud primitive call. It is a
// gpuprov.WithCallObserver function: quick, safe from many goroutines.
func (c *Collector) Call(call gpuprov.Call) {
	s := c.callsOf.with(key{call.Provider, call.Op, call.ErrorKind})
	s.calls.Inc()
	s.duration.Observe(call.Duration.Seconds())
	if call.Throttled {
		s.throttled.Inc()
	}
	if call.RetryAfter > 0 {
		s.retryAfter.Add(call.RetryAfter.Seconds())
	}
}

// start remembers when vm's launch was requested.
func (c *Collector) start(vm string, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, again := c.started[vm]; !again && len(c.started) >= c.maxStarted {
		oldest, first := "", true
		for name, t := range c.started {
			if first || t.Before(c.started[oldest]) {
				oldest, first = name, false
			}
		}
		delete(c.started, oldest)
	}
	c.started[vm] = at
}

// end forgets vm's launch, returning when it was requested if known.
func (c *Collector) end(vm string) (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.started[vm]
	if ok {
		delete(c.started, vm)
	}
	return t, ok
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range c.collectors() {
		m.Describe(ch)
	}
	if c.j != nil {
		ch <- c.vmsDesc
		ch <- c.activeDesc
	}
	if c.cost != nil {
		ch <- c.cost.desc
	}
}

// Collect implements prometheus.Collector. With WithJournal it reads the
// journal first (see JournalReader).
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	if c.j != nil {
		c.collectJournal(ch)
	}
	if c.cost != nil {
		c.costMu.Lock()
		c.collectCosts(ch)
		c.costMu.Unlock()
	}
	for _, m := range c.collectors() {
		m.Collect(ch)
	}
}

func (c *Collector) collectors() []prometheus.Collector {
	cs := []prometheus.Collector{c.launchDuration, c.attempts, c.failures, c.launches, c.blocks, c.retries,
		c.teardowns, c.recoveries, c.calls, c.callDuration, c.throttled, c.retryAfter}
	if c.readErrors != nil {
		cs = append(cs, c.readErrors)
	}
	return cs
}
