package restmock_test

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/jarcoal/httpmock"

	"github.com/org/gpuprov/internal/rest/restmock"
)

func answer(status int, body string) func() *http.Response {
	return func() *http.Response { return httpmock.NewStringResponse(status, body) }
}

// TestServerChecksTheKeyThenFaultsThenRoutes: every request is recorded
// with its path below the base; one without the key gets Unauthorized; a
// fault answers its method and path prefix Times times; the rest reach
// Route, under Mu.
func TestServerChecksTheKeyThenFaultsThenRoutes(t *testing.T) {
	var mu sync.Mutex
	unheld := false
	s := restmock.Server{Key: "k", Mu: &mu, Unauthorized: answer(401, "no"),
		Route: func(r *http.Request, path string, body []byte) *http.Response {
			if mu.TryLock() {
				mu.Unlock()
				unheld = true
			}
			return httpmock.NewStringResponse(200, r.Method+" "+path+" "+string(body))
		}}
	mt := httpmock.NewMockTransport()
	s.Register(mt, "https://api.test/v2/")
	s.Fail(restmock.Fault{Method: http.MethodPost, Path: "/pods", Times: 1, Answer: answer(503, "busy")})

	do := func(method, path, key, body string) (int, string) {
		t.Helper()
		r, _ := http.NewRequest(method, "https://api.test/v2"+path, strings.NewReader(body))
		r.Header.Set("Authorization", "Bearer "+key)
		resp, err := mt.RoundTrip(r)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, tc := range []struct {
		method, path, key, body string
		status                  int
		answer                  string
	}{
		{http.MethodGet, "/pods", "wrong", "", 401, "no"},
		{http.MethodPost, "/pods/x", "k", "{}", 503, "busy"},
		{http.MethodPost, "/pods/x", "k", "{}", 200, "POST /pods/x {}"}, // the fault is used up
		{http.MethodDelete, "/pods/x", "k", "", 200, "DELETE /pods/x "},
	} {
		if status, got := do(tc.method, tc.path, tc.key, tc.body); status != tc.status || got != tc.answer {
			t.Errorf("%s %s: %d %q, want %d %q", tc.method, tc.path, status, got, tc.status, tc.answer)
		}
	}
	if unheld {
		t.Error("Route ran without Mu held")
	}
	if calls := s.Calls("", ""); len(calls) != 4 || calls[0].Auth != "Bearer wrong" || string(calls[1].Body) != "{}" {
		t.Errorf("calls %+v", calls)
	}
	if posts := s.Calls(http.MethodPost, "/pods/"); len(posts) != 2 || posts[0].Path != "/pods/x" {
		t.Errorf("posts %+v", posts)
	}
	type call struct {
		Method, Path, Query, Auth string
		Body                      []byte
	}
	if dels := restmock.CallsAs[call](&s, http.MethodDelete, ""); len(dels) != 1 || dels[0].Path != "/pods/x" {
		t.Errorf("deletes %+v", dels)
	}
	// A method Register does not serve is not recorded.
	r, _ := http.NewRequest(http.MethodPut, "https://api.test/v2/pods/x", nil)
	if _, err := mt.RoundTrip(r); err == nil || len(s.Calls(http.MethodPut, "")) != 0 {
		t.Errorf("PUT: %v, calls %+v", err, s.Calls(http.MethodPut, ""))
	}
}
