package provider

import (
	"fmt"
	"log/slog"
	"sort"
	"sync"
)

// Settings is what a Factory gets to build a provider.
type Settings struct {
	// Name is the provider id to report from Name(); it defaults to the
	// registered id. Two accounts of one cloud are two names.
	Name string
	// Installation is the journal's installation id: part of every
	// resource's identity and of every Observe and List filter.
	Installation string
	// Decode fills the adapter's config struct from its config section
	// (for example the [aws] table of the CLI's TOML file). It must report
	// unknown keys as an error naming them. Nil means an empty section.
	Decode func(into any) error
	// Logger receives the adapter's structured logs; never secrets.
	Logger *slog.Logger
}

// DecodeInto calls s.Decode when it is set.
func (s Settings) DecodeInto(into any) error {
	if s.Decode == nil {
		return nil
	}
	return s.Decode(into)
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
