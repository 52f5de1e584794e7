package azure_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi2"
	"github.com/getkin/kin-openapi/openapi2conv"
	"github.com/getkin/kin-openapi/openapi3"

	"github.com/org/gpuprov/internal/openapitest"
)

// The Compute REST specification's capacity reservation and usages
// operations (API version 2024-11-01, testdata/README.md), converted from
// Swagger 2.0 to OpenAPI 3 with kin-openapi's openapi2conv.
const specFile = "testdata/compute-2024-11-01-capacity.json"

var spec struct {
	once sync.Once
	file string // the OpenAPI 3 form
	doc  *openapi3.T
	err  error
}

// computeSpec returns the converted document and the path of its OpenAPI
// 3 form.
func computeSpec(t *testing.T) (*openapi3.T, string) {
	t.Helper()
	spec.once.Do(func() {
		b, err := os.ReadFile(specFile)
		if err != nil {
			spec.err = err
			return
		}
		var v2 openapi2.T
		if spec.err = json.Unmarshal(b, &v2); spec.err != nil {
			return
		}
		if spec.doc, spec.err = openapi2conv.ToV3(&v2); spec.err != nil {
			return
		}
		out, err := json.Marshal(spec.doc)
		if err != nil {
			spec.err = err
			return
		}
		// One file for every run (openapitest loads a file), written
		// whole and renamed into place, since test binaries may run at
		// once.
		spec.file = filepath.Join(os.TempDir(), "gpuprov-azure-compute-2024-11-01-capacity.json")
		tmp, err := os.CreateTemp(os.TempDir(), "gpuprov-azure-spec-*")
		if err != nil {
			spec.err = err
			return
		}
		_, werr := tmp.Write(out)
		if cerr := tmp.Close(); werr == nil {
			werr = cerr
		}
		if werr == nil {
			werr = os.Rename(tmp.Name(), spec.file)
		}
		if werr != nil {
			os.Remove(tmp.Name())
		}
		spec.err = werr
	})
	if spec.err != nil {
		t.Fatalf("load %s: %v", specFile, spec.err)
	}
	return spec.doc, spec.file
}

// checked wraps next so that every request to, and every answer from, the
// four operations of the specification is checked against it: by
// openapitest (operation, parameters, required fields, types, enums), and
// by strictness (no property the definitions do not declare). Only for
// tests whose every call is one of those operations.
func checked(t *testing.T, next http.RoundTripper) http.RoundTripper {
	doc, file := computeSpec(t)
	return &strict{t: t, doc: doc, next: openapitest.Load(t, file, endpoint).Transport(t, next)}
}

type strict struct {
	t    *testing.T
	doc  *openapi3.T
	next http.RoundTripper
}

func (s *strict) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := s.next.RoundTrip(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		return resp, err
	}
	body, rerr := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if rerr != nil {
		return resp, nil
	}
	if def := resultOf(req.URL.Path); def != "" {
		var v any
		if err := json.Unmarshal(body, &v); err != nil {
			s.t.Errorf("%s: answer is not JSON: %v", req.URL.Path, err)
		}
		for _, p := range undeclared(s.doc.Components.Schemas[def].Value, v, def) {
			s.t.Errorf("%s %s: the answer carries %s, which %s does not declare", req.Method, req.URL.Path, p, def)
		}
	}
	return resp, nil
}

// resultOf is the definition of the answer to a GET of path.
func resultOf(path string) string {
	switch {
	case strings.HasSuffix(path, "/capacityReservations"):
		return "CapacityReservationListResult"
	case strings.HasSuffix(path, "/capacityReservationGroups"):
		return "CapacityReservationGroupListResult"
	case strings.Contains(path, "/capacityReservationGroups/"):
		return "CapacityReservationGroup"
	case strings.HasSuffix(path, "/usages"):
		return "ListUsagesResult"
	}
	return ""
}

// undeclared lists the properties of v (at path) that schema does not
// declare, through allOf, properties and items. Swagger 2.0 definitions
// allow extra properties; an answer or body with a misspelled field would
// pass the schema's own validation.
func undeclared(schema *openapi3.Schema, v any, path string) []string {
	if schema == nil {
		return nil
	}
	var out []string
	switch x := v.(type) {
	case map[string]any:
		props := declared(schema)
		if len(props) == 0 {
			return nil // a map (tags) or a free object
		}
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			sub, ok := props[k]
			if !ok {
				out = append(out, path+"."+k)
				continue
			}
			out = append(out, undeclared(sub, x[k], path+"."+k)...)
		}
	case []any:
		items := schema.Items
		for _, a := range schema.AllOf {
			if items == nil && a.Value != nil {
				items = a.Value.Items
			}
		}
		if items != nil {
			for _, e := range x {
				out = append(out, undeclared(items.Value, e, path+"[]")...)
			}
		}
	}
	return out
}

func declared(schema *openapi3.Schema) map[string]*openapi3.Schema {
	props := map[string]*openapi3.Schema{}
	for k, p := range schema.Properties {
		props[k] = p.Value
	}
	for _, a := range schema.AllOf {
		if a.Value != nil {
			for k, p := range declared(a.Value) {
				props[k] = p
			}
		}
	}
	return props
}

// The checks can fail: the converted specification refuses an answer
// with a misspelled utilization field, one whose usage lacks its required
// limit, and a request with an $expand the operation does not list.
func TestSpecChecksFail(t *testing.T) {
	doc, file := computeSpec(t)
	group := map[string]any{"id": "/subscriptions/s/resourceGroups/g/providers/Microsoft.Compute/capacityReservationGroups/crg",
		"location": "eastus2", "properties": map[string]any{"instanceView": map[string]any{"capacityReservations": []any{
			map[string]any{"name": "r1", "utilizationInfo": map[string]any{"virtualMachinesAlocated": []any{}}}}}}}
	got := undeclared(doc.Components.Schemas["CapacityReservationGroup"].Value, group, "CapacityReservationGroup")
	if !slices.Equal(got, []string{"CapacityReservationGroup.properties.instanceView.capacityReservations[].utilizationInfo.virtualMachinesAlocated"}) {
		t.Fatalf("misspelled field: %v", got)
	}
	group["properties"].(map[string]any)["instanceView"].(map[string]any)["capacityReservations"].([]any)[0].(map[string]any)["utilizationInfo"] =
		map[string]any{"virtualMachinesAllocated": []any{map[string]any{"id": "vm"}}, "currentCapacity": 1}
	if got := undeclared(doc.Components.Schemas["CapacityReservationGroup"].Value, group, "g"); len(got) != 0 {
		t.Fatalf("a correct group: %v", got)
	}

	d := openapitest.Load(t, file, endpoint)
	usages := endpoint + "/subscriptions/" + subscription + "/providers/Microsoft.Compute/locations/eastus2/usages?api-version=2024-11-01"
	req, _ := http.NewRequest(http.MethodGet, usages, nil)
	req.Header.Set("Authorization", "Bearer x")
	if _, err := d.CheckRequest(req); err != nil {
		t.Fatalf("a correct usages request: %v", err)
	}
	bad := `{"value":[{"unit":"Count","currentValue":1,"name":{"value":"cores"}}]}`
	if err := d.CheckResponse(req, openapitest.JSONResponse(200, []byte(bad))); err == nil {
		t.Fatal("a usage without its limit passed")
	}
	get, _ := http.NewRequest(http.MethodGet, endpoint+"/subscriptions/"+subscription+
		"/resourceGroups/g/providers/Microsoft.Compute/capacityReservationGroups/crg?api-version=2024-11-01&$expand=virtualMachines", nil)
	if _, err := d.CheckRequest(get); err == nil {
		t.Fatal("a group GET with an $expand outside the enum passed")
	}
}
