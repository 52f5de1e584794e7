// Package sim is the adapter for the simulated GPU cloud served by
// provider/sim/simserver: the cloud gpuprov's demo, tests, benchmarks and chaos
// runs use. It talks to the server over HTTP exactly as a real REST adapter
// talks to its cloud, and registers itself under the id "sim":
//
//	import _ "github.com/org/gpuprov/provider/sim"
//
//	p, err := provider.Build("sim", provider.Settings{Name: "sim-a", Installation: inst,
//		Config: sim.Config{Endpoint: "http://127.0.0.1:7070", APIKey: key}})
//
// or with Decode: provider.DecodeTOML(section) and a config section such as
//
//	endpoint = "http://127.0.0.1:7070"   # the server's URL (required)
//	api_key  = "simkey-..."              # the cloud's API key (required)
//	cloud    = "sim-a"                   # the cloud on that server; default: the provider name
//	regions  = ["us-east"]               # default: every region of the catalog
//	poll_interval = "500ms"              # also boot_timeout, delete_timeout,
//	                                     # consistency_window, request_timeout
//	requests_per_second = 20             # and burst: the core's token bucket
//	list_page_size = 500                 # GET instances page size (default: the maximum, 500)
//	no_idempotency_token = false         # true for a cloud started with IgnoreIdempotencyToken
//	source_ranges = ["203.0.113.0/24"]   # who may connect; default: anywhere (recorded, not enforced)
//
// Tests build it with New and a Config pointing at an in-process server.
//
// Every API call is a single attempt (go-retryablehttp with RetryMax 0): the
// core is the only retry layer. errors.go maps each HTTP status and error
// code to a provider.ErrorKind. With requests_per_second set, every request
// also waits for its turn: the core's pacer (provider.RequestPacer) under a
// Provisioner, else a token of the adapter's own bucket, so that primitives
// that make several requests, or none, are paced as what they send.
//
// Volumes (provider.VolumeManager, volume.go) are the server's zonal
// volumes, named and labelled as instances are; attached, a volume is a
// device in the instance's sandbox that the sandbox's emulated blkid,
// mkfs.ext4 and mount format and mount (docs/clouds/sim.md, "Volumes").
//
// Firewalls are shared (provider.SharedCleaner): one per installation,
// region, port set and source set, named provider.SharedName, made by the first
// Prepare there and remembered, and removed by CleanupShared once no live
// instance uses it (the server refuses before). The API key
// is sent as a bearer token and never logged.
package sim

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
	"golang.org/x/time/rate"

	"github.com/org/gpuprov/clock"
	"github.com/org/gpuprov/internal/rest"
	"github.com/org/gpuprov/provider"
)

// ID is the id the adapter registers under.
const ID = "sim"

// maxListPageSize is the largest page GET instances serves.
const maxListPageSize = 500

// Config is a sim cloud account. Build it in Go and pass it as
// provider.Settings{Config: sim.Config{...}} (or to New), or write it as
// the TOML table or JSON object whose keys are the field tags; durations are
// then strings such as "500ms".
type Config struct {
	// Endpoint is the server's base URL (http://127.0.0.1:port). Required.
	Endpoint string `toml:"endpoint" json:"endpoint"`
	// Cloud is the cloud on that server; empty means the provider name.
	Cloud string `toml:"cloud" json:"cloud"`
	// APIKey is the cloud's bearer token, as the server printed it
	// (gpuprov sim serve). Required; never logged.
	APIKey string `toml:"api_key" json:"api_key"`
	// Regions limit Plan and List; empty means every region of the catalog.
	Regions []string `toml:"regions" json:"regions"`
	// PollInterval is how often the core observes a booting or deleting
	// instance; zero means 500ms.
	PollInterval time.Duration `toml:"poll_interval" json:"poll_interval"`
	// BootTimeout bounds the wait for an instance to run; zero means 2m.
	BootTimeout time.Duration `toml:"boot_timeout" json:"boot_timeout"`
	// DeleteTimeout bounds a teardown; zero means 1m.
	DeleteTimeout time.Duration `toml:"delete_timeout" json:"delete_timeout"`
	// ConsistencyWindow is how long a created instance may be missing
	// from listings; zero means 2s. It must cover the server's listing lag.
	ConsistencyWindow time.Duration `toml:"consistency_window" json:"consistency_window"`
	// RequestTimeout bounds each API call; zero means 30s.
	RequestTimeout time.Duration `toml:"request_timeout" json:"request_timeout"`
	// RequestsPerSecond sizes the core's token bucket for this account
	// (which paces primitives) and the adapter's own (which paces each HTTP
	// request, since some primitives make several); zero means unlimited.
	RequestsPerSecond float64 `toml:"requests_per_second" json:"requests_per_second"`
	// Burst is those buckets' size; zero means RequestsPerSecond rounded
	// down, at least 1.
	Burst int `toml:"burst" json:"burst"`
	// ListPageSize is the page size of GET instances (1..500); zero means
	// 500, the most the server serves, so that listing a location costs
	// one call per 500 instances rather than per 100 (the server's default).
	ListPageSize int `toml:"list_page_size" json:"list_page_size"`
	// NoIdempotencyToken declares that the cloud ignores idempotency
	// tokens (Capabilities then lists FeatureIdempotencyToken).
	NoIdempotencyToken bool `toml:"no_idempotency_token" json:"no_idempotency_token"`
	// SourceRanges are the networks (CIDRs) the shared firewalls open SSH
	// and OpenPorts to for a VM whose request names none
	// (provider.SourcesFor); empty: provider.DefaultSourceRanges. When
	// they restrict, OpenPorts also admit the firewall's own instances
	// (the server's peers). The server records and reports them; it does
	// not filter connections (its SSH endpoints are on loopback). Checked
	// by New.
	SourceRanges []string `toml:"source_ranges" json:"source_ranges"`
}

// Provider is a sim cloud account. It is safe for concurrent use.
type Provider struct {
	name         string
	installation string
	cfg          Config
	hc           *http.Client  // nil: a pooled client of its own
	api          *rest.Client  // Endpoint + /clouds/{cloud}/v1
	lim          *rate.Limiter // nil: unlimited
	clk          clock.Clock   // times the limiter's waits
	log          *slog.Logger
	// turn is the core's pacer (UsePacer); when set, it paces every
	// request instead of lim.
	turn func(context.Context) error
	// firewalls remembers the shared firewalls this adapter made or
	// adopted, by region/name, so that Prepare makes no call for them
	// again; firewallMade makes one of each at a time.
	firewallMu   sync.Mutex
	firewalls    map[string]bool
	firewallMade singleflight.Group
}

// UsePacer makes the core's pacer pace every request (see
// provider.RequestPacer) instead of the adapter's own bucket.
func (p *Provider) UsePacer(wait func(context.Context) error) { p.turn = wait }

// Option configures New.
type Option func(*Provider)

// WithName sets the provider name (default "sim"), which is also the
// default cloud.
func WithName(name string) Option { return func(p *Provider) { p.name = name } }

// WithInstallation sets the installation id every instance is labelled with
// and every Observe and List filters on.
func WithInstallation(id string) Option { return func(p *Provider) { p.installation = id } }

// BindInstallation implements provider.CloudProvider: gpuprov.New calls it
// with the journal's installation id.
func (p *Provider) BindInstallation(id string) error {
	return provider.BindInstallation(&p.installation, id)
}

// WithHTTPClient sets the HTTP client (default: a pooled client of its own).
func WithHTTPClient(c *http.Client) Option {
	return func(p *Provider) { p.hc = c }
}

// WithClock sets the clock the adapter's request pacing waits on (default:
// the wall clock). Tests that run the sim server on a fake clock pass the
// same one, so the server's token bucket and the adapter's agree.
func WithClock(c clock.Clock) Option { return func(p *Provider) { p.clk = c } }

// WithLogger sets the logger (default: discard). The API key never reaches it.
func WithLogger(l *slog.Logger) Option { return func(p *Provider) { p.log = l } }

// New returns the provider of cfg. A missing endpoint or API key is an
// error, and so is a source range that is not a CIDR (the error names
// source_ranges and the range). It makes no request.
func New(cfg Config, opts ...Option) (*Provider, error) {
	p := &Provider{name: ID, cfg: cfg, log: slog.New(slog.DiscardHandler), clk: clock.Real}
	for _, o := range opts {
		o(p)
	}
	if p.name == "" {
		p.name = ID
	}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	if cfg.Endpoint == "" {
		return nil, fmt.Errorf("sim: endpoint is not set (the simulated cloud server's URL, e.g. http://127.0.0.1:7070)")
	}
	if !strings.HasPrefix(cfg.Endpoint, "http://") && !strings.HasPrefix(cfg.Endpoint, "https://") {
		return nil, fmt.Errorf("sim: endpoint %q is not an http(s) URL", cfg.Endpoint)
	}
	if cfg.APIKey == "" {
		return nil, fmt.Errorf("sim: api_key is not set")
	}
	if err := provider.ValidateSourceRanges(cfg.SourceRanges); err != nil {
		return nil, fmt.Errorf("sim: source_ranges: %w", err)
	}
	if p.cfg.Cloud == "" {
		p.cfg.Cloud = p.name
	}
	if p.cfg.ListPageSize <= 0 || p.cfg.ListPageSize > maxListPageSize {
		p.cfg.ListPageSize = maxListPageSize
	}
	if p.cfg.RequestTimeout <= 0 {
		p.cfg.RequestTimeout = 30 * time.Second
	}
	if cfg.RequestsPerSecond > 0 {
		burst := cfg.Burst
		if burst <= 0 {
			burst = max(1, int(cfg.RequestsPerSecond))
		}
		p.lim = rate.NewLimiter(rate.Limit(cfg.RequestsPerSecond), burst)
	}
	// One attempt per call, the answer handed back as is (internal/rest): the
	// core is the only retry layer, and errors.go classifies every status.
	p.api = rest.New(strings.TrimRight(cfg.Endpoint, "/")+"/clouds/"+p.cfg.Cloud+"/v1", cfg.APIKey, p.hc, p.cfg.RequestTimeout)
	return p, nil
}

// Name returns the provider name.
func (p *Provider) Name() string { return p.name }

// Capabilities reports the configured timings and rate; the sim supports
// every feature, and idempotency tokens unless NoIdempotencyToken is set.
func (p *Provider) Capabilities() provider.Capabilities {
	c := provider.Capabilities{
		BootTimeout:       orDefault(p.cfg.BootTimeout, 2*time.Minute),
		DeleteTimeout:     orDefault(p.cfg.DeleteTimeout, time.Minute),
		PollInterval:      orDefault(p.cfg.PollInterval, 500*time.Millisecond),
		ConsistencyWindow: orDefault(p.cfg.ConsistencyWindow, 2*time.Second),
		RequestsPerSecond: p.cfg.RequestsPerSecond,
		Burst:             p.cfg.Burst,
		DiskSize:          true, // create's disk_gb
		Labels:            true, // every resource takes labels
		CompactPlacement:  true, // placement-groups
		ListAll:           true, // GET instances without a region: every region, by pages
		FlexStart:         true, // offers with flex_start queue a create with max_run_seconds
		Billing:           billing,
	}
	if p.cfg.NoIdempotencyToken {
		c.Unsupported = append(c.Unsupported, provider.FeatureIdempotencyToken)
	}
	return c
}

// billing is the simulated cloud's billing model, as
// docs/clouds/sim.md#billing states it: per second, from the create's
// acceptance (the instance's created_at) until it is terminated
// (terminated_at), at least 60 s, at the offer's price: the model of EC2's
// and Compute Engine's Linux VMs, which the sim stands in for in tests of
// the core's cost count.
var billing = provider.Billing{
	Increment: time.Second,
	Minimum:   time.Minute,
	Source:    "docs/clouds/sim.md#billing",
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

var (
	_ provider.CloudProvider = (*Provider)(nil)
	_ provider.Diagnoser     = (*Provider)(nil)
	_ provider.Lister        = (*Provider)(nil)
	_ provider.NameLister    = (*Provider)(nil)
)
