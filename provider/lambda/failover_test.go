package lambda_test

import (
	"context"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jarcoal/httpmock"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/clock"
	"github.com/org/gpuprov/gpuprovtest"
	"github.com/org/gpuprov/internal/openapitest"
	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/journal/sqlite"
	"github.com/org/gpuprov/provider/lambda"
	"github.com/org/gpuprov/provider/lambda/lambdamock"
	"github.com/org/gpuprov/provider/primeintellect"
	"github.com/org/gpuprov/provider/primeintellect/primemock"
	pt "github.com/org/gpuprov/provider/providertest"
	"github.com/org/gpuprov/provider/runpod"
	"github.com/org/gpuprov/provider/runpod/runpodmock"
)

// creates records the order of create requests across the three clouds.
type creates struct {
	mu    sync.Mutex
	order []string
}

// tap wraps a mock transport, noting every create request under name.
func (c *creates) tap(name string, mt http.RoundTripper) *http.Client {
	return &http.Client{Transport: roundTrip(func(r *http.Request) (*http.Response, error) {
		if r.Method == http.MethodPost && (strings.HasSuffix(r.URL.Path, "/instance-operations/launch") || strings.HasSuffix(r.URL.Path, "/pods/") || strings.HasSuffix(r.URL.Path, "/v2/pods")) {
			c.mu.Lock()
			c.order = append(c.order, name)
			c.mu.Unlock()
		}
		return mt.RoundTrip(r)
	})}
}

type roundTrip func(*http.Request) (*http.Response, error)

func (f roundTrip) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestFailoverLambdaToPrimeIntellectToRunPod launches one H100 through the
// Provisioner on the three marketplaces: Lambda is cheapest but answers
// insufficient capacity, Prime Intellect is next but answers out of stock,
// RunPod is dearest and succeeds. The journal shows both blocks and the
// three attempts, creates went out in price order, and nothing is left on
// the clouds that failed.
func TestFailoverLambdaToPrimeIntellectToRunPod(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	t.Cleanup(clk.AutoAdvance())
	db, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "journal.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	inst := db.Installation()
	fast := 1000.0 // the core's token bucket runs on the wall clock: do not pace the test

	rec := &creates{}
	lmt, pmt, rmt := httpmock.NewMockTransport(), httpmock.NewMockTransport(), httpmock.NewMockTransport()
	// Each cloud's traffic is checked against its vendor's schema.
	primeDoc := openapitest.Load(t, "../primeintellect/testdata/openapi.json", "https://prime.test",
		openapitest.UndocumentedStatus(http.StatusBadRequest, `observed {"detail": "..."} answers (docs/clouds/primeintellect.md)`))
	runpodDoc := openapitest.Load(t, "../runpod/testdata/openapi.json", "https://runpod.test")

	lapi := lambdamock.New("lk", lambdamock.Type{Name: "gpu_1x_h100_pcie", GPUDescription: "H100 (80 GB PCIe)", PriceCents: 149,
		GPUs: 1, VCPUs: 26, MemoryGiB: 200, Regions: []string{"us-east-1"}})
	lapi.Fail(lambdamock.Fault{Method: http.MethodPost, Path: "/instance-operations/launch", Status: 400,
		Code: lambda.CodeInsufficientCapacity, Message: "Not enough capacity to fulfill launch request."})
	lapi.Register(lmt, "https://lambda.test/api/v1")
	lp, err := lambda.New(lambda.Config{APIKey: "lk", RequestsPerSecond: fast, Burst: 100, ConsistencyWindow: time.Second},
		lambda.WithInstallation(inst), lambda.WithHTTP("https://lambda.test/api/v1", rec.tap("lambda", vendorSchema(t).Transport(t, lmt))))
	if err != nil {
		t.Fatal(err)
	}

	papi := primemock.New("pk", primemock.Item{CloudID: "h100-us", GPUType: "H100_80GB", Socket: "SXM5", Provider: "dc_roan",
		Region: "united_states", DataCenter: "US-1", Country: "US", Security: "secure_cloud", Stock: "Low", GPUCount: 1, GPUMemory: 80, Price: 1.99})
	papi.Fail(primemock.Fault{Method: http.MethodPost, Path: "/pods/", Status: 400, Body: `{"detail":"This configuration is out of stock"}`})
	papi.Register(pmt, "https://prime.test/api/v1")
	pp, err := primeintellect.New(primeintellect.Config{APIKey: "pk", RequestsPerSecond: fast, Burst: 100, ConsistencyWindow: time.Second},
		primeintellect.WithInstallation(inst), primeintellect.WithHTTP("https://prime.test/api/v1", rec.tap("primeintellect", primeDoc.Transport(t, pmt))))
	if err != nil {
		t.Fatal(err)
	}

	rapi := runpodmock.New("rk", runpodmock.GPU{ID: "NVIDIA H100 80GB HBM3", Name: "H100 SXM", Memory: 80, Secure: 2.99, MaxCount: 8,
		DataCenters: map[string]string{"US-TX-3": "HIGH"}})
	rapi.Register(rmt, "https://runpod.test/v2")
	rp, err := runpod.New(runpod.Config{APIKey: "rk", Clouds: []string{"SECURE"}, RequestsPerSecond: fast, Burst: 100, ConsistencyWindow: time.Second},
		runpod.WithInstallation(inst), runpod.WithHTTP("https://runpod.test/v2", rec.tap("runpod", runpodDoc.Transport(t, rmt))))
	if err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	var events []gpuprov.Event
	prov, err := gpuprov.New(db, gpuprov.WithClock(clk), gpuprov.WithProvider(lp, pp, rp),
		gpuprov.WithBackoff(100*time.Millisecond, time.Second, 1),
		gpuprov.WithSSH("root", []string{"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJ5Vf0zdfBx5i9nRYkuGAOI4dqnA7BD6IVn0i60HNmDH ops@example"}, true),
		gpuprov.WithEvents(func(ev gpuprov.Event) { mu.Lock(); events = append(events, ev); mu.Unlock() }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { prov.Close() })

	vm, err := prov.Launch(ctx, gpuprov.Request{Name: "train", GPU: "h100", Timeout: time.Hour})
	if err != nil {
		t.Fatalf("launch: %v", err)
	}
	if vm.State != gpuprov.StateReady || vm.Provider != "runpod" || vm.Location.Region != "US-TX-3" || vm.PricePerHour != 2.99 {
		t.Fatalf("vm %+v", vm)
	}
	if vm.SSH == nil || vm.SSH.Port != 40022 || vm.SSH.User != "root" {
		t.Fatalf("ssh %+v", vm.SSH)
	}

	// Creates went out once per cloud, cheapest first.
	if want := []string{"lambda", "primeintellect", "runpod"}; !slices.Equal(rec.order, want) {
		t.Fatalf("create order %v, want %v", rec.order, want)
	}

	// The journal: three attempts, the first two torn down with capacity
	// errors, the last the VM's; both failed offers blocked for capacity.
	gpuprovtest.CheckAttempts(t, db, "train", gpuprovtest.Attempt{Provider: "lambda", Kind: "capacity"},
		gpuprovtest.Attempt{Provider: "primeintellect", Kind: "capacity"}, gpuprovtest.Attempt{Provider: "runpod"})
	blocks, err := db.Blocks(ctx, clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, b := range blocks {
		if b.ErrorKind != "capacity" || b.Scope != "offer" {
			t.Fatalf("block %+v", b)
		}
		keys = append(keys, b.Key)
	}
	slices.Sort(keys)
	if len(keys) != 2 || !strings.HasPrefix(keys[0], "offer:lambda|us-east-1||gpu_1x_h100_pcie|") || !strings.HasPrefix(keys[1], "offer:primeintellect|united_states|US-1|H100_80GB") {
		t.Fatalf("blocks %v", keys)
	}
	evs, err := db.Events(ctx, journal.EventQuery{VM: "train"})
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, e := range evs {
		count[e.Type]++
	}
	if count[gpuprov.EvAttempt] != 3 || count[gpuprov.EvFailure] != 2 || count[gpuprov.EvBlocked] != 2 ||
		count[gpuprov.EvTornDown] != 2 || count[gpuprov.EvReady] != 1 {
		t.Fatalf("journal events %v", count)
	}
	mu.Lock()
	sinkEvents := len(events)
	mu.Unlock()
	if sinkEvents < len(evs) {
		t.Fatalf("the sink saw %d events, the journal holds %d", sinkEvents, len(evs))
	}

	// Nothing left on the clouds that failed: no instance, key or ruleset.
	if got := lapi.Instances(); len(got) != 0 {
		t.Fatalf("lambda instances left: %+v", got)
	}
	if got := lapi.SSHKeys(); len(got) != 0 {
		t.Fatalf("lambda keys left: %v", got)
	}
	// The shared ruleset goes a grace after the core left lambda's region.
	clk.Advance(gpuprov.DefaultSharedGrace)
	pt.WaitFor(t, "no lambda ruleset is left a grace after the failover", func() bool { return len(lapi.Rulesets()) == 0 })
	if got := papi.Pods(); len(got) != 0 {
		t.Fatalf("prime pods left: %+v", got)
	}
	if got := papi.SSHKeys(); len(got) != 0 {
		t.Fatalf("prime keys left: %v", got)
	}
	// And the VM's one pod on RunPod, carrying its identity.
	pods := rapi.Pods()
	if len(pods) != 1 || pods[0].ID != vm.InstanceID || pods[0].Name != "gpuprov-train" || pods[0].Env[runpod.EnvInstallation] != inst {
		t.Fatalf("runpod pods %+v", pods)
	}
	// The Lambda attempt sent the host key it generated (user-data); the
	// others cannot take one and are pinned on first contact.
	launches := lapi.Calls(http.MethodPost, "/instance-operations/launch")
	if len(launches) != 1 || !strings.Contains(string(launches[0].Body), "ed25519_private") {
		t.Fatalf("lambda launch without the injected host key")
	}

	// Deleting the VM removes the last pod.
	if err := prov.Delete(ctx, "train"); err != nil {
		t.Fatal(err)
	}
	if got := rapi.Pods(); len(got) != 0 {
		t.Fatalf("runpod pods after delete: %+v", got)
	}
}
