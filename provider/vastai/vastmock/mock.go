// Package vastmock is a small stateful fake of Vast.ai's REST API for tests,
// served through an httpmock transport: a search over a list of asks, an
// accept that turns an ask into an instance (and takes the ask off the
// market), the v1 instance listing (keyset pages, select_filters,
// select_cols: list.go), and destroy. It is built on internal/rest/restmock, which checks the bearer
// token, records every call and answers scripted errors; the fake adds an
// ask another renter takes after the caller's search, and a create whose
// answer is lost.
//
// Its answers follow Vast's OpenAPI document (provider/vastai/testdata),
// which the adapter's tests check every answer against, and the examples
// of the full document: error bodies are {"success": false, "error",
// "msg", "ask_id"}; a gone ask answers 404 "no_such_ask … is not
// available" or, when someone else took it, 410 "no_such_ask … is no longer
// available"; a bad key on the search answers 404 "Invalid user key" (as
// the document has it) and 401 elsewhere; a 429 is {"detail": "..."}.
package vastmock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/jarcoal/httpmock"

	"github.com/org/gpuprov/internal/rest/restmock"
)

// Offer is one ask of the market.
type Offer struct {
	ID, MachineID, HostID int64
	GPUName               string
	NumGPUs               int
	GPURAMMB              float64 // per GPU
	DPH                   float64 // dph_total
	Reliability           float64
	Verified              bool
	Geolocation           string // "Texas, US"
	DiskSpace             float64
	CPUCores              float64
	CPURAMMB              float64
}

// Instance is an instance of the fake.
type Instance struct {
	ID, AskID, MachineID           int64
	Label, Image, Onstart, Runtype string
	GPUName                        string
	NumGPUs                        int
	Disk                           float64
	Status                         string // actual_status; "" is null (provisioning)
	lists                          int
	settled                        bool
}

// Call is one request the fake received.
type Call struct {
	Method, Path, Query, Auth string
	Body                      []byte
}

// Fault is a scripted answer for requests matching Method and a path
// prefix; Times 0 means forever. Body is the answer's JSON; empty means
// {"success": false, "error": Error, "msg": Msg}. With Lose the request is
// carried out and its answer dropped (the client sees a transport error),
// as when a connection breaks after the server acted; Lose faults are
// matched after the faults that answer.
type Fault struct {
	Method, Path string
	Status       int
	Error, Msg   string
	Body         string
	RetryAfter   string
	Times        int
	Lose         bool
	used         int
}

// ErrLost is the transport error a Lose fault answers with.
var ErrLost = errors.New("vastmock: connection reset after the request was carried out")

// API is the fake.
type API struct {
	mu        sync.Mutex
	srv       restmock.Server // routing, the key check, the faults that answer, recorded calls
	offers    []Offer
	taken     map[int64]bool // rented asks: off the market
	sniped    map[int64]bool // taken by another renter after the caller's search
	instances map[int64]*Instance
	losses    []*Fault // the Lose faults, which route matches
	seq       int64
	// BootLists is how many listings an instance spends provisioning
	// (actual_status null), then loading (default 1 each).
	BootLists int
}

// New returns a fake accepting key with the market offers.
func New(key string, offers ...Offer) *API {
	a := &API{offers: offers, taken: map[int64]bool{}, sniped: map[int64]bool{},
		instances: map[int64]*Instance{}, seq: 7000000, BootLists: 1}
	a.srv = restmock.Server{Key: key, Mu: &a.mu, Route: a.route,
		Methods: []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete},
		Unauthorized: func() *http.Response {
			return vastError(http.StatusUnauthorized, "auth_error", "Invalid user key", 0)
		}}
	return a
}

// Fail scripts a fault.
func (a *API) Fail(f Fault) {
	if f.Lose {
		a.mu.Lock()
		a.losses = append(a.losses, &f)
		a.mu.Unlock()
		return
	}
	a.srv.Fail(restmock.Fault{Method: f.Method, Path: f.Path, Times: f.Times, Answer: f.answer})
}

// Snipe has another renter take ask id after the caller searched: searches
// still list it (the caller's view is older than the rental), and accepting
// it answers 410 no_such_ask.
func (a *API) Snipe(id int64) { a.mu.Lock(); a.sniped[id] = true; a.mu.Unlock() }

// Calls returns the calls matching method and path prefix (empty: all).
func (a *API) Calls(method, pathPrefix string) []Call {
	return restmock.CallsAs[Call](&a.srv, method, pathPrefix)
}

// Instances returns copies of the instances, by id.
func (a *API) Instances() []Instance {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []Instance
	for _, in := range a.instances {
		out = append(out, *in)
	}
	slices.SortFunc(out, func(x, y Instance) int { return int(x.ID - y.ID) })
	return out
}

// SetStatus sets an instance's actual_status (exited, offline, ...).
func (a *API) SetStatus(id int64, status string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if in, ok := a.instances[id]; ok {
		in.Status, in.settled = status, true
	}
}

// Settle makes every booting instance run with its ports mapped.
func (a *API) Settle() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, in := range a.instances {
		if in.Status == "" || in.Status == "loading" {
			in.Status, in.settled = "running", true
		}
	}
}

// Register installs the fake's responders for base (the host root, such as
// "https://vast.test") on mt. The restmock server answers on a transport
// of its own, behind one responder that adds what is Vast's: a search
// without the key answers 404 "Invalid user key" (searchOffers: "404
// Unauthorized - invalid or missing API key"; 401 elsewhere), and a
// request a Lose fault matched gets ErrLost instead of its answer.
func (a *API) Register(mt *httpmock.MockTransport, base string) {
	inner := httpmock.NewMockTransport()
	a.srv.Register(inner, base)
	re := regexp.MustCompile("^" + regexp.QuoteMeta(strings.TrimRight(base, "/")) + `/.*`)
	for _, m := range a.srv.Methods {
		mt.RegisterRegexpResponder(m, re, func(r *http.Request) (*http.Response, error) {
			lost := new(atomic.Bool)
			resp, err := inner.RoundTrip(r.WithContext(context.WithValue(r.Context(), lostKey{}, lost)))
			switch {
			case err != nil:
				return resp, err
			case lost.Load():
				return nil, ErrLost
			case r.Header.Get("Authorization") != "Bearer "+a.srv.Key && strings.HasPrefix(r.URL.Path, "/api/v0/bundles"):
				return vastError(http.StatusNotFound, "auth_error", "Invalid user key", 0), nil
			}
			return resp, nil
		})
	}
}

// lostKey keys the flag route sets in a request's context when a Lose
// fault matched it.
type lostKey struct{}

func (f *Fault) answer() *http.Response {
	var resp *http.Response
	if f.Body != "" {
		resp = httpmock.NewStringResponse(f.Status, f.Body)
		resp.Header.Set("Content-Type", "application/json")
	} else {
		resp = vastError(f.Status, f.Error, f.Msg, 0)
	}
	if f.RetryAfter != "" {
		resp.Header.Set("Retry-After", f.RetryAfter)
	}
	return resp
}

func vastError(status int, code, msg string, askID int64) *http.Response {
	v := map[string]any{"success": false, "error": code, "msg": msg}
	if askID != 0 {
		v["ask_id"] = askID
	}
	return js(status, v)
}

func js(status int, v any) *http.Response {
	b, _ := json.Marshal(v)
	resp := httpmock.NewBytesResponse(status, b)
	resp.Header.Set("Content-Type", "application/json")
	return resp
}

var (
	askPath      = regexp.MustCompile(`^/api/v0/asks/(\d+)/?$`)
	instancePath = regexp.MustCompile(`^/api/v0/instances/(\d+)/?$`)
)

// route answers a request that carries the key and that no answering
// fault matched; it carries out one a Lose fault matches, and flags its
// answer lost.
func (a *API) route(r *http.Request, path string, body []byte) *http.Response {
	for _, f := range a.losses {
		if f.Method == r.Method && strings.HasPrefix(path, f.Path) && (f.Times == 0 || f.used < f.Times) {
			f.used++
			if lost, ok := r.Context().Value(lostKey{}).(*atomic.Bool); ok {
				lost.Store(true)
			}
			break
		}
	}
	return a.handle(r, path, body)
}

func (a *API) handle(r *http.Request, path string, body []byte) *http.Response {
	switch {
	case r.Method == http.MethodPost && strings.TrimSuffix(path, "/") == "/api/v0/bundles":
		return a.search(body)
	case r.Method == http.MethodPut && askPath.MatchString(path):
		id, _ := strconv.ParseInt(askPath.FindStringSubmatch(path)[1], 10, 64)
		return a.accept(id, body)
	case r.Method == http.MethodGet && strings.TrimSuffix(path, "/") == "/api/v1/instances":
		return a.list(r)
	case r.Method == http.MethodDelete && instancePath.MatchString(path):
		id, _ := strconv.ParseInt(instancePath.FindStringSubmatch(path)[1], 10, 64)
		if _, ok := a.instances[id]; !ok {
			return vastError(http.StatusNotFound, "not_found", "Instance not found", 0)
		}
		in := a.instances[id]
		delete(a.instances, id)
		delete(a.taken, in.AskID)
		return js(http.StatusOK, map[string]any{"success": true, "msg": "Instance destroyed successfully"})
	}
	return vastError(http.StatusNotFound, "not_found", "no such endpoint", 0)
}

// search answers searchOffers, applying the filters the adapter sends.
func (a *API) search(body []byte) *http.Response {
	var q map[string]json.RawMessage
	if err := json.Unmarshal(body, &q); err != nil {
		return js(http.StatusBadRequest, map[string]any{"error": "invalid_request", "msg": "Invalid json body"})
	}
	var f struct {
		GPUName     struct{ In []string }  `json:"gpu_name"`
		NumGPUs     struct{ Eq *int }      `json:"num_gpus"`
		Reliability struct{ Gte *float64 } `json:"reliability"`
		DPHTotal    struct{ Lte *float64 } `json:"dph_total"`
		Geolocation struct{ In []string }  `json:"geolocation"`
		Verified    struct{ Eq *bool }     `json:"verified"`
		DiskSpace   struct{ Gte *float64 } `json:"disk_space"`
		Limit       int                    `json:"limit"`
	}
	_ = json.Unmarshal(body, &f) // q parsed, so f does
	out := []map[string]any{}
	for _, o := range a.offers {
		cc := o.Geolocation[strings.LastIndex(o.Geolocation, ",")+1:]
		switch {
		case a.taken[o.ID],
			len(f.GPUName.In) > 0 && !slices.Contains(f.GPUName.In, o.GPUName),
			f.NumGPUs.Eq != nil && *f.NumGPUs.Eq != o.NumGPUs,
			f.Reliability.Gte != nil && o.Reliability < *f.Reliability.Gte,
			f.DPHTotal.Lte != nil && o.DPH > *f.DPHTotal.Lte,
			len(f.Geolocation.In) > 0 && !slices.Contains(f.Geolocation.In, strings.TrimSpace(cc)),
			f.Verified.Eq != nil && *f.Verified.Eq != o.Verified,
			f.DiskSpace.Gte != nil && o.DiskSpace < *f.DiskSpace.Gte:
			continue
		}
		verification := "unverified"
		if o.Verified {
			verification = "verified"
		}
		out = append(out, map[string]any{"id": o.ID, "ask_contract_id": o.ID, "machine_id": o.MachineID, "host_id": o.HostID,
			"gpu_name": o.GPUName, "num_gpus": o.NumGPUs, "gpu_ram": o.GPURAMMB, "gpu_total_ram": o.GPURAMMB * float64(o.NumGPUs),
			"gpu_frac": 1.0, "cpu_cores_effective": o.CPUCores, "cpu_ram": o.CPURAMMB, "disk_space": o.DiskSpace,
			"dph_total": o.DPH, "reliability": o.Reliability, "reliability2": o.Reliability, "verification": verification,
			"verified": o.Verified, "rentable": true, "rented": false, "is_bid": false, "geolocation": o.Geolocation,
			"bundle_id": o.ID * 10, "external": false})
	}
	slices.SortStableFunc(out, func(x, y map[string]any) int {
		return compare(x["dph_total"].(float64), y["dph_total"].(float64))
	})
	if f.Limit > 0 && len(out) > f.Limit {
		out = out[:f.Limit]
	}
	return js(http.StatusOK, map[string]any{"offers": out})
}

func compare(x, y float64) int {
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}

// accept answers createInstance.
func (a *API) accept(id int64, body []byte) *http.Response {
	var in struct {
		Image, Label, Onstart, Runtype string
		Disk                           float64
	}
	if err := json.Unmarshal(body, &in); err != nil || in.Image == "" {
		return vastError(http.StatusBadRequest, "invalid_args", "error 400/3467: Invalid args: 'image' is required", id)
	}
	i := slices.IndexFunc(a.offers, func(o Offer) bool { return o.ID == id })
	switch {
	case a.sniped[id] && !a.taken[id]:
		a.taken[id] = true
		return vastError(http.StatusGone, "no_such_ask", fmt.Sprintf("error 410/3907: no_such_ask Instance type %d is no longer available.", id), id)
	case i < 0 || a.taken[id]:
		return vastError(http.StatusNotFound, "invalid_args", fmt.Sprintf("error 404/3603: no_such_ask Instance type by id %d is not available.", id), id)
	case in.Disk > a.offers[i].DiskSpace:
		return vastError(http.StatusBadRequest, "invalid_args", fmt.Sprintf("error 400/3467: Invalid args: disk %v exceeds the %v GB available", in.Disk, a.offers[i].DiskSpace), id)
	}
	o := a.offers[i]
	a.taken[id] = true
	a.seq++
	a.instances[a.seq] = &Instance{ID: a.seq, AskID: id, MachineID: o.MachineID, Label: in.Label, Image: in.Image,
		Onstart: in.Onstart, Runtype: in.Runtype, GPUName: o.GPUName, NumGPUs: o.NumGPUs, Disk: in.Disk}
	return js(http.StatusOK, map[string]any{"success": true, "new_contract": a.seq, "instance_api_key": "d15a0000instancekey"})
}
