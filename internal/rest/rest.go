// Package rest is the small HTTP layer the marketplace adapters
// (provider/lambda, provider/primeintellect, provider/runpod) share: one
// JSON request per call with a bearer token, and a typed error for every
// answer outside 2xx.
//
// It never retries. The client is go-retryablehttp with RetryMax 0 and a
// CheckRetry that always says no, so each Do is exactly one HTTP attempt and
// the core stays the only retry layer. A Retry-After header on an error
// answer is parsed into Error.RetryAfter for the adapter to hand to the core.
//
//	c := rest.New("https://cloud.lambda.ai/api/v1", key, nil, 30*time.Second)
//	var out struct{ Data []instance `json:"data"` }
//	err := c.Do(ctx, rest.Request{Method: http.MethodGet, Path: "/instances", Out: &out})
//
// The token is sent as "Authorization: Bearer <token>" and appears in no
// error this package returns: a vendor, gateway or proxy may echo the
// request's credentials in an error answer's body or headers, so every form
// of the token (as typed, URL-encoded, base64 as Basic auth sends it) is
// masked (internal/redact) in Error's Body and Header and in every transport
// error's text before it leaves Do. An adapter that builds its own messages
// from Error's fields therefore cannot put the token back. The package logs
// nothing.
package rest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-retryablehttp"

	"github.com/org/gpuprov/internal/redact"
)

// ErrTimeout is wrapped by the error of a call that got no answer within
// the client's per-request timeout. It is not context.DeadlineExceeded: the
// caller's own deadline has not passed.
var ErrTimeout = errors.New("rest: request timed out")

// maxBody bounds how much of an answer is read.
const maxBody = 16 << 20

// Client sends JSON requests to one API base URL. It is safe for concurrent
// use.
type Client struct {
	base    string
	token   string
	secrets *redact.Secrets // every form of token, masked in what Do returns
	timeout time.Duration
	http    *retryablehttp.Client
	now     func() time.Time
}

// New returns a client for base (no trailing slash needed) that
// authenticates with token. hc is the HTTP client to send through (nil: a
// pooled client of its own); timeout bounds each request (0: 30s).
func New(base, token string, hc *http.Client, timeout time.Duration) *Client {
	rc := retryablehttp.NewClient()
	rc.RetryMax = 0
	rc.CheckRetry = NeverRetry
	rc.ErrorHandler = retryablehttp.PassthroughErrorHandler
	rc.Logger = nil // it would print URLs to stderr; adapters log through slog
	if hc != nil {
		rc.HTTPClient = hc
	}
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	return &Client{base: strings.TrimRight(base, "/"), token: token, secrets: redact.New(token), timeout: timeout, http: rc, now: time.Now}
}

// NeverRetry is the CheckRetry policy of every Client: no answer is retried.
func NeverRetry(context.Context, *http.Response, error) (bool, error) { return false, nil }

// Request is one API call.
type Request struct {
	Method string
	Path   string     // below the base URL, starting with "/"
	Query  url.Values // optional
	Body   any        // encoded as JSON when non-nil
	Out    any        // a 2xx answer's JSON body is decoded into it when non-nil
}

// Response is what a successful call returns besides the decoded body.
type Response struct {
	Status int
	Header http.Header
}

// Error is an answer outside 2xx. Body is the answer (at most 16 MiB), for
// the adapter to parse its vendor's error format from, and Header its
// headers; in both, every form of the client's token is already replaced by
// redact.Mask, so neither can carry it into a message.
type Error struct {
	Method     string
	Path       string
	Status     int
	Body       []byte
	Header     http.Header
	RetryAfter time.Duration // from Retry-After (seconds or an HTTP date)
}

func (e *Error) Error() string {
	body := strings.TrimSpace(string(e.Body))
	if len(body) > 512 {
		body = body[:512] + "…"
	}
	if body == "" {
		body = http.StatusText(e.Status)
	}
	return fmt.Sprintf("%s %s: HTTP %d: %s", e.Method, e.Path, e.Status, body)
}

// Do sends r once. It returns nil and fills r.Out for a 2xx answer, an
// *Error for any other answer, and a wrapped transport error (ErrTimeout for
// the per-request timeout, the context's cause for the caller's own
// cancellation) when no answer came. An answer that cannot be decoded is an
// error too: the call may still have taken effect.
func (c *Client) Do(ctx context.Context, r Request) (*Response, error) {
	u := c.base + r.Path
	if len(r.Query) > 0 {
		u += "?" + r.Query.Encode()
	}
	var body any
	if r.Body != nil {
		b, err := json.Marshal(r.Body)
		if err != nil {
			return nil, fmt.Errorf("%s %s: encoding the body: %w", r.Method, r.Path, err)
		}
		body = b
	}
	rctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := retryablehttp.NewRequestWithContext(rctx, r.Method, u, body)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", r.Method, r.Path, err)
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		switch {
		case ctx.Err() != nil:
			return nil, fmt.Errorf("%s %s: %w", r.Method, r.Path, context.Cause(ctx))
		case rctx.Err() != nil:
			return nil, fmt.Errorf("%s %s: %w after %s", r.Method, r.Path, ErrTimeout, c.timeout)
		}
		return nil, fmt.Errorf("%s %s: %w", r.Method, r.Path, c.secrets.Error(scrub(err)))
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return nil, fmt.Errorf("%s %s: reading the answer: %w", r.Method, r.Path, c.secrets.Error(err))
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, &Error{Method: r.Method, Path: r.Path, Status: resp.StatusCode, Body: c.secrets.Bytes(b),
			Header: c.maskHeader(resp.Header), RetryAfter: RetryAfter(resp.Header.Get("Retry-After"), c.now())}
	}
	if r.Out != nil && len(bytes.TrimSpace(b)) > 0 {
		if err := json.Unmarshal(b, r.Out); err != nil {
			return nil, fmt.Errorf("%s %s: decoding the answer: %w", r.Method, r.Path, c.secrets.Error(err))
		}
	}
	return &Response{Status: resp.StatusCode, Header: resp.Header}, nil
}

// maskHeader returns h, or a copy of it with every form of the token masked
// in names and values when any holds one.
func (c *Client) maskHeader(h http.Header) http.Header {
	leak := false
	for k, vs := range h {
		leak = leak || c.secrets.Contains(k)
		for _, v := range vs {
			leak = leak || c.secrets.Contains(v)
		}
	}
	if !leak {
		return h
	}
	out := make(http.Header, len(h))
	for k, vs := range h {
		for _, v := range vs {
			out[c.secrets.String(k)] = append(out[c.secrets.String(k)], c.secrets.String(v))
		}
	}
	return out
}

// scrub drops the URL from a *url.Error so that a query string never lands
// in a message twice; method and path are prefixed by the caller.
func scrub(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// RetryAfter parses a Retry-After value, delay-seconds or an HTTP date
// relative to now. Anything else, or a date in the past, is 0.
func RetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if secs, err := strconv.Atoi(v); err == nil {
		if secs < 0 {
			return 0
		}
		return time.Duration(secs) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(0, t.Sub(now))
	}
	return 0
}

// StatusOf returns the HTTP status of the *Error in err's chain, or 0.
func StatusOf(err error) int {
	var e *Error
	if errors.As(err, &e) {
		return e.Status
	}
	return 0
}
