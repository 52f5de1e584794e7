package azure_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/org/gpuprov/clock"
	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/azure"
)

var eastus = provider.Location{Region: "eastus"}

func rgOf(region string) string { return "gpuprov-" + installation + "-" + region }

func vmIDOf(region, name string) string {
	return "/subscriptions/" + subscription + "/resourceGroups/" + rgOf(region) + "/providers/Microsoft.Compute/virtualMachines/" + name
}

// Prepare makes the installation's resource group and the shared virtual
// network once, then the VM's security group (SSH and the open ports),
// Standard static public IP and NIC, each tagged with the identity and the
// request's labels; a second Prepare adopts them with the same PUTs.
func TestPrepareMakesTheSideResources(t *testing.T) {
	c, mt := newCloud(t)
	p := c.provider(t, mt, azure.Config{})
	spec := newSpec(t, "side")
	spec.UserLabels = map[string]string{"team": "vision"}
	o := offerIn(t, p, t4, eastus, false)
	ctx := context.Background()
	for range 2 {
		if _, err := p.Prepare(ctx, &o, spec); err != nil {
			t.Fatal(err)
		}
	}
	if g := c.groups(); !slices.Equal(g, []string{rgOf("eastus")}) || len(c.calls("PUT", "/resourcegroups/")) != 1 {
		t.Fatalf("resource groups %v, %d PUTs", g, len(c.calls("PUT", "/resourcegroups/")))
	}
	if n := len(c.calls("PUT", "/virtualNetworks/")); n != 1 {
		t.Fatalf("%d virtual network PUTs, want 1", n)
	}
	for _, typ := range []string{typNSG, typIP, typNIC} {
		if got := c.names(typ); len(got) != 1 {
			t.Fatalf("%s: %v", typ, got)
		}
	}
	var nsg struct {
		Tags       map[string]string `json:"tags"`
		Properties struct {
			SecurityRules []struct {
				Properties struct {
					Protocol, DestinationPortRange, Direction, Access string
					Priority                                          int
				} `json:"properties"`
			} `json:"securityRules"`
		} `json:"properties"`
	}
	puts := c.calls("PUT", "/networkSecurityGroups/gpuprov-side-nsg")
	if err := json.Unmarshal(puts[0].Body, &nsg); err != nil {
		t.Fatal(err)
	}
	var rules []string
	for _, r := range nsg.Properties.SecurityRules {
		rules = append(rules, r.Properties.Protocol+"/"+r.Properties.DestinationPortRange+"/"+r.Properties.Direction+"/"+r.Properties.Access)
	}
	if !slices.Equal(rules, []string{"Tcp/22/Inbound/Allow", "Tcp/6443/Inbound/Allow", "Udp/51820/Inbound/Allow"}) ||
		nsg.Tags["gpuprov"] != "side" || nsg.Tags["gpuprov-installation"] != installation || nsg.Tags["team"] != "vision" {
		t.Fatalf("security group rules %v tags %v", rules, nsg.Tags)
	}
	var ip struct {
		SKU        struct{ Name string } `json:"sku"`
		Properties struct {
			PublicIPAllocationMethod string `json:"publicIPAllocationMethod"`
		} `json:"properties"`
	}
	_ = json.Unmarshal(c.calls("PUT", "/publicIPAddresses/gpuprov-side-ip")[0].Body, &ip)
	if ip.SKU.Name != "Standard" || ip.Properties.PublicIPAllocationMethod != "Static" {
		t.Fatalf("public IP %+v", ip)
	}
	var nic struct {
		Tags map[string]string `json:"tags"`
	}
	_ = json.Unmarshal(c.calls("PUT", "/networkInterfaces/gpuprov-side-nic")[0].Body, &nic)
	if nic.Tags["gpuprov-spot"] != "false" || nic.Tags["gpuprov"] != "side" {
		t.Fatalf("NIC tags %v", nic.Tags)
	}
}

type vmBody struct {
	Location string            `json:"location"`
	Tags     map[string]string `json:"tags"`
	Zones    []string          `json:"zones"`
	Props    struct {
		HardwareProfile struct{ VMSize string } `json:"hardwareProfile"`
		StorageProfile  struct {
			ImageReference struct{ Publisher, Offer, SKU, Version string } `json:"imageReference"`
			OSDisk         struct {
				DeleteOption string `json:"deleteOption"`
				DiskSizeGB   int    `json:"diskSizeGB"`
			} `json:"osDisk"`
		} `json:"storageProfile"`
		OSProfile struct {
			AdminUsername      string `json:"adminUsername"`
			CustomData         string `json:"customData"`
			LinuxConfiguration struct {
				DisablePasswordAuthentication bool `json:"disablePasswordAuthentication"`
				SSH                           struct {
					PublicKeys []struct{ Path, KeyData string } `json:"publicKeys"`
				} `json:"ssh"`
			} `json:"linuxConfiguration"`
		} `json:"osProfile"`
		NetworkProfile struct {
			NetworkInterfaces []struct {
				Properties struct{ DeleteOption string } `json:"properties"`
			} `json:"networkInterfaces"`
		} `json:"networkProfile"`
		Priority       string                     `json:"priority"`
		EvictionPolicy string                     `json:"evictionPolicy"`
		BillingProfile struct{ MaxPrice float64 } `json:"billingProfile"`
	} `json:"properties"`
}

func lastVMPut(t *testing.T, c *cloud) vmBody {
	t.Helper()
	puts := c.calls("PUT", "/virtualMachines/")
	if len(puts) == 0 {
		t.Fatal("no VM PUT")
	}
	var b vmBody
	if err := json.Unmarshal(puts[len(puts)-1].Body, &b); err != nil {
		t.Fatal(err)
	}
	return b
}

// Create's PUT: the offer's size, the image, an OS disk deleted with the
// VM and as large as asked, the cloud-init custom data (host key and
// authorized keys), a placeholder ssh-rsa key where the request has only
// Ed25519 keys (the API takes ssh-rsa keys only), the NIC detached on
// delete; Spot as priority Spot, eviction policy Delete, max price -1, in
// the offer's zone; an admin user Azure refuses replaced by the default.
func TestCreateBody(t *testing.T) {
	c, mt := newCloud(t)
	p := c.provider(t, mt, azure.Config{Zones: []string{"2"}, Spot: true})
	spec := newSpec(t, "body")
	o := offerIn(t, p, a100, provider.Location{Region: "eastus", Zone: "eastus-2"}, false)
	o.DiskGB = 400
	id := launch(t, p, o, spec)
	if id != vmIDOf("eastus", "gpuprov-body-1") {
		t.Fatalf("id %s", id)
	}
	b := lastVMPut(t, c)
	cd, _ := base64.StdEncoding.DecodeString(b.Props.OSProfile.CustomData)
	img := b.Props.StorageProfile.ImageReference
	keys := b.Props.OSProfile.LinuxConfiguration.SSH.PublicKeys
	if b.Props.HardwareProfile.VMSize != "Standard_NC24ads_A100_v4" || b.Location != "eastus" || !slices.Equal(b.Zones, []string{"2"}) ||
		img.Publisher != "microsoft-dsvm" || img.Offer != "ubuntu-hpc" || img.SKU != "2204" || img.Version != "latest" ||
		b.Props.StorageProfile.OSDisk.DeleteOption != "Delete" || b.Props.StorageProfile.OSDisk.DiskSizeGB != 400 ||
		b.Props.OSProfile.AdminUsername != "gpuprov" || !b.Props.OSProfile.LinuxConfiguration.DisablePasswordAuthentication ||
		len(keys) != 1 || !strings.HasPrefix(keys[0].KeyData, "ssh-rsa ") || keys[0].Path != "/home/gpuprov/.ssh/authorized_keys" ||
		b.Props.NetworkProfile.NetworkInterfaces[0].Properties.DeleteOption != "Detach" || b.Props.Priority != "Regular" {
		t.Fatalf("VM body %+v", b)
	}
	if string(cd) != provider.CloudInit(spec) || !strings.Contains(string(cd), spec.AuthorizedKeys[0]) {
		t.Fatalf("custom data %q", cd)
	}
	if c.customData("gpuprov-body-1") != provider.CloudInit(spec) {
		t.Fatal("the mock did not keep the custom data")
	}

	anyA100 := a100
	anyA100.Spot = provider.SpotOrOnDemand
	spot := offerIn(t, p, anyA100, provider.Location{Region: "eastus", Zone: "eastus-2"}, true)
	spec2 := newSpec(t, "spotty")
	spec2.SSHUser = "root"
	launch(t, p, spot, spec2)
	b = lastVMPut(t, c)
	if b.Props.Priority != "Spot" || b.Props.EvictionPolicy != "Delete" || b.Props.BillingProfile.MaxPrice != -1 ||
		b.Props.OSProfile.AdminUsername != azure.DefaultAdminUser {
		t.Fatalf("Spot VM body %+v", b.Props)
	}
}

// A replay of the same attempt (a lost response, a crash before the id was
// journaled) sends the same PUT with If-None-Match: *; the 412 adopts the
// VM that carries this identity instead of changing it. A VM of the name
// that carries another installation's identity is Unavailable.
func TestCreateReplayAdopts(t *testing.T) {
	c, mt := newCloud(t)
	p := c.provider(t, mt, azure.Config{})
	spec := newSpec(t, "replay")
	o := offerIn(t, p, t4, eastus, false)
	ctx := context.Background()
	prep, err := p.Prepare(ctx, &o, spec)
	if err != nil {
		t.Fatal(err)
	}
	first, err := p.Create(ctx, &o, prep, spec)
	if err != nil {
		t.Fatal(err)
	}
	spec.HostKey = newSpec(t, "replay").HostKey // a restarted core generates another key
	again, err := p.Create(ctx, &o, prep, spec)
	if err != nil || again != first || len(c.vmNames()) != 1 {
		t.Fatalf("replay: %q, %v; VMs %v", again, err, c.vmNames())
	}
	other := c.provider(t, mt, azure.Config{}, azure.WithInstallation("ffffffffffffffff"))
	_, err = other.Create(ctx, &o, prep, spec)
	kindOf(t, err, provider.Unavailable)
}

// Create waits for the PUT's operation on its clock, honouring the
// status answers' Retry-After, and gives up waiting (not on the VM) after
// OperationTimeout: it returns the id, and Observe shows the VM pending.
func TestCreateWaitIsBounded(t *testing.T) {
	c, mt := newCloud(t)
	clk := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	t.Cleanup(clk.AutoAdvance())
	p := c.provider(t, mt, azure.Config{OperationTimeout: 2 * time.Minute, PollInterval: time.Minute}, azure.WithClock(clk))
	spec := newSpec(t, "slow")
	o := offerIn(t, p, t4, eastus, false)
	prep, err := p.Prepare(context.Background(), &o, spec)
	if err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	c.opPolls = 1000
	c.mu.Unlock()
	start := clk.Now()
	id, err := p.Create(context.Background(), &o, prep, spec)
	if err != nil || id == "" {
		t.Fatalf("create: %q, %v", id, err)
	}
	waited := clk.Now().Sub(start)
	polls := len(c.calls("GET", "/providers/Microsoft.Compute/locations/eastus/operations/"))
	// Retry-After (10 s), not poll_interval (1 m), paces the polls: 2 minutes are
	// 13 polls (one at once, one after each sleep).
	if waited < 2*time.Minute || waited > 2*time.Minute+time.Second || polls != 13 {
		t.Fatalf("waited %v with %d polls", waited, polls)
	}
	obs, err := p.Observe(context.Background(), eastus, "slow")
	if err != nil || len(obs) != 1 || obs[0].Status != provider.StatusPending || obs[0].ID != id {
		t.Fatalf("observe: %+v, %v", obs, err)
	}
}

// An unregistered resource provider is refused, not registered: automatic
// registration (which polls for minutes inside a call) is off.
func TestNoAutomaticProviderRegistration(t *testing.T) {
	c, mt := newCloud(t)
	p := c.provider(t, mt, azure.Config{})
	c.syncFaults["PUT /networkSecurityGroups/"] = []fault{{Status: 409, Code: "MissingSubscriptionRegistration",
		Message: "The subscription is not registered to use namespace 'Microsoft.Network'."}}
	o := offerIn(t, p, t4, eastus, false)
	_, err := p.Prepare(context.Background(), &o, newSpec(t, "reg"))
	kindOf(t, err, provider.InvalidRequest)
	if n := len(c.calls("POST", "/register")); n != 0 {
		t.Fatalf("%d registration calls", n)
	}
}

// Cleanup deletes the NIC first and waits for it, then the public IP and
// the security group; a NIC still attached to a VM being deleted, or
// reserved for 180 seconds after, is Transient and nothing else is
// touched; once free, everything goes, and a second Cleanup is a no-op.
// The resource group and the virtual network stay.
func TestCleanupOrderAndInUse(t *testing.T) {
	c, mt := newCloud(t)
	c.nicReserved = 1
	p := c.provider(t, mt, azure.Config{})
	spec := newSpec(t, "clean")
	o := offerIn(t, p, t4, eastus, false)
	id := launch(t, p, o, spec)
	ctx := context.Background()
	if err := p.Delete(ctx, eastus, "clean", []string{id}); err != nil {
		t.Fatal(err)
	}
	err := p.Cleanup(ctx, eastus, "clean")
	kindOf(t, err, provider.Transient)
	if !azure.IsCode(err, "NicInUse") || len(c.names(typIP)) != 1 || len(c.names(typNSG)) != 1 {
		t.Fatalf("%v; IPs %v NSGs %v", err, c.names(typIP), c.names(typNSG))
	}
	c.settle() // the VM is gone; Azure holds its NIC for 180 seconds
	err = p.Cleanup(ctx, eastus, "clean")
	kindOf(t, err, provider.Transient)
	if !azure.IsCode(err, "NicReservedForAnotherVm") {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := p.Cleanup(ctx, eastus, "clean"); err != nil {
			t.Fatalf("cleanup %d: %v", i, err)
		}
	}
	if left := c.perVM(); len(left) != 0 {
		t.Fatalf("left: %v", left)
	}
	var order []string
	for _, r := range c.calls("DELETE", "/providers/Microsoft.Network/") {
		order = append(order, r.Path[strings.LastIndex(r.Path, "/")+1:])
	}
	// Twice refused, then NIC → IP → NSG, then the no-op round (204s).
	want := []string{"gpuprov-clean-nic", "gpuprov-clean-nic", "gpuprov-clean-nic", "gpuprov-clean-ip", "gpuprov-clean-nsg",
		"gpuprov-clean-nic", "gpuprov-clean-ip", "gpuprov-clean-nsg"}
	if !slices.Equal(order, want) {
		t.Fatalf("deletes %v", order)
	}
	if len(c.calls("DELETE", "/virtualNetworks/")) != 0 || len(c.calls("DELETE", "/resourcegroups/")) != 0 || len(c.groups()) != 1 {
		t.Fatal("a shared resource was deleted")
	}
}

// Observe's statuses follow the VM's provisioning state and power state;
// the SSH endpoint appears once it runs, with the public IP Prepare made
// and the admin user.
func TestObserveStatuses(t *testing.T) {
	c, mt := newCloud(t)
	p := c.provider(t, mt, azure.Config{})
	spec := newSpec(t, "obs")
	id := launch(t, p, offerIn(t, p, t4, eastus, false), spec)
	obs := func() provider.Observed {
		t.Helper()
		got, err := p.Observe(context.Background(), eastus, "obs")
		if err != nil || len(got) != 1 || got[0].ID != id || got[0].VM != "obs" || got[0].InstanceType != "Standard_NC4as_T4_v3" {
			t.Fatalf("observe: %+v, %v", got, err)
		}
		return got[0]
	}
	if o := obs(); o.Status != provider.StatusPending || o.SSH != nil {
		t.Fatalf("starting: %+v", o)
	}
	c.settle()
	if o := obs(); o.Status != provider.StatusRunning || o.SSH == nil || !strings.HasPrefix(o.SSH.Host, "203.0.113.") ||
		o.SSH.User != "gpuprov" || o.SSH.Port != 22 || !strings.HasPrefix(o.PrivateIP, "10.77.0.") ||
		o.VendorStatus != "ProvisioningState/succeeded PowerState/running" {
		t.Fatalf("running: %+v", o)
	}
	for power, want := range map[string]provider.InstanceStatus{"stopped": provider.StatusFailed, "deallocated": provider.StatusFailed,
		"deallocating": provider.StatusStopping, "starting": provider.StatusPending, "weird": provider.StatusUnknown} {
		c.setPower(id, power)
		if o := obs(); o.Status != want {
			t.Errorf("%s: %s, want %s", power, o.Status, want)
		}
	}
	if err := p.Delete(context.Background(), eastus, "obs", []string{id}); err != nil {
		t.Fatal(err)
	}
	if o := obs(); o.Status != provider.StatusStopping {
		t.Fatalf("deleting: %+v", o)
	}
}

// List pages through each region's resource group and returns this
// installation's VMs with their names; another installation's VM in the
// same group is not listed.
func TestListAcrossRegions(t *testing.T) {
	c, mt := newCloud(t)
	c.pageSize = 1
	p := c.provider(t, mt, azure.Config{Regions: []string{"eastus", "westus2"}})
	launch(t, p, offerIn(t, p, t4, eastus, false), newSpec(t, "one"))
	launch(t, p, offerIn(t, p, t4, eastus, false), newSpec(t, "two"))
	launch(t, p, offerIn(t, p, t4, provider.Location{Region: "westus2"}, false), newSpec(t, "three"))
	c.mu.Lock()
	for _, r := range c.res {
		if r.typ == typVM && r.name == "gpuprov-two-1" {
			r.obj["tags"] = map[string]any{"gpuprov": "two", "gpuprov-installation": "ffffffffffffffff"}
		}
	}
	c.mu.Unlock()
	all, err := p.List(context.Background(), provider.Location{})
	if err != nil {
		t.Fatal(err)
	}
	var vms []string
	for _, o := range all {
		vms = append(vms, o.VM+"@"+o.Location.Region)
	}
	slices.Sort(vms)
	if !slices.Equal(vms, []string{"one@eastus", "three@westus2"}) {
		t.Fatalf("list %v", vms)
	}
	if n := len(c.calls("GET", "/resourceGroups/"+rgOf("eastus")+"/providers/Microsoft.Compute/virtualMachines")); n < 2 {
		t.Fatalf("eastus listed in %d pages, want paging", n)
	}
	only, err := p.List(context.Background(), provider.Location{Region: "westus2"})
	if err != nil || len(only) != 1 || only[0].VM != "three" {
		t.Fatalf("list westus2: %+v, %v", only, err)
	}
}

// Diagnose reads the instance view: a provisioning failure with its code,
// a stopped VM, a running Spot VM; a Spot VM that is gone (evicted, policy
// Delete) is attributed to the eviction through its NIC's tag, saying the
// eviction is inferred (Azure keeps nothing of a deleted VM to ask), any
// other that is gone is "gone".
func TestDiagnose(t *testing.T) {
	c, mt := newCloud(t)
	p := c.provider(t, mt, azure.Config{Spot: true})
	ctx := context.Background()
	c.createFaults["eastus"] = []fault{{Async: true, Code: "OSProvisioningTimedOut", Message: "OS Provisioning for VM 'x' did not finish in the allotted time."}}
	badOffer := offerIn(t, p, t4, eastus, false)
	badSpec := newSpec(t, "bad")
	prep, err := p.Prepare(ctx, &badOffer, badSpec)
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.Create(ctx, &badOffer, prep, badSpec)
	kindOf(t, err, provider.Failed)
	failedID := vmIDOf("eastus", "gpuprov-bad-1")
	d, err := p.Diagnose(ctx, eastus, "bad", failedID)
	if err != nil || !d.Exists || d.Status != provider.StatusFailed || d.Verdict() != provider.Unhealthy ||
		d.Findings[0].Code != "provisioning-failed" || !strings.HasPrefix(d.Findings[0].Message, "OSProvisioningTimedOut: OS Provisioning") {
		t.Fatalf("failed VM: %+v, %v", d, err)
	}

	anyT4 := t4
	anyT4.Spot = provider.SpotOrOnDemand
	id := launch(t, p, offerIn(t, p, anyT4, eastus, true), newSpec(t, "spot"))
	c.settle()
	d, err = p.Diagnose(ctx, eastus, "spot", id)
	if err != nil || d.Status != provider.StatusRunning || d.Verdict() != provider.Healthy || len(d.Findings) != 1 || d.Findings[0].Code != "spot" {
		t.Fatalf("running Spot VM: %+v, %v", d, err)
	}
	c.evict(id)
	d, err = p.Diagnose(ctx, eastus, "spot", id)
	if err != nil || d.Exists || d.Verdict() != provider.Gone || d.Findings[0].Code != "spot-evicted" ||
		!strings.Contains(d.Findings[0].Message, "inferred") {
		t.Fatalf("evicted Spot VM: %+v, %v", d, err)
	}

	od := launch(t, p, offerIn(t, p, t4, eastus, false), newSpec(t, "od"))
	c.settle()
	c.setPower(od, "stopped")
	if d, err = p.Diagnose(ctx, eastus, "od", od); err != nil || d.Verdict() != provider.Unhealthy || d.Findings[0].Code != "stopped" {
		t.Fatalf("stopped VM: %+v, %v", d, err)
	}
	c.evict(od)
	if d, err = p.Diagnose(ctx, eastus, "od", od); err != nil || d.Findings[0].Code != "gone" {
		t.Fatalf("gone VM: %+v, %v", d, err)
	}
	if _, err := p.Diagnose(ctx, eastus, "od", "not-an-id"); err == nil {
		t.Fatal("a malformed id was diagnosed")
	}
}

// In a configured resource group shared by every region (and maybe by
// other installations), side resources carry the region in their names,
// one of another installation's identity refuses Prepare as Unavailable,
// and Cleanup leaves it alone.
func TestConfiguredResourceGroup(t *testing.T) {
	c, mt := newCloud(t)
	c.rgs["shared"] = map[string]any{"name": "shared", "location": "eastus"}
	p := c.provider(t, mt, azure.Config{ResourceGroup: "shared"})
	spec := newSpec(t, "rgvm")
	o := offerIn(t, p, t4, eastus, false)
	if _, err := p.Prepare(context.Background(), &o, spec); err != nil {
		t.Fatal(err)
	}
	if got := c.names(typNIC); !slices.Equal(got, []string{"gpuprov-rgvm-eastus-nic"}) || len(c.calls("PUT", "/resourcegroups/")) != 0 {
		t.Fatalf("NICs %v; resource group PUTs %d", got, len(c.calls("PUT", "/resourcegroups/")))
	}
	other := c.provider(t, mt, azure.Config{ResourceGroup: "shared"}, azure.WithInstallation("ffffffffffffffff"))
	_, err := other.Prepare(context.Background(), &o, spec)
	kindOf(t, err, provider.Unavailable)
	if err := other.Cleanup(context.Background(), eastus, "rgvm"); err != nil {
		t.Fatal(err)
	}
	if len(c.names(typNIC)) != 1 {
		t.Fatal("another installation's cleanup deleted the NIC")
	}
}

// Delete refuses an id that is no gpuprov VM of this subscription before
// any call, and sends one DELETE per VM, not waited for.
func TestDeleteIDs(t *testing.T) {
	c, mt := newCloud(t)
	p := c.provider(t, mt, azure.Config{})
	err := p.Delete(context.Background(), eastus, "x", []string{"/subscriptions/other/resourceGroups/g/providers/Microsoft.Compute/virtualMachines/gpuprov-x-1"})
	kindOf(t, err, provider.InvalidRequest)
	err = p.Delete(context.Background(), eastus, "x", []string{vmIDOf("eastus", "someone-elses-vm")})
	kindOf(t, err, provider.InvalidRequest)
	if n := len(c.calls("", "/virtualMachines/")); n != 0 {
		t.Fatalf("%d calls", n)
	}
	id := launch(t, p, offerIn(t, p, t4, eastus, false), newSpec(t, "x"))
	before := len(c.calls("GET", "/operations/"))
	if err := p.Delete(context.Background(), eastus, "x", []string{id}); err != nil {
		t.Fatal(err)
	}
	if n := len(c.calls("DELETE", "/virtualMachines/")); n != 1 || len(c.calls("GET", "/operations/")) != before {
		t.Fatalf("%d DELETEs; the delete was waited for", n)
	}
}
