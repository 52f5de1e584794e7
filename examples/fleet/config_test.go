package main

import (
	"strings"
	"testing"
)

// TestProviderFile: the CLI's TOML format: the journal URL, provider tables
// with an optional type, unknown keys refused by name.
func TestProviderFile(t *testing.T) {
	for _, tc := range []struct {
		name, doc, err string
		tables         []string // name/type
	}{
		{"tables and journal", "journal = \"postgres://u@h/db\"\ndefault_regions = [\"us-east\"]\n[sim-a]\ntype = \"sim\"\nendpoint = \"http://127.0.0.1:1\"\napi_key = \"k\"\n[sim]\nendpoint = \"http://x\"\napi_key = \"k\"\n", "", []string{"sim/sim", "sim-a/sim"}},
		{"unknown top-level key", "jornal = \"x\"\n", "unknown key \"jornal\"", nil},
		{"unknown adapter", "[mycloud]\nendpoint = \"x\"\n", "not a known provider adapter", nil},
		{"bad type", "[a]\ntype = 3\n", "type: want an adapter name", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pf, err := parseProviderFile("f.toml", []byte(tc.doc))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, p := range pf.Providers {
				got = append(got, p.Name+"/"+p.Type)
			}
			if strings.Join(got, ",") != strings.Join(tc.tables, ",") || pf.Journal != "postgres://u@h/db" {
				t.Errorf("tables %v journal %q", got, pf.Journal)
			}
		})
	}

	pf, err := parseProviderFile("f.toml", []byte("[sim-a]\ntype = \"sim\"\nendpoint = \"http://x\"\nbogus = 1\n"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Endpoint string `toml:"endpoint"`
	}
	if err := pf.Providers[0].decode(&cfg); err == nil || !strings.Contains(err.Error(), "bogus") {
		t.Errorf("decode of an unknown key: %v, want an error naming it", err)
	}
}
