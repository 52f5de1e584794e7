package lambda

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
		Config: Config{APIKey: "secret_k", BaseURL: "http://127.0.0.1:1/api/v1", Regions: []string{"us-east-1", "us-west-1"},
			ImageFamily: "lambda-stack-22-04", NoFirewall: true, SourceNetwork: "10.0.0.0/8",
			PollInterval: 5 * time.Second, BootTimeout: 25 * time.Minute, DeleteTimeout: 7 * time.Minute,
			ConsistencyWindow: 20 * time.Second, RequestTimeout: 45 * time.Second, RequestsPerSecond: 0.5, Burst: 2,
			LaunchInterval: 15 * time.Second},
		TOML: `
api_key = "secret_k"
base_url = "http://127.0.0.1:1/api/v1"
regions = ["us-east-1", "us-west-1"]
image_family = "lambda-stack-22-04"
no_firewall = true
source_network = "10.0.0.0/8"
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
			"image_family": "lambda-stack-22-04", "no_firewall": true, "source_network": "10.0.0.0/8",
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
