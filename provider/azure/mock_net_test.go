package azure_test

import (
	"fmt"
	"net/http"
	"net/netip"
	"strings"
)

// The network half of the ARM mock (mock_test.go): PUT of virtual
// networks, security groups, public IPs and NICs with their checks, and
// the test controls that change the world behind the adapter's back.

// putNetwork creates or updates a network resource, checking its
// references exist in the same location.
func (c *cloud) putNetwork(req *http.Request, typ, rg, name string, in map[string]any, old *res) *http.Response {
	loc := str(in, "location")
	if loc == "" {
		return armErr(req, 400, "LocationRequired", "The location property is required for this definition.")
	}
	if old != nil && !strings.EqualFold(str(old.obj, "location"), loc) {
		return armErr(req, 400, "InvalidResourceLocation", fmt.Sprintf("The resource '%s' already exists in location '%s' in resource group '%s'. A resource with the same name cannot be created in location '%s'.", name, str(old.obj, "location"), rg, loc))
	}
	if len(obj(in, "tags")) > 50 {
		return armErr(req, 400, "InvalidTagNameCharacters", "too many tags")
	}
	props := obj(in, "properties")
	if props == nil {
		props = map[string]any{}
		in["properties"] = props
	}
	switch typ {
	case typNIC:
		ipcs := list(in, "properties", "ipConfigurations")
		if len(ipcs) == 0 {
			return armErr(req, 400, "InvalidRequestFormat", "Cannot parse the request: ipConfigurations is required.")
		}
		for _, ipc := range ipcs {
			p := obj(ipc.(map[string]any), "properties")
			sub := str(p, "subnet", "id")
			vnetID, _, _ := strings.Cut(sub, "/subnets/")
			vnet := c.byID(vnetID)
			if vnet == nil || !strings.EqualFold(str(vnet.obj, "location"), loc) {
				return armErr(req, 400, "InvalidResourceReference", fmt.Sprintf("Resource %s referenced by resource %s was not found.", sub, c.resourceID(typ, rg, name)))
			}
			if pip := str(p, "publicIPAddress", "id"); pip != "" {
				ip := c.byID(pip)
				if ip == nil || !strings.EqualFold(str(ip.obj, "location"), loc) {
					return armErr(req, 400, "InvalidResourceReference", fmt.Sprintf("Resource %s referenced by resource %s was not found.", pip, c.resourceID(typ, rg, name)))
				}
			}
			c.nextIP++
			p["privateIPAddress"] = fmt.Sprintf("10.77.0.%d", 3+c.nextIP)
			p["provisioningState"] = "Succeeded"
		}
		if nsg := str(props, "networkSecurityGroup", "id"); nsg != "" && c.byID(nsg) == nil {
			return armErr(req, 400, "InvalidResourceReference", fmt.Sprintf("Resource %s referenced by resource %s was not found.", nsg, c.resourceID(typ, rg, name)))
		}
		if old != nil {
			if vm := str(old.obj, "properties", "virtualMachine", "id"); vm != "" {
				props["virtualMachine"] = map[string]any{"id": vm}
			}
		}
	case typNSG:
		if refused := checkRules(req, c.resourceID(typ, rg, name), list(in, "properties", "securityRules")); refused != nil {
			return refused
		}
	case typIP:
		if str(in, "sku", "name") == "Standard" && str(props, "publicIPAllocationMethod") != "Static" {
			return armErr(req, 400, "StandardSkuPublicIPAddressesMustBeStatic", "Standard sku publicIp addresses must be static.")
		}
		if old != nil && str(old.obj, "properties", "ipAddress") != "" {
			props["ipAddress"] = str(old.obj, "properties", "ipAddress")
		} else {
			c.nextIP++
			props["ipAddress"] = fmt.Sprintf("203.0.113.%d", c.nextIP)
		}
	}
	in["id"], in["name"], in["type"] = c.resourceID(typ, rg, name), name, typ
	props["provisioningState"] = "Updating"
	status := http.StatusCreated
	if old != nil {
		status = http.StatusOK
	}
	r := &res{typ: typ, rg: rg, name: name, obj: in}
	c.res[key(typ, rg, name)] = r
	url := c.newOp(req, typ, loc, func() { props["provisioningState"] = "Succeeded" })
	return respond(req, status, in, "Azure-AsyncOperation", url)
}

// checkRules refuses security rules as the Network resource provider
// does: sourceAddressPrefixes holding a service tag or "*" (400
// SecurityRuleParameterContainsUnsupportedValue, the answer shown in
// kubernetes/kubernetes#71789 and hashicorp/terraform-provider-azurerm#5617),
// and sourceAddressPrefixes mixing IPv4 and IPv6 (400
// ResourceCannotContainAddressPrefixesFromDifferentAddressFamilies,
// hashicorp/terraform-provider-azurerm#12534).
func checkRules(req *http.Request, nsgID string, rules []any) *http.Response {
	for _, r := range rules {
		rule, _ := r.(map[string]any)
		id := nsgID + "/securityRules/" + str(rule, "name")
		families := map[bool]bool{}
		for _, p := range list(rule, "properties", "sourceAddressPrefixes") {
			v, _ := p.(string)
			pfx, err := netip.ParsePrefix(v)
			if err != nil {
				if a, aerr := netip.ParseAddr(v); aerr == nil {
					pfx = netip.PrefixFrom(a, a.BitLen())
				} else {
					return armErr(req, 400, "SecurityRuleParameterContainsUnsupportedValue", fmt.Sprintf("Security rule parameter SourceAddressPrefixes for rule with Id %s cannot specify existing VIRTUALNETWORK, INTERNET, AZURELOADBALANCER, '*' or system tags. Unsupported value used: %s.", id, v))
				}
			}
			families[pfx.Addr().Is4()] = true
		}
		if len(families) > 1 {
			return armErr(req, 400, "ResourceCannotContainAddressPrefixesFromDifferentAddressFamilies", fmt.Sprintf("%s contains IP addresses or prefixes that belong to different address families. All IP addresses or prefixes in the resource should belong to the same address family.", str(rule, "name")))
		}
	}
	return nil
}

// dropGroup deletes resource group rg with everything in it, as someone
// deleting it in the portal does.
func (c *cloud) dropGroup(rg string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.drop(rg)
}

func (c *cloud) drop(rg string) {
	delete(c.rgs, strings.ToLower(rg))
	for k, r := range c.res {
		if strings.EqualFold(r.rg, rg) {
			delete(c.res, k)
		}
	}
}

// nicTags returns the tags of the NIC name.
func (c *cloud) nicTags(name string) map[string]any {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range c.res {
		if r.typ == typNIC && r.name == name {
			return obj(r.obj, "tags")
		}
	}
	return nil
}
