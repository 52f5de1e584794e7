package azure_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jarcoal/httpmock"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/clock"
	"github.com/org/gpuprov/gpuprovtest"
	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/journal/sqlite"
	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/azure"
	"github.com/org/gpuprov/provider/azure/internal/catalog"
)

// Launches through the Provisioner, with the SQLite journal and a fake
// clock, against the ARM mock answering as errors_test.go's references
// document: what a user notices of each failure's kind, scope and length.

// t4Size is NC4as_T4_v3 (and, with name, another T4 size of its family)
// at test prices per region (on demand, Spot).
func t4Size(name string, prices ...catalog.RegionPrice) catalog.Size {
	return catalog.Size{Name: name, Series: "NCasT4_v3", Family: "Standard NCASv3_T4 Family", GPU: "T4", GPUCount: 1,
		GPUMemoryGB: 16, VCPUs: 4, MemoryGB: 28, Regions: prices,
		Spec: "https://learn.microsoft.com/en-us/azure/virtual-machines/sizes/gpu-accelerated/ncast4v3-series"}
}

// bench is a Provisioner over one Azure provider on the mock.
type bench struct {
	c    *cloud
	p    *azure.Provider
	j    journal.Journal
	clk  *clock.Fake
	prov *gpuprov.Provisioner

	mu   sync.Mutex
	puts []vmPutAt // the VM PUTs, in order
}

// vmPutAt is one VM PUT: the VM's size, region and when it was sent (on
// the fake clock).
type vmPutAt struct {
	size, region string
	at           time.Time
}

// newBench builds the bench on sizes (nil: the embedded catalog).
func newBench(t *testing.T, c *cloud, mt *httpmock.MockTransport, cfg azure.Config, sizes ...catalog.Size) *bench {
	t.Helper()
	ctx := context.Background()
	b := &bench{c: c, clk: clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))}
	t.Cleanup(b.clk.AutoAdvance())
	j, err := sqlite.Open(ctx, t.TempDir()+"/journal.db")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	b.j = j
	cfg.RequestsPerSecond = 1000 // the core's token bucket runs on the wall clock: do not pace the test
	tap := roundTrip(func(r *http.Request) (*http.Response, error) {
		if r.Method == http.MethodPut && vmPut.MatchString(r.URL.Path) {
			raw, err := io.ReadAll(r.Body)
			r.Body.Close() // a RoundTripper closes the body it was given
			if err != nil {
				return nil, err
			}
			r = r.Clone(r.Context())
			r.Body = io.NopCloser(bytes.NewReader(raw))
			var body vmBody
			_ = json.Unmarshal(raw, &body)
			b.mu.Lock()
			b.puts = append(b.puts, vmPutAt{body.Props.HardwareProfile.VMSize, body.Location, b.clk.Now()})
			b.mu.Unlock()
		}
		return mt.RoundTrip(r)
	})
	opts := []azure.Option{azure.WithInstallation(j.Installation()), azure.WithClock(b.clk),
		azure.WithEndpoint(endpoint, &http.Client{Transport: tap})}
	if sizes != nil {
		cat := &catalog.Catalog{Source: "test fixture", Retrieved: "2026-03-01", Sizes: sizes}
		if err := cat.Validate(); err != nil {
			t.Fatal(err)
		}
		opts = append(opts, azure.WithCatalog(cat))
	}
	b.p = c.provider(t, mt, cfg, opts...)
	b.prov, err = gpuprov.New(j, gpuprov.WithProvider(b.p), gpuprov.WithClock(b.clk), gpuprov.WithBackoff(100*time.Millisecond, time.Second, 1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.prov.Close() })
	return b
}

func (b *bench) vmPuts() []vmPutAt {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]vmPutAt(nil), b.puts...)
}

// blocks returns the journal's blocks by key.
func (b *bench) blocks(t *testing.T) map[string]journal.Block {
	t.Helper()
	bs, err := b.j.Blocks(context.Background(), b.clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]journal.Block{}
	for _, x := range bs {
		out[x.Key] = x
	}
	return out
}

// Compute throttles the first VM PUT in eastus (HTTP 429, OperationNotAllowed
// with a TooManyRequests detail, Retry-After: 1200, as "Troubleshooting API
// throttling errors" shows it); the core waits the twenty minutes out, on
// its clock, and sends the PUT again; that one's operation ends in
// AllocationFailed (Microsoft Learn, allocation failure), and the launch
// fails over to the next offer, westus2, where it succeeds. The throttle
// neither aborted the launch nor blocked anything; the stockout blocked the
// eastus offer.
func TestProvisionerWaitsOutThrottlingThenFailsOver(t *testing.T) {
	c, mt := newCloud(t)
	c.autoRun = true
	c.syncFaults["PUT /virtualMachines/"] = []fault{{Status: 429, Code: "OperationNotAllowed", Body: azure.ThrottledBody, RetryAfter: "1200"}}
	c.createFaults["eastus"] = []fault{{Async: true, Code: "AllocationFailed",
		Message: "Allocation failed. We do not have sufficient capacity for the requested VM size in this region."}}
	b := newBench(t, c, mt, azure.Config{}, t4Size("Standard_NC4as_T4_v3",
		catalog.RegionPrice{Region: "eastus", OnDemand: 0.526}, catalog.RegionPrice{Region: "westus2", OnDemand: 0.60}))

	vm, err := b.prov.Launch(context.Background(), gpuprov.Request{Name: "patient", GPU: "t4", Timeout: 2 * time.Hour})
	if err != nil {
		t.Fatalf("launch: %v", err)
	}
	if vm.State != gpuprov.StateReady || vm.Location.Region != "westus2" {
		t.Fatalf("vm %+v", vm)
	}
	puts := b.vmPuts()
	if len(puts) != 3 || puts[0].region != "eastus" || puts[1].region != "eastus" || puts[2].region != "westus2" {
		t.Fatalf("VM PUTs %+v, want eastus (throttled), eastus (stocked out), westus2", puts)
	}
	if waited := puts[1].at.Sub(puts[0].at); waited < 1200*time.Second {
		t.Fatalf("the PUT after the throttle went %v after it, before its Retry-After of 20m", waited)
	}
	gpuprovtest.CheckAttempts(t, b.j, "patient", gpuprovtest.Attempt{Region: "eastus", Kind: "capacity"}, gpuprovtest.Attempt{Region: "westus2"})
	blocks := b.blocks(t)
	if len(blocks) != 1 || blocks["offer:azure|eastus||Standard_NC4as_T4_v3|od"].ErrorKind != "capacity" {
		t.Fatalf("blocks %+v, want the eastus offer's stockout only", blocks)
	}
}

// Two T4 sizes in one zone: NC4as runs out there (ZonalAllocationFailed
// names the size, "We do not have sufficient capacity for the requested VM
// size in this zone": Microsoft Learn, allocation failure; Karpenter's
// handleZonalAllocationFailureError blocks the size in that zone only), so
// NC8as is still tried in that zone, and lands.
func TestProvisionerTriesTheOtherSizeInAStockedOutZone(t *testing.T) {
	c, mt := newCloud(t)
	c.autoRun = true
	c.createFaults["eastus"] = []fault{{Async: true, Code: "ZonalAllocationFailed",
		Message: "Allocation failed. We do not have sufficient capacity for the requested VM size in this zone."}}
	big := t4Size("Standard_NC8as_T4_v3", catalog.RegionPrice{Region: "eastus", OnDemand: 0.752})
	big.VCPUs, big.MemoryGB = 8, 56
	b := newBench(t, c, mt, azure.Config{Zones: []string{"1"}},
		t4Size("Standard_NC4as_T4_v3", catalog.RegionPrice{Region: "eastus", OnDemand: 0.526}), big)

	vm, err := b.prov.Launch(context.Background(), gpuprov.Request{Name: "zonal", GPU: "t4", Timeout: time.Hour})
	if err != nil {
		t.Fatalf("launch: %v", err)
	}
	if vm.InstanceType != "Standard_NC8as_T4_v3" || vm.Location != (provider.Location{Region: "eastus", Zone: "eastus-1"}) {
		t.Fatalf("vm %s in %s, want Standard_NC8as_T4_v3 in eastus-1", vm.InstanceType, vm.Location)
	}
	blocks := b.blocks(t)
	if len(blocks) != 1 || blocks["offer:azure|eastus|eastus-1|Standard_NC4as_T4_v3|od"].ErrorKind != "capacity" {
		t.Fatalf("blocks %+v, want NC4as in eastus-1 only", blocks)
	}
}

// An on-demand SkuNotAvailable (409 on the PUT, "The requested size ... is
// currently not available in location 'eastus' zones ” for subscription
// ...": Resolve errors for SKU not available, aka.ms/azureskunotavailable)
// is the subscription's restriction of the size there: the offer is
// blocked for 23 hours (Karpenter's SKUNotAvailableOnDemandTTL), as
// unavailable, not retried every ten minutes as a stockout; the launch
// goes on in westus2.
func TestProvisionerBlocksARestrictedSizeForADay(t *testing.T) {
	c, mt := newCloud(t)
	c.autoRun = true
	c.syncFaults["PUT /virtualMachines/"] = []fault{{Status: 409, Code: "SkuNotAvailable",
		Message: "The requested size for resource '/subscriptions/" + subscription + "/resourceGroups/g/providers/Microsoft.Compute/virtualMachines/gpuprov-fenced-1' is currently not available in location 'eastus' zones '' for subscription '" + subscription + "'. Please try another size or deploy to a different location or zones. See https://aka.ms/azureskunotavailable for details."}}
	b := newBench(t, c, mt, azure.Config{}, t4Size("Standard_NC4as_T4_v3",
		catalog.RegionPrice{Region: "eastus", OnDemand: 0.526}, catalog.RegionPrice{Region: "westus2", OnDemand: 0.60}))

	vm, err := b.prov.Launch(context.Background(), gpuprov.Request{Name: "fenced", GPU: "t4", Timeout: time.Hour})
	if err != nil || vm.Location.Region != "westus2" {
		t.Fatalf("launch: %+v, %v", vm, err)
	}
	bl, ok := b.blocks(t)["offer:azure|eastus||Standard_NC4as_T4_v3|od"]
	if !ok || bl.ErrorKind != "unavailable" || bl.Until.Sub(bl.CreatedAt) != 23*time.Hour {
		t.Fatalf("block %+v, want the eastus offer unavailable for 23h", bl)
	}
}

// The installation's resource group is deleted out of band (someone
// removes it in the portal) after this process made it: the next launch
// in the region makes it and its virtual network again instead of
// aborting on ResourceGroupNotFound (404, "Resource group 'g' could not be
// found.": Microsoft Learn, common deployment errors). A group deleted
// between a VM's Prepare and its create is made again too (the create
// matches provider.ErrSharedGone; the core prepares again and resends).
func TestProvisionerRemakesADeletedResourceGroup(t *testing.T) {
	ctx := context.Background()
	c, mt := newCloud(t)
	c.autoRun = true
	b := newBench(t, c, mt, azure.Config{Regions: []string{"eastus"}})
	rg := "gpuprov-" + b.j.Installation() + "-eastus"
	for i, name := range []string{"first", "after-delete", "deleted-meanwhile"} {
		switch i {
		case 1:
			b.c.dropGroup(rg)
		case 2:
			b.c.mu.Lock()
			b.c.dropOnVMPut = rg
			b.c.mu.Unlock()
		}
		vm, err := b.prov.Launch(ctx, gpuprov.Request{Name: name, GPU: "t4", Timeout: time.Hour})
		if err != nil || vm.State != gpuprov.StateReady || vm.Location.Region != "eastus" {
			t.Fatalf("launch %s: %+v, %v", name, vm, err)
		}
		gpuprovtest.CheckAttempts(t, b.j, name, gpuprovtest.Attempt{Region: "eastus"})
	}
	if n := len(c.calls(http.MethodPut, "/resourcegroups/")); n != 3 {
		t.Fatalf("%d resource group PUTs, want 3 (made, made again twice)", n)
	}
	if g := c.groups(); len(g) != 1 || g[0] != rg {
		t.Fatalf("resource groups %v", g)
	}
}

// A group that is still missing after it was made again is Transient (the
// core retries), its cache dropped again; its text names the provider
// once. A configured resource group that is missing stays InvalidRequest:
// the adapter never makes it.
func TestPrepareWhenTheGroupStaysMissing(t *testing.T) {
	c, mt := newCloud(t)
	p := c.provider(t, mt, azure.Config{})
	o := offerIn(t, p, t4, eastus, false)
	notFound := fault{Status: 404, Code: "ResourceGroupNotFound", Message: "Resource group '" + rgOf("eastus") + "' could not be found."}
	c.syncFaults["PUT /networkSecurityGroups/"] = []fault{notFound, notFound}
	_, err := p.Prepare(context.Background(), &o, newSpec(t, "lost"))
	kindOf(t, err, provider.Transient)
	if strings.Count(err.Error(), "azure:") != 1 || len(c.calls(http.MethodPut, "/resourcegroups/")) != 2 {
		t.Fatalf("%v; %d resource group PUTs", err, len(c.calls(http.MethodPut, "/resourcegroups/")))
	}
	if _, err := p.Prepare(context.Background(), &o, newSpec(t, "lost")); err != nil || len(c.calls(http.MethodPut, "/resourcegroups/")) != 3 {
		t.Fatalf("prepare after: %v", err)
	}

	configured := c.provider(t, mt, azure.Config{ResourceGroup: "not-there"})
	_, err = configured.Prepare(context.Background(), &o, newSpec(t, "lost"))
	kindOf(t, err, provider.InvalidRequest)
}

// A Spot offer is refused (SkuNotAvailable for Spot: no Spot capacity
// there, aka.ms/azureskunotavailable), and the launch goes on with the
// on-demand offer of the same size and location, whose create may reuse
// the side resources the Spot attempt prepared (failover in place). The
// NIC then says on-demand: a VM that goes away later is not taken for a
// Spot eviction.
func TestSpotToOnDemandInPlaceIsNotTakenForSpot(t *testing.T) {
	ctx := context.Background()
	c, mt := newCloud(t)
	c.autoRun = true
	c.syncFaults["PUT /virtualMachines/"] = []fault{{Status: 409, Code: "SkuNotAvailable",
		Message: "The requested size for resource 'x' is currently not available in location 'eastus' zones '' for subscription 's'. Please try another size or deploy to a different location or zones. See https://aka.ms/azureskunotavailable for details."}}
	b := newBench(t, c, mt, azure.Config{Spot: true}, t4Size("Standard_NC4as_T4_v3",
		catalog.RegionPrice{Region: "eastus", OnDemand: 0.526, Spot: 0.2}))

	vm, err := b.prov.Launch(ctx, gpuprov.Request{Name: "thrifty", GPU: "t4", Spot: provider.SpotOrOnDemand, Timeout: time.Hour})
	if err != nil || vm.Location.Region != "eastus" || vm.PricePerHour != 0.526 {
		t.Fatalf("launch: %+v, %v", vm, err)
	}
	if bl, ok := b.blocks(t)["offer:azure|eastus||Standard_NC4as_T4_v3|spot"]; !ok || bl.ErrorKind != "capacity" {
		t.Fatalf("blocks %+v, want the Spot offer's capacity block", b.blocks(t))
	}
	if tag := c.nicTags("gpuprov-thrifty-nic")["gpuprov-spot"]; tag != "false" {
		t.Fatalf("the on-demand VM's NIC says gpuprov-spot=%v", tag)
	}
	c.evict(vm.InstanceID) // deleted out of band
	d, err := b.p.Diagnose(ctx, vm.Location, "thrifty", vm.InstanceID)
	if err != nil || len(d.Findings) != 1 || d.Findings[0].Code != "gone" {
		t.Fatalf("diagnose: %+v, %v", d, err)
	}
}
