// Package runpodmock is a small stateful fake of RunPod's REST API v2 for
// tests, served through an httpmock transport: pods created are listed and
// deleted, the GPU catalog answers with per-data-center stock, network
// volumes are made, read, mounted by the pods created with them and
// deleted once no pod holds them, a data center says which volume tiers
// it has, and error answers (RFC 9457 problems) can be scripted. It checks the bearer token
// and records every call. Its answers follow RunPod's REST API v2 OpenAPI
// document (provider/runpod/testdata), which the adapter's tests check every
// answer against: a pod carries every field Pod requires (actions, ssh,
// mounts, registry, ...), a GPU type its pool and manufacturer.
package runpodmock

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/jarcoal/httpmock"

	"github.com/org/gpuprov/internal/rest/restmock"
)

// GPU is one GPU type of the catalog.
type GPU struct {
	ID, Name    string
	Memory      int
	Secure      float64 // per-GPU price on secure cloud; 0: not offered
	Community   float64 // likewise on community cloud
	MaxCount    int
	DataCenters map[string]string // data center → NONE/LOW/MEDIUM/HIGH
}

// Pod is a pod of the fake.
type Pod struct {
	ID, Name, Status, GPU, Cloud, DataCenter, Image string
	Count                                           int
	Env                                             map[string]string
	Ports                                           []string
	// Cluster is the id of the cluster the pod belongs to (""; none): such
	// a pod cannot be deleted through /pods, and GET /pods lists it only
	// with includeClusterPods=true.
	Cluster string
	// Volume is the network volume the pod was created with (its
	// mounts.network), mounted at MountPath.
	Volume, MountPath string
	lists             int
}

// Volume is a network volume of the fake (NetworkVolume).
type Volume struct {
	ID, Name, DataCenter, Type string
	Size                       int
}

// Call is one request the fake received.
type Call struct {
	Method, Path, Query, Auth string
	Body                      []byte
}

// Fault is a scripted problem answer for requests matching Method and a
// path prefix; Times 0 means forever.
type Fault struct {
	Method, Path string
	Status       int
	Detail       string
	RetryAfter   string
	Times        int
}

// API is the fake.
type API struct {
	mu   sync.Mutex
	srv  restmock.Server // routing, the key check, faults, recorded calls
	gpus []GPU
	pods map[string]*Pod
	seq  int
	vols map[string]*Volume
	// volTypes are the network volume tiers of a data center; a data
	// center of the catalog not listed has STANDARD.
	volTypes map[string][]string
	held     map[string]bool // volumes held by something GET /pods does not list
	// BootLists is how many GET /pods a pod spends provisioning, then
	// running without its SSH port (default 1 each).
	BootLists int
}

// New returns a fake accepting key with the catalog.
func New(key string, gpus ...GPU) *API {
	a := &API{gpus: gpus, pods: map[string]*Pod{}, BootLists: 1, vols: map[string]*Volume{}, volTypes: map[string][]string{}, held: map[string]bool{}}
	a.srv = restmock.Server{Key: key, Mu: &a.mu, Route: a.route,
		Unauthorized: func() *http.Response { return problem(401, "missing bearer token", "") }}
	return a
}

// Fail scripts a fault.
func (a *API) Fail(f Fault) {
	a.srv.Fail(restmock.Fault{Method: f.Method, Path: f.Path, Times: f.Times,
		Answer: func() *http.Response { return problem(f.Status, f.Detail, f.RetryAfter) }})
}

// Calls returns the calls matching method and path prefix (empty: all).
func (a *API) Calls(method, pathPrefix string) []Call {
	return restmock.CallsAs[Call](&a.srv, method, pathPrefix)
}

// Pods returns copies of the pods not terminated.
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

// SetStatus sets a pod's status (EXITED, ERROR, ...).
func (a *API) SetStatus(id, status string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if p, ok := a.pods[id]; ok {
		p.Status = status
		p.lists = 1 << 20
	}
}

// JoinCluster makes pod id a member of cluster: DELETE /pods/{id} then
// answers 409, as RunPod documents for a cluster's pods.
func (a *API) JoinCluster(id, cluster string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if p, ok := a.pods[id]; ok {
		p.Cluster = cluster
	}
}

// Volumes returns copies of the network volumes, by id.
func (a *API) Volumes() []Volume {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []Volume
	for _, v := range a.vols {
		out = append(out, *v)
	}
	slices.SortFunc(out, func(x, y Volume) int { return strings.Compare(x.ID, y.ID) })
	return out
}

// AddVolume adds a network volume made outside the code under test (its
// ID is given one when empty) and returns its id.
func (a *API) AddVolume(v Volume) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if v.ID == "" {
		a.seq++
		v.ID = fmt.Sprintf("vol%07d", a.seq)
	}
	if v.Type == "" {
		v.Type = "STANDARD"
	}
	a.vols[v.ID] = &v
	return v.ID
}

// AddPod adds a pod made outside the code under test (its ID is given one
// when empty; its status is RUNNING when empty) and returns its id.
func (a *API) AddPod(p Pod) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if p.ID == "" {
		a.seq++
		p.ID = fmt.Sprintf("pod%010d", a.seq)
	}
	if p.Status == "" {
		p.Status = "RUNNING"
	}
	p.lists = 1 << 20
	a.pods[p.ID] = &p
	return p.ID
}

// SetVolumeTypes sets the network volume tiers data center dc has; none:
// it takes no network volume (its networkVolumeTypes is empty, and a
// create there answers 400).
func (a *API) SetVolumeTypes(dc string, types ...string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.volTypes[dc] = append([]string{}, types...)
}

// HoldVolume makes network volume id held by something GET /pods does not
// list (a serverless worker): its delete answers InUseDetail.
func (a *API) HoldVolume(id string, held bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.held[id] = held
}

// InUseDetail is what RunPod answers the delete of a network volume a pod
// still mounts (recorded in public client code; the v2 document lists no
// such answer, nor its status: the fake answers 400).
const InUseDetail = "You must remove this network volume from all pods before deleting it."

// NoVolumesDetail is the fake's answer to a network volume create in a
// data center without network volumes (RunPod documents none; the v2
// document's 400 is "The request could not be processed because it is
// malformed or conflicts with request rules").
const NoVolumesDetail = "Network volumes are not available in this data center."

// ClusterConflictDetail is the detail of deletePod's 409 (RunPod REST API v2
// OpenAPI, runpod/docs api-reference-v2/openapi.json, 2.0.0).
const ClusterConflictDetail = "Pod belongs to a cluster and cannot be terminated via the pod endpoints."

// Settle makes every provisioning pod run with its SSH port mapped.
func (a *API) Settle() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, p := range a.pods {
		if p.Status == "PROVISIONING" || p.Status == "STARTING" || p.Status == "RUNNING" {
			p.Status, p.lists = "RUNNING", 1<<20
		}
	}
}

// Register installs the fake's responders for base (the ".../v2" root) on mt.
func (a *API) Register(mt *httpmock.MockTransport, base string) { a.srv.Register(mt, base) }

// CapacityDetail is the detail RunPod answers a create it cannot place with.
const CapacityDetail = "There are no longer any instances available with the requested specifications. Please refresh and try again."

func problem(status int, detail, retryAfter string) *http.Response {
	b, _ := json.Marshal(map[string]any{"title": http.StatusText(status), "status": status, "detail": detail})
	resp := httpmock.NewBytesResponse(status, b)
	resp.Header.Set("Content-Type", "application/problem+json")
	if retryAfter != "" {
		resp.Header.Set("Retry-After", retryAfter)
	}
	return resp
}

func js(status int, v any) *http.Response {
	b, _ := json.Marshal(v)
	resp := httpmock.NewBytesResponse(status, b)
	resp.Header.Set("Content-Type", "application/json")
	return resp
}

func (a *API) route(r *http.Request, path string, body []byte) *http.Response {
	switch {
	case r.Method == http.MethodGet && path == "/catalog/gpus":
		return a.catalog(r)
	case r.Method == http.MethodGet && path == "/pods":
		ids := make([]string, 0, len(a.pods))
		for id := range a.pods {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		out := []map[string]any{}
		withCluster := r.URL.Query().Get("includeClusterPods") == "true"
		for _, id := range ids {
			p := a.pods[id]
			if p.Cluster != "" && !withCluster {
				continue // "excluded from GET /v2/pods by default" (Pod.cluster)
			}
			p.lists++
			switch {
			case p.Status == "PROVISIONING" && p.lists > a.BootLists:
				p.Status, p.lists = "RUNNING", 0
			}
			out = append(out, wire(p, a.BootLists))
		}
		return js(200, map[string]any{"pods": out})
	case r.Method == http.MethodPost && path == "/pods":
		return a.create(body)
	case r.Method == http.MethodGet && strings.HasPrefix(path, "/pods/"):
		if p, ok := a.pods[strings.TrimPrefix(path, "/pods/")]; ok {
			return js(200, wire(p, a.BootLists))
		}
		return problem(404, "pod not found", "")
	case r.Method == http.MethodDelete && strings.HasPrefix(path, "/pods/"):
		id := strings.TrimPrefix(path, "/pods/")
		p, ok := a.pods[id]
		if !ok {
			return problem(404, "pod not found", "")
		}
		if p.Cluster != "" {
			return problem(409, ClusterConflictDetail, "")
		}
		delete(a.pods, id)
		return httpmock.NewStringResponse(204, "")
	case r.Method == http.MethodGet && strings.HasPrefix(path, "/catalog/datacenters/"):
		return a.dataCenter(strings.TrimPrefix(path, "/catalog/datacenters/"))
	case r.Method == http.MethodGet && path == "/network-volumes":
		out := []map[string]any{}
		for _, v := range a.sortedVolumes() {
			out = append(out, wireVolume(v))
		}
		return js(200, map[string]any{"networkVolumes": out})
	case r.Method == http.MethodPost && path == "/network-volumes":
		return a.createVolume(body)
	case r.Method == http.MethodGet && strings.HasPrefix(path, "/network-volumes/"):
		if v, ok := a.vols[strings.TrimPrefix(path, "/network-volumes/")]; ok {
			return js(200, wireVolume(v))
		}
		return problem(404, "network volume not found", "")
	case r.Method == http.MethodDelete && strings.HasPrefix(path, "/network-volumes/"):
		id := strings.TrimPrefix(path, "/network-volumes/")
		if _, ok := a.vols[id]; !ok {
			return problem(404, "network volume not found", "")
		}
		if a.held[id] || slices.ContainsFunc(a.sortedPods(), func(p *Pod) bool { return p.Volume == id }) {
			return problem(400, InUseDetail, "")
		}
		delete(a.vols, id)
		return httpmock.NewStringResponse(204, "")
	}
	return problem(404, "resource not found", "")
}

func (a *API) sortedVolumes() []*Volume {
	out := make([]*Volume, 0, len(a.vols))
	for _, v := range a.vols {
		out = append(out, v)
	}
	slices.SortFunc(out, func(x, y *Volume) int { return strings.Compare(x.ID, y.ID) })
	return out
}

func (a *API) sortedPods() []*Pod {
	out := make([]*Pod, 0, len(a.pods))
	for _, p := range a.pods {
		out = append(out, p)
	}
	slices.SortFunc(out, func(x, y *Pod) int { return strings.Compare(x.ID, y.ID) })
	return out
}

func wireVolume(v *Volume) map[string]any {
	return map[string]any{"id": v.ID, "name": v.Name, "size": v.Size, "dataCenter": v.DataCenter, "type": v.Type}
}

// volumeTypes returns data center dc's network volume tiers, and whether
// the fake knows dc (a data center of the catalog, or one given tiers).
func (a *API) volumeTypes(dc string) ([]string, bool) {
	if t, ok := a.volTypes[dc]; ok {
		return t, true
	}
	for _, g := range a.gpus {
		if _, ok := g.DataCenters[dc]; ok {
			return []string{"STANDARD"}, true
		}
	}
	return nil, false
}

// dataCenter answers getDataCenter (DataCenter).
func (a *API) dataCenter(dc string) *http.Response {
	types, ok := a.volumeTypes(dc)
	if !ok {
		return problem(404, "data center not found", "")
	}
	region := "UNKNOWN"
	switch {
	case strings.HasPrefix(dc, "US-"), strings.HasPrefix(dc, "CA-"):
		region = "NORTH_AMERICA"
	case strings.HasPrefix(dc, "EU-"), strings.HasPrefix(dc, "EUR-"):
		region = "EUROPE"
	}
	return js(200, map[string]any{"id": dc, "name": dc, "region": region, "networkVolumeTypes": types,
		"compliance": []string{}, "globalNetwork": false})
}

func (a *API) createVolume(body []byte) *http.Response {
	var in struct {
		Name, DataCenter, Type string
		Size                   int
	}
	if err := json.Unmarshal(body, &in); err != nil || in.Name == "" || in.DataCenter == "" || in.Size < 10 || in.Size > 4096 {
		return problem(422, "Request validation failed.", "")
	}
	types, _ := a.volumeTypes(in.DataCenter)
	if len(types) == 0 || in.Type != "" && !slices.Contains(types, in.Type) {
		return problem(400, NoVolumesDetail, "")
	}
	a.seq++
	v := &Volume{ID: fmt.Sprintf("vol%07d", a.seq), Name: in.Name, DataCenter: in.DataCenter, Type: cmp.Or(in.Type, types[0]), Size: in.Size}
	a.vols[v.ID] = v
	return js(201, wireVolume(v))
}

func (a *API) catalog(r *http.Request) *http.Response {
	q := r.URL.Query()
	if q.Get("include") == "AVAILABILITY" && q.Get("product") == "" {
		return problem(400, "product is required with include=AVAILABILITY", "")
	}
	cloud := q.Get("cloud")
	out := []map[string]any{}
	for _, g := range a.gpus {
		dcs := []map[string]string{}
		for id, av := range g.DataCenters {
			if av != "NONE" {
				dcs = append(dcs, map[string]string{"id": id, "name": id, "availability": av})
			}
		}
		slices.SortFunc(dcs, func(x, y map[string]string) int { return strings.Compare(x["id"], y["id"]) })
		secure, community := g.Secure > 0, g.Community > 0
		maker := "NVIDIA"
		if strings.HasPrefix(g.ID, "AMD ") {
			maker = "AMD"
		}
		item := map[string]any{"id": g.ID, "name": g.Name, "pool": nil, "manufacturer": maker, "memory": g.Memory, "secure": secure, "community": community,
			"price":    map[string]float64{"secure": g.Secure, "community": g.Community},
			"maxCount": map[string]int{"secure": g.MaxCount, "community": g.MaxCount}, "availability": "HIGH"}
		if (cloud == "COMMUNITY" && community) || (cloud != "COMMUNITY" && secure) {
			item["dataCenters"] = dcs
		}
		out = append(out, item)
	}
	return js(200, map[string]any{"gpus": out})
}

// wire is the pod as Pod (ContainerConfig and the pod's own fields).
func wire(p *Pod, bootLists int) map[string]any {
	env, ports := p.Env, p.Ports
	if env == nil {
		env = map[string]string{}
	}
	if ports == nil {
		ports = []string{}
	}
	actions := []string{"stop", "restart", "terminate"}
	if p.Status == "EXITED" {
		actions = []string{"start", "terminate"}
	}
	w := map[string]any{"id": p.ID, "name": p.Name, "status": p.Status, "actions": actions, "env": env, "ports": ports,
		"image": p.Image, "args": "", "disk": 50, "mounts": map[string]any{}, "registry": nil,
		"cloud": p.Cloud, "dataCenterId": p.DataCenter, "cudaVersion": "12.8", "template": nil, "locked": false,
		"cost": 1.0, "createdAt": "2026-01-01T00:00:00Z", "startedAt": nil, "globalNetworking": map[string]any{"enabled": false},
		"ssh": map[string]any{"proxy": nil, "direct": nil},
		"gpu": map[string]any{"id": p.GPU, "count": p.Count}, "runtime": nil}
	if p.Cluster != "" {
		w["cluster"] = map[string]any{"id": p.Cluster, "rank": 0}
	}
	if p.Volume != "" {
		w["mounts"] = map[string]any{"network": []map[string]any{{"volumeId": p.Volume, "path": p.MountPath}}}
	}
	if p.Status == "RUNNING" {
		ports := []map[string]any{}
		if p.lists >= bootLists && slices.Contains(p.Ports, "22/tcp") {
			ports = append(ports, map[string]any{"private": 22, "public": 40022, "type": "tcp", "ip": "192.0.2.44"})
			w["ssh"] = map[string]any{"proxy": nil, "direct": map[string]any{"host": "192.0.2.44", "port": 40022, "username": "root",
				"command": "ssh root@192.0.2.44 -p 40022"}}
		}
		w["startedAt"] = "2026-01-01T00:00:10Z"
		w["runtime"] = map[string]any{"uptime": 10, "ports": ports}
	}
	return w
}

func (a *API) create(body []byte) *http.Response {
	var in struct {
		Name, Image, Cloud string
		GPU                struct {
			ID    string
			Count int
		}
		DataCenterIDs []string
		Ports         []string
		Env           map[string]string
		Mounts        struct {
			Network []struct{ VolumeID, Path string }
		}
	}
	if err := json.Unmarshal(body, &in); err != nil || in.Name == "" || in.Image == "" || in.GPU.ID == "" {
		return problem(422, "Request validation failed.", "")
	}
	var vol *Volume
	if len(in.Mounts.Network) > 0 {
		m := in.Mounts.Network[0]
		if vol = a.vols[m.VolumeID]; vol == nil {
			return problem(404, "network volume not found", "")
		}
		if in.Cloud == "COMMUNITY" {
			return problem(400, "network volumes are only available for Secure Cloud pods", "")
		}
	}
	dc := ""
	for _, g := range a.gpus {
		if g.ID != in.GPU.ID {
			continue
		}
		for _, d := range in.DataCenterIDs {
			if av := g.DataCenters[d]; av != "" && av != "NONE" && (vol == nil || d == vol.DataCenter) {
				dc = d
				break
			}
		}
	}
	if dc == "" {
		return problem(400, CapacityDetail, "")
	}
	a.seq++
	p := &Pod{ID: fmt.Sprintf("pod%010d", a.seq), Name: in.Name, Status: "PROVISIONING", GPU: in.GPU.ID, Count: max(in.GPU.Count, 1),
		Cloud: in.Cloud, DataCenter: dc, Image: in.Image, Env: in.Env, Ports: in.Ports}
	if vol != nil {
		p.Volume, p.MountPath = vol.ID, in.Mounts.Network[0].Path
	}
	a.pods[p.ID] = p
	return js(201, wire(p, a.BootLists))
}
