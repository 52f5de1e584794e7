package runpod

import (
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/org/gpuprov/internal/rest"
	"github.com/org/gpuprov/provider"
)

// ID is the id the adapter registers under.
const ID = "runpod"

// DefaultBaseURL is RunPod's REST API v2 (REST v1 at rest.runpod.io/v1 was
// retired on 2026-11-15).
const DefaultBaseURL = "https://api.runpod.io/v2"

// DefaultImage is the container image pods run: one of RunPod's official
// images, which start sshd from the PUBLIC_KEY environment variable.
const DefaultImage = "runpod/pytorch:1.0.2-cu1281-torch280-ubuntu2404"

// EnvAPIKey is the environment variable the registry factory reads the API
// key from when the config section has no api_key. New never reads it.
const EnvAPIKey = "RUNPOD_API_KEY"

// Config is one RunPod account.
type Config struct {
	// APIKey is the account's API key, sent as a bearer token. Required;
	// never logged. It needs read/write on pods.
	APIKey string
	// BaseURL overrides DefaultBaseURL.
	BaseURL string
	// Clouds are the cloud tiers to plan on: "SECURE", "COMMUNITY"; empty
	// means both.
	Clouds []string
	// Regions limit Plan to these data centers (US-TX-3, EU-RO-1, ...).
	Regions []string
	// Image overrides DefaultImage; it must start sshd from PUBLIC_KEY.
	Image string
	// DiskGB is the container disk; zero means 50.
	DiskGB int
	// PollInterval, BootTimeout, DeleteTimeout and ConsistencyWindow are
	// reported by Capabilities; zero means 5s, 15m, 5m and 10s.
	PollInterval      time.Duration
	BootTimeout       time.Duration
	DeleteTimeout     time.Duration
	ConsistencyWindow time.Duration
	// RequestTimeout bounds each API call; zero means 30s.
	RequestTimeout time.Duration
	// RequestsPerSecond and Burst size the core's token bucket; zero means
	// 0.8 request/s with a burst of 10 (the v2 API's published policy is
	// 60 a minute, 3,000 an hour).
	RequestsPerSecond float64
	Burst             int
}

type fileConfig struct {
	APIKey            string   `toml:"api_key" json:"api_key"`
	BaseURL           string   `toml:"base_url" json:"base_url"`
	Clouds            []string `toml:"clouds" json:"clouds"`
	Regions           []string `toml:"regions" json:"regions"`
	Image             string   `toml:"image" json:"image"`
	DiskGB            int      `toml:"disk_gb" json:"disk_gb"`
	PollInterval      string   `toml:"poll_interval" json:"poll_interval"`
	BootTimeout       string   `toml:"boot_timeout" json:"boot_timeout"`
	DeleteTimeout     string   `toml:"delete_timeout" json:"delete_timeout"`
	ConsistencyWindow string   `toml:"consistency_window" json:"consistency_window"`
	RequestTimeout    string   `toml:"request_timeout" json:"request_timeout"`
	RequestsPerSecond float64  `toml:"requests_per_second" json:"requests_per_second"`
	Burst             int      `toml:"burst" json:"burst"`
}

func (f fileConfig) config() (Config, error) {
	c := Config{APIKey: f.APIKey, BaseURL: f.BaseURL, Clouds: f.Clouds, Regions: f.Regions, Image: f.Image,
		DiskGB: f.DiskGB, RequestsPerSecond: f.RequestsPerSecond, Burst: f.Burst}
	for _, d := range []struct {
		key string
		in  string
		out *time.Duration
	}{
		{"poll_interval", f.PollInterval, &c.PollInterval},
		{"boot_timeout", f.BootTimeout, &c.BootTimeout},
		{"delete_timeout", f.DeleteTimeout, &c.DeleteTimeout},
		{"consistency_window", f.ConsistencyWindow, &c.ConsistencyWindow},
		{"request_timeout", f.RequestTimeout, &c.RequestTimeout},
	} {
		if d.in == "" {
			continue
		}
		v, err := time.ParseDuration(d.in)
		if err != nil || v < 0 {
			return c, fmt.Errorf("%s: %q is not a duration such as \"30s\"", d.key, d.in)
		}
		*d.out = v
	}
	for _, cl := range c.Clouds {
		if cl != "SECURE" && cl != "COMMUNITY" {
			return c, fmt.Errorf("clouds: %q: want \"SECURE\" or \"COMMUNITY\"", cl)
		}
	}
	if c.DiskGB < 0 {
		return c, fmt.Errorf("disk_gb: %d is negative", c.DiskGB)
	}
	if c.RequestsPerSecond < 0 || c.Burst < 0 {
		return c, fmt.Errorf("requests_per_second/burst: negative")
	}
	return c, nil
}

func init() {
	provider.Register(ID, func(s provider.Settings) (provider.CloudProvider, error) {
		var fc fileConfig
		if err := s.DecodeInto(&fc); err != nil {
			return nil, fmt.Errorf("runpod: config: %w", err)
		}
		cfg, err := fc.config()
		if err != nil {
			return nil, fmt.Errorf("runpod: config: %w", err)
		}
		if cfg.APIKey == "" {
			cfg.APIKey = os.Getenv(EnvAPIKey)
		}
		return New(cfg, WithName(s.Name), WithInstallation(s.Installation), WithLogger(s.Logger))
	})
}

// Provider is one RunPod account. It is safe for concurrent use.
type Provider struct {
	name         string
	installation string
	cfg          Config
	hc           *http.Client
	api          *rest.Client
	log          *slog.Logger
}

// Option configures New.
type Option func(*Provider)

// WithName sets the provider name (default "runpod").
func WithName(name string) Option { return func(p *Provider) { p.name = name } }

// WithInstallation sets the installation id every pod carries in its
// environment and Observe and List filter on.
func WithInstallation(id string) Option { return func(p *Provider) { p.installation = id } }

// BindInstallation implements provider.CloudProvider: gpuprov.New calls it
// with the journal's installation id.
func (p *Provider) BindInstallation(id string) error {
	return provider.BindInstallation(&p.installation, id)
}

// WithLogger sets the logger (default: discard). The API key never reaches it.
func WithLogger(l *slog.Logger) Option { return func(p *Provider) { p.log = l } }

// WithHTTP points the provider at baseURL (the v2 root, ".../v2") through
// hc: the test-only way to talk to a mock instead of RunPod.
func WithHTTP(baseURL string, hc *http.Client) Option {
	return func(p *Provider) { p.cfg.BaseURL, p.hc = baseURL, hc }
}

// New returns the provider of cfg. A missing API key is an error.
func New(cfg Config, opts ...Option) (*Provider, error) {
	p := &Provider{name: ID, cfg: cfg}
	for _, o := range opts {
		o(p)
	}
	if p.name == "" {
		p.name = ID
	}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	if p.cfg.APIKey == "" {
		return nil, fmt.Errorf("runpod: api_key is not set (config key api_key or the %s environment variable)", EnvAPIKey)
	}
	if p.cfg.BaseURL == "" {
		p.cfg.BaseURL = DefaultBaseURL
	}
	if !strings.HasPrefix(p.cfg.BaseURL, "https://") && !strings.HasPrefix(p.cfg.BaseURL, "http://") {
		return nil, fmt.Errorf("runpod: base_url %q is not an http(s) URL", p.cfg.BaseURL)
	}
	if len(p.cfg.Clouds) == 0 {
		p.cfg.Clouds = []string{"SECURE", "COMMUNITY"}
	}
	if p.cfg.Image == "" {
		p.cfg.Image = DefaultImage
	}
	if p.cfg.DiskGB == 0 {
		p.cfg.DiskGB = 50
	}
	p.api = rest.New(p.cfg.BaseURL, p.cfg.APIKey, p.hc, p.cfg.RequestTimeout)
	return p, nil
}

// Name returns the provider name.
func (p *Provider) Name() string { return p.name }

// Capabilities: no spot (REST v2 creates no interruptible pods), no
// idempotency token, no user-data (the core pins the host key on first
// contact), no per-VM firewall, no zones (a data center is the region).
func (p *Provider) Capabilities() provider.Capabilities {
	c := provider.Capabilities{
		Unsupported: []provider.Feature{provider.FeatureSpot, provider.FeatureIdempotencyToken, provider.FeatureUserData,
			provider.FeatureFirewall, provider.FeatureZones},
		BootTimeout:       orDefault(p.cfg.BootTimeout, 15*time.Minute),
		DeleteTimeout:     orDefault(p.cfg.DeleteTimeout, 5*time.Minute),
		PollInterval:      orDefault(p.cfg.PollInterval, 5*time.Second),
		ConsistencyWindow: orDefault(p.cfg.ConsistencyWindow, 10*time.Second),
		RequestsPerSecond: p.cfg.RequestsPerSecond,
		Burst:             p.cfg.Burst,
	}
	if c.RequestsPerSecond == 0 {
		c.RequestsPerSecond, c.Burst = 0.8, 10
	}
	return c
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// Environment variables every pod carries: its identity. The v2 API returns
// a pod's env, so Observe and List filter on them beside the name.
const (
	EnvVM           = "GPUPROV_VM"
	EnvInstallation = "GPUPROV_INSTALLATION"
)

var (
	_ provider.CloudProvider = (*Provider)(nil)
	_ provider.Diagnoser     = (*Provider)(nil)
	_ provider.Lister        = (*Provider)(nil)
)
