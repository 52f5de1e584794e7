package main

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"reflect"
	"slices"
	"strings"

	"github.com/pelletier/go-toml/v2"

	"github.com/org/gpuprov/provider"
)

// fileConfig is the CLI's config file: top-level settings and one table per
// provider account.
type fileConfig struct {
	// Path is where the config was read from ("" when there was none).
	Path string
	// DefaultRegions restrict launches that name no --region.
	DefaultRegions []string
	// Journal is the journal URL; empty means the default sqlite file.
	Journal string
	// Providers are the provider tables, sorted by name.
	Providers []providerConfig

	raw []byte
}

// providerConfig is one provider table: [name] with type = "adapter".
type providerConfig struct {
	Name string // the table name: the provider name recorded on every VM
	Type string // the registered adapter id; default Name
	Line int    // where the table starts, for error messages
}

// configError is a problem with the config file: exit code 2.
type configError struct{ msg string }

func (e *configError) Error() string { return e.msg }

func configErrorf(format string, args ...any) error {
	return &configError{fmt.Sprintf(format, args...)}
}

// loadConfig reads the config file at path. A missing file is not an error:
// the config then has no providers (see requireProviders).
func loadConfig(path string) (*fileConfig, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return &fileConfig{}, nil
	}
	if err != nil {
		return nil, configErrorf("config: %v", err)
	}
	return parseConfig(path, b)
}

// parseConfig parses a config document. Unknown top-level keys, a provider
// table whose type is not a registered adapter and malformed TOML are errors
// naming the file, the line and the key.
func parseConfig(path string, b []byte) (*fileConfig, error) {
	var doc map[string]any
	if err := toml.Unmarshal(b, &doc); err != nil {
		return nil, tomlError(path, err)
	}
	// Decode again, strictly, into a struct made of the known keys and one
	// field per table, so that go-toml reports unknown keys with their line.
	fields := []reflect.StructField{
		{Name: "DefaultRegions", Type: reflect.TypeFor[[]string](), Tag: `toml:"default_regions"`},
		{Name: "Journal", Type: reflect.TypeFor[string](), Tag: `toml:"journal"`},
	}
	var names []string
	for k, v := range doc {
		if _, ok := v.(map[string]any); ok {
			names = append(names, k)
		}
	}
	slices.Sort(names)
	for i, name := range names {
		fields = append(fields, reflect.StructField{
			Name: fmt.Sprintf("P%d", i), Type: reflect.TypeFor[map[string]any](),
			Tag: reflect.StructTag(fmt.Sprintf("toml:%q", name)),
		})
	}
	v := reflect.New(reflect.StructOf(fields))
	if err := strictDecode(b, v.Interface()); err != nil {
		return nil, typeError(path, err, doc, v.Elem().Type())
	}
	cfg := &fileConfig{
		Path:           path,
		DefaultRegions: v.Elem().Field(0).Interface().([]string),
		Journal:        v.Elem().Field(1).Interface().(string),
		raw:            b,
	}
	for _, name := range names {
		pc := providerConfig{Name: name, Type: name, Line: tableLine(b, name)}
		if t, ok := doc[name].(map[string]any)["type"]; ok {
			s, ok := t.(string)
			if !ok || s == "" {
				return nil, configErrorf("%s:%d: [%s] type: want the name of a provider adapter (one of %s)",
					path, pc.Line, name, strings.Join(provider.IDs(), ", "))
			}
			pc.Type = s
		}
		if !slices.Contains(provider.IDs(), pc.Type) {
			what := fmt.Sprintf("table [%s] names no known provider adapter", name)
			if pc.Type != name {
				what = fmt.Sprintf("[%s] type %q is not a known provider adapter", name, pc.Type)
			}
			return nil, configErrorf("%s:%d: %s (known: %s; set type = \"...\" for a second account of one cloud)",
				path, pc.Line, what, strings.Join(provider.IDs(), ", "))
		}
		cfg.Providers = append(cfg.Providers, pc)
	}
	return cfg, nil
}

// decoder returns the Settings.Decode function of provider table name: it
// fills the adapter's config struct from that table, strictly, so that an
// unknown key is an error naming the key and its line. The "type" key is
// the CLI's and is not passed on.
func (c *fileConfig) decoder(name string) func(into any) error {
	return func(into any) error {
		rv := reflect.ValueOf(into)
		if rv.Kind() != reflect.Pointer || rv.IsNil() {
			return fmt.Errorf("config: decode [%s] into a non-pointer %T", name, into)
		}
		fields := []reflect.StructField{{Name: "P", Type: rv.Elem().Type(), Tag: reflect.StructTag(fmt.Sprintf("toml:%q", name))}}
		// Every other table and top-level key is somebody else's: decode them
		// into throwaway fields so that only this table is checked.
		var doc map[string]any
		if err := toml.Unmarshal(c.raw, &doc); err != nil {
			return tomlError(c.Path, err)
		}
		i := 0
		for k := range doc {
			if k != name {
				fields = append(fields, reflect.StructField{Name: fmt.Sprintf("X%d", i), Type: reflect.TypeFor[any](), Tag: reflect.StructTag(fmt.Sprintf("toml:%q", k))})
				i++
			}
		}
		v := reflect.New(reflect.StructOf(fields))
		err := strictDecode(c.raw, v.Interface())
		var strict *toml.StrictMissingError
		if errors.As(err, &strict) {
			// Drop the CLI's own key; keep the rest as errors.
			strict.Errors = slices.DeleteFunc(strict.Errors, func(e toml.DecodeError) bool {
				k := e.Key()
				return len(k) == 2 && k[0] == name && k[1] == "type"
			})
			if len(strict.Errors) == 0 {
				err = nil
			}
		}
		if err != nil {
			return typeError(c.Path, err, doc, v.Elem().Type())
		}
		rv.Elem().Set(v.Elem().Field(0))
		return nil
	}
}

func strictDecode(b []byte, into any) error {
	return toml.NewDecoder(bytes.NewReader(b)).DisallowUnknownFields().Decode(into)
}

// tomlError renders a go-toml error on one line: file:line: what (key).
func tomlError(path string, err error) error {
	var strict *toml.StrictMissingError
	if errors.As(err, &strict) {
		var parts []string
		for _, e := range strict.Errors {
			row, _ := e.Position()
			parts = append(parts, fmt.Sprintf("%s:%d: unknown key %q", path, row, strings.Join(e.Key(), ".")))
		}
		return &configError{strings.Join(parts, "; ")}
	}
	var de *toml.DecodeError
	if errors.As(err, &de) {
		row, _ := de.Position()
		msg := strings.TrimPrefix(de.Error(), "toml: ")
		if k := de.Key(); len(k) > 0 {
			msg += fmt.Sprintf(" (key %q)", strings.Join(k, "."))
		}
		return configErrorf("%s:%d: %s", path, row, msg)
	}
	var ce *configError
	if errors.As(err, &ce) {
		return ce
	}
	return configErrorf("%s: %s", path, strings.TrimPrefix(err.Error(), "toml: "))
}

// typeError renders a value of the wrong type as the user wrote it:
// file:line: key "a.b": want a number, got a string. The wanted type is
// read from the field the key decodes into (root is the decoded struct),
// the given one from the parsed document; any other error goes to
// tomlError.
func typeError(path string, err error, doc map[string]any, root reflect.Type) error {
	var de *toml.DecodeError
	if !errors.As(err, &de) || len(de.Key()) == 0 {
		return tomlError(path, err)
	}
	key := de.Key()
	want, okWant := fieldType(root, key)
	got, okGot := docValue(doc, key)
	if !okWant || !okGot {
		return tomlError(path, err)
	}
	row, _ := de.Position()
	return configErrorf("%s:%d: key %q: want %s, got %s", path, row, strings.Join(key, "."), typeWords(want), valueWords(got))
}

// fieldType follows key through the toml tags (or field names) of t.
func fieldType(t reflect.Type, key []string) (reflect.Type, bool) {
	for _, k := range key {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		switch t.Kind() {
		case reflect.Map:
			t = t.Elem()
		case reflect.Struct:
			f, ok := structField(t, k)
			if !ok {
				return nil, false
			}
			t = f.Type
		default:
			return nil, false
		}
	}
	return t, true
}

func structField(t reflect.Type, k string) (reflect.StructField, bool) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
		if name == k || (name == "" && strings.EqualFold(f.Name, k)) {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// docValue is the value at key in a parsed TOML document.
func docValue(doc map[string]any, key []string) (any, bool) {
	var v any = doc
	for _, k := range key {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		if v, ok = m[k]; !ok {
			return nil, false
		}
	}
	return v, true
}

// typeWords names a Go type the way a config's author thinks of it.
func typeWords(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.String {
			return "a list of strings"
		}
		return "a list"
	case reflect.Map, reflect.Struct:
		return "a table"
	}
	return "a value of another type"
}

// valueWords names the type of a value go-toml parsed.
func valueWords(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case int64:
		return "an integer"
	case float64:
		return "a number"
	case []any:
		return "a list"
	case map[string]any:
		return "a table"
	}
	return "a date or time"
}

// tableLine finds the line of the [name] header, for messages about a table
// as a whole; 0 when not found (a dotted key defined it).
func tableLine(b []byte, name string) int {
	for i, line := range strings.Split(string(b), "\n") {
		l := strings.TrimSpace(line)
		if l == "["+name+"]" || l == `["`+name+`"]` || strings.HasPrefix(l, "["+name+"]") {
			return i + 1
		}
	}
	return 0
}

// sampleConfig is printed when no provider is configured.
const sampleConfig = `# gpuprov config: one table per provider account. The table name is the
# provider name; "type" names the adapter and defaults to the table name.
default_regions = []                       # optional: regions used when --region is not given
# journal = "sqlite:/path/to/journal.db"   # optional: default $XDG_STATE_HOME/gpuprov/journal.db

[sim-a]                                    # printed by "gpuprov sim serve"
type     = "sim"
endpoint = "http://127.0.0.1:7070"
api_key  = "simkey-..."

# [aws]                                    # a real cloud: see docs/clouds/aws.md
# regions = ["us-east-1"]
`

// errNoProviders is the error of a command that needs a provider when the
// config names none.
func (c *fileConfig) requireProviders(path string) error {
	if len(c.Providers) > 0 {
		return nil
	}
	where := "does not exist"
	if c.Path != "" {
		where = "configures no provider"
	}
	return configErrorf("no providers configured: %s %s.\n"+
		"Try the simulated cloud: run `gpuprov demo`, or `gpuprov sim serve` and paste the config it prints.\n"+
		"Then write %s like this:\n\n%s", path, where, path, sampleConfig)
}
