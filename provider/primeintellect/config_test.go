package primeintellect

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
		Config: Config{APIKey: "pit_k", BaseURL: "http://127.0.0.1:1/api/v1", TeamID: "team-1",
			Regions: []string{"united_states", "eu_west"}, Security: "secure_cloud", Image: "cuda_12_4_pytorch_2_5",
			DiskGB: 120, PollInterval: 8 * time.Second, BootTimeout: 40 * time.Minute, DeleteTimeout: 12 * time.Minute,
			ConsistencyWindow: 25 * time.Second, RequestTimeout: 50 * time.Second, RequestsPerSecond: 2, Burst: 4},
		TOML: `
api_key = "pit_k"
base_url = "http://127.0.0.1:1/api/v1"
team_id = "team-1"
regions = ["united_states", "eu_west"]
security = "secure_cloud"
image = "cuda_12_4_pytorch_2_5"
disk_gb = 120
poll_interval = "8s"
boot_timeout = "40m"
delete_timeout = "12m"
consistency_window = "25s"
request_timeout = "50s"
requests_per_second = 2
burst = 4
`,
		JSON: `{"api_key": "pit_k", "base_url": "http://127.0.0.1:1/api/v1", "team_id": "team-1",
			"regions": ["united_states", "eu_west"], "security": "secure_cloud", "image": "cuda_12_4_pytorch_2_5",
			"disk_gb": 120, "poll_interval": "8s", "boot_timeout": "40m", "delete_timeout": "12m",
			"consistency_window": "25s", "request_timeout": "50s", "requests_per_second": 2, "burst": 4}`,
		Settings: func(t *testing.T, p provider.CloudProvider) any { return p.(*Provider).cfg },
	})
}

// The factory's checks and its API key fallback apply to a Go Config as
// they do to a decoded one.
func TestConfigFromGoIsCheckedAndTakesTheKeyFromEnv(t *testing.T) {
	t.Setenv(EnvAPIKey, "from-env")
	p, err := provider.Build(ID, provider.Settings{Installation: "i", Config: Config{Regions: []string{"eu_west"}}})
	if err != nil || p.(*Provider).cfg.APIKey != "from-env" {
		t.Fatalf("build: %v", err)
	}
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Security: "secure"}, "security"},
		{Config{DiskGB: -1}, "disk_gb"},
		{Config{RequestsPerSecond: -1}, "requests_per_second"},
		{Config{Image: "ubuntu:22.04"}, "image"},
	} {
		if _, err := provider.Build(ID, provider.Settings{Config: tc.cfg}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error naming %s", tc.cfg, err, tc.want)
		}
	}
}
