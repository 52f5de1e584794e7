package providertest

import (
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/org/gpuprov/provider"
)

// ConfigForms is one adapter config written three ways: the same settings
// as a Go value, as a TOML table body and as a JSON object.
type ConfigForms struct {
	// ID is the adapter's registered id. Required.
	ID string
	// Config is a value of the adapter's Config type with every field set,
	// so that the texts must name every key to agree with it. Required.
	Config any
	// TOML and JSON say what Config says. Required.
	TOML, JSON string
	// Settings reads back what the built provider runs with (typically its
	// Config after defaults, from an in-package test). Required.
	Settings func(t *testing.T, p provider.CloudProvider) any
}

// snakeCase is the form of a config key.
var snakeCase = regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)

// otherConfig is a config of no adapter.
type otherConfig struct{ Regions []string }

// CheckConfig checks an adapter's Config as a caller of provider.Build
// meets it: every field has the same snake_case key in its toml and json
// tags; building from f.Config (as a value and as a pointer), from f.TOML
// through provider.DecodeTOML and from f.JSON through provider.DecodeJSON
// gives the same name, capabilities and settings; an unknown key in either
// text is refused with an error naming it; a Config of another type is
// refused with an error naming both types.
func CheckConfig(t *testing.T, f ConfigForms) {
	t.Helper()
	ct := reflect.TypeOf(f.Config)
	if ct.Kind() != reflect.Struct {
		t.Fatalf("ConfigForms.Config is a %s, want the adapter's Config struct", ct)
	}
	cv := reflect.ValueOf(f.Config)
	for i := range ct.NumField() {
		field := ct.Field(i)
		if !field.IsExported() {
			continue
		}
		tk, jk := field.Tag.Get("toml"), field.Tag.Get("json")
		if !snakeCase.MatchString(tk) || tk != jk {
			t.Errorf("%s.%s: toml key %q, json key %q: want one snake_case key in both", ct, field.Name, tk, jk)
		}
		if cv.Field(i).IsZero() {
			t.Errorf("%s.%s: ConfigForms.Config leaves it zero, so the texts need not set %q", ct, field.Name, tk)
		}
	}

	ptr := reflect.New(ct)
	ptr.Elem().Set(cv)
	forms := []struct {
		name string
		s    provider.Settings
	}{
		{"Config value", provider.Settings{Config: f.Config}},
		{"Config pointer", provider.Settings{Config: ptr.Interface()}},
		{"TOML", provider.Settings{Decode: provider.DecodeTOML([]byte(f.TOML))}},
		{"JSON", provider.Settings{Decode: provider.DecodeJSON([]byte(f.JSON))}},
	}
	type built struct {
		name     string
		caps     provider.Capabilities
		settings any
	}
	var first built
	for i, form := range forms {
		form.s.Name, form.s.Installation = f.ID+"-b", "inst-config"
		p, err := provider.Build(f.ID, form.s)
		if err != nil {
			t.Errorf("%s: %v", form.name, err)
			continue
		}
		got := built{p.Name(), p.Capabilities(), f.Settings(t, p)}
		if c, ok := p.(interface{ Close() error }); ok {
			_ = c.Close() // only releases idle HTTP clients here
		}
		if i == 0 {
			first = got
			continue
		}
		if !reflect.DeepEqual(got, first) {
			t.Errorf("%s gives\n\t%+v\nthe Go Config gives\n\t%+v", form.name, got, first)
		}
	}

	for name, decode := range map[string]func(any) error{
		"TOML": provider.DecodeTOML([]byte(f.TOML + "\ncolour_scheme = \"blue\"\n")),
		"JSON": provider.DecodeJSON([]byte(strings.Replace(f.JSON, "{", `{"colour_scheme": "blue", `, 1))),
	} {
		_, err := provider.Build(f.ID, provider.Settings{Installation: "inst-config", Decode: decode})
		if err == nil || !strings.Contains(err.Error(), "colour_scheme") {
			t.Errorf("%s with an unknown key: %v, want an error naming colour_scheme", name, err)
		}
	}

	_, err := provider.Build(f.ID, provider.Settings{Installation: "inst-config", Config: otherConfig{}})
	if err == nil || !strings.Contains(err.Error(), "providertest.otherConfig") || !strings.Contains(err.Error(), ct.String()) {
		t.Errorf("a Config of another type: %v, want an error naming providertest.otherConfig and %s", err, ct)
	}
}
