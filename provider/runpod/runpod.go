package runpod

import (
	"time"

	"github.com/org/gpuprov/internal/restadapter"
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

// Config is one RunPod account. Build it in Go and pass it as
// provider.Settings{Config: runpod.Config{...}} (or to New), or write it as
// the TOML table or JSON object whose keys are the field tags; durations are
// then strings such as "5s".
type Config struct {
	// APIKey is the account's API key, sent as a bearer token; it needs
	// read/write on pods. Required. It may be set here, but is better left
	// empty and given through the RUNPOD_API_KEY environment variable
	// (EnvAPIKey), which the registry factory reads when it is empty, so
	// that it stays out of config files and code. Never logged.
	APIKey string `toml:"api_key" json:"api_key"`
	// BaseURL overrides DefaultBaseURL (the v2 root, ".../v2").
	BaseURL string `toml:"base_url" json:"base_url"`
	// Clouds are the cloud tiers to plan on: "SECURE", "COMMUNITY"; empty
	// means both. Any other value is an error.
	Clouds []string `toml:"clouds" json:"clouds"`
	// Regions limit Plan to these data centers (US-TX-3, EU-RO-1, ...);
	// empty means every data center.
	Regions []string `toml:"regions" json:"regions"`
	// Image overrides DefaultImage; it must start sshd from PUBLIC_KEY.
	Image string `toml:"image" json:"image"`
	// DiskGB is the container disk in GB; zero means 50. Negative is an
	// error.
	DiskGB int `toml:"disk_gb" json:"disk_gb"`
	// PollInterval is how often the core observes a booting or deleting
	// pod; zero means 5s.
	PollInterval time.Duration `toml:"poll_interval" json:"poll_interval"`
	// BootTimeout bounds the wait for a pod to run; zero means 15m.
	BootTimeout time.Duration `toml:"boot_timeout" json:"boot_timeout"`
	// DeleteTimeout bounds a teardown; zero means 5m.
	DeleteTimeout time.Duration `toml:"delete_timeout" json:"delete_timeout"`
	// ConsistencyWindow is how long a created pod may be missing from
	// listings; zero means 10s.
	ConsistencyWindow time.Duration `toml:"consistency_window" json:"consistency_window"`
	// RequestTimeout bounds each API call; zero means 30s.
	RequestTimeout time.Duration `toml:"request_timeout" json:"request_timeout"`
	// RequestsPerSecond sizes the core's token bucket; zero means 0.8
	// request/s with a burst of 10 (the v2 API's published policy is 60 a
	// minute, 3,000 an hour). Negative is an error.
	RequestsPerSecond float64 `toml:"requests_per_second" json:"requests_per_second"`
	// Burst is that bucket's size; zero means RequestsPerSecond rounded
	// down, at least 1. Negative is an error.
	Burst int `toml:"burst" json:"burst"`
}

// Provider is one RunPod account. It is safe for concurrent use.
type Provider struct {
	base restadapter.Base // name, installation, logger, API client
	cfg  Config
}

// New returns the provider of cfg. A missing API key is an error.
func New(cfg Config, opts ...Option) (*Provider, error) {
	p := &Provider{cfg: cfg}
	for _, o := range opts {
		o(p)
	}
	if err := p.base.Init(ID, restadapter.Endpoint{APIKey: p.cfg.APIKey, EnvAPIKey: EnvAPIKey,
		BaseURL: p.cfg.BaseURL, DefaultBaseURL: DefaultBaseURL, Timeout: p.cfg.RequestTimeout}); err != nil {
		return nil, err
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
	return p, nil
}

// Name returns the provider name.
func (p *Provider) Name() string { return p.base.Name }

// BindInstallation implements provider.CloudProvider: gpuprov.New calls it
// with the journal's installation id.
func (p *Provider) BindInstallation(id string) error {
	return provider.BindInstallation(&p.base.Installation, id)
}

// Capabilities: no spot (REST v2 creates no interruptible pods), no
// idempotency token, no user-data (the core pins the host key on first
// contact), no per-VM firewall, no source ranges (a pod's ports are open to
// the internet: createPod takes ports, not who may reach them), no zones
// (a data center is the region).
func (p *Provider) Capabilities() provider.Capabilities {
	c := provider.Capabilities{
		Unsupported: []provider.Feature{provider.FeatureSpot, provider.FeatureIdempotencyToken, provider.FeatureUserData,
			provider.FeatureFirewall, provider.FeatureSourceRanges, provider.FeatureZones},
		BootTimeout:       orDefault(p.cfg.BootTimeout, 15*time.Minute),
		DeleteTimeout:     orDefault(p.cfg.DeleteTimeout, 5*time.Minute),
		PollInterval:      orDefault(p.cfg.PollInterval, 5*time.Second),
		ConsistencyWindow: orDefault(p.cfg.ConsistencyWindow, 10*time.Second),
		RequestsPerSecond: p.cfg.RequestsPerSecond,
		Burst:             p.cfg.Burst,
		DiskSize:          true, // the container disk; RunPod pods take no labels
		Billing:           billing,
	}
	if c.RequestsPerSecond == 0 {
		c.RequestsPerSecond, c.Burst = 0.8, 10
	}
	return c
}

// billing is how RunPod bills a pod: by the second, with no minimum.
// RunPod's Pods "Pricing" page (https://docs.runpod.io/pods/pricing): "All
// Pods are billed by the second for compute and storage, with no
// additional fees for data ingress or egress. Every Pod has an hourly cost
// based on its GPU type or CPU configuration, and your Runpod credits are
// charged for the Pod every second it is active." Its "Billing overview"
// (https://docs.runpod.io/accounts-billing/billing) agrees: "All compute
// and storage charges are billed per second". No minimum is stated. (An
// older "Billing information" page said credits are "charged every minute
// the Pod is running": how often the balance is debited, superseded by the
// pages above.)
var billing = provider.Billing{
	Increment: time.Second,
	Source:    "https://docs.runpod.io/pods/pricing",
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
