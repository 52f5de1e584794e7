package vastai

import (
	"log/slog"
	"net/http"
)

// Option configures New.
type Option func(*Provider)

// WithName sets the provider name (default "vastai").
func WithName(name string) Option { return func(p *Provider) { p.base.Name = name } }

// WithInstallation sets the installation id every instance's label carries
// and Observe and List filter on.
func WithInstallation(id string) Option { return func(p *Provider) { p.base.Installation = id } }

// WithLogger sets the logger (default: discard). The API key never reaches it.
func WithLogger(l *slog.Logger) Option { return func(p *Provider) { p.base.Log = l } }

// WithHTTP points the provider at baseURL (the host root) through hc: the
// test-only way to talk to a mock instead of Vast.ai.
func WithHTTP(baseURL string, hc *http.Client) Option {
	return func(p *Provider) { p.cfg.BaseURL, p.base.HTTP = baseURL, hc }
}
