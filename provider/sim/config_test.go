package sim

import (
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
			ListPageSize: 100, NoIdempotencyToken: true},
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
`,
		JSON: `{"endpoint": "http://127.0.0.1:1", "cloud": "sim-c", "api_key": "k", "regions": ["us-east", "eu-west"],
			"poll_interval": "250ms", "boot_timeout": "3m", "delete_timeout": "90s", "consistency_window": "3s",
			"request_timeout": "10s", "requests_per_second": 5, "burst": 10, "list_page_size": 100,
			"no_idempotency_token": true}`,
		Settings: func(t *testing.T, p provider.CloudProvider) any { return p.(*Provider).cfg },
	})
}
