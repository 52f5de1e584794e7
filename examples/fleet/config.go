package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/pelletier/go-toml/v2"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/provider"
)

// providerFile is the part of examples/gpuprov's TOML config the fleet
// reads: the journal URL and one table per provider account,
//
//	journal = "postgres://gpuprov@db.internal/gpuprov"
//
//	[sim-a]
//	type     = "sim"                       # the adapter; default: the table name
//	endpoint = "http://127.0.0.1:7070"
//	api_key  = "simkey-..."
//
// (a minimal copy of that CLI's parser: an example cannot import a main
// package). Top-level keys other than journal and default_regions are
// errors.
type providerFile struct {
	Journal   string
	Providers []providerTable
}

// providerTable is one [name] table.
type providerTable struct {
	Name, Type string
	body       map[string]any
}

// loadProviderFile reads path.
func loadProviderFile(path string) (*providerFile, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return parseProviderFile(path, b)
}

func parseProviderFile(path string, b []byte) (*providerFile, error) {
	var doc map[string]any
	if err := toml.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	pf := &providerFile{}
	var names []string
	for k, v := range doc {
		switch t := v.(type) {
		case map[string]any:
			names = append(names, k)
		case string:
			if k != "journal" {
				return nil, fmt.Errorf("config %s: unknown key %q", path, k)
			}
			pf.Journal = t
		default:
			if k != "default_regions" {
				return nil, fmt.Errorf("config %s: unknown key %q", path, k)
			}
		}
	}
	slices.Sort(names)
	for _, name := range names {
		body := doc[name].(map[string]any)
		typ := name
		if t, ok := body["type"]; ok {
			s, ok := t.(string)
			if !ok || s == "" {
				return nil, fmt.Errorf("config %s: [%s] type: want an adapter name (one of %s)", path, name, strings.Join(provider.IDs(), ", "))
			}
			typ = s
			delete(body, "type")
		}
		if !slices.Contains(provider.IDs(), typ) {
			return nil, fmt.Errorf("config %s: [%s]: %q is not a known provider adapter (known: %s)", path, name, typ, strings.Join(provider.IDs(), ", "))
		}
		pf.Providers = append(pf.Providers, providerTable{Name: name, Type: typ, body: body})
	}
	return pf, nil
}

// options returns the Provisioner options that build every provider of
// the file through the registry.
func (pf *providerFile) options() []gpuprov.Option {
	var opts []gpuprov.Option
	for _, pt := range pf.Providers {
		opts = append(opts, gpuprov.WithRegistryProvider(pt.Type, provider.Settings{Name: pt.Name, Decode: pt.decode}))
	}
	return opts
}

// decode fills an adapter's config struct from the table, strictly: an
// unknown key is an error naming it.
func (pt providerTable) decode(into any) error {
	b, err := toml.Marshal(pt.body)
	if err != nil {
		return fmt.Errorf("[%s]: %w", pt.Name, err)
	}
	dec := toml.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	err = dec.Decode(into)
	var strict *toml.StrictMissingError
	if errors.As(err, &strict) {
		var keys []string
		for _, e := range strict.Errors {
			keys = append(keys, strings.Join(e.Key(), "."))
		}
		return fmt.Errorf("[%s]: unknown keys: %s", pt.Name, strings.Join(keys, ", "))
	}
	if err != nil {
		return fmt.Errorf("[%s]: %w", pt.Name, err)
	}
	return nil
}
