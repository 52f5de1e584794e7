package gpuprov_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/provider"
	pt "github.com/org/gpuprov/provider/providertest"
)

// atCreateCloud is a fake cloud whose volumes are attached by the create
// (RunPod's network volumes, Lambda's file systems, Kubernetes claims) and
// mounted by the cloud at a path of its own (fixed, when set).
type atCreateCloud struct {
	*pt.Fake
	fixed   string
	max     int
	mu      sync.Mutex
	vols    map[string]provider.Volume
	mounted [][]provider.VolumeMount // what each create asked for
	attachs int
}

func (c *atCreateCloud) Create(ctx context.Context, o *provider.Offer, prepared json.RawMessage, spec *provider.InstanceSpec) (string, error) {
	c.mu.Lock()
	c.mounted = append(c.mounted, slices.Clone(spec.Volumes))
	c.mu.Unlock()
	return c.Fake.Create(ctx, o, prepared, spec)
}

func (c *atCreateCloud) VolumeLimits() provider.VolumeLimits {
	return provider.VolumeLimits{Scope: provider.VolumeRegional, MinGB: 10, MaxGB: 1000, AttachAtCreate: true, FixedMount: c.fixed, MaxPerInstance: c.max}
}

func (c *atCreateCloud) CreateVolume(ctx context.Context, spec provider.VolumeSpec) (provider.Volume, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if v, ok := c.vols[spec.Name]; ok {
		return v, nil
	}
	v := provider.Volume{ID: "vol-" + spec.Name, Name: spec.Name, Location: spec.Location, SizeGB: spec.SizeGB, Status: provider.VolumeAvailable}
	c.vols[spec.Name] = v
	return v, nil
}

func (c *atCreateCloud) ObserveVolume(ctx context.Context, loc provider.Location, name string) (*provider.Volume, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if v, ok := c.vols[name]; ok {
		return &v, nil
	}
	return nil, nil
}

func (c *atCreateCloud) AttachVolume(ctx context.Context, loc provider.Location, id, instanceID string) (string, error) {
	c.mu.Lock()
	c.attachs++
	c.mu.Unlock()
	return "", provider.Errorf(provider.InvalidRequest, c.Name(), "attach volume", "volumes attach at create")
}

func (c *atCreateCloud) DetachVolume(ctx context.Context, loc provider.Location, id, instanceID string) error {
	return nil
}

func (c *atCreateCloud) DeleteVolume(ctx context.Context, loc provider.Location, id string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for name, v := range c.vols {
		if v.ID == id {
			delete(c.vols, name)
		}
	}
	return nil
}

func newAtCreate(t *testing.T, fixed string, max int) (*env, *atCreateCloud, *fakeNodes, *gpuprov.Provisioner) {
	t.Helper()
	e := newEnv(t)
	e.p.Close()
	cloud := &atCreateCloud{Fake: e.fakes[0], fixed: fixed, max: max, vols: map[string]provider.Volume{}}
	fn := newFakeNodes()
	p, err := gpuprov.New(e.j, gpuprov.WithClock(e.clk), gpuprov.WithBackoff(100*time.Millisecond, 5*time.Second, 1),
		gpuprov.WithProvider(cloud), gpuprov.WithConnector(fn))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return e, cloud, fn, p
}

// On a cloud whose volumes attach at create, the core creates the volume
// before the instance, hands it to the create with its mount path, never
// calls AttachVolume, and checks over SSH that the machine shows it at the
// path (linked there from the cloud's own path when the cloud chooses
// it). The volume is kept for the next VM, whose create carries it again.
func TestVolumeAttachedAtCreate(t *testing.T) {
	for _, fixed := range []string{"", "/mnt/nfs/%s"} {
		t.Run(fmt.Sprintf("fixed=%q", fixed), func(t *testing.T) {
			e, cloud, fn, p := newAtCreate(t, fixed, 1)
			ctx := context.Background()
			req := gpuprov.Request{Name: "train", GPU: "h100", Timeout: time.Hour,
				Volumes: []gpuprov.VolumeRequest{{Name: "data", SizeGB: 100, MountPath: "/data"}}}
			if _, err := p.Launch(ctx, req); err != nil {
				t.Fatal(err)
			}
			want := []provider.VolumeMount{{ID: "vol-data", Name: "data", MountPath: "/data"}}
			cloud.mu.Lock()
			mounted, attachs := slices.Clone(cloud.mounted), cloud.attachs
			cloud.mu.Unlock()
			if len(mounted) != 1 || !slices.Equal(mounted[0], want) || attachs != 0 {
				t.Fatalf("creates carried %v and AttachVolume was called %d times; want one create with %v and no attach", mounted, attachs, want)
			}
			var check string
			fn.mu.Lock()
			for _, l := range fn.log {
				if strings.HasPrefix(l, "train: run ") && strings.Contains(l, "mountpoint -q") {
					check = l
				}
			}
			fn.mu.Unlock()
			switch {
			case check == "":
				t.Fatalf("the machine was never asked whether the volume is mounted: %v", fn.log)
			case fixed == "" && (!strings.Contains(check, "/data") || strings.Contains(check, "ln -sfn")):
				t.Fatalf("check of a volume mounted at its path: %s", check)
			case fixed != "" && (!strings.Contains(check, "/mnt/nfs/"+provider.VolumeResourceName("data")) || !strings.Contains(check, "ln -sfn")):
				t.Fatalf("check of a volume at the cloud's path: %s", check)
			}
			vols, err := p.Volumes(ctx, false)
			if err != nil || len(vols) != 1 || vols[0].State != journal.VolumeAttached || vols[0].VM != "train" {
				t.Fatalf("journal volumes %+v (%v), want data attached to train", vols, err)
			}

			if err := p.Delete(ctx, "train"); err != nil {
				t.Fatal(err)
			}
			vols, _ = p.Volumes(ctx, false)
			if len(vols) != 1 || vols[0].State != journal.VolumeAvailable || vols[0].VM != "" {
				t.Fatalf("after the VM's delete: %+v, want data kept and free", vols)
			}
			req.Name = "eval"
			req.Volumes[0].SizeGB = 0 // an existing volume
			if _, err := p.Launch(ctx, req); err != nil {
				t.Fatal(err)
			}
			cloud.mu.Lock()
			defer cloud.mu.Unlock()
			if len(cloud.mounted) != 2 || !slices.Equal(cloud.mounted[1], want) || len(cloud.vols) != 1 {
				t.Fatalf("second VM's create carried %v (volumes at the cloud %v)", cloud.mounted, cloud.vols)
			}
			e.assertClean("eval")
		})
	}
}

// A cloud whose instance takes one volume is left out of the plan of a
// request with two, saying why, before anything is created.
func TestVolumesOverTheInstanceLimitAreNotPlanned(t *testing.T) {
	_, cloud, _, p := newAtCreate(t, "", 1)
	_, err := p.Launch(context.Background(), gpuprov.Request{Name: "two", GPU: "h100", Timeout: time.Hour,
		Volumes: []gpuprov.VolumeRequest{{Name: "a", SizeGB: 10, MountPath: "/a"}, {Name: "b", SizeGB: 10, MountPath: "/b"}}})
	if !errors.Is(err, gpuprov.ErrNoOffers) || !strings.Contains(err.Error(), "takes at most 1") {
		t.Fatalf("launch with two volumes: %v; want no offers, naming the limit", err)
	}
	if n := len(cloud.Calls(pt.OpCreate)); n != 0 || len(cloud.vols) != 0 {
		t.Fatalf("%d creates and volumes %v after a refused plan", n, cloud.vols)
	}
}
