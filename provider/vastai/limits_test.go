package vastai_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/vastai"
	"github.com/org/gpuprov/provider/vastai/vastmock"
)

// TestVastCannotRestrictWhoConnects: createInstance has no field that
// limits the sources of an instance's ports (vast-ai/docs
// api-reference/openapi.yaml, PUT /api/v0/asks/{id}: image, env's "-p"
// port mappings, onstart, runtype ...), and Vast's security FAQ leaves it
// to the container and the host ("Network restrictions depend on the host
// configuration", vast-ai/docs guides/reference/faq/security.mdx).
// Capabilities says so, so the core plans no Vast offer for a request with
// source ranges, and Prepare refuses such a spec before any request rather
// than open the ports to everyone.
func TestVastCannotRestrictWhoConnects(t *testing.T) {
	e := newEnv(t, vastai.Config{})
	if e.p.Capabilities().Supports(provider.FeatureSourceRanges) {
		t.Fatal("Capabilities does not list source ranges as unsupported")
	}
	s := spec("train")
	s.SourceRanges = []string{"203.0.113.0/24"}
	o := provider.Offer{Provider: "vastai", Location: provider.Location{Region: "US", Zone: "machine-5001"}}
	_, err := e.p.Prepare(context.Background(), &o, s)
	if kindOf(t, err, provider.Unavailable); !strings.Contains(err.Error(), "203.0.113.0/24") {
		t.Fatalf("%v", err)
	}
	if calls := e.api.Calls("", ""); len(calls) != 0 {
		t.Fatalf("Prepare sent %d requests", len(calls))
	}
}

// TestALabelLongerThanVastTakesIsRefused: createInstance takes a label of
// at most 256 characters (x-input-validation label.max_length in vast-ai/docs
// api-reference/openapi/yaml/create_instance.yaml; the adapter's docs said
// 1,024, manage instance's limit for relabelling). A VM whose label would
// be longer is an invalid request before any request is sent; one of
// exactly 256 is created.
func TestALabelLongerThanVastTakesIsRefused(t *testing.T) {
	e := newEnv(t, vastai.Config{})
	vm := "train"
	fits := strings.Repeat("a", vastai.MaxLabel-len("gpuprov-"+vm+"."))
	for _, tc := range []struct {
		installation string
		ok           bool
	}{{fits, true}, {fits + "a", false}} {
		p, err := vastai.New(vastai.Config{APIKey: apiKey}, vastai.WithInstallation(tc.installation), vastai.WithHTTP(base, e.Client()))
		if err != nil {
			t.Fatal(err)
		}
		before := len(e.api.Calls(http.MethodPut, ""))
		o := e.offer(t)
		_, err = p.Prepare(context.Background(), &o, spec(vm))
		if tc.ok {
			if err != nil {
				t.Fatalf("a label of %d characters: %v", len(vastai.Label(vm, tc.installation)), err)
			}
			if _, err := p.Create(context.Background(), &o, nil, spec(vm)); err != nil {
				t.Fatalf("create with a label of 256: %v", err)
			}
			continue
		}
		if kindOf(t, err, provider.InvalidRequest); !strings.Contains(err.Error(), "257 characters") {
			t.Fatalf("%v", err)
		}
		if _, err := p.Create(context.Background(), &o, nil, spec(vm)); provider.KindOf(err) != provider.InvalidRequest {
			t.Fatalf("create: %v", err)
		}
		if n := len(e.api.Calls(http.MethodPut, "")); n != before {
			t.Fatalf("%d creates sent for a label Vast refuses", n-before)
		}
	}
}

// TestOnePrefixPerLayer: an error names the provider once. A config error
// comes through provider.Build, which prefixes "provider vastai: " (the
// factory used to add "vastai: " again); a classified answer is a
// *provider.Error, which prints "vastai: <op>: <kind>: " before the
// answer's own text.
func TestOnePrefixPerLayer(t *testing.T) {
	_, err := provider.Build(vastai.ID, provider.Settings{Config: vastai.Config{APIKey: "k", DiskGB: -1}})
	if err == nil || err.Error() != "provider vastai: config: disk_gb: -1 is negative" {
		t.Fatalf("config error %q", err)
	}
	e := newEnv(t, vastai.Config{})
	o := e.offer(t)
	e.api.Snipe(102)
	_, err = e.p.Create(context.Background(), &o, nil, spec("train"))
	if !strings.HasPrefix(err.Error(), "vastai: create: capacity: HTTP 410 no_such_ask: ") || strings.Count(err.Error(), "vastai") != 1 {
		t.Fatalf("create error %q", err)
	}
	e.api.Fail(vastmock.Fault{Method: http.MethodGet, Path: "/api/v1/instances", Lose: true, Times: 1})
	_, err = e.p.Observe(context.Background(), o.Location, "train")
	if !strings.HasPrefix(err.Error(), "vastai: observe: transient: GET /api/v1/instances/") || strings.Count(err.Error(), "vastai:") != 1 {
		t.Fatalf("observe error %q", err)
	}
}
