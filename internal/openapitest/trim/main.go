// Command trim cuts a vendor's OpenAPI document down to the operations an
// adapter calls, for the adapter's testdata: it keeps those operations
// (with their path-level parameters), every component they reach through
// $ref, the security schemes and the document's header fields, and drops
// everything else. The output is JSON with sorted keys, so a new copy of the
// vendor's document trims to a reviewable diff.
//
//	go run ./internal/openapitest/trim -o provider/lambda/testdata/lambda-openapi.json \
//	    openapi-1.8.3.json 'get /api/v1/instances' 'post /api/v1/instance-operations/launch'
//
// The input may be JSON or YAML.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

func main() {
	out := flag.String("o", "", "output file (default: standard output)")
	flag.Parse()
	if flag.NArg() < 2 {
		fmt.Fprintln(os.Stderr, "usage: trim [-o out.json] document.{json,yml} 'method /path'...")
		os.Exit(2)
	}
	b, err := os.ReadFile(flag.Arg(0))
	if err != nil {
		fail(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(b, &doc); err != nil { // YAML is a superset of JSON
		fail(err)
	}
	doc = normalize(doc).(map[string]any)
	trimmed, err := trim(doc, flag.Args()[1:])
	if err != nil {
		fail(err)
	}
	js, err := json.MarshalIndent(trimmed, "", "  ")
	if err != nil {
		fail(err)
	}
	js = append(js, '\n')
	if *out == "" {
		os.Stdout.Write(js)
		return
	}
	if err := os.WriteFile(*out, js, 0o644); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "trim:", err)
	os.Exit(1)
}

var methods = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}

// trim keeps the operations ops ("method /path") of doc and what they reach.
func trim(doc map[string]any, ops []string) (map[string]any, error) {
	paths, _ := doc["paths"].(map[string]any)
	kept := map[string]any{}
	for _, op := range ops {
		method, path, ok := strings.Cut(strings.TrimSpace(op), " ")
		method = strings.ToLower(method)
		item, _ := paths[path].(map[string]any)
		if !ok || item == nil || item[method] == nil {
			return nil, fmt.Errorf("no operation %q in the document", op)
		}
		k, _ := kept[path].(map[string]any)
		if k == nil {
			k = map[string]any{}
			for key, v := range item { // path-level fields: parameters, summary, servers
				if !slices.Contains(methods, key) {
					k[key] = v
				}
			}
			kept[path] = k
		}
		k[method] = item[method]
	}
	out := map[string]any{"paths": kept}
	for _, key := range []string{"openapi", "info", "servers", "security", "jsonSchemaDialect"} {
		if v, ok := doc[key]; ok {
			out[key] = v
		}
	}
	comps, _ := doc["components"].(map[string]any)
	keptComps := map[string]any{}
	if s, ok := comps["securitySchemes"]; ok {
		keptComps["securitySchemes"] = s
	}
	// Close over $ref: each kept component may refer to more.
	queue := refs(kept, nil)
	for len(queue) > 0 {
		ref := queue[0]
		queue = queue[1:]
		parts := strings.Split(strings.TrimPrefix(ref, "#/components/"), "/")
		if !strings.HasPrefix(ref, "#/components/") || len(parts) != 2 {
			return nil, fmt.Errorf("unsupported $ref %q", ref)
		}
		kind, name := parts[0], unescape(parts[1])
		src, _ := comps[kind].(map[string]any)
		if src == nil || src[name] == nil {
			return nil, fmt.Errorf("dangling $ref %q", ref)
		}
		dst, _ := keptComps[kind].(map[string]any)
		if dst == nil {
			dst = map[string]any{}
			keptComps[kind] = dst
		}
		if _, done := dst[name]; done {
			continue
		}
		dst[name] = src[name]
		queue = refs(src[name], queue)
	}
	out["components"] = keptComps
	return out, nil
}

// refs appends every $ref value found in v to acc.
func refs(v any, acc []string) []string {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if s, ok := x.(string); ok && k == "$ref" {
				acc = append(acc, s)
				continue
			}
			acc = refs(x, acc)
		}
	case []any:
		for _, x := range v {
			acc = refs(x, acc)
		}
	}
	return acc
}

// normalize turns YAML's map[any]any (non-string keys, such as a bare 200
// response code) into map[string]any.
func normalize(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			v[k] = normalize(x)
		}
		return v
	case map[any]any:
		m := make(map[string]any, len(v))
		for k, x := range v {
			m[fmt.Sprint(k)] = normalize(x)
		}
		return m
	case []any:
		for i, x := range v {
			v[i] = normalize(x)
		}
	}
	return v
}

func unescape(s string) string { return strings.NewReplacer("~1", "/", "~0", "~").Replace(s) }
