package gcp_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
)

// The Compute Engine v1 discovery document ships inside the
// google.golang.org/api module (compute/v1/compute-api.json). The parts
// the insert check reads are kept in testdata/, so the check runs offline
// and the same on every machine; TestDiscoveryCopyMatchesModule keeps the
// copy honest against the module the build uses, and -update-discovery
// rewrites it from there.

const (
	apiModule      = "google.golang.org/api"
	discoveryInMod = "compute/v1/compute-api.json"
	discoveryCopy  = "testdata/compute-v1-discovery.json"
)

var updateDiscovery = flag.Bool("update-discovery", false,
	"rewrite "+discoveryCopy+" from "+apiModule+"'s "+discoveryInMod)

// discoveryMethods are the methods whose requests the check reads (the
// volumes' disks and attach/detach calls: volume_test.go).
var discoveryMethods = [][2]string{{"instances", "insert"}, {"firewalls", "insert"}, {"firewalls", "update"}, {"resourcePolicies", "insert"},
	{"disks", "insert"}, {"disks", "delete"}, {"instances", "attachDisk"}, {"instances", "detachDisk"}}

// discoveryReads are the methods whose responses the adapter reads and the
// test mock answers: Plan's reservation listing, Quotas' reads, and the
// volumes' disks.get and instances.get.
var discoveryReads = [][2]string{{"reservations", "aggregatedList"}, {"regions", "get"}, {"projects", "get"},
	{"disks", "get"}, {"instances", "get"}}

// discoveryDoc is the part of a Google API Discovery document
// (https://developers.google.com/discovery/v1/reference/apis) the check
// reads.
type discoveryDoc struct {
	Revision string `json:"revision"`
	// Parameters are the system parameters every method takes (alt,
	// fields, prettyPrint, ...).
	Parameters map[string]*jsonSchema `json:"parameters"`
	Resources  map[string]struct {
		Methods map[string]*discoveryMethod `json:"methods"`
	} `json:"resources"`
	Schemas map[string]*jsonSchema `json:"schemas"`
}

type discoveryMethod struct {
	ID         string                 `json:"id"`
	HTTPMethod string                 `json:"httpMethod"`
	FlatPath   string                 `json:"flatPath"`
	Parameters map[string]*jsonSchema `json:"parameters"`
	Request    *jsonSchema            `json:"request"`
	Response   *jsonSchema            `json:"response"`
}

// jsonSchema is a discovery schema (a JSON Schema draft 3 subset).
type jsonSchema struct {
	ID                   string                 `json:"id"`
	Ref                  string                 `json:"$ref"`
	Type                 string                 `json:"type"`
	Format               string                 `json:"format"`
	Pattern              string                 `json:"pattern"`
	Enum                 []string               `json:"enum"`
	Description          string                 `json:"description"`
	ReadOnly             bool                   `json:"readOnly"`
	Deprecated           bool                   `json:"deprecated"`
	Location             string                 `json:"location"`
	Required             bool                   `json:"required"`
	Properties           map[string]*jsonSchema `json:"properties"`
	Items                *jsonSchema            `json:"items"`
	AdditionalProperties *jsonSchema            `json:"additionalProperties"`
	Annotations          struct {
		Required []string `json:"required"`
	} `json:"annotations"`
}

// method returns resource.method of the document.
func (d *discoveryDoc) method(t *testing.T, resource, name string) *discoveryMethod {
	t.Helper()
	m := d.Resources[resource].Methods[name]
	if m == nil {
		t.Fatalf("discovery document has no %s.%s", resource, name)
	}
	return m
}

// loadDiscovery reads the copy in testdata.
func loadDiscovery(t *testing.T) *discoveryDoc {
	t.Helper()
	b, err := os.ReadFile(discoveryCopy)
	if err != nil {
		t.Fatal(err)
	}
	var d discoveryDoc
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", discoveryCopy, err)
	}
	return &d
}

// trimDiscovery keeps, of a full discovery document, its identity (id,
// name, version, revision, root URL), its system parameters, the methods in
// discoveryMethods and discoveryReads, and every schema their request
// bodies (discoveryMethods) and responses (discoveryReads) reach through
// $ref, each verbatim.
func trimDiscovery(full []byte) ([]byte, error) {
	var doc struct {
		Resources map[string]struct {
			Methods map[string]json.RawMessage `json:"methods"`
		} `json:"resources"`
		Schemas map[string]json.RawMessage `json:"schemas"`
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(full, &doc); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(full, &top); err != nil {
		return nil, err
	}
	out := map[string]any{}
	for _, k := range []string{"kind", "discoveryVersion", "id", "name", "version", "revision", "title",
		"rootUrl", "servicePath", "documentationLink", "parameters"} {
		out[k] = top[k]
	}
	resources := map[string]map[string]map[string]json.RawMessage{} // resource → "methods" → method →
	schemas := map[string]json.RawMessage{}
	var todo []string
	for i, rm := range append(slices.Clone(discoveryMethods), discoveryReads...) {
		raw := doc.Resources[rm[0]].Methods[rm[1]]
		if raw == nil {
			return nil, fmt.Errorf("no method %s.%s", rm[0], rm[1])
		}
		if resources[rm[0]] == nil {
			resources[rm[0]] = map[string]map[string]json.RawMessage{"methods": {}}
		}
		resources[rm[0]]["methods"][rm[1]] = raw
		var m struct {
			Request  json.RawMessage `json:"request"`
			Response json.RawMessage `json:"response"`
		}
		if err := json.Unmarshal(raw, &m); err != nil {
			return nil, err
		}
		if i < len(discoveryMethods) {
			todo = append(todo, refsIn(m.Request)...)
		} else {
			todo = append(todo, refsIn(m.Response)...)
		}
	}
	for len(todo) > 0 {
		n := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		if _, ok := schemas[n]; ok {
			continue
		}
		raw, ok := doc.Schemas[n]
		if !ok {
			return nil, fmt.Errorf("no schema %s", n)
		}
		schemas[n] = raw
		todo = append(todo, refsIn(raw)...)
	}
	out["resources"] = resources
	out["schemas"] = schemas
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	err := enc.Encode(out)
	return b.Bytes(), err
}

// refsIn lists the "$ref" targets anywhere in raw.
func refsIn(raw json.RawMessage) []string {
	var v any
	_ = json.Unmarshal(raw, &v) // raw came out of a document that parsed
	var out []string
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if r, ok := v["$ref"].(string); ok {
				out = append(out, r)
			}
			for _, c := range v {
				walk(c)
			}
		case []any:
			for _, c := range v {
				walk(c)
			}
		}
	}
	walk(v)
	sort.Strings(out)
	return slices.Compact(out)
}

// apiModuleDir asks the go command where google.golang.org/api, at the
// version go.mod selects (replace directives and workspaces included),
// sits; "" when it cannot say offline (no go command, a cleaned module
// cache). Test binaries carry no dependency list in their build info, so
// the go command is the one that knows. GOPROXY=off keeps it from the
// network.
func apiModuleDir(t *testing.T) (dir, version string) {
	t.Helper()
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}\t{{.Version}}", apiModule)
	cmd.Env = append(os.Environ(), "GOPROXY=off")
	out, err := cmd.Output()
	if err != nil {
		t.Logf("go list -m %s: %v", apiModule, err)
		return "", ""
	}
	dir, version, _ = strings.Cut(strings.TrimSpace(string(out)), "\t")
	if dir == "" {
		return "", version
	}
	if _, err := os.Stat(filepath.Join(dir, discoveryInMod)); err != nil {
		return "", version
	}
	return dir, version
}

// The copy in testdata is exactly the trim of the discovery document in the
// google.golang.org/api version the build uses, and its README names that
// version: a module upgrade that changes the schemas fails here until the
// copy is regenerated with
//
//	go test ./provider/gcp -run TestDiscoveryCopyMatchesModule -update-discovery
func TestDiscoveryCopyMatchesModule(t *testing.T) {
	dir, version := apiModuleDir(t)
	if dir == "" {
		t.Skipf("%s %s is not in the module cache; the copy in %s is used as is", apiModule, version, discoveryCopy)
	}
	full, err := os.ReadFile(filepath.Join(dir, discoveryInMod))
	if err != nil {
		t.Fatal(err)
	}
	want, err := trimDiscovery(full)
	if err != nil {
		t.Fatal(err)
	}
	if *updateDiscovery {
		if err := os.WriteFile(discoveryCopy, want, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s from %s@%s (%d bytes)", discoveryCopy, apiModule, version, len(want))
	}
	got, err := os.ReadFile(discoveryCopy)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s differs from the trim of %s@%s/%s; rerun with -update-discovery and review the diff",
			discoveryCopy, apiModule, version, discoveryInMod)
	}
	readme, err := os.ReadFile("testdata/README.md")
	if err != nil {
		t.Fatal(err)
	}
	var rev struct {
		Revision string `json:"revision"`
	}
	_ = json.Unmarshal(full, &rev) // it was trimmed above, so it parses
	for _, s := range []string{apiModule + " " + version, "revision " + rev.Revision} {
		if !bytes.Contains(readme, []byte(s)) {
			t.Errorf("testdata/README.md does not name %q", s)
		}
	}
}
