package gcp_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"encoding/pem"
	"errors"
	"slices"
	"strings"
	"testing"

	"cloud.google.com/go/compute/apiv1/computepb"
	"github.com/google/uuid"
	"go.uber.org/goleak"
	"golang.org/x/crypto/ssh"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/gcp"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const installation = "a1b2c3d4e5f60718"

var l4 = provider.ResourceRequest{GPU: "L4", GPUCount: 1}

// newSpec returns a spec for vm with a fresh host key and user key.
func newSpec(t *testing.T, vm string) *provider.InstanceSpec {
	t.Helper()
	_, hostPriv, _ := ed25519.GenerateKey(rand.Reader)
	block, err := ssh.MarshalPrivateKey(hostPriv, "")
	if err != nil {
		t.Fatal(err)
	}
	hostSigner, _ := ssh.NewSignerFromKey(hostPriv)
	_, userPriv, _ := ed25519.GenerateKey(rand.Reader)
	userSigner, _ := ssh.NewSignerFromKey(userPriv)
	return &provider.InstanceSpec{
		VM: vm, Installation: installation, Attempt: 1,
		IdempotencyToken: uuid.NewSHA1(uuid.NameSpaceOID, []byte(vm)).String(), SSHUser: "gpuprov",
		AuthorizedKeys: []string{strings.TrimSpace(string(ssh.MarshalAuthorizedKey(userSigner.PublicKey())))},
		HostKey: &provider.HostKey{PrivatePEM: string(pem.EncodeToMemory(block)),
			Public: strings.TrimSpace(string(ssh.MarshalAuthorizedKey(hostSigner.PublicKey())))},
		OpenPorts: []provider.Port{{Number: 6443, Protocol: "tcp"}, {Number: 51820, Protocol: "udp"}},
	}
}

func offerIn(t *testing.T, p *gcp.Provider, req provider.ResourceRequest, zone string, spot bool) provider.Offer {
	t.Helper()
	offers, err := p.Plan(context.Background(), &req)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range offers {
		if o.Location.Zone == zone && o.Spot == spot {
			return o
		}
	}
	t.Fatalf("no offer in %s (spot %v) among %d", zone, spot, len(offers))
	return provider.Offer{}
}

func kindOf(t *testing.T, err error, want provider.ErrorKind) *provider.Error {
	t.Helper()
	var pe *provider.Error
	if !errors.As(err, &pe) || pe.Kind != want {
		t.Fatalf("err %v, want kind %s", err, want)
	}
	return pe
}

func TestPlanFromEmbeddedCatalog(t *testing.T) {
	c, mt := newCloud(t)
	p := c.provider(t, mt, gcp.Config{})
	ctx := context.Background()
	offers, err := p.Plan(ctx, &l4)
	if err != nil {
		t.Fatal(err)
	}
	// g2-standard-4 and -8 (one L4 each) are offered in 14 zones of five
	// regions; g2-standard-4 in us-east4 is cheapest.
	if len(offers) != 28 || offers[0].Location != (provider.Location{Region: "us-east4", Zone: "us-east4-a"}) ||
		offers[0].InstanceType != "g2-standard-4" || offers[0].PricePerHour != 0.70452 || offers[0].VCPUs != 4 ||
		offers[0].GPUMemoryGB != 24 || offers[0].Spot {
		t.Fatalf("offers %d, first %+v", len(offers), offers[0])
	}
	// Without refine, the only call is the reservation listing (a request
	// that forbids reserved capacity makes none: TestForbidMakesNoReservationCall).
	if len(c.requests) != 1 || c.requests[0].Path != "/compute/v1/projects/"+project+"/aggregated/reservations" {
		t.Fatalf("plan without refine called the API beyond the reservation listing: %+v", c.requests)
	}
	// N1 shapes name their attached GPU and carry it in the detail.
	t4, err := p.Plan(ctx, &provider.ResourceRequest{GPU: "T4", GPUCount: 4})
	if err != nil || len(t4) == 0 || t4[0].InstanceType != "n1-standard-32+4xnvidia-tesla-t4" || t4[0].PricePerHour != 2.92 {
		t.Fatalf("T4x4: %+v, %v", t4, err)
	}
	var d map[string]any
	if err := json.Unmarshal(t4[0].Detail, &d); err != nil || d["accelerator"] != "nvidia-tesla-t4" || d["count"] != 4.0 {
		t.Fatalf("detail %s", t4[0].Detail)
	}
	h100, _ := p.Plan(ctx, &provider.ResourceRequest{GPU: "H100-80GB", GPUCount: 8})
	if len(h100) != 12 || h100[0].InstanceType != "a3-highgpu-8g" || h100[0].PricePerHour != 87.83247 {
		t.Fatalf("H100x8: %d offers, first %+v", len(h100), h100[0])
	}
	// Spot offers only with spot = true.
	if any, _ := p.Plan(ctx, &provider.ResourceRequest{GPU: "L4", GPUCount: 1, Spot: provider.SpotOnly}); len(any) != 0 {
		t.Fatalf("spot offers without spot = true: %+v", any)
	}
	ps := c.provider(t, mt, gcp.Config{Spot: true, Zones: []string{"us-central1-b"}, Regions: []string{"europe-west4"}})
	spot, err := ps.Plan(ctx, &provider.ResourceRequest{GPU: "L4", GPUCount: 1, Spot: provider.SpotOrOnDemand})
	if err != nil || len(spot) != 16 || !spot[0].Spot || spot[0].Location.Region != "europe-west4" || spot[0].PricePerHour != 0.27233 {
		t.Fatalf("spot-or-on-demand in europe-west4 + us-central1-b: %+v, %v", spot, err)
	}
	for _, o := range spot {
		if o.Location.Region == "us-central1" && o.Location.Zone != "us-central1-b" {
			t.Fatalf("zone pin ignored: %+v", o)
		}
	}
	if none, err := p.Plan(ctx, &provider.ResourceRequest{GPU: "B200", GPUCount: 1}); err != nil || len(none) != 0 {
		t.Fatalf("B200: %+v, %v", none, err)
	}
	if src, date := gcp.CatalogInfo(); !strings.Contains(src, "Cloud Billing") || date == "" {
		t.Fatalf("catalog info %q %q", src, date)
	}
}

// With refine, Plan asks acceleratorTypes.aggregatedList which zones offer
// each accelerator; when that call fails it falls back to the catalog.
func TestPlanRefinesZonesAndFallsBack(t *testing.T) {
	c, mt := newCloud(t)
	p := c.provider(t, mt, gcp.Config{Refine: true})
	ctx := context.Background()
	c.acceleratorZones = map[string][]string{"nvidia-l4": {"us-central1-f", "europe-west4-b"}, "nvidia-tesla-t4": {"us-central1-a"}}
	offers, err := p.Plan(ctx, &l4)
	if err != nil {
		t.Fatal(err)
	}
	var zones []string
	for _, o := range offers {
		zones = append(zones, o.Location.Zone)
	}
	if !slices.Equal(zones, []string{"us-central1-f", "europe-west4-b", "us-central1-f", "europe-west4-b"}) {
		t.Fatalf("refined zones %v", zones)
	}
	if n := len(c.calls("GET /compute/v1/projects/" + project + "/aggregated/acceleratorTypes")); n != 1 {
		t.Fatalf("%d acceleratorTypes calls", n)
	}
	c.acceleratorZones = nil // the call now fails with 500
	offers, err = p.Plan(ctx, &l4)
	if err != nil || len(offers) != 28 {
		t.Fatalf("fallback: %d offers, %v", len(offers), err)
	}
	if n := len(c.calls("aggregated/acceleratorTypes")); n != 2 {
		t.Fatalf("the failed refine was retried: %d calls", n)
	}
}

// Create sends one insert carrying the requestId, the identity labels, the
// network tag, user-data with the host key, ssh-keys and GPU scheduling.
func TestCreateRequest(t *testing.T) {
	c, mt := newCloud(t)
	p := c.provider(t, mt, gcp.Config{Spot: true})
	ctx := context.Background()
	spec := newSpec(t, "train")
	for _, tc := range []struct {
		name string
		spot bool
		req  provider.ResourceRequest
		zone string
	}{
		{"on-demand L4", false, l4, "us-central1-a"},
		{"spot L4", true, provider.ResourceRequest{GPU: "L4", GPUCount: 1, Spot: provider.SpotOnly}, "us-central1-b"},
		{"N1 with a T4", false, provider.ResourceRequest{GPU: "T4", GPUCount: 1}, "us-central1-c"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := offerIn(t, p, tc.req, tc.zone, tc.spot)
			prep, err := p.Prepare(ctx, &o, spec)
			if err != nil {
				t.Fatal(err)
			}
			before := len(c.calls("POST"))
			id, err := p.Create(ctx, &o, prep, spec)
			if err != nil || id == "" {
				t.Fatalf("create: %q, %v", id, err)
			}
			inserts := c.calls("POST /compute/v1/projects/" + project + "/zones/" + tc.zone + "/instances")
			if len(inserts) != 1 || len(c.calls("POST"))-before != 1 {
				t.Fatalf("%d inserts, want exactly one attempt", len(inserts))
			}
			r := inserts[0]
			if r.Query["requestId"][0] != spec.IdempotencyToken {
				t.Fatalf("requestId %v, want %s", r.Query["requestId"], spec.IdempotencyToken)
			}
			if r.Auth != "" {
				t.Fatalf("test client sent credentials: %q", r.Auth)
			}
			var in computepb.Instance
			if err := protojson.Unmarshal(r.Body, &in); err != nil {
				t.Fatal(err)
			}
			if in.GetName() != "gpuprov-train" || in.GetLabels()["gpuprov"] != "train" || in.GetLabels()["gpuprov-installation"] != installation {
				t.Fatalf("identity: name %q labels %v", in.GetName(), in.GetLabels())
			}
			if !slices.Equal(in.GetTags().GetItems(), []string{"gpuprov-train"}) {
				t.Fatalf("tags %v", in.GetTags().GetItems())
			}
			meta := map[string]string{}
			for _, it := range in.GetMetadata().GetItems() {
				meta[it.GetKey()] = it.GetValue()
			}
			if ud := meta["user-data"]; !strings.HasPrefix(ud, "#cloud-config") || !strings.Contains(ud, "ed25519_private") ||
				!strings.Contains(ud, spec.HostKey.Public) {
				t.Fatalf("user-data lacks the host key: %q", ud)
			}
			if meta["ssh-keys"] != "gpuprov:"+spec.AuthorizedKeys[0] {
				t.Fatalf("ssh-keys %q", meta["ssh-keys"])
			}
			s := in.GetScheduling()
			if s.GetOnHostMaintenance() != "TERMINATE" || s.GetAutomaticRestart() {
				t.Fatalf("scheduling %v", s)
			}
			if tc.spot != (s.GetProvisioningModel() == "SPOT") || tc.spot != (s.GetInstanceTerminationAction() == "DELETE") {
				t.Fatalf("spot %v but scheduling %v", tc.spot, s)
			}
			wantAccel := strings.HasPrefix(o.InstanceType, "n1-")
			if ga := in.GetGuestAccelerators(); wantAccel != (len(ga) == 1) ||
				wantAccel && (ga[0].GetAcceleratorType() != "zones/"+tc.zone+"/acceleratorTypes/nvidia-tesla-t4" || ga[0].GetAcceleratorCount() != 1) {
				t.Fatalf("guest accelerators %v for %s", ga, o.InstanceType)
			}
			d := in.GetDisks()[0]
			if !d.GetBoot() || !d.GetAutoDelete() || !strings.Contains(d.GetInitializeParams().GetSourceImage(), "common-cu128-ubuntu-2204-nvidia-570-v20261101") {
				t.Fatalf("boot disk %v", d)
			}
			if nic := in.GetNetworkInterfaces()[0]; nic.GetNetwork() != "projects/"+project+"/global/networks/default" ||
				nic.GetAccessConfigs()[0].GetType() != "ONE_TO_ONE_NAT" {
				t.Fatalf("nic %v", nic)
			}
			// The operation was polled once: Wait always reads the operation.
			if n := len(c.calls("/zones/" + tc.zone + "/operations/")); n != 1 {
				t.Fatalf("%d operation polls", n)
			}
		})
	}
}

// A token that is not a UUID yields a UUIDv5 derived from it, the same on
// every replay.
func TestRequestIDDerivedFromNonUUIDToken(t *testing.T) {
	c, mt := newCloud(t)
	p := c.provider(t, mt, gcp.Config{})
	ctx := context.Background()
	spec := newSpec(t, "tok")
	spec.IdempotencyToken = "inst-tok-1"
	o := offerIn(t, p, l4, "us-central1-a", false)
	prep, _ := p.Prepare(ctx, &o, spec)
	id1, err := p.Create(ctx, &o, prep, spec)
	if err != nil {
		t.Fatal(err)
	}
	id2, err := p.Create(ctx, &o, prep, spec) // a replay: same requestId, same operation
	if err != nil || id2 != id1 {
		t.Fatalf("replay: %q vs %q, %v", id2, id1, err)
	}
	ins := c.calls("POST /compute/v1/projects/" + project + "/zones/us-central1-a/instances")
	r1, r2 := ins[0].Query["requestId"][0], ins[1].Query["requestId"][0]
	if u, err := uuid.Parse(r1); err != nil || u.Version() != 5 || r1 != r2 {
		t.Fatalf("requestIds %q %q", r1, r2)
	}
	if len(c.live()) != 1 {
		t.Fatalf("%d instances after a replay", len(c.live()))
	}
}

// Every offer names its GPU model's regional quota metric (Offer.Family),
// which a QUOTA_EXCEEDED on that metric, or on its PREEMPTIBLE_ twin for
// Spot, blocks: "Allocation quotas" (GPU quota, one per model and region)
// and the discovery document's Quota.metric enum (NVIDIA_L4_GPUS,
// NVIDIA_A100_GPUS, NVIDIA_T4_GPUS, NVIDIA_V100_GPUS, NVIDIA_P100_GPUS,
// NVIDIA_P4_GPUS; the H100 ones are the Quotas page's). No catalog shape is
// left without one.
func TestPlanNamesTheGPUQuota(t *testing.T) {
	c, mt := newCloud(t)
	p := c.provider(t, mt, gcp.Config{Spot: true})
	want := map[string]string{"L4": "NVIDIA_L4_GPUS", "A100-40GB": "NVIDIA_A100_GPUS", "H100-80GB": "NVIDIA_H100_GPUS",
		"T4": "NVIDIA_T4_GPUS", "V100": "NVIDIA_V100_GPUS", "P100": "NVIDIA_P100_GPUS", "P4": "NVIDIA_P4_GPUS"}
	offers, err := p.Plan(context.Background(), &provider.ResourceRequest{Spot: provider.SpotOrOnDemand})
	if err != nil || len(offers) == 0 {
		t.Fatalf("plan: %d offers, %v", len(offers), err)
	}
	for _, o := range offers {
		f := o.Family
		if o.InstanceType == "a3-megagpu-8g" {
			if f != "NVIDIA_H100_MEGA_GPUS" {
				t.Fatalf("%s: family %q, want NVIDIA_H100_MEGA_GPUS", o.Key(), f)
			}
			continue
		}
		if w, ok := want[o.GPU]; !ok || f != w {
			t.Fatalf("%s (%s): family %q, want %q", o.Key(), o.GPU, f, w)
		}
	}
}
