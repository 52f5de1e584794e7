package providertest

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"slices"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/org/gpuprov/provider"
)

// SharedHarness wires a provider.SharedCleaner under test to a stateful
// mock of its cloud, for CheckShared.
type SharedHarness struct {
	// Harness is the conformance harness: New must return a provider that
	// implements provider.SharedCleaner; Request, Installation and Settle
	// are used as Run uses them (Break is not).
	Harness
	// Shared returns the shared side resources the mock holds in loc's
	// region for the installation, by the mock's own view (ids or names,
	// one each), never through the provider. Required.
	Shared func(t *testing.T, loc provider.Location) []string
	// InUseNotRefused, when set, says why the mock deletes a shared
	// resource that an instance uses instead of refusing as the cloud
	// does; the in-use check is then skipped with this reason, and the
	// instance is deleted before CleanupShared is called.
	InUseNotRefused string
}

// CheckShared checks the contract of provider.SharedCleaner on one
// location, with one port set: two VMs prepared there share one shared
// resource (the mock holds one after the first Prepare and the same one
// after the second); the Cleanup of a VM leaves it; CleanupShared while an
// instance of one of them uses it returns an error matching
// provider.ErrInUse and leaves it; once the instance is deleted and gone
// (Observe sees nothing), CleanupShared removes it, and calling it again,
// for the location or for every location, is success.
func CheckShared(t *testing.T, h SharedHarness) {
	t.Helper()
	ctx := context.Background()
	p := h.New(t)
	sc, ok := p.(provider.SharedCleaner)
	if !ok {
		t.Fatalf("%T does not implement provider.SharedCleaner", p)
	}
	settle := func() {
		if h.Settle != nil {
			h.Settle(t)
		}
	}
	req := h.Request
	offers, err := p.Plan(ctx, &req)
	if err != nil || len(offers) == 0 {
		t.Fatalf("Plan: %d offers, %v", len(offers), err)
	}
	o := offers[0]
	loc := o.Location
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	sp, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	userKey := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sp)))
	ports := []provider.Port{{Number: 6443, Protocol: "tcp"}}
	spec := func(vm string) *provider.InstanceSpec {
		return &provider.InstanceSpec{VM: vm, Installation: h.Installation, Attempt: 1,
			IdempotencyToken: "6f1c2d0e-0000-5000-8000-" + pad12(vm), SSHUser: "root",
			AuthorizedKeys: []string{userKey}, OpenPorts: ports}
	}
	a, b := spec("shared-a"), spec("shared-b")
	shared := func(when string) []string {
		t.Helper()
		s := slices.Clone(h.Shared(t, loc))
		slices.Sort(s)
		t.Logf("shared resources in %s %s: %v", loc.Region, when, s)
		return s
	}

	prepA, err := p.Prepare(ctx, &o, a)
	if err != nil {
		t.Fatalf("Prepare %s: %v", a.VM, err)
	}
	first := shared("after the first Prepare")
	if len(first) != 1 {
		t.Fatalf("after one Prepare the mock holds %d shared resources %v, want 1", len(first), first)
	}
	if _, err := p.Prepare(ctx, &o, b); err != nil {
		t.Fatalf("Prepare %s: %v", b.VM, err)
	}
	if got := shared("after the second Prepare"); !slices.Equal(got, first) {
		t.Fatalf("a second VM prepared in %s with the same ports: shared resources %v, want the first's %v", loc, got, first)
	}

	id, err := p.Create(ctx, &o, prepA, a)
	if err != nil {
		t.Fatalf("Create %s: %v", a.VM, err)
	}
	settle()
	if err := p.Cleanup(ctx, loc, b.VM); err != nil {
		t.Fatalf("Cleanup %s: %v", b.VM, err)
	}
	if got := shared("after the Cleanup of " + b.VM); !slices.Equal(got, first) {
		t.Fatalf("Cleanup of %s: shared resources %v, want %v left", b.VM, got, first)
	}

	t.Run("in use is left", func(t *testing.T) {
		if h.InUseNotRefused != "" {
			t.Skip(h.InUseNotRefused)
		}
		err := sc.CleanupShared(ctx, loc)
		if !errors.Is(err, provider.ErrInUse) {
			t.Fatalf("CleanupShared while %s uses the shared resource: %v, want an error matching provider.ErrInUse", id, err)
		}
		if got := shared("after CleanupShared with an instance"); !slices.Equal(got, first) {
			t.Fatalf("CleanupShared while %s uses it: shared resources %v, want %v left", id, got, first)
		}
	})

	if err := p.Delete(ctx, loc, a.VM, []string{id}); err != nil {
		t.Fatalf("Delete %s: %v", id, err)
	}
	settle()
	if obs := observe(t, p, loc, a.VM); len(obs) != 0 {
		t.Fatalf("after Delete and Settle, Observe still sees %+v", obs)
	}
	if err := p.Cleanup(ctx, loc, a.VM); err != nil {
		t.Fatalf("Cleanup %s: %v", a.VM, err)
	}
	if err := sc.CleanupShared(ctx, loc); err != nil {
		t.Fatalf("CleanupShared once the instance is gone: %v", err)
	}
	if got := shared("after CleanupShared"); len(got) != 0 {
		t.Fatalf("CleanupShared once the instance is gone left %v", got)
	}
	if err := sc.CleanupShared(ctx, loc); err != nil {
		t.Fatalf("CleanupShared again: %v", err)
	}
	if err := sc.CleanupShared(ctx, provider.Location{}); err != nil {
		t.Fatalf("CleanupShared of every location: %v", err)
	}
}
