package apicheck

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"slices"
	"strings"
	"testing"
)

// TestSurfaceFindsEveryWayToMentionAnInternalType runs the walker on a
// small module of source packages, so that the guard above is known to see
// each kind of exported identifier, and to leave alone what outside code
// never sees (unexported fields, unexported functions, a public type's
// internals).
func TestSurfaceFindsEveryWayToMentionAnInternalType(t *testing.T) {
	sources := map[string]string{
		"example.com/m/internal/x": `package x
			type T struct{ N int }
			type I interface{ M() }`,
		"example.com/m/pub": `package pub
			import "example.com/m/internal/x"
			type Public struct{ hidden x.T }   // unexported field: fine
			func (Public) M() {}
			func (Public) private(x.T) {}      // unexported method: fine
			func Clean(Public) error { return nil }`,
		// Another module's public alias of its own internal type, as
		// azcore.TokenCredential is: outside code spells the alias.
		"example.com/other/internal/exported": `package exported
			type Cred interface{ Token() string }`,
		"example.com/other/sdk": `package sdk
			import "example.com/other/internal/exported"
			type Cred = exported.Cred`,
		"example.com/m/p": `package p
			import (
				"example.com/m/internal/x"
				"example.com/m/pub"
				"example.com/other/sdk"
			)
			func WithCred(sdk.Cred) {}                   // fine: the other module's alias
			type Field struct {
				Err   *x.T       // want
				Fine  pub.Public
				inner x.T
			}
			type Embeds struct{ *x.T }          // want
			type Method struct{}
			func (Method) Get() []x.T { return nil }     // want
			func (Method) get() x.T { return x.T{} }
			type Iface interface{ Do(map[string]x.I) }  // want
			type EmbedsIface interface{ x.I }            // want
			type Func func(chan x.T)                     // want
			type Alias = x.T                             // want
			type Generic[E x.I] struct{}                 // want
			func New() (*hidden, error) { return nil, nil }
			type hidden struct{ Out x.T }                // want: reached from New
			func Returns() x.I { return nil }           // want
			func Takes(fn func(x.T)) {}                  // want
			func private(x.T) {}
			var V []*x.T                                 // want
			var Anon struct{ F x.T }                     // want
			const C x.N = 1                              // want`,
	}
	sources["example.com/m/internal/x"] += "\ntype N int"

	fset := token.NewFileSet()
	pkgs := map[string]*types.Package{}
	var load func(path string) (*types.Package, error)
	load = func(path string) (*types.Package, error) {
		if p, ok := pkgs[path]; ok {
			return p, nil
		}
		src, ok := sources[path]
		if !ok {
			return nil, fmt.Errorf("no package %s", path)
		}
		f, err := parser.ParseFile(fset, path+".go", src, 0)
		if err != nil {
			return nil, err
		}
		conf := types.Config{Importer: importerFunc(load)}
		p, err := conf.Check(path, fset, []*ast.File{f}, nil)
		if err != nil {
			return nil, err
		}
		pkgs[path] = p
		return p, nil
	}

	pub, err := load("example.com/m/pub")
	if err != nil {
		t.Fatal(err)
	}
	if got := surface(pub, "example.com/m"); len(got) != 0 {
		t.Errorf("pub: unexpected findings %v", got)
	}

	p, err := load("example.com/m/p")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range surface(p, "example.com/m") {
		got = append(got, strings.Fields(f.msg)[0])
	}
	slices.Sort(got)
	want := []string{"p.Alias", "p.Anon", "p.C", "p.Embeds.T", "p.EmbedsIface", "p.Field.Err", "p.Func",
		"p.Generic[E]", "p.Iface.Do", "p.Method.Get", "p.Returns", "p.Takes", "p.V", "p.hidden.Out"}
	if !slices.Equal(got, want) {
		t.Errorf("findings\n got %q\nwant %q", got, want)
	}
}

type importerFunc func(path string) (*types.Package, error)

func (f importerFunc) Import(path string) (*types.Package, error) { return f(path) }
