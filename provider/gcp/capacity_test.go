package gcp_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"

	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/gcp"
)

// now is the tests' clock: reservations ending before it have ended.
var now = time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)

var h100x8 = provider.ResourceRequest{GPU: "H100-80GB", GPUCount: 8}

// projectReservations are the reservations of the tests' project: in
// us-central1 a targeted A3 High with 3 of 4 free ending 2027-01-31, an open
// A3 High that is full, an N1 + 1 T4 one, one still CREATING, one that ended,
// one of a CPU-only type; in europe-west4 an open A3 High.
func projectReservations() []*computepb.Reservation {
	targeted := reservation("team-h100", "us-central1-a", "a3-highgpu-8g", 4, 1, true)
	targeted.DeleteAtTime = proto.String("2027-01-31T00:00:00Z")
	full := reservation("open-h100", "us-central1-b", "a3-highgpu-8g", 2, 2, false)
	t4 := reservation("t4-one", "us-central1-b", "n1-standard-4", 2, 0, false)
	t4.SpecificReservation.InstanceProperties.GuestAccelerators = []*computepb.AcceleratorConfig{{
		AcceleratorType: proto.String("nvidia-tesla-t4"), AcceleratorCount: proto.Int32(1)}}
	creating := reservation("new-h100", "us-central1-c", "a3-highgpu-8g", 2, 0, true)
	creating.Status = proto.String("CREATING")
	ended := reservation("old-h100", "us-central1-c", "a3-highgpu-8g", 2, 0, true)
	ended.DeleteAfterDuration = &computepb.Duration{Seconds: proto.Int64(86400)} // a day after 2026-11-01
	cpu := reservation("cpus", "us-central1-a", "n2-standard-8", 4, 0, true)
	eu := reservation("eu-h100", "europe-west4-a", "a3-highgpu-8g", 1, 0, false)
	return []*computepb.Reservation{targeted, full, t4, creating, ended, cpu, eu}
}

func capacityProvider(t *testing.T, cfg gcp.Config, opts ...gcp.Option) (*cloud, *gcp.Provider) {
	t.Helper()
	c, mt := newCloud(t)
	c.setReservations(projectReservations()...)
	if cfg.Regions == nil {
		cfg.Regions = []string{"us-central1"}
	}
	return c, c.provider(t, mt, cfg, append([]gcp.Option{gcp.WithClock(func() time.Time { return now })}, opts...)...)
}

func reservationOffers(offers []provider.Offer) map[string]provider.Offer {
	out := map[string]provider.Offer{}
	for _, o := range offers {
		if o.Reservation != nil {
			out[o.Reservation.ID] = o
		}
	}
	return out
}

// Plan offers the READY reservations of catalog shapes in the configured
// regions, full ones included, ahead of the on-demand offers, in one
// reservations.aggregatedList call; a targeted reservation only when named.
func TestPlanOffersReservations(t *testing.T) {
	c, p := capacityProvider(t, gcp.Config{})
	ctx := context.Background()
	offers, err := p.Plan(ctx, &h100x8)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(c.calls("GET /compute/v1/projects/" + project + "/aggregated/reservations")); n != 1 {
		t.Fatalf("%d reservation listings, want one", n)
	}
	res := reservationOffers(offers)
	full, ok := res["open-h100"]
	if len(res) != 1 || !ok {
		t.Fatalf("reservation offers %v: want only the open, full one (the targeted one is not named, eu-h100 is outside us-central1)", res)
	}
	want := provider.Reservation{ID: "open-h100", Total: 2, Free: 0}
	if *full.Reservation != want || full.InStock || full.Location != (provider.Location{Region: "us-central1", Zone: "us-central1-b"}) ||
		full.InstanceType != "a3-highgpu-8g" || full.Spot || full.PricePerHour != 87.83247 || full.MarginalPrice() != 87.83247 || // full: at its list price

		full.Family != "NVIDIA_H100_GPUS" || full.VCPUs != 208 {
		t.Fatalf("full reservation offer %+v (%+v)", full, *full.Reservation)
	}
	if len(offers) < 2 || offers[0].Reservation != nil {
		t.Fatalf("a full reservation does not rank ahead of on-demand offers of its price: %d offers, first %s", len(offers), offers[0].Key())
	}

	named := h100x8
	named.Reservation = "team-h100"
	offers, err = p.Plan(ctx, &named)
	if err != nil {
		t.Fatal(err)
	}
	wantNamed := provider.Reservation{ID: "team-h100", Targeted: true, Total: 4, Free: 3, Ends: time.Date(2027, 1, 31, 0, 0, 0, 0, time.UTC)}
	if len(offers) != 1 || offers[0].Reservation == nil || *offers[0].Reservation != wantNamed || !offers[0].InStock ||
		offers[0].Location.Zone != "us-central1-a" {
		t.Fatalf("named reservation: %+v", offers)
	}

	required := provider.ResourceRequest{GPU: "T4", GPUCount: 1, Reserved: provider.RequireReserved}
	offers, err = p.Plan(ctx, &required)
	if err != nil || len(offers) != 1 || offers[0].Reservation.ID != "t4-one" || offers[0].InstanceType != "n1-standard-4+1xnvidia-tesla-t4" {
		t.Fatalf("N1 reservation, reserved capacity required: %+v, %v", offers, err)
	}
}

// A request that forbids reserved capacity makes no reservation call, gets
// no reservation offer, and its offers launch with NO_RESERVATION.
func TestForbidMakesNoReservationCall(t *testing.T) {
	c, p := capacityProvider(t, gcp.Config{})
	req := h100x8
	req.Reserved = provider.ForbidReserved
	offers, err := p.Plan(context.Background(), &req)
	if err != nil || len(offers) == 0 {
		t.Fatalf("plan: %d offers, %v", len(offers), err)
	}
	if n := len(c.calls("aggregated/reservations")); n != 0 {
		t.Fatalf("%d reservation listings for a request that forbids reserved capacity", n)
	}
	if len(reservationOffers(offers)) != 0 {
		t.Fatal("a reservation offer for a request that forbids reserved capacity")
	}
	ra := insertedAffinity(t, c, p, offers[0], "forbid")
	if ra["consumeReservationType"] != "NO_RESERVATION" || ra["key"] != nil || ra["values"] != nil {
		t.Fatalf("reservationAffinity %v, want NO_RESERVATION", ra)
	}
}

// insertedAffinity launches offer and returns the reservationAffinity of
// the instances.insert body, nil when absent, after checking the body
// against the discovery document and the documented rules.
func insertedAffinity(t *testing.T, c *cloud, p *gcp.Provider, offer provider.Offer, vm string) map[string]any {
	t.Helper()
	doc := loadDiscovery(t)
	before := len(c.calls("/instances"))
	prep, err := p.Prepare(context.Background(), &offer, newSpec(t, vm))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Create(context.Background(), &offer, prep, newSpec(t, vm)); err != nil {
		t.Fatal(err)
	}
	ins := c.calls("POST /compute/v1/projects/" + project + "/zones/" + offer.Location.Zone + "/instances")
	if len(ins) == 0 || len(c.calls("/instances")) == before {
		t.Fatal("no instances.insert")
	}
	last := ins[len(ins)-1]
	if vs := doc.checkRequest(doc.method(t, "instances", "insert"), last.Query, last.Body); len(vs) > 0 {
		t.Fatalf("insert body against the discovery document:\n%s", joinViolations(vs))
	}
	ra, _ := decoded(t, last)["reservationAffinity"].(map[string]any)
	return ra
}

// Create launches a targeted reservation's offer into it by name (the mock
// counts it in use), an open one's with ANY_RESERVATION, and a plain offer
// without an affinity (GCE's default).
func TestCreateLaunchesIntoTheReservation(t *testing.T) {
	c, p := capacityProvider(t, gcp.Config{})
	named := h100x8
	named.Reservation = "team-h100"
	offers, err := p.Plan(context.Background(), &named)
	if err != nil || len(offers) != 1 {
		t.Fatalf("plan: %+v, %v", offers, err)
	}
	ra := insertedAffinity(t, c, p, offers[0], "into-team")
	vals, _ := ra["values"].([]any)
	if ra["consumeReservationType"] != "SPECIFIC_RESERVATION" || ra["key"] != "compute.googleapis.com/reservation-name" ||
		len(vals) != 1 || vals[0] != "team-h100" {
		t.Fatalf("reservationAffinity %v", ra)
	}
	if n := c.inUse("team-h100"); n != 2 {
		t.Fatalf("team-h100 has %d in use, want 2: the instance did not launch into it", n)
	}

	c.setReservations(reservation("open-t4", "us-central1-b", "n1-standard-4", 2, 0, false))
	offers, err = p.Plan(context.Background(), &provider.ResourceRequest{GPU: "T4", GPUCount: 1, Reserved: provider.RequireReserved})
	if err != nil || len(offers) != 0 {
		// n1-standard-4 without its T4 is no catalog shape.
		t.Fatalf("an n1-standard-4 reservation without guest accelerators offered as T4: %+v, %v", offers, err)
	}
	c.setReservations(projectReservations()...)
	offers, err = p.Plan(context.Background(), &provider.ResourceRequest{GPU: "T4", GPUCount: 1, Reserved: provider.RequireReserved})
	if err != nil || len(offers) != 1 {
		t.Fatalf("plan: %+v, %v", offers, err)
	}
	if ra := insertedAffinity(t, c, p, offers[0], "open-t4"); ra["consumeReservationType"] != "ANY_RESERVATION" || ra["values"] != nil {
		t.Fatalf("open reservation: reservationAffinity %v, want ANY_RESERVATION (GCE refuses an open one by name)", ra)
	}

	plain, err := p.Plan(context.Background(), &provider.ResourceRequest{GPU: "T4", GPUCount: 1, Reserved: provider.PreferReserved})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range plain {
		if o.Reservation == nil {
			if ra := insertedAffinity(t, c, p, o, "plain-t4"); ra != nil {
				t.Fatalf("on-demand offer sent reservationAffinity %v", ra)
			}
			return
		}
	}
	t.Fatal("no on-demand T4 offer")
}

// A reservation that cannot take the instance fails Create as Unavailable
// for that offer (its Key names the reservation), never Capacity.
func TestReservationRefusalsAreUnavailable(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(r *computepb.Reservation)
		want  string
	}{
		{"full", func(r *computepb.Reservation) { r.SpecificReservation.InUseCount = proto.Int64(4) }, "does not have available resources"},
		{"deleted", func(r *computepb.Reservation) { r.Name = proto.String("renamed") }, "does not exist"},
		{"being updated", func(r *computepb.Reservation) { r.Status = proto.String("UPDATING") }, "READY state"},
		{"another machine type", func(r *computepb.Reservation) {
			r.SpecificReservation.InstanceProperties.MachineType = proto.String("a3-megagpu-8g")
		}, "No available resources"},
		{"open, targeted by name", func(r *computepb.Reservation) { r.SpecificReservationRequired = proto.Bool(false) }, "can not be targeted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, p := capacityProvider(t, gcp.Config{})
			named := h100x8
			named.Reservation = "team-h100"
			offers, err := p.Plan(context.Background(), &named)
			if err != nil || len(offers) != 1 {
				t.Fatalf("plan: %+v, %v", offers, err)
			}
			// The reservation changes between plan and create.
			rs := projectReservations()
			tc.setup(rs[0])
			c.setReservations(rs...)
			spec := newSpec(t, "refused")
			prep, err := p.Prepare(context.Background(), &offers[0], spec)
			if err != nil {
				t.Fatal(err)
			}
			_, err = p.Create(context.Background(), &offers[0], prep, spec)
			pe := kindOf(t, err, provider.Unavailable)
			if pe.Scope() != provider.ScopeOffer || errors.Is(err, provider.Capacity) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v (scope %s), want Unavailable for the offer, saying %q", err, pe.Scope(), tc.want)
			}
			if len(c.live()) != 0 {
				t.Fatal("an instance was made")
			}
		})
	}
}

// A reservation the request names but that cannot serve it is an
// InvalidRequest naming it and what is wrong; one not found is no offer and
// no error.
func TestNamedReservationThatCannotServe(t *testing.T) {
	_, p := capacityProvider(t, gcp.Config{})
	for _, tc := range []struct {
		name string
		req  provider.ResourceRequest
		want string // "" : no offer, no error
	}{
		{"other GPU", provider.ResourceRequest{GPU: "L4", GPUCount: 1, Reservation: "team-h100"},
			"reservation team-h100 is for a3-highgpu-8g (8 × H100-80GB), not L4"},
		{"other count", provider.ResourceRequest{GPU: "H100-80GB", GPUCount: 4, Reservation: "team-h100"}, "not 4 GPUs"},
		{"outside the regions", provider.ResourceRequest{GPU: "H100-80GB", GPUCount: 8, Reservation: "eu-h100"},
			"reservation eu-h100 is in europe-west4-a, outside the regions us-central1"},
		{"a zone the request excludes", provider.ResourceRequest{GPU: "H100-80GB", GPUCount: 8, Reservation: "team-h100",
			Zones: []string{"us-central1-b"}}, "is in us-central1-a, not in the zones us-central1-b"},
		{"not ready", provider.ResourceRequest{GPU: "H100-80GB", GPUCount: 8, Reservation: "new-h100"}, "reservation new-h100 is CREATING, not READY"},
		{"ended", provider.ResourceRequest{GPU: "H100-80GB", GPUCount: 8, Reservation: "old-h100"},
			"reservation old-h100 ended at 2026-11-02T15:00:00Z"},
		{"no GPU shape", provider.ResourceRequest{GPU: "H100-80GB", GPUCount: 8, Reservation: "cpus"},
			"reservation cpus is for n2-standard-8, which is no GPU shape"},
		{"spot only", provider.ResourceRequest{GPU: "H100-80GB", GPUCount: 8, Reservation: "team-h100", Spot: provider.SpotOnly},
			"Compute Engine launches no Spot VM into a reservation"},
		{"not found", provider.ResourceRequest{GPU: "H100-80GB", GPUCount: 8, Reservation: "elsewhere"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			offers, err := p.Plan(context.Background(), &tc.req)
			if tc.want == "" {
				if err != nil || len(offers) != 0 {
					t.Fatalf("unknown reservation: %d offers, %v; want none and no error", len(offers), err)
				}
				return
			}
			kindOf(t, err, provider.InvalidRequest)
			if !strings.Contains(err.Error(), tc.want) || offers != nil {
				t.Fatalf("err %v, want it to say %q", err, tc.want)
			}
		})
	}
}

// A project that may not list its reservations still plans on demand, and
// the warning carries no credential.
func TestReservationListingErrorLeavesOnDemand(t *testing.T) {
	var logs bytes.Buffer
	c, p := capacityProvider(t, gcp.Config{}, gcp.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	c.syncFaults["GET aggregated/reservations"] = []apiFault{{Status: 403, Reason: "forbidden",
		Message: "Required 'compute.reservations.list' permission for 'projects/proj-test'"}}
	offers, err := p.Plan(context.Background(), &h100x8)
	if err != nil || len(offers) == 0 || len(reservationOffers(offers)) != 0 {
		t.Fatalf("plan: %d offers, %v; want the on-demand ones", len(offers), err)
	}
	if !strings.Contains(logs.String(), "listing reservations failed") || !strings.Contains(logs.String(), "compute.reservations.list") {
		t.Fatalf("log %q", logs.String())
	}
}

// The reserved-only shapes (A3 Ultra, A4) are never offered on demand or as
// Spot; a reservation of one is, at price 0 (no citable list price).
func TestReservedOnlyShapes(t *testing.T) {
	c, p := capacityProvider(t, gcp.Config{Spot: true})
	h200 := provider.ResourceRequest{GPU: "H200", GPUCount: 8, Spot: provider.SpotOrOnDemand}
	offers, err := p.Plan(context.Background(), &h200)
	if err != nil || len(offers) != 0 {
		t.Fatalf("H200 without a reservation: %+v, %v", offers, err)
	}
	c.setReservations(reservation("ultra", "us-central1-b", "a3-ultragpu-8g", 2, 0, false))
	offers, err = p.Plan(context.Background(), &h200)
	if err != nil || len(offers) != 1 || offers[0].InstanceType != "a3-ultragpu-8g" || offers[0].PricePerHour != 0 ||
		offers[0].GPUMemoryGB != 141 || offers[0].VCPUs != 224 || offers[0].Spot {
		t.Fatalf("H200 reservation: %+v, %v", offers, err)
	}
}

// The mock's reservations, regions and projects answers have the discovery
// document's response shapes, so what the adapter reads from them is what
// Compute Engine sends; a field the schema lacks is caught.
func TestCapacityAnswersMatchDiscovery(t *testing.T) {
	doc := loadDiscovery(t)
	c, _ := newCloud(t)
	c.capacity = capacity{reservations: projectReservations(),
		regionQuotas:  map[string][]*computepb.Quota{"us-central1": regionQuotaFixture()},
		projectQuotas: []*computepb.Quota{quota("GPUS_ALL_REGIONS", 8, 4), quota("FIREWALLS", 200, 12)}}
	get := func(path string) []byte {
		req, _ := http.NewRequest("GET", endpoint+"/compute/v1/projects/"+project+path, nil)
		resp, err := c.serve(req)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("GET %s: %v %v", path, resp, err)
		}
		b, _ := io.ReadAll(resp.Body)
		return b
	}
	for _, tc := range []struct {
		resource, method, path string
	}{
		{"reservations", "aggregatedList", "/aggregated/reservations"},
		{"regions", "get", "/regions/us-central1"},
		{"projects", "get", ""},
	} {
		body := get(tc.path)
		if vs := beyondEnum(doc.checkResponse(doc.method(t, tc.resource, tc.method), body)); len(vs) > 0 {
			t.Errorf("%s.%s answer:\n%s", tc.resource, tc.method, joinViolations(vs))
		}
		broken := bytes.Replace(body, []byte(`"kind"`), []byte(`"kindOf"`), 1)
		if vs := doc.checkResponse(doc.method(t, tc.resource, tc.method), broken); len(vs) == 0 {
			t.Errorf("%s.%s: an answer with an unknown field passed the check", tc.resource, tc.method)
		}
	}
}

// metricsBeyondEnum are quota metrics Compute Engine reports that the
// discovery document's Quota.metric enum does not list: the H100 metrics of
// A3 High and A3 Mega, as the console's Quotas page shows them (see
// gpuQuotaMetric in plan.go). The enum lists PREEMPTIBLE_NVIDIA_H100_GPUS
// but not its standard twin.
var metricsBeyondEnum = []string{"NVIDIA_H100_GPUS", "NVIDIA_H100_MEGA_GPUS"}

// beyondEnum drops the violations that are a metric of metricsBeyondEnum
// outside the enum, and only those.
func beyondEnum(vs []violation) []violation {
	var out []violation
	for _, v := range vs {
		known := false
		for _, m := range metricsBeyondEnum {
			known = known || strings.HasSuffix(v.Path, ".metric") && strings.HasPrefix(v.Problem, `"`+m+`" is not one of`)
		}
		if !known {
			out = append(out, v)
		}
	}
	return out
}
