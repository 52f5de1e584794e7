package gcp_test

import (
	"context"
	"encoding/json"
	"net/url"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/gcp"
)

// h100Flex asks for eight H100s as a Flex-start VM that runs eight hours.
var h100Flex = provider.ResourceRequest{GPU: "H100-80GB", GPUCount: 8, FlexStart: 8 * time.Hour}

// A flex-start request gets flex-start offers only, of the series Google
// lists for Flex-start VMs (A4, A3, A2, G2: not N1), each with the
// request's run duration, on demand, at no more than the on-demand price,
// and outside every reservation: Plan lists none.
func TestFlexStartPlan(t *testing.T) {
	c, mt := newCloud(t)
	c.capacity.reservations = projectReservations()
	p := c.provider(t, mt, gcp.Config{Spot: true})
	if !p.Capabilities().FlexStart {
		t.Fatal("Capabilities().FlexStart is false: the core would never ask for flex-start offers")
	}
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		req   provider.ResourceRequest
		types []string // the instance types offered, sorted
	}{
		{"H100 x8", h100Flex, []string{"a3-highgpu-8g", "a3-megagpu-8g"}},
		{"A100 x16", provider.ResourceRequest{GPU: "A100-40GB", GPUCount: 16, FlexStart: time.Hour}, []string{"a2-megagpu-16g"}},
		{"L4 x1", provider.ResourceRequest{GPU: "L4", GPUCount: 1, FlexStart: time.Hour}, []string{"g2-standard-4", "g2-standard-8"}},
		{"T4 x1: N1 runs no Flex-start VM", provider.ResourceRequest{GPU: "T4", GPUCount: 1, FlexStart: time.Hour}, nil},
		{"spot only: a Flex-start VM is not Spot", provider.ResourceRequest{GPU: "L4", GPUCount: 1, FlexStart: time.Hour, Spot: provider.SpotOnly}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(c.calls("reservations"))
			offers, err := p.Plan(ctx, &tc.req)
			if err != nil {
				t.Fatal(err)
			}
			if n := len(c.calls("reservations")) - before; n != 0 {
				t.Fatalf("%d reservation calls for a flex-start request: a Flex-start VM consumes no reservation", n)
			}
			onDemand := tc.req
			onDemand.FlexStart, onDemand.Spot = 0, provider.OnDemand
			odOffers, err := p.Plan(ctx, &onDemand)
			if err != nil {
				t.Fatal(err)
			}
			price := map[string]float64{}
			for _, o := range odOffers {
				price[o.Location.Zone+"/"+o.InstanceType] = o.PricePerHour
			}
			var types []string
			for _, o := range offers {
				if o.MaxRunDuration != tc.req.FlexStart || o.Spot || o.Reservation != nil {
					t.Fatalf("offer %s: run duration %s, spot %v, reservation %v; want %s, on demand, none",
						o.Key(), o.MaxRunDuration, o.Spot, o.Reservation, tc.req.FlexStart)
				}
				if od, ok := price[o.Location.Zone+"/"+o.InstanceType]; !ok || o.PricePerHour != od {
					t.Fatalf("offer %s at $%g, want the on-demand $%g", o.Key(), o.PricePerHour, od)
				}
				if !strings.HasSuffix(o.Key(), "|flex") {
					t.Fatalf("key %s does not tell the flex-start offer from the on-demand one", o.Key())
				}
				if !slices.Contains(types, o.InstanceType) {
					types = append(types, o.InstanceType)
				}
			}
			slices.Sort(types)
			if !slices.Equal(types, tc.types) {
				t.Fatalf("flex-start offers of %v, want %v", types, tc.types)
			}
		})
	}
	// And an ordinary request gets no flex-start offer.
	offers, err := p.Plan(ctx, &provider.ResourceRequest{GPU: "H100-80GB", GPUCount: 8})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range offers {
		if o.MaxRunDuration != 0 {
			t.Fatalf("on-demand request got flex-start offer %s", o.Key())
		}
	}
}

// A run duration outside Compute Engine's bounds for maxRunDuration (10
// minutes to 7 days, "Create a Flex-start VM") is refused before any call,
// naming the bound; the bounds themselves are accepted.
func TestFlexStartBounds(t *testing.T) {
	c, mt := newCloud(t)
	p := c.provider(t, mt, gcp.Config{})
	ctx := context.Background()
	for _, tc := range []struct {
		run  time.Duration
		says string // "" accepted
	}{
		{10*time.Minute - time.Second, "below Compute Engine's minimum maxRunDuration of 10m0s"},
		{time.Second, "minimum"},
		{7*24*time.Hour + time.Second, "above Compute Engine's maximum maxRunDuration of 168h0m0s (7 days)"},
		{10 * time.Minute, ""},
		{7 * 24 * time.Hour, ""},
	} {
		t.Run(tc.run.String(), func(t *testing.T) {
			before := len(c.requests)
			req := provider.ResourceRequest{GPU: "L4", GPUCount: 1, FlexStart: tc.run}
			offers, err := p.Plan(ctx, &req)
			if tc.says == "" {
				if err != nil || len(offers) == 0 {
					t.Fatalf("%d offers, err %v; want offers", len(offers), err)
				}
				return
			}
			pe := kindOf(t, err, provider.InvalidRequest)
			if !strings.Contains(pe.Error(), tc.says) || !strings.Contains(pe.Error(), tc.run.String()) {
				t.Fatalf("error %q does not name %s and the bound (%q)", pe, tc.run, tc.says)
			}
			if len(c.requests) != before {
				t.Fatal("a refused request reached the API")
			}
		})
	}
}

// Create of a flex-start offer returns the instance id as soon as the
// insert is accepted, without waiting on its operation (which runs for as
// long as the VM is queued, up to two hours): it reads the operation at
// most once. Observe then reports the VM pending and queued, with GCE's own
// status word, then pending and no longer queued once it has capacity, then
// running with its SSH endpoint.
func TestFlexStartQueuedThenRunning(t *testing.T) {
	c, mt := newCloud(t)
	p := c.provider(t, mt, gcp.Config{OperationTimeout: time.Hour})
	ctx := context.Background()
	offer := offerIn(t, p, h100Flex, "us-central1-a", false)
	spec := newSpec(t, "queued")
	prep, err := p.Prepare(ctx, &offer, spec)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var id string
	go func() {
		defer close(done)
		id, err = p.Create(ctx, &offer, prep, spec)
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		// Only reached when Create waits on the RUNNING operation (Wait's
		// backoff would poll it for the OperationTimeout of an hour).
		t.Fatal("Create waits on the queued insert's operation")
	}
	if err != nil || id == "" {
		t.Fatalf("Create: id %q, err %v", id, err)
	}
	if polls := c.calls("GET /compute/v1/projects/" + project + "/zones/us-central1-a/operations/"); len(polls) > 1 {
		t.Fatalf("%d operation reads, want at most one", len(polls))
	}

	loc := offer.Location
	observe := func() provider.Observed {
		t.Helper()
		obs, err := p.Observe(ctx, loc, "queued")
		if err != nil || len(obs) != 1 || obs[0].ID != id {
			t.Fatalf("Observe: %v, %v; want instance %s", obs, err, id)
		}
		return obs[0]
	}
	o := observe()
	if o.Status != provider.StatusPending || !o.Queued || o.VendorStatus != "PENDING" || o.SSH != nil {
		t.Fatalf("queued VM observed %+v, want pending, queued, vendor status PENDING, no SSH", o)
	}
	listed, err := p.List(ctx, provider.Location{})
	if err != nil || len(listed) != 1 || !listed[0].Queued {
		t.Fatalf("List: %+v, %v; want the VM queued", listed, err)
	}

	c.grantFlex()
	if o := observe(); o.Status != provider.StatusPending || o.Queued || o.VendorStatus != "PROVISIONING" {
		t.Fatalf("VM with capacity observed %+v, want pending (PROVISIONING), not queued", o)
	}
	c.settle()
	if o := observe(); o.Status != provider.StatusRunning || o.Queued || o.SSH == nil {
		t.Fatalf("running VM observed %+v, want running with SSH, not queued", o)
	}
}

// An error the accepted insert's operation already carries is reported as
// a wait would report it: a quota refusal is Quota blocking the model's
// flex-start offers in the region (their family is the preemptible quota
// metric Flex-start VMs draw on).
func TestFlexStartCreateReportsTheOperationError(t *testing.T) {
	c, mt := newCloud(t)
	p := c.provider(t, mt, gcp.Config{})
	ctx := context.Background()
	offer := offerIn(t, p, h100Flex, "us-central1-a", false)
	if offer.Family != "PREEMPTIBLE_NVIDIA_H100_GPUS" {
		t.Fatalf("flex-start offer family %q, want the preemptible H100 quota metric", offer.Family)
	}
	c.insertFaults["us-central1-a"] = []opFault{{Code: "QUOTA_EXCEEDED", HTTP: 403,
		Message:     "Quota 'PREEMPTIBLE_NVIDIA_H100_GPUS' exceeded. Limit: 0.0 in region us-central1.",
		QuotaMetric: "compute.googleapis.com/preemptible_nvidia_h100_gpus"}}
	spec := newSpec(t, "refused")
	prep, err := p.Prepare(ctx, &offer, spec)
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.Create(ctx, &offer, prep, spec)
	if pe := kindOf(t, err, provider.Quota); pe.Scope() != provider.ScopeFamily {
		t.Fatalf("scope %s, want family", pe.Scope())
	}
}

// Flex-start VMs draw on the preemptible GPU quota: Quotas returns it for
// the flex-start offers, and the on-demand quota does not bound them.
func TestFlexStartQuotas(t *testing.T) {
	_, p := quotaProvider(t) // H100: 16 on demand (8 used), 8 preemptible (8 used)
	ctx := context.Background()
	qs, err := p.Quotas(ctx, "us-central1")
	if err != nil {
		t.Fatal(err)
	}
	flex := offerIn(t, p, h100Flex, "us-central1-a", false)
	fits, covering := fitsAll(qs, &flex)
	if fits || !slices.Equal(covering, []string{"PREEMPTIBLE_NVIDIA_H100_GPUS", "GPUS_ALL_REGIONS"}) {
		t.Fatalf("flex-start offer: fits %v, covered by %v; want it held back by the full preemptible quota and GPUS_ALL_REGIONS", fits, covering)
	}
	for _, q := range qs {
		if q.Covers(&flex) && q.Region != "" && !strings.HasPrefix(q.What, "Flex-start ") {
			t.Fatalf("quota %s (%s) covers the flex-start offer", q.Name, q.What)
		}
	}
	// L4 has no preemptible quota: no regional quota bounds its flex-start
	// offers (which one they would meet is not documented).
	l4Flex := offerIn(t, p, provider.ResourceRequest{GPU: "L4", GPUCount: 1, FlexStart: time.Hour}, "us-central1-a", false)
	if _, covering := fitsAll(qs, &l4Flex); !slices.Equal(covering, []string{"GPUS_ALL_REGIONS"}) {
		t.Fatalf("L4 flex-start offer covered by %v, want GPUS_ALL_REGIONS only", covering)
	}
}

// The flex-start rule of the insert check bites: each broken variant of a
// real Flex-start VM body is rejected, naming the field.
func TestInsertCheckRejectsBrokenFlexStartBodies(t *testing.T) {
	doc := loadDiscovery(t)
	c, mt := newCloud(t)
	p := c.provider(t, mt, gcp.Config{})
	sent := launchBodies(t, p, c, offerIn(t, p, h100Flex, "us-central1-a", false), newSpec(t, "flex-broken"))
	m := doc.method(t, "instances", "insert")
	if v := doc.checkRequest(m, url.Values(sent.Instance.Query), sent.Instance.Body); len(v) > 0 {
		t.Fatalf("the unbroken body already fails:\n%s", joinViolations(v))
	}
	for _, tc := range []struct {
		name, path, says string
		mutate           func(b map[string]any)
	}{
		{"run shorter than 10 minutes", "resource.scheduling.maxRunDuration.seconds", "between 10 minutes and 7 days",
			func(b map[string]any) { sub(sub(b, "scheduling"), "maxRunDuration")["seconds"] = "300" }},
		{"run longer than 7 days", "resource.scheduling.maxRunDuration.seconds", "between 10 minutes and 7 days",
			func(b map[string]any) { sub(sub(b, "scheduling"), "maxRunDuration")["seconds"] = "604801" }},
		{"no run duration", "resource.scheduling.maxRunDuration", "missing",
			func(b map[string]any) { delete(sub(b, "scheduling"), "maxRunDuration") }},
		{"queue deadline over two hours", "resource.params.requestValidForDuration.seconds", "between 90 and 7200",
			func(b map[string]any) { sub(sub(b, "params"), "requestValidForDuration")["seconds"] = "7201" }},
		// The A4 / A3 Ultra pages show it under scheduling; compute v1 has
		// it in Instance.params only.
		{"queue deadline under scheduling", "resource.scheduling.requestValidForDuration", "unknown field",
			func(b map[string]any) {
				sub(b, "scheduling")["requestValidForDuration"] = map[string]any{"seconds": "7200"}
			}},
		{"into any reservation", "resource.reservationAffinity.consumeReservationType", "want NO_RESERVATION",
			func(b map[string]any) { sub(b, "reservationAffinity")["consumeReservationType"] = "ANY_RESERVATION" }},
		{"provisioning model outside the enum", "resource.scheduling.provisioningModel", "is not one of",
			func(b map[string]any) { sub(b, "scheduling")["provisioningModel"] = "FLEX" }},
		{"on an N1 machine type", "resource.machineType", "runs no Flex-start VM",
			func(b map[string]any) { b["machineType"] = "zones/us-central1-a/machineTypes/n1-standard-8" }},
		{"run duration on a standard VM", "resource.scheduling", "not Flex-start",
			func(b map[string]any) { sub(b, "scheduling")["provisioningModel"] = "STANDARD" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := decoded(t, sent.Instance)
			tc.mutate(b)
			body, err := json.Marshal(b)
			if err != nil {
				t.Fatal(err)
			}
			v := doc.checkRequest(m, url.Values(sent.Instance.Query), body)
			if !slices.ContainsFunc(v, func(x violation) bool { return x.Path == tc.path && strings.Contains(x.Problem, tc.says) }) {
				t.Fatalf("violations %v, want %s: …%s…", v, tc.path, tc.says)
			}
		})
	}
}

// The queued status is GCE's own, as the discovery document defines it:
// PENDING exists in Instance.status and is the Flex-start queue, which is
// what Observe's Queued reads (TestFlexStartQueuedThenRunning).
func TestPendingIsTheFlexStartQueue(t *testing.T) {
	b, err := os.ReadFile(discoveryCopy)
	if err != nil {
		t.Fatal(err)
	}
	var raw struct {
		Schemas map[string]struct {
			Properties map[string]struct {
				Enum             []string `json:"enum"`
				EnumDescriptions []string `json:"enumDescriptions"`
			} `json:"properties"`
		} `json:"schemas"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	st := raw.Schemas["Instance"].Properties["status"]
	i := slices.Index(st.Enum, "PENDING")
	if i < 0 || i >= len(st.EnumDescriptions) || !strings.Contains(st.EnumDescriptions[i], "Flex Start") ||
		!strings.Contains(st.EnumDescriptions[i], "waiting for available capacity") {
		t.Fatalf("Instance.status PENDING is not documented as the Flex-start queue: %v", st)
	}
}
