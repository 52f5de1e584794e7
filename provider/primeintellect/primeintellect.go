package primeintellect

import (
	"crypto/sha256"
	"encoding/base32"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/org/gpuprov/internal/restadapter"
	"github.com/org/gpuprov/provider"
)

// ID is the id the adapter registers under.
const ID = "primeintellect"

// DefaultBaseURL is the Prime Intellect API.
const DefaultBaseURL = "https://api.primeintellect.ai/api/v1"

// EnvAPIKey is the environment variable the registry factory reads the API
// key from when the config section has no api_key. New never reads it.
const EnvAPIKey = "PRIME_API_KEY"

// Config is one Prime Intellect account (or team). Build it in Go and pass
// it as provider.Settings{Config: primeintellect.Config{...}} (or to New),
// or write it as the TOML table or JSON object whose keys are the field
// tags; durations are then strings such as "10s".
type Config struct {
	// APIKey is the account's API key, sent as a bearer token; it needs the
	// Instances read/write and SSH keys scopes. Required. It may be set
	// here, but is better left empty and given through the PRIME_API_KEY
	// environment variable (EnvAPIKey), which the registry factory reads
	// when it is empty, so that it stays out of config files and code.
	// Never logged.
	APIKey string `toml:"api_key" json:"api_key"`
	// BaseURL overrides DefaultBaseURL.
	BaseURL string `toml:"base_url" json:"base_url"`
	// TeamID creates pods for a team instead of the key's user; empty
	// means the user.
	TeamID string `toml:"team_id" json:"team_id"`
	// Regions limit Plan and List to these Prime regions (united_states,
	// eu_west, ...); empty means every region.
	Regions []string `toml:"regions" json:"regions"`
	// Security limits offers to "secure_cloud" or "community_cloud"; empty
	// means both. Any other value is an error.
	Security string `toml:"security" json:"security"`
	// Image is the environment image, one of Images; empty means
	// DefaultImage. Prime pods take a named environment, not a container
	// image reference. An offer whose images do not include it is skipped.
	Image string `toml:"image" json:"image"`
	// DiskGB is the disk to ask for, in GB; zero means the offer's
	// default. Negative is an error.
	DiskGB int `toml:"disk_gb" json:"disk_gb"`
	// PollInterval is how often the core observes a booting or deleting
	// pod; zero means 10s.
	PollInterval time.Duration `toml:"poll_interval" json:"poll_interval"`
	// BootTimeout bounds the wait for a pod to run; zero means 30m.
	BootTimeout time.Duration `toml:"boot_timeout" json:"boot_timeout"`
	// DeleteTimeout bounds a teardown; zero means 10m.
	DeleteTimeout time.Duration `toml:"delete_timeout" json:"delete_timeout"`
	// ConsistencyWindow is how long a created pod may be missing from
	// listings; zero means 15s.
	ConsistencyWindow time.Duration `toml:"consistency_window" json:"consistency_window"`
	// RequestTimeout bounds each API call; zero means 30s.
	RequestTimeout time.Duration `toml:"request_timeout" json:"request_timeout"`
	// RequestsPerSecond sizes the core's token bucket; zero means 1
	// request/s with a burst of 3 (Prime publishes no limit). Negative is
	// an error.
	RequestsPerSecond float64 `toml:"requests_per_second" json:"requests_per_second"`
	// Burst is that bucket's size; zero means RequestsPerSecond rounded
	// down, at least 1. Negative is an error.
	Burst int `toml:"burst" json:"burst"`
}

// Provider is one Prime Intellect account. It is safe for concurrent use.
type Provider struct {
	base restadapter.Base // name, installation, logger, API client
	cfg  Config
}

// DefaultImage is the environment image pods get when none is configured
// (the default of PodRequestConfig.image in Prime's OpenAPI document).
const DefaultImage = "ubuntu_22_cuda_12"

// Images are the environment images a pod can be created with: the enum
// EnvironmentTypeEnum of pod.image in Prime Intellect's compute API OpenAPI
// document (0.1.0; api-evangelist/prime-intellect
// openapi/_original/prime-intellect-compute-api-openapi.yml, 2026-08-03),
// less "custom_template", which needs a customTemplateId the adapter does
// not send. Prime answers anything else with a 422 that would abort the
// whole launch.
var Images = []string{
	"ubuntu_22_cuda_12", "cuda_12_1_pytorch_2_2", "cuda_11_8_pytorch_2_1", "cuda_12_1_pytorch_2_3",
	"cuda_12_1_pytorch_2_4", "cuda_12_4_pytorch_2_4", "cuda_12_4_pytorch_2_5", "cuda_12_4_pytorch_2_6",
	"cuda_12_6_pytorch_2_7", "stable_diffusion", "axolotl", "bittensor", "hivemind", "petals_llama",
	"vllm_llama_8b", "vllm_llama_70b", "vllm_llama_405b", "flux", "prime_rl",
}

// ErrImage is wrapped by the error for an image that is not one of Images.
var ErrImage = errors.New("not a Prime Intellect environment image")

func checkImage(image string) error {
	if slices.Contains(Images, image) {
		return nil
	}
	return fmt.Errorf("%q is %w: Prime pods take one of %s (a container image reference is not accepted)",
		image, ErrImage, strings.Join(Images, ", "))
}

// New returns the provider of cfg. A missing API key, or an Image that is
// not one of Images, is an error.
func New(cfg Config, opts ...Option) (*Provider, error) {
	p := &Provider{cfg: cfg}
	for _, o := range opts {
		o(p)
	}
	if err := p.base.Init(ID, restadapter.Endpoint{APIKey: p.cfg.APIKey, EnvAPIKey: EnvAPIKey,
		BaseURL: p.cfg.BaseURL, DefaultBaseURL: DefaultBaseURL, Timeout: p.cfg.RequestTimeout}); err != nil {
		return nil, err
	}
	if p.cfg.Image == "" {
		p.cfg.Image = DefaultImage
	}
	if err := checkImage(p.cfg.Image); err != nil {
		return nil, fmt.Errorf("primeintellect: image: %w", err)
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

// Capabilities: no idempotency token, no user-data (the core pins the host
// key on first contact), no per-VM firewall (ports come from the host's
// mapping), no source ranges (createPod has no setting for who may
// connect); spot offers and data centers (zones) are supported.
func (p *Provider) Capabilities() provider.Capabilities {
	c := provider.Capabilities{
		Unsupported: []provider.Feature{provider.FeatureIdempotencyToken, provider.FeatureUserData, provider.FeatureFirewall,
			provider.FeatureSourceRanges},
		BootTimeout:       orDefault(p.cfg.BootTimeout, 30*time.Minute),
		DeleteTimeout:     orDefault(p.cfg.DeleteTimeout, 10*time.Minute),
		PollInterval:      orDefault(p.cfg.PollInterval, 10*time.Second),
		ConsistencyWindow: orDefault(p.cfg.ConsistencyWindow, 15*time.Second),
		RequestsPerSecond: p.cfg.RequestsPerSecond,
		Burst:             p.cfg.Burst,
		DiskSize:          true, // pod.diskSize, up to the offer's disk.maxCount
		Billing:           billing,
	}
	if c.RequestsPerSecond == 0 {
		c.RequestsPerSecond, c.Burst = 1, 3
	}
	return c
}

// billing is how gpuprov counts a Prime Intellect pod's time: by the whole
// hour, at least an hour. Prime documents no billing increment or minimum
// for pods; this is the conservative reading of what it does document, in
// hours only. The compute API's pod (PodResponse in the OpenAPI document
// behind https://docs.primeintellect.ai/api-reference/pods/create-pod, as
// kept in testdata/openapi.json) has "priceHr": "Hourly price for running
// the pod." and "provisioningPriceHr": "Hourly price during the
// provisioning process. If empty then `priceHr` is used.", so a pod bills
// from its creation, provisioning included; an availability item's
// "prepaidTime" says "you will be pre-charged for the total number of
// hours specified". (Prime's Hosted Training billing page, a different
// product, meters "Prorated to the second, no minimum"; pods are not said
// to follow it.) This likely overstates a short pod's bill; a finer unit
// needs a Prime page that states it.
var billing = provider.Billing{
	Increment: time.Hour,
	Minimum:   time.Hour,
	Source:    "https://docs.primeintellect.ai/api-reference/pods/create-pod",
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// PodName is the name of vm's pod and SSH key: gpuprov-<vm>-<5 characters
// derived from the installation>. Prime pods carry no labels and the API
// does not return a pod's environment, so the installation lives in the name.
func PodName(vm, installation string) string {
	return provider.ResourceName(vm) + "-" + installationTag(installation)
}

func installationTag(installation string) string {
	sum := sha256.Sum256([]byte(installation))
	return strings.ToLower(base32.StdEncoding.EncodeToString(sum[:]))[:5]
}

// vmOf returns the VM a pod name belongs to in installation, or "".
func vmOf(name, installation string) string {
	suffix := "-" + installationTag(installation)
	if !strings.HasPrefix(name, "gpuprov-") || !strings.HasSuffix(name, suffix) {
		return ""
	}
	return strings.TrimSuffix(strings.TrimPrefix(name, "gpuprov-"), suffix)
}

var (
	_ provider.CloudProvider = (*Provider)(nil)
	_ provider.Diagnoser     = (*Provider)(nil)
	_ provider.Lister        = (*Provider)(nil)
)
