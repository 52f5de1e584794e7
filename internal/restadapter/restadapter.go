// Package restadapter is the part of a REST marketplace adapter
// (provider/lambda, provider/primeintellect, provider/runpod, and next
// provider/vastai) that is not about its cloud: the fields behind the
// options every such adapter has (WithName, WithInstallation, WithLogger,
// WithHTTP), the steps its New shares (the default name and logger, the API
// key and base URL checks, the internal/rest client that masks the key in
// every error) and the one request its primitives send per call (Do, logged
// at debug level). What is the cloud's own (Config, wire types, error
// classification, primitives) stays in the adapter, which still reads top
// to bottom. The adapter's exported options stay its own one-line functions
// (in its options.go), so that its public API names no internal type and
// does not change.
//
// An adapter holds a Base in an unexported field, points its options at
// the Base's fields and calls Init first thing in New:
//
//	// Provider is one Vast.ai account. It is safe for concurrent use.
//	type Provider struct {
//		base restadapter.Base // name, installation, logger, API client
//		cfg  Config
//	}
//
//	func New(cfg Config, opts ...Option) (*Provider, error) {
//		p := &Provider{cfg: cfg}
//		for _, o := range opts {
//			o(p)
//		}
//		if err := p.base.Init(ID, restadapter.Endpoint{APIKey: p.cfg.APIKey, EnvAPIKey: EnvAPIKey,
//			BaseURL: p.cfg.BaseURL, DefaultBaseURL: DefaultBaseURL, Timeout: p.cfg.RequestTimeout}); err != nil {
//			return nil, err
//		}
//		// ... the cloud's own defaults and checks
//		return p, nil
//	}
//
//	func (p *Provider) Name() string { return p.base.Name }
//
//	func (p *Provider) BindInstallation(id string) error {
//		return provider.BindInstallation(&p.base.Installation, id)
//	}
//
// and in options.go:
//
//	type Option func(*Provider)
//
//	func WithName(name string) Option       { return func(p *Provider) { p.base.Name = name } }
//	func WithInstallation(id string) Option { return func(p *Provider) { p.base.Installation = id } }
//	func WithLogger(l *slog.Logger) Option  { return func(p *Provider) { p.base.Log = l } }
//	func WithHTTP(baseURL string, hc *http.Client) Option {
//		return func(p *Provider) { p.cfg.BaseURL, p.base.HTTP = baseURL, hc }
//	}
//
// Its primitives read p.base.Name (the provider in every provider.Error and
// log line), p.base.Installation (the identity Observe and List filter on)
// and p.base.Log, and send through one helper that classifies:
//
//	func (p *Provider) call(ctx context.Context, op, method, path string, q url.Values, in, out any) error {
//		if err := p.base.Do(ctx, op, rest.Request{Method: method, Path: path, Query: q, Body: in, Out: out}); err != nil {
//			return p.classify(op, err) // errors.go: the vendor's error body to a provider.ErrorKind
//		}
//		return nil
//	}
//
// Its tests build the vendor's fake (<id>mock) on internal/rest/restmock
// (routing, the key check, scripted faults, recorded calls) and their env
// on resttest.Env (the fake's transport behind the vendor's OpenAPI
// document, a logger the key must never reach; resttest.Offer, Launch and
// Kind for the steps every adapter test takes).
package restadapter

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/org/gpuprov/internal/rest"
)

// Base is what every REST adapter's Provider holds besides its Config. The
// adapter's options set Name, Installation, Log and HTTP before Init; Init
// fills the rest. Once Init and BindInstallation are done it is only read,
// so a Provider holding it is safe for concurrent use.
type Base struct {
	// Name is the provider name recorded on every VM row and carried by
	// every provider.Error; Init sets the adapter's id when it is empty.
	Name string
	// Installation is the installation id every resource carries and
	// Observe and List filter on; BindInstallation may set it after Init.
	Installation string
	// Log is the adapter's logger; Init sets one that discards when it is
	// nil. The API key never reaches it.
	Log *slog.Logger
	// HTTP is the client requests go through (WithHTTP, in tests); nil
	// means a pooled client of internal/rest.
	HTTP *http.Client
	// API is the vendor's API, built by Init: one bearer-token request per
	// Do, never retried, the key masked in every error.
	API *rest.Client

	id string // the adapter's id, for log messages
}

// Endpoint is what Init needs to reach an adapter's API: its Config's key,
// base URL and request timeout, and the adapter's constants for the
// defaults and the messages.
type Endpoint struct {
	APIKey         string        // the bearer token; required
	EnvAPIKey      string        // the environment variable the factory reads a missing key from, named in the error
	BaseURL        string        // the API's root; empty means DefaultBaseURL; must be http(s)
	DefaultBaseURL string        // the vendor's API root
	Timeout        time.Duration // bounds each request; zero means 30s
}

// Init does the steps every REST adapter's New shares, in this order: Name
// defaults to id, Log to a logger that discards; a missing API key, then a
// base URL that is not http(s), is an error prefixed "<id>: " that names
// the config key (and for the key, e.EnvAPIKey); API is then a rest.Client
// for the base URL through HTTP. It makes no request.
func (b *Base) Init(id string, e Endpoint) error {
	b.id = id
	if b.Name == "" {
		b.Name = id
	}
	if b.Log == nil {
		b.Log = slog.New(slog.DiscardHandler)
	}
	if e.APIKey == "" {
		return fmt.Errorf("%s: api_key is not set (config key api_key or the %s environment variable)", id, e.EnvAPIKey)
	}
	if e.BaseURL == "" {
		e.BaseURL = e.DefaultBaseURL
	}
	if !strings.HasPrefix(e.BaseURL, "https://") && !strings.HasPrefix(e.BaseURL, "http://") {
		return fmt.Errorf("%s: base_url %q is not an http(s) URL", id, e.BaseURL)
	}
	b.API = rest.New(e.BaseURL, e.APIKey, b.HTTP, e.Timeout)
	return nil
}

// Do sends r once through API and logs it at debug level: op, method, path
// and the answer's status, never a body or a header. It returns Do's error
// as is, for the adapter to classify.
func (b *Base) Do(ctx context.Context, op string, r rest.Request) error {
	_, err := b.API.Do(ctx, r)
	b.Log.Debug(b.id+": request", "provider", b.Name, "op", op, "method", r.Method, "path", r.Path,
		"status", rest.StatusOf(err), "ok", err == nil)
	return err
}
