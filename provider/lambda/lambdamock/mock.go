// Package lambdamock is a small stateful fake of the Lambda Cloud API for
// tests, served through an httpmock transport: instances launched are listed
// and terminated, SSH keys and firewall rulesets are created and deleted,
// and errors can be scripted per call. As Lambda does, it refuses to delete
// a firewall ruleset that an instance not yet terminated uses (400
// firewall-rulesets/firewall-ruleset-in-use) and to launch with a ruleset
// id it does not have (404 global/object-does-not-exist). It checks the
// bearer token on every request and records every call for assertions. Its
// answers follow the Lambda Cloud API's OpenAPI document 1.8.3
// (provider/lambda/testdata), which the adapter's tests check every answer
// against: error bodies carry code,
// message and suggestion, instances carry their full instance type and
// actions, and an empty list is [] (never null).
//
//	mt := httpmock.NewMockTransport()
//	api := lambdamock.New("key", lambdamock.Type{Name: "gpu_1x_h100_pcie", ...})
//	api.Register(mt, "https://lambda.test/api/v1")
//	p, _ := lambda.New(lambda.Config{APIKey: "key"}, lambda.WithHTTP("https://lambda.test/api/v1", &http.Client{Transport: mt}))
package lambdamock

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/jarcoal/httpmock"

	"github.com/org/gpuprov/internal/rest/restmock"
)

// Type is one instance type of the catalog.
type Type struct {
	Name           string
	GPUDescription string // "H100 (80 GB PCIe)"
	PriceCents     int
	GPUs           int
	VCPUs          int
	MemoryGiB      int
	Regions        []string // regions with capacity available
}

// Instance is an instance of the fake.
type Instance struct {
	ID, Name, Status, Region, Type, IP, UserData string
	SSHKeyNames                                  []string
	Tags                                         map[string]string
	Rulesets                                     []string
	lists                                        int // list calls seen while booting
}

// Call is one request the fake received.
type Call struct {
	Method, Path, Query, Auth string
	Body                      []byte
}

// Fault is a scripted error answer for requests matching Method and a path
// prefix; Times 0 means forever.
type Fault struct {
	Method, Path string
	Status       int
	Code         string
	Message      string
	RetryAfter   string
	Times        int
}

// API is the fake. Its fields may be changed between calls under Lock.
type API struct {
	mu        sync.Mutex
	srv       restmock.Server // routing, the key check, faults, recorded calls
	types     []Type
	instances map[string]*Instance
	gone      map[string]bool
	keys      map[string]map[string]string // id → name, public_key
	rulesets  map[string]map[string]any    // id → name, region, rules
	seq       int
	// BootLists is how many GET /instances an instance stays booting (default 1).
	BootLists int
	// Audit is the audit log GET /audit-events answers, AuditPageSize
	// events a page (default 100), as {"data":{"events":[…],"page_token":…}}.
	// A field AuditEvent requires that an event leaves out is answered
	// with a placeholder (event_id, catalog_version, …; null LRNs).
	Audit         []map[string]any
	AuditPageSize int
}

// New returns a fake accepting key with the catalog types.
func New(key string, types ...Type) *API {
	a := &API{types: types, instances: map[string]*Instance{}, gone: map[string]bool{},
		keys: map[string]map[string]string{}, rulesets: map[string]map[string]any{}, BootLists: 1}
	a.srv = restmock.Server{Key: key, Mu: &a.mu,
		Unauthorized: func() *http.Response {
			return apiErr(401, "global/invalid-api-key", "API key was invalid, expired, or deleted.", "")
		},
		Route: func(r *http.Request, path string, body []byte) *http.Response {
			return a.route(r.Method, path, r.URL.Query(), body)
		}}
	return a
}

// Fail scripts a fault.
func (a *API) Fail(f Fault) {
	a.srv.Fail(restmock.Fault{Method: f.Method, Path: f.Path, Times: f.Times,
		Answer: func() *http.Response { return apiErr(f.Status, f.Code, f.Message, f.RetryAfter) }})
}

// Calls returns the calls received so far whose method and path match
// (empty matches all).
func (a *API) Calls(method, pathPrefix string) []Call {
	return restmock.CallsAs[Call](&a.srv, method, pathPrefix)
}

// Instances returns copies of the instances not yet terminated.
func (a *API) Instances() []Instance {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []Instance
	for _, in := range a.instances {
		out = append(out, *in)
	}
	slices.SortFunc(out, func(x, y Instance) int { return strings.Compare(x.ID, y.ID) })
	return out
}

// SSHKeys returns the names of the registered keys.
func (a *API) SSHKeys() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.keyNames()
}

// Rulesets returns the names of the firewall rulesets.
func (a *API) Rulesets() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for _, r := range a.rulesets {
		out = append(out, r["name"].(string))
	}
	slices.Sort(out)
	return out
}

// SetStatus sets an instance's status ("unhealthy", "preempted", ...).
func (a *API) SetStatus(id, status string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if in, ok := a.instances[id]; ok {
		in.Status = status
	}
}

// Settle boots every booting instance and finishes every termination.
func (a *API) Settle() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for id, in := range a.instances {
		switch in.Status {
		case "booting":
			in.Status, in.IP = "active", ipOf(a.seq)
		case "terminating":
			delete(a.instances, id)
			a.gone[id] = true
		}
	}
}

func ipOf(n int) string { return fmt.Sprintf("198.51.100.%d", 10+n%200) }

// Register installs the fake's responders for base on mt.
func (a *API) Register(mt *httpmock.MockTransport, base string) { a.srv.Register(mt, base) }

// suggestions are the suggestion defaults of the ApiError* schemas that
// require one (OpenAPI 1.8.3).
var suggestions = map[string]string{
	"global/invalid-api-key":                    "Check your API key or create a new one, then try again.",
	"global/account-inactive":                   "Make sure you have verified your email address and have a valid payment method. Contact Support if problems continue.",
	"global/internal-error":                     "Try again later. Contact Support if the problem persists.",
	"global/quota-exceeded":                     "Contact Support to increase your quota.",
	"global/invalid-address":                    "Make sure your billing address is valid. Contact Support if problems continue.",
	"global/object-does-not-exist":              "Check the identifier and try again.",
	"firewall-rulesets/firewall-ruleset-in-use": "Terminate all instances that are using the ruleset before deleting it.",
}

// apiErr answers {"error": {code, message, suggestion}}, the envelope of
// every ApiError* schema.
func apiErr(status int, code, msg, retryAfter string) *http.Response {
	sug, ok := suggestions[code]
	if !ok {
		sug = "Check the request and try again."
	}
	b, _ := json.Marshal(map[string]any{"error": map[string]string{"code": code, "message": msg, "suggestion": sug}})
	resp := httpmock.NewBytesResponse(status, b)
	resp.Header.Set("Content-Type", "application/json")
	if retryAfter != "" {
		resp.Header.Set("Retry-After", retryAfter)
	}
	return resp
}

func data(v any) *http.Response {
	b, _ := json.Marshal(map[string]any{"data": v})
	resp := httpmock.NewBytesResponse(200, b)
	resp.Header.Set("Content-Type", "application/json")
	return resp
}

func (a *API) route(method, path string, query url.Values, body []byte) *http.Response {
	switch {
	case method == http.MethodGet && path == "/instance-types":
		return a.instanceTypes()
	case method == http.MethodGet && path == "/instances":
		return a.list()
	case method == http.MethodGet && strings.HasPrefix(path, "/instances/"):
		id := strings.TrimPrefix(path, "/instances/")
		if in, ok := a.instances[id]; ok {
			return data(a.wire(in))
		}
		return apiErr(404, "global/object-does-not-exist", "Specified instance does not exist.", "")
	case method == http.MethodPost && path == "/instance-operations/launch":
		return a.launch(body)
	case method == http.MethodPost && path == "/instance-operations/terminate":
		return a.terminate(body)
	case method == http.MethodGet && path == "/ssh-keys":
		out := []map[string]string{}
		for id, k := range a.keys {
			out = append(out, map[string]string{"id": id, "name": k["name"], "public_key": k["public_key"]})
		}
		return data(out)
	case method == http.MethodPost && path == "/ssh-keys":
		var in map[string]string
		if json.Unmarshal(body, &in) != nil || in["name"] == "" || len(in["name"]) > 64 {
			return apiErr(400, "global/invalid-parameters", "Invalid request data.", "")
		}
		for _, k := range a.keys {
			if k["name"] == in["name"] {
				return apiErr(400, "global/invalid-parameters", "An SSH key with this name already exists.", "")
			}
		}
		a.seq++
		id := fmt.Sprintf("key%04d", a.seq)
		a.keys[id] = map[string]string{"name": in["name"], "public_key": in["public_key"]}
		return data(map[string]string{"id": id, "name": in["name"], "public_key": in["public_key"]})
	case method == http.MethodDelete && strings.HasPrefix(path, "/ssh-keys/"):
		id := strings.TrimPrefix(path, "/ssh-keys/")
		if _, ok := a.keys[id]; !ok {
			// deleteSSHKey documents 400 ApiErrorInvalidParameters and no 404.
			return apiErr(400, "global/invalid-parameters", "Invalid request data.", "")
		}
		delete(a.keys, id)
		return data(map[string]any{})
	case method == http.MethodGet && path == "/firewall-rulesets":
		out := []map[string]any{}
		for id := range a.rulesets {
			out = append(out, a.ruleset(id))
		}
		return data(out)
	case method == http.MethodPost && path == "/firewall-rulesets":
		var in map[string]any
		if json.Unmarshal(body, &in) != nil || in["name"] == nil || in["region"] == nil || !validRules(in["rules"]) {
			return apiErr(400, "global/invalid-parameters", "Invalid request data.", "")
		}
		if name, _ := in["name"].(string); len(name) > 64 { // FirewallRulesetCreateRequest.name: maxLength 64
			return apiErr(400, "global/invalid-parameters", "Invalid request data.", "")
		}
		a.seq++
		id := fmt.Sprintf("rs%04d", a.seq)
		a.rulesets[id] = in
		return data(a.ruleset(id))
	case method == http.MethodDelete && strings.HasPrefix(path, "/firewall-rulesets/"):
		id := strings.TrimPrefix(path, "/firewall-rulesets/")
		if _, ok := a.rulesets[id]; !ok {
			return apiErr(404, "global/object-does-not-exist", "Firewall ruleset does not exist.", "")
		}
		if len(a.usersOf(id)) > 0 {
			return apiErr(400, "firewall-rulesets/firewall-ruleset-in-use", "Firewall ruleset is in use by one or more instances.", "")
		}
		delete(a.rulesets, id)
		return data(map[string]any{})
	case method == http.MethodGet && path == "/audit-events":
		return a.auditEvents(query)
	}
	return apiErr(404, "global/not-found", "The requested resource was not found.", "")
}

// auditEvents answers getAuditEvents: {"data": AuditEventsPage}, where the
// page is {"events": [...], "page_token": string or null} (OpenAPI 1.8.3).
// The page token is the offset of the next page.
func (a *API) auditEvents(q url.Values) *http.Response {
	size := a.AuditPageSize
	if size <= 0 {
		size = 100
	}
	from := 0
	if t := q.Get("page_token"); t != "" {
		n, err := strconv.Atoi(t)
		if err != nil || n < 0 || n > len(a.Audit) {
			return apiErr(400, "global/invalid-parameters", "Invalid request data.", "")
		}
		from = n
	}
	var events []map[string]any
	for i, e := range a.Audit[from:min(from+size, len(a.Audit))] {
		if rt := q.Get("resource_type"); rt == "" || e["service_name"] == nil || rt == fmt.Sprint(e["service_name"], ".", e["resource_name"]) {
			events = append(events, auditEvent(e, from+i))
		}
	}
	if events == nil {
		events = []map[string]any{}
	}
	var next any
	if from+size < len(a.Audit) {
		next = strconv.Itoa(from + size)
	}
	return data(map[string]any{"events": events, "page_token": next})
}

// auditEvent is e with the fields AuditEvent requires that e leaves out.
func auditEvent(e map[string]any, n int) map[string]any {
	out := map[string]any{"service_name": "cloud", "resource_name": "instance", "action": "created", "catalog_version": "2025-09-06",
		"event_id": fmt.Sprintf("%032x", n+1), "event_time": "2026-01-01T00:00:00Z", "actor_lrn": nil, "resource_lrns": []string{},
		"resource_owner_lrn": nil, "request_api_key_lrn": nil, "additional_details": map[string]any{}}
	for k, v := range e {
		out[k] = v
	}
	return out
}

// validRules checks a ruleset's rules as FirewallRule does: protocol in the
// NetworkProtocol enum (tcp, udp, icmp, all; lower case), a [min, max]
// port range for all but icmp, and a source_network of "format":
// "ipv4network", an IPv4 address with an optional mask ("If no mask is
// provided, the API assumes /32").
func validRules(v any) bool {
	rules, ok := v.([]any)
	if !ok {
		return false
	}
	for _, r := range rules {
		m, ok := r.(map[string]any)
		if !ok {
			return false
		}
		proto, _ := m["protocol"].(string)
		if !slices.Contains([]string{"tcp", "udp", "icmp", "all"}, proto) {
			return false
		}
		pr, _ := m["port_range"].([]any)
		if proto != "icmp" && len(pr) != 2 {
			return false
		}
		if src, _ := m["source_network"].(string); !ipv4Network(src) {
			return false
		}
	}
	return true
}

// ipv4Network reports whether s is an IPv4 address, or an IPv4 network
// with its mask (FirewallRule.source_network).
func ipv4Network(s string) bool {
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Is4()
	}
	pfx, err := netip.ParsePrefix(s)
	return err == nil && pfx.Addr().Is4()
}

// ruleset is a FirewallRuleset: id, name, region, rules, created,
// instance_ids.
func (a *API) ruleset(id string) map[string]any {
	r := a.rulesets[id]
	return map[string]any{"id": id, "name": r["name"], "region": region(r["region"].(string)), "rules": r["rules"],
		"created": "2026-01-01T00:00:00Z", "instance_ids": a.usersOf(id)}
}

// region is a Region: name and description.
func region(name string) map[string]string {
	return map[string]string{"name": name, "description": name}
}

// usersOf returns the instances not terminated that use the ruleset:
// those whose DELETE /firewall-rulesets/{id} is refused as in use.
func (a *API) usersOf(rulesetID string) []string {
	out := []string{}
	for id, in := range a.instances {
		if in.Status != "terminated" && slices.Contains(in.Rulesets, rulesetID) {
			out = append(out, id)
		}
	}
	return out
}

func (a *API) instanceTypes() *http.Response {
	out := map[string]any{}
	for _, t := range a.types {
		regions := []map[string]string{}
		for _, r := range t.Regions {
			regions = append(regions, region(r))
		}
		out[t.Name] = map[string]any{"instance_type": t.wire(), "regions_with_capacity_available": regions}
	}
	return data(out)
}

// wire is the type as InstanceType.
func (t Type) wire() map[string]any {
	return map[string]any{"name": t.Name, "description": t.GPUDescription, "gpu_description": t.GPUDescription,
		"price_cents_per_hour": t.PriceCents, "specs": map[string]int{"gpus": t.GPUs, "vcpus": t.VCPUs, "memory_gib": t.MemoryGiB, "storage_gib": 512}}
}

func (a *API) list() *http.Response {
	out := []map[string]any{}
	ids := make([]string, 0, len(a.instances))
	for id := range a.instances {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		in := a.instances[id]
		if in.Status == "booting" && in.lists >= a.BootLists {
			in.Status, in.IP = "active", ipOf(len(a.instances)+len(a.gone))
		}
		out = append(out, a.wire(in))
		switch in.Status {
		case "booting":
			in.lists++
		case "terminating":
			delete(a.instances, id)
			a.gone[id] = true
		}
	}
	return data(out)
}

func (a *API) wire(in *Instance) map[string]any {
	tags := []map[string]string{}
	keys := make([]string, 0, len(in.Tags))
	for k := range in.Tags {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		tags = append(tags, map[string]string{"key": k, "value": in.Tags[k]})
	}
	rs := []map[string]string{}
	for _, id := range in.Rulesets {
		rs = append(rs, map[string]string{"id": id})
	}
	typ := Type{Name: in.Type}
	for _, t := range a.types {
		if t.Name == in.Type {
			typ = t
		}
	}
	w := map[string]any{"id": in.ID, "name": in.Name, "status": in.Status, "ssh_key_names": in.SSHKeyNames,
		"region": region(in.Region), "instance_type": typ.wire(), "tags": tags, "firewall_rulesets": rs,
		"file_system_names": []string{}, "actions": actions(in.Status)}
	if in.IP != "" { // Instance.ip is a string: absent until the instance has one
		w["ip"] = in.IP
	}
	return w
}

// actions is an InstanceActionAvailability: every action is available
// to an active instance only.
func actions(status string) map[string]any {
	out := map[string]any{}
	for _, act := range []string{"migrate", "rebuild", "restart", "cold_reboot", "terminate"} {
		if status == "active" || (act == "terminate" && status != "terminating") {
			out[act] = map[string]any{"available": true}
			continue
		}
		reason := "vm-has-not-launched"
		if status == "terminating" {
			reason = "vm-is-terminating"
		}
		out[act] = map[string]any{"available": false, "reason_code": reason, "reason_description": "The instance is " + status + "."}
	}
	return out
}

func (a *API) launch(body []byte) *http.Response {
	var in struct {
		RegionName       string              `json:"region_name"`
		InstanceTypeName string              `json:"instance_type_name"`
		SSHKeyNames      []string            `json:"ssh_key_names"`
		Name             string              `json:"name"`
		UserData         string              `json:"user_data"`
		Tags             []map[string]string `json:"tags"`
		FirewallRulesets []map[string]string `json:"firewall_rulesets"`
	}
	if json.Unmarshal(body, &in) != nil || in.RegionName == "" || in.InstanceTypeName == "" || len(in.SSHKeyNames) != 1 || len(in.Name) > 64 {
		return apiErr(400, "global/invalid-parameters", "Invalid request data.", "")
	}
	found := false
	for _, t := range a.types {
		if t.Name == in.InstanceTypeName {
			found = true
			if !slices.Contains(t.Regions, in.RegionName) {
				return apiErr(400, "instance-operations/launch/insufficient-capacity", "Not enough capacity to fulfill launch request.", "")
			}
		}
	}
	if !found {
		return apiErr(404, "global/object-does-not-exist", "Instance type does not exist.", "")
	}
	if !slices.ContainsFunc(a.keyNames(), func(n string) bool { return n == in.SSHKeyNames[0] }) {
		return apiErr(404, "global/object-does-not-exist", "SSH key does not exist.", "")
	}
	inst := &Instance{Name: in.Name, Status: "booting", Region: in.RegionName, Type: in.InstanceTypeName,
		UserData: in.UserData, SSHKeyNames: in.SSHKeyNames, Tags: map[string]string{}}
	for _, t := range in.Tags {
		inst.Tags[t["key"]] = t["value"]
	}
	for _, r := range in.FirewallRulesets {
		rs, ok := a.rulesets[r["id"]]
		if !ok {
			return apiErr(404, "global/object-does-not-exist", "Firewall ruleset does not exist.", "")
		}
		if rs["region"] != in.RegionName {
			return apiErr(400, "global/invalid-parameters", "Firewall ruleset is in another region.", "")
		}
		inst.Rulesets = append(inst.Rulesets, r["id"])
	}
	a.seq++
	inst.ID = fmt.Sprintf("%032x", a.seq)
	a.instances[inst.ID] = inst
	return data(map[string][]string{"instance_ids": {inst.ID}})
}

// keyNames is SSHKeys for callers holding the lock.
func (a *API) keyNames() []string {
	var out []string
	for _, k := range a.keys {
		out = append(out, k["name"])
	}
	slices.Sort(out)
	return out
}

func (a *API) terminate(body []byte) *http.Response {
	var in struct {
		InstanceIDs []string `json:"instance_ids"`
	}
	if json.Unmarshal(body, &in) != nil || len(in.InstanceIDs) == 0 {
		return apiErr(400, "global/invalid-parameters", "Invalid request data.", "")
	}
	for _, id := range in.InstanceIDs {
		if _, ok := a.instances[id]; !ok {
			return apiErr(404, "global/object-does-not-exist", "Specified instance does not exist.", "")
		}
	}
	var out []map[string]any
	for _, id := range in.InstanceIDs {
		a.instances[id].Status = "terminating"
		out = append(out, a.wire(a.instances[id]))
	}
	return data(map[string]any{"terminated_instances": out})
}
