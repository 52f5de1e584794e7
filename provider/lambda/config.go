package lambda

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

// check names the first key whose value New would take but Lambda cannot.
func check(c Config) error {
	if c.RequestsPerSecond < 0 {
		return fmt.Errorf("requests_per_second: %v is negative", c.RequestsPerSecond)
	}
	if c.Burst < 0 {
		return fmt.Errorf("burst: %d is negative", c.Burst)
	}
	return nil
}
