package aws_test

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
)

// securityGroups serves the security-group actions. Callers hold f.mu.
func (f *fakeEC2) securityGroups(r *fakeReq) *http.Response {
	switch r.Action {
	case "CreateSecurityGroup":
		name, vpc := r.Form.Get("GroupName"), r.Form.Get("VpcId")
		for _, sg := range f.sgs {
			if sg.Region == r.Region && sg.VPC == vpc && sg.Name == name {
				return ec2Error(400, "InvalidGroup.Duplicate", "The security group '"+name+"' already exists for VPC '"+vpc+"'")
			}
		}
		sg := &fakeSG{ID: f.newID("sg"), Region: r.Region, VPC: vpc, Name: name, Tags: tagSpec(r.Form, "security-group")}
		f.sgs[sg.ID] = sg
		return answer("CreateSecurityGroup", `<return>true</return><groupId>`+sg.ID+`</groupId>`)
	case "AuthorizeSecurityGroupIngress":
		// EC2 API Reference, AuthorizeSecurityGroupIngress: IpPermissions.N
		// (IpProtocol, FromPort, ToPort, IpRanges.M.CidrIp,
		// Ipv6Ranges.M.CidrIpv6, Groups.M.GroupId: the query names of
		// IpPermission's IpRanges, Ipv6Ranges and UserIdGroupPairs). A rule
		// that exists already fails the whole request with
		// InvalidPermission.Duplicate; a group named as the source must
		// exist (InvalidGroup.NotFound).
		sg, ok := f.sgs[r.Form.Get("GroupId")]
		if !ok {
			return ec2Error(400, "InvalidGroup.NotFound", "no group")
		}
		var add []string
		for i := 1; r.Form.Get(fmt.Sprintf("IpPermissions.%d.IpProtocol", i)) != ""; i++ {
			perm := fmt.Sprintf("IpPermissions.%d.", i)
			port := r.Form.Get(perm+"IpProtocol") + "/" + r.Form.Get(perm+"FromPort")
			if r.Form.Get(perm+"FromPort") != r.Form.Get(perm+"ToPort") {
				f.t.Errorf("ingress rule over a port range: %v", r.Form)
			}
			var sources []string
			for j := 1; ; j++ {
				v4, v6 := r.Form.Get(fmt.Sprintf("%sIpRanges.%d.CidrIp", perm, j)), r.Form.Get(fmt.Sprintf("%sIpv6Ranges.%d.CidrIpv6", perm, j))
				g := r.Form.Get(fmt.Sprintf("%sGroups.%d.GroupId", perm, j))
				if v4 == "" && v6 == "" && g == "" {
					break
				}
				if g != "" {
					if _, ok := f.sgs[g]; !ok {
						return ec2Error(400, "InvalidGroup.NotFound", "The security group '"+g+"' does not exist")
					}
				}
				for _, src := range []string{v4, v6, g} {
					if src != "" {
						sources = append(sources, src)
					}
				}
			}
			if len(sources) == 0 {
				f.t.Errorf("ingress rule without a source: %v", r.Form)
			}
			for _, src := range sources {
				add = append(add, fakeRuleText(port, src))
			}
		}
		for _, rule := range add {
			if slices.Contains(sg.Rules, rule) {
				return ec2Error(400, "InvalidPermission.Duplicate", "the rule "+rule+" already exists")
			}
		}
		sg.Rules = append(sg.Rules, add...)
		return answer("AuthorizeSecurityGroupIngress", `<return>true</return>`)
	case "DescribeSecurityGroups":
		fs := filters(r.Form)
		var ids []string
		for id, sg := range f.sgs {
			if sg.Region != r.Region || !matchTags(fs, sg.Tags) {
				continue
			}
			if v := fs["group-name"]; v != nil && !slices.Contains(v, sg.Name) {
				continue
			}
			if v := fs["vpc-id"]; v != nil && !slices.Contains(v, sg.VPC) {
				continue
			}
			ids = append(ids, id)
		}
		sort.Strings(ids)
		var b strings.Builder
		for _, id := range ids {
			sg := f.sgs[id]
			fmt.Fprintf(&b, `<item><groupId>%s</groupId><groupName>%s</groupName><vpcId>%s</vpcId>%s%s</item>`,
				sg.ID, sg.Name, sg.VPC, tagsXML(sg.Tags), sg.permissionsXML())
		}
		return answer("DescribeSecurityGroups", `<securityGroupInfo>`+b.String()+`</securityGroupInfo>`)
	default: // DeleteSecurityGroup
		// EC2 API Reference, errors-overview: DependencyViolation "The
		// specified object has dependent resources … Remove the
		// dependencies first, then retry your request"; a group that an
		// instance's network interface uses is such an object until the
		// instance is terminated. InvalidGroup.NotFound: "The specified
		// security group does not exist."
		id := r.Form.Get("GroupId")
		if _, ok := f.sgs[id]; !ok {
			return ec2Error(400, "InvalidGroup.NotFound", "The security group '"+id+"' does not exist")
		}
		for _, in := range f.instances {
			if in.SG == id && in.State != "terminated" {
				return ec2Error(400, "DependencyViolation", "resource "+id+" has a dependent object")
			}
		}
		delete(f.sgs, id)
		return answer("DeleteSecurityGroup", `<return>true</return><groupId>`+id+`</groupId>`)
	}
}

// fakeRuleText is how fakeSG.Rules writes one source admitted on port
// (proto/number): "tcp/22" from 0.0.0.0/0, else "tcp/22 from <CIDR or
// group id>".
func fakeRuleText(port, src string) string {
	if src == "0.0.0.0/0" {
		return port
	}
	return port + " from " + src
}

// permissionsXML is the group's inbound rules as DescribeSecurityGroups
// lists them (EC2 API Reference, SecurityGroup ipPermissions: IpPermission
// ipProtocol, fromPort, toPort, ipRanges/item/cidrIp,
// ipv6Ranges/item/cidrIpv6, groups/item/groupId), one item per port.
func (sg *fakeSG) permissionsXML() string {
	type perm struct{ v4, v6, groups []string }
	perms := map[string]*perm{}
	var order []string
	for _, rule := range sg.Rules {
		port, src, _ := strings.Cut(rule, " from ")
		if src == "" {
			src = "0.0.0.0/0"
		}
		pm := perms[port]
		if pm == nil {
			pm = &perm{}
			perms[port] = pm
			order = append(order, port)
		}
		switch {
		case strings.HasPrefix(src, "sg-"):
			pm.groups = append(pm.groups, src)
		case strings.Contains(src, ":"):
			pm.v6 = append(pm.v6, src)
		default:
			pm.v4 = append(pm.v4, src)
		}
	}
	var b strings.Builder
	b.WriteString(`<ipPermissions>`)
	for _, port := range order {
		proto, number, _ := strings.Cut(port, "/")
		pm := perms[port]
		fmt.Fprintf(&b, `<item><ipProtocol>%s</ipProtocol><fromPort>%s</fromPort><toPort>%s</toPort><ipRanges>`, proto, number, number)
		for _, c := range pm.v4 {
			fmt.Fprintf(&b, `<item><cidrIp>%s</cidrIp></item>`, c)
		}
		b.WriteString(`</ipRanges><ipv6Ranges>`)
		for _, c := range pm.v6 {
			fmt.Fprintf(&b, `<item><cidrIpv6>%s</cidrIpv6></item>`, c)
		}
		b.WriteString(`</ipv6Ranges><groups>`)
		for _, g := range pm.groups {
			fmt.Fprintf(&b, `<item><userId>123456789012</userId><groupId>%s</groupId></item>`, g)
		}
		b.WriteString(`</groups></item>`)
	}
	b.WriteString(`</ipPermissions>`)
	return b.String()
}

// keyPairs serves the key-pair actions. Callers hold f.mu.
func (f *fakeEC2) keyPairs(r *fakeReq) *http.Response {
	switch r.Action {
	case "ImportKeyPair":
		name := r.Form.Get("KeyName")
		if _, ok := f.keys[r.Region+"|"+name]; ok {
			return ec2Error(400, "InvalidKeyPair.Duplicate", "The keypair already exists")
		}
		material, err := base64.StdEncoding.DecodeString(r.Form.Get("PublicKeyMaterial"))
		if err != nil || !strings.HasPrefix(string(material), "ssh-") {
			return ec2Error(400, "InvalidKeyPair.Format", "Key is not in valid OpenSSH public key format")
		}
		k := &fakeKey{ID: f.newID("key"), Region: r.Region, Name: name, Material: string(material), Tags: tagSpec(r.Form, "key-pair")}
		f.keys[r.Region+"|"+name] = k
		return answer("ImportKeyPair", `<keyName>`+name+`</keyName><keyPairId>`+k.ID+`</keyPairId><keyFingerprint>aa:bb</keyFingerprint>`)
	case "DescribeKeyPairs":
		fs := filters(r.Form)
		var b strings.Builder
		for _, k := range f.keys {
			if k.Region != r.Region || !matchTags(fs, k.Tags) {
				continue
			}
			if v := fs["key-name"]; v != nil && !slices.Contains(v, k.Name) {
				continue
			}
			fmt.Fprintf(&b, `<item><keyPairId>%s</keyPairId><keyName>%s</keyName>%s</item>`, k.ID, k.Name, tagsXML(k.Tags))
		}
		return answer("DescribeKeyPairs", `<keySet>`+b.String()+`</keySet>`)
	default: // DeleteKeyPair: silent on a missing key, as EC2 is
		for key, k := range f.keys {
			if k.Region == r.Region && (k.ID == r.Form.Get("KeyPairId") || k.Name == r.Form.Get("KeyName")) {
				delete(f.keys, key)
			}
		}
		return answer("DeleteKeyPair", `<return>true</return>`)
	}
}

func (f *fakeEC2) spotPrices(r *fakeReq) *http.Response {
	var b strings.Builder
	for _, t := range list(r.Form, "InstanceType") {
		for key, price := range f.spot {
			typ, zone, _ := strings.Cut(key, "|")
			if typ != t || regionOfZone[strings.Split(zone, "-")[0]] != r.Region {
				continue
			}
			fmt.Fprintf(&b, `<item><instanceType>%s</instanceType><productDescription>Linux/UNIX</productDescription><spotPrice>%s</spotPrice><timestamp>%s</timestamp><availabilityZone>%s</availabilityZone><availabilityZoneId>%s</availabilityZoneId></item>`,
				t, price, f.clk.Now().UTC().Format("2006-01-02T15:04:05Z"), zoneName(zone), zone)
		}
	}
	return answer("DescribeSpotPriceHistory", `<spotPriceHistorySet>`+b.String()+`</spotPriceHistorySet>`)
}

// offerings answers that every requested type is sold in zones az1 and
// az2 of the region only.
func (f *fakeEC2) offerings(r *fakeReq) *http.Response {
	if lt := r.Form.Get("LocationType"); lt != "availability-zone-id" {
		f.t.Errorf("DescribeInstanceTypeOfferings with LocationType %q", lt)
	}
	var b strings.Builder
	for prefix, region := range regionOfZone {
		if region != r.Region {
			continue
		}
		for _, t := range filters(r.Form)["instance-type"] {
			for _, z := range []string{"az1", "az2"} {
				fmt.Fprintf(&b, `<item><instanceType>%s</instanceType><locationType>availability-zone-id</locationType><location>%s-%s</location></item>`, t, prefix, z)
			}
		}
	}
	return answer("DescribeInstanceTypeOfferings", `<instanceTypeOfferingSet>`+b.String()+`</instanceTypeOfferingSet>`)
}

type fakePG struct {
	ID, Region, Name, Strategy string
	Tags                       map[string]string
}

func (g *fakePG) xml() string {
	return fmt.Sprintf(`<groupName>%s</groupName><groupId>%s</groupId><groupArn>arn:aws:ec2:%s:123456789012:placement-group/%s</groupArn><state>available</state><strategy>%s</strategy>%s`,
		esc(g.Name), g.ID, g.Region, esc(g.Name), g.Strategy, tagsXML(g.Tags))
}

// placementGroups serves the placement-group actions, answering with the
// codes of the EC2 API Reference's client errors (InvalidPlacementGroup.
// Duplicate, .InUse, .Unknown) and the messages EC2 sends with them, as
// quoted in FDio/csit#179 (Duplicate), bcbio/bcbio-nextgen-vm#37 (Unknown)
// and terraform configurations ("is in use and may not be deleted").
// Callers hold f.mu.
func (f *fakeEC2) placementGroups(r *fakeReq) *http.Response {
	name := r.Form.Get("GroupName")
	switch r.Action {
	case "CreatePlacementGroup":
		if _, ok := f.pgs[r.Region+"|"+name]; ok {
			return ec2Error(400, "InvalidPlacementGroup.Duplicate", "The placement group '"+name+"' already exists.")
		}
		g := &fakePG{ID: f.newID("pg"), Region: r.Region, Name: name, Strategy: r.Form.Get("Strategy"), Tags: tagSpec(r.Form, "placement-group")}
		f.pgs[r.Region+"|"+name] = g
		return answer("CreatePlacementGroup", `<return>true</return><placementGroup>`+g.xml()+`</placementGroup>`)
	case "DescribePlacementGroups":
		names, fs := list(r.Form, "GroupName"), filters(r.Form)
		for _, n := range names {
			if _, ok := f.pgs[r.Region+"|"+n]; !ok {
				return ec2Error(400, "InvalidPlacementGroup.Unknown", "The Placement Group '"+n+"' is unknown.")
			}
		}
		var keys []string
		for key, g := range f.pgs {
			if g.Region != r.Region || !matchTags(fs, g.Tags) || names != nil && !slices.Contains(names, g.Name) {
				continue
			}
			if v := fs["group-name"]; v != nil && !slices.Contains(v, g.Name) {
				continue
			}
			if v := fs["strategy"]; v != nil && !slices.Contains(v, g.Strategy) {
				continue
			}
			keys = append(keys, key)
		}
		sort.Strings(keys)
		var b strings.Builder
		for _, k := range keys {
			b.WriteString(`<item>` + f.pgs[k].xml() + `</item>`)
		}
		return answer("DescribePlacementGroups", `<placementGroupSet>`+b.String()+`</placementGroupSet>`)
	default: // DeletePlacementGroup
		if _, ok := f.pgs[r.Region+"|"+name]; !ok {
			return ec2Error(400, "InvalidPlacementGroup.Unknown", "The Placement Group '"+name+"' is unknown.")
		}
		for _, in := range f.instances {
			if in.Region == r.Region && in.PG == name && in.State != "terminated" {
				return ec2Error(400, "InvalidPlacementGroup.InUse", "The placement group '"+name+"' is in use and may not be deleted.")
			}
		}
		delete(f.pgs, r.Region+"|"+name)
		return answer("DeletePlacementGroup", `<return>true</return>`)
	}
}

// checkPlacement refuses a launch into placement group name (none: "") of
// region in zoneID as EC2 does: a group the region does not know, and a
// cluster group whose instances are in another zone (the message quoted in
// hashicorp/terraform#16183 and bcbio/bcbio-nextgen-vm#45). Callers hold
// f.mu.
func (f *fakeEC2) checkPlacement(region, name, zoneID string) *http.Response {
	if name == "" {
		return nil
	}
	g, ok := f.pgs[region+"|"+name]
	if !ok {
		return ec2Error(400, "InvalidPlacementGroup.Unknown", "The Placement Group '"+name+"' is unknown.")
	}
	for _, in := range f.instances {
		if g.Strategy == "cluster" && in.Region == region && in.PG == name && in.State != "terminated" && in.ZoneID != zoneID {
			return ec2Error(400, "InvalidPlacementGroup.InUse", "The placement group '"+name+"' is in use in another availability zone: "+zoneName(in.ZoneID))
		}
	}
	return nil
}
