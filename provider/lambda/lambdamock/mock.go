// Package lambdamock is a small stateful fake of the Lambda Cloud API for
// tests, served through an httpmock transport: instances launched are listed
// and terminated, SSH keys and firewall rulesets are created and deleted,
// and errors can be scripted per call. As Lambda does, it refuses to delete
// a firewall ruleset that an instance not yet terminated uses (400
// firewall-rulesets/firewall-ruleset-in-use) and to launch with a ruleset
// id it does not have (404 global/object-does-not-exist). Filesystems are
// listed, created and deleted, and mounted by the launches that name them
// (file_system_names, file_system_mounts): a filesystem an instance not yet
// terminated mounts is not deleted (400 filesystems/filesystem-in-use), a
// launch naming one of another region is refused (400
// instance-operations/launch/file-system-in-wrong-region). It checks the
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
	"regexp"
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
	Mounts                                       []Mount // the filesystems it mounts, in launch order
	lists                                        int     // list calls seen while booting
}

// Mount is a filesystem an instance mounts, and where.
type Mount struct {
	ID, Name, MountPoint string
}

// Filesystem is a filesystem of the fake.
type Filesystem struct {
	ID, Name, Region string
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
	fs        map[string]*Filesystem       // id → filesystem
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
		keys: map[string]map[string]string{}, rulesets: map[string]map[string]any{}, fs: map[string]*Filesystem{}, BootLists: 1}
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

// Filesystems returns copies of the filesystems, by id.
func (a *API) Filesystems() []Filesystem {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []Filesystem
	for _, f := range a.fs {
		out = append(out, *f)
	}
	slices.SortFunc(out, func(x, y Filesystem) int { return strings.Compare(x.ID, y.ID) })
	return out
}

// AddFilesystem makes a filesystem as another client of the account would
// (a user, another tool) and returns its id.
func (a *API) AddFilesystem(name, region string) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.addFilesystem(name, region)
}

func (a *API) addFilesystem(name, region string) string {
	a.seq++
	id := fmt.Sprintf("%032x", 0xf5<<24+a.seq)
	a.fs[id] = &Filesystem{ID: id, Name: name, Region: region}
	return id
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
	"filesystems/filesystem-in-use":             "Terminate the instances that mount the filesystem, then try again.", // the mock's own words: the schema has no default
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
	case method == http.MethodGet && path == "/file-systems":
		return a.filesystems()
	case method == http.MethodPost && path == "/filesystems":
		return a.createFilesystem(body)
	case method == http.MethodDelete && strings.HasPrefix(path, "/filesystems/"):
		return a.deleteFilesystem(strings.TrimPrefix(path, "/filesystems/"))
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
	names, mounts := []string{}, []map[string]string{}
	for _, m := range in.Mounts {
		names = append(names, m.Name)
		mounts = append(mounts, map[string]string{"file_system_id": m.ID, "mount_point": m.MountPoint})
	}
	w := map[string]any{"id": in.ID, "name": in.Name, "status": in.Status, "ssh_key_names": in.SSHKeyNames,
		"region": region(in.Region), "instance_type": typ.wire(), "tags": tags, "firewall_rulesets": rs,
		"file_system_names": names, "actions": actions(in.Status)}
	if in.IP != "" { // Instance.ip is a string: absent until the instance has one
		w["ip"] = in.IP
	}
	if len(mounts) > 0 { // Instance.file_system_mounts: "missing from the response" for none
		w["file_system_mounts"] = mounts
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
		FileSystemNames  []string            `json:"file_system_names"`
		FileSystemMounts []map[string]string `json:"file_system_mounts"`
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
	mounts, refused := a.launchMounts(in.RegionName, in.FileSystemNames, in.FileSystemMounts)
	if refused != nil {
		return refused
	}
	inst.Mounts = mounts
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

// Filesystem names and mount points as 1.8.3 constrains them:
// FilesystemCreateRequest.name (maxLength 60) and
// RequestedFilesystemMountEntry.mount_point (maxLength 256).
var (
	filesystemNameRE = regexp.MustCompile(`^[a-zA-Z]+[0-9a-zA-Z-]*$`)
	mountPointRE     = regexp.MustCompile(`^(/home|/lambda/nfs|/data)[//a-zA-Z0-9-]*$`)
)

// filesystems answers listFilesystems: {"data": [Filesystem]}, each with
// its default mount point, its creator and whether an instance mounts it.
func (a *API) filesystems() *http.Response {
	out := []map[string]any{}
	ids := make([]string, 0, len(a.fs))
	for id := range a.fs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		out = append(out, a.filesystem(a.fs[id]))
	}
	return data(out)
}

// filesystem is a Filesystem (bytes_used, which is optional, left out).
func (a *API) filesystem(f *Filesystem) map[string]any {
	return map[string]any{"id": f.ID, "name": f.Name, "mount_point": "/lambda/nfs/" + f.Name, "created": "2026-01-01T00:00:00Z",
		"created_by": map[string]string{"id": "0123456789abcdef0123456789abcdef", "email": "team@example.com", "status": "active"},
		"is_in_use":  len(a.mountedBy(f.ID)) > 0, "region": region(f.Region)}
}

// createFilesystem answers createFilesystem: a name of the pattern, in a
// region; a name the account has is 400 global/duplicate (names are the
// account's in the mock, whatever the region: 1.8.3 does not say).
func (a *API) createFilesystem(body []byte) *http.Response {
	var in struct {
		Name   string `json:"name"`
		Region string `json:"region"`
	}
	if json.Unmarshal(body, &in) != nil || len(in.Name) > 60 || !filesystemNameRE.MatchString(in.Name) || in.Region == "" {
		return apiErr(400, "global/invalid-parameters", "Invalid request data.", "")
	}
	for _, f := range a.fs {
		if f.Name == in.Name {
			return apiErr(400, "global/duplicate", "A filesystem with this name already exists.", "")
		}
	}
	return data(a.filesystem(a.fs[a.addFilesystem(in.Name, in.Region)]))
}

// deleteFilesystem answers filesystemDelete: 404 for an id the account
// does not have, 400 filesystems/filesystem-in-use while an instance not
// yet terminated (booting, active, terminating, ...) mounts it.
func (a *API) deleteFilesystem(id string) *http.Response {
	if _, ok := a.fs[id]; !ok {
		return apiErr(404, "global/object-does-not-exist", "Filesystem was not found.", "")
	}
	if len(a.mountedBy(id)) > 0 {
		return apiErr(400, "filesystems/filesystem-in-use", "Filesystem is in use by one or more instances.", "")
	}
	delete(a.fs, id)
	return data(map[string]any{"deleted_ids": []string{id}})
}

// mountedBy returns the instances not terminated that mount filesystem id.
func (a *API) mountedBy(id string) []string {
	var out []string
	for iid, in := range a.instances {
		if in.Status != "terminated" && slices.ContainsFunc(in.Mounts, func(m Mount) bool { return m.ID == id }) {
			out = append(out, iid)
		}
	}
	return out
}

// launchMounts resolves a launch's filesystems: every name of
// file_system_names at its default mount point (/lambda/nfs/<name>), then
// every entry of file_system_mounts at its mount point (which wins for a
// filesystem in both lists). A filesystem the account does not have is
// 404 global/object-does-not-exist, one of another region 400
// instance-operations/launch/file-system-in-wrong-region, a mount point
// outside the pattern 400 global/invalid-parameters.
func (a *API) launchMounts(regionName string, names []string, mounts []map[string]string) ([]Mount, *http.Response) {
	var out []Mount
	use := func(f *Filesystem, at string) *http.Response {
		if f == nil {
			return apiErr(404, "global/object-does-not-exist", "Filesystem does not exist.", "")
		}
		if f.Region != regionName {
			return apiErr(400, "instance-operations/launch/file-system-in-wrong-region", "Filesystem is in another region.", "")
		}
		if i := slices.IndexFunc(out, func(m Mount) bool { return m.ID == f.ID }); i >= 0 {
			out[i].MountPoint = at
			return nil
		}
		out = append(out, Mount{ID: f.ID, Name: f.Name, MountPoint: at})
		return nil
	}
	for _, n := range names {
		var found *Filesystem
		for _, f := range a.fs {
			if f.Name == n {
				found = f
			}
		}
		if found == nil {
			return nil, use(nil, "")
		}
		if r := use(found, "/lambda/nfs/"+n); r != nil {
			return nil, r
		}
	}
	for _, m := range mounts {
		at := m["mount_point"]
		if len(at) > 256 || !mountPointRE.MatchString(at) {
			return nil, apiErr(400, "global/invalid-parameters", "Invalid request data.", "")
		}
		if r := use(a.fs[m["file_system_id"]], at); r != nil {
			return nil, r
		}
	}
	return out, nil
}
