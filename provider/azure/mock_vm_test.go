package azure_test

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// The VM half of the ARM mock (mock_test.go): PUT with its validation,
// GET with the instance view, the paged list; and the views tests read.

// disallowedUsers are the adminUsername values the Compute API refuses.
var disallowedUsers = []string{"administrator", "admin", "user", "user1", "test", "user2", "test1", "user3", "admin1", "1", "123",
	"a", "actuser", "adm", "admin2", "aspnet", "backup", "console", "david", "guest", "john", "owner", "root", "server", "sql",
	"support", "support_388945a0", "sys", "test2", "test3", "user4", "user5"}

func (c *cloud) putVM(req *http.Request, rg, name string, in map[string]any, old *res) *http.Response {
	if old != nil && req.Header.Get("If-None-Match") == "*" {
		return armErr(req, 412, "PreconditionFailed", fmt.Sprintf("The resource '%s' already exists and If-None-Match: * was given.", name))
	}
	loc := str(in, "location")
	p := obj(in, "properties")
	osp := obj(p, "osProfile")
	switch {
	case loc == "":
		return armErr(req, 400, "LocationRequired", "The location property is required for this definition.")
	case len(name) > 64:
		return armErr(req, 400, "InvalidParameter", "The value of parameter vmName is invalid.")
	case str(p, "hardwareProfile", "vmSize") == "":
		return armErr(req, 400, "InvalidParameter", "Required parameter 'hardwareProfile.vmSize' is missing (null).")
	case osp == nil || str(osp, "adminUsername") == "":
		return armErr(req, 400, "InvalidParameter", "Required parameter 'osProfile.adminUsername' is missing (null).")
	case slices.Contains(disallowedUsers, str(osp, "adminUsername")):
		return armErr(req, 400, "InvalidParameter", "The Admin Username specified is not allowed.")
	case len(obj(in, "tags")) > 50:
		return armErr(req, 400, "InvalidParameter", "Resource has more than 50 tags.")
	}
	lc := obj(osp, "linuxConfiguration")
	keys := list(lc, "ssh", "publicKeys")
	if lc["disablePasswordAuthentication"] == true && len(keys) == 0 {
		return armErr(req, 400, "InvalidParameter", "Required parameter 'osProfile.linuxConfiguration.ssh.publicKeys' is missing (null).")
	}
	for _, k := range keys {
		if !strings.HasPrefix(str(k.(map[string]any), "keyData"), "ssh-rsa ") {
			return armErr(req, 400, "InvalidParameter", "The value of parameter linuxConfiguration.ssh.publicKeys.keyData is invalid.")
		}
		if str(k.(map[string]any), "path") != "/home/"+str(osp, "adminUsername")+"/.ssh/authorized_keys" {
			return armErr(req, 400, "InvalidParameter", "Destination path for SSH public keys is currently limited to its default value /home/<user>/.ssh/authorized_keys due to a known issue in Linux provisioning agent.")
		}
	}
	cd := str(osp, "customData")
	raw, err := base64.StdEncoding.DecodeString(cd)
	if err != nil || len(raw) > 65535 {
		return armErr(req, 400, "InvalidParameter", "Custom data in OSProfile must be in Base64 encoding and with a maximum length of 87380 characters.")
	}
	if str(p, "priority") == "Spot" && (str(p, "evictionPolicy") == "" || obj(p, "billingProfile")["maxPrice"] == nil) {
		return armErr(req, 400, "InvalidParameter", "Spot VMs need an eviction policy and a max price.")
	}
	nics := list(p, "networkProfile", "networkInterfaces")
	if len(nics) != 1 {
		return armErr(req, 400, "InvalidParameter", "The VM needs one network interface.")
	}
	nicID := str(nics[0].(map[string]any), "id")
	nic := c.byID(nicID)
	if nic == nil || !strings.EqualFold(str(nic.obj, "location"), loc) {
		return armErr(req, 400, "InvalidParameter", fmt.Sprintf("The network interface %s was not found in location %s.", nicID, loc))
	}
	if vm := str(nic.obj, "properties", "virtualMachine", "id"); vm != "" && !strings.EqualFold(vm, c.resourceID(typVM, rg, name)) {
		return armErr(req, 400, "NicInUse", fmt.Sprintf("Network Interface %s is used by existing resource %s.", nicID, vm))
	}
	if old != nil {
		if old.customData != cd {
			return armErr(req, 409, "PropertyChangeNotAllowed", "Changing property 'osProfile.customData' is not allowed.")
		}
		url := c.newOp(req, typVM, loc, nil)
		return respond(req, 200, c.vmJSON(old, false), "Azure-AsyncOperation", url)
	}
	slot, refused := c.reservationFor(req, loc, in)
	if refused != nil {
		return refused
	}
	if fs := c.createFaults[strings.ToLower(loc)]; len(fs) > 0 {
		c.createFaults[strings.ToLower(loc)] = fs[1:]
		if f := fs[0]; !f.Async {
			return armErr(req, f.Status, f.Code, f.Message)
		} else {
			r := c.newVM(rg, name, in, nicID, cd)
			u, op := c.newOperation(req, typVM, loc, func() {
				r.provState, r.failCode, r.failMsg = "Failed", f.Code, f.Message
			})
			op.outcome, op.code, op.msg = "Failed", f.Code, f.Message
			return respond(req, 201, c.vmJSON(r, false), "Azure-AsyncOperation", u)
		}
	}
	r := c.newVM(rg, name, in, nicID, cd)
	if slot != nil {
		slot.allocated = append(slot.allocated, c.resourceID(typVM, rg, name))
	}
	u := c.newOp(req, typVM, loc, func() {
		if r.provState == "Creating" {
			r.provState, r.power = "Succeeded", "starting"
		}
	})
	return respond(req, 201, c.vmJSON(r, false), "Azure-AsyncOperation", u)
}

func (c *cloud) newVM(rg, name string, in map[string]any, nicID, customData string) *res {
	p := obj(in, "properties")
	delete(obj(p, "osProfile"), "customData") // write-only: GET never returns it
	disk := obj(p, "storageProfile", "osDisk")
	r := &res{typ: typVM, rg: rg, name: name, obj: in, provState: "Creating", customData: customData, nicID: nicID,
		diskName: str(disk, "name"), diskDelete: str(disk, "deleteOption") == "Delete"}
	if r.diskName == "" {
		r.diskName = name + "_OsDisk_1"
	}
	in["id"], in["name"], in["type"] = c.resourceID(typVM, rg, name), name, typVM
	p["vmId"] = fmt.Sprintf("00000000-0000-4000-8000-%012d", len(c.res)+1)
	p["timeCreated"] = "2026-03-01T12:00:00Z"
	c.res[key(typVM, rg, name)] = r
	c.res[key(typDisk, rg, r.diskName)] = &res{typ: typDisk, rg: rg, name: r.diskName,
		obj: map[string]any{"name": r.diskName, "location": in["location"]}}
	if nic := c.byID(nicID); nic != nil {
		obj(nic.obj, "properties")["virtualMachine"] = map[string]any{"id": c.resourceID(typVM, rg, name)}
	}
	return r
}

func (c *cloud) vmJSON(r *res, withView bool) map[string]any {
	out := map[string]any{}
	for k, v := range r.obj {
		out[k] = v
	}
	props := map[string]any{}
	for k, v := range obj(r.obj, "properties") {
		props[k] = v
	}
	props["provisioningState"] = r.provState
	if withView {
		props["instanceView"] = c.instanceView(r)
	}
	out["properties"] = props
	return out
}

func (c *cloud) instanceView(r *res) map[string]any {
	var st []map[string]any
	switch r.provState {
	case "Failed":
		st = append(st, map[string]any{"code": "ProvisioningState/failed/" + r.failCode, "level": "Error",
			"displayStatus": "Provisioning failed", "message": r.failMsg, "time": "2026-03-01T12:01:00Z"})
	default:
		st = append(st, map[string]any{"code": "ProvisioningState/" + strings.ToLower(r.provState), "level": "Info",
			"displayStatus": "Provisioning " + strings.ToLower(r.provState)})
	}
	if r.power != "" {
		st = append(st, map[string]any{"code": "PowerState/" + r.power, "level": "Info", "displayStatus": "VM " + r.power})
	}
	return map[string]any{"computerName": r.name, "statuses": st}
}

func (c *cloud) listVMs(req *http.Request, rg string) *http.Response {
	if c.autoRun {
		c.tick()
	}
	var names []string
	for _, r := range c.res {
		if r.typ == typVM && strings.EqualFold(r.rg, rg) {
			names = append(names, r.name)
		}
	}
	sort.Strings(names)
	skip, _ := strconv.Atoi(req.URL.Query().Get("$skiptoken"))
	out := map[string]any{}
	var page []any
	for i := skip; i < len(names) && i < skip+c.pageSize; i++ {
		page = append(page, c.vmJSON(c.res[key(typVM, rg, names[i])], false))
	}
	out["value"] = page
	if skip+c.pageSize < len(names) {
		q := req.URL.Query()
		q.Set("$skiptoken", strconv.Itoa(skip+c.pageSize))
		out["nextLink"] = endpoint + req.URL.Path + "?" + q.Encode()
	}
	return respond(req, 200, out)
}

// Test controls and views.

// vmNames are the VMs that exist (deleting ones too), sorted.
func (c *cloud) vmNames() []string { return c.names(typVM) }

func (c *cloud) names(typ string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, r := range c.res {
		if r.typ == typ {
			out = append(out, r.name)
		}
	}
	sort.Strings(out)
	return out
}

// customData returns the decoded custom data a VM was created with.
func (c *cloud) customData(name string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range c.res {
		if r.typ == typVM && r.name == name {
			b, _ := base64.StdEncoding.DecodeString(r.customData)
			return string(b)
		}
	}
	return ""
}

// setPower sets a VM's power state (by resource id).
func (c *cloud) setPower(id, power string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r := c.byID(id); r != nil {
		r.power = power
	}
}

// evict deletes a Spot VM as Azure's eviction policy Delete does.
func (c *cloud) evict(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r := c.byID(id); r != nil {
		c.remove(key(r.typ, r.rg, r.name))
	}
}

// calls returns the recorded requests whose path contains sub.
func (c *cloud) calls(method, sub string) []request {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []request
	for _, r := range c.requests {
		if (method == "" || r.Method == method) && strings.Contains(r.Path, sub) {
			out = append(out, r)
		}
	}
	return out
}

// groups are the resource groups that exist.
func (c *cloud) groups() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, g := range c.rgs {
		out = append(out, g["name"].(string))
	}
	sort.Strings(out)
	return out
}

// perVM are every per-VM resource left: VMs, disks, NICs, public IPs,
// network security groups.
func (c *cloud) perVM() []string {
	var out []string
	for _, typ := range []string{typVM, typDisk, typNIC, typIP, typNSG} {
		for _, n := range c.names(typ) {
			out = append(out, typ+"/"+n)
		}
	}
	return out
}
