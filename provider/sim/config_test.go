package sim

import (
	"strings"
	"testing"
	"time"

	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/providertest"
)

func TestConfigFromGoTOMLAndJSON(t *testing.T) {
	providertest.CheckConfig(t, providertest.ConfigForms{
		ID: ID,
		Config: Config{Endpoint: "http://127.0.0.1:1", Cloud: "sim-c", APIKey: "k", Regions: []string{"us-east", "eu-west"},
			PollInterval: 250 * time.Millisecond, BootTimeout: 3 * time.Minute, DeleteTimeout: 90 * time.Second,
			ConsistencyWindow: 3 * time.Second, RequestTimeout: 10 * time.Second, RequestsPerSecond: 5, Burst: 10,
			ListPageSize: 100, NoIdempotencyToken: true, SourceRanges: []string{"203.0.113.0/24", "2001:db8::/32"}},
		TOML: `
endpoint = "http://127.0.0.1:1"
cloud = "sim-c"
api_key = "k"
regions = ["us-east", "eu-west"]
poll_interval = "250ms"
boot_timeout = "3m"
delete_timeout = "1m30s"
consistency_window = "3s"
request_timeout = "10s"
requests_per_second = 5
burst = 10
list_page_size = 100
no_idempotency_token = true
source_ranges = ["203.0.113.0/24", "2001:db8::/32"]
`,
		JSON: `{"endpoint": "http://127.0.0.1:1", "cloud": "sim-c", "api_key": "k", "regions": ["us-east", "eu-west"],
			"poll_interval": "250ms", "boot_timeout": "3m", "delete_timeout": "90s", "consistency_window": "3s",
			"request_timeout": "10s", "requests_per_second": 5, "burst": 10, "list_page_size": 100,
			"no_idempotency_token": true, "source_ranges": ["203.0.113.0/24", "2001:db8::/32"]}`,
		Settings: func(t *testing.T, p provider.CloudProvider) any { return p.(*Provider).cfg },
	})
}

// TestSourceRangesAreCheckedWhenBuilt: a source range that is not a CIDR
// is refused when the provider is built, from Go or from a config text,
// with an error naming source_ranges and the range; nothing is sent.
func TestSourceRangesAreCheckedWhenBuilt(t *testing.T) {
	for _, bad := range []string{"203.0.113.7/24", "office", "2001:db8::1"} {
		cfg := Config{Endpoint: "http://127.0.0.1:1", APIKey: "k", SourceRanges: []string{"192.0.2.0/24", bad}}
		if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), "source_ranges") || !strings.Contains(err.Error(), bad) {
			t.Errorf("New with %q: %v, want an error naming source_ranges and the range", bad, err)
		}
		if _, err := provider.Build(ID, provider.Settings{Config: cfg}); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("Build with %q: %v, want an error naming the range", bad, err)
		}
	}
	_, err := provider.Build(ID, provider.Settings{Decode: provider.DecodeTOML([]byte(`endpoint = "http://127.0.0.1:1"
api_key = "k"
source_ranges = ["10.0.0.1/8"]`))})
	if err == nil || !strings.Contains(err.Error(), "source_ranges") || !strings.Contains(err.Error(), "10.0.0.1/8") {
		t.Errorf("from TOML: %v, want an error naming source_ranges and 10.0.0.1/8", err)
	}
}
