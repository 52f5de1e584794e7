package azure_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/clock"
	"github.com/org/gpuprov/gpuprovtest"
	"github.com/org/gpuprov/journal/sqlite"
	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/azure"
)

// A launch of one T4 meets AllocationFailed (reported by the VM PUT's
// operation, after the VM object was made) in the first location the core
// tries (eastus2: five regions tie at $0.526/h and the core breaks ties by
// offer key); a refusal of the T4 family's vCPU quota (409
// OperationNotAllowed "exceeding approved Standard NCASv3_T4 Family Cores
// quota", synchronous: the code as Azure/karpenter-provider-azure#192
// shows it, the family as skypilot-org/skypilot#464 and the Resource SKUs
// API spell it) in the next, eastus; and succeeds in northcentralus. The
// journal shows three attempts, the capacity block of the eastus2 offer
// and the quota block of the T4 family's on-demand offers in eastus, and both
// failed attempts torn down: the failed VM deleted, its NIC, public IP and
// security group cleaned up. Deleting the VM leaves no per-VM resource on
// the mock cloud (VMs, OS disks, NICs, public IPs, security groups); only
// the installation's resource groups and virtual networks, which are
// shared and cost nothing, remain.
func TestProvisionerFailsOverAcrossRegions(t *testing.T) {
	ctx := context.Background()
	c, mt := newCloud(t)
	c.autoRun = true
	c.createFaults["eastus2"] = []fault{{Async: true, Code: "AllocationFailed",
		Message: "Allocation failed. We do not have sufficient capacity for the requested VM size in this region. Read more about improving likelihood of allocation success at http://aka.ms/allocation-guidance"}}
	c.createFaults["eastus"] = []fault{{Status: 409, Code: "OperationNotAllowed",
		Message: "Operation could not be completed as it results in exceeding approved Standard NCASv3_T4 Family Cores quota. Additional details - Deployment Model: Resource Manager, Location: eastus, Current Limit: 0, Current Usage: 0, Additional Required: 4, (Minimum) New Limit Required: 4."}}

	clk := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	t.Cleanup(clk.AutoAdvance())
	j, err := sqlite.Open(ctx, t.TempDir()+"/journal.db")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	p := c.provider(t, mt, azure.Config{}, azure.WithInstallation(j.Installation()), azure.WithClock(clk))
	var mu sync.Mutex
	var events []gpuprov.Event
	prov, err := gpuprov.New(j, gpuprov.WithProvider(p), gpuprov.WithClock(clk),
		gpuprov.WithBackoff(100*time.Millisecond, time.Second, 1),
		gpuprov.WithEvents(func(e gpuprov.Event) { mu.Lock(); events = append(events, e); mu.Unlock() }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { prov.Close() })

	vm, err := prov.Launch(ctx, gpuprov.Request{Name: "train", GPU: "t4", Timeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if vm.State != gpuprov.StateReady || vm.Location != (provider.Location{Region: "northcentralus"}) ||
		vm.SSH == nil || vm.SSH.Port != 22 || vm.SSH.User != azure.DefaultAdminUser || vm.PricePerHour != 0.526 {
		t.Fatalf("vm %+v", vm)
	}

	gpuprovtest.CheckAttempts(t, j, "train", gpuprovtest.Attempt{Region: "eastus2", Kind: "capacity"}, gpuprovtest.Attempt{Region: "eastus", Kind: "quota"},
		gpuprovtest.Attempt{Region: "northcentralus"})
	blocks, err := j.Blocks(ctx, clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	scopes := map[string]string{}
	for _, b := range blocks {
		scopes[b.Scope] = b.Key + " " + b.ErrorKind
	}
	if len(blocks) != 2 || scopes["offer"] != "offer:azure|eastus2||Standard_NC4as_T4_v3|od capacity" ||
		scopes["family"] != "family:azure|eastus|Standard NCASv3_T4 Family|od quota" {
		t.Fatalf("blocks %+v", blocks)
	}
	mu.Lock()
	var types []string
	for _, e := range events {
		types = append(types, e.Type)
	}
	mu.Unlock()
	for _, want := range []string{gpuprov.EvFailure, gpuprov.EvBlocked, gpuprov.EvTeardown, gpuprov.EvTornDown, gpuprov.EvReady} {
		if !slices.Contains(types, want) {
			t.Fatalf("events %v lack %s", types, want)
		}
	}

	// Every VM PUT named its attempt and carried If-None-Match: *, the
	// identity tags and the cloud-init custom data with the pinned host key.
	var names []string
	for _, r := range c.calls("PUT", "/virtualMachines/") {
		name := r.Path[strings.LastIndex(r.Path, "/")+1:]
		names = append(names, name)
		var body struct {
			Tags       map[string]string `json:"tags"`
			Properties struct {
				OSProfile struct {
					CustomData string `json:"customData"`
				} `json:"osProfile"`
			} `json:"properties"`
		}
		if err := json.Unmarshal(r.Body, &body); err != nil {
			t.Fatal(err)
		}
		cd, _ := base64.StdEncoding.DecodeString(body.Properties.OSProfile.CustomData)
		if r.Header.Get("If-None-Match") != "*" || body.Tags[provider.LabelVM] != "train" ||
			body.Tags[provider.LabelInstallation] != j.Installation() || !strings.HasPrefix(string(cd), "#cloud-config\n") ||
			!strings.Contains(string(cd), "ed25519_private") {
			t.Fatalf("PUT %s: If-None-Match %q tags %v custom data %q", name, r.Header.Get("If-None-Match"), body.Tags, cd)
		}
	}
	if !slices.Equal(names, []string{"gpuprov-train-1", "gpuprov-train-2", "gpuprov-train-3"}) {
		t.Fatalf("VM PUTs %v", names)
	}
	if live := c.vmNames(); !slices.Equal(live, []string{"gpuprov-train-3"}) {
		t.Fatalf("live VMs %v", live)
	}

	if err := prov.Delete(ctx, "train"); err != nil {
		t.Fatal(err)
	}
	c.settle()
	if left := c.perVM(); len(left) != 0 {
		t.Fatalf("left on the cloud: %v", left)
	}
	rg := "gpuprov-" + j.Installation() + "-"
	if g := c.groups(); !slices.Equal(g, []string{rg + "eastus", rg + "eastus2", rg + "northcentralus"}) {
		t.Fatalf("resource groups %v", g)
	}
}
