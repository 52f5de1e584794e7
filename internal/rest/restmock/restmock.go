// Package restmock is the skeleton the stateful fakes of the REST adapters'
// vendor APIs share (provider/lambda/lambdamock,
// provider/primeintellect/primemock, provider/runpod/runpodmock): it serves
// a fake through an httpmock transport, records every request, answers one
// without the fake's bearer token with the fake's 401, and answers the
// scripted faults before the fake's own routes. What the vendor's answers
// look like (its error shape, its objects, its paging) stays in the fake.
//
// A fake holds a Server and the mutex that guards its state, fills the
// Server in its constructor, and forwards Register, Fail and Calls to it,
// converting to its own exported types (the fake's API names no internal
// type):
//
//	type API struct {
//		mu   sync.Mutex
//		srv  restmock.Server
//		pods map[string]*Pod
//	}
//
//	func New(key string) *API {
//		a := &API{pods: map[string]*Pod{}}
//		a.srv = restmock.Server{Key: key, Mu: &a.mu, Route: a.route,
//			Unauthorized: func() *http.Response { return problem(401, "bad key") }}
//		return a
//	}
//
//	func (a *API) Register(mt *httpmock.MockTransport, base string) { a.srv.Register(mt, base) }
//
//	func (a *API) Fail(f Fault) {
//		a.srv.Fail(restmock.Fault{Method: f.Method, Path: f.Path, Times: f.Times,
//			Answer: func() *http.Response { return problem(f.Status, f.Detail) }})
//	}
//
//	func (a *API) Calls(method, pathPrefix string) []Call {
//		return restmock.CallsAs[Call](&a.srv, method, pathPrefix)
//	}
//
// Route runs with Mu held, so it reads and changes the fake's state freely;
// the fake's own methods (Pods, Settle, ...) take Mu themselves.
package restmock

import (
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"

	"github.com/jarcoal/httpmock"
)

// Call is one request the fake received: Path is below the base URL given
// to Register, Query the raw query, Auth the Authorization header.
type Call struct {
	Method, Path, Query, Auth string
	Body                      []byte
}

// Fault is a scripted answer for the requests with Method whose path starts
// with Path. Times is how many it answers (0: every one); Answer makes each
// answer afresh.
type Fault struct {
	Method, Path string
	Times        int
	Answer       func() *http.Response
	used         int
}

// Server is the part of a fake REST API that is the same for every vendor.
// Fill the exported fields before Register; its methods are safe for
// concurrent use.
type Server struct {
	// Key is the bearer token the fake accepts.
	Key string
	// Mu guards the fake's state; the Server holds it while it records a
	// call and answers, and in Fail and Calls.
	Mu sync.Locker
	// Unauthorized is the fake's answer to a request without
	// "Authorization: Bearer <Key>".
	Unauthorized func() *http.Response
	// Route answers a request that carries the key and matches no fault.
	// path is the request's path below the base URL; body has been read.
	Route func(r *http.Request, path string, body []byte) *http.Response
	// Methods are the methods Register serves; empty means GET, POST and
	// DELETE. A request with another method gets httpmock's no-responder
	// error and is not recorded.
	Methods []string

	calls  []Call
	faults []*Fault
}

// Register installs the server's responders on mt for every URL below base.
func (s *Server) Register(mt *httpmock.MockTransport, base string) {
	base = strings.TrimRight(base, "/")
	re := regexp.MustCompile("^" + regexp.QuoteMeta(base) + `/.*`)
	prefix := base[strings.Index(base, "://")+3:]
	prefix = prefix[strings.Index(prefix+"/", "/"):]
	methods := s.Methods
	if len(methods) == 0 {
		methods = []string{http.MethodGet, http.MethodPost, http.MethodDelete}
	}
	for _, m := range methods {
		mt.RegisterRegexpResponder(m, re, func(r *http.Request) (*http.Response, error) {
			return s.serve(r, strings.TrimPrefix(r.URL.Path, prefix)), nil
		})
	}
}

func (s *Server) serve(r *http.Request, path string) *http.Response {
	var body []byte
	if r.Body != nil {
		body, _ = io.ReadAll(r.Body)
	}
	auth := r.Header.Get("Authorization")
	s.Mu.Lock()
	defer s.Mu.Unlock()
	s.calls = append(s.calls, Call{Method: r.Method, Path: path, Query: r.URL.RawQuery, Auth: auth, Body: body})
	if auth != "Bearer "+s.Key {
		return s.Unauthorized()
	}
	for _, f := range s.faults {
		if f.Method == r.Method && strings.HasPrefix(path, f.Path) && (f.Times == 0 || f.used < f.Times) {
			f.used++
			return f.Answer()
		}
	}
	return s.Route(r, path, body)
}

// Fail scripts a fault. Faults answer in the order they were scripted.
func (s *Server) Fail(f Fault) {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	s.faults = append(s.faults, &f)
}

// Calls returns the calls received so far whose method is method and whose
// path starts with pathPrefix (empty matches all), oldest first.
func (s *Server) Calls(method, pathPrefix string) []Call {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	var out []Call
	for _, c := range s.calls {
		if (method == "" || c.Method == method) && strings.HasPrefix(c.Path, pathPrefix) {
			out = append(out, c)
		}
	}
	return out
}

// CallsAs is Calls as the fake's own exported call type C, a struct with
// Call's fields, which a fake declares so that its API names no internal
// type.
func CallsAs[C ~struct {
	Method, Path, Query, Auth string
	Body                      []byte
}](s *Server, method, pathPrefix string) []C {
	var out []C
	for _, c := range s.Calls(method, pathPrefix) {
		out = append(out, C(c))
	}
	return out
}
