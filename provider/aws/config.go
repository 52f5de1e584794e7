package aws

import (
	"fmt"

	"github.com/org/gpuprov/provider"
)

func init() {
	provider.Register(ID, factory)
}

// factory builds the provider from its Config: s.Config, or the section
// s.Decode reads (the [aws] table of the CLI's file). Credentials come from
// the SDK's default chain, starting at the configured profile; New
// validates the rest.
func factory(s provider.Settings) (provider.CloudProvider, error) {
	var cfg Config
	if err := s.DecodeInto(&cfg); err != nil {
		return nil, fmt.Errorf("aws: config: %w", err)
	}
	return New(cfg, WithName(s.Name), WithInstallation(s.Installation), WithLogger(s.Logger))
}
