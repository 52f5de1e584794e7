package runpod

import (
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
		Config: Config{APIKey: "rpa_k", BaseURL: "http://127.0.0.1:1/v2", Clouds: []string{"SECURE"},
			Regions: []string{"US-TX-3", "EU-RO-1"}, Image: "example/sshd:1", DiskGB: 80,
			PollInterval: 7 * time.Second, BootTimeout: 12 * time.Minute, DeleteTimeout: 4 * time.Minute,
			ConsistencyWindow: 15 * time.Second, RequestTimeout: 20 * time.Second, RequestsPerSecond: 0.5, Burst: 5},
		TOML: `
api_key = "rpa_k"
base_url = "http://127.0.0.1:1/v2"
clouds = ["SECURE"]
regions = ["US-TX-3", "EU-RO-1"]
image = "example/sshd:1"
disk_gb = 80
poll_interval = "7s"
boot_timeout = "12m"
delete_timeout = "4m"
consistency_window = "15s"
request_timeout = "20s"
requests_per_second = 0.5
burst = 5
`,
		JSON: `{"api_key": "rpa_k", "base_url": "http://127.0.0.1:1/v2", "clouds": ["SECURE"],
			"regions": ["US-TX-3", "EU-RO-1"], "image": "example/sshd:1", "disk_gb": 80, "poll_interval": "7s",
			"boot_timeout": "12m", "delete_timeout": "4m", "consistency_window": "15s", "request_timeout": "20s",
			"requests_per_second": 0.5, "burst": 5}`,
		Settings: func(t *testing.T, p provider.CloudProvider) any { return p.(*Provider).cfg },
	})
}

// The factory's checks and its API key fallback apply to a Go Config as
// they do to a decoded one.
func TestConfigFromGoIsCheckedAndTakesTheKeyFromEnv(t *testing.T) {
	t.Setenv(EnvAPIKey, "from-env")
	p, err := provider.Build(ID, provider.Settings{Installation: "i", Config: &Config{Regions: []string{"US-TX-3"}}})
	if err != nil || p.(*Provider).cfg.APIKey != "from-env" {
		t.Fatalf("build: %v", err)
	}
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Clouds: []string{"secure"}}, "clouds"},
		{Config{DiskGB: -1}, "disk_gb"},
		{Config{Burst: -1}, "burst"},
	} {
		if _, err := provider.Build(ID, provider.Settings{Config: tc.cfg}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error naming %s", tc.cfg, err, tc.want)
		}
	}
}
