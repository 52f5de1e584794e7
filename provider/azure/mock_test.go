package azure_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jarcoal/httpmock"

	"github.com/org/gpuprov/clock"
	"github.com/org/gpuprov/provider/azure"
)

const (
	subscription = "0b1f6471-1bf0-4dda-aec3-111122223333"
	endpoint     = "https://management.azure.test"
	installation = "a1b2c3d4e5f60718"
)

// Resource types the mock serves.
const (
	typVM   = "Microsoft.Compute/virtualMachines"
	typDisk = "Microsoft.Compute/disks"
	typNIC  = "Microsoft.Network/networkInterfaces"
	typIP   = "Microsoft.Network/publicIPAddresses"
	typNSG  = "Microsoft.Network/networkSecurityGroups"
	typVNet = "Microsoft.Network/virtualNetworks"
)

// request is one call the mock received.
type request struct {
	Method, Path string
	Query        url.Values
	Header       http.Header
	Body         []byte
}

// fault is an error answer, synchronous (Status is the HTTP status) or
// the end of a long-running operation (Async). Body, when set, is the
// answer's body verbatim (a documented answer pasted as is), instead of
// the envelope {"error":{"code":Code,"message":Message}}.
type fault struct {
	Status     int
	Code       string
	Message    string
	RetryAfter string
	Async      bool
	Body       string
}

// res is one resource: its ARM JSON (as GET returns it) and, for a VM, its
// runtime state.
type res struct {
	typ, rg, name string
	obj           map[string]any

	// VM only.
	power      string // "", "starting", "running", "stopped", "deallocated"
	provState  string // "Creating", "Succeeded", "Failed", "Deleting"
	failCode   string
	failMsg    string
	customData string
	nicID      string
	diskName   string
	diskDelete bool
}

// operation is a long-running operation: its status URL answers
// InProgress for left more polls, then its terminal status, whose effect
// (done) is applied once.
type operation struct {
	id, status string
	left       int
	outcome    string // the terminal status: "Succeeded" or "Failed"
	code, msg  string
	done       func()
	finished   bool
}

// cloud is a stateful fake of the parts of Azure Resource Manager the
// adapter uses, answering as the ARM REST reference documents: the
// resource group PUT; PUT, GET and DELETE of virtual networks, network
// security groups, public IPs and NICs; PUT (with If-None-Match), GET
// ($expand=instanceView), list (paged by nextLink), instanceView and
// DELETE of VMs; every PUT answered 200/201 with an Azure-AsyncOperation
// header, every DELETE 202 with Azure-AsyncOperation and Location (204 for
// what is not there, 404 ResourceGroupNotFound for a missing group); the
// operation status documents {"status","error"} with Retry-After while
// InProgress; errors in the {"error":{"code","message"}} envelope. Deletes
// of network resources still in use are refused with the codes Azure uses.
// It runs behind an httpmock transport.
type cloud struct {
	t  *testing.T
	mu sync.Mutex

	rgs    map[string]map[string]any // lower(rg) → group
	res    map[string]*res           // lower(type/rg/name) → resource
	ops    map[string]*operation
	nextOp int
	nextIP int

	// autoRun makes every VM list advance the world: pending operations
	// end, starting VMs run.
	autoRun bool
	// opPolls is how many polls an operation answers InProgress first.
	opPolls int
	// pageSize pages VM lists.
	pageSize int
	// createFaults[region] are popped by the next VM creates in region.
	createFaults map[string][]fault
	// syncFaults["METHOD substring"] answer the next matching calls.
	syncFaults map[string][]fault
	// nicReserved is how many deletes of a NIC whose VM was just deleted
	// are refused with NicReservedForAnotherVm (Azure holds it 180 s).
	nicReserved int
	reserved    map[string]int
	// echoAuth answers every call with this status and a body echoing the
	// Authorization header, as some proxies do; 0 is off.
	echoAuth int
	// opsBroken answers every operation status poll 500.
	opsBroken bool
	// dropOnVMPut, when set, is a resource group the next VM PUT finds
	// deleted (with everything in it) just before it arrives.
	dropOnVMPut string

	// resGroups are the subscription's capacity reservation groups; usages
	// the Compute usages list per region (mock_capacity_test.go).
	resGroups []*group
	usages    map[string][]map[string]any

	requests []request
}

func newCloud(t *testing.T) (*cloud, *httpmock.MockTransport) {
	c := &cloud{t: t, rgs: map[string]map[string]any{}, res: map[string]*res{}, ops: map[string]*operation{},
		opPolls: 1, pageSize: 50, createFaults: map[string][]fault{}, syncFaults: map[string][]fault{}, reserved: map[string]int{}}
	mt := httpmock.NewMockTransport()
	mt.RegisterNoResponder(c.serve)
	return c, mt
}

// provider builds an adapter on the mock, with a fake clock that advances
// on its own, so operation waits never sleep.
func (c *cloud) provider(t *testing.T, mt *httpmock.MockTransport, cfg azure.Config, opts ...azure.Option) *azure.Provider {
	t.Helper()
	if cfg.SubscriptionID == "" {
		cfg.SubscriptionID = subscription
	}
	clk := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	t.Cleanup(clk.AutoAdvance())
	opts = append([]azure.Option{azure.WithInstallation(installation), azure.WithClock(clk),
		azure.WithEndpoint(endpoint, &http.Client{Transport: mt})}, opts...)
	p, err := azure.New(cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func key(typ, rg, name string) string { return strings.ToLower(typ + "/" + rg + "/" + name) }

func (c *cloud) resourceID(typ, rg, name string) string {
	return "/subscriptions/" + subscription + "/resourceGroups/" + rg + "/providers/" + typ + "/" + name
}

// respond builds an answer to req.
func respond(req *http.Request, status int, v any, hdr ...string) *http.Response {
	var b []byte
	if v != nil {
		b, _ = json.Marshal(v)
	}
	r := &http.Response{StatusCode: status, Status: fmt.Sprintf("%d %s", status, http.StatusText(status)),
		Header: http.Header{}, Body: io.NopCloser(bytes.NewReader(b)), ContentLength: int64(len(b)), Request: req,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}
	if v != nil {
		r.Header.Set("Content-Type", "application/json; charset=utf-8")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	return r
}

// answer is f's synchronous answer to req.
func (f fault) answer(req *http.Request) *http.Response {
	var hdr []string
	if f.RetryAfter != "" {
		hdr = []string{"Retry-After", f.RetryAfter}
	}
	if f.Body == "" {
		return armErr(req, f.Status, f.Code, f.Message, hdr...)
	}
	r := respond(req, f.Status, nil, hdr...)
	r.Header.Set("Content-Type", "application/json; charset=utf-8")
	r.Body, r.ContentLength = io.NopCloser(strings.NewReader(f.Body)), int64(len(f.Body))
	return r
}

// armErr is ARM's error envelope.
func armErr(req *http.Request, status int, code, msg string, hdr ...string) *http.Response {
	return respond(req, status, map[string]any{"error": map[string]any{"code": code, "message": msg}}, hdr...)
}

func (c *cloud) serve(req *http.Request) (*http.Response, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var body []byte
	if req.Body != nil {
		body, _ = io.ReadAll(req.Body)
	}
	c.requests = append(c.requests, request{Method: req.Method, Path: req.URL.Path, Query: req.URL.Query(), Header: req.Header.Clone(), Body: body})
	if c.echoAuth != 0 {
		code := "InternalServerError"
		if c.echoAuth == http.StatusUnauthorized {
			code = "InvalidAuthenticationToken"
		}
		return armErr(req, c.echoAuth, code, "upstream refused the request with Authorization: "+req.Header.Get("Authorization")), nil
	}
	if !strings.HasPrefix(req.Header.Get("Authorization"), "Bearer ") {
		return armErr(req, 401, "AuthenticationFailed", "Authentication failed. The 'Authorization' header is missing."), nil
	}
	if req.URL.Query().Get("api-version") == "" {
		return armErr(req, 400, "MissingApiVersionParameter", "The api-version query parameter (?api-version=) is required for all requests."), nil
	}
	route := req.Method + " " + req.URL.Path
	if c.dropOnVMPut != "" && req.Method == http.MethodPut && strings.Contains(req.URL.Path, "/virtualMachines/") {
		c.drop(c.dropOnVMPut)
		c.dropOnVMPut = ""
	}
	for k, fs := range c.syncFaults {
		if len(fs) > 0 && strings.HasPrefix(k, req.Method+" ") && strings.Contains(req.URL.Path, strings.TrimPrefix(k, req.Method+" ")) {
			c.syncFaults[k] = fs[1:]
			f := fs[0]
			return f.answer(req), nil
		}
	}
	seg := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	if len(seg) < 2 || seg[0] != "subscriptions" {
		return armErr(req, 404, "InvalidResourceType", "no route "+route), nil
	}
	if seg[1] != subscription {
		return armErr(req, 404, "SubscriptionNotFound", "The subscription '"+seg[1]+"' could not be found."), nil
	}
	seg = seg[2:]
	if resp, ok := c.serveCapacity(req, seg); ok {
		return resp, nil
	}
	switch {
	case len(seg) == 5 && seg[0] == "providers" && seg[2] == "locations" && seg[4] == "operations":
		return armErr(req, 404, "NotFound", "no route "+route), nil
	case len(seg) == 6 && seg[0] == "providers" && seg[2] == "locations" && seg[4] == "operations" && req.Method == http.MethodGet:
		return c.operationStatus(req, seg[5]), nil
	case len(seg) == 2 && strings.EqualFold(seg[0], "resourcegroups"):
		return c.resourceGroup(req, seg[1], body), nil
	case len(seg) >= 5 && strings.EqualFold(seg[0], "resourcegroups") && seg[2] == "providers":
		rg := seg[1]
		if _, ok := c.rgs[strings.ToLower(rg)]; !ok {
			return armErr(req, 404, "ResourceGroupNotFound", fmt.Sprintf("Resource group '%s' could not be found.", rg)), nil
		}
		typ := seg[3] + "/" + seg[4]
		switch {
		case len(seg) == 5 && typ == typVM && req.Method == http.MethodGet:
			return c.listVMs(req, rg), nil
		case len(seg) == 6:
			return c.resource(req, typ, rg, seg[5], body), nil
		case len(seg) == 7 && typ == typVM && seg[6] == "instanceView" && req.Method == http.MethodGet:
			r, ok := c.res[key(typVM, rg, seg[5])]
			if !ok {
				return c.notFound(req, typVM, rg, seg[5]), nil
			}
			return respond(req, 200, c.instanceView(r)), nil
		}
	}
	return armErr(req, 404, "InvalidResourceType", "no route "+route), nil
}

func (c *cloud) notFound(req *http.Request, typ, rg, name string) *http.Response {
	return armErr(req, 404, "ResourceNotFound", fmt.Sprintf("The Resource '%s/%s' under resource group '%s' was not found. For more details please go to https://aka.ms/ARMResourceNotFoundFix", typ, name, rg))
}

func (c *cloud) resourceGroup(req *http.Request, rg string, body []byte) *http.Response {
	k := strings.ToLower(rg)
	switch req.Method {
	case http.MethodGet:
		g, ok := c.rgs[k]
		if !ok {
			return armErr(req, 404, "ResourceGroupNotFound", fmt.Sprintf("Resource group '%s' could not be found.", rg))
		}
		return respond(req, 200, g)
	case http.MethodPut:
		var in map[string]any
		if err := json.Unmarshal(body, &in); err != nil || in["location"] == nil {
			return armErr(req, 400, "InvalidRequestContent", "The request content was invalid and could not be deserialized.")
		}
		status := http.StatusCreated
		if g, ok := c.rgs[k]; ok {
			if !strings.EqualFold(g["location"].(string), in["location"].(string)) {
				return armErr(req, 409, "InvalidResourceGroupLocation", fmt.Sprintf("Invalid resource group location '%s'. The Resource group already exists in location '%s'.", in["location"], g["location"]))
			}
			status = http.StatusOK
		}
		g := map[string]any{"id": "/subscriptions/" + subscription + "/resourceGroups/" + rg, "name": rg, "type": "Microsoft.Resources/resourceGroups",
			"location": in["location"], "tags": in["tags"], "properties": map[string]any{"provisioningState": "Succeeded"}}
		c.rgs[k] = g
		return respond(req, status, g)
	}
	return armErr(req, 405, "MethodNotAllowed", "method not allowed")
}

// newOp starts an operation on the provider namespace of typ in region
// and returns its status URL.
func (c *cloud) newOp(req *http.Request, typ, region string, done func()) string {
	u, _ := c.newOperation(req, typ, region, done)
	return u
}

func (c *cloud) newOperation(req *http.Request, typ, region string, done func()) (string, *operation) {
	c.nextOp++
	id := fmt.Sprintf("op-%04d", c.nextOp)
	op := &operation{id: id, status: "InProgress", outcome: "Succeeded", left: c.opPolls, done: done}
	c.ops[id] = op
	ns := strings.Split(typ, "/")[0]
	return fmt.Sprintf("%s/subscriptions/%s/providers/%s/locations/%s/operations/%s?api-version=%s", endpoint, subscription, ns,
		region, id, req.URL.Query().Get("api-version")), op
}

func (c *cloud) operationStatus(req *http.Request, id string) *http.Response {
	if c.opsBroken {
		return armErr(req, 500, "InternalServerError", "An internal server error occurred.")
	}
	op, ok := c.ops[id]
	if !ok {
		return armErr(req, 404, "NotFound", "operation "+id+" not found")
	}
	if op.status == "InProgress" && op.left > 0 {
		op.left--
		return respond(req, 200, map[string]any{"name": id, "status": "InProgress", "startTime": "2026-03-01T12:00:00Z"}, "Retry-After", "10")
	}
	c.finish(op)
	doc := map[string]any{"name": id, "status": op.status, "startTime": "2026-03-01T12:00:00Z", "endTime": "2026-03-01T12:01:00Z"}
	if op.status == "Failed" {
		doc["error"] = map[string]any{"code": op.code, "message": op.msg}
	}
	return respond(req, 200, doc)
}

// finish ends op (Succeeded unless it was set to fail) and applies it.
func (c *cloud) finish(op *operation) {
	if op.finished {
		return
	}
	op.finished = true
	op.status = op.outcome
	if op.done != nil {
		op.done()
	}
}

// tick advances the world: every pending operation ends, starting VMs run.
func (c *cloud) tick() {
	ids := make([]string, 0, len(c.ops))
	for id := range c.ops {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		c.finish(c.ops[id])
	}
	for _, r := range c.res {
		if r.typ == typVM && r.power == "starting" && r.provState == "Succeeded" {
			r.power = "running"
		}
	}
}

// settle lets time pass until created VMs run and deleted ones are gone.
func (c *cloud) settle() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.tick()
}

func (c *cloud) resource(req *http.Request, typ, rg, name string, body []byte) *http.Response {
	k := key(typ, rg, name)
	r, exists := c.res[k]
	switch req.Method {
	case http.MethodGet:
		if !exists {
			return c.notFound(req, typ, rg, name)
		}
		if typ == typVM {
			return respond(req, 200, c.vmJSON(r, req.URL.Query().Get("$expand") == "instanceView"))
		}
		return respond(req, 200, r.obj)
	case http.MethodPut:
		var in map[string]any
		if err := json.Unmarshal(body, &in); err != nil {
			return armErr(req, 400, "InvalidRequestContent", "The request content was invalid and could not be deserialized: "+err.Error())
		}
		if typ == typVM {
			return c.putVM(req, rg, name, in, r)
		}
		return c.putNetwork(req, typ, rg, name, in, r)
	case http.MethodDelete:
		if !exists {
			return respond(req, http.StatusNoContent, nil)
		}
		return c.deleteResource(req, r)
	case http.MethodPatch:
		// Update Tags (for example Network Interfaces - Update Tags, ARM
		// REST reference): {"tags":{...}} replaces the tags; 200 with the
		// resource.
		if !exists {
			return c.notFound(req, typ, rg, name)
		}
		var in struct {
			Tags map[string]any `json:"tags"`
		}
		if err := json.Unmarshal(body, &in); err != nil {
			return armErr(req, 400, "InvalidRequestContent", "The request content was invalid and could not be deserialized: "+err.Error())
		}
		r.obj["tags"] = in.Tags
		if typ == typVM {
			return respond(req, 200, c.vmJSON(r, false))
		}
		return respond(req, 200, r.obj)
	}
	return armErr(req, 405, "MethodNotAllowed", "method not allowed")
}

func str(m map[string]any, path ...string) string {
	var v any = m
	for _, p := range path {
		mm, ok := v.(map[string]any)
		if !ok {
			return ""
		}
		v = mm[p]
	}
	s, _ := v.(string)
	return s
}

func obj(m map[string]any, path ...string) map[string]any {
	var v any = m
	for _, p := range path {
		mm, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = mm[p]
	}
	mm, _ := v.(map[string]any)
	return mm
}

func list(m map[string]any, path ...string) []any {
	last := path[len(path)-1]
	parent := obj(m, path[:len(path)-1]...)
	if len(path) == 1 {
		parent = m
	}
	l, _ := parent[last].([]any)
	return l
}

// byID finds a resource by id.
func (c *cloud) byID(id string) *res {
	for _, r := range c.res {
		if strings.EqualFold(c.resourceID(r.typ, r.rg, r.name), id) {
			return r
		}
	}
	return nil
}

// inUse says why a network resource cannot be deleted yet, as Azure does.
func (c *cloud) inUse(req *http.Request, r *res) *http.Response {
	id := c.resourceID(r.typ, r.rg, r.name)
	switch r.typ {
	case typNIC:
		for _, v := range c.res {
			if v.typ == typVM && strings.EqualFold(v.nicID, id) {
				return armErr(req, 400, "NicInUse", fmt.Sprintf("Network Interface %s is used by existing resource %s. In order to delete the network interface, it must be dissociated from the resource. To learn more, see aka.ms/deletenic.", id, c.resourceID(typVM, v.rg, v.name)))
			}
		}
		if n := c.reserved[strings.ToLower(id)]; n > 0 {
			c.reserved[strings.ToLower(id)] = n - 1
			return armErr(req, 400, "NicReservedForAnotherVm", "Nic(s) in request is reserved for another Virtual Machine for 180 seconds. Please provide another nic(s) or retry after 180 seconds. Reserved VM: "+id)
		}
	case typIP, typNSG:
		for _, v := range c.res {
			if v.typ != typNIC {
				continue
			}
			refs := []string{str(v.obj, "properties", "networkSecurityGroup", "id")}
			for _, ipc := range list(v.obj, "properties", "ipConfigurations") {
				refs = append(refs, str(ipc.(map[string]any), "properties", "publicIPAddress", "id"))
			}
			for _, ref := range refs {
				if !strings.EqualFold(ref, id) {
					continue
				}
				nic := c.resourceID(v.typ, v.rg, v.name)
				if r.typ == typIP {
					return armErr(req, 400, "PublicIPAddressCannotBeDeleted", fmt.Sprintf("Public IP address %s can not be deleted since it is still allocated to resource %s/ipConfigurations/ipconfig1. In order to delete the public IP, disassociate/detach the Public IP address from the resource.  To learn how to do this, see aka.ms/deletepublicip.", id, nic))
				}
				return armErr(req, 400, "InUseNetworkSecurityGroupCannotBeDeleted", fmt.Sprintf("Network security group %s cannot be deleted because it is in use by the following resources: %s.", id, nic))
			}
		}
	}
	return nil
}

func (c *cloud) deleteResource(req *http.Request, r *res) *http.Response {
	if refused := c.inUse(req, r); refused != nil {
		return refused
	}
	loc := str(r.obj, "location")
	k := key(r.typ, r.rg, r.name)
	if r.typ == typVM {
		r.provState = "Deleting"
	}
	url := c.newOp(req, r.typ, loc, func() { c.remove(k) })
	return respond(req, http.StatusAccepted, nil, "Azure-AsyncOperation", url, "Location", url)
}

// remove deletes a resource for good; a VM takes its OS disk if its delete
// option says so, and leaves its NIC detached (and reserved, when the
// mock is told so).
func (c *cloud) remove(k string) {
	r, ok := c.res[k]
	if !ok {
		return
	}
	delete(c.res, k)
	if r.typ != typVM {
		return
	}
	if r.diskDelete {
		delete(c.res, key(typDisk, r.rg, r.diskName))
	}
	c.release(c.resourceID(typVM, r.rg, r.name))
	if nic := c.byID(r.nicID); nic != nil {
		delete(obj(nic.obj, "properties"), "virtualMachine")
		if c.nicReserved > 0 {
			c.reserved[strings.ToLower(r.nicID)] = c.nicReserved
		}
	}
}
