package gcp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"time"

	"cloud.google.com/go/auth"
	compute "cloud.google.com/go/compute/apiv1"
	"github.com/googleapis/gax-go/v2"
	"google.golang.org/api/option"

	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/gcp/internal/catalog"
)

// ID is the id the adapter registers under.
const ID = "gcp"

// DefaultImage is the boot image when neither the config nor the request
// names one: the newest image of a Deep Learning VM family (NVIDIA driver
// and CUDA preinstalled).
const DefaultImage = "projects/deeplearning-platform-release/global/images/family/common-cu128-ubuntu-2204-nvidia-570"

// Config is one GCP project. Build it in Go and pass it as
// provider.Settings{Config: gcp.Config{...}} (or to New), or write it as the
// TOML table or JSON object whose keys are the field tags; durations are
// then strings such as "5s".
type Config struct {
	// Project is the project id (required).
	Project string `toml:"project" json:"project"`
	// Regions limit Plan and List to these regions (us-central1, ...);
	// empty means every region of the catalog.
	Regions []string `toml:"regions" json:"regions"`
	// Zones limit Plan and List to these zones (us-central1-a, ...); a zone
	// implies its region. Empty means every zone of the regions.
	Zones []string `toml:"zones" json:"zones"`
	// CredentialsFile is a service-account, authorized-user or
	// external-account JSON file; empty means Application Default
	// Credentials (GOOGLE_APPLICATION_CREDENTIALS, gcloud's login, the
	// metadata server), which keeps key material out of gpuprov's config.
	// The file's secrets never reach logs or error texts.
	CredentialsFile string `toml:"credentials_file" json:"credentials_file"`
	// Network is the VPC network of the VM's interface, a name or a
	// resource path; empty means "default".
	Network string `toml:"network" json:"network"`
	// Subnetwork is the subnetwork of that interface, a name (in the
	// offer's region) or a resource path; empty names none, which an
	// auto-mode network resolves to its subnetwork in the region.
	Subnetwork string `toml:"subnetwork" json:"subnetwork"`
	// Spot lets Plan offer Spot VMs (at their Spot price) to requests that
	// accept spot capacity.
	Spot bool `toml:"spot" json:"spot"`
	// Image overrides DefaultImage: an image family path
	// (projects/P/global/images/family/F) or an image path.
	Image string `toml:"image" json:"image"`
	// DiskSizeGB is the boot disk size in GB (at least 10); zero means 200.
	DiskSizeGB int `toml:"disk_size_gb" json:"disk_size_gb"`
	// Refine makes Plan ask the API which zones offer each accelerator
	// (acceleratorTypes.aggregatedList), falling back to the catalog on error.
	Refine bool `toml:"refine" json:"refine"`
	// PollInterval is how often the core observes a booting or deleting
	// instance; zero means 5s.
	PollInterval time.Duration `toml:"poll_interval" json:"poll_interval"`
	// BootTimeout bounds the wait for an instance to run; zero means 15m.
	BootTimeout time.Duration `toml:"boot_timeout" json:"boot_timeout"`
	// DeleteTimeout bounds a teardown; zero means 5m.
	DeleteTimeout time.Duration `toml:"delete_timeout" json:"delete_timeout"`
	// ConsistencyWindow is how long a created instance may be missing from
	// listings; zero means 15s.
	ConsistencyWindow time.Duration `toml:"consistency_window" json:"consistency_window"`
	// OperationTimeout bounds the wait on an insert or firewall operation;
	// zero means 2m.
	OperationTimeout time.Duration `toml:"operation_timeout" json:"operation_timeout"`
	// RequestTimeout bounds each API call; zero means 60s.
	RequestTimeout time.Duration `toml:"request_timeout" json:"request_timeout"`
	// RequestsPerSecond sizes the core's token bucket; zero means 10.
	// Negative is an error.
	RequestsPerSecond float64 `toml:"requests_per_second" json:"requests_per_second"`
	// Burst is that bucket's size; zero means 20. Negative is an error.
	Burst int `toml:"burst" json:"burst"`
	// SourceRanges are the IPv4 networks (CIDRs) that may connect to SSH
	// and the OpenPorts of a VM whose request names none; empty means
	// provider.DefaultSourceRanges (anywhere). When they admit less than
	// that, OpenPorts also admit the instances of the same shared firewall
	// rule (a cluster's nodes on the network), SSH does not. IPv6 ranges are
	// refused: the adapter's instances have IPv4 addresses only.
	SourceRanges []string `toml:"source_ranges" json:"source_ranges"`
}

var (
	projectRE = regexp.MustCompile(`^[a-z][a-z0-9-]{4,28}[a-z0-9]$|^[a-z0-9.-]+:[a-z][a-z0-9-]{4,28}[a-z0-9]$`)
	zoneRE    = regexp.MustCompile(`^[a-z]+-[a-z]+[0-9]+-[a-z]$`)
	regionRE  = regexp.MustCompile(`^[a-z]+-[a-z]+[0-9]+$`)
)

// validate names the first bad key.
func (c *Config) validate() error {
	if c.Project == "" {
		return errors.New("project is not set (the GCP project id)")
	}
	if !projectRE.MatchString(c.Project) {
		return fmt.Errorf("project: %q is not a project id", c.Project)
	}
	for _, r := range c.Regions {
		if !regionRE.MatchString(r) {
			return fmt.Errorf("regions: %q is not a region (like us-central1)", r)
		}
	}
	for _, z := range c.Zones {
		if !zoneRE.MatchString(z) {
			return fmt.Errorf("zones: %q is not a zone (like us-central1-a)", z)
		}
	}
	if c.DiskSizeGB < 0 || (c.DiskSizeGB > 0 && c.DiskSizeGB < 10) {
		return fmt.Errorf("disk_size_gb: %d is below 10", c.DiskSizeGB)
	}
	if c.RequestsPerSecond < 0 || c.Burst < 0 {
		return errors.New("requests_per_second and burst must not be negative")
	}
	if c.Image != "" && !strings.HasPrefix(c.Image, "projects/") && !strings.HasPrefix(c.Image, "https://") {
		return fmt.Errorf("image: %q: want projects/P/global/images/family/F or projects/P/global/images/I", c.Image)
	}
	if err := validateSources(c.SourceRanges); err != nil {
		return fmt.Errorf("source_ranges: %w", err)
	}
	return nil
}

// Provider is one GCP project. It is safe for concurrent use. Close it to
// release its HTTP clients.
type Provider struct {
	name         string
	installation string
	cfg          Config
	log          *slog.Logger
	catalog      *catalog.Catalog
	clientOpts   []option.ClientOption
	creds        *auth.Credentials // WithCredentials, or loaded in New
	fileSecrets  []string          // the credentials file's secret values
	tokens       tokenRecorder     // the access tokens sent
	endpoint     string            // WithEndpoint
	endpointHC   *http.Client

	instances  *compute.InstancesClient
	firewalls  *compute.FirewallsClient
	zoneOps    *compute.ZoneOperationsClient
	images     *compute.ImagesClient
	accelTypes *compute.AcceleratorTypesClient
	policies   *compute.ResourcePoliciesClient // and, inside it, its region operations
	// reservations, regions and projects serve Plan's reservation offers
	// and Quotas.
	reservations *compute.ReservationsClient
	regions      *compute.RegionsClient
	projects     *compute.ProjectsClient
	// disks serves the persistent volumes (volume.go).
	disks *compute.DisksClient

	now func() time.Time // WithClock; time.Now
}

// Option configures New.
type Option func(*Provider)

// WithName sets the provider name (default "gcp").
func WithName(name string) Option { return func(p *Provider) { p.name = name } }

// WithInstallation sets the installation id every resource is labelled
// with and every Observe and List filters on.
func WithInstallation(id string) Option { return func(p *Provider) { p.installation = id } }

// BindInstallation implements provider.CloudProvider: gpuprov.New calls it
// with the journal's installation id.
func (p *Provider) BindInstallation(id string) error {
	return provider.BindInstallation(&p.installation, id)
}

// WithClock sets the clock Plan reads to tell an ended reservation
// (default time.Now): for tests.
func WithClock(now func() time.Time) Option { return func(p *Provider) { p.now = now } }

// WithLogger sets the logger (default: discard). User-data and credentials
// never reach it.
func WithLogger(l *slog.Logger) Option { return func(p *Provider) { p.log = l } }

// WithEndpoint points every client at baseURL (no trailing slash) through
// hc: for tests against a mock of the Compute API. Credentials are then
// never looked up, in files or the environment; the calls carry no
// Authorization header unless WithCredentials gives credentials too.
func WithEndpoint(baseURL string, hc *http.Client) Option {
	return func(p *Provider) {
		p.endpoint, p.endpointHC = strings.TrimRight(baseURL, "/"), hc
		if p.endpointHC == nil {
			p.endpointHC = http.DefaultClient
		}
	}
}

// New returns the provider of cfg. It validates cfg and builds the REST
// clients; without WithEndpoint they authenticate with cfg.CredentialsFile
// or Application Default Credentials. Its errors start with "gcp: " and
// name the config key at fault ("gcp: source_ranges: ..."); nothing is
// created when one is returned.
func New(cfg Config, opts ...Option) (*Provider, error) {
	p, err := build(cfg, opts...)
	if err != nil {
		return nil, fmt.Errorf("gcp: %w", err)
	}
	return p, nil
}

// build is New without the "gcp: " prefix, which provider.Build puts as
// "provider gcp: " on what the registry's factory returns. Its errors name
// the config key at fault; nothing is created when it returns one.
func build(cfg Config, opts ...Option) (*Provider, error) {
	p := &Provider{name: ID, cfg: cfg, log: slog.New(slog.DiscardHandler), now: time.Now}
	for _, o := range opts {
		o(p)
	}
	if p.now == nil {
		p.now = time.Now
	}
	if p.name == "" {
		p.name = ID
	}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	if err := p.cfg.validate(); err != nil {
		return nil, err
	}
	if p.catalog == nil {
		c, err := embeddedCatalog()
		if err != nil {
			return nil, err
		}
		p.catalog = c
	}
	p.applyDefaults()
	if err := p.clientOptions(); err != nil {
		return nil, err
	}
	if err := p.dial(context.Background()); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

func (p *Provider) applyDefaults() {
	c := &p.cfg
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.PollInterval, 5*time.Second)
	def(&c.BootTimeout, 15*time.Minute)
	def(&c.DeleteTimeout, 5*time.Minute)
	def(&c.ConsistencyWindow, 15*time.Second)
	def(&c.OperationTimeout, 2*time.Minute)
	def(&c.RequestTimeout, 60*time.Second)
	if c.RequestsPerSecond == 0 {
		c.RequestsPerSecond = 10
	}
	if c.Burst == 0 {
		c.Burst = 20
	}
	if c.DiskSizeGB == 0 {
		c.DiskSizeGB = 200
	}
	if c.Network == "" {
		c.Network = "default"
	}
	if c.Image == "" {
		c.Image = DefaultImage
	}
}

// clientOptions builds the one authenticated HTTP client every REST
// client shares: credentials from WithCredentials, else cfg.CredentialsFile,
// else Application Default Credentials (with WithEndpoint: none unless
// given), their token added to each request above the token recorder (see
// seal). A configured credentials file is always read, so that its secrets
// are masked out of error texts.
func (p *Provider) clientOptions() error {
	var file *credentialsFile
	if p.cfg.CredentialsFile != "" {
		f, err := readCredentialsFile(p.cfg.CredentialsFile)
		if err != nil {
			return err
		}
		file, p.fileSecrets = f, f.secrets
	}
	var base http.RoundTripper // nil: a clone of http.DefaultTransport
	if p.endpoint != "" {
		p.clientOpts = []option.ClientOption{option.WithEndpoint(p.endpoint)}
		if base = p.endpointHC.Transport; base == nil {
			base = http.DefaultTransport
		}
		if p.creds == nil {
			p.tokens.base = base
			p.clientOpts = append(p.clientOpts, option.WithHTTPClient(&http.Client{Transport: &p.tokens}),
				option.WithoutAuthentication())
			return nil
		}
	}
	if p.creds == nil {
		c, err := loadCredentials(file)
		if err != nil {
			return err
		}
		p.creds = c
	}
	hc, err := p.authClient(p.creds, base)
	if err != nil {
		return err
	}
	p.clientOpts = append(p.clientOpts, option.WithHTTPClient(hc))
	return nil
}

func (p *Provider) dial(ctx context.Context) error {
	var err error
	if p.instances, err = compute.NewInstancesRESTClient(ctx, p.clientOpts...); err != nil {
		return err
	}
	if p.firewalls, err = compute.NewFirewallsRESTClient(ctx, p.clientOpts...); err != nil {
		return err
	}
	if p.zoneOps, err = compute.NewZoneOperationsRESTClient(ctx, p.clientOpts...); err != nil {
		return err
	}
	if p.images, err = compute.NewImagesRESTClient(ctx, p.clientOpts...); err != nil {
		return err
	}
	if p.accelTypes, err = compute.NewAcceleratorTypesRESTClient(ctx, p.clientOpts...); err != nil {
		return err
	}
	if p.policies, err = compute.NewResourcePoliciesRESTClient(ctx, p.clientOpts...); err != nil {
		return err
	}
	if p.reservations, err = compute.NewReservationsRESTClient(ctx, p.clientOpts...); err != nil {
		return err
	}
	if p.regions, err = compute.NewRegionsRESTClient(ctx, p.clientOpts...); err != nil {
		return err
	}
	if p.disks, err = compute.NewDisksRESTClient(ctx, p.clientOpts...); err != nil {
		return err
	}
	p.projects, err = compute.NewProjectsRESTClient(ctx, p.clientOpts...)
	return err
}

// Close releases the clients' connections.
func (p *Provider) Close() error {
	var errs []error
	if p.instances != nil {
		errs = append(errs, p.instances.Close())
	}
	if p.firewalls != nil {
		errs = append(errs, p.firewalls.Close())
	}
	if p.zoneOps != nil {
		errs = append(errs, p.zoneOps.Close())
	}
	if p.images != nil {
		errs = append(errs, p.images.Close())
	}
	if p.accelTypes != nil {
		errs = append(errs, p.accelTypes.Close())
	}
	if p.policies != nil {
		errs = append(errs, p.policies.Close())
	}
	if p.reservations != nil {
		errs = append(errs, p.reservations.Close())
	}
	if p.regions != nil {
		errs = append(errs, p.regions.Close())
	}
	if p.projects != nil {
		errs = append(errs, p.projects.Close())
	}
	if p.disks != nil {
		errs = append(errs, p.disks.Close())
	}
	return errors.Join(errs...)
}

// Name returns the provider name.
func (p *Provider) Name() string { return p.name }

// Capabilities: GCP supports every feature (Spot, user-data, requestId,
// per-VM firewall, zones), compact placement (a compact placement policy
// per cluster, see EnsurePlacementGroup) and flex-start (Flex-start VMs,
// see flexstart.go); the timings and rate come from the config.
func (p *Provider) Capabilities() provider.Capabilities {
	c := p.cfg
	return provider.Capabilities{
		BootTimeout: c.BootTimeout, DeleteTimeout: c.DeleteTimeout, PollInterval: c.PollInterval,
		ConsistencyWindow: c.ConsistencyWindow, RequestsPerSecond: c.RequestsPerSecond, Burst: c.Burst,
		// The boot disk's diskSizeGb; labels on the instance and its disk
		// (firewall rules take none: they select by network tag).
		DiskSize: true, Labels: true,
		// EnsurePlacementGroup and DeletePlacementGroup; Create attaches
		// spec.PlacementGroup as the instance's resource policy.
		CompactPlacement: true,
		// Plan answers a FlexStart request with Flex-start VM offers,
		// Observe marks a VM waiting for capacity (PENDING) Queued.
		FlexStart: true,
		Billing:   billing,
	}
}

// billing is how Compute Engine bills a VM's vCPUs, memory and GPUs: per
// second after a one-minute minimum. "VM instance pricing", Billing model
// (https://cloud.google.com/compute/vm-instance-pricing): "All vCPUs,
// GPUs, and GB of memory are charged a minimum of 1 minute. For example,
// if you run your virtual machine for 30 seconds, you will be billed for 1
// minute of usage." and "After 1 minute, instances are charged in 1
// second increments." The GPU pricing page
// (https://cloud.google.com/compute/gpus-pricing) bills attached GPUs by
// the same policy as vCPUs and memory. Uptime ends at TERMINATED: "Instance
// uptime is measured as the number of seconds between when you start an
// instance and when you stop an instance, the latter being when the
// instance state is TERMINATED". The page applies the model to "all
// vCPUs, GPUs, and memory resources"; gpuprov applies it to Spot and
// Flex-start VMs as well, at their own prices.
var billing = provider.Billing{
	Increment: time.Second,
	Minimum:   time.Minute,
	Source:    "https://cloud.google.com/compute/vm-instance-pricing",
}

// UnknownID is an instance id this project never had, for the conformance
// kit.
func (p *Provider) UnknownID() string { return "9999999999999999999" }

// noRetry turns the client's own retryer off: the core is the only retry
// layer. It is passed on every call, reads included.
var noRetry = gax.WithRetry(func() gax.Retryer { return nil })

// call bounds one API call by RequestTimeout.
func (p *Provider) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, p.cfg.RequestTimeout)
}

var (
	_ provider.CloudProvider    = (*Provider)(nil)
	_ provider.Diagnoser        = (*Provider)(nil)
	_ provider.Lister           = (*Provider)(nil)
	_ provider.PlacementGrouper = (*Provider)(nil)
	_ provider.QuotaReader      = (*Provider)(nil)
)
