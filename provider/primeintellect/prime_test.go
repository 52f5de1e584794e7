package primeintellect_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/primeintellect"
	"github.com/org/gpuprov/provider/primeintellect/primemock"
)

func TestPlanFiltersStockAndNormalizes(t *testing.T) {
	e := newEnv(t, primeintellect.Config{})
	offers := e.offers(t)
	var got []string
	for _, o := range offers {
		var d map[string]any
		_ = json.Unmarshal(o.Detail, &d)
		got = append(got, d["cloudId"].(string))
		if o.GPU != "H100-80GB" || o.GPUCount != 1 {
			t.Fatalf("offer %+v", o)
		}
	}
	// Unavailable stock, 8x and the unknown B300 are no offers.
	if want := []string{"h100-pcie-eu", "h100-sxm-dc1"}; !slices.Equal(got, want) {
		t.Fatalf("offers %v, want %v", got, want)
	}
	o := offers[0]
	if o.Location != (provider.Location{Region: "eu_west", Zone: "EU-2"}) || o.PricePerHour != 1.90 {
		t.Fatalf("offer %+v", o)
	}
	var d map[string]any
	_ = json.Unmarshal(o.Detail, &d)
	if d["socket"] != "PCIe" || d["provider"] != "runpod" || d["dataCenterId"] != "EU-2" || d["security"] != "community_cloud" {
		t.Fatalf("detail %s", o.Detail)
	}
	calls := e.api.Calls(http.MethodGet, "/availability/gpus")
	if len(calls) != 1 || !strings.Contains(calls[0].Query, "gpu_count=1") || calls[0].Auth != "Bearer "+apiKey {
		t.Fatalf("calls %+v", calls)
	}
	// 8 GPUs: the price is the per-GPU price times the count.
	req8 := provider.ResourceRequest{GPU: "H100-80GB", GPUCount: 8}
	offers, _ = e.p.Plan(context.Background(), &req8)
	if len(offers) != 1 || offers[0].PricePerHour != 16 {
		t.Fatalf("8x: %+v", offers)
	}
	// Security filter.
	e2 := newEnv(t, primeintellect.Config{Security: "secure_cloud"})
	offers = e2.offers(t)
	if len(offers) != 1 || offers[0].Location.Zone != "US-1" {
		t.Fatalf("secure only: %+v", offers)
	}
}

// TestPlanLeavesPrepaidItemsOut: an item whose order charges hours upfront
// (prepaidTime, "pre-charged for the total number of hours ... regardless
// of actual usage") is never planned, however cheap per hour; a spot item
// is planned as Spot.
func TestPlanLeavesPrepaidItemsOut(t *testing.T) {
	e := newEnv(t, primeintellect.Config{},
		primemock.Item{CloudID: "prepaid", GPUType: "H100_80GB", Socket: "SXM5", Provider: "runpod", Region: "united_states", DataCenter: "US-1",
			Country: "US", Security: "secure_cloud", Stock: "High", GPUCount: 1, GPUMemory: 80, Price: 0.99, PrepaidHours: 720},
		primemock.Item{CloudID: "spot", GPUType: "H100_80GB", Socket: "SXM5", Provider: "runpod", Region: "united_states", DataCenter: "US-1",
			Country: "US", Security: "secure_cloud", Stock: "High", GPUCount: 1, GPUMemory: 80, Price: 1.20, Spot: true},
		primemock.Item{CloudID: "hourly", GPUType: "H100_80GB", Socket: "SXM5", Provider: "runpod", Region: "united_states", DataCenter: "US-1",
			Country: "US", Security: "secure_cloud", Stock: "High", GPUCount: 1, GPUMemory: 80, Price: 2.10})
	offers, err := e.p.Plan(context.Background(), &provider.ResourceRequest{GPU: "H100-80GB", GPUCount: 1, Spot: provider.SpotOrOnDemand})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range offers {
		var d map[string]any
		_ = json.Unmarshal(o.Detail, &d)
		got = append(got, fmt.Sprintf("%s spot=%v", d["cloudId"], o.Spot))
	}
	if want := []string{"spot spot=true", "hourly spot=false"}; !slices.Equal(got, want) {
		t.Fatalf("offers %v, want %v (the prepaid item left out)", got, want)
	}
}

func TestPlanPagesThroughAvailability(t *testing.T) {
	var its []primemock.Item
	for i := range 230 {
		its = append(its, primemock.Item{CloudID: fmt.Sprintf("c%03d", i), GPUType: "L40S_48GB", Socket: "PCIe", Provider: "runpod",
			Region: "united_states", DataCenter: fmt.Sprintf("DC-%d", i), Security: "secure_cloud", Stock: "Low", GPUCount: 1, GPUMemory: 48, Price: 1 + float64(i)/1000})
	}
	e := newEnv(t, primeintellect.Config{}, its...)
	req := provider.ResourceRequest{GPU: "L40S", GPUCount: 1}
	offers, err := e.p.Plan(context.Background(), &req)
	if err != nil || len(offers) != 230 {
		t.Fatalf("%d offers, %v", len(offers), err)
	}
	if n := len(e.api.Calls(http.MethodGet, "/availability/gpus")); n != 3 {
		t.Fatalf("%d pages read, want 3", n)
	}
}

func TestPrepareAndCreateSendTheIdentity(t *testing.T) {
	e := newEnv(t, primeintellect.Config{TeamID: "team-1"})
	_, id := e.launch(t, spec("train"))
	name := primeintellect.PodName("train", installation)
	if got := e.api.SSHKeys(); !slices.Equal(got, []string{name}) {
		t.Fatalf("keys %v", got)
	}
	creates := e.api.Calls(http.MethodPost, "/pods/")
	if len(creates) != 1 {
		t.Fatalf("%d creates", len(creates))
	}
	var body struct {
		Pod struct {
			Name, CloudID, GPUType, Socket, SSHKeyID, DataCenterID, Image string
			GPUCount                                                      int
			EnvVars                                                       []map[string]string
		}
		Provider struct{ Type string }
		Team     struct{ TeamID string }
	}
	if err := json.Unmarshal(creates[0].Body, &body); err != nil {
		t.Fatal(err)
	}
	if body.Pod.Name != name || body.Pod.CloudID != "h100-pcie-eu" || body.Pod.GPUType != "H100_80GB" || body.Pod.Socket != "PCIe" ||
		body.Pod.GPUCount != 1 || body.Pod.SSHKeyID == "" || body.Pod.DataCenterID != "EU-2" || body.Provider.Type != "runpod" ||
		body.Team.TeamID != "team-1" || body.Pod.Image != "ubuntu_22_cuda_12" {
		t.Fatalf("create body %s", creates[0].Body)
	}
	if !slices.ContainsFunc(body.Pod.EnvVars, func(v map[string]string) bool {
		return v["key"] == "GPUPROV_INSTALLATION" && v["value"] == installation
	}) {
		t.Fatalf("env vars %v", body.Pod.EnvVars)
	}
	// A replayed create adopts the pod.
	o := e.offer(t)
	prep, _ := e.p.Prepare(context.Background(), &o, spec("train"))
	again, err := e.p.Create(context.Background(), &o, prep, spec("train"))
	if err != nil || again != id || len(e.api.Calls(http.MethodPost, "/pods/")) != 1 {
		t.Fatalf("replay: %q %v", again, err)
	}
	if n := len(e.api.Calls(http.MethodPost, "/ssh_keys/")); n != 1 {
		t.Fatalf("%d key registrations, want 1", n)
	}
}

func TestCreateErrors(t *testing.T) {
	for _, tc := range []struct {
		status int
		body   string
		kind   provider.ErrorKind
		scope  provider.Scope
	}{
		{402, `{"detail":"Insufficient balance. Please top up your wallet."}`, provider.Quota, provider.ScopeProvider},
		{400, `{"detail":"This configuration is out of stock"}`, provider.Capacity, provider.ScopeOffer},
		{422, `{"errors":[{"param":"pod.socket","details":"Input should be one of the GPUSocket values"}]}`, provider.InvalidRequest, provider.ScopeOffer},
		{401, `{"detail":"Invalid API key"}`, provider.Credentials, provider.ScopeProvider},
		{503, `{"detail":"upstream"}`, provider.Transient, provider.ScopeOffer},
	} {
		t.Run(fmt.Sprint(tc.status), func(t *testing.T) {
			e := newEnv(t, primeintellect.Config{})
			o := e.offer(t)
			prep, err := e.p.Prepare(context.Background(), &o, spec("x"))
			if err != nil {
				t.Fatal(err)
			}
			e.api.Fail(primemock.Fault{Method: http.MethodPost, Path: "/pods/", Status: tc.status, Body: tc.body, Times: 1})
			_, err = e.p.Create(context.Background(), &o, prep, spec("x"))
			if pe := kindOf(t, err, tc.kind); pe.Scope() != tc.scope {
				t.Fatalf("scope %s", pe.Scope())
			}
			if n := len(e.api.Calls(http.MethodPost, "/pods/")); n != 1 {
				t.Fatalf("%d create attempts", n)
			}
		})
	}
}

func TestObserveInstallingIsPendingAndSSHComesFromTheConnection(t *testing.T) {
	e := newEnv(t, primeintellect.Config{})
	e.api.PageSize = 1 // every listing pages
	_, other := e.launch(t, spec("other"))
	o, id := e.launch(t, spec("train"))
	var statuses []string
	for range 4 {
		obs, err := e.p.Observe(context.Background(), o.Location, "train")
		if err != nil || len(obs) != 1 || obs[0].ID != id {
			t.Fatalf("observe %+v %v", obs, err)
		}
		statuses = append(statuses, string(obs[0].Status)+":"+obs[0].VendorStatus)
		if obs[0].Status == provider.StatusRunning {
			if obs[0].SSH == nil || *obs[0].SSH != (provider.SSHEndpoint{Host: "203.0.113.7", Port: 10022, User: "root"}) {
				t.Fatalf("ssh %+v", obs[0].SSH)
			}
		} else if obs[0].SSH != nil {
			t.Fatalf("ssh before running: %+v", obs[0])
		}
	}
	if !slices.Contains(statuses, "pending:ACTIVE/ACTIVE") || statuses[len(statuses)-1] != "running:ACTIVE/FINISHED" {
		t.Fatalf("statuses %v", statuses)
	}
	list, err := e.p.List(context.Background(), provider.Location{})
	if err != nil || len(list) != 2 {
		t.Fatalf("list %+v %v", list, err)
	}
	if !slices.ContainsFunc(list, func(x provider.Observed) bool { return x.ID == other && x.VM == "other" }) {
		t.Fatalf("list %+v", list)
	}
	e.api.Set(id, "ACTIVE", "ERROR", "pull failed")
	obs, _ := e.p.Observe(context.Background(), o.Location, "train")
	if obs[0].Status != provider.StatusFailed {
		t.Fatalf("install error: %+v", obs)
	}
}

func TestDeleteCleanupDiagnose(t *testing.T) {
	e := newEnv(t, primeintellect.Config{})
	o, id := e.launch(t, spec("train"))
	e.api.Set(id, "ACTIVE", "ERROR", "docker pull failed")
	d, err := e.p.Diagnose(context.Background(), o.Location, "train", id)
	if err != nil || d.Verdict() != provider.Unhealthy || d.Findings[0].Code != "installation-failed" || !strings.Contains(d.Findings[0].Message, "docker pull") {
		t.Fatalf("diagnose %+v %v", d, err)
	}
	if err := e.p.Delete(context.Background(), o.Location, "train", []string{id, "00000000-0000-4000-8000-00000000dead"}); err != nil {
		t.Fatal(err)
	}
	e.api.Settle()
	if pods := e.api.Pods(); len(pods) != 0 {
		t.Fatalf("pods left %+v", pods)
	}
	d, err = e.p.Diagnose(context.Background(), o.Location, "train", id)
	if err != nil || d.Exists || d.Findings[0].Code != "terminated" || d.Findings[0].At.IsZero() {
		t.Fatalf("history %+v %v", d, err)
	}
	for range 2 {
		if err := e.p.Cleanup(context.Background(), o.Location, "train"); err != nil {
			t.Fatal(err)
		}
	}
	if keys := e.api.SSHKeys(); len(keys) != 0 {
		t.Fatalf("keys left %v", keys)
	}
	e.api.Fail(primemock.Fault{Method: http.MethodDelete, Path: "/pods/", Status: 429, Body: `{"detail":"slow"}`, RetryAfter: "3", Times: 1})
	pe := kindOf(t, e.p.Delete(context.Background(), o.Location, "train", []string{"x"}), provider.Transient)
	if pe.RetryAfter != 3*time.Second {
		t.Fatalf("retry after %s", pe.RetryAfter)
	}
}

func TestFactory(t *testing.T) {
	t.Setenv(primeintellect.EnvAPIKey, "from-env")
	p, err := provider.Build("primeintellect", provider.Settings{Installation: installation})
	if err != nil {
		t.Fatal(err)
	}
	c := p.Capabilities()
	if c.Supports(provider.FeatureUserData) || c.Supports(provider.FeatureIdempotencyToken) || !c.Supports(provider.FeatureSpot) {
		t.Fatalf("capabilities %+v", c)
	}
	bad := func(into any) error { return json.Unmarshal([]byte(`{"api_key":"k","security":"open"}`), into) }
	if _, err := provider.Build("primeintellect", provider.Settings{Decode: bad}); err == nil || !strings.Contains(err.Error(), "security") {
		t.Fatalf("bad security: %v", err)
	}
	t.Setenv(primeintellect.EnvAPIKey, "")
	if _, err := provider.Build("primeintellect", provider.Settings{}); err == nil || !strings.Contains(err.Error(), "PRIME_API_KEY") {
		t.Fatalf("missing key: %v", err)
	}
}

// TestCreateSizesTheDisk: an offer carries its availability's disk
// (GpuAvailability.disk defaultCount and maxCount, in GB); a disk the core
// raised for Request.DiskGB goes out as pod.diskSize (checked against the
// vendor schema by the schema tests' transport too).
func TestCreateSizesTheDisk(t *testing.T) {
	e := newEnv(t, primeintellect.Config{})
	o := e.offer(t)
	if o.DiskGB != 100 || o.MaxDiskGB != 2000 {
		t.Fatalf("offer disk %d GB (max %d); want the availability's 100 and 2000", o.DiskGB, o.MaxDiskGB)
	}
	o.DiskGB = 750
	prep, err := e.p.Prepare(context.Background(), &o, spec("big"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.p.Create(context.Background(), &o, prep, spec("big")); err != nil {
		t.Fatal(err)
	}
	var body struct {
		Pod struct{ DiskSize int }
	}
	creates := e.api.Calls(http.MethodPost, "/pods/")
	if err := json.Unmarshal(creates[len(creates)-1].Body, &body); err != nil || body.Pod.DiskSize != 750 {
		t.Fatalf("pod.diskSize %d (%v); want 750", body.Pod.DiskSize, err)
	}
}
