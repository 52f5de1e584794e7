package vastai_test

import (
	"context"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/clock"
	"github.com/org/gpuprov/gpuprovtest"
	"github.com/org/gpuprov/journal/sqlite"
	"github.com/org/gpuprov/provider/vastai"
	"github.com/org/gpuprov/provider/vastai/vastmock"
)

const userKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJ5Vf0zdfBx5i9nRYkuGAOI4dqnA7BD6IVn0i60HNmDH ops@example"

// provisioner is a Provisioner on an SQLite journal and a fake clock that
// drives the adapter against the mock, every call checked against Vast's
// schema.
type provisioner struct {
	*gpuprov.Provisioner
	db     *sqlite.DB
	clk    *clock.Fake
	mu     sync.Mutex
	events []gpuprov.Event
}

func newProvisioner(t *testing.T, api *vastmock.API, cfg vastai.Config) *provisioner {
	t.Helper()
	ctx := context.Background()
	pr := &provisioner{clk: clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))}
	t.Cleanup(pr.clk.AutoAdvance())
	db, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "journal.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	pr.db = db
	mt := newMockTransport(api)
	cfg.APIKey = apiKey
	cfg.RequestsPerSecond, cfg.Burst = 1000, 100 // the core's token bucket runs on the wall clock: do not pace the test
	cfg.ConsistencyWindow = time.Second
	p, err := vastai.New(cfg, vastai.WithHTTP(base, &http.Client{Transport: vendorSchema(t).Transport(t, mt)}))
	if err != nil {
		t.Fatal(err)
	}
	prov, err := gpuprov.New(db, gpuprov.WithClock(pr.clk), gpuprov.WithProvider(p),
		gpuprov.WithBackoff(100*time.Millisecond, time.Second, 1),
		gpuprov.WithSSH("root", []string{userKey}, true),
		gpuprov.WithEvents(func(ev gpuprov.Event) { pr.mu.Lock(); pr.events = append(pr.events, ev); pr.mu.Unlock() }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { prov.Close() })
	pr.Provisioner = prov
	return pr
}

// TestFailoverFromATakenAsk launches one H100 through the Provisioner.
// The cheapest ask is taken by another renter between the search and the
// accept (410 no_such_ask): that attempt is torn down as a capacity
// failure, only that machine's offer is blocked, and the next ask, on
// another machine, is accepted. The VM's one instance carries its label
// and the host key the core pinned; deleting the VM leaves nothing.
func TestFailoverFromATakenAsk(t *testing.T) {
	ctx := context.Background()
	api := vastmock.New(apiKey,
		vastmock.Offer{ID: 101, MachineID: 5001, GPUName: "H100 SXM", NumGPUs: 1, GPURAMMB: 81559, DPH: 1.80, Reliability: 0.99,
			Verified: true, Geolocation: "Texas, US", DiskSpace: 500, CPUCores: 24, CPURAMMB: 257000},
		vastmock.Offer{ID: 102, MachineID: 5002, GPUName: "H100 PCIE", NumGPUs: 1, GPURAMMB: 81559, DPH: 2.10, Reliability: 0.99,
			Verified: true, Geolocation: "Quebec, CA", DiskSpace: 500, CPUCores: 16, CPURAMMB: 128000})
	api.Snipe(101)
	pr := newProvisioner(t, api, vastai.Config{InjectHostKey: true})

	vm, err := pr.Launch(ctx, gpuprov.Request{Name: "train", GPU: "h100", Timeout: time.Hour})
	if err != nil {
		t.Fatalf("launch: %v", err)
	}
	if vm.State != gpuprov.StateReady || vm.Provider != "vastai" || vm.Location.String() != "CA/machine-5002" || vm.PricePerHour != 2.10 {
		t.Fatalf("vm %+v", vm)
	}
	if vm.SSH == nil || vm.SSH.Host != "192.0.2.10" || vm.SSH.User != "root" {
		t.Fatalf("ssh %+v", vm.SSH)
	}

	// Accepts went out cheapest first, once each.
	acceptedInOrder(t, api, "/api/v0/asks/101/", "/api/v0/asks/102/")

	gpuprovtest.CheckAttempts(t, pr.db, "train", gpuprovtest.Attempt{Zone: "machine-5001", Kind: "capacity"}, gpuprovtest.Attempt{Zone: "machine-5002"})
	blocks, err := pr.db.Blocks(ctx, pr.clk.Now())
	if err != nil || len(blocks) != 1 || blocks[0].ErrorKind != "capacity" || blocks[0].Scope != "offer" ||
		!strings.Contains(blocks[0].Key, "|US|machine-5001|H100 SXM x1|") {
		t.Fatalf("blocks %+v %v", blocks, err)
	}

	// One instance, the VM's: its label, and the host key the core pinned in its onstart.
	insts := api.Instances()
	if len(insts) != 1 || insts[0].Label != "gpuprov-train."+pr.db.Installation() || insts[0].MachineID != 5002 {
		t.Fatalf("instances %+v", insts)
	}
	if vm.HostKey == "" || !strings.Contains(insts[0].Onstart, vm.HostKey) || !strings.Contains(insts[0].Onstart, userKey) {
		t.Fatalf("onstart lacks the pinned host key %q or the user key", vm.HostKey)
	}

	if err := pr.Delete(ctx, "train"); err != nil {
		t.Fatal(err)
	}
	if got := api.Instances(); len(got) != 0 {
		t.Fatalf("instances after delete: %+v", got)
	}
}

// TestLaunchAdoptsALostCreate: the accept lands but its answer is lost.
// The core retries the create, which finds the instance by its label:
// the VM is ready on that instance, with one accept and one instance.
func TestLaunchAdoptsALostCreate(t *testing.T) {
	ctx := context.Background()
	api := vastmock.New(apiKey, market()...)
	api.Fail(vastmock.Fault{Method: http.MethodPut, Path: "/api/v0/asks/", Lose: true, Times: 1})
	pr := newProvisioner(t, api, vastai.Config{})

	vm, err := pr.Launch(ctx, gpuprov.Request{Name: "train", GPU: "h100", Timeout: time.Hour})
	if err != nil {
		t.Fatalf("launch: %v", err)
	}
	insts := api.Instances()
	if n := len(api.Calls(http.MethodPut, "/api/v0/asks/")); n != 1 || len(insts) != 1 || vm.InstanceID != strconv.FormatInt(insts[0].ID, 10) {
		t.Fatalf("%d accepts, instances %+v, vm instance %s", n, insts, vm.InstanceID)
	}
	pr.mu.Lock()
	defer pr.mu.Unlock()
	adopted := 0
	for _, ev := range pr.events {
		if ev.Type == gpuprov.EvAdopted {
			adopted++
		}
	}
	if adopted != 1 {
		t.Fatalf("%d adopted events", adopted)
	}
}

// TestFailoverFromAnUndocumentedCreate400 launches one H100 through the
// Provisioner. The cheapest ask's create answers a 400 that Vast's
// document does not describe: createInstance's 400 schema (vast-ai/docs
// api-reference/openapi.yaml, PUT /api/v0/asks/{id}) with none of the codes
// of its enum (invalid_args, invalid_price, no_ssh_key_for_vm); the msg is
// this test's placeholder, as no Vast reference gives such an answer's
// text. The launch used to abort on it (InvalidRequest). It is now Failed:
// that attempt is torn down, that machine's offer is blocked for the core's
// 10 minutes, and the next ask is accepted.
func TestFailoverFromAnUndocumentedCreate400(t *testing.T) {
	ctx := context.Background()
	api := vastmock.New(apiKey,
		vastmock.Offer{ID: 101, MachineID: 5001, GPUName: "H100 SXM", NumGPUs: 1, GPURAMMB: 81559, DPH: 1.80, Reliability: 0.99,
			Verified: true, Geolocation: "Texas, US", DiskSpace: 500, CPUCores: 24, CPURAMMB: 257000},
		vastmock.Offer{ID: 102, MachineID: 5002, GPUName: "H100 PCIE", NumGPUs: 1, GPURAMMB: 81559, DPH: 2.10, Reliability: 0.99,
			Verified: true, Geolocation: "Quebec, CA", DiskSpace: 500, CPUCores: 16, CPURAMMB: 128000})
	api.Fail(vastmock.Fault{Method: http.MethodPut, Path: "/api/v0/asks/101/", Status: http.StatusBadRequest,
		Body: `{"success":false,"msg":"an answer createInstance does not document"}`, Times: 1})
	pr := newProvisioner(t, api, vastai.Config{})

	vm, err := pr.Launch(ctx, gpuprov.Request{Name: "train", GPU: "h100", Timeout: time.Hour})
	if err != nil {
		t.Fatalf("launch: %v", err)
	}
	if vm.State != gpuprov.StateReady || vm.Location.String() != "CA/machine-5002" {
		t.Fatalf("vm %+v", vm)
	}
	acceptedInOrder(t, api, "/api/v0/asks/101/", "/api/v0/asks/102/")
	gpuprovtest.CheckAttempts(t, pr.db, "train", gpuprovtest.Attempt{Zone: "machine-5001", Kind: "failed"}, gpuprovtest.Attempt{Zone: "machine-5002"})
	blocks, err := pr.db.Blocks(ctx, pr.clk.Now())
	if err != nil || len(blocks) != 1 || blocks[0].ErrorKind != "failed" || blocks[0].Scope != "offer" ||
		!strings.Contains(blocks[0].Key, "|US|machine-5001|") || blocks[0].Until.Sub(blocks[0].CreatedAt) != 10*time.Minute {
		t.Fatalf("blocks %+v %v", blocks, err)
	}
	if insts := api.Instances(); len(insts) != 1 || insts[0].MachineID != 5002 {
		t.Fatalf("instances %+v", insts)
	}
}

// acceptedInOrder fails t unless the asks accepted (PUT /api/v0/asks/{id}/)
// are want, in order, once each.
func acceptedInOrder(t *testing.T, api *vastmock.API, want ...string) {
	t.Helper()
	var accepted []string
	for _, c := range api.Calls(http.MethodPut, "/api/v0/asks/") {
		accepted = append(accepted, c.Path)
	}
	if !slices.Equal(accepted, want) {
		t.Fatalf("accepts %v, want %v", accepted, want)
	}
}
