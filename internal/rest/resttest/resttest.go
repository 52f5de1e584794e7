// Package resttest helps the tests of internal/rest and of the adapters
// built on it. It proves that an API key never leaves through an error: it
// serves an HTTP API that echoes the request's credentials back in its
// error answers, as some gateways and proxies do, and lists the forms a key
// can be found in. And it is the harness an adapter's tests share (Env, in
// env.go): the mock's transport behind the vendor's OpenAPI checks, a
// logger that must never see the key, and Offer, Launch and Kind for the
// steps every adapter test takes.
//
//	srv := resttest.Echo(t, func(status int, echoed string) []byte {
//		return []byte(`{"error":{"code":"global/unknown","message":` + strconv.Quote(echoed) + `}}`)
//	})
//	srv.SetStatus(http.StatusUnauthorized)
//	... point the adapter at srv.URL, call it, then:
//	if f := resttest.Leaks(err.Error(), key); len(f) > 0 { t.Fatal(f) }
package resttest

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
)

// Forms returns the forms key travels in that an echoing server or a log
// line could carry: as typed, URL-encoded (query and path), and
// base64-encoded alone and as HTTP Basic credentials ("key:" and ":key"),
// padded, unpadded and URL-safe. It is written apart from internal/redact
// on purpose, so that a test does not check the masking with itself.
func Forms(key string) []string {
	out := []string{key, url.QueryEscape(key), url.PathEscape(key)}
	for _, s := range []string{key, key + ":", ":" + key} {
		for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
			out = append(out, enc.EncodeToString([]byte(s)))
		}
	}
	return out
}

// Leaks returns the forms of key found in text (none: text is clean).
func Leaks(text, key string) []string {
	var found []string
	for _, f := range Forms(key) {
		if strings.Contains(text, f) {
			found = append(found, f)
		}
	}
	return found
}

// Echoed is what an echoing gateway says back about r's credentials: the
// Authorization header as received, the bearer token as Basic credentials
// in base64 and URL-encoded.
func Echoed(r *http.Request) string {
	auth := r.Header.Get("Authorization")
	token := strings.TrimPrefix(auth, "Bearer ")
	return fmt.Sprintf("rejected Authorization: %s (basic %s; token=%s; path-escaped %s)", auth,
		base64.StdEncoding.EncodeToString([]byte(token+":")), url.QueryEscape(token), url.PathEscape(token))
}

// EchoHeader is the header in which an Echo answer repeats the
// Authorization header.
const EchoHeader = "X-Echo-Authorization"

// Server is an API whose every answer is an error that echoes the request's
// credentials: Status (500 until SetStatus), the body its Body function
// makes of the status and Echoed(r), and the Authorization header repeated
// in EchoHeader. Pass, when set, may answer a request itself instead (the
// calls that must succeed to reach the one under test, a catalog read
// before a create); it returns false to let the echo answer.
type Server struct {
	*httptest.Server
	body func(status int, echoed string) []byte

	mu     sync.Mutex
	status int
	pass   func(w http.ResponseWriter, r *http.Request) bool
}

// Echo starts a Server, closed at the end of t. body renders the vendor's
// error shape around the echoed text.
func Echo(t testing.TB, body func(status int, echoed string) []byte) *Server {
	s := &Server{body: body, status: http.StatusInternalServerError}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

// SetStatus sets the status of the echoing answers.
func (s *Server) SetStatus(status int) { s.mu.Lock(); s.status = status; s.mu.Unlock() }

// Pass sets the function that may answer a request before the echo does.
func (s *Server) Pass(f func(w http.ResponseWriter, r *http.Request) bool) {
	s.mu.Lock()
	s.pass = f
	s.mu.Unlock()
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	status, pass := s.status, s.pass
	s.mu.Unlock()
	if pass != nil && pass(w, r) {
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set(EchoHeader, r.Header.Get("Authorization"))
	w.WriteHeader(status)
	_, _ = w.Write(s.body(status, Echoed(r)))
}

// NoLeak fails t for each call that returns nil, or an error whose text
// holds a form of key. With echoed set it also fails a call whose error
// does not show the masked echo ("[REDACTED]"): the proof that the echoing
// answer reached the text and was masked rather than dropped.
func NoLeak(t testing.TB, key string, echoed bool, calls map[string]func() error) {
	t.Helper()
	for name, call := range calls {
		err := call()
		if err == nil {
			t.Errorf("%s: no error from the echoing server", name)
			continue
		}
		if f := Leaks(err.Error(), key); len(f) > 0 {
			t.Errorf("%s: the error holds the key as %q: %v", name, f, err)
		}
		if echoed && !strings.Contains(err.Error(), "[REDACTED]") {
			t.Errorf("%s: the error does not show the masked echo: %v", name, err)
		}
	}
}

// EchoResponse is the answer an echoing gateway gives r: status, the body
// body makes of it and Echoed(r), and the Authorization header repeated in
// EchoHeader. For tests that route only some requests of an adapter to the
// echo through their own http.RoundTripper.
func EchoResponse(r *http.Request, status int, body func(status int, echoed string) []byte) *http.Response {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set(EchoHeader, r.Header.Get("Authorization"))
	b := body(status, Echoed(r))
	return &http.Response{StatusCode: status, Status: fmt.Sprintf("%d %s", status, http.StatusText(status)), Header: h,
		Body: io.NopCloser(bytes.NewReader(b)), ContentLength: int64(len(b)), Request: r, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}
}
