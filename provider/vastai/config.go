package vastai

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/org/gpuprov/provider"
)

// Config is one Vast.ai account. Build it in Go and pass it as
// provider.Settings{Config: vastai.Config{...}} (or to New), or write it as
// the TOML table or JSON object whose keys are the field tags; durations are
// then strings such as "10s".
type Config struct {
	// APIKey is the account's API key, sent as a bearer token; it needs to
	// search offers and to create, list and destroy instances. Required. It
	// may be set here, but is better left empty and given through the
	// VAST_API_KEY environment variable (EnvAPIKey), which the registry
	// factory reads when it is empty, so that it stays out of config files
	// and code. Never logged.
	APIKey string `toml:"api_key" json:"api_key"`
	// BaseURL overrides DefaultBaseURL (the host root, without /api/v0).
	BaseURL string `toml:"base_url" json:"base_url"`
	// Regions limit Plan to machines in these countries: the two-letter
	// codes Vast's geolocation filter takes ("US", "DE"); empty means
	// every country.
	Regions []string `toml:"regions" json:"regions"`
	// MinReliability is the lowest machine reliability score (0 to 1) an
	// offer may have; zero means 0.95.
	MinReliability float64 `toml:"min_reliability" json:"min_reliability"`
	// VerifiedOnly limits offers to machines Vast has verified; nil means
	// true, as Vast's own search does by default.
	VerifiedOnly *bool `toml:"verified_only" json:"verified_only"`
	// Image overrides DefaultImage. Instances run in Vast's SSH launch
	// mode, which starts sshd in whatever image this is.
	Image string `toml:"image" json:"image"`
	// DiskGB is the instance's disk in GB; zero means 50. Vast fixes it at
	// creation and prices it into dph_total. Negative is an error.
	DiskGB int `toml:"disk_gb" json:"disk_gb"`
	// InjectHostKey says the image's sshd serves /etc/ssh/ssh_host_ed25519_key
	// and nothing regenerates it after the onstart script: the onstart
	// script then writes the host key gpuprov generated for the VM, and the
	// core pins it with no trust-on-first-use window (Capabilities reports
	// user-data). False: the core pins the key on first contact.
	InjectHostKey bool `toml:"inject_host_key" json:"inject_host_key"`
	// PollInterval is how often the core observes a booting or deleting
	// instance; zero means 10s.
	PollInterval time.Duration `toml:"poll_interval" json:"poll_interval"`
	// BootTimeout bounds the wait for an instance to run (image pull
	// included); zero means 20m.
	BootTimeout time.Duration `toml:"boot_timeout" json:"boot_timeout"`
	// DeleteTimeout bounds a teardown; zero means 5m.
	DeleteTimeout time.Duration `toml:"delete_timeout" json:"delete_timeout"`
	// ConsistencyWindow is how long a created instance may be missing from
	// listings; zero means 10s.
	ConsistencyWindow time.Duration `toml:"consistency_window" json:"consistency_window"`
	// RequestTimeout bounds each API call; zero means 30s.
	RequestTimeout time.Duration `toml:"request_timeout" json:"request_timeout"`
	// RequestsPerSecond sizes the core's token bucket; zero means 1
	// request/s with a burst of 3 (Vast's 429 answers name per-endpoint
	// thresholds from 1.0 to 4.5). Negative is an error.
	RequestsPerSecond float64 `toml:"requests_per_second" json:"requests_per_second"`
	// Burst is that bucket's size; zero means RequestsPerSecond rounded
	// down, at least 1. Negative is an error.
	Burst int `toml:"burst" json:"burst"`
}

func init() {
	provider.Register(ID, factory)
}

// factory builds the provider from its Config: s.Config, or the section
// s.Decode reads. An empty APIKey is read from EnvAPIKey. Its errors carry
// no "vastai:" of their own: provider.Build, its only caller, prefixes
// "provider <name>: ".
func factory(s provider.Settings) (provider.CloudProvider, error) {
	var cfg Config
	if err := s.DecodeInto(&cfg); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if err := check(cfg); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if cfg.APIKey == "" {
		cfg.APIKey = strings.TrimSpace(os.Getenv(EnvAPIKey))
	}
	return New(cfg, WithName(s.Name), WithInstallation(s.Installation), WithLogger(s.Logger))
}

// check names the first key whose value New would take but Vast cannot.
func check(c Config) error {
	for _, r := range c.Regions {
		if len(r) != 2 || strings.ToUpper(r) != r {
			return fmt.Errorf("regions: %q: want a two-letter country code such as \"US\" (Vast's geolocation filter)", r)
		}
	}
	if c.MinReliability < 0 || c.MinReliability > 1 {
		return fmt.Errorf("min_reliability: %v: want a score from 0 to 1", c.MinReliability)
	}
	if c.DiskGB < 0 {
		return fmt.Errorf("disk_gb: %d is negative", c.DiskGB)
	}
	if c.RequestsPerSecond < 0 || c.Burst < 0 {
		return fmt.Errorf("requests_per_second/burst: negative")
	}
	return nil
}
