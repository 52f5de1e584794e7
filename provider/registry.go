package provider

import (
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"sort"
	"sync"
)

// Settings is what a Factory gets to build a provider.
//
// The adapter's config comes from Config (a Go value) or Decode (text):
//
//	provider.Settings{Config: aws.Config{Regions: []string{"us-east-1"}, Spot: true}}
//	provider.Settings{Decode: provider.DecodeTOML([]byte(`regions = ["us-east-1"]`))}
//
// Each adapter documents its Config type; the TOML and JSON keys are the
// field tags. With neither, the adapter runs on its defaults.
type Settings struct {
	// Name is the provider id to report from Name(); it defaults to the
	// registered id. Two accounts of one cloud are two names.
	Name string
	// Installation is the journal's installation id: part of every
	// resource's identity and of every Observe and List filter.
	Installation string
	// Config is the adapter's config as a Go value: a value of the
	// adapter's Config type (aws.Config, gcp.Config, ...) or a non-nil
	// pointer to one. A value of another type is an error naming both
	// types; so is a nil pointer. Set Config or Decode, not both.
	Config any
	// Decode fills the adapter's config struct from its config section
	// (for example the [aws] table of the CLI's TOML file). It must report
	// unknown keys as an error naming them. DecodeTOML and DecodeJSON
	// return such functions. Decode is handed a pointer to a struct with
	// the fields and tags of the adapter's Config in which every
	// time.Duration field is a string ("90s"); DecodeInto parses them.
	Decode func(into any) error
	// Logger receives the adapter's structured logs; never secrets.
	Logger *slog.Logger
}

// DecodeInto fills into, a pointer to the adapter's Config, from s.Config
// or s.Decode; with neither it leaves into as it is (an empty section).
// Factories call it. An s.Config of another type than *into, both fields
// set, or a duration string that does not parse (the error names its key)
// is an error.
func (s Settings) DecodeInto(into any) error {
	rv := reflect.ValueOf(into)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return fmt.Errorf("DecodeInto(%T): want a non-nil pointer", into)
	}
	switch {
	case s.Config != nil && s.Decode != nil:
		return errors.New("Settings has both Config and Decode: set one")
	case s.Decode != nil:
		return decodeDurations(into, s.Decode)
	case s.Config == nil:
		return nil
	}
	want := rv.Elem().Type()
	cv := reflect.ValueOf(s.Config)
	switch {
	case cv.Type() == want:
		rv.Elem().Set(cv)
	case cv.Kind() == reflect.Pointer && cv.Type().Elem() == want:
		if cv.IsNil() {
			return fmt.Errorf("Settings.Config is a nil %s", cv.Type())
		}
		rv.Elem().Set(cv.Elem())
	default:
		return fmt.Errorf("Settings.Config has type %s, want %s (or *%s)", cv.Type(), want, want)
	}
	return nil
}

// Factory builds a provider from its settings. It must validate the config
// and credentials' presence (not their validity, which needs the network) and
// return a clear error naming the problem.
type Factory func(Settings) (CloudProvider, error)

var (
	registryMu sync.RWMutex
	registry   = map[string]Factory{}
)

// Register makes a provider factory available under id. Adapters call it from
// init. It panics if id is empty, f is nil or id is already registered.
func Register(id string, f Factory) {
	registryMu.Lock()
	defer registryMu.Unlock()
	if id == "" || f == nil {
		panic("provider: Register with empty id or nil factory")
	}
	if _, dup := registry[id]; dup {
		panic("provider: Register called twice for " + id)
	}
	registry[id] = f
}

// Build builds the provider registered under id.
func Build(id string, s Settings) (CloudProvider, error) {
	registryMu.RLock()
	f, ok := registry[id]
	registryMu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("provider: unknown provider %q (registered: %v; did you blank-import its package?)", id, IDs())
	}
	if s.Name == "" {
		s.Name = id
	}
	if s.Logger == nil {
		s.Logger = slog.New(slog.DiscardHandler)
	}
	p, err := f(s)
	if err != nil {
		return nil, fmt.Errorf("provider %s: %w", s.Name, err)
	}
	return p, nil
}

// IDs returns the registered provider ids, sorted.
func IDs() []string {
	registryMu.RLock()
	defer registryMu.RUnlock()
	ids := make([]string, 0, len(registry))
	for id := range registry {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}
