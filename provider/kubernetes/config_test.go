package kubernetes

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/providertest"
)

// kubeconfig writes a kubeconfig with two contexts (current: lab-admin,
// namespace ml) whose server is never called: building a clientset does
// not touch the network.
func kubeconfig(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config")
	body := `apiVersion: v1
kind: Config
current-context: lab-admin
clusters:
- name: lab
  cluster:
    server: https://127.0.0.1:1
    insecure-skip-tls-verify: true
- name: east
  cluster:
    server: https://127.0.0.1:2
    insecure-skip-tls-verify: true
users:
- name: admin
  user:
    token: not-a-real-token
contexts:
- name: lab-admin
  context:
    cluster: lab
    user: admin
    namespace: ml
- name: east-gpu
  context:
    cluster: east
    user: admin
`
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestConfigFromGoTOMLAndJSON(t *testing.T) {
	file := kubeconfig(t)
	quoted := strconv.Quote(file)
	providertest.CheckConfig(t, providertest.ConfigForms{
		ID: ID,
		Config: Config{Kubeconfig: file, Context: "east-gpu", Namespace: "gpu-jobs", Regions: []string{"east"},
			Image: "registry.example/cuda-sshd:12.4", ServiceType: "LoadBalancer",
			Tolerations:  []Toleration{{Key: "nvidia.com/gpu", Operator: "Exists", Effect: "NoSchedule"}, {Key: "pool", Value: "a100"}},
			RuntimeClass: "nvidia", StorageClass: "fast-ssd", GPUPricePerHour: 1.25, UnschedulableWindow: 3 * time.Minute,
			PollInterval: 4 * time.Second, BootTimeout: 20 * time.Minute, DeleteTimeout: 6 * time.Minute,
			RequestTimeout: 45 * time.Second, RequestsPerSecond: 15, Burst: 30,
			SourceRanges: []string{"203.0.113.0/24", "2001:db8::/32"}},
		TOML: `
kubeconfig = ` + quoted + `
context = "east-gpu"
namespace = "gpu-jobs"
regions = ["east"]
image = "registry.example/cuda-sshd:12.4"
service_type = "LoadBalancer"
tolerations = [
  { key = "nvidia.com/gpu", operator = "Exists", effect = "NoSchedule" },
  { key = "pool", value = "a100" },
]
runtime_class = "nvidia"
storage_class = "fast-ssd"
gpu_price_per_hour = 1.25
unschedulable_window = "3m"
poll_interval = "4s"
boot_timeout = "20m"
delete_timeout = "6m"
request_timeout = "45s"
requests_per_second = 15
burst = 30
source_ranges = ["203.0.113.0/24", "2001:db8::/32"]
`,
		JSON: `{"kubeconfig": ` + quoted + `, "context": "east-gpu", "namespace": "gpu-jobs", "regions": ["east"],
			"image": "registry.example/cuda-sshd:12.4", "service_type": "LoadBalancer",
			"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}, {"key": "pool", "value": "a100"}],
			"runtime_class": "nvidia", "storage_class": "fast-ssd", "gpu_price_per_hour": 1.25, "unschedulable_window": "3m",
			"poll_interval": "4s", "boot_timeout": "20m", "delete_timeout": "6m", "request_timeout": "45s",
			"requests_per_second": 15, "burst": 30, "source_ranges": ["203.0.113.0/24", "2001:db8::/32"]}`,
		Settings: func(t *testing.T, p provider.CloudProvider) any {
			k := p.(*Provider)
			return []any{k.cfg, k.region}
		},
	})
}

// Without regions the cluster is named after the kubeconfig context, and
// without a namespace the context's is used; defaults fill the rest.
func TestNewReadsTheKubeconfig(t *testing.T) {
	file := kubeconfig(t)
	for _, tc := range []struct {
		cfg             Config
		region, ns      string
		firewallOptions bool
	}{
		{Config{Kubeconfig: file}, "lab-admin", "ml", false},
		{Config{Kubeconfig: file, Context: "east-gpu"}, "east-gpu", "default", false},
		{Config{Kubeconfig: file, Context: "east-gpu", Namespace: "gpu", Regions: []string{"east"}, ServiceType: "loadbalancer"}, "east", "gpu", true},
	} {
		p, err := New(tc.cfg)
		if err != nil {
			t.Fatal(err)
		}
		caps := p.Capabilities()
		if p.Region() != tc.region || p.cfg.Namespace != tc.ns || caps.Supports(provider.FeatureFirewall) != tc.firewallOptions ||
			caps.Supports(provider.FeatureSpot) || !caps.Supports(provider.FeatureUserData) || !caps.Labels ||
			p.cfg.UnschedulableWindow != 2*time.Minute || p.cfg.Image != DefaultImage || len(p.cfg.Tolerations) != 1 {
			t.Errorf("%+v: region %q namespace %q caps %+v cfg %+v", tc.cfg, p.Region(), p.cfg.Namespace, caps, p.cfg)
		}
	}
	// Found via $KUBECONFIG when the config names no file.
	t.Setenv("KUBECONFIG", file)
	if p, err := New(Config{}); err != nil || p.Region() != "lab-admin" {
		t.Fatalf("from $KUBECONFIG: %v", err)
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "missing"))
	t.Setenv("HOME", t.TempDir())
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	file := kubeconfig(t)
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "no kubeconfig"},
		{Config{Kubeconfig: file, Context: "nope"}, `context "nope" does not exist`},
		{Config{Kubeconfig: file, Regions: []string{"a", "b"}}, "one provider is one cluster"},
		{Config{Kubeconfig: file, Namespace: "Not_A_Namespace"}, "namespace"},
		{Config{Kubeconfig: file, ServiceType: "ExternalName"}, "service_type"},
		{Config{Kubeconfig: file, Tolerations: []Toleration{{Operator: "Equal"}}}, "tolerations[0]"},
		{Config{Kubeconfig: file, GPUPricePerHour: -1}, "gpu_price_per_hour"},
		{Config{Kubeconfig: file, StorageClass: "Fast SSD"}, `storage_class: "Fast SSD"`},
		{Config{Kubeconfig: file, UnschedulableWindow: time.Hour}, "not shorter than boot_timeout"},
	} {
		if _, err := New(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error naming %q", tc.cfg, err, tc.want)
		}
	}
}
