package azure

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/providertest"
)

// The three forms build without reading a credential: DefaultAzureCredential
// is made at the first token request, which no build makes.
func TestConfigFromGoTOMLAndJSON(t *testing.T) {
	subnet := "/subscriptions/0b1f6471-1bf0-4dda-aec3-111122223333/resourceGroups/net/providers/Microsoft.Network/virtualNetworks/gpu/subnets/nodes"
	providertest.CheckConfig(t, providertest.ConfigForms{
		ID: ID,
		Config: Config{SubscriptionID: "0b1f6471-1bf0-4dda-aec3-111122223333", TenantID: "72f988bf-86f1-41af-91ab-2d7cd011db47",
			Regions: []string{"eastus"}, Zones: []string{"1", "2"}, ResourceGroup: "gpu-fleet", SubnetID: subnet,
			Image: "Canonical:0001-com-ubuntu-server-jammy:22_04-lts-gen2:latest", AdminUser: "gpuprov", Spot: true, DiskSizeGB: 512,
			SourceRanges: []string{"203.0.113.0/24", "2001:db8::/32"},
			PollInterval: 3 * time.Second, BootTimeout: 25 * time.Minute, DeleteTimeout: 12 * time.Minute,
			ConsistencyWindow: 20 * time.Second, OperationTimeout: 4 * time.Minute, RequestTimeout: 40 * time.Second,
			RequestsPerSecond: 8, Burst: 16},
		TOML: `
subscription_id = "0b1f6471-1bf0-4dda-aec3-111122223333"
tenant_id = "72f988bf-86f1-41af-91ab-2d7cd011db47"
regions = ["eastus"]
zones = ["1", "2"]
resource_group = "gpu-fleet"
subnet_id = "` + subnet + `"
image = "Canonical:0001-com-ubuntu-server-jammy:22_04-lts-gen2:latest"
admin_user = "gpuprov"
spot = true
source_ranges = ["203.0.113.0/24", "2001:db8::/32"]
disk_size_gb = 512
poll_interval = "3s"
boot_timeout = "25m"
delete_timeout = "12m"
consistency_window = "20s"
operation_timeout = "4m"
request_timeout = "40s"
requests_per_second = 8
burst = 16
`,
		JSON: `{"subscription_id": "0b1f6471-1bf0-4dda-aec3-111122223333", "tenant_id": "72f988bf-86f1-41af-91ab-2d7cd011db47",
			"regions": ["eastus"], "zones": ["1", "2"], "resource_group": "gpu-fleet", "subnet_id": "` + subnet + `",
			"image": "Canonical:0001-com-ubuntu-server-jammy:22_04-lts-gen2:latest", "admin_user": "gpuprov", "spot": true,
			"source_ranges": ["203.0.113.0/24", "2001:db8::/32"], "disk_size_gb": 512, "poll_interval": "3s", "boot_timeout": "25m", "delete_timeout": "12m",
			"consistency_window": "20s", "operation_timeout": "4m", "request_timeout": "40s",
			"requests_per_second": 8, "burst": 16}`,
		Settings: func(t *testing.T, p provider.CloudProvider) any { return p.(*Provider).cfg },
	})
}

func TestConfigDefaultsAndRefusals(t *testing.T) {
	p, err := New(Config{SubscriptionID: "0b1f6471-1bf0-4dda-aec3-111122223333"})
	if err != nil {
		t.Fatal(err)
	}
	c := p.cfg
	if c.Image != DefaultImage || c.AdminUser != DefaultAdminUser || c.DiskSizeGB != 256 || c.OperationTimeout != 3*time.Minute ||
		c.PollInterval != 10*time.Second || c.DeleteTimeout != 10*time.Minute {
		t.Fatalf("defaults %+v", c)
	}
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "subscription_id is not set"},
		{Config{SubscriptionID: "my-sub"}, "subscription_id"},
		{Config{SubscriptionID: "0b1f6471-1bf0-4dda-aec3-111122223333", Regions: []string{"East US"}}, "regions"},
		{Config{SubscriptionID: "0b1f6471-1bf0-4dda-aec3-111122223333", Zones: []string{"eastus-1"}}, "zones"},
		{Config{SubscriptionID: "0b1f6471-1bf0-4dda-aec3-111122223333", ResourceGroup: "ends.in.dot."}, "resource_group"},
		{Config{SubscriptionID: "0b1f6471-1bf0-4dda-aec3-111122223333", SubnetID: "/subscriptions/x/resourceGroups/g/providers/Microsoft.Network/virtualNetworks/v"}, "subnet_id"},
		{Config{SubscriptionID: "0b1f6471-1bf0-4dda-aec3-111122223333", SubnetID: "/subscriptions/x/resourceGroups/g/providers/Microsoft.Network/virtualNetworks/v/subnets/s"}, "exactly that region"},
		{Config{SubscriptionID: "0b1f6471-1bf0-4dda-aec3-111122223333", Image: "ubuntu"}, "image"},
		{Config{SubscriptionID: "0b1f6471-1bf0-4dda-aec3-111122223333", AdminUser: "root"}, "admin_user"},
		{Config{SubscriptionID: "0b1f6471-1bf0-4dda-aec3-111122223333", DiskSizeGB: 10}, "disk_size_gb"},
	} {
		if _, err := New(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error naming %q", tc.cfg, err, tc.want)
		}
	}
}

// The adapter's credentials (the tokens it sent, the environment's secret
// values DefaultAzureCredential would use) are masked out of every error
// and log text.
func TestSealMasksTokensAndEnvironmentSecrets(t *testing.T) {
	p := &Provider{name: "azure", recorder: &tokenRecorder{}, cred: &credential{secrets: []string{"client-secret-value-42"}}}
	p.recorder.Note(http.Header{"Authorization": {"Bearer eyJ.recorded.token"}})
	pe := p.seal(provider.Errorf(provider.Failed, "azure", "create", "echo: Bearer eyJ.recorded.token secret client-secret-value-42"))
	if s := pe.Error(); strings.Contains(s, "eyJ.recorded.token") || strings.Contains(s, "client-secret-value-42") || strings.Count(s, "[REDACTED]") != 2 {
		t.Fatalf("sealed: %s", s)
	}
	if s := p.maskErr(pe.Err); strings.Contains(s, "client-secret") {
		t.Fatalf("log text: %s", s)
	}
}
