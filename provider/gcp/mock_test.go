package gcp_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"cloud.google.com/go/compute/apiv1/computepb"
	"github.com/jarcoal/httpmock"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/org/gpuprov/provider/gcp"
)

const (
	project  = "proj-test"
	endpoint = "https://gce.test"
)

// request is one call the mock received.
type request struct {
	Method, Path string
	Query        map[string][]string
	Body         []byte
	Auth         string
}

// opFault is an operation error an insert in a zone ends with.
type opFault struct {
	Code, Message, QuotaMetric string
	HTTP                       int32
}

// apiFault is a synchronous error answer.
type apiFault struct {
	Status          int
	Reason, Message string
}

// cloud is a small stateful fake of the Compute Engine API: instances
// inserted are listed, read and deleted; firewalls are inserted, read,
// replaced and deleted; resource policies are inserted, read and deleted, and refused
// deletion while an instance names them; every mutation returns an
// operation that the operations endpoints serve. It runs behind an
// httpmock transport.
type cloud struct {
	t  *testing.T
	mu sync.Mutex

	instances map[string]map[string]*computepb.Instance // zone → name → instance
	firewalls map[string]*computepb.Firewall
	policies  map[string]*computepb.ResourcePolicy // region/name → policy
	ops       map[string]*computepb.Operation
	zoneOps   map[string][]*computepb.Operation // zone → system events
	requestID map[string]*computepb.Operation   // insert requestId → its operation
	lagging   map[uint64]int                    // instance id → lists it is still missing from
	deleting  map[uint64]bool
	nextID    uint64
	nextOp    int

	// autoRun makes every list advance the world: provisioning instances
	// run, deleted ones vanish.
	autoRun bool
	// lag hides a new instance from this many lists.
	lag int
	// insertFaults[zone] makes the next inserts in zone fail (popped in order).
	insertFaults map[string][]opFault
	// policyFaults makes the next resource policy inserts or deletes that
	// reach an operation end in these errors (popped in order), changing
	// nothing.
	policyFaults []opFault
	// syncFaults[method path-suffix] answers the next such calls with errors.
	syncFaults map[string][]apiFault
	// acceleratorZones answers aggregated acceleratorTypes; nil answers 500.
	acceleratorZones map[string][]string
	// notOffered["zone/type"] refuses an insert naming that machine or
	// accelerator type in that zone as Compute Engine does: before any
	// operation, 400 invalid (see notOfferedAnswer).
	notOffered map[string]bool
	// echoAuth answers every call with this status and a body echoing the
	// request's Authorization header, as some proxies do; 0 is off.
	echoAuth int
	// capacity holds the project's reservations and quotas (mock_capacity_test.go).
	capacity capacity

	requests []request
}

func newCloud(t *testing.T) (*cloud, *httpmock.MockTransport) {
	c := &cloud{t: t, instances: map[string]map[string]*computepb.Instance{}, firewalls: map[string]*computepb.Firewall{},
		ops: map[string]*computepb.Operation{}, zoneOps: map[string][]*computepb.Operation{}, requestID: map[string]*computepb.Operation{},
		lagging: map[uint64]int{}, deleting: map[uint64]bool{}, nextID: 7000000000000000001, policies: map[string]*computepb.ResourcePolicy{},
		insertFaults: map[string][]opFault{}, syncFaults: map[string][]apiFault{}, notOffered: map[string]bool{}}
	mt := httpmock.NewMockTransport()
	mt.RegisterNoResponder(c.serve)
	return c, mt
}

// provider builds an adapter on the mock.
func (c *cloud) provider(t *testing.T, mt *httpmock.MockTransport, cfg gcp.Config, opts ...gcp.Option) *gcp.Provider {
	t.Helper()
	if cfg.Project == "" {
		cfg.Project = project
	}
	opts = append([]gcp.Option{gcp.WithInstallation(installation), gcp.WithEndpoint(endpoint, &http.Client{Transport: mt})}, opts...)
	p, err := gcp.New(cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

var (
	labelClause = regexp.MustCompile(`labels\.([a-z0-9_-]+) = "([^"]*)"`)
	targetIDRE  = regexp.MustCompile(`targetId = (\d+)`)
)

func (c *cloud) serve(req *http.Request) (*http.Response, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var body []byte
	if req.Body != nil {
		body, _ = io.ReadAll(req.Body)
	}
	c.requests = append(c.requests, request{Method: req.Method, Path: req.URL.Path, Query: req.URL.Query(), Body: body,
		Auth: req.Header.Get("Authorization")})
	if c.echoAuth != 0 {
		reason := "backendError"
		if c.echoAuth == http.StatusUnauthorized {
			reason = "authError"
		}
		return apiErr(c.echoAuth, reason, "upstream refused the request with Authorization: "+req.Header.Get("Authorization")), nil
	}
	prefix := "/compute/v1/projects/"
	if !strings.HasPrefix(req.URL.Path, prefix) {
		return apiErr(404, "notFound", "no such path "+req.URL.Path), nil
	}
	parts := strings.Split(strings.TrimPrefix(req.URL.Path, prefix), "/")
	if len(parts) >= 5 && parts[1] == "global" && parts[2] == "images" && parts[3] == "family" {
		return c.imageFamily(parts[0], parts[4]), nil
	}
	if parts[0] != project {
		return apiErr(403, "forbidden", "wrong project "+parts[0]), nil
	}
	route := req.Method + " " + strings.Join(parts[1:], "/")
	for key, fs := range c.syncFaults {
		if len(fs) > 0 && strings.HasPrefix(route, key) {
			c.syncFaults[key] = fs[1:]
			return apiErr(fs[0].Status, fs[0].Reason, fs[0].Message), nil
		}
	}
	if r := c.serveCapacity(req.Method, parts[1:]); r != nil {
		return r, nil
	}
	switch p := parts[1:]; {
	case req.Method == "POST" && len(p) == 2 && p[0] == "global" && p[1] == "firewalls":
		return c.insertFirewall(body), nil
	case req.Method == "GET" && len(p) == 3 && p[0] == "global" && p[1] == "firewalls":
		fw, ok := c.firewalls[p[2]]
		if !ok {
			return apiErr(404, "notFound", fmt.Sprintf("The resource 'projects/%s/global/firewalls/%s' was not found", project, p[2])), nil
		}
		return msg(fw), nil
	case req.Method == "PUT" && len(p) == 3 && p[0] == "global" && p[1] == "firewalls":
		return c.updateFirewall(p[2], body), nil
	case req.Method == "DELETE" && len(p) == 3 && p[1] == "firewalls":
		if _, ok := c.firewalls[p[2]]; !ok {
			return apiErr(404, "notFound", fmt.Sprintf("The resource 'projects/%s/global/firewalls/%s' was not found", project, p[2])), nil
		}
		delete(c.firewalls, p[2])
		return msg(c.newOp("", "delete", 0, nil)), nil
	case req.Method == "GET" && len(p) == 3 && p[0] == "global" && p[1] == "operations":
		return c.getOp(p[2]), nil
	case len(p) >= 3 && p[0] == "regions" && p[2] == "resourcePolicies":
		return c.resourcePolicies(req.Method, p[1], p[3:], body), nil
	case req.Method == "GET" && len(p) == 4 && p[0] == "regions" && p[2] == "operations":
		return c.getOp(p[3]), nil
	case req.Method == "GET" && len(p) == 2 && p[0] == "aggregated" && p[1] == "instances":
		return c.aggregated(req.URL.Query().Get("filter")), nil
	case req.Method == "GET" && len(p) == 2 && p[0] == "aggregated" && p[1] == "acceleratorTypes":
		return c.accelerators(), nil
	case len(p) >= 3 && p[0] == "zones" && p[2] == "instances":
		return c.zoneInstances(req, p[1], p[3:], body), nil
	case req.Method == "GET" && len(p) == 4 && p[0] == "zones" && p[2] == "operations":
		return c.getOp(p[3]), nil
	case req.Method == "GET" && len(p) == 3 && p[0] == "zones" && p[2] == "operations":
		return c.listZoneOps(p[1], req.URL.Query().Get("filter")), nil
	}
	return apiErr(404, "notFound", "no route "+route), nil
}

func (c *cloud) imageFamily(proj, family string) *http.Response {
	if family == "no-such-family" {
		return apiErr(404, "notFound", fmt.Sprintf("The resource 'projects/%s/global/images/family/%s' was not found", proj, family))
	}
	name := family + "-v20261101"
	return msg(&computepb.Image{Name: &name, Family: &family,
		SelfLink: proto.String(endpoint + "/compute/v1/projects/" + proj + "/global/images/" + name)})
}

func (c *cloud) insertFirewall(body []byte) *http.Response {
	var fw computepb.Firewall
	if err := protojson.Unmarshal(body, &fw); err != nil {
		return apiErr(400, "invalid", err.Error())
	}
	if _, ok := c.firewalls[fw.GetName()]; ok {
		return apiErr(409, "alreadyExists", fmt.Sprintf("The resource 'projects/%s/global/firewalls/%s' already exists", project, fw.GetName()))
	}
	c.firewalls[fw.GetName()] = &fw
	return msg(c.newOp("", "insert", 0, nil))
}

// updateFirewall serves firewalls.update (PUT global/firewalls/{firewall}):
// the body replaces the rule whole, its name must stay (the discovery
// document's firewalls.update: "all fields will be updated if using PUT,
// even fields that are not specified").
func (c *cloud) updateFirewall(name string, body []byte) *http.Response {
	if _, ok := c.firewalls[name]; !ok {
		return apiErr(404, "notFound", fmt.Sprintf("The resource 'projects/%s/global/firewalls/%s' was not found", project, name))
	}
	var fw computepb.Firewall
	if err := protojson.Unmarshal(body, &fw); err != nil {
		return apiErr(400, "invalid", err.Error())
	}
	if fw.GetName() != name {
		return apiErr(400, "invalid", fmt.Sprintf("Invalid value for field 'resource.name': '%s'. The name cannot be changed.", fw.GetName()))
	}
	c.firewalls[name] = &fw
	return msg(c.newOp("", "update", 0, nil))
}

func (c *cloud) zoneInstances(req *http.Request, zone string, rest []string, body []byte) *http.Response {
	switch {
	case req.Method == "POST" && len(rest) == 0:
		return c.insert(zone, req.URL.Query().Get("requestId"), body)
	case req.Method == "GET" && len(rest) == 0:
		c.tick()
		var out []*computepb.Instance
		for _, in := range c.visible(zone) {
			if matches(in, req.URL.Query().Get("filter")) {
				out = append(out, in)
			}
		}
		return msg(&computepb.InstanceList{Items: out})
	case req.Method == "GET" && len(rest) == 1:
		in, ok := c.instances[zone][rest[0]]
		if !ok {
			return apiErr(404, "notFound", fmt.Sprintf("The resource 'projects/%s/zones/%s/instances/%s' was not found", project, zone, rest[0]))
		}
		return msg(in)
	case req.Method == "DELETE" && len(rest) == 1:
		in, ok := c.instances[zone][rest[0]]
		if !ok {
			return apiErr(404, "notFound", fmt.Sprintf("The resource 'projects/%s/zones/%s/instances/%s' was not found", project, zone, rest[0]))
		}
		in.Status = proto.String("STOPPING")
		c.deleting[in.GetId()] = true
		return msg(c.newOp(zone, "delete", in.GetId(), nil))
	}
	return apiErr(404, "notFound", "no route")
}

func (c *cloud) insert(zone, requestID string, body []byte) *http.Response {
	if op, ok := c.requestID[requestID]; ok && requestID != "" {
		return msg(op) // a replayed request: the same operation, nothing new
	}
	var in computepb.Instance
	if err := protojson.Unmarshal(body, &in); err != nil {
		return apiErr(400, "invalid", err.Error())
	}
	if r := c.notOfferedAnswer(zone, &in); r != nil {
		return r
	}
	for _, rp := range in.GetResourcePolicies() {
		if _, ok := c.policies[policyKey(rp)]; !ok {
			return apiErr(404, "notFound", fmt.Sprintf("The resource '%s' was not found", rp))
		}
	}
	if r := c.consumeReservation(zone, requestID, &in); r != nil {
		return r
	}
	if fs := c.insertFaults[zone]; len(fs) > 0 {
		c.insertFaults[zone] = fs[1:]
		op := c.newOp(zone, "insert", 0, &fs[0])
		c.requestID[requestID] = op
		return msg(op)
	}
	if _, ok := c.instances[zone][in.GetName()]; ok {
		return apiErr(409, "alreadyExists", fmt.Sprintf("The resource 'projects/%s/zones/%s/instances/%s' already exists", project, zone, in.GetName()))
	}
	id := c.nextID
	c.nextID++
	in.Id = proto.Uint64(id)
	in.Zone = proto.String(endpoint + "/compute/v1/projects/" + project + "/zones/" + zone)
	in.Status = proto.String("PROVISIONING")
	in.CreationTimestamp = proto.String("2026-03-01T12:00:00.000-07:00")
	in.MachineType = proto.String(endpoint + "/compute/v1/projects/" + project + "/" + in.GetMachineType())
	for i, nic := range in.GetNetworkInterfaces() {
		nic.NetworkIP = proto.String(fmt.Sprintf("10.128.0.%d", id%200+uint64(i)))
	}
	if c.instances[zone] == nil {
		c.instances[zone] = map[string]*computepb.Instance{}
	}
	c.instances[zone][in.GetName()] = &in
	c.lagging[id] = c.lag
	op := c.newOp(zone, "insert", id, nil)
	if in.GetScheduling().GetProvisioningModel() == "FLEX_START" {
		// A Flex-start VM waits for capacity: status PENDING ("waiting for
		// available capacity from Dynamic Workload Scheduler", discovery
		// document Instance.status), its insert operation RUNNING until
		// grantFlex.
		in.Status = proto.String("PENDING")
		op.Status = computepb.Operation_RUNNING.Enum()
	}
	c.requestID[requestID] = op
	return msg(op)
}

// grantFlex gives capacity to every queued Flex-start VM: PENDING becomes
// PROVISIONING (booting; settle then runs it) and its insert operation
// DONE.
func (c *cloud) grantFlex() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range c.instances {
		for _, in := range m {
			if in.GetStatus() != "PENDING" {
				continue
			}
			in.Status = proto.String("PROVISIONING")
			for _, op := range c.ops {
				if op.GetTargetId() == in.GetId() && op.GetOperationType() == "insert" {
					op.Status = computepb.Operation_DONE.Enum()
				}
			}
		}
	}
}

// notOfferedAnswer is Compute Engine's answer to an insert naming a
// machine or accelerator type the zone does not offer: no operation, HTTP
// 400, reason "invalid", and the message gcloud compute instances create
// matches (google-cloud-sdk lib/surface/compute/instances/create.py):
// "Invalid value for field 'resource.machineType': '<as sent>'. Machine type
// with name '<name>' does not exist in zone '<zone>'.", the same for
// resource.guestAccelerators[i].acceleratorType.
func (c *cloud) notOfferedAnswer(zone string, in *computepb.Instance) *http.Response {
	if mt := in.GetMachineType(); c.notOffered[zone+"/"+lastSegment(mt)] {
		return apiErr(400, "invalid", fmt.Sprintf("Invalid value for field 'resource.machineType': '%s'. "+
			"Machine type with name '%s' does not exist in zone '%s'.", mt, lastSegment(mt), zone))
	}
	for i, a := range in.GetGuestAccelerators() {
		if at := a.GetAcceleratorType(); c.notOffered[zone+"/"+lastSegment(at)] {
			return apiErr(400, "invalid", fmt.Sprintf("Invalid value for field 'resource.guestAccelerators[%d].acceleratorType': '%s'. "+
				"Accelerator type '%s' does not exist in zone '%s'.", i, at, lastSegment(at), zone))
		}
	}
	return nil
}

func lastSegment(s string) string { return s[strings.LastIndexByte(s, '/')+1:] }

// newOp records a finished operation, failed with f if set.
func (c *cloud) newOp(zone, kind string, target uint64, f *opFault) *computepb.Operation {
	c.nextOp++
	op := &computepb.Operation{Name: proto.String(fmt.Sprintf("operation-%d", c.nextOp)), OperationType: proto.String(kind),
		Status: computepb.Operation_DONE.Enum()}
	if zone != "" {
		op.Zone = proto.String(endpoint + "/compute/v1/projects/" + project + "/zones/" + zone)
	}
	if target != 0 {
		op.TargetId = proto.Uint64(target)
	}
	if f != nil {
		e := &computepb.Errors{Code: proto.String(f.Code), Message: proto.String(f.Message)}
		if f.QuotaMetric != "" {
			e.ErrorDetails = []*computepb.ErrorDetails{{QuotaInfo: &computepb.QuotaExceededInfo{
				MetricName: proto.String(f.QuotaMetric), Limit: proto.Float64(0)}}}
		}
		op.Error = &computepb.Error{Errors: []*computepb.Errors{e}}
		op.HttpErrorStatusCode = proto.Int32(f.HTTP)
		op.HttpErrorMessage = proto.String(http.StatusText(int(f.HTTP)))
	}
	c.ops[op.GetName()] = op
	return op
}

func (c *cloud) getOp(name string) *http.Response {
	op, ok := c.ops[name]
	if !ok {
		return apiErr(404, "notFound", "no operation "+name)
	}
	return msg(op)
}

func (c *cloud) aggregated(filter string) *http.Response {
	c.tick()
	items := map[string]*computepb.InstancesScopedList{}
	for zone := range c.instances {
		var ins []*computepb.Instance
		for _, in := range c.visible(zone) {
			if matches(in, filter) {
				ins = append(ins, in)
			}
		}
		if len(ins) > 0 {
			items["zones/"+zone] = &computepb.InstancesScopedList{Instances: ins}
		}
	}
	return msg(&computepb.InstanceAggregatedList{Items: items})
}

func (c *cloud) accelerators() *http.Response {
	if c.acceleratorZones == nil {
		return apiErr(500, "backendError", "try again")
	}
	items := map[string]*computepb.AcceleratorTypesScopedList{}
	for accel, zones := range c.acceleratorZones {
		for _, z := range zones {
			l := items["zones/"+z]
			if l == nil {
				l = &computepb.AcceleratorTypesScopedList{}
				items["zones/"+z] = l
			}
			l.AcceleratorTypes = append(l.AcceleratorTypes, &computepb.AcceleratorType{Name: proto.String(accel),
				Zone: proto.String(endpoint + "/compute/v1/projects/" + project + "/zones/" + z)})
		}
	}
	return msg(&computepb.AcceleratorTypeAggregatedList{Items: items})
}

func (c *cloud) listZoneOps(zone, filter string) *http.Response {
	m := targetIDRE.FindStringSubmatch(filter)
	var out []*computepb.Operation
	for _, op := range c.zoneOps[zone] {
		if m == nil || strconv.FormatUint(op.GetTargetId(), 10) == m[1] {
			out = append(out, op)
		}
	}
	return msg(&computepb.OperationList{Items: out})
}

// visible returns the instances of zone a list shows, in name order,
// counting down the lag of new ones.
func (c *cloud) visible(zone string) []*computepb.Instance {
	var out []*computepb.Instance
	for _, in := range c.instances[zone] {
		if n := c.lagging[in.GetId()]; n > 0 {
			c.lagging[in.GetId()] = n - 1
			continue
		}
		out = append(out, in)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetName() < out[j].GetName() })
	return out
}

// tick advances the world one step when autoRun is set.
func (c *cloud) tick() {
	if c.autoRun {
		c.settleLocked()
	}
}

// settle runs every provisioning instance and removes every deleted one.
func (c *cloud) settle() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.settleLocked()
}

func (c *cloud) settleLocked() {
	for zone, m := range c.instances {
		for name, in := range m {
			switch {
			case c.deleting[in.GetId()]:
				delete(m, name)
			case in.GetStatus() == "PROVISIONING":
				in.Status = proto.String("RUNNING")
				for _, nic := range in.GetNetworkInterfaces() {
					for _, ac := range nic.GetAccessConfigs() {
						ac.NatIP = proto.String(fmt.Sprintf("34.1.%d.%d", len(zone)%250, in.GetId()%250))
					}
				}
			}
		}
	}
}

// live returns every instance left, of any status.
func (c *cloud) live() []*computepb.Instance {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*computepb.Instance
	for _, m := range c.instances {
		for _, in := range m {
			out = append(out, in)
		}
	}
	return out
}

// firewall returns a copy of the rule name, or nil.
func (c *cloud) firewall(name string) *computepb.Firewall {
	c.mu.Lock()
	defer c.mu.Unlock()
	fw, ok := c.firewalls[name]
	if !ok {
		return nil
	}
	return proto.Clone(fw).(*computepb.Firewall)
}

func (c *cloud) firewallNames() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for n := range c.firewalls {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// setStatus changes an instance's status by id.
func (c *cloud) setStatus(id, status, message string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range c.instances {
		for _, in := range m {
			if strconv.FormatUint(in.GetId(), 10) == id {
				in.Status = proto.String(status)
				if message != "" {
					in.StatusMessage = proto.String(message)
				}
			}
		}
	}
}

// calls returns the requests whose "METHOD path" contains substr.
func (c *cloud) calls(substr string) []request {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []request
	for _, r := range c.requests {
		if strings.Contains(r.Method+" "+r.Path, substr) {
			out = append(out, r)
		}
	}
	return out
}

func matches(in *computepb.Instance, filter string) bool {
	for _, m := range labelClause.FindAllStringSubmatch(filter, -1) {
		if in.GetLabels()[m[1]] != m[2] {
			return false
		}
	}
	return true
}

func msg(m proto.Message) *http.Response {
	b, err := protojson.Marshal(m)
	if err != nil {
		panic(err)
	}
	return jsonResponse(200, b)
}

// apiErr is Compute Engine's synchronous error envelope, as documented
// (https://cloud.google.com/apis/design/errors#http_mapping, and the
// v1 API's error catalog https://cloud.google.com/compute/docs/reference/rest/v1/errors):
//
//	{"error":{"code":400,"message":"…","errors":[{"message":"…","domain":"global","reason":"invalid"}],"status":"INVALID_ARGUMENT"}}
func apiErr(status int, reason, message string) *http.Response {
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"code": status, "message": message,
		"errors": []map[string]string{{"message": message, "domain": errorDomain(reason), "reason": reason}},
		"status": rpcStatus(status)}})
	return jsonResponse(status, b)
}

// errorDomain is the legacy error item's domain: usageLimits for the rate
// and quota reasons, global for the rest.
func errorDomain(reason string) string {
	switch reason {
	case "rateLimitExceeded", "userRateLimitExceeded", "quotaExceeded", "accessNotConfigured":
		return "usageLimits"
	}
	return "global"
}

// rpcStatus is the google.rpc.Code name an HTTP status maps to in Google
// APIs' error model (https://cloud.google.com/apis/design/errors#handling_errors).
func rpcStatus(status int) string {
	switch status {
	case 400:
		return "INVALID_ARGUMENT"
	case 401:
		return "UNAUTHENTICATED"
	case 403:
		return "PERMISSION_DENIED"
	case 404:
		return "NOT_FOUND"
	case 409:
		return "ALREADY_EXISTS"
	case 412:
		return "FAILED_PRECONDITION"
	case 429:
		return "RESOURCE_EXHAUSTED"
	case 501:
		return "NOT_IMPLEMENTED"
	case 503:
		return "UNAVAILABLE"
	case 504:
		return "DEADLINE_EXCEEDED"
	}
	if status >= 500 {
		return "INTERNAL"
	}
	return "UNKNOWN"
}

func jsonResponse(status int, b []byte) *http.Response {
	return &http.Response{StatusCode: status, Status: fmt.Sprintf("%d %s", status, http.StatusText(status)),
		Header: http.Header{"Content-Type": {"application/json"}}, Body: io.NopCloser(bytes.NewReader(b))}
}
