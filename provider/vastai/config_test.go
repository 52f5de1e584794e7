package vastai

import (
	"strings"
	"testing"
	"time"

	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/providertest"
)

func TestConfigFromGoTOMLAndJSON(t *testing.T) {
	t.Setenv(EnvAPIKey, "")
	no := false
	providertest.CheckConfig(t, providertest.ConfigForms{
		ID: ID,
		Config: Config{APIKey: "vk", BaseURL: "http://127.0.0.1:1", Regions: []string{"US", "DE"}, MinReliability: 0.98,
			VerifiedOnly: &no, Image: "example/sshd:1", DiskGB: 80, InjectHostKey: true, PollInterval: 7 * time.Second,
			BootTimeout: 25 * time.Minute, DeleteTimeout: 4 * time.Minute, ConsistencyWindow: 15 * time.Second,
			RequestTimeout: 20 * time.Second, RequestsPerSecond: 0.5, Burst: 2},
		TOML: `
api_key = "vk"
base_url = "http://127.0.0.1:1"
regions = ["US", "DE"]
min_reliability = 0.98
verified_only = false
image = "example/sshd:1"
disk_gb = 80
inject_host_key = true
poll_interval = "7s"
boot_timeout = "25m"
delete_timeout = "4m"
consistency_window = "15s"
request_timeout = "20s"
requests_per_second = 0.5
burst = 2
`,
		JSON: `{"api_key": "vk", "base_url": "http://127.0.0.1:1", "regions": ["US", "DE"], "min_reliability": 0.98,
			"verified_only": false, "image": "example/sshd:1", "disk_gb": 80, "inject_host_key": true, "poll_interval": "7s",
			"boot_timeout": "25m", "delete_timeout": "4m", "consistency_window": "15s", "request_timeout": "20s",
			"requests_per_second": 0.5, "burst": 2}`,
		Settings: func(t *testing.T, p provider.CloudProvider) any { return p.(*Provider).cfg },
	})
}

// The factory's checks and its API key fallback apply to a Go Config as
// they do to a decoded one; New's defaults fill what is left out.
func TestConfigChecksAndDefaults(t *testing.T) {
	t.Setenv(EnvAPIKey, "from-env")
	p, err := provider.Build(ID, provider.Settings{Installation: "i", Config: &Config{Regions: []string{"US"}}})
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	cfg := p.(*Provider).cfg
	if cfg.APIKey != "from-env" || cfg.BaseURL != DefaultBaseURL || cfg.Image != DefaultImage || cfg.DiskGB != 50 ||
		cfg.MinReliability != 0.95 || cfg.VerifiedOnly == nil || !*cfg.VerifiedOnly {
		t.Fatalf("defaults %+v", cfg)
	}
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Regions: []string{"us"}}, "regions"},
		{Config{Regions: []string{"Texas, US"}}, "regions"},
		{Config{MinReliability: 1.5}, "min_reliability"},
		{Config{DiskGB: -1}, "disk_gb"},
		{Config{Burst: -1}, "burst"},
	} {
		if _, err := provider.Build(ID, provider.Settings{Config: tc.cfg}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error naming %s", tc.cfg, err, tc.want)
		}
	}
	if _, err := New(Config{APIKey: "k", BaseURL: "console.vast.ai"}); err == nil || !strings.Contains(err.Error(), "base_url") {
		t.Errorf("a base URL without a scheme: %v", err)
	}
}
