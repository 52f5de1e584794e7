package restadapter_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/org/gpuprov/internal/rest"
	"github.com/org/gpuprov/internal/restadapter"
)

func TestInitChecksTheKeyThenTheBaseURL(t *testing.T) {
	for _, tc := range []struct {
		name string
		e    restadapter.Endpoint
		want string // "" for no error
	}{
		{"no key", restadapter.Endpoint{EnvAPIKey: "X_API_KEY", BaseURL: "ftp://x"},
			"x: api_key is not set (config key api_key or the X_API_KEY environment variable)"},
		{"not http", restadapter.Endpoint{APIKey: "k", BaseURL: "ftp://x"}, `x: base_url "ftp://x" is not an http(s) URL`},
		{"bad default", restadapter.Endpoint{APIKey: "k", DefaultBaseURL: "api.example"}, `x: base_url "api.example" is not an http(s) URL`},
		{"the default", restadapter.Endpoint{APIKey: "k", DefaultBaseURL: "https://api.example/v1"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b restadapter.Base
			err := b.Init("x", tc.e)
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tc.want {
				t.Fatalf("error %q, want %q", got, tc.want)
			}
			if b.Name != "x" || b.Log == nil {
				t.Fatalf("defaults: name %q, log %v", b.Name, b.Log)
			}
			if (err == nil) != (b.API != nil) {
				t.Fatalf("API %v after error %v", b.API, err)
			}
		})
	}
}

func TestInitKeepsWhatTheOptionsSet(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	b := restadapter.Base{Name: "x-eu", Installation: "inst", Log: log}
	if err := b.Init("x", restadapter.Endpoint{APIKey: "k", DefaultBaseURL: "https://api.example"}); err != nil {
		t.Fatal(err)
	}
	if b.Name != "x-eu" || b.Installation != "inst" || b.Log != log {
		t.Fatalf("%+v", b)
	}
}

// TestDoSendsThroughHTTPAndLogsNoSecret: Do sends through the configured
// client to the base URL (BaseURL before the default) and logs op, method,
// path and status at debug level, never the key.
func TestDoSendsThroughHTTPAndLogsNoSecret(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/things" || r.Header.Get("Authorization") != "Bearer secret-key" {
			http.Error(w, "wrong request", http.StatusTeapot)
			return
		}
		w.WriteHeader(http.StatusNotFound)
	}))
	defer srv.Close()
	var logs bytes.Buffer
	b := restadapter.Base{HTTP: srv.Client(), Log: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	if err := b.Init("x", restadapter.Endpoint{APIKey: "secret-key", BaseURL: srv.URL + "/v1", DefaultBaseURL: "https://unused.example"}); err != nil {
		t.Fatal(err)
	}
	err := b.Do(context.Background(), "plan", rest.Request{Method: http.MethodGet, Path: "/things"})
	if rest.StatusOf(err) != http.StatusNotFound {
		t.Fatalf("Do: %v, want the 404 as a *rest.Error", err)
	}
	line := logs.String()
	for _, want := range []string{"msg=\"x: request\"", "provider=x", "op=plan", "method=GET", "path=/things", "status=404", "ok=false"} {
		if !strings.Contains(line, want) {
			t.Errorf("log %q lacks %s", line, want)
		}
	}
	if strings.Contains(line, "secret-key") {
		t.Errorf("the key is in the log: %s", line)
	}
}
