package aws

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/servicequotas"
	"github.com/aws/aws-sdk-go-v2/service/ssm"

	"github.com/org/gpuprov/clock"
	"github.com/org/gpuprov/internal/redact"
	"github.com/org/gpuprov/provider"
)

// ID is the id the adapter registers under.
const ID = "aws"

// DefaultImageParameter is the public SSM parameter that names the current
// AWS Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04) in each
// region: NVIDIA driver, CUDA and the container toolkit preinstalled.
const DefaultImageParameter = "/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-ubuntu-22.04/latest/ami-id"

// Config is one AWS account as the adapter sees it. The zero value plans
// from the embedded catalog in every region it lists, on demand only.
// Build it in Go and pass it as provider.Settings{Config: aws.Config{...}}
// (or to New), or write it as the TOML table or JSON object whose keys are
// the field tags; durations are then strings such as "20m". Credentials are
// not part of it: the SDK's default chain finds them (environment, shared
// credentials file, SSO, instance role), starting at Profile.
type Config struct {
	// Profile is the shared-config profile the SDK's default credential
	// chain starts from; empty means the chain's own default (AWS_PROFILE,
	// else "default").
	Profile string `toml:"profile" json:"profile"`
	// Regions limit Plan and List to these regions (us-east-1, ...); empty
	// means every region of the catalog.
	Regions []string `toml:"regions" json:"regions"`
	// Spot makes Plan offer spot capacity too (for requests that accept it).
	Spot bool `toml:"spot" json:"spot"`
	// Image is an AMI id (ami-...) used in every region instead of the SSM
	// lookup (a request's own Image wins over it).
	Image string `toml:"image" json:"image"`
	// ImageParameter is the public SSM parameter resolved per region when
	// no image is given; empty means DefaultImageParameter.
	ImageParameter string `toml:"image_parameter" json:"image_parameter"`
	// Subnet pins every instance to this subnet id (subnet-...), and so to
	// its zone and region; empty means the VPC's default subnets.
	Subnet string `toml:"subnet" json:"subnet"`
	// VPC picks a VPC id (vpc-...) other than the region's default one.
	VPC string `toml:"vpc" json:"vpc"`
	// Refine lets Plan ask EC2 which zones sell each type
	// (DescribeInstanceTypeOfferings) and, for spot, the current spot price
	// (DescribeSpotPriceHistory). A refinement that fails falls back to the
	// catalog. Off by default: Plan then makes no API call but the
	// capacity reservations' (one DescribeCapacityReservations per region,
	// none for a request that forbids reserved capacity).
	Refine bool `toml:"refine" json:"refine"`
	// SSHUser is the login user of the image; empty means "ubuntu".
	SSHUser string `toml:"ssh_user" json:"ssh_user"`
	// BootTimeout bounds the wait for an instance to run; zero means 20m
	// (GPU AMIs are large).
	BootTimeout time.Duration `toml:"boot_timeout" json:"boot_timeout"`
	// DeleteTimeout bounds a teardown; zero means 10m.
	DeleteTimeout time.Duration `toml:"delete_timeout" json:"delete_timeout"`
	// PollInterval is how often the core observes a booting or deleting
	// instance; zero means 5s.
	PollInterval time.Duration `toml:"poll_interval" json:"poll_interval"`
	// ConsistencyWindow is how long a launched instance may be missing
	// from DescribeInstances; zero means 30s.
	ConsistencyWindow time.Duration `toml:"consistency_window" json:"consistency_window"`
	// RequestTimeout bounds each API call; zero means 30s.
	RequestTimeout time.Duration `toml:"request_timeout" json:"request_timeout"`
	// RequestsPerSecond sizes the core's token bucket for this account;
	// zero means 5 per second (see the package documentation). Negative is
	// an error.
	RequestsPerSecond float64 `toml:"requests_per_second" json:"requests_per_second"`
	// Burst is that bucket's size; zero means 10 when RequestsPerSecond is
	// zero too, else RequestsPerSecond rounded down, at least 1. Negative
	// is an error.
	Burst int `toml:"burst" json:"burst"`
	// SourceRanges are the networks (CIDRs: IPv4 ranges go into a rule's
	// IpRanges, IPv6 ones into its Ipv6Ranges) that may connect to SSH and
	// the OpenPorts of a VM whose request names none; empty means
	// provider.DefaultSourceRanges (anywhere). When they admit less than
	// that, OpenPorts also admit the members of the same shared security
	// group (a cluster's nodes in one VPC), SSH does not.
	SourceRanges []string `toml:"source_ranges" json:"source_ranges"`
}

var (
	regionRE = regexp.MustCompile(`^[a-z]{2}(-gov)?-[a-z]+-\d$`)
	amiRE    = regexp.MustCompile(`^ami-[0-9a-f]{8,17}$`)
	subnetRE = regexp.MustCompile(`^subnet-[0-9a-f]{8,17}$`)
	vpcRE    = regexp.MustCompile(`^vpc-[0-9a-f]{8,17}$`)
)

// Validate reports the first bad value, naming its config key.
func (c *Config) Validate() error {
	for _, r := range c.Regions {
		if !regionRE.MatchString(r) {
			return fmt.Errorf("regions: %q is not an AWS region name (like us-east-1)", r)
		}
	}
	switch {
	case c.Image != "" && !amiRE.MatchString(c.Image):
		return fmt.Errorf("image: %q is not an AMI id (ami-...)", c.Image)
	case c.ImageParameter != "" && !strings.HasPrefix(c.ImageParameter, "/"):
		return fmt.Errorf("image_parameter: %q is not an SSM parameter path (/aws/service/...)", c.ImageParameter)
	case c.Subnet != "" && !subnetRE.MatchString(c.Subnet):
		return fmt.Errorf("subnet: %q is not a subnet id (subnet-...)", c.Subnet)
	case c.VPC != "" && !vpcRE.MatchString(c.VPC):
		return fmt.Errorf("vpc: %q is not a VPC id (vpc-...)", c.VPC)
	case c.RequestsPerSecond < 0:
		return fmt.Errorf("requests_per_second: %v is negative", c.RequestsPerSecond)
	case c.Burst < 0:
		return fmt.Errorf("burst: %d is negative", c.Burst)
	}
	if err := provider.ValidateSourceRanges(c.SourceRanges); err != nil {
		return fmt.Errorf("source_ranges: %w", err)
	}
	for name, d := range map[string]time.Duration{"boot_timeout": c.BootTimeout, "delete_timeout": c.DeleteTimeout,
		"poll_interval": c.PollInterval, "consistency_window": c.ConsistencyWindow, "request_timeout": c.RequestTimeout} {
		if d < 0 {
			return fmt.Errorf("%s: %s is negative", name, d)
		}
	}
	return nil
}

// Endpoint points the provider at a stand-in for AWS: every EC2, SSM and
// Service Quotas call goes to URL (SSMURL for SSM, QuotasURL for Service
// Quotas, when set) through Client, signed with the static key pair. No environment variable, profile or credential file
// is read. Tests use it with an httpmock transport or an emulator.
type Endpoint struct {
	URL             string
	SSMURL          string
	QuotasURL       string
	Client          *http.Client
	AccessKeyID     string
	SecretAccessKey string
	SessionToken    string // optional: temporary credentials
}

// Provider is one AWS account. It is safe for concurrent use.
type Provider struct {
	name         string
	installation string
	cfg          Config
	cat          *Catalog
	log          *slog.Logger
	clock        clock.Clock
	endpoint     *Endpoint

	awsCfg awssdk.Config // the SDK's default chain; unused with an Endpoint

	mu      sync.Mutex
	ec2s    map[string]*ec2.Client
	ssms    map[string]*ssm.Client
	sqs     map[string]*servicequotas.Client
	recent  map[string][]recentCreate    // region|vm → ids Create returned lately
	zoneIDs map[string]map[string]string // region → zone name → zone id, where an endpoint needed it
	creds   []awssdk.Credentials         // the credentials calls were signed with, newest last
	sec     *redact.Secrets              // every value of creds, masked in error texts

	groups groupCache // the shared security groups made or adopted (shared.go)
}

// recentCreate is an id Create returned, kept for ConsistencyWindow so that
// Observe can look it up by id while tag filters do not see it yet.
type recentCreate struct {
	id string
	at time.Time
}

// Option configures New.
type Option func(*Provider)

// WithName sets the provider name (default "aws").
func WithName(name string) Option { return func(p *Provider) { p.name = name } }

// WithInstallation sets the installation id every resource is tagged with
// and every Observe and List filters on.
func WithInstallation(id string) Option { return func(p *Provider) { p.installation = id } }

// BindInstallation implements provider.CloudProvider: gpuprov.New calls it
// with the journal's installation id.
func (p *Provider) BindInstallation(id string) error {
	return provider.BindInstallation(&p.installation, id)
}

// WithLogger sets the logger (default: discard). User-data and keys never
// reach it.
func WithLogger(l *slog.Logger) Option { return func(p *Provider) { p.log = l } }

// WithEndpoint sends every call to e instead of AWS (see Endpoint).
func WithEndpoint(e Endpoint) Option { return func(p *Provider) { p.endpoint = &e } }

// WithCatalog replaces the embedded catalog (tests, or a catalog refreshed
// at run time).
func WithCatalog(c *Catalog) Option { return func(p *Provider) { p.cat = c } }

// WithClock sets the clock used for the consistency window and spot price
// queries (default: the real clock).
func WithClock(c clock.Clock) Option { return func(p *Provider) { p.clock = c } }

// New returns the provider of cfg. Without WithEndpoint it loads the SDK's
// default configuration (profile, environment, shared files, instance
// role); credentials are resolved lazily, at the first call. Its errors
// start with "aws: " and name the config key at fault ("aws: config:
// source_ranges: ..."); nothing is created when one is returned.
func New(cfg Config, opts ...Option) (*Provider, error) {
	p, err := build(cfg, opts...)
	if err != nil {
		return nil, fmt.Errorf("aws: %w", err)
	}
	return p, nil
}

// build is New without the "aws: " prefix, which provider.Build puts as
// "provider aws: " on what the registry's factory returns.
func build(cfg Config, opts ...Option) (*Provider, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	p := &Provider{name: ID, cfg: cfg, log: slog.New(slog.DiscardHandler), clock: clock.Real,
		ec2s: map[string]*ec2.Client{}, ssms: map[string]*ssm.Client{}, sqs: map[string]*servicequotas.Client{}, recent: map[string][]recentCreate{},
		zoneIDs: map[string]map[string]string{}}
	for _, o := range opts {
		o(p)
	}
	if p.name == "" {
		p.name = ID
	}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	if p.cat == nil {
		c, err := EmbeddedCatalog()
		if err != nil {
			return nil, err
		}
		p.cat = c
	}
	for _, r := range cfg.Regions {
		if !slices.Contains(p.cat.Regions(), r) {
			p.log.Warn("aws: configured region has no catalog entry; Plan offers nothing there", "provider", p.name, "region", r)
		}
	}
	if e := p.endpoint; e != nil {
		if e.URL == "" || e.Client == nil {
			return nil, errors.New("endpoint: URL and Client are required")
		}
		p.noteCredentials(awssdk.Credentials{AccessKeyID: e.AccessKeyID, SecretAccessKey: e.SecretAccessKey, SessionToken: e.SessionToken})
		return p, nil
	}
	loaders := []func(*config.LoadOptions) error{config.WithRetryMaxAttempts(1)}
	if cfg.Profile != "" {
		loaders = append(loaders, config.WithSharedConfigProfile(cfg.Profile))
	}
	ac, err := config.LoadDefaultConfig(context.Background(), loaders...)
	if err != nil {
		return nil, fmt.Errorf("profile %q: %w", cfg.Profile, err)
	}
	if ac.Credentials != nil {
		// Every set of credentials the chain hands the SDK (at the first
		// call, and again when temporary ones are refreshed) is noted for
		// masking; nothing is retrieved here, and a chain without
		// credentials fails at the first call as before.
		ac.Credentials = awssdk.NewCredentialsCache(&notingCredentials{inner: ac.Credentials, note: p.noteCredentials})
	}
	p.awsCfg = ac
	return p, nil
}

// notingCredentials hands out the credentials of inner and tells note about
// each set it retrieved.
type notingCredentials struct {
	inner awssdk.CredentialsProvider
	note  func(awssdk.Credentials)
}

func (n *notingCredentials) Retrieve(ctx context.Context) (awssdk.Credentials, error) {
	c, err := n.inner.Retrieve(ctx)
	if err == nil {
		n.note(c)
	}
	return c, err
}

// maxNotedCredentials bounds the credential sets kept for masking: the
// current one and a few it replaced, whose calls may still be answering.
const maxNotedCredentials = 4

// noteCredentials adds c to the values masked in error texts.
func (p *Provider) noteCredentials(c awssdk.Credentials) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, k := range p.creds {
		if k.AccessKeyID == c.AccessKeyID && k.SecretAccessKey == c.SecretAccessKey && k.SessionToken == c.SessionToken {
			return
		}
	}
	p.creds = append(p.creds, c)
	if len(p.creds) > maxNotedCredentials {
		p.creds = p.creds[len(p.creds)-maxNotedCredentials:]
	}
	var values []string
	for _, k := range p.creds {
		values = append(values, k.AccessKeyID, k.SecretAccessKey, k.SessionToken)
	}
	p.sec = redact.New(values...)
}

// secrets returns the values masked in error texts (nil before any call
// was signed).
func (p *Provider) secrets() *redact.Secrets {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sec
}

// Name returns the provider name.
func (p *Provider) Name() string { return p.name }

// Capabilities: AWS supports every feature, compact placement too (EC2
// cluster placement groups). Its timings default to 20m
// boot (GPU AMIs are large), 10m delete, 5s polls and a 30s consistency
// window for DescribeInstances; the API rate defaults to 5 requests per
// second with a burst of 10.
func (p *Provider) Capabilities() provider.Capabilities {
	burst := p.cfg.Burst
	if burst == 0 && p.cfg.RequestsPerSecond == 0 {
		burst = 10
	}
	return provider.Capabilities{
		BootTimeout:       orDefault(p.cfg.BootTimeout, 20*time.Minute),
		DeleteTimeout:     orDefault(p.cfg.DeleteTimeout, 10*time.Minute),
		PollInterval:      orDefault(p.cfg.PollInterval, 5*time.Second),
		ConsistencyWindow: orDefault(p.cfg.ConsistencyWindow, 30*time.Second),
		RequestsPerSecond: cmpOr(p.cfg.RequestsPerSecond, 5),
		Burst:             burst,
		// The root volume's size (a block device mapping); tags on the
		// instance, its volumes and its key pair (the shared security
		// group carries provider.SharedLabels only: it is no one VM's);
		// cluster placement groups (placement.go).
		DiskSize: true, Labels: true, CompactPlacement: true,
		Billing: billing,
	}
}

// billing is how EC2 bills the instances gpuprov launches: Linux (the
// default image is the Deep Learning Base OSS Nvidia Driver AMI on Ubuntu,
// which carries no separate hourly software charge), on demand or Spot,
// per second with a one-minute minimum. The EC2 User Guide, "Instance
// lifecycle" (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/ec2-instance-lifecycle.html):
// "As soon as your instance transitions to the running state, you're
// billed for each second, with a one-minute minimum, that you keep the
// instance running", and "As soon as the status of an instance changes to
// shutting-down or terminated, you stop incurring charges for that
// instance". AWS's announcement of per-second billing
// (https://aws.amazon.com/about-aws/whats-new/2017/10/announcing-amazon-ec2-per-second-billing/)
// gives its scope: "Amazon EC2 usage of Linux based instances that are
// launched in On-Demand, Reserved and Spot form will be billed on one
// second increments, with a minimum of 60 seconds" ("not currently
// applicable to instances running Microsoft Windows or Linux
// distributions that have a separate hourly charge": an AMI of that kind,
// given as Config.Image, bills by the hour, which this model does not
// describe). An instance in a Capacity Block is paid for by the block's
// upfront fee (Offer.Block.UpfrontFee, paid when PurchaseBlock buys it):
// that fee is counted separately, not by this model.
var billing = provider.Billing{
	Increment: time.Second,
	Minimum:   time.Minute,
	Source:    "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/ec2-instance-lifecycle.html",
}

// UnknownID returns an instance id that is well formed but names nothing
// (for the conformance kit).
func (p *Provider) UnknownID() string { return "i-0fffffffffffffff0" }

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

func cmpOr(v, def float64) float64 {
	if v <= 0 {
		return def
	}
	return v
}

func (p *Provider) sshUser() string {
	if p.cfg.SSHUser != "" {
		return p.cfg.SSHUser
	}
	return "ubuntu"
}

func (p *Provider) requestTimeout() time.Duration {
	return orDefault(p.cfg.RequestTimeout, 30*time.Second)
}

// regional returns clients's client of region, made by build on first
// use: one per service and region, shared by every call.
func regional[C any](p *Provider, clients map[string]C, region string, build func() C) C {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := clients[region]; ok {
		return c
	}
	c := build()
	clients[region] = c
	return c
}

// credentials are the test endpoint's static credentials.
func (e *Endpoint) credentials() awssdk.CredentialsProvider {
	return credentials.NewStaticCredentialsProvider(e.AccessKeyID, e.SecretAccessKey, e.SessionToken)
}

// ec2For returns the EC2 client of region: one attempt per call.
func (p *Provider) ec2For(region string) *ec2.Client {
	return regional(p, p.ec2s, region, func() *ec2.Client {
		if e := p.endpoint; e != nil {
			return ec2.New(ec2.Options{Region: region, BaseEndpoint: awssdk.String(e.URL), HTTPClient: e.Client,
				Credentials: e.credentials(), RetryMaxAttempts: 1})
		}
		return ec2.NewFromConfig(p.awsCfg, func(o *ec2.Options) { o.Region = region; o.RetryMaxAttempts = 1 })
	})
}

// ssmFor returns the SSM client of region: one attempt per call.
func (p *Provider) ssmFor(region string) *ssm.Client {
	return regional(p, p.ssms, region, func() *ssm.Client {
		if e := p.endpoint; e != nil {
			return ssm.New(ssm.Options{Region: region, BaseEndpoint: awssdk.String(cmp.Or(e.SSMURL, e.URL)), HTTPClient: e.Client,
				Credentials: e.credentials(), RetryMaxAttempts: 1})
		}
		return ssm.NewFromConfig(p.awsCfg, func(o *ssm.Options) { o.Region = region; o.RetryMaxAttempts = 1 })
	})
}

// call runs one API call under the per-call timeout and classifies its
// error.
func (p *Provider) call(ctx context.Context, op string, f func(ctx context.Context) error) error {
	rctx, cancel := context.WithTimeout(ctx, p.requestTimeout())
	defer cancel()
	err := f(rctx)
	if err == nil {
		return nil
	}
	pe := p.classify(ctx, op, err)
	p.log.Debug("aws: call failed", "provider", p.name, "op", op, "err", pe) // masked
	return pe
}

// remember records an id Create returned.
func (p *Provider) remember(region, vm, id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := region + "|" + vm
	p.recent[k] = append(p.recent[k], recentCreate{id: id, at: p.clock.Now()})
}

// recentIDs returns the ids Create returned for vm in region within the
// consistency window, forgetting older ones.
func (p *Provider) recentIDs(region, vm string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := region + "|" + vm
	window := p.Capabilities().ConsistencyWindow
	var keep []recentCreate
	var ids []string
	for _, r := range p.recent[k] {
		if p.clock.Now().Sub(r.at) <= window {
			keep = append(keep, r)
			ids = append(ids, r.id)
		}
	}
	if len(keep) == 0 {
		delete(p.recent, k)
	} else {
		p.recent[k] = keep
	}
	return ids
}

var (
	_ provider.BlockSeller      = (*Provider)(nil)
	_ provider.CloudProvider    = (*Provider)(nil)
	_ provider.Diagnoser        = (*Provider)(nil)
	_ provider.Lister           = (*Provider)(nil)
	_ provider.NameLister       = (*Provider)(nil)
	_ provider.PlacementGrouper = (*Provider)(nil)
	_ provider.SharedCleaner    = (*Provider)(nil)
)
