package lambda

import (
	"fmt"
	"sync"
	"time"

	"github.com/org/gpuprov/internal/restadapter"
	"github.com/org/gpuprov/provider"
)

// ID is the id the adapter registers under.
const ID = "lambda"

// DefaultBaseURL is the Lambda Cloud API.
const DefaultBaseURL = "https://cloud.lambda.ai/api/v1"

// EnvAPIKey is the environment variable the registry factory reads the API
// key from when the config section has no api_key. New never reads it.
const EnvAPIKey = "LAMBDA_API_KEY"

// Config is one Lambda Cloud account. Build it in Go and pass it as
// provider.Settings{Config: lambda.Config{...}} (or to New), or write it as
// the TOML table or JSON object whose keys are the field tags; durations are
// then strings such as "10s".
type Config struct {
	// APIKey is the account's API key, sent as a bearer token. Required.
	// It may be set here, but is better left empty and given through the
	// LAMBDA_API_KEY environment variable (EnvAPIKey), which the registry
	// factory reads when it is empty, so that it stays out of config files
	// and code. Never logged.
	APIKey string `toml:"api_key" json:"api_key"`
	// BaseURL overrides DefaultBaseURL.
	BaseURL string `toml:"base_url" json:"base_url"`
	// Regions limit Plan and List to these region names (us-east-1, ...);
	// empty means every region.
	Regions []string `toml:"regions" json:"regions"`
	// ImageFamily is the image family to launch (e.g. "lambda-stack-22-04");
	// empty means Lambda's default, the latest Lambda Stack.
	ImageFamily string `toml:"image_family" json:"image_family"`
	// NoFirewall skips the firewall ruleset (for regions without
	// rulesets); Capabilities then lists FeatureFirewall.
	NoFirewall bool `toml:"no_firewall" json:"no_firewall"`
	// SourceRanges are the networks (IPv4 CIDRs, such as 203.0.113.0/24)
	// that may connect to SSH and the OpenPorts of a VM whose request
	// names none (provider.SourcesFor); empty: SourceNetwork, else
	// provider.DefaultSourceRanges (anywhere). Lambda's rules take IPv4
	// sources only, so an IPv6 range is refused, as is a restricting range
	// with NoFirewall (nothing would apply it). Checked by New.
	SourceRanges []string `toml:"source_ranges" json:"source_ranges"`
	// SourceNetwork is the older, single-range form of SourceRanges (a
	// bare address is a /32, as Lambda reads one). Setting both is refused
	// unless they name the same one range.
	SourceNetwork string `toml:"source_network" json:"source_network"`
	// PollInterval is how often the core observes a booting or deleting
	// instance; zero means 10s.
	PollInterval time.Duration `toml:"poll_interval" json:"poll_interval"`
	// BootTimeout bounds the wait for an instance to become active; zero
	// means 20m.
	BootTimeout time.Duration `toml:"boot_timeout" json:"boot_timeout"`
	// DeleteTimeout bounds a teardown; zero means 10m.
	DeleteTimeout time.Duration `toml:"delete_timeout" json:"delete_timeout"`
	// ConsistencyWindow is how long a launched instance may be missing
	// from the instance list; zero means 10s.
	ConsistencyWindow time.Duration `toml:"consistency_window" json:"consistency_window"`
	// RequestTimeout bounds each API call; zero means 30s.
	RequestTimeout time.Duration `toml:"request_timeout" json:"request_timeout"`
	// RequestsPerSecond sizes the core's token bucket for the account;
	// zero means Lambda's documented 1 request/s (with a burst of 1).
	// Negative is an error.
	RequestsPerSecond float64 `toml:"requests_per_second" json:"requests_per_second"`
	// Burst is that bucket's size; zero means RequestsPerSecond rounded
	// down, at least 1. Negative is an error.
	Burst int `toml:"burst" json:"burst"`
	// LaunchInterval is the least time between two launch requests; zero
	// means Lambda's documented 12s (5 launches a minute).
	LaunchInterval time.Duration `toml:"launch_interval" json:"launch_interval"`
}

// Provider is one Lambda Cloud account. It is safe for concurrent use.
type Provider struct {
	base restadapter.Base // name, installation, logger, API client
	cfg  Config
	now  func() time.Time

	mu         sync.Mutex
	lastLaunch time.Time // the last launch request sent, for LaunchInterval

	rulesets rulesetCache // the shared rulesets made or adopted (shared.go)
	// sources are the configured ranges (SourceRanges or SourceNetwork,
	// checked and sorted); nil: none, so provider.DefaultSourceRanges.
	sources []string
}

// New returns the provider of cfg. A missing API key is an error, and so
// are source ranges Lambda cannot apply (see Config.SourceRanges); the
// error names the config key and the value. It makes no request.
func New(cfg Config, opts ...Option) (*Provider, error) {
	p := &Provider{cfg: cfg, now: time.Now}
	for _, o := range opts {
		o(p)
	}
	if err := p.base.Init(ID, restadapter.Endpoint{APIKey: p.cfg.APIKey, EnvAPIKey: EnvAPIKey,
		BaseURL: p.cfg.BaseURL, DefaultBaseURL: DefaultBaseURL, Timeout: p.cfg.RequestTimeout}); err != nil {
		return nil, err
	}
	sources, err := configuredSources(p.cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ID, err)
	}
	p.sources = sources
	if p.cfg.LaunchInterval == 0 {
		p.cfg.LaunchInterval = 12 * time.Second
	}
	return p, nil
}

// Name returns the provider name.
func (p *Provider) Name() string { return p.base.Name }

// BindInstallation implements provider.CloudProvider: gpuprov.New calls it
// with the journal's installation id.
func (p *Provider) BindInstallation(id string) error {
	return provider.BindInstallation(&p.base.Installation, id)
}

// Capabilities: no spot, no idempotency token, no zones; user-data (the
// host key is injected), OpenPorts and source ranges are supported,
// through a firewall ruleset shared by the installation's VMs in a region
// that open the same ports to the same sources (provider.SharedCleaner);
// with NoFirewall neither OpenPorts nor source ranges are. The account is
// paced at Lambda's documented 1 request/s.
func (p *Provider) Capabilities() provider.Capabilities {
	c := provider.Capabilities{
		Unsupported:       []provider.Feature{provider.FeatureSpot, provider.FeatureIdempotencyToken, provider.FeatureZones},
		BootTimeout:       orDefault(p.cfg.BootTimeout, 20*time.Minute),
		DeleteTimeout:     orDefault(p.cfg.DeleteTimeout, 10*time.Minute),
		PollInterval:      orDefault(p.cfg.PollInterval, 10*time.Second),
		ConsistencyWindow: orDefault(p.cfg.ConsistencyWindow, 10*time.Second),
		RequestsPerSecond: p.cfg.RequestsPerSecond,
		Burst:             p.cfg.Burst,
		Labels:            true, // launch tags; SSH keys and firewall rulesets take none
		Billing:           billing,
	}
	if c.RequestsPerSecond == 0 {
		c.RequestsPerSecond, c.Burst = 1, 1
	}
	if p.cfg.NoFirewall {
		c.Unsupported = append(c.Unsupported, provider.FeatureFirewall, provider.FeatureSourceRanges)
	}
	return c
}

// billing is how Lambda bills an On-Demand Cloud instance: by the minute.
// Lambda's "Billing" page (https://docs.lambda.ai/public-cloud/billing):
// "ODC prices instances by hourly usage and bills in one-minute
// increments. Billing begins the moment you launch an instance and the
// instance passes health checks, and ends the moment you terminate the
// instance." It states no minimum; a minute's increment, rounded up, bills
// any instance that was created for at least a minute, which gpuprov takes
// as the minimum.
var billing = provider.Billing{
	Increment: time.Minute,
	Minimum:   time.Minute,
	Source:    "https://docs.lambda.ai/public-cloud/billing",
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// InstanceName is the name of vm's instance: gpuprov-<vm>.
func InstanceName(vm string) string { return provider.ResourceName(vm) }

// SideName is the name of vm's SSH key (and of the per-VM firewall
// ruleset that Prepare made before rulesets were shared, which Cleanup
// still removes): gpuprov-<vm>-<5 characters derived from the
// installation>, at most 64 characters. Keys and rulesets carry no tags, so
// the installation lives in the name; two journals sharing the account
// never touch each other's. The shared ruleset is named
// provider.SharedName, derived from the installation too.
func SideName(vm, installation string) string {
	return provider.ResourceName(vm) + "-" + installationTag(installation)
}

func installationTag(installation string) string { return provider.InstallationMark(installation) }

var (
	_ provider.CloudProvider = (*Provider)(nil)
	_ provider.Diagnoser     = (*Provider)(nil)
	_ provider.Lister        = (*Provider)(nil)
	_ provider.SharedCleaner = (*Provider)(nil)
)
