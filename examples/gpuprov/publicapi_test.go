package main

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestImportsPublicPackagesOnly keeps doc.go's promise: the CLI's own files
// import no internal package of gpuprov, so a program in another module can
// do everything the CLI does. (Internal packages that public ones import
// are theirs to use.)
func TestImportsPublicPackagesOnly(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, src, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if strings.HasPrefix(path, "github.com/org/gpuprov/") && strings.Contains("/"+path+"/", "/internal/") {
				t.Errorf("%s imports %s: the CLI must use public packages only", name, path)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no source file checked")
	}
}
