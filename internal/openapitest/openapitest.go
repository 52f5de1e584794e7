// Package openapitest checks a test's HTTP traffic against a vendor's
// OpenAPI document (3.0 or 3.1), so that an adapter and the mock it is
// tested with cannot share a misreading of the vendor's API: every request
// the adapter sends must be one the document accepts (operation, parameters,
// required fields, types, enums, credentials scheme), and every answer the
// mock serves must be one the document allows for that operation (a
// documented status, a body of its schema).
//
// Wrap the transport the mock serves through:
//
//	doc := openapitest.Load(t, "testdata/openapi.json", "https://lambda.test")
//	mt := httpmock.NewMockTransport()
//	api.Register(mt, "https://lambda.test/api/v1")
//	client := &http.Client{Transport: doc.Transport(t, mt)}
//
// Each violation fails the test with t.Errorf, naming the operation. The
// checks are those of github.com/getkin/kin-openapi's openapi3filter, which
// validates OpenAPI 3.1 schemas as JSON Schema 2020-12 (type arrays with
// "null", const, prefixItems).
package openapitest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
)

// Doc is a vendor's OpenAPI document loaded for checking traffic, with the
// operations and answers seen so far. Its methods are safe for concurrent
// use.
type Doc struct {
	*loaded
	undocumented map[int]string
	mu           sync.Mutex
	seen         map[string]bool // "GET /api/v1/instances 200"
}

type loaded struct {
	doc    *openapi3.T
	router routers.Router
}

// Option changes what a Doc accepts.
type Option func(*Doc)

// UndocumentedStatus accepts answers with status code, which the document
// lists for no operation though the vendor answers it (a rate limit, a
// server error), without checking their body. why says where the vendor
// answers it; keep it next to the call so a reader can check it.
func UndocumentedStatus(code int, why string) Option {
	return func(d *Doc) { d.undocumented[code] = why }
}

var (
	cacheMu sync.Mutex
	cache   = map[string]*loaded{}
)

// Load reads the OpenAPI document in file (JSON or YAML), validates it, and
// serves its paths at server (scheme and host, such as
// "https://lambda.test") instead of the document's own servers. The parsed
// document is shared by every Load of the same file and server in the test
// binary.
func Load(tb testing.TB, file, server string, opts ...Option) *Doc {
	tb.Helper()
	l, err := load(file, server)
	if err != nil {
		tb.Fatalf("openapitest: %v", err)
	}
	d := &Doc{loaded: l, undocumented: map[int]string{}, seen: map[string]bool{}}
	for _, o := range opts {
		o(d)
	}
	return d
}

func load(file, server string) (*loaded, error) {
	cacheMu.Lock()
	defer cacheMu.Unlock()
	key := file + "\x00" + server
	if l, ok := cache[key]; ok {
		return l, nil
	}
	doc, err := openapi3.NewLoader().LoadFromFile(file)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", file, err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, fmt.Errorf("%s is not a valid OpenAPI document: %w", file, err)
	}
	doc.Servers = openapi3.Servers{{URL: strings.TrimRight(server, "/")}}
	router, err := legacy.NewRouter(doc)
	if err != nil {
		return nil, fmt.Errorf("route %s: %w", file, err)
	}
	l := &loaded{doc: doc, router: router}
	cache[key] = l
	return l, nil
}

// Operations returns the document's operations as "METHOD /path", sorted.
func (d *Doc) Operations() []string {
	var out []string
	for path, item := range d.doc.Paths.Map() {
		for method := range item.Operations() {
			out = append(out, method+" "+path)
		}
	}
	slices.Sort(out)
	return out
}

// Seen returns the answers that passed through the Doc's transports, as
// "METHOD /path STATUS" with the document's path template, sorted.
func (d *Doc) Seen() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]string, 0, len(d.seen))
	for k := range d.seen {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Unexercised returns the document's operations that no answer has passed
// through the Doc's transports for.
func (d *Doc) Unexercised() []string {
	seen := d.Seen()
	var out []string
	for _, op := range d.Operations() {
		if !slices.ContainsFunc(seen, func(s string) bool { return strings.HasPrefix(s, op+" ") }) {
			out = append(out, op)
		}
	}
	return out
}

// Transport returns a RoundTripper that sends each request through next and
// fails tb (Errorf) for every request the document does not accept and
// every answer it does not allow.
func (d *Doc) Transport(tb testing.TB, next http.RoundTripper) http.RoundTripper {
	return &transport{tb: tb, doc: d, next: next}
}

type transport struct {
	tb   testing.TB
	doc  *Doc
	next http.RoundTripper
}

func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	in, err := t.doc.CheckRequest(req)
	if err != nil {
		t.tb.Errorf("openapitest: %s %s: the request does not match the vendor's schema: %v", req.Method, req.URL.Path, err)
	}
	resp, rerr := t.next.RoundTrip(req)
	if rerr != nil || in == nil {
		return resp, rerr
	}
	if err := t.doc.checkResponse(in, resp); err != nil {
		t.tb.Errorf("openapitest: %s %s: the %d answer does not match the vendor's schema: %v", req.Method, req.URL.Path, resp.StatusCode, err)
	}
	return resp, nil
}

// ErrNoOperation is returned for a request whose method and path name no
// operation of the document.
var ErrNoOperation = errors.New("no operation of the document matches")

// CheckRequest checks req against the document and returns the input
// CheckResponse needs. It reads req's body and puts it back.
func (d *Doc) CheckRequest(req *http.Request) (*openapi3filter.RequestValidationInput, error) {
	route, params, err := d.router.FindRoute(req)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoOperation, err)
	}
	body, err := readBody(&req.Body)
	if err != nil {
		return nil, err
	}
	in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route,
		Options: &openapi3filter.Options{MultiError: true, AuthenticationFunc: authenticate, SkipSettingDefaults: true}}
	err = openapi3filter.ValidateRequest(req.Context(), in)
	req.Body = io.NopCloser(bytes.NewReader(body)) // ValidateRequest consumed it
	return in, shorten(err)
}

// CheckResponse checks the answer resp to req against the document. It
// reads resp's body and puts it back.
func (d *Doc) CheckResponse(req *http.Request, resp *http.Response) error {
	route, params, err := d.router.FindRoute(req)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrNoOperation, err)
	}
	in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route}
	return d.checkResponse(in, resp)
}

func (d *Doc) checkResponse(in *openapi3filter.RequestValidationInput, resp *http.Response) error {
	body, err := readBody(&resp.Body)
	if err != nil {
		return err
	}
	op := in.Route.Method + " " + in.Route.Path
	documented := in.Route.Operation.Responses.Status(resp.StatusCode) != nil || in.Route.Operation.Responses.Default() != nil
	if _, ok := d.undocumented[resp.StatusCode]; ok && !documented {
		d.saw(op, resp.StatusCode)
		return nil
	}
	err = openapi3filter.ValidateResponse(in.Request.Context(), &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in, Status: resp.StatusCode, Header: resp.Header,
		Body:    io.NopCloser(bytes.NewReader(body)),
		Options: &openapi3filter.Options{MultiError: true, IncludeResponseStatus: true}})
	if err == nil {
		d.saw(op, resp.StatusCode)
	}
	return shorten(err)
}

func (d *Doc) saw(op string, status int) {
	d.mu.Lock()
	d.seen[fmt.Sprintf("%s %d", op, status)] = true
	d.mu.Unlock()
}

func readBody(b *io.ReadCloser) ([]byte, error) {
	if *b == nil || *b == http.NoBody {
		return nil, nil
	}
	body, err := io.ReadAll(*b)
	(*b).Close()
	*b = io.NopCloser(bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("read body: %w", err)
	}
	return body, nil
}

// authenticate accepts a request that carries the credentials in the form
// the security scheme names (an Authorization header for HTTP bearer and
// basic, the named header, query parameter or cookie for an API key). It
// does not judge their value: the mock does.
func authenticate(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	s, r := in.SecurityScheme, in.RequestValidationInput.Request
	switch {
	case s.Type == "http" && strings.EqualFold(s.Scheme, "bearer"):
		if !strings.HasPrefix(r.Header.Get("Authorization"), "Bearer ") {
			return in.NewError(errors.New("no Authorization: Bearer header"))
		}
	case s.Type == "http" && strings.EqualFold(s.Scheme, "basic"):
		if !strings.HasPrefix(r.Header.Get("Authorization"), "Basic ") {
			return in.NewError(errors.New("no Authorization: Basic header"))
		}
	case s.Type == "apiKey" && s.In == "header" && r.Header.Get(s.Name) == "",
		s.Type == "apiKey" && s.In == "query" && !r.URL.Query().Has(s.Name):
		return in.NewError(fmt.Errorf("no %s %s", s.In, s.Name))
	case s.Type == "apiKey" && s.In == "cookie":
		if _, err := r.Cookie(s.Name); err != nil {
			return in.NewError(fmt.Errorf("no cookie %s", s.Name))
		}
	}
	return nil
}

// shorten keeps an error's text to a readable length: a schema error may
// quote the whole value it rejects. A long error loses its chain.
func shorten(err error) error {
	const limit = 2000
	if err == nil || len(err.Error()) <= limit {
		return err
	}
	return fmt.Errorf("%s … (cut at %d bytes)", err.Error()[:limit], limit)
}

// JSONResponse is an answer with status and a JSON body, for CheckResponse.
func JSONResponse(status int, body []byte) *http.Response {
	return &http.Response{StatusCode: status, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(bytes.NewReader(body)), ContentLength: int64(len(body))}
}

// Edit decodes the JSON object body, lets edit change it, and encodes it
// again: a way to derive a wrong answer from a right one.
func Edit(tb testing.TB, body []byte, edit func(obj map[string]any)) []byte {
	tb.Helper()
	var obj map[string]any
	if err := json.Unmarshal(body, &obj); err != nil {
		tb.Fatalf("openapitest: edit %q: %v", body, err)
	}
	edit(obj)
	out, err := json.Marshal(obj)
	if err != nil {
		tb.Fatal(err)
	}
	return out
}
