package azure

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"

	"github.com/org/gpuprov/provider"
)

// resourceGroupAPIVersion is the Microsoft.Resources API version of the
// resource group PUT (https://learn.microsoft.com/en-us/rest/api/resources/resource-groups/create-or-update).
const resourceGroupAPIVersion = "2021-04-01"

// vnetPrefix is the address space and subnet of the shared virtual network.
const vnetPrefix = "10.77.0.0/16"

// tagSpot is the NIC tag saying whether the VM it serves is Spot: a Spot VM
// evicted with policy Delete is gone without a trace, and Diagnose reads
// this tag to attribute the disappearance.
const tagSpot = "gpuprov-spot"

// prepared is what Prepare returns (journaled) and Create reads.
type prepared struct {
	ResourceGroup string `json:"resource_group"`
	NIC           string `json:"nic"` // resource id
	Image         image  `json:"image"`
	// Spot is the NIC's gpuprov-spot tag as Prepare wrote it; nil in data
	// journaled before it was recorded. Create corrects the tag when the
	// core hands it the data of a Spot attempt for an on-demand offer, or
	// the other way round (a failover in place reuses the side resources).
	Spot *bool `json:"spot,omitempty"`
}

// Prepare makes the VM's side resources in the offer's region, each named
// after the VM (see sideName) and tagged with its identity and the
// request's labels: a network security group (inbound tcp/22 plus
// spec.OpenPorts from the sources, see securityRules), a Standard static
// public IPv4 (in the offer's zone, if any) and a NIC on the subnet
// joining the two. Each is a PUT, which adopts what exists, followed by a
// bounded wait on its operation (they take seconds). With the default
// resource group it first makes gpuprov-<installation>-<region> and the
// shared virtual network gpuprov-<region>, once per process, neither of
// which Cleanup deletes; when that group turns out to be gone (deleted out
// of band: ResourceGroupNotFound), Prepare forgets it and makes both
// again, once per call, and a group still missing after that is
// Transient. In a configured resource group, a missing group is
// InvalidRequest, and a side resource of the name that carries another
// installation's identity is Unavailable: nothing was made. The boot image
// and the request's source ranges are checked here; one that does not
// parse is InvalidRequest.
func (p *Provider) Prepare(ctx context.Context, offer *provider.Offer, spec *provider.InstanceSpec) (json.RawMessage, error) {
	b, err := p.prepare(ctx, offer, spec)
	if err == nil || !p.ownGroupGone(err) {
		return b, err
	}
	rg := p.resourceGroup(offer.Location.Region)
	p.forgetGroup(rg)
	p.log.Warn("azure: resource group gone; making it again", "provider", p.name, "vm", spec.VM, "resource_group", rg)
	if b, err = p.prepare(ctx, offer, spec); err != nil && p.ownGroupGone(err) {
		p.forgetGroup(rg)
		return nil, p.reclassify(err, provider.Transient, "resource group %s still missing after it was made again", rg)
	}
	return b, err
}

// ownGroupGone reports whether err says the adapter's own resource group
// (gpuprov-<installation>-<region>, not a configured one) does not exist.
func (p *Provider) ownGroupGone(err error) bool {
	return p.cfg.ResourceGroup == "" && IsCode(err, "ResourceGroupNotFound")
}

// forgetGroup drops what this process remembers having made in rg (the
// group and its virtual network), so that the next Prepare makes them.
func (p *Provider) forgetGroup(rg string) {
	p.ensured.Range(func(k, _ any) bool {
		if k == "rg:"+rg || strings.HasPrefix(k.(string), "vnet:"+rg+"/") {
			p.ensured.Delete(k)
		}
		return true
	})
}

// reclassify returns the *provider.Error of err with kind, its text
// prefixed with what (formatted); err's provider and op prefix is not
// repeated.
func (p *Provider) reclassify(err error, kind provider.ErrorKind, format string, args ...any) *provider.Error {
	var pe *provider.Error
	if !errors.As(err, &pe) {
		return p.errorf(kind, "prepare", format+": %w", append(args, err)...)
	}
	out := *pe
	out.Kind, out.Block, out.BlockFor = kind, provider.ScopeDefault, 0
	out.Err = fmt.Errorf(format+": %w", append(args, pe.Err)...)
	return &out
}

func (p *Provider) prepare(ctx context.Context, offer *provider.Offer, spec *provider.InstanceSpec) (json.RawMessage, error) {
	region := offer.Location.Region
	rg := p.resourceGroup(region)
	imgRef := spec.Image
	if imgRef == "" {
		imgRef = p.cfg.Image
	}
	img, err := parseImage(imgRef)
	if err != nil {
		return nil, p.errorf(provider.InvalidRequest, "prepare", "image: %w", err)
	}
	if err := provider.ValidateSourceRanges(spec.SourceRanges); err != nil {
		return nil, p.errorf(provider.InvalidRequest, "prepare", "%w", err)
	}
	sources := provider.SourcesFor(spec, p.cfg.SourceRanges)
	if p.cfg.ResourceGroup == "" {
		if err := p.ensureResourceGroup(ctx, rg, region); err != nil {
			return nil, err
		}
	}
	subnet := p.cfg.SubnetID
	if subnet == "" {
		if subnet, err = p.ensureVNet(ctx, rg, region); err != nil {
			return nil, err
		}
	}
	labels := spec.Labels()
	nsgName, ipName, nicName := p.sideName(spec.VM, region, "nsg"), p.sideName(spec.VM, region, "ip"), p.sideName(spec.VM, region, "nic")
	if p.cfg.ResourceGroup != "" {
		if err := p.checkSideOwners(ctx, rg, spec.VM, nsgName, ipName, nicName); err != nil {
			return nil, err
		}
	}
	nsg := armnetwork.SecurityGroup{
		Location: to(region), Tags: tags(labels),
		Properties: &armnetwork.SecurityGroupPropertiesFormat{SecurityRules: securityRules(spec.OpenPorts, sources)},
	}
	if err := p.putNSG(ctx, rg, nsgName, nsg); err != nil {
		return nil, err
	}
	ip := armnetwork.PublicIPAddress{
		Location: to(region), Tags: tags(labels),
		SKU: &armnetwork.PublicIPAddressSKU{Name: to(armnetwork.PublicIPAddressSKUNameStandard)},
		Properties: &armnetwork.PublicIPAddressPropertiesFormat{
			PublicIPAllocationMethod: to(armnetwork.IPAllocationMethodStatic),
			PublicIPAddressVersion:   to(armnetwork.IPVersionIPv4),
		},
	}
	if z := zoneOf(offer.Location); z != "" {
		ip.Zones = []*string{to(z)}
	}
	if err := p.putIP(ctx, rg, ipName, ip); err != nil {
		return nil, err
	}
	nic := armnetwork.Interface{
		Location: to(region), Tags: nicTags(spec, offer.Spot),
		Properties: &armnetwork.InterfacePropertiesFormat{
			NetworkSecurityGroup: &armnetwork.SecurityGroup{ID: to(p.networkID(rg, "networkSecurityGroups", nsgName))},
			IPConfigurations: []*armnetwork.InterfaceIPConfiguration{{
				Name: to("ipconfig1"),
				Properties: &armnetwork.InterfaceIPConfigurationPropertiesFormat{
					Primary:                   to(true),
					PrivateIPAllocationMethod: to(armnetwork.IPAllocationMethodDynamic),
					Subnet:                    &armnetwork.Subnet{ID: to(subnet)},
					PublicIPAddress:           &armnetwork.PublicIPAddress{ID: to(p.networkID(rg, "publicIPAddresses", ipName))},
				},
			}},
		},
	}
	if err := p.putNIC(ctx, rg, nicName, nic); err != nil {
		return nil, err
	}
	b, err := json.Marshal(prepared{ResourceGroup: rg, NIC: p.networkID(rg, "networkInterfaces", nicName), Image: img, Spot: to(offer.Spot)})
	if err != nil {
		return nil, p.errorf(provider.Failed, "prepare", "encode: %w", err)
	}
	return b, nil
}

// nicTags are the NIC's tags: the VM's labels and tagSpot.
func nicTags(spec *provider.InstanceSpec, spot bool) map[string]*string {
	t := tags(spec.Labels())
	t[tagSpot] = to(strconv.FormatBool(spot))
	return t
}

// securityRules allows inbound tcp/22 and ports, each once, from sources
// (provider.SourcesFor): one rule per port from "*" when the sources are
// provider.DefaultSourceRanges; else one rule per port and address family
// whose sourceAddressPrefixes are the family's ranges (a rule may not mix
// IPv4 and IPv6 prefixes: ResourceCannotContainAddressPrefixesFromDifferentAddressFamilies,
// hashicorp/terraform-provider-azurerm#12534), and for each of ports (not
// SSH) one more rule from the service tag VirtualNetwork, which
// sourceAddressPrefixes may not hold (SecurityRuleParameterContainsUnsupportedValue,
// kubernetes/kubernetes#71789), so that the cluster's nodes in the
// virtual network reach each other. Priorities count up from 1000 in that
// order.
func securityRules(ports []provider.Port, sources []string) []*armnetwork.SecurityRule {
	type key struct {
		n     int
		proto string
	}
	want := []key{{22, "tcp"}}
	for _, pt := range ports {
		k := key{pt.Number, strings.ToLower(pt.Protocol)}
		if k.proto == "" {
			k.proto = "tcp"
		}
		if !slices.Contains(want, k) {
			want = append(want, k)
		}
	}
	type from struct {
		suffix   string
		prefix   string   // sourceAddressPrefix: "*" or a service tag
		prefixes []string // sourceAddressPrefixes: CIDRs of one family
	}
	restricted := provider.Restricted(sources)
	froms := []from{{prefix: "*"}}
	if restricted {
		var v4, v6 []string
		for _, s := range sources {
			if pfx, err := netip.ParsePrefix(s); err == nil && !pfx.Addr().Is4() {
				v6 = append(v6, s)
			} else {
				v4 = append(v4, s)
			}
		}
		froms = nil
		if len(v4) > 0 {
			froms = append(froms, from{prefixes: v4})
		}
		if len(v6) > 0 {
			froms = append(froms, from{suffix: "-v6", prefixes: v6})
		}
	}
	var rules []*armnetwork.SecurityRule
	for i, k := range want {
		proto := armnetwork.SecurityRuleProtocolTCP
		if k.proto == "udp" {
			proto = armnetwork.SecurityRuleProtocolUDP
		}
		name := fmt.Sprintf("gpuprov-%d-%s", k.n, k.proto)
		fs := froms
		if i == 0 {
			name = "gpuprov-ssh"
		} else if restricted {
			fs = append(slices.Clone(froms), from{suffix: "-vnet", prefix: "VirtualNetwork"})
		}
		for _, f := range fs {
			r := &armnetwork.SecurityRule{
				Name: to(name + f.suffix),
				Properties: &armnetwork.SecurityRulePropertiesFormat{
					Priority: to(int32(1000 + len(rules))), Direction: to(armnetwork.SecurityRuleDirectionInbound),
					Access: to(armnetwork.SecurityRuleAccessAllow), Protocol: to(proto), SourcePortRange: to("*"),
					DestinationAddressPrefix: to("*"), DestinationPortRange: to(strconv.Itoa(k.n)),
				},
			}
			if f.prefix != "" {
				r.Properties.SourceAddressPrefix = to(f.prefix)
			}
			for _, s := range f.prefixes {
				r.Properties.SourceAddressPrefixes = append(r.Properties.SourceAddressPrefixes, to(s))
			}
			rules = append(rules, r)
		}
	}
	return rules
}

// ensureResourceGroup PUTs the installation's resource group of region
// (idempotent: an existing group is answered 200), once per process. The
// compute and network modules have no resource group client, so this is
// a raw call through the same ARM pipeline.
func (p *Provider) ensureResourceGroup(ctx context.Context, rg, region string) error {
	key := "rg:" + rg
	if _, ok := p.ensured.Load(key); ok {
		return nil
	}
	cctx, cancel := p.call(ctx)
	defer cancel()
	req, err := runtime.NewRequest(cctx, http.MethodPut, runtime.JoinPaths(p.raw.Endpoint(),
		"/subscriptions/"+p.cfg.SubscriptionID+"/resourcegroups/"+rg))
	if err != nil {
		return p.errorf(provider.Failed, "prepare", "resource group request: %w", err)
	}
	q := req.Raw().URL.Query()
	q.Set("api-version", resourceGroupAPIVersion)
	req.Raw().URL.RawQuery = q.Encode()
	body := map[string]any{"location": region, "tags": map[string]string{provider.LabelInstallation: p.installation}}
	if err := runtime.MarshalAsJSON(req, body); err != nil {
		return p.errorf(provider.Failed, "prepare", "resource group body: %w", err)
	}
	resp, err := p.raw.Pipeline().Do(req)
	if err != nil {
		return p.classify("prepare", fmt.Errorf("resource group %s: %w", rg, err))
	}
	if !runtime.HasStatusCode(resp, http.StatusOK, http.StatusCreated) {
		return p.classify("prepare", fmt.Errorf("resource group %s: %w", rg, runtime.NewResponseError(resp)))
	}
	p.ensured.Store(key, true)
	return nil
}

// ensureVNet returns the subnet of the shared virtual network of region in
// rg, creating the network when it is missing (a GET first: a PUT of an
// existing network would rewrite its subnets), once per process.
func (p *Provider) ensureVNet(ctx context.Context, rg, region string) (string, error) {
	name := vnetName(region)
	subnetID := p.networkID(rg, "virtualNetworks", name) + "/subnets/" + subnetName
	key := "vnet:" + rg + "/" + name
	if _, ok := p.ensured.Load(key); ok {
		return subnetID, nil
	}
	cctx, cancel := p.call(ctx)
	got, err := p.vnets.Get(cctx, rg, name, nil)
	cancel()
	switch {
	case err == nil:
		if !hasSubnet(got.VirtualNetwork, subnetName) {
			return "", p.errorf(provider.Failed, "prepare", "virtual network %s in %s has no subnet %q", name, rg, subnetName)
		}
	case isNotFound(err):
		vnet := armnetwork.VirtualNetwork{
			Location: to(region), Tags: tags(map[string]string{provider.LabelInstallation: p.installation}),
			Properties: &armnetwork.VirtualNetworkPropertiesFormat{
				AddressSpace: &armnetwork.AddressSpace{AddressPrefixes: []*string{to(vnetPrefix)}},
				Subnets: []*armnetwork.Subnet{{Name: to(subnetName),
					Properties: &armnetwork.SubnetPropertiesFormat{AddressPrefix: to(vnetPrefix)}}},
			},
		}
		cctx, cancel := p.call(ctx)
		poller, err := p.vnets.BeginCreateOrUpdate(cctx, rg, name, vnet, nil)
		cancel()
		if err != nil {
			return "", p.classify("prepare", fmt.Errorf("virtual network %s: %w", name, err))
		}
		if err := finish(ctx, p, "prepare", "virtual network "+name, poller); err != nil {
			return "", err
		}
	default:
		return "", p.classify("prepare", fmt.Errorf("virtual network %s: %w", name, err))
	}
	p.ensured.Store(key, true)
	return subnetID, nil
}

func hasSubnet(v armnetwork.VirtualNetwork, name string) bool {
	if v.Properties == nil {
		return false
	}
	for _, s := range v.Properties.Subnets {
		if strings.EqualFold(deref(s.Name), name) {
			return true
		}
	}
	return false
}

func (p *Provider) putNSG(ctx context.Context, rg, name string, nsg armnetwork.SecurityGroup) error {
	cctx, cancel := p.call(ctx)
	poller, err := p.nsgs.BeginCreateOrUpdate(cctx, rg, name, nsg, nil)
	cancel()
	if err != nil {
		return p.classify("prepare", fmt.Errorf("network security group %s: %w", name, err))
	}
	return finish(ctx, p, "prepare", "network security group "+name, poller)
}

func (p *Provider) putIP(ctx context.Context, rg, name string, ip armnetwork.PublicIPAddress) error {
	cctx, cancel := p.call(ctx)
	poller, err := p.ips.BeginCreateOrUpdate(cctx, rg, name, ip, nil)
	cancel()
	if err != nil {
		return p.classify("prepare", fmt.Errorf("public IP %s: %w", name, err))
	}
	return finish(ctx, p, "prepare", "public IP "+name, poller)
}

func (p *Provider) putNIC(ctx context.Context, rg, name string, nic armnetwork.Interface) error {
	cctx, cancel := p.call(ctx)
	poller, err := p.nics.BeginCreateOrUpdate(cctx, rg, name, nic, nil)
	cancel()
	if err != nil {
		return p.classify("prepare", fmt.Errorf("network interface %s: %w", name, err))
	}
	return finish(ctx, p, "prepare", "network interface "+name, poller)
}

// finish waits for a network operation of op (bounded by
// OperationTimeout): its failure is classified; one still running when the
// bound runs out is Transient (the next try's PUT or DELETE finds it done
// or answers AnotherOperationInProgress).
func finish[T any](ctx context.Context, p *Provider, op, what string, poller *runtime.Poller[T]) error {
	_, done, err := wait(ctx, p, poller)
	switch {
	case err != nil:
		return p.classify(op, fmt.Errorf("%s: %w", what, err))
	case !done:
		return p.errorf(provider.Transient, op, "%s: operation still running after %v", what, p.cfg.OperationTimeout)
	}
	return nil
}

// checkSideOwners refuses, as Unavailable, side resource names in a shared
// (configured) resource group that another installation's resources hold.
func (p *Provider) checkSideOwners(ctx context.Context, rg, vm, nsgName, ipName, nicName string) error {
	check := func(what string, t map[string]*string, err error) error {
		switch {
		case isNotFound(err):
			return nil
		case err != nil:
			return p.classify("prepare", fmt.Errorf("%s: %w", what, err))
		case !p.ours(t, vm):
			return p.errorf(provider.Unavailable, "prepare", "%s in resource group %s exists and does not carry the identity of VM %s in installation %s",
				what, rg, vm, p.installation)
		}
		return nil
	}
	cctx, cancel := p.call(ctx)
	defer cancel()
	nsg, err := p.nsgs.Get(cctx, rg, nsgName, nil)
	if err := check("network security group "+nsgName, nsg.Tags, err); err != nil {
		return err
	}
	ip, err := p.ips.Get(cctx, rg, ipName, nil)
	if err := check("public IP "+ipName, ip.Tags, err); err != nil {
		return err
	}
	nic, err := p.nics.Get(cctx, rg, nicName, nil)
	return check("network interface "+nicName, nic.Tags, err)
}

// Cleanup deletes the VM's side resources in loc's region, in dependency
// order: the NIC (waited for, bounded), then the public IP and the network
// security group it referenced. What is gone (404, the resource group
// included) is success. A resource still in use (a NIC still attached to
// a VM being deleted or reserved for 180 seconds after, an IP or group
// still referenced) is Transient, as is a delete still running when the
// bound runs out; the core retries. It never touches the resource group or
// the virtual network, which other VMs share; in a configured resource
// group it deletes only what carries this VM's identity.
func (p *Provider) Cleanup(ctx context.Context, loc provider.Location, vm string) error {
	region := loc.Region
	rg := p.resourceGroup(region)
	nicName := p.sideName(vm, region, "nic")
	if err := deleteSide(ctx, p, rg, vm, "network interface "+nicName,
		func(ctx context.Context) (map[string]*string, error) {
			r, err := p.nics.Get(ctx, rg, nicName, nil)
			return r.Tags, err
		},
		func(ctx context.Context) (*runtime.Poller[armnetwork.InterfacesClientDeleteResponse], error) {
			return p.nics.BeginDelete(ctx, rg, nicName, nil)
		}); err != nil {
		return err
	}
	ipName, nsgName := p.sideName(vm, region, "ip"), p.sideName(vm, region, "nsg")
	errIP := deleteSide(ctx, p, rg, vm, "public IP "+ipName,
		func(ctx context.Context) (map[string]*string, error) {
			r, err := p.ips.Get(ctx, rg, ipName, nil)
			return r.Tags, err
		},
		func(ctx context.Context) (*runtime.Poller[armnetwork.PublicIPAddressesClientDeleteResponse], error) {
			return p.ips.BeginDelete(ctx, rg, ipName, nil)
		})
	errNSG := deleteSide(ctx, p, rg, vm, "network security group "+nsgName,
		func(ctx context.Context) (map[string]*string, error) {
			r, err := p.nsgs.Get(ctx, rg, nsgName, nil)
			return r.Tags, err
		},
		func(ctx context.Context) (*runtime.Poller[armnetwork.SecurityGroupsClientDeleteResponse], error) {
			return p.nsgs.BeginDelete(ctx, rg, nsgName, nil)
		})
	if errIP != nil {
		return errIP
	}
	return errNSG
}

// deleteSide deletes one side resource and waits for it, bounded. In a
// configured resource group it reads the resource's tags first and leaves
// one that is not this VM's.
func deleteSide[T any](ctx context.Context, p *Provider, rg, vm, what string,
	get func(context.Context) (map[string]*string, error),
	del func(context.Context) (*runtime.Poller[T], error)) error {
	if p.cfg.ResourceGroup != "" {
		cctx, cancel := p.call(ctx)
		t, err := get(cctx)
		cancel()
		switch {
		case isNotFound(err):
			return nil
		case err != nil:
			return p.classify("cleanup", fmt.Errorf("%s: %w", what, err))
		case !p.ours(t, vm):
			p.log.Warn("azure: side resource of another installation left alone", "provider", p.name, "vm", vm, "resource", what, "resource_group", rg)
			return nil
		}
	}
	cctx, cancel := p.call(ctx)
	poller, err := del(cctx)
	cancel()
	if err != nil {
		if isNotFound(err) {
			return nil
		}
		return p.classify("cleanup", fmt.Errorf("%s: %w", what, err))
	}
	return finish(ctx, p, "cleanup", what, poller)
}
