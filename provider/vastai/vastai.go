package vastai

import (
	"cmp"
	"strings"
	"time"

	"github.com/org/gpuprov/internal/restadapter"
	"github.com/org/gpuprov/provider"
)

// ID is the id the adapter registers under.
const ID = "vastai"

// DefaultBaseURL is the root of Vast.ai's REST API: requests go to
// /api/v0/... and /api/v1/... below it (the server of Vast's OpenAPI
// document and of its CLI).
const DefaultBaseURL = "https://console.vast.ai"

// DefaultImage is the container image instances run: Vast's base image,
// whose automatic tag picks a CUDA build the host's driver supports (the
// default of "image" in the create-instance operation).
const DefaultImage = "vastai/base-image:@vastai-automatic-tag"

// EnvAPIKey is the environment variable the registry factory reads the API
// key from when the config section has no api_key. New never reads it.
const EnvAPIKey = "VAST_API_KEY"

// Provider is one Vast.ai account. It is safe for concurrent use.
type Provider struct {
	base         restadapter.Base // name, installation, logger, API client
	cfg          Config
	maxListPages int // defaultMaxListPages; tests lower it
}

// New returns the provider of cfg. A missing API key is an error.
func New(cfg Config, opts ...Option) (*Provider, error) {
	p := &Provider{cfg: cfg, maxListPages: defaultMaxListPages}
	for _, o := range opts {
		o(p)
	}
	p.cfg.BaseURL = cmp.Or(p.cfg.BaseURL, DefaultBaseURL) // cfg holds what the client uses
	if err := p.base.Init(ID, restadapter.Endpoint{APIKey: p.cfg.APIKey, EnvAPIKey: EnvAPIKey,
		BaseURL: p.cfg.BaseURL, DefaultBaseURL: DefaultBaseURL, Timeout: p.cfg.RequestTimeout}); err != nil {
		return nil, err
	}
	if p.cfg.Image == "" {
		p.cfg.Image = DefaultImage
	}
	if p.cfg.DiskGB == 0 {
		p.cfg.DiskGB = 50
	}
	if p.cfg.MinReliability == 0 {
		p.cfg.MinReliability = 0.95
	}
	if p.cfg.VerifiedOnly == nil {
		yes := true
		p.cfg.VerifiedOnly = &yes
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

// Capabilities reports no spot (interruptible bids are not offered), no
// idempotency token (Create observes by label first), no per-VM firewall
// and no source ranges (a host maps an instance's ports to the internet,
// and Vast's API has no setting that limits who may connect: see
// docs/clouds/vastai.md), no user labels (the one label string is the
// identity). A zone is a host machine. User-data, that is the host key
// written by the onstart script, only with InjectHostKey.
func (p *Provider) Capabilities() provider.Capabilities {
	unsupported := []provider.Feature{provider.FeatureSpot, provider.FeatureIdempotencyToken, provider.FeatureFirewall,
		provider.FeatureSourceRanges}
	if !p.cfg.InjectHostKey {
		unsupported = append(unsupported, provider.FeatureUserData)
	}
	c := provider.Capabilities{
		Unsupported:       unsupported,
		BootTimeout:       orDefault(p.cfg.BootTimeout, 20*time.Minute),
		DeleteTimeout:     orDefault(p.cfg.DeleteTimeout, 5*time.Minute),
		PollInterval:      orDefault(p.cfg.PollInterval, 10*time.Second),
		ConsistencyWindow: orDefault(p.cfg.ConsistencyWindow, 10*time.Second),
		RequestsPerSecond: p.cfg.RequestsPerSecond,
		Burst:             p.cfg.Burst,
		DiskSize:          true, // "disk" of the create, up to the offer's disk_space
		Billing:           billing,
	}
	if c.RequestsPerSecond == 0 {
		c.RequestsPerSecond, c.Burst = 1, 3
	}
	return c
}

// billing is how Vast.ai bills an instance: by the second, with no
// minimum. Vast's "Billing Help" (https://docs.vast.ai/billing-help): "You
// are charged the base active rental cost for every second your instance
// is in the active/connected state. You are charged the storage cost
// (which depends on the size of your storage allocation) for every second
// your instance exists and is online". No minimum is stated. Storage bills
// from the instance's creation, the GPU only while it is active: counting
// the offer's whole price from the create is an upper bound of both.
var billing = provider.Billing{
	Increment: time.Second,
	Source:    "https://docs.vast.ai/billing-help",
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// labelPrefix starts the label of every instance gpuprov creates.
const labelPrefix = "gpuprov-"

// MaxLabel is the longest label createInstance takes: 256 characters
// (x-input-validation label.max_length in vast-ai/docs
// api-reference/openapi/yaml/create_instance.yaml; the 1,024 of manage
// instance is for relabelling, which the adapter never does).
const MaxLabel = 256

// Label is the label of vm's instance in installation:
// gpuprov-<vm>.<installation>. Vast gives an instance one free-text label
// and its listing filters on it, so the label carries the whole identity.
// VM names have no '.', so the first one ends the VM name.
func Label(vm, installation string) string {
	return provider.ResourceName(vm) + "." + installation
}

// parseLabel returns the VM and installation a label names, or false for a
// label gpuprov did not write.
func parseLabel(label string) (vm, installation string, ok bool) {
	rest, found := strings.CutPrefix(label, labelPrefix)
	if !found {
		return "", "", false
	}
	vm, installation, found = strings.Cut(rest, ".")
	return vm, installation, found && vm != ""
}

var (
	_ provider.CloudProvider = (*Provider)(nil)
	_ provider.Diagnoser     = (*Provider)(nil)
	_ provider.Lister        = (*Provider)(nil)
	_ provider.NameLister    = (*Provider)(nil)
)
