// Package primemock is a small stateful fake of the Prime Intellect API for
// tests, served through an httpmock transport: pods created are listed (with
// offset/limit pagination) and deleted, SSH keys are registered and deleted,
// the availability catalog pages, and error answers can be scripted. It
// checks the bearer token and records every call. Its answers follow Prime
// Intellect's compute API OpenAPI document (provider/primeintellect/testdata),
// which the adapter's tests check every answer against: pods carry userId,
// socket and the enums' values, keys userId, history entries every field
// HistoryObj requires, and an empty page is "data": [] (never null).
package primemock

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/jarcoal/httpmock"

	"github.com/org/gpuprov/internal/rest/restmock"
)

// Item is one availability item (a configuration on the marketplace).
type Item struct {
	CloudID, GPUType, Socket, Provider, Region, DataCenter, Country, Security, Stock string
	GPUCount, GPUMemory                                                              int
	Price                                                                            float64 // per GPU-hour
	Spot                                                                             bool
	// PrepaidHours, when positive, is served as prepaidTime: hours charged
	// at the order.
	PrepaidHours float64
}

// Pod is a pod of the fake.
type Pod struct {
	ID, Name, Status, Install, Failure, SSHKeyID, CloudID, GPUType, Socket, Provider string
	GPUCount                                                                         int
	Env                                                                              map[string]string
	lists                                                                            int
}

// Call is one request the fake received.
type Call struct {
	Method, Path, Query, Auth string
	Body                      []byte
}

// Fault is a scripted answer (Status and raw Body) for requests matching
// Method and a path prefix; Times 0 means forever.
type Fault struct {
	Method, Path string
	Status       int
	Body         string
	RetryAfter   string
	Times        int
}

// API is the fake.
type API struct {
	mu      sync.Mutex
	srv     restmock.Server // routing, the key check, faults, recorded calls
	items   []Item
	pods    map[string]*Pod
	history []map[string]any
	keys    map[string]map[string]string
	seq     int
	// BootLists is how many GET /pods/ a pod stays provisioning, then
	// installing (default 1 each).
	BootLists int
	// PageSize caps a pods/keys page below the client's limit (0: no cap),
	// to exercise pagination.
	PageSize int
}

// New returns a fake accepting key with the availability items.
func New(key string, items ...Item) *API {
	a := &API{items: items, pods: map[string]*Pod{}, keys: map[string]map[string]string{}, BootLists: 1}
	a.srv = restmock.Server{Key: key, Mu: &a.mu, Route: a.route,
		Unauthorized: func() *http.Response { return raw(401, `{"detail":"Invalid API key"}`, "") }}
	return a
}

// Fail scripts a fault.
func (a *API) Fail(f Fault) {
	a.srv.Fail(restmock.Fault{Method: f.Method, Path: f.Path, Times: f.Times,
		Answer: func() *http.Response { return raw(f.Status, f.Body, f.RetryAfter) }})
}

// Calls returns the calls matching method and path prefix (empty: all).
func (a *API) Calls(method, pathPrefix string) []Call {
	return restmock.CallsAs[Call](&a.srv, method, pathPrefix)
}

// Pods returns copies of the pods not yet terminated.
func (a *API) Pods() []Pod {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []Pod
	for _, p := range a.pods {
		out = append(out, *p)
	}
	slices.SortFunc(out, func(x, y Pod) int { return strings.Compare(x.ID, y.ID) })
	return out
}

// SSHKeys returns the names of the registered keys.
func (a *API) SSHKeys() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for _, k := range a.keys {
		out = append(out, k["name"])
	}
	slices.Sort(out)
	return out
}

// Set changes a pod's status, installation status and failure text.
func (a *API) Set(id, status, install, failure string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if p, ok := a.pods[id]; ok {
		p.Status, p.Install, p.Failure = status, install, failure
	}
}

// Settle finishes every provisioning and every deletion.
func (a *API) Settle() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for id, p := range a.pods {
		switch p.Status {
		case "PROVISIONING", "PENDING", "ACTIVE":
			if p.Install != "ERROR" {
				p.Status, p.Install = "ACTIVE", "FINISHED"
			}
		case "DELETING":
			a.terminate(id)
		}
	}
}

// Register installs the fake's responders for base on mt.
func (a *API) Register(mt *httpmock.MockTransport, base string) { a.srv.Register(mt, base) }

// Images is the enum EnvironmentTypeEnum of pod.image in Prime's OpenAPI
// document (compute API 0.1.0): the mock refuses any other image with 422.
var Images = []string{
	"ubuntu_22_cuda_12", "cuda_12_1_pytorch_2_2", "cuda_11_8_pytorch_2_1", "cuda_12_1_pytorch_2_3",
	"cuda_12_1_pytorch_2_4", "cuda_12_4_pytorch_2_4", "cuda_12_4_pytorch_2_5", "cuda_12_4_pytorch_2_6",
	"cuda_12_6_pytorch_2_7", "stable_diffusion", "axolotl", "bittensor", "hivemind", "petals_llama",
	"vllm_llama_8b", "vllm_llama_70b", "vllm_llama_405b", "custom_template", "flux", "prime_rl",
}

// invalid is the documented 422 "Invalid request data": an ErrorResponse,
// {"errors": [{"param", "details"}]}.
func invalid(param, details string) *http.Response {
	b, _ := json.Marshal(map[string]any{"errors": []map[string]string{{"param": param, "details": details}}})
	return raw(422, string(b), "")
}

func raw(status int, body, retryAfter string) *http.Response {
	resp := httpmock.NewStringResponse(status, body)
	resp.Header.Set("Content-Type", "application/json")
	if retryAfter != "" {
		resp.Header.Set("Retry-After", retryAfter)
	}
	return resp
}

func js(status int, v any) *http.Response {
	b, _ := json.Marshal(v)
	return raw(status, string(b), "")
}

func atoi(s string, def int) int {
	if n, err := strconv.Atoi(s); err == nil {
		return n
	}
	return def
}

func (a *API) route(r *http.Request, path string, body []byte) *http.Response {
	q := r.URL.Query()
	switch {
	case r.Method == http.MethodGet && path == "/availability/gpus":
		var match []map[string]any
		for _, it := range a.items {
			if c := q.Get("gpu_count"); c != "" && atoi(c, 0) != it.GPUCount {
				continue
			}
			prices := map[string]any{"currency": "USD", "onDemand": it.Price}
			if it.Security == "community_cloud" {
				prices = map[string]any{"currency": "USD", "communityPrice": it.Price}
			}
			var prepaid any // null: none
			if it.PrepaidHours > 0 {
				prepaid = it.PrepaidHours
			}
			match = append(match, map[string]any{"prepaidTime": prepaid, "cloudId": it.CloudID, "gpuType": it.GPUType, "socket": it.Socket,
				"provider": it.Provider, "region": it.Region, "dataCenter": it.DataCenter, "country": it.Country,
				"gpuCount": it.GPUCount, "gpuMemory": it.GPUMemory, "stockStatus": it.Stock, "security": it.Security,
				"isSpot": it.Spot, "images": []string{"ubuntu_22_cuda_12", "cuda_12_4_pytorch_2_5"}, "prices": prices,
				"vcpu": map[string]int{"defaultCount": 16}, "memory": map[string]int{"defaultCount": 128},
				"disk": map[string]int{"defaultCount": 100, "maxCount": 2000}}) // GpuAvailability.disk, a CustomSpecValue in GB
		}
		page, size := atoi(q.Get("page"), 1), atoi(q.Get("page_size"), 100)
		lo, hi := min((page-1)*size, len(match)), min(page*size, len(match))
		return js(200, map[string]any{"items": match[lo:hi], "totalCount": len(match)})
	case r.Method == http.MethodGet && path == "/ssh_keys/":
		all := []map[string]any{}
		for id, k := range a.keys {
			all = append(all, key(id, k))
		}
		slices.SortFunc(all, func(x, y map[string]any) int { return strings.Compare(x["id"].(string), y["id"].(string)) })
		return js(200, a.page(q, len(all), func(lo, hi int) any { return all[lo:hi] }))
	case r.Method == http.MethodPost && path == "/ssh_keys/":
		var in map[string]string
		if json.Unmarshal(body, &in) != nil || in["name"] == "" || in["publicKey"] == "" {
			return invalid("publicKey", "field required")
		}
		a.seq++
		id := fmt.Sprintf("key-%d", a.seq)
		a.keys[id] = in
		return js(200, key(id, in))
	case r.Method == http.MethodDelete && strings.HasPrefix(path, "/ssh_keys/"):
		id := strings.TrimPrefix(path, "/ssh_keys/")
		if _, ok := a.keys[id]; !ok {
			return raw(404, `{"detail":"SSH key not found"}`, "")
		}
		delete(a.keys, id)
		return js(200, map[string]string{"status": "ok"})
	case r.Method == http.MethodGet && path == "/pods/":
		ids := make([]string, 0, len(a.pods))
		for id := range a.pods {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		return js(200, a.page(q, len(ids), func(lo, hi int) any {
			out := []map[string]any{}
			for _, id := range ids[lo:hi] {
				out = append(out, a.advance(id))
			}
			return out
		}))
	case r.Method == http.MethodPost && path == "/pods/":
		return a.create(body)
	case r.Method == http.MethodGet && path == "/pods/history":
		history := append([]map[string]any{}, a.history...)
		return js(200, map[string]any{"data": history, "total_count": len(a.history), "offset": 0, "limit": 100})
	case r.Method == http.MethodGet && strings.HasPrefix(path, "/pods/"):
		id := strings.TrimPrefix(path, "/pods/")
		if p, ok := a.pods[id]; ok {
			return js(200, wire(p))
		}
		return raw(404, `{"detail":"Pod not found"}`, "")
	case r.Method == http.MethodDelete && strings.HasPrefix(path, "/pods/"):
		id := strings.TrimPrefix(path, "/pods/")
		p, ok := a.pods[id]
		if !ok {
			return raw(404, `{"detail":"Pod not found"}`, "")
		}
		p.Status = "DELETING"
		return js(200, map[string]string{"status": "TERMINATED"})
	}
	return raw(404, `{"detail":"Not Found"}`, "")
}

// page slices a listing by offset/limit, capped by PageSize.
func (a *API) page(q map[string][]string, n int, slice func(lo, hi int) any) map[string]any {
	get := func(k string) string {
		if v := q[k]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
	off, lim := atoi(get("offset"), 0), atoi(get("limit"), 100)
	if a.PageSize > 0 {
		lim = min(lim, a.PageSize)
	}
	lo, hi := min(off, n), min(off+lim, n)
	data := slice(lo, hi)
	if data == nil {
		data = []any{}
	}
	return map[string]any{"total_count": n, "totalCount": n, "offset": off, "limit": lim, "data": data}
}

// advance moves a pod one step along its life on each listing and returns
// its wire form as listed.
func (a *API) advance(id string) map[string]any {
	p := a.pods[id]
	w := wire(p)
	p.lists++
	switch {
	case p.Status == "PROVISIONING" && p.lists >= a.BootLists:
		p.Status, p.Install, p.lists = "ACTIVE", "ACTIVE", 0
	case p.Status == "ACTIVE" && p.Install == "ACTIVE" && p.lists >= a.BootLists:
		p.Install = "FINISHED"
	case p.Status == "DELETING":
		a.terminate(id)
	}
	return w
}

func (a *API) terminate(id string) {
	p := a.pods[id]
	a.history = append(a.history, map[string]any{"id": id, "name": p.Name, "providerType": p.Provider, "type": "Instance",
		"createdAt": "2026-01-01T00:00:00Z", "terminatedAt": "2026-01-01T01:00:00Z", "gpuName": p.GPUType, "gpuCount": p.GPUCount,
		"socket": p.Socket, "priceHr": 1.0, "userId": userID, "totalBilledPrice": 1.0})
	delete(a.pods, id)
}

// userID is the account's user, in every pod, key and history entry.
const userID = "user-0001"

// key is an APISSHKeyConfig.
func key(id string, k map[string]string) map[string]any {
	return map[string]any{"id": id, "userId": userID, "name": k["name"], "publicKey": k["publicKey"], "isPrimary": false, "isUserKey": true}
}

// wire is the pod as APIPodConfig.
func wire(p *Pod) map[string]any {
	w := map[string]any{"id": p.ID, "userId": userID, "name": p.Name, "status": p.Status, "installationStatus": p.Install,
		"gpuName": p.GPUType, "gpuCount": p.GPUCount, "socket": p.Socket, "providerType": p.Provider, "priceHr": 1.0,
		"createdAt": "2026-01-01T00:00:00Z", "sshConnection": nil, "ip": nil}
	if p.Failure != "" {
		w["installationFailure"] = p.Failure
	}
	if p.Status == "ACTIVE" {
		w["ip"] = "203.0.113.7"
		w["sshConnection"] = "root@203.0.113.7 -p 10022"
	}
	return w
}

func (a *API) create(body []byte) *http.Response {
	var in struct {
		Pod struct {
			Name, CloudID, GPUType, Socket, SSHKeyID, Image string
			GPUCount                                        int
			EnvVars                                         []map[string]string
		}
		Provider struct{ Type string }
	}
	if err := json.Unmarshal(body, &in); err != nil || in.Pod.CloudID == "" || in.Pod.GPUType == "" || in.Pod.GPUCount == 0 || in.Provider.Type == "" {
		return invalid("pod", "field required")
	}
	if in.Pod.Image != "" && !slices.Contains(Images, in.Pod.Image) {
		return invalid("pod.image", "Input should be one of the EnvironmentTypeEnum values")
	}
	if _, ok := a.keys[in.Pod.SSHKeyID]; !ok {
		return raw(400, `{"detail":"SSH key not found"}`, "")
	}
	if !slices.ContainsFunc(a.items, func(it Item) bool { return it.CloudID == in.Pod.CloudID && it.Stock != "Unavailable" }) {
		return raw(400, `{"detail":"This configuration is out of stock"}`, "")
	}
	a.seq++
	p := &Pod{ID: fmt.Sprintf("00000000-0000-4000-8000-%012d", a.seq), Name: in.Pod.Name, Status: "PROVISIONING", Install: "PENDING",
		SSHKeyID: in.Pod.SSHKeyID, CloudID: in.Pod.CloudID, GPUType: in.Pod.GPUType, Socket: in.Pod.Socket, GPUCount: in.Pod.GPUCount,
		Provider: in.Provider.Type, Env: map[string]string{}}
	for _, e := range in.Pod.EnvVars {
		p.Env[e["key"]] = e["value"]
	}
	a.pods[p.ID] = p
	return js(200, wire(p))
}
