package azure

import (
	"fmt"

	"github.com/org/gpuprov/provider"
)

func init() {
	provider.Register(ID, factory)
}

// factory builds the provider from its Config: s.Config, or the section
// s.Decode reads, and validates it. Its errors carry no "azure:" prefix:
// provider.Build prefixes them with the provider's name.
func factory(s provider.Settings) (provider.CloudProvider, error) {
	var cfg Config
	if err := s.DecodeInto(&cfg); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	p, err := build(cfg, WithName(s.Name), WithInstallation(s.Installation), WithLogger(s.Logger))
	if err != nil {
		return nil, err
	}
	return p, nil
}
