package azure_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi2"
	"github.com/getkin/kin-openapi/openapi2conv"
	"github.com/getkin/kin-openapi/openapi3"

	"github.com/org/gpuprov/clock"
	"github.com/org/gpuprov/internal/openapitest"
	"github.com/org/gpuprov/internal/rest/resttest"
	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/azure"
)

// The volume half of the ARM mock: managed disks (PUT, GET, DELETE) and
// the VM update (PATCH) that attaches and detaches data disks, answering
// as the Disks and Virtual Machines REST references document. It sits in
// front of the mock of mock_test.go, shares its resources, operations and
// recorded requests, and passes every other call through.
//
//   - Disk PUT: location and creationData.createOption required, diskSizeGB
//     required for Empty; 202 with the disk (provisioningState Updating)
//     and Azure-AsyncOperation; the operation makes it Succeeded (or, for
//     an Async fault, Failed with the fault's code). A PUT of a disk that
//     exists answers 200 with it.
//   - Disk GET: 404 ResourceNotFound when missing. A disk whose VM is gone
//     reads Unattached (Azure releases it).
//   - Disk DELETE: 204 when missing; 409 OperationNotAllowed "Disk ... is
//     attached to VM ..." while attached (ansible/ansible#54644); else 202,
//     gone when the operation ends.
//   - VM PATCH: only properties.storageProfile.dataDisks; each entry needs
//     a lun (0 to 63, unique: "A disk at LUN n already exists") and a
//     createOption, Attach needs managedDisk.id of a disk that exists and
//     is no other VM's (409 ConflictingUserInput "... already owned by VM
//     ..."); 409 OperationNotAllowed on a VM marked for deletion. 200 with
//     the VM (provisioningState Updating) and Azure-AsyncOperation; while
//     it runs the VM lists the new disk and the disk still reads
//     Unattached (kubernetes/kubernetes#82714); when it ends the disk is
//     attached (managedBy, diskState Attached; attachLag GETs later when
//     set), and entries marked toBeDetached (or left out) are gone. An
//     Async fault fails the operation and leaves the VM Failed with the
//     disk listed, as Azure leaves a failed attach.
type volumeCloud struct {
	*cloud
	next http.RoundTripper

	// diskFaults and patchFaults answer the next disk PUTs and VM PATCHes.
	diskFaults, patchFaults []fault
	// attachLag is how many GETs of a disk still read Unattached after its
	// attach ended.
	attachLag int
	lagging   map[string]*pendingAttach
}

type pendingAttach struct {
	vm   string
	left int
}

// newVolumeCloud is the mock with its volume half, and a provider on it
// whose disk calls are checked against the Disks REST specification
// (testdata/compute-disks-2024-03-02.json), in eastus with zones 1 and 2
// unless cfg says otherwise, on a fake clock that advances on its own
// (no test sleeps), which it returns.
func newVolumeCloud(t *testing.T, cfg azure.Config, opts ...azure.Option) (*volumeCloud, *azure.Provider, *clock.Fake) {
	t.Helper()
	clk := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	t.Cleanup(clk.AutoAdvance())
	c, mt := newCloud(t)
	v := &volumeCloud{cloud: c, next: mt, lagging: map[string]*pendingAttach{}}
	if cfg.Regions == nil {
		cfg.Regions = []string{"eastus"}
	}
	if cfg.Zones == nil {
		cfg.Zones = []string{"1", "2"}
	}
	opts = append([]azure.Option{azure.WithClock(clk), azure.WithEndpoint(endpoint, &http.Client{Transport: diskChecked(t, v)})}, opts...)
	p := c.provider(t, mt, cfg, opts...)
	return v, p, clk
}

func (v *volumeCloud) RoundTrip(req *http.Request) (*http.Response, error) {
	seg := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	if len(seg) != 8 || seg[0] != "subscriptions" || !strings.EqualFold(seg[2], "resourceGroups") || seg[4] != "providers" {
		return v.next.RoundTrip(req)
	}
	typ, rg, name := seg[5]+"/"+seg[6], seg[3], seg[7]
	if typ != typDisk && !(typ == typVM && req.Method == http.MethodPatch) {
		return v.next.RoundTrip(req)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	var body []byte
	if req.Body != nil {
		body, _ = io.ReadAll(req.Body)
	}
	v.requests = append(v.requests, request{Method: req.Method, Path: req.URL.Path, Query: req.URL.Query(), Header: req.Header.Clone(), Body: body})
	if v.echoAuth != 0 {
		code := "InternalServerError"
		if v.echoAuth == http.StatusUnauthorized {
			code = "InvalidAuthenticationToken"
		}
		return armErr(req, v.echoAuth, code, "upstream refused the request with Authorization: "+req.Header.Get("Authorization")), nil
	}
	switch {
	case !strings.HasPrefix(req.Header.Get("Authorization"), "Bearer "):
		return armErr(req, 401, "AuthenticationFailed", "Authentication failed. The 'Authorization' header is missing."), nil
	case req.URL.Query().Get("api-version") == "":
		return armErr(req, 400, "MissingApiVersionParameter", "The api-version query parameter (?api-version=) is required for all requests."), nil
	case seg[1] != subscription:
		return armErr(req, 404, "SubscriptionNotFound", "The subscription '"+seg[1]+"' could not be found."), nil
	}
	for k, fs := range v.syncFaults {
		if len(fs) > 0 && strings.HasPrefix(k, req.Method+" ") && strings.Contains(req.URL.Path, strings.TrimPrefix(k, req.Method+" ")) {
			v.syncFaults[k] = fs[1:]
			return fs[0].answer(req), nil
		}
	}
	if _, ok := v.rgs[strings.ToLower(rg)]; !ok {
		return armErr(req, 404, "ResourceGroupNotFound", fmt.Sprintf("Resource group '%s' could not be found.", rg)), nil
	}
	if typ == typVM {
		return v.patchVM(req, rg, name, body), nil
	}
	return v.disk(req, rg, name, body), nil
}

func (v *volumeCloud) disk(req *http.Request, rg, name string, body []byte) *http.Response {
	k := key(typDisk, rg, name)
	r := v.res[k]
	switch req.Method {
	case http.MethodGet:
		if r == nil {
			return v.notFound(req, typDisk, rg, name)
		}
		v.refresh(r)
		return respond(req, 200, r.obj)
	case http.MethodDelete:
		if r == nil {
			return respond(req, http.StatusNoContent, nil)
		}
		v.refresh(r)
		if vm := str(r.obj, "managedBy"); vm != "" {
			return armErr(req, 409, "OperationNotAllowed", fmt.Sprintf("Disk %s is attached to VM %s.", name, vm))
		}
		obj(r.obj, "properties")["provisioningState"] = "Deleting"
		u := v.newOp(req, typDisk, str(r.obj, "location"), func() { delete(v.res, k) })
		return respond(req, http.StatusAccepted, nil, "Azure-AsyncOperation", u, "Location", u)
	case http.MethodPut:
		return v.putDisk(req, rg, name, body, r)
	}
	return armErr(req, 405, "MethodNotAllowed", "method not allowed")
}

func (v *volumeCloud) putDisk(req *http.Request, rg, name string, body []byte, old *res) *http.Response {
	var in map[string]any
	if err := json.Unmarshal(body, &in); err != nil {
		return armErr(req, 400, "InvalidRequestContent", "The request content was invalid and could not be deserialized: "+err.Error())
	}
	loc, p := str(in, "location"), obj(in, "properties")
	size, _ := p["diskSizeGB"].(float64)
	switch {
	case loc == "":
		return armErr(req, 400, "LocationRequired", "The location property is required for this definition.")
	case str(p, "creationData", "createOption") == "":
		return armErr(req, 400, "InvalidParameter", "Required parameter 'creationData.createOption' is missing (null).")
	case str(p, "creationData", "createOption") == "Empty" && size == 0:
		return armErr(req, 400, "InvalidParameter", "Required parameter 'diskSizeGB' is missing (null).")
	case len(list(in, "zones")) > 1:
		return armErr(req, 400, "InvalidParameter", "A disk can be in one zone at most.")
	}
	if old != nil {
		old.obj["tags"] = in["tags"]
		return respond(req, 200, old.obj)
	}
	var f *fault
	if len(v.diskFaults) > 0 {
		f, v.diskFaults = &v.diskFaults[0], v.diskFaults[1:]
		if !f.Async {
			return f.answer(req)
		}
	}
	props := map[string]any{"creationData": map[string]any{"createOption": str(p, "creationData", "createOption")},
		"diskSizeGB": size, "diskSizeBytes": int64(size) << 30, "uniqueId": fmt.Sprintf("00000000-0000-4000-9000-%012d", len(v.res)+1),
		"provisioningState": "Updating", "diskState": "Unattached", "timeCreated": "2026-03-01T12:00:00Z",
		"encryption": map[string]any{"type": "EncryptionAtRestWithPlatformKey"}, "networkAccessPolicy": "AllowAll", "publicNetworkAccess": "Enabled"}
	d := map[string]any{"id": v.resourceID(typDisk, rg, name), "name": name, "type": typDisk, "location": loc, "tags": in["tags"],
		"sku": map[string]any{"name": str(in, "sku", "name"), "tier": "Premium"}, "properties": props}
	if z := list(in, "zones"); len(z) == 1 {
		d["zones"] = z
	}
	v.res[key(typDisk, rg, name)] = &res{typ: typDisk, rg: rg, name: name, obj: d}
	u, op := v.newOperation(req, typDisk, loc, func() { props["provisioningState"] = "Succeeded" })
	if f != nil {
		op.outcome, op.code, op.msg = "Failed", f.Code, f.Message
		op.done = func() { props["provisioningState"] = "Failed" }
	}
	return respond(req, http.StatusAccepted, d, "Azure-AsyncOperation", u, "Location", u)
}

// refresh releases a disk whose VM is gone, and ends an attach lag.
func (v *volumeCloud) refresh(r *res) {
	k := key(typDisk, r.rg, r.name)
	if pa := v.lagging[k]; pa != nil {
		if pa.left <= 0 {
			delete(v.lagging, k)
			v.setOwner(r, pa.vm)
		} else {
			pa.left--
		}
	}
	if vm := str(r.obj, "managedBy"); vm != "" && v.byID(vm) == nil {
		v.setOwner(r, "")
	}
}

func (v *volumeCloud) setOwner(r *res, vm string) {
	props := obj(r.obj, "properties")
	props["LastOwnershipUpdateTime"] = "2026-03-01T12:05:00Z"
	if vm == "" {
		delete(r.obj, "managedBy")
		props["diskState"] = "Unattached"
		return
	}
	r.obj["managedBy"] = vm
	props["diskState"] = "Attached"
}

func (v *volumeCloud) patchVM(req *http.Request, rg, name string, body []byte) *http.Response {
	r := v.res[key(typVM, rg, name)]
	if r == nil {
		return v.notFound(req, typVM, rg, name)
	}
	if r.provState == "Deleting" {
		return armErr(req, 409, "OperationNotAllowed", fmt.Sprintf("Operation 'PATCH' is not allowed on VM '%s' since the VM is marked for deletion. You can only retry the Delete operation (or wait for an ongoing one to complete).", name))
	}
	var in map[string]map[string]map[string][]map[string]any
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&in); err != nil || len(in) != 1 || len(in["properties"]) != 1 || len(in["properties"]["storageProfile"]) != 1 {
		return armErr(req, 400, "InvalidRequestContent", fmt.Sprintf("the mock takes a PATCH of properties.storageProfile.dataDisks only: %s", body))
	}
	want := in["properties"]["storageProfile"]["dataDisks"]
	var f *fault
	if len(v.patchFaults) > 0 {
		f, v.patchFaults = &v.patchFaults[0], v.patchFaults[1:]
		if !f.Async {
			return f.answer(req)
		}
	}
	sp := obj(r.obj, "properties", "storageProfile")
	have := map[string]bool{}
	for _, dd := range list(sp, "dataDisks") {
		have[strings.ToLower(str(dd.(map[string]any), "managedDisk", "id"))] = true
	}
	luns := map[float64]bool{}
	var attach, detach []string
	next := []any{}
	for _, dd := range want {
		lun, ok := dd["lun"].(float64)
		id := str(dd, "managedDisk", "id")
		switch {
		case !ok || lun < 0 || lun > 63 || str(dd, "createOption") == "":
			return armErr(req, 400, "InvalidParameter", fmt.Sprintf("The value of parameter dataDisk is invalid: %v", dd))
		case luns[lun]:
			return armErr(req, 400, "InvalidParameter", fmt.Sprintf("A disk at LUN %v already exists.", lun))
		}
		luns[lun] = true
		if dd["toBeDetached"] == true {
			detach = append(detach, id)
		} else if !have[strings.ToLower(id)] {
			d := v.byID(id)
			switch {
			case str(dd, "createOption") != "Attach" || d == nil:
				return armErr(req, 404, "NotFound", fmt.Sprintf("Disk %s was not found.", id))
			case str(d.obj, "managedBy") != "" && !strings.EqualFold(str(d.obj, "managedBy"), v.resourceID(typVM, rg, name)):
				return armErr(req, 409, "ConflictingUserInput", fmt.Sprintf("Disk '%s' cannot be attached as the disk is already owned by VM '%s'.", id, str(d.obj, "managedBy")))
			}
			attach = append(attach, id)
		}
		next = append(next, map[string]any(dd))
	}
	for id := range have {
		if !slices.ContainsFunc(want, func(dd map[string]any) bool { return strings.EqualFold(str(dd, "managedDisk", "id"), id) }) {
			detach = append(detach, id)
		}
	}
	sp["dataDisks"] = next
	r.provState = "Updating"
	vmID := v.resourceID(typVM, rg, name)
	u, op := v.newOperation(req, typVM, str(r.obj, "location"), func() {
		for _, id := range attach {
			if d := v.byID(id); d != nil {
				if v.attachLag > 0 {
					v.lagging[key(typDisk, d.rg, d.name)] = &pendingAttach{vm: vmID, left: v.attachLag}
				} else {
					v.setOwner(d, vmID)
				}
			}
		}
		kept := []any{}
		for _, dd := range list(sp, "dataDisks") {
			if !slices.ContainsFunc(detach, func(id string) bool { return strings.EqualFold(str(dd.(map[string]any), "managedDisk", "id"), id) }) {
				kept = append(kept, dd)
			}
		}
		sp["dataDisks"] = kept
		for _, id := range detach {
			if d := v.byID(id); d != nil && strings.EqualFold(str(d.obj, "managedBy"), vmID) {
				v.setOwner(d, "")
			}
		}
		r.provState = "Succeeded"
	})
	if f != nil {
		op.outcome, op.code, op.msg = "Failed", f.Code, f.Message
		op.done = func() { r.provState = "Failed" }
	}
	return respond(req, 200, v.vmJSON(r, false), "Azure-AsyncOperation", u)
}

// Views for the tests.

// diskObj is a copy of disk name's JSON in eastus's resource group.
func (v *volumeCloud) diskObj(t *testing.T, name string) map[string]any {
	t.Helper()
	v.mu.Lock()
	defer v.mu.Unlock()
	r := v.res[key(typDisk, rgOf("eastus"), name)]
	if r == nil {
		return nil
	}
	b, _ := json.Marshal(r.obj)
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// dataDisks are the LUNs and disk names VM id lists.
func (v *volumeCloud) dataDisks(id string) map[string]int {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := map[string]int{}
	if r := v.byID(id); r != nil {
		for _, dd := range list(obj(r.obj, "properties", "storageProfile"), "dataDisks") {
			m := dd.(map[string]any)
			id := str(m, "managedDisk", "id")
			out[id[strings.LastIndex(id, "/")+1:]] = int(m["lun"].(float64))
		}
	}
	return out
}

// The disk half of the Disks REST specification, API version 2024-03-02
// (testdata/compute-disks-2024-03-02.json, testdata/README.md), converted
// to OpenAPI 3 like the Compute one (spec_test.go).
const diskSpecFile = "testdata/compute-disks-2024-03-02.json"

var diskSpecDoc struct {
	once sync.Once
	file string
	doc  *openapi3.T
	err  error
}

func diskSpec(t *testing.T) (*openapi3.T, string) {
	t.Helper()
	diskSpecDoc.once.Do(func() {
		b, err := os.ReadFile(diskSpecFile)
		if err != nil {
			diskSpecDoc.err = err
			return
		}
		var v2 openapi2.T
		if diskSpecDoc.err = json.Unmarshal(b, &v2); diskSpecDoc.err != nil {
			return
		}
		if diskSpecDoc.doc, diskSpecDoc.err = openapi2conv.ToV3(&v2); diskSpecDoc.err != nil {
			return
		}
		out, err := json.Marshal(diskSpecDoc.doc)
		if err != nil {
			diskSpecDoc.err = err
			return
		}
		// Written whole and renamed into place: test binaries may run at once.
		diskSpecDoc.file = filepath.Join(os.TempDir(), "gpuprov-azure-compute-disks-2024-03-02.json")
		tmp, err := os.CreateTemp(os.TempDir(), "gpuprov-azure-spec-*")
		if err != nil {
			diskSpecDoc.err = err
			return
		}
		_, werr := tmp.Write(out)
		if cerr := tmp.Close(); werr == nil {
			werr = cerr
		}
		if werr == nil {
			werr = os.Rename(tmp.Name(), diskSpecDoc.file)
		}
		if werr != nil {
			os.Remove(tmp.Name())
		}
		diskSpecDoc.err = werr
	})
	if diskSpecDoc.err != nil {
		t.Fatalf("load %s: %v", diskSpecFile, diskSpecDoc.err)
	}
	return diskSpecDoc.doc, diskSpecDoc.file
}

// diskChecked wraps next so that every call of the Disks specification's
// operations (PUT, GET and DELETE of a disk) is checked against it: the
// request and the answer by openapitest, and the PUT's body and every
// answer's body for properties the Disk definition does not declare. The
// other calls (the VM, operation status documents, the network) pass
// unchecked. The specification lists no error answers (its operations
// have no default response): those ARM answers are let through.
func diskChecked(t *testing.T, next http.RoundTripper) http.RoundTripper {
	doc, file := diskSpec(t)
	errs := []openapitest.Option{
		openapitest.UndocumentedStatus(400, "ARM's InvalidParameter and InvalidRequestContent (common-deployment-errors)"),
		openapitest.UndocumentedStatus(401, "ARM's InvalidAuthenticationToken (common-deployment-errors)"),
		openapitest.UndocumentedStatus(404, "ARM's ResourceNotFound and ResourceGroupNotFound (common-deployment-errors)"),
		openapitest.UndocumentedStatus(409, "OperationNotAllowed for an attached disk (ansible/ansible#54644), SkuNotAvailable"),
		openapitest.UndocumentedStatus(429, "ARM throttling (request-limits-and-throttling)"),
		openapitest.UndocumentedStatus(500, "ARM's InternalServerError"),
	}
	return &diskCheck{t: t, doc: doc, spec: openapitest.Load(t, file, endpoint, errs...), next: next}
}

type diskCheck struct {
	t    *testing.T
	doc  *openapi3.T
	spec *openapitest.Doc
	next http.RoundTripper
}

func (c *diskCheck) RoundTrip(req *http.Request) (*http.Response, error) {
	if _, err := c.spec.CheckRequest(req); errors.Is(err, openapitest.ErrNoOperation) {
		return c.next.RoundTrip(req)
	} else if err != nil {
		c.t.Errorf("%s %s: the request does not match the Disks specification: %v", req.Method, req.URL.Path, err)
	}
	disk := c.doc.Components.Schemas["Disk"].Value
	if req.Method == http.MethodPut {
		body, _ := io.ReadAll(req.Body)
		req.Body = io.NopCloser(bytes.NewReader(body))
		var v any
		if err := json.Unmarshal(body, &v); err != nil {
			c.t.Errorf("PUT %s: the body is not JSON: %v", req.URL.Path, err)
		}
		for _, p := range undeclared(disk, v, "Disk") {
			c.t.Errorf("PUT %s: the body carries %s, which Disk does not declare", req.URL.Path, p)
		}
	}
	resp, err := c.next.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	if err := c.spec.CheckResponse(req, resp); err != nil {
		c.t.Errorf("%s %s: the %d answer does not match the Disks specification: %v", req.Method, req.URL.Path, resp.StatusCode, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if resp.StatusCode < 300 && len(body) > 0 {
		var v any
		if err := json.Unmarshal(body, &v); err != nil {
			c.t.Errorf("%s %s: the answer is not JSON: %v", req.Method, req.URL.Path, err)
		}
		for _, p := range undeclared(disk, v, "Disk") {
			c.t.Errorf("%s %s: the answer carries %s, which Disk does not declare", req.Method, req.URL.Path, p)
		}
	}
	return resp, nil
}

// The checks can fail: a misspelled property, a PUT without its
// creationData, a disk state outside the enum.
func TestDiskSpecChecksFail(t *testing.T) {
	doc, file := diskSpec(t)
	disk := map[string]any{"location": "eastus", "zones": []any{"1"}, "sku": map[string]any{"name": "Premium_LRS"},
		"properties": map[string]any{"creationData": map[string]any{"createOption": "Empty"}, "diskSizeGb": 100}}
	if got := undeclared(doc.Components.Schemas["Disk"].Value, disk, "Disk"); !slices.Equal(got, []string{"Disk.properties.diskSizeGb"}) {
		t.Fatalf("misspelled field: %v", got)
	}
	d := openapitest.Load(t, file, endpoint)
	url := endpoint + "/subscriptions/" + subscription + "/resourceGroups/g/providers/Microsoft.Compute/disks/gpuprov--x?api-version=2024-03-02"
	put := func(body string) error {
		req, _ := http.NewRequest(http.MethodPut, url, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer x")
		req.Header.Set("Content-Type", "application/json")
		_, err := d.CheckRequest(req)
		return err
	}
	if err := put(`{"location":"eastus","sku":{"name":"Premium_LRS"},"properties":{"creationData":{"createOption":"Empty"},"diskSizeGB":100}}`); err != nil {
		t.Fatalf("a correct PUT: %v", err)
	}
	if put(`{"location":"eastus","properties":{"diskSizeGB":100}}`) == nil {
		t.Fatal("a PUT without creationData passed")
	}
	if put(`{"location":"eastus","sku":{"name":"Premium_SSD"},"properties":{"creationData":{"createOption":"Empty"}}}`) == nil {
		t.Fatal("a PUT with a sku outside the enum passed")
	}
	get, _ := http.NewRequest(http.MethodGet, url, nil)
	bad := `{"location":"eastus","properties":{"creationData":{"createOption":"Empty"},"diskState":"Detaching"}}`
	if err := d.CheckResponse(get, openapitest.JSONResponse(200, []byte(bad))); err == nil {
		t.Fatal("a disk state outside the enum passed")
	}
}

var (
	eastus1 = provider.Location{Region: "eastus", Zone: "eastus-1"}
	eastus2 = provider.Location{Region: "eastus", Zone: "eastus-2"}
)

func volSpec(name string, gb int, loc provider.Location) provider.VolumeSpec {
	return provider.VolumeSpec{Name: name, Installation: installation, SizeGB: gb, Location: loc,
		UserLabels: map[string]string{"team": "vision"}, IdempotencyToken: "tok-" + name}
}

// running launches VM vm in loc and lets it run.
func (v *volumeCloud) running(t *testing.T, p *azure.Provider, vm string, loc provider.Location) string {
	t.Helper()
	id := launch(t, p, offerIn(t, p, t4, loc, false), newSpec(t, vm))
	v.settle()
	return id
}

func inUse(t *testing.T, err error, kind provider.ErrorKind) {
	t.Helper()
	kindOf(t, err, kind)
	if !errors.Is(err, provider.ErrInUse) {
		t.Fatalf("%v does not match provider.ErrInUse", err)
	}
}

// The life the core gives a volume (volumes.go): created and observed
// until available, attached (the device a path of its LUN, the wait
// through attaching on the provider's clock), attached again where it is,
// refused to another VM and to a delete while attached, detached (twice),
// deleted (twice), and then no more observed. Every disk call and answer
// is checked against the Disks specification.
func TestVolumeLifecycle(t *testing.T) {
	v, p, clk := newVolumeCloud(t, azure.Config{OperationTimeout: time.Minute, PollInterval: 5 * time.Second})
	ctx := context.Background()
	vmA := v.running(t, p, "train-1", eastus1)
	vmB := v.running(t, p, "train-2", eastus1)

	if lim := p.VolumeLimits(); lim != (provider.VolumeLimits{Scope: provider.VolumeZonal, MinGB: 4, MaxGB: 32767}) {
		t.Fatalf("limits %+v", lim)
	}

	// Create: the operation outlasts the bounded wait, so the disk comes
	// back creating; Observe follows it to available.
	v.mu.Lock()
	v.opPolls = 1000
	v.mu.Unlock()
	vol, err := p.CreateVolume(ctx, volSpec("data", 500, eastus1))
	if err != nil {
		t.Fatal(err)
	}
	v.mu.Lock()
	v.opPolls = 1
	v.mu.Unlock()
	id := "/subscriptions/" + subscription + "/resourceGroups/" + rgOf("eastus") + "/providers/Microsoft.Compute/disks/gpuprov--data"
	if vol.ID != id || vol.Name != "data" || vol.Status != provider.VolumeCreating || vol.Location != eastus1 || vol.SizeGB != 500 {
		t.Fatalf("created %+v", vol)
	}
	seen, err := p.ObserveVolume(ctx, eastus1, "data")
	if err != nil || seen == nil || seen.Status != provider.VolumeCreating || seen.Name != "data" {
		t.Fatalf("observe while creating: %+v, %v", seen, err)
	}
	v.settle()
	seen, err = p.ObserveVolume(ctx, eastus1, "data")
	if err != nil || seen == nil || seen.Status != provider.VolumeAvailable || seen.ID != id || seen.SizeGB != 500 || seen.Location != eastus1 || seen.AttachedTo != "" {
		t.Fatalf("observe once made: %+v, %v", seen, err)
	}
	put := v.calls(http.MethodPut, "/disks/")
	if len(put) != 1 {
		t.Fatalf("%d disk PUTs", len(put))
	}
	var body struct {
		Location   string                `json:"location"`
		Zones      []string              `json:"zones"`
		Tags       map[string]string     `json:"tags"`
		SKU        struct{ Name string } `json:"sku"`
		Properties struct {
			CreationData struct{ CreateOption string } `json:"creationData"`
			DiskSizeGB   int                           `json:"diskSizeGB"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(put[0].Body, &body); err != nil {
		t.Fatal(err)
	}
	wantTags := map[string]string{"team": "vision", provider.LabelVM: "data", provider.LabelInstallation: installation, "gpuprov-volume": "true"}
	if body.Location != "eastus" || !slices.Equal(body.Zones, []string{"1"}) || body.SKU.Name != "Premium_LRS" ||
		body.Properties.CreationData.CreateOption != "Empty" || body.Properties.DiskSizeGB != 500 || fmt.Sprint(body.Tags) != fmt.Sprint(wantTags) {
		t.Fatalf("PUT body %s", put[0].Body)
	}

	// Attach: the disk reads Unattached for 3 GETs after the operation;
	// AttachVolume polls through them on the clock.
	v.mu.Lock()
	v.attachLag = 3
	v.mu.Unlock()
	start := clk.Now()
	dev, err := p.AttachVolume(ctx, eastus1, id, vmA)
	if err != nil || dev != "/dev/disk/azure/scsi1/lun0" {
		t.Fatalf("attach: %q, %v", dev, err)
	}
	if waited := clk.Now().Sub(start); waited < 10*time.Second+3*5*time.Second {
		t.Fatalf("attach returned after %v: it did not wait for the disk to say attached", waited)
	}
	patch := v.calls(http.MethodPatch, "/virtualMachines/gpuprov-train-1-1")
	if len(patch) != 1 {
		t.Fatalf("%d PATCHes", len(patch))
	}
	var upd struct {
		Properties struct {
			StorageProfile struct {
				DataDisks []struct {
					Lun          int    `json:"lun"`
					Name         string `json:"name"`
					CreateOption string `json:"createOption"`
					Caching      string `json:"caching"`
					DeleteOption string `json:"deleteOption"`
					ManagedDisk  struct {
						ID string `json:"id"`
					} `json:"managedDisk"`
				} `json:"dataDisks"`
			} `json:"storageProfile"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(patch[0].Body, &upd); err != nil {
		t.Fatal(err)
	}
	if dd := upd.Properties.StorageProfile.DataDisks; len(dd) != 1 || dd[0].Lun != 0 || dd[0].Name != "gpuprov--data" || dd[0].CreateOption != "Attach" ||
		dd[0].Caching != "ReadOnly" || dd[0].DeleteOption != "Detach" || !strings.EqualFold(dd[0].ManagedDisk.ID, id) {
		t.Fatalf("PATCH body %s", patch[0].Body)
	}
	seen, err = p.ObserveVolume(ctx, eastus1, "data")
	if err != nil || seen.Status != provider.VolumeAttached || !strings.EqualFold(seen.AttachedTo, vmA) {
		t.Fatalf("observe attached: %+v, %v", seen, err)
	}

	// Attached again where it is: the same device, nothing sent.
	if dev2, err := p.AttachVolume(ctx, eastus1, id, vmA); err != nil || dev2 != dev {
		t.Fatalf("attach again: %q, %v", dev2, err)
	}
	if n := len(v.calls(http.MethodPatch, "")); n != 1 {
		t.Fatalf("%d PATCHes after a second attach", n)
	}
	// To another VM, or deleted, while attached: in use, nothing sent.
	_, err = p.AttachVolume(ctx, eastus1, id, vmB)
	inUse(t, err, provider.InvalidRequest)
	inUse(t, p.DeleteVolume(ctx, eastus1, id), provider.InvalidRequest)
	if n, d := len(v.calls(http.MethodPatch, "")), len(v.calls(http.MethodDelete, "/disks/")); n != 1 || d != 0 {
		t.Fatalf("%d PATCHes, %d disk DELETEs", n, d)
	}

	// Detach, twice; then the other VM may have it.
	for i := range 2 {
		if err := p.DetachVolume(ctx, eastus1, id, vmA); err != nil {
			t.Fatalf("detach %d: %v", i, err)
		}
	}
	if dd := v.dataDisks(vmA); len(dd) != 0 {
		t.Fatalf("VM still lists %v", dd)
	}
	if n := len(v.calls(http.MethodPatch, "/virtualMachines/gpuprov-train-1-1")); n != 2 {
		t.Fatalf("%d PATCHes of train-1, want attach + one detach", n)
	}
	seen, _ = p.ObserveVolume(ctx, eastus1, "data")
	if seen.Status != provider.VolumeAvailable {
		t.Fatalf("after detach: %+v", seen)
	}
	// A detach from a VM it is not attached to succeeds, and sends nothing.
	if err := p.DetachVolume(ctx, eastus1, id, vmB); err != nil || len(v.calls(http.MethodPatch, "/virtualMachines/gpuprov-train-2-1")) != 0 {
		t.Fatalf("detach from a VM without it: %v", err)
	}

	// Delete, twice; then it is no more.
	for i := range 2 {
		if err := p.DeleteVolume(ctx, eastus1, id); err != nil {
			t.Fatalf("delete %d: %v", i, err)
		}
	}
	if v.diskObj(t, "gpuprov--data") != nil {
		t.Fatal("the disk is still there")
	}
	if seen, err := p.ObserveVolume(ctx, eastus1, "data"); err != nil || seen != nil {
		t.Fatalf("observe after delete: %+v, %v", seen, err)
	}
}

// A create sent again (the same token, or the answer of the first lost)
// returns the volume the first made, with one PUT; sent while the first
// is still being made, it returns it creating.
func TestCreateVolumeSentTwiceIsOneDisk(t *testing.T) {
	v, p, _ := newVolumeCloud(t, azure.Config{OperationTimeout: time.Minute})
	ctx := context.Background()
	v.mu.Lock()
	v.opPolls = 1000
	v.mu.Unlock()
	first, err := p.CreateVolume(ctx, volSpec("ckpt", 100, eastus2))
	if err != nil || first.Status != provider.VolumeCreating {
		t.Fatalf("first: %+v, %v", first, err)
	}
	again, err := p.CreateVolume(ctx, volSpec("ckpt", 100, eastus2))
	if err != nil || again.ID != first.ID || again.Status != provider.VolumeCreating {
		t.Fatalf("again while creating: %+v, %v", again, err)
	}
	v.settle()
	third, err := p.CreateVolume(ctx, volSpec("ckpt", 100, eastus2))
	if err != nil || third.ID != first.ID || third.Status != provider.VolumeAvailable || third.Name != "ckpt" || third.Location != eastus2 {
		t.Fatalf("again once made: %+v, %v", third, err)
	}
	if n := len(v.calls(http.MethodPut, "/disks/")); n != 1 {
		t.Fatalf("%d disk PUTs, want 1", n)
	}
}

// A disk of the name that is another installation's volume (in a shared,
// configured resource group), or that is this volume in another zone, is
// refused with nothing sent; one whose provisioning failed is deleted and
// made again.
func TestCreateVolumeNameTaken(t *testing.T) {
	v, p, _ := newVolumeCloud(t, azure.Config{ResourceGroup: "shared"})
	ctx := context.Background()
	v.mu.Lock()
	v.rgs["shared"] = map[string]any{"name": "shared", "location": "eastus"}
	other := v.resourceID(typDisk, "shared", "gpuprov--data")
	v.res[key(typDisk, "shared", "gpuprov--data")] = &res{typ: typDisk, rg: "shared", name: "gpuprov--data", obj: map[string]any{
		"id": other, "name": "gpuprov--data", "type": typDisk, "location": "eastus", "zones": []any{"1"},
		"tags": map[string]any{provider.LabelVM: "data", provider.LabelInstallation: "0123456789abcdef", "gpuprov-volume": "true"},
		"sku":  map[string]any{"name": "Premium_LRS"}, "properties": map[string]any{"creationData": map[string]any{"createOption": "Empty"},
			"diskSizeGB": 100, "provisioningState": "Succeeded", "diskState": "Unattached"}}}
	v.mu.Unlock()
	_, err := p.CreateVolume(ctx, volSpec("data", 100, eastus1))
	kindOf(t, err, provider.InvalidRequest)
	if !strings.Contains(err.Error(), "not volume data of installation "+installation) {
		t.Fatal(err)
	}
	if seen, err := p.ObserveVolume(ctx, eastus1, "data"); err != nil || seen != nil {
		t.Fatalf("another installation's volume observed: %+v, %v", seen, err)
	}

	if _, err := p.CreateVolume(ctx, volSpec("logs", 100, eastus1)); err != nil {
		t.Fatal(err)
	}
	_, err = p.CreateVolume(ctx, volSpec("logs", 100, eastus2))
	kindOf(t, err, provider.InvalidRequest)
	if !strings.Contains(err.Error(), "exists in eastus/eastus-1") {
		t.Fatal(err)
	}
	if n := len(v.calls(http.MethodPut, "/disks/")); n != 1 {
		t.Fatalf("%d disk PUTs, want 1 (logs)", n)
	}

	// A disk left Failed by a refused create is made again.
	v.mu.Lock()
	obj(v.res[key(typDisk, "shared", "gpuprov--logs")].obj, "properties")["provisioningState"] = "Failed"
	v.mu.Unlock()
	vol, err := p.CreateVolume(ctx, volSpec("logs", 100, eastus2))
	if err != nil || vol.Location != eastus2 || vol.Status != provider.VolumeAvailable {
		t.Fatalf("remade: %+v, %v", vol, err)
	}
	if d := len(v.calls(http.MethodDelete, "/disks/gpuprov--logs")); d != 1 {
		t.Fatalf("%d deletes of the failed disk", d)
	}
}

// A volume named like a VM's OS disk lives beside it: VM a's first
// attempt, gpuprov-a-1, has the OS disk gpuprov-a-1-osdisk, which a
// volume "a-1-osdisk" would have been named were volumes gpuprov-<name>;
// it is gpuprov--a-1-osdisk. The volume is made, observed, attached to
// that very VM, detached and deleted, and no request names the OS disk.
func TestVolumeNamedLikeAnOSDisk(t *testing.T) {
	v, p, _ := newVolumeCloud(t, azure.Config{})
	ctx := context.Background()
	vm := v.running(t, p, "a", eastus1)
	const osDisk = "gpuprov-a-1-osdisk"
	v.mu.Lock()
	od := v.res[key(typDisk, rgOf("eastus"), osDisk)]
	if od != nil {
		od.obj["tags"] = map[string]any{provider.LabelVM: "a", provider.LabelInstallation: installation}
	}
	v.mu.Unlock()
	if od == nil {
		t.Fatalf("VM a has no OS disk %s", osDisk)
	}

	vol, err := p.CreateVolume(ctx, volSpec("a-1-osdisk", 100, eastus1))
	if err != nil {
		t.Fatalf("create of a volume named like the OS disk: %v", err)
	}
	want := "/subscriptions/" + subscription + "/resourceGroups/" + rgOf("eastus") + "/providers/Microsoft.Compute/disks/gpuprov--a-1-osdisk"
	if vol.ID != want || vol.Name != "a-1-osdisk" {
		t.Fatalf("created %+v; want disk %s", vol, want)
	}
	v.settle()
	if seen, err := p.ObserveVolume(ctx, eastus1, "a-1-osdisk"); err != nil || seen == nil || seen.ID != want {
		t.Fatalf("observe: %+v, %v; want %s", seen, err, want)
	}
	if dev, err := p.AttachVolume(ctx, eastus1, vol.ID, vm); err != nil || dev != "/dev/disk/azure/scsi1/lun0" {
		t.Fatalf("attach to VM a: %q, %v", dev, err)
	}
	if dd := v.dataDisks(vm); fmt.Sprint(dd) != fmt.Sprint(map[string]int{"gpuprov--a-1-osdisk": 0}) {
		t.Fatalf("VM a lists data disks %v", dd)
	}
	if err := p.DetachVolume(ctx, eastus1, vol.ID, vm); err != nil {
		t.Fatal(err)
	}
	if err := p.DeleteVolume(ctx, eastus1, vol.ID); err != nil {
		t.Fatal(err)
	}
	// The OS disk's id given as a volume's is refused: not a volume.
	kindOf(t, p.DeleteVolume(ctx, eastus1, strings.TrimSuffix(want, "gpuprov--a-1-osdisk")+osDisk), provider.InvalidRequest)
	for _, r := range v.calls("", "/disks/"+osDisk) {
		if r.Method != http.MethodGet {
			t.Errorf("%s %s: the OS disk was touched", r.Method, r.Path)
		}
	}
	if v.diskObj(t, osDisk) == nil || v.diskObj(t, "gpuprov--a-1-osdisk") != nil {
		t.Fatal("want the OS disk kept and the volume gone")
	}
}

// What no disk can be is refused before any call: no name, a size outside
// the Premium SSD sizes, a location without a zone, a zone that is none.
func TestCreateVolumeBadInputSendsNothing(t *testing.T) {
	v, p, _ := newVolumeCloud(t, azure.Config{})
	for _, spec := range []provider.VolumeSpec{
		volSpec("", 100, eastus1),
		volSpec("small", 3, eastus1),
		volSpec("zero", 0, eastus1),
		volSpec("huge", 32768, eastus1),
		volSpec("regional", 100, provider.Location{Region: "eastus"}),
		volSpec("noregion", 100, provider.Location{Zone: "eastus-1"}),
		volSpec("badzone", 100, provider.Location{Region: "eastus", Zone: "eastus-a"}),
	} {
		_, err := p.CreateVolume(context.Background(), spec)
		kindOf(t, err, provider.InvalidRequest)
	}
	if n := len(v.calls("", "")); n != 0 {
		t.Fatalf("%d calls sent", n)
	}
	ctx := context.Background()
	for _, err := range []error{
		p.DeleteVolume(ctx, eastus1, "/subscriptions/"+subscription+"/resourceGroups/g/providers/Microsoft.Compute/virtualMachines/gpuprov-x"),
		p.DeleteVolume(ctx, eastus1, "/subscriptions/"+subscription+"/resourceGroups/g/providers/Microsoft.Compute/disks/someone-elses"),
		p.DetachVolume(ctx, eastus1, "not an id", vmIDOf("eastus", "gpuprov-x-1")),
	} {
		kindOf(t, err, provider.InvalidRequest)
	}
	_, err := p.AttachVolume(ctx, eastus1, "/subscriptions/"+subscription+"/resourceGroups/g/providers/Microsoft.Compute/disks/gpuprov--x", "i-123")
	kindOf(t, err, provider.InvalidRequest)
	if n := len(v.calls("", "")); n != 0 {
		t.Fatalf("%d calls sent", n)
	}
}

// The vendor's answers map to the kinds the core acts on: a zone out of
// capacity is Capacity, a quota Quota, a disk attached elsewhere or being
// detached in use, a throttled answer Transient.
func TestVolumeErrorMapping(t *testing.T) {
	ctx := context.Background()
	t.Run("create", func(t *testing.T) {
		for _, tc := range []struct {
			f    fault
			kind provider.ErrorKind
		}{
			// The operation of the PUT fails: allocation in the zone.
			{fault{Async: true, Code: "ZonalAllocationFailed", Message: "Allocation failed. We do not have sufficient capacity for the requested VM size in this zone."}, provider.Capacity},
			// Refused by the PUT (common-deployment-errors, error-sku-not-available).
			{fault{Status: 409, Code: "SkuNotAvailable", Message: "The requested size for resource '/subscriptions/s/resourceGroups/g/providers/Microsoft.Compute/disks/gpuprov--v' is currently not available in location 'eastus' zones '1' for subscription 's'."}, provider.Capacity},
			// error-resource-quota: QuotaExceeded; OperationNotAllowed naming a quota
			// (no disk-specific quota answer was found; the text is modelled on the
			// documented vCPU one).
			{fault{Status: 400, Code: "QuotaExceeded", Message: "Operation results in exceeding quota limits of disks. Maximum allowed: 10, Current in use: 10, Additional requested: 1."}, provider.Quota},
			{fault{Status: 409, Code: "OperationNotAllowed", Message: "Operation could not be completed as it results in exceeding approved PremiumDiskCount quota."}, provider.Quota},
			// ansible-collections/azure#792: the SKU the location lacks, target sku.
			{fault{Status: 400, Code: "InvalidParameter", Body: `{"error":{"code":"InvalidParameter","message":"SKU Premium_LRS is not available.","target":"sku"}}`}, provider.Unavailable},
			{fault{Status: 400, Code: "InvalidParameter", Message: "The value of parameter diskSizeGB is invalid."}, provider.InvalidRequest},
			{fault{Status: 429, Code: "OperationNotAllowed", Body: azure.ThrottledBody, RetryAfter: "30"}, provider.Transient},
			{fault{Status: 500, Code: "InternalServerError", Message: "An internal server error occurred."}, provider.Transient},
		} {
			v, p, _ := newVolumeCloud(t, azure.Config{})
			v.mu.Lock()
			v.diskFaults = []fault{tc.f}
			v.mu.Unlock()
			_, err := p.CreateVolume(ctx, volSpec("v", 100, eastus1))
			pe := kindOf(t, err, tc.kind)
			if tc.f.Code != "" && !azure.IsCode(err, tc.f.Code) {
				t.Errorf("%s: IsCode false for %v", tc.f.Code, err)
			}
			if tc.f.RetryAfter != "" && pe.RetryAfter != 30*time.Second {
				t.Errorf("throttled: retry after %v", pe.RetryAfter)
			}
		}
	})
	t.Run("attach", func(t *testing.T) {
		for _, tc := range []struct {
			f     fault
			kind  provider.ErrorKind
			inUse bool
		}{
			// [errmsg] rows; 409 per kubernetes/kubernetes#78657.
			{fault{Status: 409, Code: "AttachDiskWhileBeingDetached", Message: "Cannot attach data disk 'gpuprov--v' to VM 'gpuprov-a-1' because the disk is currently being detached. Please wait until the disk is completely detached and then try again."}, provider.Transient, true},
			{fault{Status: 409, Code: "ConflictingUserInput", Message: "Disk '/subscriptions/s/resourceGroups/g/providers/Microsoft.Compute/disks/gpuprov--v' cannot be attached as the disk is already owned by VM '/subscriptions/s/resourceGroups/g/providers/Microsoft.Compute/virtualMachines/other'."}, provider.InvalidRequest, true},
			{fault{Status: 409, Code: "OperationNotAllowed", Message: "The maximum number of data disks allowed to be attached to a VM of this size is 8."}, provider.Quota, false},
			{fault{Status: 409, Code: "OperationNotAllowed", Message: "Operation 'PATCH' is not allowed on VM 'gpuprov-a-1' since another operation is in progress."}, provider.Transient, false},
			{fault{Status: 400, Code: "InvalidParameter", Message: "A disk at LUN 0 already exists."}, provider.Transient, false},
			// A code only the operation reports.
			{fault{Async: true, Code: "ConflictingUserInput", Message: "Cannot attach the disk gpuprov--v to VM a because it is already attached to VM b. A disk can be attached to only one VM at a time."}, provider.InvalidRequest, true},
		} {
			v, p, _ := newVolumeCloud(t, azure.Config{})
			vm := v.running(t, p, "a", eastus1)
			vol, err := p.CreateVolume(ctx, volSpec("v", 100, eastus1))
			if err != nil {
				t.Fatal(err)
			}
			v.mu.Lock()
			v.patchFaults = []fault{tc.f}
			v.mu.Unlock()
			_, err = p.AttachVolume(ctx, eastus1, vol.ID, vm)
			kindOf(t, err, tc.kind)
			if errors.Is(err, provider.ErrInUse) != tc.inUse || !azure.IsCode(err, tc.f.Code) {
				t.Errorf("%s %s: in use %v, want %v (%v)", tc.f.Code, tc.f.Message, errors.Is(err, provider.ErrInUse), tc.inUse, err)
			}
		}
	})
	t.Run("delete", func(t *testing.T) {
		// The DELETE itself refused for a disk attached meanwhile (the GET
		// before it read it free).
		v, p, _ := newVolumeCloud(t, azure.Config{})
		vol, err := p.CreateVolume(ctx, volSpec("v", 100, eastus1))
		if err != nil {
			t.Fatal(err)
		}
		v.syncFaults["DELETE /disks/gpuprov--v"] = []fault{{Status: 409, Code: "OperationNotAllowed",
			Message: "Disk gpuprov--v is attached to VM /subscriptions/s/resourceGroups/g/providers/Microsoft.Compute/virtualMachines/gpuprov-a-1."}}
		err = p.DeleteVolume(ctx, eastus1, vol.ID)
		inUse(t, err, provider.InvalidRequest)
		if !azure.IsCode(err, "OperationNotAllowed") {
			t.Fatal(err)
		}
	})
}

// A volume attached to a VM that is being deleted is Transient in use:
// the core's delete waits (volumes.go deleteVolume), and once the VM is
// gone Azure has released the disk and the delete goes through.
func TestDeleteVolumeOfAVMBeingDeleted(t *testing.T) {
	v, p, _ := newVolumeCloud(t, azure.Config{})
	ctx := context.Background()
	vm := v.running(t, p, "a", eastus1)
	vol, err := p.CreateVolume(ctx, volSpec("v", 100, eastus1))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.AttachVolume(ctx, eastus1, vol.ID, vm); err != nil {
		t.Fatal(err)
	}
	if err := p.Delete(ctx, eastus1, "a", []string{vm}); err != nil {
		t.Fatal(err)
	}
	inUse(t, p.DeleteVolume(ctx, eastus1, vol.ID), provider.Transient)
	_, err = p.AttachVolume(ctx, eastus1, vol.ID, v.running(t, p, "b", eastus1))
	if err != nil {
		t.Fatalf("attach once the VM holding it is gone: %v", err)
	}
	seen, err := p.ObserveVolume(ctx, eastus1, "v")
	if err != nil || seen.Status != provider.VolumeAttached || !strings.Contains(seen.AttachedTo, "gpuprov-b-1") {
		t.Fatalf("observe: %+v, %v", seen, err)
	}
}

// AttachVolume takes the lowest LUN no data disk uses (a detached one's
// LUN is taken again), and attaches a disk of 4 TiB or more without host
// caching.
func TestAttachPicksTheLowestFreeLUN(t *testing.T) {
	v, p, _ := newVolumeCloud(t, azure.Config{})
	ctx := context.Background()
	vm := v.running(t, p, "a", eastus1)
	ids := map[string]string{}
	for _, s := range []provider.VolumeSpec{volSpec("v0", 100, eastus1), volSpec("v1", 100, eastus1), volSpec("big", 4096, eastus1)} {
		vol, err := p.CreateVolume(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		ids[s.Name] = vol.ID
	}
	for i, name := range []string{"v0", "v1"} {
		if dev, err := p.AttachVolume(ctx, eastus1, ids[name], vm); err != nil || dev != fmt.Sprintf("/dev/disk/azure/scsi1/lun%d", i) {
			t.Fatalf("%s: %q, %v", name, dev, err)
		}
	}
	if err := p.DetachVolume(ctx, eastus1, ids["v0"], vm); err != nil {
		t.Fatal(err)
	}
	if dev, err := p.AttachVolume(ctx, eastus1, ids["big"], vm); err != nil || dev != "/dev/disk/azure/scsi1/lun0" {
		t.Fatalf("big: %q, %v", dev, err)
	}
	if got := v.dataDisks(vm); fmt.Sprint(got) != fmt.Sprint(map[string]int{"gpuprov--v1": 1, "gpuprov--big": 0}) {
		t.Fatalf("data disks %v", got)
	}
	patches := v.calls(http.MethodPatch, "")
	var upd struct {
		Properties struct {
			StorageProfile struct {
				DataDisks []struct {
					Name, Caching, CreateOption string
					Lun                         int
				} `json:"dataDisks"`
			} `json:"storageProfile"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(patches[len(patches)-1].Body, &upd); err != nil {
		t.Fatal(err)
	}
	caching := map[string]string{}
	for _, dd := range upd.Properties.StorageProfile.DataDisks {
		caching[dd.Name] = dd.Caching
	}
	if caching["gpuprov--big"] != "None" || caching["gpuprov--v1"] != "ReadOnly" || len(caching) != 2 {
		t.Fatalf("caching of the last PATCH: %v (%s)", caching, patches[len(patches)-1].Body)
	}
}

// The wait for an attach is bounded by operation_timeout on the clock:
// still attaching is Transient, and the retry sends nothing again but
// waits on, and returns the device once the disk says attached.
func TestAttachWaitIsBounded(t *testing.T) {
	v, p, clk := newVolumeCloud(t, azure.Config{OperationTimeout: 2 * time.Minute, PollInterval: 10 * time.Second})
	ctx := context.Background()
	vm := v.running(t, p, "a", eastus1)
	vol, err := p.CreateVolume(ctx, volSpec("v", 100, eastus1))
	if err != nil {
		t.Fatal(err)
	}
	v.mu.Lock()
	v.attachLag = 1000
	v.mu.Unlock()
	start := clk.Now()
	_, err = p.AttachVolume(ctx, eastus1, vol.ID, vm)
	kindOf(t, err, provider.Transient)
	if waited := clk.Now().Sub(start); waited < 2*time.Minute || waited > 2*time.Minute+time.Second {
		t.Fatalf("waited %v", waited)
	}
	v.mu.Lock()
	for _, pa := range v.lagging {
		pa.left = 2
	}
	v.mu.Unlock()
	dev, err := p.AttachVolume(ctx, eastus1, vol.ID, vm)
	if err != nil || dev != "/dev/disk/azure/scsi1/lun0" {
		t.Fatalf("retry: %q, %v", dev, err)
	}
	if n := len(v.calls(http.MethodPatch, "")); n != 1 {
		t.Fatalf("%d PATCHes, want 1", n)
	}
}

// An attach the VM failed (the operation Failed, the VM left Failed with
// the disk listed) is Failed when asked again, not waited on.
func TestAttachTheVMFailed(t *testing.T) {
	v, p, _ := newVolumeCloud(t, azure.Config{})
	ctx := context.Background()
	vm := v.running(t, p, "a", eastus1)
	vol, err := p.CreateVolume(ctx, volSpec("v", 100, eastus1))
	if err != nil {
		t.Fatal(err)
	}
	v.mu.Lock()
	v.patchFaults = []fault{{Async: true, Code: "InternalExecutionError", Message: "An internal execution error occurred."}}
	v.mu.Unlock()
	_, err = p.AttachVolume(ctx, eastus1, vol.ID, vm)
	kindOf(t, err, provider.Failed)
	_, err = p.AttachVolume(ctx, eastus1, vol.ID, vm)
	kindOf(t, err, provider.Failed)
	if !strings.Contains(err.Error(), "provisioning state is Failed") || len(v.calls(http.MethodPatch, "")) != 1 {
		t.Fatalf("%v; %d PATCHes", err, len(v.calls(http.MethodPatch, "")))
	}
}

// No error of a volume call carries the access token, whatever the
// answer echoes (an echoing proxy, as TestErrorsNeverCarryTheAccessToken
// has it): the kind is decided from the status, and a disk in use stays
// in use once the echo in its refusal is masked.
func TestVolumeErrorsNeverCarryTheAccessToken(t *testing.T) {
	const token = "eyJ0eXAiOiJKV1QiLCJhbGciOiJSUzI1NiJ9.test-volume-access-token.0123456789abcdef"
	ctx := context.Background()
	for _, tc := range []struct {
		status int
		kind   provider.ErrorKind
	}{
		{http.StatusUnauthorized, provider.Credentials},
		{http.StatusInternalServerError, provider.Transient},
	} {
		t.Run(http.StatusText(tc.status), func(t *testing.T) {
			v, p, _ := newVolumeCloud(t, azure.Config{}, azure.WithCredential(staticToken(token)))
			vm := v.running(t, p, "a", eastus1)
			vol, err := p.CreateVolume(ctx, volSpec("v", 100, eastus1))
			if err != nil {
				t.Fatal(err)
			}
			v.mu.Lock()
			v.echoAuth = tc.status
			v.mu.Unlock()
			calls := map[string]func() error{
				"create":  func() error { _, err := p.CreateVolume(ctx, volSpec("w", 100, eastus1)); return err },
				"observe": func() error { _, err := p.ObserveVolume(ctx, eastus1, "v"); return err },
				"attach":  func() error { _, err := p.AttachVolume(ctx, eastus1, vol.ID, vm); return err },
				"detach":  func() error { return p.DetachVolume(ctx, eastus1, vol.ID, vm) },
				"delete":  func() error { return p.DeleteVolume(ctx, eastus1, vol.ID) },
			}
			resttest.NoLeak(t, token, true, calls)
			for name, call := range calls {
				if err := call(); provider.KindOf(err) != tc.kind {
					t.Errorf("%s: %v, want kind %s", name, err, tc.kind)
				}
			}
		})
	}
	v, p, _ := newVolumeCloud(t, azure.Config{}, azure.WithCredential(staticToken(token)))
	vol, err := p.CreateVolume(ctx, volSpec("v", 100, eastus1))
	if err != nil {
		t.Fatal(err)
	}
	v.mu.Lock()
	v.syncFaults["DELETE /disks/gpuprov--v"] = []fault{{Status: 409, Code: "OperationNotAllowed",
		Message: "Disk gpuprov--v is attached to VM /subscriptions/s/resourceGroups/g/providers/Microsoft.Compute/virtualMachines/x. Authorization: Bearer " + token}}
	v.mu.Unlock()
	err = p.DeleteVolume(ctx, eastus1, vol.ID)
	resttest.NoLeak(t, token, true, map[string]func() error{"delete in use": func() error { return err }})
	inUse(t, err, provider.InvalidRequest)
}
