package kubernetes

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	k8s "k8s.io/client-go/kubernetes"

	"github.com/org/gpuprov/clock"
	"github.com/org/gpuprov/provider"
)

// ID is the id the adapter registers under.
const ID = "kubernetes"

// DefaultImage is the container image of an instance when neither the config
// nor the request names one: a CUDA base image. It has no sshd; the startup
// command installs openssh-server with apt-get at first boot (see
// StartupScript for the contract an image must meet).
const DefaultImage = "nvidia/cuda:12.4.1-base-ubuntu22.04"

// Service types Config.ServiceType takes.
const (
	ServiceNodePort     = "NodePort"
	ServiceLoadBalancer = "LoadBalancer"
	ServiceClusterIP    = "ClusterIP"
)

// Config is one cluster and namespace. Build it in Go and pass it as
// provider.Settings{Config: kubernetes.Config{...}} (or to New), or write it
// as the TOML table or JSON object whose keys are the field tags; durations
// are then strings such as "2m".
type Config struct {
	// Kubeconfig is the kubeconfig file; empty means $KUBECONFIG (a list of
	// files, merged) or ~/.kube/config, and when neither exists and the
	// process runs in a pod, the pod's service account (in-cluster config).
	Kubeconfig string `toml:"kubeconfig" json:"kubeconfig"`
	// Context is the kubeconfig context; empty means its current-context.
	Context string `toml:"context" json:"context"`
	// Namespace holds every pod, Service and Secret the adapter makes;
	// empty means the context's namespace (in a pod: the pod's own), else
	// "default".
	Namespace string `toml:"namespace" json:"namespace"`
	// Regions names the cluster: one name, the Region of every offer and
	// instance. Empty means the context's name ("in-cluster" for in-cluster
	// config). One provider is one cluster; configure a second provider
	// for a second cluster.
	Regions []string `toml:"regions" json:"regions"`
	// Image is the instance's container image; empty means DefaultImage.
	// A request's image overrides it. See StartupScript for what it must
	// hold.
	Image string `toml:"image" json:"image"`
	// ServiceType is how an instance is reached: "NodePort" (the default:
	// a node's external, else internal, IP and the Service's node port),
	// "LoadBalancer" (the load balancer's ingress, port 22; OpenPorts are
	// opened on it) or "ClusterIP" (the Service's cluster IP, port 22: for
	// a caller inside the cluster).
	ServiceType string `toml:"service_type" json:"service_type"`
	// SourceRanges are the networks (CIDRs) that may connect to an
	// instance when the request names none (InstanceSpec.SourceRanges
	// wins); empty means provider.DefaultSourceRanges, everyone. They
	// become the LoadBalancer Service's spec.loadBalancerSourceRanges, so
	// they need service_type "LoadBalancer" (and a load balancer that
	// honours the field): a NodePort or ClusterIP Service has no way to
	// restrict who connects, and New refuses source_ranges with one.
	SourceRanges []string `toml:"source_ranges" json:"source_ranges"`
	// Tolerations go on every pod. Nil means one toleration of the taint
	// GPU node pools commonly carry, nvidia.com/gpu (operator Exists,
	// effect NoSchedule); an empty list means none. Plan offers only nodes
	// whose NoSchedule and NoExecute taints these tolerate.
	Tolerations []Toleration `toml:"tolerations" json:"tolerations"`
	// StorageClass is the storageClassName of the PersistentVolumeClaims
	// persistent volumes are made as (provider.VolumeManager, volume.go);
	// empty means the cluster's default StorageClass, which the
	// DefaultStorageClass admission plugin fills in. A class whose
	// volumeBindingMode is WaitForFirstConsumer binds a claim to a zone
	// when its first pod is scheduled.
	StorageClass string `toml:"storage_class" json:"storage_class"`
	// RuntimeClass is the pod's runtimeClassName ("nvidia" on clusters,
	// k3s among them, whose NVIDIA runtime is not the default); empty
	// means the cluster's default runtime.
	RuntimeClass string `toml:"runtime_class" json:"runtime_class"`
	// GPUPricePerHour is the internal price of one GPU for an hour, in
	// USD: an offer costs it times its GPU count. A cluster has no price
	// list; zero makes every offer free, so a cluster wins over every paid
	// cloud. Negative is an error.
	GPUPricePerHour float64 `toml:"gpu_price_per_hour" json:"gpu_price_per_hour"`
	// UnschedulableWindow is how long a pod may stay unschedulable for
	// "Insufficient nvidia.com/gpu" before its create is a Capacity
	// failure (and Observe reports it Failed); zero means 2m. It must be
	// shorter than BootTimeout.
	UnschedulableWindow time.Duration `toml:"unschedulable_window" json:"unschedulable_window"`
	// PollInterval is how often the core observes a booting or deleting
	// instance, and Create the scheduling of its pod; zero means 5s.
	PollInterval time.Duration `toml:"poll_interval" json:"poll_interval"`
	// BootTimeout bounds the wait for a pod to run with SSH (an image pull
	// of several GB included); zero means 15m.
	BootTimeout time.Duration `toml:"boot_timeout" json:"boot_timeout"`
	// DeleteTimeout bounds a teardown; zero means 5m.
	DeleteTimeout time.Duration `toml:"delete_timeout" json:"delete_timeout"`
	// RequestTimeout bounds each API call; zero means 30s.
	RequestTimeout time.Duration `toml:"request_timeout" json:"request_timeout"`
	// RequestsPerSecond sizes the core's token bucket; zero means 20.
	// Negative is an error.
	RequestsPerSecond float64 `toml:"requests_per_second" json:"requests_per_second"`
	// Burst is that bucket's size; zero means 40. Negative is an error.
	Burst int `toml:"burst" json:"burst"`
}

// Toleration is one pod toleration (core/v1 Toleration without
// tolerationSeconds).
type Toleration struct {
	Key      string `toml:"key" json:"key"`
	Operator string `toml:"operator" json:"operator"` // "Exists" or "Equal" (empty: Equal)
	Value    string `toml:"value" json:"value"`
	Effect   string `toml:"effect" json:"effect"` // "NoSchedule", "PreferNoSchedule", "NoExecute" or empty (all)
}

// defaultTolerations are the tolerations of a Config that names none.
var defaultTolerations = []Toleration{{Key: string(resourceGPU), Operator: "Exists", Effect: "NoSchedule"}}

func (t Toleration) v1() corev1.Toleration {
	return corev1.Toleration{Key: t.Key, Operator: corev1.TolerationOperator(t.Operator), Value: t.Value,
		Effect: corev1.TaintEffect(t.Effect)}
}

// validate names the first bad key.
func (c *Config) validate() error {
	if c.Namespace != "" {
		if errs := validation.IsDNS1123Label(c.Namespace); len(errs) > 0 {
			return fmt.Errorf("namespace: %q: %s", c.Namespace, strings.Join(errs, "; "))
		}
	}
	switch {
	case len(c.Regions) > 1:
		return fmt.Errorf("regions: %q names %d clusters; one provider is one cluster (configure another provider for another cluster)", c.Regions, len(c.Regions))
	case len(c.Regions) == 1 && (c.Regions[0] == "" || strings.ContainsAny(c.Regions[0], "|/ ")):
		return fmt.Errorf("regions: %q is not a cluster name (no spaces, '/' or '|')", c.Regions[0])
	}
	switch strings.ToLower(c.ServiceType) {
	case "", "nodeport", "loadbalancer", "clusterip":
	default:
		return fmt.Errorf("service_type: %q: want NodePort, LoadBalancer or ClusterIP", c.ServiceType)
	}
	if len(c.SourceRanges) > 0 {
		if err := provider.ValidateSourceRanges(c.SourceRanges); err != nil {
			return fmt.Errorf("source_ranges: %w", err)
		}
		if !strings.EqualFold(c.ServiceType, ServiceLoadBalancer) {
			return fmt.Errorf("source_ranges: %q: a %s Service cannot restrict who connects (only a LoadBalancer's loadBalancerSourceRanges can); set service_type = %q or remove source_ranges",
				c.SourceRanges, cmp.Or(c.ServiceType, ServiceNodePort), ServiceLoadBalancer)
		}
	}
	for i, t := range c.Tolerations {
		switch t.Operator {
		case "", "Equal":
			if t.Key == "" {
				return fmt.Errorf("tolerations[%d]: operator Equal needs a key", i)
			}
		case "Exists":
			if t.Value != "" {
				return fmt.Errorf("tolerations[%d]: operator Exists takes no value", i)
			}
		default:
			return fmt.Errorf("tolerations[%d]: operator %q: want Exists or Equal", i, t.Operator)
		}
		switch t.Effect {
		case "", "NoSchedule", "PreferNoSchedule", "NoExecute":
		default:
			return fmt.Errorf("tolerations[%d]: effect %q: want NoSchedule, PreferNoSchedule, NoExecute or empty", i, t.Effect)
		}
	}
	if c.RuntimeClass != "" {
		if errs := validation.IsDNS1123Subdomain(c.RuntimeClass); len(errs) > 0 {
			return fmt.Errorf("runtime_class: %q: %s", c.RuntimeClass, strings.Join(errs, "; "))
		}
	}
	if c.StorageClass != "" {
		if errs := validation.IsDNS1123Subdomain(c.StorageClass); len(errs) > 0 {
			return fmt.Errorf("storage_class: %q: %s", c.StorageClass, strings.Join(errs, "; "))
		}
	}
	if c.GPUPricePerHour < 0 {
		return fmt.Errorf("gpu_price_per_hour: %v is negative", c.GPUPricePerHour)
	}
	if c.RequestsPerSecond < 0 || c.Burst < 0 {
		return errors.New("requests_per_second and burst must not be negative")
	}
	return nil
}

func (c *Config) applyDefaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.UnschedulableWindow, 2*time.Minute)
	def(&c.PollInterval, 5*time.Second)
	def(&c.BootTimeout, 15*time.Minute)
	def(&c.DeleteTimeout, 5*time.Minute)
	def(&c.RequestTimeout, 30*time.Second)
	if c.RequestsPerSecond == 0 {
		c.RequestsPerSecond = 20
	}
	if c.Burst == 0 {
		c.Burst = 40
	}
	if c.Image == "" {
		c.Image = DefaultImage
	}
	switch strings.ToLower(c.ServiceType) {
	case "", "nodeport":
		c.ServiceType = ServiceNodePort
	case "loadbalancer":
		c.ServiceType = ServiceLoadBalancer
	case "clusterip":
		c.ServiceType = ServiceClusterIP
	}
	if c.Tolerations == nil {
		c.Tolerations = defaultTolerations
	}
}

// Provider is one namespace of one cluster. It is safe for concurrent use.
type Provider struct {
	name         string
	installation string
	cfg          Config
	region       string // the cluster's name: cfg.Regions[0], else the context's
	log          *slog.Logger
	clock        clock.Clock
	cs           k8s.Interface
}

// Option configures New.
type Option func(*Provider)

// WithName sets the provider name (default "kubernetes").
func WithName(name string) Option { return func(p *Provider) { p.name = name } }

// WithInstallation sets the installation id every object is labelled with
// and every Observe and List filters on.
func WithInstallation(id string) Option { return func(p *Provider) { p.installation = id } }

// WithLogger sets the logger (default: discard). Keys and Secrets never
// reach it.
func WithLogger(l *slog.Logger) Option { return func(p *Provider) { p.log = l } }

// WithClock sets the clock Create's scheduling wait and the unschedulable
// window are measured on (default clock.Real).
func WithClock(c clock.Clock) Option { return func(p *Provider) { p.clock = c } }

// WithClientset makes the provider talk through cs (a client-go fake
// clientset in tests, or a clientset the caller built) instead of one built
// from a kubeconfig: no kubeconfig, environment or service account is then
// read. The cluster's name is Config.Regions[0], else Config.Context, else
// "kubernetes"; the namespace Config.Namespace, else "default".
func WithClientset(cs k8s.Interface) Option { return func(p *Provider) { p.cs = cs } }

// BindInstallation implements provider.CloudProvider: gpuprov.New calls it
// with the journal's installation id.
func (p *Provider) BindInstallation(id string) error {
	return provider.BindInstallation(&p.installation, id)
}

// New returns the provider of cfg. It validates cfg and, without
// WithClientset, loads the kubeconfig (or in-cluster config) and builds a
// clientset; it does not call the API server.
func New(cfg Config, opts ...Option) (*Provider, error) {
	p := &Provider{name: ID, cfg: cfg}
	for _, o := range opts {
		o(p)
	}
	if p.name == "" {
		p.name = ID
	}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	if p.clock == nil {
		p.clock = clock.Real
	}
	if err := p.cfg.validate(); err != nil {
		return nil, fmt.Errorf("kubernetes: %w", err)
	}
	p.cfg.applyDefaults()
	if p.cfg.UnschedulableWindow >= p.cfg.BootTimeout {
		return nil, fmt.Errorf("kubernetes: unschedulable_window %v is not shorter than boot_timeout %v", p.cfg.UnschedulableWindow, p.cfg.BootTimeout)
	}
	if p.cs == nil {
		lc, err := loadClient(p.cfg)
		if err != nil {
			return nil, fmt.Errorf("kubernetes: %w", err)
		}
		p.cs = lc.clientset
		if p.cfg.Namespace == "" {
			p.cfg.Namespace = lc.namespace
		}
		if len(p.cfg.Regions) == 0 {
			p.region = lc.contextName
		}
	}
	switch {
	case len(p.cfg.Regions) == 1:
		p.region = p.cfg.Regions[0]
	case p.region != "":
	case p.cfg.Context != "":
		p.region = p.cfg.Context
	default:
		p.region = "kubernetes"
	}
	if p.cfg.Namespace == "" {
		p.cfg.Namespace = "default"
	}
	return p, nil
}

// Name returns the provider name.
func (p *Provider) Name() string { return p.name }

// Region returns the cluster's name: the Region of its offers and
// instances.
func (p *Provider) Region() string { return p.region }

// Capabilities: no spot (a cluster has no spot market) and, unless the
// Service is a LoadBalancer, no OpenPorts (a NodePort or ClusterIP Service
// does not keep the port numbers) and no source ranges (nothing in a
// NodePort or ClusterIP Service restricts who connects). Host keys are
// injected through the instance's Secret, so user-data is supported; a
// replayed create is safe because the pod's name is derived from (vm,
// attempt); locations have zones where nodes carry
// topology.kubernetes.io/zone. Labels go on every pod, Service and Secret.
func (p *Provider) Capabilities() provider.Capabilities {
	c := p.cfg
	unsupported := []provider.Feature{provider.FeatureSpot}
	if c.ServiceType != ServiceLoadBalancer {
		unsupported = append(unsupported, provider.FeatureFirewall, provider.FeatureSourceRanges)
	}
	return provider.Capabilities{
		Unsupported: unsupported,
		BootTimeout: c.BootTimeout, DeleteTimeout: c.DeleteTimeout, PollInterval: c.PollInterval,
		// The API server's reads are consistent (a list without a
		// resourceVersion is a quorum read, or a watch cache proven
		// current): what Create made is listed at once.
		ConsistencyWindow: time.Second,
		RequestsPerSecond: c.RequestsPerSecond, Burst: c.Burst,
		Labels: true,
		// A pod bills nothing by itself: the cluster is paid for whatever
		// runs on it, or nothing, by whoever runs it. gpu_price_per_hour
		// ranks the cluster among clouds at Plan; it is no charge a launch
		// adds, so the core counts no cost for a pod.
		Billing: provider.Billing{Free: true},
	}
}

// UnknownID is a pod name this namespace never had, for the conformance kit.
func (p *Provider) UnknownID() string { return "gpuprov-conformance-unknown-1" }

// call bounds one API call by RequestTimeout.
func (p *Provider) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, p.cfg.RequestTimeout)
}

// checkRegion refuses a location of another cluster: a journal row whose
// region is not this cluster's name was made under another configuration,
// and acting on this cluster for it could touch the wrong objects.
func (p *Provider) checkRegion(op string, loc provider.Location) error {
	if loc.Region != p.region {
		return p.errorf(provider.InvalidRequest, op, "location %s is not this cluster (%s)", loc, p.region)
	}
	return nil
}

func (p *Provider) errorf(kind provider.ErrorKind, op, format string, args ...any) *provider.Error {
	return provider.Errorf(kind, p.name, op, format, args...)
}

var (
	_ provider.CloudProvider = (*Provider)(nil)
	_ provider.Diagnoser     = (*Provider)(nil)
	_ provider.Lister        = (*Provider)(nil)
	_ provider.VolumeManager = (*Provider)(nil)
)
