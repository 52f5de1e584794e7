package sim_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/sim"
	"github.com/org/gpuprov/provider/sim/simserver"
)

var useast1a = provider.Location{Region: "us-east", Zone: "us-east-1a"}

func volumeSpec(name string) provider.VolumeSpec {
	return provider.VolumeSpec{Name: name, Installation: installation, SizeGB: 50, Location: useast1a,
		UserLabels: map[string]string{"team": "ml"}, IdempotencyToken: installation + "-vol-" + name}
}

// running launches vm on the cheapest H100 (us-east-1a) and boots it.
func (e *env) running(t *testing.T, vm string) string {
	t.Helper()
	spec, _ := newSpec(t, vm)
	_, id := e.launch(t, spec)
	e.clk.Advance(bootTime)
	return id
}

// TestVolumeManagerLifecycle: the adapter's volumes through the server:
// limits, a create named and labelled as gpuprov's resources are and
// idempotent, observe by the journal's name, attach (idempotent; in use
// elsewhere: InvalidRequest matching ErrInUse), detach and delete (gone
// is success).
func TestVolumeManagerLifecycle(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	if l := e.p.VolumeLimits(); l.Scope != provider.VolumeZonal || l.MinGB != 1 || l.MaxGB != 16384 || l.AttachAtCreate {
		t.Errorf("limits %+v", l)
	}

	v, err := e.p.CreateVolume(ctx, volumeSpec("data"))
	if err != nil {
		t.Fatal(err)
	}
	if v.ID == "" || v.Name != "data" || v.Location != useast1a || v.SizeGB != 50 || v.Status != provider.VolumeAvailable || v.Created.IsZero() {
		t.Errorf("created %+v", v)
	}
	vols, _ := e.srv.Volumes(cloudName)
	if len(vols) != 1 || vols[0].Name != "gpuprov--data" || vols[0].Labels[provider.LabelVM] != "data" ||
		vols[0].Labels[provider.LabelInstallation] != installation || vols[0].Labels[provider.LabelVolume] != "true" || vols[0].Labels["team"] != "ml" {
		t.Errorf("the cloud's volume: %+v", vols)
	}
	if again, err := e.p.CreateVolume(ctx, volumeSpec("data")); err != nil || again.ID != v.ID {
		t.Errorf("create sent again: %+v, %v; want %s", again, err, v.ID)
	}
	other := volumeSpec("data")
	other.IdempotencyToken = "another-attempt"
	if again, err := e.p.CreateVolume(ctx, other); err != nil || again.ID != v.ID {
		t.Errorf("create of an existing name with another token: %+v, %v; want the existing %s", again, err, v.ID)
	}
	if vols, _ := e.srv.Volumes(cloudName); len(vols) != 1 {
		t.Errorf("%d volumes, want 1", len(vols))
	}
	stranger := volumeSpec("data")
	stranger.Installation, stranger.IdempotencyToken = "inst-2", "inst-2-vol-data"
	_, err = e.p.CreateVolume(ctx, stranger)
	errKind(t, err, provider.InvalidRequest)

	got, err := e.p.ObserveVolume(ctx, useast1a, "data")
	if err != nil || got == nil || got.ID != v.ID {
		t.Errorf("observe: %+v, %v", got, err)
	}
	if got, err := e.p.ObserveVolume(ctx, useast1a, "nope"); err != nil || got != nil {
		t.Errorf("observe an unknown name: %+v, %v; want nil", got, err)
	}

	a, b := e.running(t, "a"), e.running(t, "b")
	dev, err := e.p.AttachVolume(ctx, useast1a, v.ID, a)
	if err != nil || dev != e.srv.SandboxDir(cloudName, a)+"/.sim-dev/"+v.ID {
		t.Fatalf("attach: %q, %v", dev, err)
	}
	if again, err := e.p.AttachVolume(ctx, useast1a, v.ID, a); err != nil || again != dev {
		t.Errorf("attach again: %q, %v", again, err)
	}
	if got, _ := e.p.ObserveVolume(ctx, useast1a, "data"); got == nil || got.Status != provider.VolumeAttached || got.AttachedTo != a {
		t.Errorf("observe attached: %+v", got)
	}
	_, err = e.p.AttachVolume(ctx, useast1a, v.ID, b)
	if errKind(t, err, provider.InvalidRequest); !errors.Is(err, provider.ErrInUse) || !sim.IsAPIError(err, "volume_in_use") {
		t.Errorf("attach elsewhere: %v, want ErrInUse", err)
	}
	err = e.p.DeleteVolume(ctx, useast1a, v.ID)
	if errKind(t, err, provider.InvalidRequest); !errors.Is(err, provider.ErrInUse) {
		t.Errorf("delete attached: %v, want ErrInUse", err)
	}
	for range 2 {
		if err := e.p.DetachVolume(ctx, useast1a, v.ID, a); err != nil {
			t.Errorf("detach: %v", err)
		}
	}
	if _, err := e.p.AttachVolume(ctx, useast1a, v.ID, b); err != nil {
		t.Fatalf("attach to b: %v", err)
	}
	if err := e.p.DetachVolume(ctx, useast1a, v.ID, a); err != nil {
		t.Errorf("detach from a, attached to b: %v, want success", err)
	}
	if err := e.p.DetachVolume(ctx, useast1a, v.ID, b); err != nil {
		t.Errorf("detach from b: %v", err)
	}
	for range 2 {
		if err := e.p.DeleteVolume(ctx, useast1a, v.ID); err != nil {
			t.Errorf("delete: %v", err)
		}
	}
	if got, err := e.p.ObserveVolume(ctx, useast1a, "data"); err != nil || got != nil {
		t.Errorf("observe after delete: %+v, %v", got, err)
	}
	if err := e.p.DetachVolume(ctx, useast1a, v.ID, b); err != nil {
		t.Errorf("detach a deleted volume: %v, want success", err)
	}
}

// TestVolumeManagerErrors: what the adapter refuses before any call, and
// the server's refusals mapped to the contract's kinds.
func TestVolumeManagerErrors(t *testing.T) {
	e := newEnv(t, func(o *simserver.Options) {
		o.Clouds[0].Timing.VolumeTime = simserver.Duration(time.Second)
		o.Clouds[0].Faults.VolumeStockoutZones = []string{"eu-west-1b"}
	})
	ctx := context.Background()
	for name, mutate := range map[string]func(*provider.VolumeSpec){
		"size 0":     func(s *provider.VolumeSpec) { s.SizeGB = 0 },
		"size 16385": func(s *provider.VolumeSpec) { s.SizeGB = 16385 },
		"no zone":    func(s *provider.VolumeSpec) { s.Location.Zone = "" },
		"no name":    func(s *provider.VolumeSpec) { s.Name = "" },
	} {
		t.Run(name, func(t *testing.T) {
			spec := volumeSpec("x")
			mutate(&spec)
			_, err := e.p.CreateVolume(ctx, spec)
			errKind(t, err, provider.InvalidRequest)
		})
	}
	if st, _ := e.srv.Stats(cloudName); st.Calls["create_volume"] != 0 {
		t.Errorf("%d create calls for specs refused before any call", st.Calls["create_volume"])
	}
	unknown := volumeSpec("x")
	unknown.Location = provider.Location{Region: "mars", Zone: "mars-1a"}
	_, err := e.p.CreateVolume(ctx, unknown)
	errKind(t, err, provider.InvalidRequest)
	stocked := volumeSpec("x")
	stocked.Location = provider.Location{Region: "eu-west", Zone: "eu-west-1b"}
	_, err = e.p.CreateVolume(ctx, stocked)
	errKind(t, err, provider.Capacity)

	v, err := e.p.CreateVolume(ctx, volumeSpec("data"))
	if err != nil || v.Status != provider.VolumeCreating {
		t.Fatalf("create: %+v, %v; want creating", v, err)
	}
	a := e.running(t, "a") // boot time: the volume is available by now
	east, err := e.p.CreateVolume(ctx, volumeSpec("fresh"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.p.AttachVolume(ctx, useast1a, east.ID, a)
	errKind(t, err, provider.Transient) // still creating: retry
	if _, err := e.p.AttachVolume(ctx, useast1a, v.ID, a); err != nil {
		t.Fatalf("attach: %v", err)
	}

	// A volume of another zone than the instance's.
	eu := volumeSpec("eu")
	eu.Location = provider.Location{Region: "eu-west", Zone: "eu-west-1b"}
	e.setFaults(t, simserver.Faults{})
	ev, err := e.p.CreateVolume(ctx, eu)
	if err != nil {
		t.Fatal(err)
	}
	e.clk.Advance(time.Second)
	_, err = e.p.AttachVolume(ctx, eu.Location, ev.ID, a)
	errKind(t, err, provider.InvalidRequest)

	// The instance deleted: until it terminates the volume stays attached
	// (delete: Transient, ErrInUse), then it is available.
	if err := e.p.Delete(ctx, useast1a, "a", []string{a}); err != nil {
		t.Fatal(err)
	}
	err = e.p.DeleteVolume(ctx, useast1a, v.ID)
	if errKind(t, err, provider.Transient); !errors.Is(err, provider.ErrInUse) {
		t.Errorf("delete while its instance stops: %v, want ErrInUse", err)
	}
	e.clk.Advance(deleteTime)
	if got, err := e.p.ObserveVolume(ctx, useast1a, "data"); err != nil || got == nil || got.Status != provider.VolumeAvailable || got.AttachedTo != "" {
		t.Errorf("after its instance terminated: %+v, %v; want available", got, err)
	}
	if err := e.p.DeleteVolume(ctx, useast1a, v.ID); err != nil {
		t.Errorf("delete: %v", err)
	}
}
