package apicheck

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// listed is the part of `go list -json` this test reads.
type listed struct {
	ImportPath   string
	Name         string
	Dir          string
	Export       string // export data file, with -export
	DepOnly      bool
	Module       *struct{ Path string }
	TestGoFiles  []string
	XTestGoFiles []string
	Error        *struct{ Err string }
}

// module is what `go list` says of the module's packages.
type module struct {
	path   string            // the module's path
	pkgs   []listed          // the module's own packages
	export map[string]string // export data file of every package they need, by import path
}

// goList runs `go list -export -deps -json ./...` at the module's root,
// once for the test binary. -export builds the packages (the build cache
// keeps that cheap after the first run); reading export data rather than
// type-checking dependencies from source keeps the test quick even with the
// cloud SDKs among them.
var goList = sync.OnceValues(func() (module, error) {
	out, err := goCmd("", "list", "-m", "-f", "{{.Path}}\n{{.Dir}}")
	if err != nil {
		return module{}, err
	}
	mod := strings.Split(strings.TrimSpace(out), "\n") // a Dir may hold spaces
	if len(mod) != 2 {
		return module{}, fmt.Errorf("go list -m: %q", out)
	}
	if out, err = goCmd(mod[1], "list", "-export", "-deps", "-json", "./..."); err != nil {
		return module{}, err
	}
	m := module{path: mod[0], export: map[string]string{}}
	dec := json.NewDecoder(strings.NewReader(out))
	for {
		var p listed
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return module{}, fmt.Errorf("decoding go list: %w", err)
		}
		if p.Error != nil {
			return module{}, fmt.Errorf("go list: %s: %s", p.ImportPath, p.Error.Err)
		}
		m.export[p.ImportPath] = p.Export
		if !p.DepOnly && p.Module != nil && p.Module.Path == mod[0] {
			m.pkgs = append(m.pkgs, p)
		}
	}
	if len(m.pkgs) == 0 {
		return module{}, errors.New("go list found no packages in the module")
	}
	return m, nil
})

// goCmd runs the go command in dir (the working directory when empty).
// go test puts its own go first on PATH.
func goCmd(dir string, args ...string) (string, error) {
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	return string(out), nil
}

// isInternal reports whether path is an internal package, or under one:
// only code rooted at the internal directory's parent may import it.
func isInternal(path string) bool {
	return strings.Contains("/"+path+"/", "/internal/")
}

// inModule reports whether path is a package of module mod.
func inModule(path, mod string) bool {
	return path == mod || strings.HasPrefix(path, mod+"/")
}

// public reports whether outside code can import p.
func public(p listed) bool { return !isInternal(p.ImportPath) && p.Name != "main" }

// TestExportedAPINamesNoInternalType loads every public package of the
// module from its export data and fails for each exported identifier (a
// function's signature, a var's or const's type, an exported struct field,
// a method, an interface method) whose type mentions a type of an internal
// package: code outside the module cannot name that type, so it cannot
// declare a variable of it, call errors.As with it, or implement the
// interface.
func TestExportedAPINamesNoInternalType(t *testing.T) {
	m, err := goList()
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		f, ok := m.export[path]
		if !ok || f == "" {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(f)
	})
	checked := 0
	for _, p := range m.pkgs {
		if !public(p) {
			continue
		}
		pkg, err := imp.Import(p.ImportPath)
		if err != nil {
			t.Fatalf("loading %s: %v", p.ImportPath, err)
		}
		checked++
		for _, f := range surface(pkg, m.path) {
			t.Errorf("%s: %s", fset.Position(f.pos), f.msg)
		}
	}
	t.Logf("%d public packages checked", checked)
}

type finding struct {
	pos token.Pos
	msg string
}

// surface returns a finding for every exported identifier of pkg that
// mentions an internal type. Unexported types of pkg that its exported
// identifiers return or take are followed too: their exported fields and
// methods are reachable from outside.
func surface(pkg *types.Package, module string) []finding {
	s := &walker{pkg: pkg, module: module, seenNamed: map[*types.TypeName]bool{}}
	scope := pkg.Scope()
	for _, name := range scope.Names() {
		obj := scope.Lookup(name)
		if !obj.Exported() {
			continue
		}
		switch o := obj.(type) {
		case *types.TypeName:
			s.typeName(o)
		case *types.Func:
			s.check(o.Pos(), name+" (func)", o.Type())
		case *types.Var:
			s.check(o.Pos(), name+" (var)", o.Type())
		case *types.Const:
			s.check(o.Pos(), name+" (const)", o.Type())
		}
	}
	for len(s.queue) > 0 {
		tn := s.queue[0]
		s.queue = s.queue[1:]
		s.members(tn)
	}
	return s.found
}

type walker struct {
	pkg       *types.Package
	module    string                   // the path of the module pkg is in
	seenNamed map[*types.TypeName]bool // unexported types of pkg already queued
	queue     []*types.TypeName
	found     []finding
}

// check records a finding at pos for what (an identifier, then its kind
// in parentheses) when t mentions internal types.
func (w *walker) check(pos token.Pos, what string, t types.Type) {
	var bad []string
	w.walk(t, map[types.Type]bool{}, &bad)
	if len(bad) == 0 {
		return
	}
	slices.Sort(bad)
	bad = slices.Compact(bad)
	w.found = append(w.found, finding{pos, fmt.Sprintf("%s.%s has type %s, which mentions internal %s",
		w.pkg.Name(), what, types.TypeString(t, nil), strings.Join(bad, ", "))})
}

// typeName checks a declared type: what an alias stands for, the type
// parameters' constraints, and the exported members.
func (w *walker) typeName(tn *types.TypeName) {
	if tn.IsAlias() {
		w.check(tn.Pos(), tn.Name()+" (alias)", types.Unalias(tn.Type()))
		return
	}
	w.members(tn)
}

// members checks the type parameters, exported fields and exported methods
// of a defined type, and for a type defined by anything but a struct or an
// interface (func, slice, map...) the type it is defined as.
func (w *walker) members(tn *types.TypeName) {
	named, ok := tn.Type().(*types.Named)
	if !ok {
		return
	}
	name := tn.Name()
	for tp := range named.TypeParams().TypeParams() {
		w.check(tn.Pos(), name+"["+tp.Obj().Name()+"] (type parameter)", tp.Constraint())
	}
	switch u := named.Underlying().(type) {
	case *types.Struct:
		for f := range u.Fields() {
			// An embedded field promotes its exported members whatever its
			// own name: check it too.
			if f.Exported() || f.Embedded() {
				w.check(f.Pos(), name+"."+f.Name()+" (field)", f.Type())
			}
		}
	case *types.Interface:
		for m := range u.ExplicitMethods() {
			if m.Exported() {
				w.check(m.Pos(), name+"."+m.Name()+" (interface method)", m.Type())
			}
		}
		for e := range u.EmbeddedTypes() {
			w.check(tn.Pos(), name+" (embedded in the interface)", e)
		}
	default:
		w.check(tn.Pos(), name+" (type)", u)
	}
	for m := range named.Methods() {
		if m.Exported() {
			w.check(m.Pos(), name+"."+m.Name()+" (method)", m.Type())
		}
	}
}

// walk appends to bad every internal type t mentions, as outside code
// would have to spell it. It does not descend into a named type's
// definition (its members are checked where it is declared), except that an
// unexported type of the package being checked is queued for members.
func (w *walker) walk(t types.Type, seen map[types.Type]bool, bad *[]string) {
	if t == nil || seen[t] {
		return
	}
	seen[t] = true
	switch t := t.(type) {
	case *types.Alias:
		obj := t.Obj()
		if obj.Pkg() != nil && isInternal(obj.Pkg().Path()) {
			*bad = append(*bad, obj.Pkg().Path()+"."+obj.Name())
		}
		if target, ok := types.Unalias(t).(*types.Named); ok && obj.Pkg() != nil && !isInternal(obj.Pkg().Path()) &&
			target.Obj().Pkg() != nil && !inModule(target.Obj().Pkg().Path(), w.module) {
			// Another module's public alias of its own internal type
			// (azcore.TokenCredential): outside code spells the alias.
			for a := range t.TypeArgs().Types() {
				w.walk(a, seen, bad)
			}
			return
		}
		w.walk(types.Unalias(t), seen, bad)
	case *types.Named:
		obj := t.Obj()
		if obj.Pkg() != nil && isInternal(obj.Pkg().Path()) {
			*bad = append(*bad, obj.Pkg().Path()+"."+obj.Name())
		}
		for a := range t.TypeArgs().Types() {
			w.walk(a, seen, bad)
		}
		if obj.Pkg() == w.pkg && !obj.Exported() && !w.seenNamed[obj] {
			w.seenNamed[obj] = true
			w.queue = append(w.queue, obj)
		}
	case *types.Pointer:
		w.walk(t.Elem(), seen, bad)
	case *types.Slice:
		w.walk(t.Elem(), seen, bad)
	case *types.Array:
		w.walk(t.Elem(), seen, bad)
	case *types.Chan:
		w.walk(t.Elem(), seen, bad)
	case *types.Map:
		w.walk(t.Key(), seen, bad)
		w.walk(t.Elem(), seen, bad)
	case *types.Signature:
		for tp := range t.TypeParams().TypeParams() {
			w.walk(tp.Constraint(), seen, bad)
		}
		for v := range t.Params().Variables() {
			w.walk(v.Type(), seen, bad)
		}
		for v := range t.Results().Variables() {
			w.walk(v.Type(), seen, bad)
		}
	case *types.Struct:
		for f := range t.Fields() {
			if f.Exported() || f.Embedded() {
				w.walk(f.Type(), seen, bad)
			}
		}
	case *types.Interface:
		for m := range t.ExplicitMethods() {
			if m.Exported() {
				w.walk(m.Type(), seen, bad)
			}
		}
		for e := range t.EmbeddedTypes() {
			w.walk(e, seen, bad)
		}
	case *types.Union:
		for term := range t.Terms() {
			w.walk(term.Type(), seen, bad)
		}
	case *types.TypeParam:
		w.walk(t.Constraint(), seen, bad)
	}
}

// TestExamplesImportNoInternalPackage fails for every test file of a public
// package that holds an Example function and imports an internal package:
// go doc and pkg.go.dev show an Example as code to copy, and outside the
// module that import does not compile.
func TestExamplesImportNoInternalPackage(t *testing.T) {
	m, err := goList()
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	checked := 0
	for _, p := range m.pkgs {
		if !public(p) {
			continue
		}
		for _, name := range append(slices.Clone(p.TestGoFiles), p.XTestGoFiles...) {
			path := filepath.Join(p.Dir, name)
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			examples := exampleFuncs(f)
			if len(examples) == 0 {
				continue
			}
			checked++
			for _, spec := range f.Imports {
				ip, err := strconv.Unquote(spec.Path.Value)
				if err != nil {
					t.Fatal(err)
				}
				if isInternal(ip) {
					t.Errorf("%s: imports %s, in a file with %s: outside code cannot copy them",
						fset.Position(spec.Pos()), ip, strings.Join(examples, ", "))
				}
			}
		}
	}
	t.Logf("%d files with examples checked", checked)
}

// exampleFuncs returns the names of the Example functions f declares.
func exampleFuncs(f *ast.File) []string {
	var names []string
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if ok && fn.Recv == nil && strings.HasPrefix(fn.Name.Name, "Example") {
			names = append(names, fn.Name.Name)
		}
	}
	return names
}

// TestKitsStayBelowTheEngine fails when the contract's test kit
// (provider/providertest) or a package under the module's internal/ depends, however
// indirectly, on the root package or on the journal: those sit above the
// provider contract (DESIGN.md's dependency direction), and the helpers
// that drive a whole Provisioner or read what it journaled live in
// gpuprovtest.
func TestKitsStayBelowTheEngine(t *testing.T) {
	m, err := goList()
	if err != nil {
		t.Fatal(err)
	}
	above := []string{m.path, m.path + "/journal"}
	checked := 0
	for _, p := range m.pkgs {
		if !strings.HasPrefix(p.ImportPath, m.path+"/internal/") && p.ImportPath != m.path+"/provider/providertest" {
			continue // journal/internal belongs to the journal
		}
		out, err := goCmd(p.Dir, "list", "-deps", ".")
		if err != nil {
			t.Fatal(err)
		}
		checked++
		for _, dep := range strings.Fields(out) {
			if slices.Contains(above, dep) || strings.HasPrefix(dep, m.path+"/journal/") {
				t.Errorf("%s depends on %s, above the provider contract: move what needs it to gpuprovtest", p.ImportPath, dep)
			}
		}
	}
	if checked < 5 {
		t.Fatalf("checked %d packages; the list of kits is wrong", checked)
	}
}
