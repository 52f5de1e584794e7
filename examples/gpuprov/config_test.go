package main

import (
	"strings"
	"testing"

	"github.com/org/gpuprov/provider"
)

func TestParseConfig(t *testing.T) {
	doc := `default_regions = ["us-east"]
journal = "sqlite:/tmp/j.db"

[sim]
endpoint = "http://127.0.0.1:1"
api_key = "k"

[sim-b]
type = "sim"
endpoint = "http://127.0.0.1:2"
api_key = "k2"
regions = ["us-central"]
`
	cfg, err := parseConfig("c.toml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.DefaultRegions; len(got) != 1 || got[0] != "us-east" || cfg.Journal != "sqlite:/tmp/j.db" {
		t.Errorf("top level = %v %q", got, cfg.Journal)
	}
	want := []providerConfig{{Name: "sim", Type: "sim", Line: 4}, {Name: "sim-b", Type: "sim", Line: 8}}
	if len(cfg.Providers) != 2 || cfg.Providers[0] != want[0] || cfg.Providers[1] != want[1] {
		t.Errorf("providers = %+v, want %+v", cfg.Providers, want)
	}
	// Each table reaches its adapter strictly, without the CLI's "type" key.
	if err := cfg.check(); err != nil {
		t.Fatalf("check: %v", err)
	}
	p, err := provider.Build("sim", provider.Settings{Name: "sim-b", Decode: cfg.decoder("sim-b")})
	if err != nil || p.Name() != "sim-b" {
		t.Fatalf("Build sim-b: %v", err)
	}
}

func TestParseConfigErrors(t *testing.T) {
	tests := []struct {
		name, doc string
		want      []string
		atCheck   bool // reported when the adapter decodes its table
	}{
		{"unknown top-level key", "journal = \"x\"\nregion = \"y\"\n", []string{`c.toml:2: unknown key "region"`}, false},
		{"unknown adapter", "\n[mycloud]\nx = 1\n", []string{"c.toml:2:", "[mycloud]", "known:"}, false},
		{"bad type", "[a]\ntype = 3\n", []string{"c.toml:1:", "[a] type"}, false},
		{"syntax", "[a\n", []string{"c.toml:1:"}, false},
		{"unknown adapter key", "[sim]\nendpoint = \"e\"\napi_key = \"k\"\n\nregionz = [\"a\"]\n", []string{`c.toml:5: unknown key "sim.regionz"`}, true},
		{"wrong value type", "[sim]\nendpoint = 1\n", []string{"c.toml:2:", "sim.endpoint"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := parseConfig("c.toml", []byte(tt.doc))
			if tt.atCheck {
				if err != nil {
					t.Fatalf("parse: %v", err)
				}
				err = cfg.check()
			}
			if err == nil {
				t.Fatal("no error")
			}
			if _, ok := err.(*configError); !ok {
				t.Errorf("error %T is not a configError (exit 2)", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}
