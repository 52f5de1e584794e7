package simserver

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// TestDocsListEveryFaultKey: docs/clouds/sim.md has a row for every key
// that --fault, the options file and PUT /admin/clouds/{cloud}/faults
// accept, and no row for a key that does not exist.
func TestDocsListEveryFaultKey(t *testing.T) {
	b, err := os.ReadFile("../../../docs/clouds/sim.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	start := strings.Index(doc, "## Faults")
	end := strings.Index(doc[start+1:], "\n## ")
	if start < 0 || end < 0 {
		t.Fatal("docs/clouds/sim.md has no Faults section")
	}
	section := doc[start : start+1+end]
	keys := map[string]bool{}
	ft := reflect.TypeFor[Faults]()
	for i := range ft.NumField() {
		f := ft.Field(i)
		jsonKey, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		tomlKey, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
		if jsonKey != tomlKey {
			t.Errorf("Faults.%s: JSON key %q, TOML key %q: the admin API and --fault would disagree", f.Name, jsonKey, tomlKey)
		}
		keys[jsonKey] = true
		if !strings.Contains(section, "\n| `"+jsonKey+"` |") {
			t.Errorf("docs/clouds/sim.md: no row for fault key %q (Faults.%s)", jsonKey, f.Name)
		}
	}
	for _, line := range strings.Split(section, "\n") {
		if k, ok := strings.CutPrefix(line, "| `"); ok {
			k, _, _ = strings.Cut(k, "`")
			if !keys[k] {
				t.Errorf("docs/clouds/sim.md lists fault key %q, which Faults does not have", k)
			}
		}
	}
}

// TestDocsGPUFaultExamplesLoad: the Emulated GPUs section's TOML example
// loads as an options file and its JSON examples decode, each with one
// fault of every kind, all valid.
func TestDocsGPUFaultExamplesLoad(t *testing.T) {
	b, err := os.ReadFile("../../../docs/clouds/sim.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	section := doc[strings.Index(doc, "## Emulated GPUs"):]
	section = section[:strings.Index(section, "\n## ")]
	start := strings.Index(section, "```toml\n")
	end := strings.Index(section[start:], "\n```")
	if start < 0 || end < 0 {
		t.Fatal("no TOML example")
	}
	path := filepath.Join(t.TempDir(), "sim.toml")
	if err := os.WriteFile(path, []byte(section[start+8:start+end]), 0o600); err != nil {
		t.Fatal(err)
	}
	o, err := LoadOptions(path)
	if err != nil {
		t.Fatal(err)
	}
	var fromTOML, fromJSON []string
	for _, f := range o.Clouds[0].Faults.GPUFaults {
		if err := f.validate(); err != nil {
			t.Error(err)
		}
		fromTOML = append(fromTOML, f.Kind)
	}
	for _, m := range regexp.MustCompile("(?m)^\\| `[a-z_]+` \\| `(\\{.*\\})` \\|$").FindAllStringSubmatch(section, -1) {
		var f GPUFault
		if err := json.Unmarshal([]byte(m[1]), &f); err != nil {
			t.Fatalf("%s: %v", m[1], err)
		}
		if err := f.validate(); err != nil {
			t.Error(err)
		}
		fromJSON = append(fromJSON, f.Kind)
	}
	if !reflect.DeepEqual(fromTOML, GPUFaultKinds) || !reflect.DeepEqual(fromJSON, GPUFaultKinds) {
		t.Errorf("examples: TOML %v, JSON %v; want one of each of %v", fromTOML, fromJSON, GPUFaultKinds)
	}
}
