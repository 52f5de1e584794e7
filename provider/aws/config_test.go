package aws

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/providertest"
)

// The three forms name a profile of a shared config file made for the test,
// so that New's SDK config load reads nothing of the machine's; credentials
// are resolved at the first call, which no build makes.
func TestConfigFromGoTOMLAndJSON(t *testing.T) {
	dir := t.TempDir()
	conf, creds := filepath.Join(dir, "config"), filepath.Join(dir, "credentials")
	if err := os.WriteFile(conf, []byte("[profile gpu]\nregion = us-east-1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(creds, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AWS_CONFIG_FILE", conf)
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", creds)
	t.Setenv("AWS_PROFILE", "")
	providertest.CheckConfig(t, providertest.ConfigForms{
		ID: ID,
		Config: Config{Profile: "gpu", Regions: []string{"us-east-1", "us-west-2"}, Spot: true, Image: "ami-0123456789abcdef0",
			ImageParameter: "/aws/service/x/ami-id", Subnet: "subnet-0123456789abcdef0", VPC: "vpc-0123456789abcdef0",
			Refine: true, SSHUser: "ec2-user", BootTimeout: 25 * time.Minute, DeleteTimeout: 8 * time.Minute,
			PollInterval: 4 * time.Second, ConsistencyWindow: 45 * time.Second, RequestTimeout: 20 * time.Second,
			RequestsPerSecond: 3, Burst: 6, SourceRanges: []string{"203.0.113.0/24", "2001:db8::/32"}},
		TOML: `
profile = "gpu"
regions = ["us-east-1", "us-west-2"]
spot = true
image = "ami-0123456789abcdef0"
image_parameter = "/aws/service/x/ami-id"
subnet = "subnet-0123456789abcdef0"
vpc = "vpc-0123456789abcdef0"
refine = true
ssh_user = "ec2-user"
boot_timeout = "25m"
delete_timeout = "8m"
poll_interval = "4s"
consistency_window = "45s"
request_timeout = "20s"
requests_per_second = 3
burst = 6
source_ranges = ["203.0.113.0/24", "2001:db8::/32"]
`,
		JSON: `{"profile": "gpu", "regions": ["us-east-1", "us-west-2"], "spot": true, "image": "ami-0123456789abcdef0",
			"image_parameter": "/aws/service/x/ami-id", "subnet": "subnet-0123456789abcdef0",
			"vpc": "vpc-0123456789abcdef0", "refine": true, "ssh_user": "ec2-user", "boot_timeout": "25m",
			"delete_timeout": "8m", "poll_interval": "4s", "consistency_window": "45s", "request_timeout": "20s",
			"requests_per_second": 3, "burst": 6, "source_ranges": ["203.0.113.0/24", "2001:db8::/32"]}`,
		Settings: func(t *testing.T, p provider.CloudProvider) any { return p.(*Provider).cfg },
	})
}

// A bad source_ranges is refused when the provider is built, naming the key
// and the value (provider.ValidateSourceRanges), before the SDK's
// configuration is loaded. Through provider.Build, which puts "provider
// aws: " before the factory's error, the adapter's name is not repeated.
func TestBuildRefusesBadSourceRanges(t *testing.T) {
	for _, s := range []provider.Settings{
		{Config: Config{SourceRanges: []string{"198.51.100.1/24"}}},
		{Decode: provider.DecodeTOML([]byte(`source_ranges = ["198.51.100.1/24"]`))},
	} {
		_, err := provider.Build(ID, s)
		if err == nil || !strings.HasPrefix(err.Error(), `provider aws: config: source_ranges: source range "198.51.100.1/24"`) ||
			strings.Count(err.Error(), "aws:") != 1 {
			t.Fatalf("build with a bad source range: %v; want the key and value named after one provider prefix", err)
		}
	}
}
