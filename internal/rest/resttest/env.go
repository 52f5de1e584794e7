package resttest

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/jarcoal/httpmock"

	"github.com/org/gpuprov/internal/openapitest"
	"github.com/org/gpuprov/provider"
)

// Env is the harness a REST adapter's tests build around its mock (a fake
// on internal/rest/restmock): the httpmock transport the mock registers
// on, the vendor's OpenAPI document checking every request and answer that
// passes through RT, and a debug logger for the adapter whose output must
// never hold the API key. An adapter's test env embeds it beside its mock
// and provider:
//
//	e := &env{Env: resttest.NewEnv(t, apiKey, vendorSchema(t)), api: runpodmock.New(apiKey)}
//	e.api.Register(e.MT, base)
//	e.p, err = runpod.New(cfg, runpod.WithLogger(e.Log), runpod.WithHTTP(base, e.Client()))
type Env struct {
	MT   *httpmock.MockTransport
	Doc  *openapitest.Doc  // the vendor's schema every request and answer is checked against
	RT   http.RoundTripper // MT behind Doc's checks
	Logs *bytes.Buffer     // what Log wrote
	Log  *slog.Logger      // a debug-level text logger writing to Logs

	key string
}

// NewEnv returns an Env checking traffic against doc. At the end of t it
// fails t when the logs hold key.
func NewEnv(t testing.TB, key string, doc *openapitest.Doc) *Env {
	t.Helper()
	e := &Env{MT: httpmock.NewMockTransport(), Doc: doc, Logs: &bytes.Buffer{}, key: key}
	e.RT = doc.Transport(t, e.MT)
	e.Log = slog.New(slog.NewTextHandler(e.Logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	t.Cleanup(func() {
		if strings.Contains(e.Logs.String(), key) {
			t.Error("the API key appears in the adapter's logs")
		}
	})
	return e
}

// Client returns an HTTP client sending through RT, for the adapter's
// WithHTTP.
func (e *Env) Client() *http.Client { return &http.Client{Transport: e.RT} }

// Request returns a request for url carrying the key as a bearer token,
// with body as its JSON body when it is not empty.
func (e *Env) Request(t testing.TB, method, url, body string) *http.Request {
	t.Helper()
	r, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		r.Header.Set("Content-Type", "application/json")
	}
	r.Header.Set("Authorization", "Bearer "+e.key)
	return r
}

// Answer returns the body the mock answers r with, straight from MT: what
// a test edits into wrong answers for Doc to reject.
func (e *Env) Answer(t testing.TB, r *http.Request) []byte {
	t.Helper()
	resp, err := e.MT.RoundTrip(r)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Exercised fails t for every operation of Doc that no answer passed
// through RT for, and for every one of answers ("POST /v2/pods 400") that
// did not pass.
func (e *Env) Exercised(t testing.TB, answers ...string) {
	t.Helper()
	if left := e.Doc.Unexercised(); len(left) > 0 {
		t.Errorf("operations of the OpenAPI document no primitive exercised: %v", left)
	}
	for _, want := range answers {
		if !slices.Contains(e.Doc.Seen(), want) {
			t.Errorf("no %s answer was checked; seen %v", want, e.Doc.Seen())
		}
	}
}

// Offers returns p's offers for req, failing t when Plan fails.
func Offers(t testing.TB, p provider.CloudProvider, req provider.ResourceRequest) []provider.Offer {
	t.Helper()
	offers, err := p.Plan(context.Background(), &req)
	if err != nil {
		t.Fatalf("plan: %v", err)
	}
	return offers
}

// Offer returns p's first offer for req, failing t when Plan fails or
// offers nothing.
func Offer(t testing.TB, p provider.CloudProvider, req provider.ResourceRequest) provider.Offer {
	t.Helper()
	offers := Offers(t, p, req)
	if len(offers) == 0 {
		t.Fatal("plan: no offers")
	}
	return offers[0]
}

// Launch prepares and creates s on p's first offer for req, failing t on
// any error, and returns the offer and the instance id.
func Launch(t testing.TB, p provider.CloudProvider, req provider.ResourceRequest, s *provider.InstanceSpec) (provider.Offer, string) {
	t.Helper()
	ctx := context.Background()
	o := Offer(t, p, req)
	prep, err := p.Prepare(ctx, &o, s)
	if err != nil {
		t.Fatalf("prepare: %v", err)
	}
	id, err := p.Create(ctx, &o, prep, s)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	return o, id
}

// Kind fails t unless err is a *provider.Error of kind want whose text
// holds no key, and returns it.
func Kind(t testing.TB, err error, want provider.ErrorKind, key string) *provider.Error {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want %s", want)
	}
	if got := provider.KindOf(err); got != want {
		t.Fatalf("kind %s, want %s: %v", got, want, err)
	}
	if strings.Contains(err.Error(), key) {
		t.Fatalf("the API key appears in an error: %v", err)
	}
	pe, _ := err.(*provider.Error)
	return pe
}
