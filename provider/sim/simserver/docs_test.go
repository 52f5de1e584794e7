package simserver

import (
	"os"
	"reflect"
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
