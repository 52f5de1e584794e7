package all_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/org/gpuprov/provider"
	_ "github.com/org/gpuprov/provider/all"
)

// TestEveryAdapterIsRegistered keeps the package honest: every adapter directory under provider/ that
// registers itself is imported here, so a new cloud cannot be forgotten.
func TestEveryAdapterIsRegistered(t *testing.T) {
	registered := provider.IDs()
	entries, err := os.ReadDir("..")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		switch e.Name() {
		case "all", "providertest":
			continue
		}
		if !registers(t, filepath.Join("..", e.Name())) {
			continue
		}
		if !slices.Contains(registered, e.Name()) {
			t.Errorf("provider/%s registers itself but provider/all does not import it (registered: %v)", e.Name(), registered)
		}
	}
}

// registers reports whether a non-test file of the package in dir calls provider.Register.
func registers(t *testing.T, dir string) bool {
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "provider.Register(") {
			return true
		}
	}
	return false
}
