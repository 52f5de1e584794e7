package provider_test

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/org/gpuprov/provider"
)

// testConfig has the shapes adapters' Config types have.
type testConfig struct {
	Project  string        `toml:"project" json:"project"`
	Regions  []string      `toml:"regions" json:"regions"`
	Spot     bool          `toml:"spot" json:"spot"`
	DiskGB   int           `toml:"disk_gb" json:"disk_gb"`
	Rate     float64       `toml:"requests_per_second" json:"requests_per_second"`
	Boot     time.Duration `toml:"boot_timeout" json:"boot_timeout"`
	Poll     time.Duration `toml:"poll_interval" json:"poll_interval"`
	internal int
}

type otherConfig struct {
	Project string `toml:"project" json:"project"`
}

var want = testConfig{Project: "p", Regions: []string{"r1", "r2"}, Spot: true, DiskGB: 200, Rate: 2.5,
	Boot: 20 * time.Minute, Poll: 1500 * time.Millisecond}

const wantTOML = `
project = "p"
regions = ["r1", "r2"]
spot = true
disk_gb = 200
requests_per_second = 2.5
boot_timeout = "20m"
poll_interval = "1.5s"
`

const wantJSON = `{"project": "p", "regions": ["r1", "r2"], "spot": true, "disk_gb": 200,
	"requests_per_second": 2.5, "boot_timeout": "20m", "poll_interval": "1.5s"}`

func TestDecodeIntoFromEachForm(t *testing.T) {
	for name, s := range map[string]provider.Settings{
		"Config value":   {Config: want},
		"Config pointer": {Config: &want},
		"TOML":           {Decode: provider.DecodeTOML([]byte(wantTOML))},
		"JSON":           {Decode: provider.DecodeJSON([]byte(wantJSON))},
	} {
		var got testConfig
		if err := s.DecodeInto(&got); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: got %+v, want %+v", name, got, want)
		}
	}
}

// The decode functions work on an adapter's Config directly too, and keep
// what the text does not set.
func TestDecodeDirectKeepsUnsetFields(t *testing.T) {
	for name, decode := range map[string]func(any) error{
		"TOML": provider.DecodeTOML([]byte(`boot_timeout = "90s"`)),
		"JSON": provider.DecodeJSON([]byte(`{"boot_timeout": "90s"}`)),
	} {
		got := testConfig{Project: "keep", Poll: time.Second, internal: 7}
		if err := decode(&got); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got.Project != "keep" || got.Poll != time.Second || got.Boot != 90*time.Second || got.internal != 7 {
			t.Errorf("%s: %+v", name, got)
		}
	}
}

func TestEmptySettingsAndSectionsLeaveTheConfig(t *testing.T) {
	for name, s := range map[string]provider.Settings{
		"none":       {},
		"empty TOML": {Decode: provider.DecodeTOML(nil)},
		"empty JSON": {Decode: provider.DecodeJSON([]byte(" \n"))},
	} {
		got := testConfig{Project: "keep"}
		if err := s.DecodeInto(&got); err != nil || !reflect.DeepEqual(got, testConfig{Project: "keep"}) {
			t.Errorf("%s: %+v, %v", name, got, err)
		}
	}
}

func TestDecodeErrorsNameTheKey(t *testing.T) {
	for _, tc := range []struct {
		name   string
		decode func(any) error
		want   []string
	}{
		{"TOML unknown key", provider.DecodeTOML([]byte("project = \"p\"\ncolour = \"blue\"")), []string{`unknown key "colour" (line 2)`}},
		{"TOML unknown keys", provider.DecodeTOML([]byte("colour = 1\nshade = 2")), []string{`"colour" (line 1)`, `"shade" (line 2)`}},
		{"JSON unknown key", provider.DecodeJSON([]byte(`{"project":"p","colour":"blue"}`)), []string{`"colour"`}},
		{"TOML bad duration", provider.DecodeTOML([]byte(`boot_timeout = "soon"`)), []string{"boot_timeout", `"soon"`}},
		{"JSON bad duration", provider.DecodeJSON([]byte(`{"poll_interval": "soon"}`)), []string{"poll_interval", `"soon"`}},
		{"TOML negative duration", provider.DecodeTOML([]byte(`boot_timeout = "-1m"`)), []string{"boot_timeout", "negative"}},
		{"TOML duration as integer", provider.DecodeTOML([]byte(`boot_timeout = 300`)), []string{`line 1: key "boot_timeout": want a string, got an integer`}},
		{"TOML wrong type", provider.DecodeTOML([]byte("\nregions = \"r1\"")), []string{`line 2: key "regions": want a list of strings, got a string`}},
		{"JSON wrong type", provider.DecodeJSON([]byte(`{"disk_gb": "big"}`)), []string{`key "disk_gb": want an integer, got a JSON string`}},
		{"JSON two values", provider.DecodeJSON([]byte(`{} {}`)), []string{"more than one JSON value"}},
		{"TOML syntax", provider.DecodeTOML([]byte("project = ")), []string{"line 1"}},
	} {
		var c testConfig
		err := provider.Settings{Decode: tc.decode}.DecodeInto(&c)
		for _, w := range tc.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v, want an error containing %s", tc.name, err, w)
			}
		}
	}
}

func TestConfigOfTheWrongTypeIsRefused(t *testing.T) {
	var nilConfig *testConfig
	for _, tc := range []struct {
		name string
		s    provider.Settings
		want []string
	}{
		{"other type", provider.Settings{Config: otherConfig{Project: "p"}}, []string{"provider_test.otherConfig", "has type provider_test.otherConfig, want provider_test.testConfig"}},
		{"pointer to other type", provider.Settings{Config: &otherConfig{}}, []string{"*provider_test.otherConfig", "provider_test.testConfig"}},
		{"nil pointer", provider.Settings{Config: nilConfig}, []string{"nil *provider_test.testConfig"}},
		{"both", provider.Settings{Config: want, Decode: provider.DecodeJSON(nil)}, []string{"both Config and Decode"}},
	} {
		got := testConfig{Project: "untouched"}
		err := tc.s.DecodeInto(&got)
		for _, w := range tc.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v, want an error containing %q", tc.name, err, w)
			}
		}
		if got.Project != "untouched" {
			t.Errorf("%s: the config was changed: %+v", tc.name, got)
		}
	}
	if err := (provider.Settings{Config: want}).DecodeInto(testConfig{}); err == nil {
		t.Error("DecodeInto a non-pointer succeeded")
	}
}

// A Decode of the caller's own gets durations as strings, so that a plain
// json.Unmarshal or toml.Unmarshal works.
func TestDecodeSeesDurationsAsStrings(t *testing.T) {
	var seen reflect.Type
	decode := func(into any) error {
		seen = reflect.TypeOf(into).Elem()
		reflect.ValueOf(into).Elem().FieldByName("Boot").SetString("3m")
		return nil
	}
	var c testConfig
	if err := (provider.Settings{Decode: decode}).DecodeInto(&c); err != nil {
		t.Fatal(err)
	}
	f, _ := seen.FieldByName("Boot")
	if f.Type.Kind() != reflect.String || f.Tag.Get("toml") != "boot_timeout" || c.Boot != 3*time.Minute {
		t.Fatalf("Decode saw Boot as %v (tag %q); decoded %v", f.Type, f.Tag, c.Boot)
	}
	if _, ok := seen.FieldByName("internal"); ok {
		t.Error("Decode saw an unexported field")
	}
}
