package gcp

import (
	"fmt"

	"github.com/org/gpuprov/provider"
)

func init() {
	provider.Register(ID, factory)
}

// factory builds the provider from its Config: s.Config, or the section
// s.Decode reads; build validates it. Its errors carry no "gcp: " prefix:
// provider.Build puts "provider <name>: " before them.
func factory(s provider.Settings) (provider.CloudProvider, error) {
	var cfg Config
	if err := s.DecodeInto(&cfg); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return build(cfg, WithName(s.Name), WithInstallation(s.Installation), WithLogger(s.Logger))
}
