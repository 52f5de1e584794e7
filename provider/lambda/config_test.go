package lambda

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/providertest"
)

func TestConfigFromGoTOMLAndJSON(t *testing.T) {
	t.Setenv(EnvAPIKey, "")
	providertest.CheckConfig(t, providertest.ConfigForms{
		ID: ID,
		Config: Config{APIKey: "secret_k", BaseURL: "http://127.0.0.1:1/api/v1", Regions: []string{"us-east-1", "us-west-1"},
			// source_network and source_ranges may both be set only to one
			// range, and no_firewall takes no restricting one: the default.
			ImageFamily: "lambda-stack-22-04", NoFirewall: true, SourceRanges: []string{"0.0.0.0/0"}, SourceNetwork: "0.0.0.0/0",
			PollInterval: 5 * time.Second, BootTimeout: 25 * time.Minute, DeleteTimeout: 7 * time.Minute,
			ConsistencyWindow: 20 * time.Second, RequestTimeout: 45 * time.Second, RequestsPerSecond: 0.5, Burst: 2,
			LaunchInterval: 15 * time.Second},
		TOML: `
api_key = "secret_k"
base_url = "http://127.0.0.1:1/api/v1"
regions = ["us-east-1", "us-west-1"]
image_family = "lambda-stack-22-04"
no_firewall = true
source_ranges = ["0.0.0.0/0"]
source_network = "0.0.0.0/0"
poll_interval = "5s"
boot_timeout = "25m"
delete_timeout = "7m"
consistency_window = "20s"
request_timeout = "45s"
requests_per_second = 0.5
burst = 2
launch_interval = "15s"
`,
		JSON: `{"api_key": "secret_k", "base_url": "http://127.0.0.1:1/api/v1", "regions": ["us-east-1", "us-west-1"],
			"image_family": "lambda-stack-22-04", "no_firewall": true, "source_ranges": ["0.0.0.0/0"], "source_network": "0.0.0.0/0",
			"poll_interval": "5s", "boot_timeout": "25m", "delete_timeout": "7m", "consistency_window": "20s",
			"request_timeout": "45s", "requests_per_second": 0.5, "burst": 2, "launch_interval": "15s"}`,
		Settings: func(t *testing.T, p provider.CloudProvider) any { return p.(*Provider).cfg },
	})
}

// The factory's checks and its API key fallback apply to a Go Config as
// they do to a decoded one.
func TestConfigFromGoIsCheckedAndTakesTheKeyFromEnv(t *testing.T) {
	t.Setenv(EnvAPIKey, "from-env")
	p, err := provider.Build(ID, provider.Settings{Installation: "i", Config: Config{Regions: []string{"us-east-1"}}})
	if err != nil || p.(*Provider).cfg.APIKey != "from-env" {
		t.Fatalf("build: %v", err)
	}
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{RequestsPerSecond: -1}, "requests_per_second"},
		{Config{Burst: -1}, "burst"},
	} {
		if _, err := provider.Build(ID, provider.Settings{Config: tc.cfg}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error naming %s", tc.cfg, err, tc.want)
		}
	}
}

// TestSourceRangesAreCheckedWhenBuilt: source ranges Lambda cannot apply
// are refused when the provider is built, from Go or from a config text,
// with an error naming the key and the value. Lambda's rules admit IPv4
// sources only (testdata/openapi.json, FirewallRule.source_network,
// "format": "ipv4network"). source_network keeps working, a bare address
// read as its /32 as Lambda reads it ("If no mask is provided, the API
// assumes /32").
func TestSourceRangesAreCheckedWhenBuilt(t *testing.T) {
	base := Config{APIKey: "k", BaseURL: "http://127.0.0.1:1/api/v1"} // nothing listens: nothing can be created
	for _, tc := range []struct {
		name string
		cfg  func(c *Config)
		want []string
	}{
		{"host bits", func(c *Config) { c.SourceRanges = []string{"203.0.113.7/24"} }, []string{"source_ranges", "203.0.113.7/24"}},
		{"not a CIDR", func(c *Config) { c.SourceRanges = []string{"office"} }, []string{"source_ranges", "office"}},
		{"IPv6", func(c *Config) { c.SourceRanges = []string{"192.0.2.0/24", "2001:db8::/32"} }, []string{"source_ranges", "2001:db8::/32"}},
		{"both keys", func(c *Config) { c.SourceNetwork, c.SourceRanges = "10.0.0.0/8", []string{"192.0.2.0/24"} }, []string{"source_network", "source_ranges", "10.0.0.0/8"}},
		{"bad source_network", func(c *Config) { c.SourceNetwork = "10.0.0.0/33" }, []string{"source_network", "10.0.0.0/33"}},
		{"no firewall", func(c *Config) { c.NoFirewall, c.SourceRanges = true, []string{"192.0.2.0/24"} }, []string{"source_ranges", "no_firewall"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base
			tc.cfg(&cfg)
			if _, err := New(cfg); err == nil || !containsAll(err.Error(), tc.want) {
				t.Errorf("New: %v, want an error naming %q", err, tc.want)
			}
			if _, err := provider.Build(ID, provider.Settings{Config: cfg}); err == nil || !containsAll(err.Error(), tc.want) {
				t.Errorf("Build: %v, want an error naming %q", err, tc.want)
			}
		})
	}
	_, err := provider.Build(ID, provider.Settings{Decode: provider.DecodeTOML([]byte(`api_key = "k"
source_ranges = ["203.0.113.0/24", "198.51.100.1/16"]`))})
	if err == nil || !containsAll(err.Error(), []string{"source_ranges", "198.51.100.1/16"}) {
		t.Errorf("from TOML: %v, want an error naming source_ranges and 198.51.100.1/16", err)
	}

	for _, tc := range []struct {
		cfg  func(c *Config)
		want []string
	}{
		{func(c *Config) {}, nil},
		{func(c *Config) { c.SourceRanges = []string{"203.0.113.0/24", "192.0.2.0/24"} }, []string{"192.0.2.0/24", "203.0.113.0/24"}},
		{func(c *Config) { c.SourceNetwork = "198.51.100.7" }, []string{"198.51.100.7/32"}},
		{func(c *Config) { c.SourceNetwork, c.SourceRanges = "10.0.0.0/8", []string{"10.0.0.0/8"} }, []string{"10.0.0.0/8"}},
		{func(c *Config) { c.NoFirewall, c.SourceNetwork = true, "0.0.0.0/0" }, []string{"0.0.0.0/0"}},
	} {
		cfg := base
		tc.cfg(&cfg)
		p, err := New(cfg)
		if err != nil {
			t.Errorf("%+v: %v", cfg, err)
		} else if !slices.Equal(p.sources, tc.want) {
			t.Errorf("%+v: sources %v, want %v", cfg, p.sources, tc.want)
		}
	}
}

func containsAll(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
