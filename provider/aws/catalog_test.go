package aws

import (
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/org/gpuprov/provider"
)

var zoneIDRE = regexp.MustCompile(`^[a-z0-9]+-az\d+$`)

// The embedded catalog parses, names its source and date, and holds the
// published figures the brief requires (spot-checked here).
func TestEmbeddedCatalog(t *testing.T) {
	c, err := EmbeddedCatalog()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(c.Source, "Price List") || c.AsOf == "" {
		t.Fatalf("catalog source %q, as of %q", c.Source, c.AsOf)
	}
	for _, tc := range []struct {
		typ, gpu, region string
		count            int
		price            float64
	}{
		{"p5.48xlarge", "H100-80GB", "us-east-1", 8, 98.32},
		{"p4d.24xlarge", "A100-40GB", "eu-west-1", 8, 35.39655},
		{"p4de.24xlarge", "A100-80GB", "us-west-2", 8, 40.96575},
		{"g6e.xlarge", "L40S", "us-west-2", 1, 1.861},
		{"g6.xlarge", "L4", "us-east-1", 1, 0.8048},
		{"g5.xlarge", "A10G", "eu-west-1", 1, 1.123},
		{"g4dn.xlarge", "T4", "eu-west-1", 1, 0.587},
		{"p3.2xlarge", "V100", "us-west-2", 1, 3.06},
		{"p5en.48xlarge", "H200", "us-east-1", 8, 84.8},
		{"p5en.48xlarge", "H200", "ap-northeast-1", 8, 106.0},
	} {
		it, ok := c.Lookup(tc.typ)
		if !ok || it.GPU != tc.gpu || it.GPUCount != tc.count || it.Regions[tc.region].Price != tc.price {
			t.Errorf("%s: %+v, want %d x %s at %v in %s", tc.typ, it, tc.count, tc.gpu, tc.price, tc.region)
		}
		for r, o := range it.Regions {
			for _, z := range o.Zones {
				if !zoneIDRE.MatchString(z) {
					t.Errorf("%s in %s: zone %q is not a zone id", tc.typ, r, z)
				}
			}
		}
	}
	// p5e and p6-b200 have no on-demand price the catalog can cite: no
	// regions (no on-demand offer), their shape for reservations, and a
	// note saying so.
	for typ, gpu := range map[string]string{"p5e.48xlarge": "H200", "p6-b200.48xlarge": "B200"} {
		it, ok := c.Lookup(typ)
		if !ok || it.GPU != gpu || it.GPUCount != 8 || it.VCPUs != 192 || it.MemoryGiB != 2048 || len(it.Regions) != 0 ||
			!strings.Contains(it.Note, "No on-demand offers") || !strings.Contains(it.Note, "Capacity Blocks") {
			t.Errorf("%s: %+v", typ, it)
		}
	}
	for _, stale := range []string{"p4d.24xlarge", "p4de.24xlarge", "p5.48xlarge", "p5en.48xlarge"} {
		if it, _ := c.Lookup(stale); !strings.Contains(it.Note, "June 2025") {
			t.Errorf("%s lacks the note that its price predates the June 2025 reduction", stale)
		}
	}
	for _, r := range []string{"us-east-1", "us-west-2", "eu-west-1"} {
		if !slices.Contains(c.Regions(), r) {
			t.Errorf("catalog lacks %s", r)
		}
	}
}

func TestParseCatalogRejectsBadEntries(t *testing.T) {
	for name, body := range map[string]string{
		"alias, not canonical": `{"instance_types":[{"instance_type":"x","gpu":"H100","gpu_count":1,"regions":{"r":{"price":1,"zones":["z"]}}}]}`,
		"no price":             `{"instance_types":[{"instance_type":"x","gpu":"L4","gpu_count":1,"regions":{"r":{"price":0,"zones":["z"]}}}]}`,
		"no zones":             `{"instance_types":[{"instance_type":"x","gpu":"L4","gpu_count":1,"regions":{"r":{"price":1}}}]}`,
		"no count":             `{"instance_types":[{"instance_type":"x","gpu":"L4","regions":{}}]}`,
	} {
		if _, err := ParseCatalog([]byte(body)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestCanonicalGPU(t *testing.T) {
	for _, tc := range []struct {
		name string
		mib  int
		want string
	}{
		{"A100", 40960, "A100-40GB"}, {"A100", 81920, "A100-80GB"}, {"V100", 16384, "V100"}, {"V100", 32768, "V100-32GB"},
		{"H100", 81920, "H100-80GB"}, {"L40S", 45776, "L40S"}, {"L4", 22888, "L4"}, {"A10G", 22888, "A10G"}, {"T4", 16384, "T4"},
		{"H200", 144384, "H200"}, {"B200", 183359, "B200"},
	} {
		if got, ok := CanonicalGPU(tc.name, tc.mib); !ok || got != tc.want {
			t.Errorf("CanonicalGPU(%q, %d) = %q, %v; want %q", tc.name, tc.mib, got, ok, tc.want)
		}
	}
	if _, ok := CanonicalGPU("Radeon Pro V520", 8192); ok {
		t.Error("an unknown GPU was canonicalized")
	}
}

func TestFactoryConfig(t *testing.T) {
	decode := func(body string) func(any) error {
		return func(into any) error { return json.Unmarshal([]byte(body), into) }
	}
	for body, want := range map[string]string{
		`{"regions":["us-east-1","Mars"]}`: "regions",
		`{"image":"img-1"}`:                "image",
		`{"subnet":"sn-1"}`:                "subnet",
		`{"vpc":"v"}`:                      "vpc",
		`{"poll_interval":"soon"}`:         "poll_interval",
		`{"boot_timeout":"-1m"}`:           "boot_timeout",
		`{"requests_per_second":-1}`:       "requests_per_second",
		`{"image_parameter":"no-slash"}`:   "image_parameter",
	} {
		_, err := provider.Build(ID, provider.Settings{Installation: "i", Decode: decode(body)})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error naming %s", body, err, want)
		}
	}
	p, err := New(Config{Regions: []string{"us-east-1"}, PollInterval: 0},
		WithEndpoint(Endpoint{URL: "https://ec2.test", Client: nil}))
	if err == nil {
		t.Fatalf("endpoint without a client accepted: %v", p)
	}
	c := (&Provider{cfg: Config{}}).Capabilities()
	if c.RequestsPerSecond != 5 || c.Burst != 10 || c.ConsistencyWindow.Seconds() != 30 || c.PollInterval.Seconds() != 5 {
		t.Fatalf("default capabilities %+v", c)
	}
}
