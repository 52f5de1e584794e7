package gcp_test

import (
	"fmt"
	"net/http"
	"sort"
	"strings"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// resourcePolicies serves regions/R/resourcePolicies[/NAME] as Compute
// Engine does: insert answers 409 alreadyExists for a taken name ("The
// resource '…' already exists", as recorded in
// GoogleCloudPlatform/scientific-computing-examples#53); get and delete
// answer 404 notFound for an unknown name; delete of a policy an instance
// still names answers 400 resourceInUseByAnotherResource, "The
// resource_policy resource '…' is already being used by '…'" (the reason a
// resource policy in use is refused with, hashicorp/terraform-provider-google#11260;
// the message in the form of that reason's other answers, e.g.
// hashicorp/terraform-provider-google#6277).
func (c *cloud) resourcePolicies(method, region string, rest []string, body []byte) *http.Response {
	path := func(name string) string {
		return "projects/" + project + "/regions/" + region + "/resourcePolicies/" + name
	}
	switch {
	case method == "POST" && len(rest) == 0:
		var rp computepb.ResourcePolicy
		if err := protojson.Unmarshal(body, &rp); err != nil {
			return apiErr(400, "invalid", err.Error())
		}
		key := region + "/" + rp.GetName()
		if _, ok := c.policies[key]; ok {
			return apiErr(409, "alreadyExists", fmt.Sprintf("The resource '%s' already exists", path(rp.GetName())))
		}
		if op := c.policyFault(region, "insert"); op != nil {
			return msg(op)
		}
		rp.Region = proto.String(endpoint + "/compute/v1/projects/" + project + "/regions/" + region)
		rp.SelfLink = proto.String(endpoint + "/compute/v1/" + path(rp.GetName()))
		rp.Status = proto.String("READY")
		rp.CreationTimestamp = proto.String("2026-03-01T12:00:00.000-07:00")
		c.policies[key] = &rp
		return msg(c.regionOp(region, "insert", nil))
	case method == "GET" && len(rest) == 1:
		rp, ok := c.policies[region+"/"+rest[0]]
		if !ok {
			return apiErr(404, "notFound", fmt.Sprintf("The resource '%s' was not found", path(rest[0])))
		}
		return msg(rp)
	case method == "DELETE" && len(rest) == 1:
		key := region + "/" + rest[0]
		if _, ok := c.policies[key]; !ok {
			return apiErr(404, "notFound", fmt.Sprintf("The resource '%s' was not found", path(rest[0])))
		}
		for zone, m := range c.instances {
			for name, in := range m {
				for _, rp := range in.GetResourcePolicies() {
					if policyKey(rp) == key {
						return apiErr(400, "resourceInUseByAnotherResource", fmt.Sprintf("The resource_policy resource '%s' is already being used by 'projects/%s/zones/%s/instances/%s'",
							path(rest[0]), project, zone, name))
					}
				}
			}
		}
		if op := c.policyFault(region, "delete"); op != nil {
			return msg(op)
		}
		delete(c.policies, key)
		return msg(c.regionOp(region, "delete", nil))
	}
	return apiErr(404, "notFound", "no route")
}

// policyFault pops a policy operation fault into a failed operation.
func (c *cloud) policyFault(region, kind string) *computepb.Operation {
	if len(c.policyFaults) == 0 {
		return nil
	}
	f := c.policyFaults[0]
	c.policyFaults = c.policyFaults[1:]
	return c.regionOp(region, kind, &f)
}

// regionOp is newOp for a regional operation.
func (c *cloud) regionOp(region, kind string, f *opFault) *computepb.Operation {
	op := c.newOp("", kind, 0, f)
	op.Region = proto.String(endpoint + "/compute/v1/projects/" + project + "/regions/" + region)
	return op
}

// policyKey is region/name of a resource policy path or URL.
func policyKey(path string) string {
	parts := strings.Split(path, "/")
	for i := range parts {
		if parts[i] == "regions" && i+3 < len(parts) && parts[i+2] == "resourcePolicies" {
			return parts[i+1] + "/" + parts[i+3]
		}
	}
	return path
}

// policyNames lists the resource policies left, as region/name.
func (c *cloud) policyNames() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for k := range c.policies {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
