package primeintellect

import (
	"fmt"
	"os"

	"github.com/org/gpuprov/provider"
)

func init() {
	provider.Register(ID, factory)
}

// factory builds the provider from its Config: s.Config, or the section
// s.Decode reads. An empty APIKey is read from EnvAPIKey.
func factory(s provider.Settings) (provider.CloudProvider, error) {
	var cfg Config
	if err := s.DecodeInto(&cfg); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if err := check(cfg); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if cfg.APIKey == "" {
		cfg.APIKey = os.Getenv(EnvAPIKey)
	}
	return New(cfg, WithName(s.Name), WithInstallation(s.Installation), WithLogger(s.Logger))
}

// check names the first key whose value New would take but Prime cannot.
func check(c Config) error {
	switch c.Security {
	case "", "secure_cloud", "community_cloud":
	default:
		return fmt.Errorf("security: %q: want \"secure_cloud\" or \"community_cloud\" (empty: both)", c.Security)
	}
	if c.DiskGB < 0 {
		return fmt.Errorf("disk_gb: %d is negative", c.DiskGB)
	}
	if c.RequestsPerSecond < 0 || c.Burst < 0 {
		return fmt.Errorf("requests_per_second/burst: negative")
	}
	return nil
}
