package gcp

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/providertest"
)

// The three forms name a service-account file of a made-up key, so that New
// neither looks for Application Default Credentials nor calls Google: the
// token is fetched at the first API call, which no build makes.
func TestConfigFromGoTOMLAndJSON(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	der, _ := x509.MarshalPKCS8PrivateKey(key)
	file := filepath.Join(t.TempDir(), "sa.json")
	b, _ := json.Marshal(map[string]string{"type": "service_account", "project_id": "proj-config",
		"private_key_id": "abc123", "private_key": string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})),
		"client_email": "gpuprov@proj-config.iam.gserviceaccount.com", "token_uri": "https://oauth2.googleapis.com/token"})
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	quoted := strconv.Quote(file)
	providertest.CheckConfig(t, providertest.ConfigForms{
		ID: ID,
		Config: Config{Project: "proj-config", Regions: []string{"us-central1", "us-east4"}, Zones: []string{"us-central1-a"},
			CredentialsFile: file, Network: "gpu-net", Subnetwork: "gpu-subnet", Spot: true,
			Image: "projects/p/global/images/family/f", DiskSizeGB: 300, Refine: true,
			PollInterval: 3 * time.Second, BootTimeout: 16 * time.Minute, DeleteTimeout: 6 * time.Minute,
			ConsistencyWindow: 12 * time.Second, OperationTimeout: 3 * time.Minute, RequestTimeout: 40 * time.Second,
			RequestsPerSecond: 8, Burst: 16, SourceRanges: []string{"203.0.113.0/24", "198.51.100.7/32"}},
		TOML: `
project = "proj-config"
regions = ["us-central1", "us-east4"]
zones = ["us-central1-a"]
credentials_file = ` + quoted + `
network = "gpu-net"
subnetwork = "gpu-subnet"
spot = true
image = "projects/p/global/images/family/f"
disk_size_gb = 300
refine = true
poll_interval = "3s"
boot_timeout = "16m"
delete_timeout = "6m"
consistency_window = "12s"
operation_timeout = "3m"
request_timeout = "40s"
requests_per_second = 8
burst = 16
source_ranges = ["203.0.113.0/24", "198.51.100.7/32"]
`,
		JSON: `{"project": "proj-config", "regions": ["us-central1", "us-east4"], "zones": ["us-central1-a"],
			"credentials_file": ` + quoted + `, "network": "gpu-net", "subnetwork": "gpu-subnet", "spot": true,
			"image": "projects/p/global/images/family/f", "disk_size_gb": 300, "refine": true,
			"poll_interval": "3s", "boot_timeout": "16m", "delete_timeout": "6m", "consistency_window": "12s",
			"operation_timeout": "3m", "request_timeout": "40s", "requests_per_second": 8, "burst": 16,
			"source_ranges": ["203.0.113.0/24", "198.51.100.7/32"]}`,
		Settings: func(t *testing.T, p provider.CloudProvider) any { return p.(*Provider).cfg },
	})
}
