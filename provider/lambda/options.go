package lambda

import (
	"log/slog"
	"net/http"
	"time"
)

// Option configures New.
type Option func(*Provider)

// WithName sets the provider name (default "lambda").
func WithName(name string) Option { return func(p *Provider) { p.base.Name = name } }

// WithInstallation sets the installation id every instance is tagged with
// and every Observe and List filters on.
func WithInstallation(id string) Option { return func(p *Provider) { p.base.Installation = id } }

// WithLogger sets the logger (default: discard). The API key never reaches it.
func WithLogger(l *slog.Logger) Option { return func(p *Provider) { p.base.Log = l } }

// WithHTTP points the provider at baseURL through hc: the test-only way to
// talk to a mock (httpmock, httptest) instead of Lambda.
func WithHTTP(baseURL string, hc *http.Client) Option {
	return func(p *Provider) { p.cfg.BaseURL, p.base.HTTP = baseURL, hc }
}

// WithNow sets the clock the launch pacing reads (default time.Now).
func WithNow(now func() time.Time) Option { return func(p *Provider) { p.now = now } }
