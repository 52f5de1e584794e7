package rest_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jarcoal/httpmock"

	"github.com/org/gpuprov/internal/rest"
)

func client(t *testing.T) (*rest.Client, *httpmock.MockTransport) {
	t.Helper()
	mt := httpmock.NewMockTransport()
	return rest.New("https://api.example/v1/", "s3cret", &http.Client{Transport: mt}, time.Second), mt
}

func TestDoSendsJSONWithBearerAndDecodes(t *testing.T) {
	c, mt := client(t)
	mt.RegisterResponder(http.MethodPost, "https://api.example/v1/things?x=1", func(r *http.Request) (*http.Response, error) {
		if r.Header.Get("Authorization") != "Bearer s3cret" || r.Header.Get("Content-Type") != "application/json" {
			t.Errorf("headers %v", r.Header)
		}
		b, _ := io.ReadAll(r.Body)
		if string(b) != `{"name":"a"}` {
			t.Errorf("body %s", b)
		}
		return httpmock.NewStringResponse(201, `{"id":"7"}`), nil
	})
	var out struct{ ID string }
	resp, err := c.Do(context.Background(), rest.Request{Method: http.MethodPost, Path: "/things",
		Query: map[string][]string{"x": {"1"}}, Body: map[string]string{"name": "a"}, Out: &out})
	if err != nil || out.ID != "7" || resp.Status != 201 {
		t.Fatalf("out %+v resp %+v err %v", out, resp, err)
	}
	if n := mt.GetTotalCallCount(); n != 1 {
		t.Fatalf("%d calls", n)
	}
}

func TestErrorAnswerIsTypedAndNeverRetried(t *testing.T) {
	for _, status := range []int{429, 500, 503} {
		c, mt := client(t)
		mt.RegisterResponder(http.MethodGet, "https://api.example/v1/x", func(*http.Request) (*http.Response, error) {
			r := httpmock.NewStringResponse(status, `{"error":"busy"}`)
			r.Header.Set("Retry-After", "7")
			return r, nil
		})
		_, err := c.Do(context.Background(), rest.Request{Method: http.MethodGet, Path: "/x"})
		var e *rest.Error
		if !errors.As(err, &e) || e.Status != status || e.RetryAfter != 7*time.Second || string(e.Body) != `{"error":"busy"}` {
			t.Fatalf("%d: %#v", status, err)
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Fatal("the token leaked into an error")
		}
		if n := mt.GetTotalCallCount(); n != 1 {
			t.Fatalf("%d: %d attempts, want 1", status, n)
		}
	}
}

func TestTransportErrorAndTimeout(t *testing.T) {
	c, mt := client(t)
	mt.RegisterResponder(http.MethodGet, "https://api.example/v1/x", httpmock.NewErrorResponder(errors.New("connection reset")))
	_, err := c.Do(context.Background(), rest.Request{Method: http.MethodGet, Path: "/x"})
	if err == nil || rest.StatusOf(err) != 0 || !strings.Contains(err.Error(), "connection reset") {
		t.Fatalf("err %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.Do(ctx, rest.Request{Method: http.MethodGet, Path: "/x"}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Duration{
		"":     0,
		"12":   12 * time.Second,
		"-3":   0,
		"soon": 0,
		now.Add(time.Minute).Format(http.TimeFormat):  time.Minute,
		now.Add(-time.Minute).Format(http.TimeFormat): 0,
	} {
		if got := rest.RetryAfter(in, now); got != want {
			t.Errorf("RetryAfter(%q) = %s, want %s", in, got, want)
		}
	}
}
