package rest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/org/gpuprov/internal/redact"
	"github.com/org/gpuprov/internal/rest"
	"github.com/org/gpuprov/internal/rest/resttest"
)

// leakyKey has characters that URL-encode, so that the encoded forms differ
// from the plain one.
const leakyKey = "sk_live+gpuprov/0123456789=abcdef"

func echoBody(status int, echoed string) []byte {
	b, _ := json.Marshal(map[string]any{"status": status, "error": echoed})
	return b
}

// TestErrorsNeverCarryTheToken: a gateway echoes the Authorization header
// in 401 and 500 bodies and in a header. Whatever an adapter reads of the
// *rest.Error (its text, Body, Header) holds no form of the token, and the
// echo is still there, masked, so the answer stays readable.
func TestErrorsNeverCarryTheToken(t *testing.T) {
	srv := resttest.Echo(t, echoBody)
	c := rest.New(srv.URL+"/v1", leakyKey, srv.Client(), 5*time.Second)
	for _, status := range []int{http.StatusUnauthorized, http.StatusInternalServerError} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			srv.SetStatus(status)
			_, err := c.Do(context.Background(), rest.Request{Method: http.MethodPost, Path: "/things", Body: map[string]string{"a": "b"}})
			var e *rest.Error
			if !errors.As(err, &e) || e.Status != status {
				t.Fatalf("err %v, want a %d *rest.Error", err, status)
			}
			var hdr strings.Builder
			if err := e.Header.Write(&hdr); err != nil {
				t.Fatal(err)
			}
			for what, text := range map[string]string{"Error()": err.Error(), "Body": string(e.Body), "Header": hdr.String()} {
				if f := resttest.Leaks(text, leakyKey); len(f) > 0 {
					t.Errorf("%s holds the key as %q:\n%s", what, f, text)
				}
				if !strings.Contains(text, redact.Mask) {
					t.Errorf("%s does not show the masked echo:\n%s", what, text)
				}
			}
		})
	}
}

// TestTransportErrorNeverCarriesTheToken: a transport (a proxy refusing the
// request) whose error repeats the Authorization header.
func TestTransportErrorNeverCarriesTheToken(t *testing.T) {
	hc := &http.Client{Transport: roundTrip(func(r *http.Request) (*http.Response, error) {
		return nil, fmt.Errorf("proxy refused request with %s", resttest.Echoed(r))
	})}
	c := rest.New("https://api.example/v1", leakyKey, hc, time.Second)
	_, err := c.Do(context.Background(), rest.Request{Method: http.MethodGet, Path: "/x"})
	if err == nil || rest.StatusOf(err) != 0 || !strings.Contains(err.Error(), "proxy refused") {
		t.Fatalf("err %v, want the transport error", err)
	}
	if f := resttest.Leaks(err.Error(), leakyKey); len(f) > 0 {
		t.Fatalf("the transport error holds the key as %q: %v", f, err)
	}
}

type roundTrip func(*http.Request) (*http.Response, error)

func (f roundTrip) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
