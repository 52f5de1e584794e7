package openapitest_test

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/org/gpuprov/internal/openapitest"
)

// A two-operation document: POST /things takes {name (required), size
// (integer)} and answers 201 with {id (string), state (enum)}; GET
// /things/{id} answers 200 with the same shape or 404.
const doc = `{
  "openapi": "3.0.3",
  "info": {"title": "things", "version": "1"},
  "servers": [{"url": "https://vendor.example/api"}],
  "paths": {
    "/things": {"post": {
      "requestBody": {"required": true, "content": {"application/json": {"schema": {
        "type": "object", "required": ["name"],
        "properties": {"name": {"type": "string"}, "size": {"type": "integer"}}}}}},
      "responses": {"201": {"description": "made", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Thing"}}}}}}},
    "/things/{id}": {"get": {
      "parameters": [{"name": "id", "in": "path", "required": true, "schema": {"type": "string"}}],
      "responses": {
        "200": {"description": "the thing", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Thing"}}}},
        "404": {"description": "no such thing"}}}}
  },
  "components": {"schemas": {"Thing": {"type": "object", "required": ["id", "state"],
    "properties": {"id": {"type": "string"}, "state": {"type": "string", "enum": ["running", "stopped"]}}}}}
}`

// recorder is a testing.TB that keeps what the transport reports instead of
// failing the test.
type recorder struct {
	testing.TB
	mu   sync.Mutex
	errs []string
}

func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// answer is a mock that serves one fixed answer.
type answer struct {
	status int
	body   string
}

func (a answer) RoundTrip(req *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: a.status, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(strings.NewReader(a.body)), Request: req}, nil
}

// TestTransportFailsTheTestOnWhatTheDocumentRefuses: traffic through the
// transport fails the test (Errorf) for a request the document does not
// accept and for an answer it does not allow, and passes what it does; an
// undocumented status is accepted only when declared.
func TestTransportFailsTheTestOnWhatTheDocumentRefuses(t *testing.T) {
	file := filepath.Join(t.TempDir(), "openapi.json")
	if err := os.WriteFile(file, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	const server = "https://vendor.test"
	d := openapitest.Load(t, file, server, openapitest.UndocumentedStatus(http.StatusTooManyRequests, "rate limits"))
	for _, tc := range []struct {
		name   string
		method string
		path   string
		body   string
		answer answer
		want   string // "" : no error
	}{
		{"good create", "POST", "/things", `{"name":"a","size":3}`, answer{201, `{"id":"t-1","state":"running"}`}, ""},
		{"good get", "GET", "/things/t-1", "", answer{200, `{"id":"t-1","state":"stopped"}`}, ""},
		{"documented 404", "GET", "/things/t-9", "", answer{404, ``}, ""},
		{"declared 429", "GET", "/things/t-1", "", answer{429, `{"message":"slow down"}`}, ""},
		{"request lacks a required field", "POST", "/things", `{"size":3}`, answer{201, `{"id":"t-1","state":"running"}`}, "the request does not match"},
		{"request field of the wrong type", "POST", "/things", `{"name":"a","size":"big"}`, answer{201, `{"id":"t-1","state":"running"}`}, "the request does not match"},
		{"no such operation", "DELETE", "/things/t-1", "", answer{204, ``}, "the request does not match"},
		{"answer field renamed", "GET", "/things/t-1", "", answer{200, `{"thing_id":"t-1","state":"running"}`}, "the 200 answer does not match"},
		{"answer outside the enum", "GET", "/things/t-1", "", answer{200, `{"id":"t-1","state":"booting"}`}, "the 200 answer does not match"},
		{"undocumented status", "GET", "/things/t-1", "", answer{500, `{}`}, "the 500 answer does not match"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{TB: t}
			client := &http.Client{Transport: d.Transport(rec, tc.answer)}
			req, err := http.NewRequest(tc.method, server+tc.path, strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			if tc.body != "" {
				req.Header.Set("Content-Type", "application/json")
			}
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			switch {
			case tc.want == "" && len(rec.errs) > 0:
				t.Fatalf("a valid exchange failed the test: %v", rec.errs)
			case tc.want != "" && (len(rec.errs) == 0 || !strings.Contains(strings.Join(rec.errs, "\n"), tc.want)):
				t.Fatalf("errors %v; want one saying %q", rec.errs, tc.want)
			}
		})
	}
}
