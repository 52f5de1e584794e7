package providertest

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/org/gpuprov/provider"
)

// Harness wires an adapter under test to a stateful mock of its cloud.
type Harness struct {
	// New returns a provider talking to a fresh mock cloud. Required.
	New func(t *testing.T) provider.CloudProvider
	// Request is a request the mock has offers for. Required.
	Request provider.ResourceRequest
	// Installation is the installation id the provider was built with.
	Installation string
	// Settle lets time pass in the mock until created instances run and
	// deleted ones are gone (advance a fake clock, flip mock state). Optional.
	Settle func(t *testing.T)
	// Break makes instance id broken in the mock (boot failure, host
	// error). Optional: without it the broken-instance check is skipped.
	Break func(t *testing.T, id string)
	// NoReplay, when set, says why the mock cannot answer a replayed
	// create as the cloud does (a reference emulator that ignores the
	// idempotency token): the replay check is skipped with that reason.
	NoReplay string
}

// Run checks the parts of the provider contract that hold for every cloud:
// Plan is sorted, canonical and filtered; Prepare and Cleanup are
// idempotent; Create labels the instance so Observe finds it by identity;
// Delete of an unknown or already deleted id is success; a Create replayed
// with the same spec is answered with the first one's instance where
// FeatureIdempotencyToken is supported; Observe of an unknown VM is empty;
// BindInstallation accepts the installation the provider was built with
// and refuses another; a broken instance is reported Failed, not hidden; a
// Lister lists what Observe sees.
func Run(t *testing.T, h Harness) {
	t.Helper()
	ctx := context.Background()
	settle := func(t *testing.T) {
		if h.Settle != nil {
			h.Settle(t)
		}
	}
	plan := func(t *testing.T, p provider.CloudProvider) provider.Offer {
		t.Helper()
		req := h.Request
		offers, err := p.Plan(ctx, &req)
		if err != nil {
			t.Fatalf("Plan: %v", err)
		}
		if len(offers) == 0 {
			t.Fatalf("Plan returned no offers for %+v", req)
		}
		return offers[0]
	}
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	sp, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	userKey := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sp)))
	spec := func(vm string) *provider.InstanceSpec {
		return &provider.InstanceSpec{VM: vm, Installation: h.Installation, Attempt: 1,
			IdempotencyToken: "6f1c2d0e-0000-5000-8000-" + pad12(vm), SSHUser: "root",
			AuthorizedKeys: []string{userKey}}
	}

	// launch prepares and creates s's instance on o, and returns what
	// Prepare returned and the instance's id.
	launch := func(t *testing.T, p provider.CloudProvider, o *provider.Offer, s *provider.InstanceSpec) (json.RawMessage, string) {
		t.Helper()
		prepared, err := p.Prepare(ctx, o, s)
		if err != nil {
			t.Fatalf("Prepare: %v", err)
		}
		id, err := p.Create(ctx, o, prepared, s)
		if err != nil || id == "" {
			t.Fatalf("Create: %q, %v", id, err)
		}
		return prepared, id
	}

	t.Run("plan is cheapest first, canonical and filtered", func(t *testing.T) {
		p := h.New(t)
		req := h.Request
		offers, err := p.Plan(ctx, &req)
		if err != nil || len(offers) == 0 {
			t.Fatalf("Plan: %d offers, %v", len(offers), err)
		}
		for i, o := range offers {
			if i > 0 && o.PricePerHour < offers[i-1].PricePerHour {
				t.Fatalf("offer %d ($%.2f) is cheaper than offer %d ($%.2f)", i, o.PricePerHour, i-1, offers[i-1].PricePerHour)
			}
			if g, ok := provider.LookupGPU(o.GPU); !ok || g.Name != o.GPU {
				t.Fatalf("offer %d names GPU %q, not a canonical name", i, o.GPU)
			}
			if !req.Accepts(&o) {
				t.Fatalf("offer %+v does not satisfy the request %+v", o, req)
			}
			if o.Provider != "" && o.Provider != p.Name() {
				t.Fatalf("offer provider %q, provider name %q", o.Provider, p.Name())
			}
			if o.Location.Region == "" || o.InstanceType == "" || o.GPUCount <= 0 {
				t.Fatalf("offer %d lacks location, type or count: %+v", i, o)
			}
		}
	})

	t.Run("binds to its installation and refuses another", func(t *testing.T) {
		p := h.New(t)
		if err := p.BindInstallation(h.Installation); err != nil {
			t.Fatalf("BindInstallation of the id it was built with: %v", err)
		}
		if err := p.BindInstallation(h.Installation + "-other"); err == nil {
			t.Fatal("BindInstallation accepted another journal's installation")
		}
	})

	t.Run("prepare and cleanup are idempotent", func(t *testing.T) {
		p := h.New(t)
		o := plan(t, p)
		s := spec("conf-prep")
		if _, err := p.Prepare(ctx, &o, s); err != nil {
			t.Fatalf("Prepare: %v", err)
		}
		if _, err := p.Prepare(ctx, &o, s); err != nil {
			t.Fatalf("Prepare again: %v", err)
		}
		for i := range 2 {
			if err := p.Cleanup(ctx, o.Location, s.VM); err != nil {
				t.Fatalf("Cleanup %d: %v", i+1, err)
			}
		}
		if err := p.Cleanup(ctx, o.Location, "conf-never-prepared"); err != nil {
			t.Fatalf("Cleanup of a VM never prepared: %v", err)
		}
	})

	t.Run("create is found by identity and delete is idempotent", func(t *testing.T) {
		p := h.New(t)
		o := plan(t, p)
		s := spec("conf-life")
		_, id := launch(t, p, &o, s)
		settle(t)
		obs := observe(t, p, o.Location, s.VM)
		if !slices.ContainsFunc(obs, func(x provider.Observed) bool { return x.ID == id }) {
			t.Fatalf("Observe(%s, %s) = %+v, does not find created instance %s", o.Location, s.VM, obs, id)
		}
		for _, x := range obs {
			if x.Status == provider.StatusRunning && x.SSH != nil && (x.SSH.Host == "" || x.SSH.Port == 0) {
				t.Fatalf("running instance with an incomplete SSH endpoint: %+v", x.SSH)
			}
		}
		if others := observe(t, p, o.Location, "conf-other"); len(others) != 0 {
			t.Fatalf("Observe of another VM sees %+v", others)
		}
		if l, ok := p.(provider.Lister); ok {
			all, err := l.List(ctx, provider.Location{})
			if err != nil {
				t.Fatalf("List: %v", err)
			}
			i := slices.IndexFunc(all, func(x provider.Observed) bool { return x.ID == id })
			if i < 0 || all[i].VM != s.VM {
				t.Fatalf("List does not show %s with its VM name: %+v", id, all)
			}
		}
		if err := p.Delete(ctx, o.Location, s.VM, []string{id}); err != nil {
			t.Fatalf("Delete: %v", err)
		}
		if err := p.Delete(ctx, o.Location, s.VM, []string{id}); err != nil {
			t.Fatalf("Delete again: %v", err)
		}
		settle(t)
		for _, x := range observe(t, p, o.Location, s.VM) {
			if x.ID == id && x.Status != provider.StatusStopping {
				t.Fatalf("deleted instance still %s", x.Status)
			}
		}
		if err := p.Cleanup(ctx, o.Location, s.VM); err != nil {
			t.Fatalf("Cleanup: %v", err)
		}
	})

	t.Run("a replayed create is answered with the first one's instance", func(t *testing.T) {
		if h.NoReplay != "" {
			t.Skip(h.NoReplay)
		}
		p := h.New(t)
		if !p.Capabilities().Supports(provider.FeatureIdempotencyToken) {
			t.Skip("FeatureIdempotencyToken is unsupported: the core observes before it sends a create again")
		}
		// The core sends a create whose answer was lost again at once,
		// with the same spec (see provider.FeatureIdempotencyToken).
		o := plan(t, p)
		s := spec("conf-replay")
		prepared, first := launch(t, p, &o, s)
		again, err := p.Create(ctx, &o, prepared, s)
		if err != nil || again != first {
			t.Fatalf("the replayed Create: %q, %v; want the first create's instance %s", again, err, first)
		}
		settle(t)
		var live []string
		for _, x := range observe(t, p, o.Location, s.VM) {
			if x.Status != provider.StatusStopping && x.Status != provider.StatusTerminated {
				live = append(live, x.ID)
			}
		}
		if !slices.Equal(live, []string{first}) {
			t.Fatalf("after a replayed create the VM has instances %v, want only %s", live, first)
		}
		if err := p.Delete(ctx, o.Location, s.VM, []string{first}); err != nil {
			t.Fatalf("Delete: %v", err)
		}
	})

	t.Run("delete of an unknown id is success", func(t *testing.T) {
		p := h.New(t)
		o := plan(t, p)
		if err := p.Delete(ctx, o.Location, "conf-ghost", []string{unknownID(p)}); err != nil {
			t.Fatalf("Delete of an unknown id: %v", err)
		}
	})

	t.Run("observe of an unknown VM is empty", func(t *testing.T) {
		p := h.New(t)
		o := plan(t, p)
		if obs := observe(t, p, o.Location, "conf-nobody"); len(obs) != 0 {
			t.Fatalf("Observe of an unknown VM: %+v", obs)
		}
	})

	t.Run("a broken instance is reported failed", func(t *testing.T) {
		if h.Break == nil {
			t.Skip("harness has no Break")
		}
		p := h.New(t)
		o := plan(t, p)
		s := spec("conf-broken")
		_, id := launch(t, p, &o, s)
		h.Break(t, id)
		obs := observe(t, p, o.Location, s.VM)
		i := slices.IndexFunc(obs, func(x provider.Observed) bool { return x.ID == id })
		if i < 0 || obs[i].Status != provider.StatusFailed {
			t.Fatalf("broken instance %s observed as %+v, want it listed as failed", id, obs)
		}
	})

	t.Run("capabilities are sane", func(t *testing.T) {
		c := h.New(t).Capabilities()
		for name, d := range map[string]time.Duration{"BootTimeout": c.BootTimeout, "DeleteTimeout": c.DeleteTimeout,
			"PollInterval": c.PollInterval, "ConsistencyWindow": c.ConsistencyWindow} {
			if d < 0 {
				t.Fatalf("%s is negative", name)
			}
		}
		if c.RequestsPerSecond < 0 || c.Burst < 0 {
			t.Fatal("negative rate limit")
		}
	})
}

func observe(t *testing.T, p provider.CloudProvider, loc provider.Location, vm string) []provider.Observed {
	t.Helper()
	obs, err := p.Observe(context.Background(), loc, vm)
	if err != nil {
		t.Fatalf("Observe(%s, %s): %v", loc, vm, err)
	}
	return obs
}

// unknownID returns an id shaped like the provider's ids that it does not
// know, where the provider says what its ids look like.
func unknownID(p provider.CloudProvider) string {
	if u, ok := p.(interface{ UnknownID() string }); ok {
		return u.UnknownID()
	}
	return "gpuprov-conformance-unknown-id"
}

func pad12(s string) string {
	b := []byte("000000000000")
	for i := 0; i < len(s) && i < 12; i++ {
		b[i] = "0123456789abcdef"[s[i]%16]
	}
	return string(b)
}
