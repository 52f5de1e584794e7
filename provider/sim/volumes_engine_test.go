package sim_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/journal/journaltest"
	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/sim/simserver"
)

// A job's data outlives its machine: VM train-1 mounts the new volume
// "data" (made in its offer's zone, formatted because blank) and writes a
// file; train-1 is deleted, the volume kept. Later VM train-2 names the
// volume: its cheapest offer (spot-a, in the volume's zone) is stocked
// out, the cheaper spot-b is in another zone and left out by the plan, so
// it lands on od-a in the volume's zone, mounts the volume without
// formatting it and reads the file.
func TestVolumeFollowsTheJobToTheNextVM(t *testing.T) {
	e := newSpotEnv(t)
	p := e.process(t)
	ctx := context.Background()
	vol := []gpuprov.VolumeRequest{{Name: "data", SizeGB: 50, MountPath: "/data"}}
	first, err := p.Launch(ctx, gpuprov.Request{Name: "train-1", GPU: "H100-80GB", Spot: provider.SpotOrOnDemand, Timeout: time.Minute, Volumes: vol})
	if err != nil {
		t.Fatal(err)
	}
	if first.Location.Zone != "us-east-1a" {
		t.Fatalf("train-1 in %s, want the cheapest offer's zone us-east-1a", first.Location.Zone)
	}
	if _, err := p.Run(ctx, "train-1", `echo step-1200 > "$GPUPROV_ROOT/data/checkpoint"`); err != nil {
		t.Fatal(err)
	}
	if err := p.Delete(ctx, "train-1"); err != nil {
		t.Fatal(err)
	}
	vj := e.j
	row, err := vj.GetVolume(ctx, "data")
	if err != nil {
		t.Fatal(err)
	}
	if row.State != journal.VolumeAvailable || row.VM != "" || row.Zone != "us-east-1a" || row.CloudID == "" {
		t.Fatalf("after train-1's deletion the volume is %+v; want it kept, available, in us-east-1a", row)
	}

	if err := e.srv.SetFaults(cloudName, simserver.Faults{StockoutOffers: []string{"spot-a"}}); err != nil {
		t.Fatal(err)
	}
	plan, err := p.Plan(ctx, gpuprov.Request{Name: "train-2", GPU: "H100-80GB", Spot: provider.SpotOrOnDemand, Volumes: []gpuprov.VolumeRequest{{Name: "data", MountPath: "/data"}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Skipped) != 1 || plan.Skipped[0].Offer.Location.Zone != "us-east-1b" || !strings.Contains(plan.Skipped[0].Reason, "volume data is in sim-a us-east/us-east-1a") {
		t.Errorf("the plan should leave spot-b out for the volume's zone: skipped %+v", plan.Skipped)
	}
	second, err := p.Launch(ctx, gpuprov.Request{Name: "train-2", GPU: "H100-80GB", Spot: provider.SpotOrOnDemand, Timeout: time.Minute,
		Volumes: []gpuprov.VolumeRequest{{Name: "data", MountPath: "/data"}}})
	if err != nil {
		t.Fatal(err)
	}
	if in := e.instance(t, second.InstanceID); in.OfferID != "od-a" || in.Zone != "us-east-1a" {
		t.Errorf("train-2 on %s in %s, want od-a in the volume's zone", in.OfferID, in.Zone)
	}
	res, err := p.Run(ctx, "train-2", `cat "$GPUPROV_ROOT/data/checkpoint"`)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(res.Stdout)); got != "step-1200" {
		t.Errorf("train-2 reads %q from the volume, want what train-1 wrote", got)
	}
	// Formatted once, by inspection: blank on train-1, ext4 on train-2.
	for vm, want := range map[string]bool{"train-1": true, "train-2": false} {
		var formatted, mounted bool
		for _, ev := range e.events(t, vm, gpuprov.EvVolume) {
			formatted = formatted || strings.Contains(ev.Message, "formatted")
			mounted = mounted || strings.Contains(ev.Message, "mounted at ")
		}
		if formatted != want || !mounted {
			t.Errorf("%s: formatted %v, mounted %v; want formatted %v and mounted", vm, formatted, mounted, want)
		}
	}
	vols, err := e.srv.Volumes(cloudName)
	if err != nil {
		t.Fatal(err)
	}
	if len(vols) != 1 {
		t.Errorf("the sim holds %d volumes, want the one", len(vols))
	}
}

// Bad volumes are refused before anything is created: a relative mount
// path, a name used twice, a new volume without a size, one that another
// live VM holds.
func TestVolumeBadInputCreatesNothing(t *testing.T) {
	e := newSpotEnv(t)
	p := e.process(t)
	ctx := context.Background()
	if _, err := p.Launch(ctx, gpuprov.Request{Name: "holder", GPU: "H100-80GB", Timeout: time.Minute,
		Volumes: []gpuprov.VolumeRequest{{Name: "shared", SizeGB: 10, MountPath: "/data"}}}); err != nil {
		t.Fatal(err)
	}
	before, _ := e.srv.Instances(cloudName)
	for _, c := range []struct {
		vols []gpuprov.VolumeRequest
		want string
	}{
		{[]gpuprov.VolumeRequest{{Name: "v", SizeGB: 10, MountPath: "data"}}, `volumes[0].mount_path: "data": want an absolute, clean path`},
		{[]gpuprov.VolumeRequest{{Name: "v", SizeGB: 10, MountPath: "/a"}, {Name: "v", SizeGB: 10, MountPath: "/b"}}, `volumes[1].name: "v" is named twice`},
		{[]gpuprov.VolumeRequest{{Name: "Bad_Name", SizeGB: 10, MountPath: "/a"}}, `volumes[0].name: "Bad_Name"`},
		{[]gpuprov.VolumeRequest{{Name: "fresh", MountPath: "/a"}}, `volume "fresh" does not exist yet: give its size`},
		{[]gpuprov.VolumeRequest{{Name: "shared", MountPath: "/a"}}, `volume "shared" is attached to VM holder (ready)`},
	} {
		_, err := p.Launch(ctx, gpuprov.Request{Name: "bad", GPU: "H100-80GB", Timeout: time.Minute, Volumes: c.vols})
		if !errors.Is(err, gpuprov.ErrInvalidRequest) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("volumes %+v: %v, want ErrInvalidRequest saying %q", c.vols, err, c.want)
		}
	}
	if _, err := p.Launch(ctx, gpuprov.Request{Name: "bad", GPU: "H100-80GB", Spot: provider.SpotOnly, OnInterruption: gpuprov.ReplaceWhenReady,
		Timeout: time.Minute, Volumes: []gpuprov.VolumeRequest{{Name: "v", SizeGB: 10, MountPath: "/a"}}}); !errors.Is(err, gpuprov.ErrInvalidRequest) ||
		!strings.Contains(err.Error(), "a volume attaches to one machine at a time") {
		t.Errorf("a replacement policy with volumes: %v", err)
	}
	if _, err := p.LaunchCluster(ctx, gpuprov.ClusterRequest{Name: "c", Nodes: 2, Node: gpuprov.Request{GPU: "H100-80GB",
		Volumes: []gpuprov.VolumeRequest{{Name: "v", SizeGB: 10, MountPath: "/a"}}}}); !errors.Is(err, gpuprov.ErrInvalidRequest) ||
		!strings.Contains(err.Error(), "node.volumes") {
		t.Errorf("a cluster whose nodes name a volume: %v", err)
	}
	after, _ := e.srv.Instances(cloudName)
	if len(after) != len(before) {
		t.Errorf("bad requests made instances: %d → %d", len(before), len(after))
	}
	if _, err := p.Get(ctx, "bad"); !errors.Is(err, gpuprov.ErrNotFound) {
		t.Errorf("a bad request was journaled: %v", err)
	}
}

// A launch with a new volume, killed after each of its journal writes in
// turn, is finished by another process's Recover: the VM ends ready with
// the volume mounted (or failed, with everything torn down), the sim holds
// one volume or none, never two, no volume is attached to two VMs, and no
// instance is left besides the ready VM's.
func TestVolumeLaunchSurvivesACrashAtEveryWrite(t *testing.T) {
	// The writes of a launch with a volume, as a clean run commits them.
	clean := newSpotEnv(t)
	var mu sync.Mutex
	var writes []string
	cp := clean.process(t, gpuprov.WithEvents(func(ev gpuprov.Event) {
		mu.Lock()
		writes = append(writes, ev.Type+" "+ev.Phase)
		mu.Unlock()
	}))
	req := gpuprov.Request{Name: "job", GPU: "H100-80GB", Timeout: time.Minute,
		Volumes: []gpuprov.VolumeRequest{{Name: "data", SizeGB: 20, MountPath: "/data"}}}
	if _, err := cp.Launch(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	n := len(writes)
	mu.Unlock()
	if n < 8 {
		t.Fatalf("a clean launch emitted %d events: %v", n, writes)
	}
	for k := 1; k < n; k++ {
		t.Run(fmt.Sprintf("after-%d-%s", k, strings.ReplaceAll(strings.TrimSpace(writes[k-1]), " ", "-")), func(t *testing.T) {
			e := newSpotEnv(t)
			var dead atomic.Bool
			var seen atomic.Int32
			launcher, err := gpuprov.New(&journaltest.Killable{Journal: e.j, Dead: dead.Load}, gpuprov.WithProvider(e.cp),
				gpuprov.WithSSHKey(e.key), gpuprov.WithSSH("root", nil, true), gpuprov.WithOwner(deadOwner(t)),
				gpuprov.WithEvents(func(gpuprov.Event) {
					if int(seen.Add(1)) == k {
						dead.Store(true)
					}
				}))
			if err != nil {
				t.Fatal(err)
			}
			_, lerr := launcher.Launch(context.Background(), req)
			launcher.Close()
			if lerr == nil {
				return // the kill came after the last write that matters
			}
			p := e.process(t)
			if _, err := p.Recover(context.Background()); err != nil {
				t.Fatal(err)
			}
			vm, err := p.Get(context.Background(), "job")
			if err != nil {
				t.Fatal(err)
			}
			vols, err := e.srv.Volumes(cloudName)
			if err != nil {
				t.Fatal(err)
			}
			var live []simserver.Volume
			for _, v := range vols {
				if v.Status != "deleted" {
					live = append(live, v)
				}
			}
			if len(live) > 1 {
				t.Fatalf("the sim holds %d volumes named data: %+v", len(live), live)
			}
			insts := e.live(t, "job")
			switch vm.State {
			case gpuprov.StateReady:
				if len(insts) != 1 || insts[0].ID != vm.InstanceID {
					t.Errorf("ready on %s, live instances %+v", vm.InstanceID, insts)
				}
				if len(live) != 1 || live[0].AttachedTo != vm.InstanceID {
					t.Errorf("the volume %+v is not attached to the ready VM's instance %s", live, vm.InstanceID)
				}
				res, err := p.Run(context.Background(), "job", `mountpoint -q "$GPUPROV_ROOT/data" && echo mounted`)
				if err != nil || strings.TrimSpace(string(res.Stdout)) != "mounted" {
					t.Errorf("the volume is not mounted on the ready VM: %q, %v", res.Stdout, err)
				}
			case gpuprov.StateFailed:
				if len(insts) != 0 {
					t.Errorf("failed with live instances %+v", insts)
				}
			default:
				t.Errorf("after Recover the VM is %s (%s)", vm.State, vm.LastError)
			}
			row, err := e.j.GetVolume(context.Background(), "data")
			if err == nil && row.State != journal.VolumeDeleted && row.VM != "" && row.VM != "job" {
				t.Errorf("the volume is held by %q", row.VM)
			}
		})
	}
}

// A volume asked deleted with its VM goes with it: after Delete the sim
// holds none and the journal says deleted; a launch that fails releases
// the volume it claimed, kept, for the next.
func TestVolumeDeletedWithItsVMOrReleasedByAFailure(t *testing.T) {
	e := newSpotEnv(t)
	p := e.process(t)
	ctx := context.Background()
	if _, err := p.Launch(ctx, gpuprov.Request{Name: "scratch", GPU: "H100-80GB", Timeout: time.Minute,
		Volumes: []gpuprov.VolumeRequest{{Name: "tmp", SizeGB: 10, MountPath: "/scratch", DeleteWithVM: true}}}); err != nil {
		t.Fatal(err)
	}
	if err := p.Delete(ctx, "scratch"); err != nil {
		t.Fatal(err)
	}
	if row, err := e.j.GetVolume(ctx, "tmp"); err != nil || row.State != journal.VolumeDeleted {
		t.Errorf("volume tmp after its VM's deletion: %+v, %v; want deleted", row, err)
	}
	vols, err := e.srv.Volumes(cloudName)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vols {
		if v.Status != "deleted" {
			t.Errorf("the sim still holds %+v", v)
		}
	}

	// A launch that fails (no offer boots) lets go of its volume.
	if err := e.srv.SetFaults(cloudName, simserver.Faults{BootFailOffers: []string{"*"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Launch(ctx, gpuprov.Request{Name: "doomed", GPU: "H100-80GB", Timeout: time.Minute, MaxOffers: 1,
		Volumes: []gpuprov.VolumeRequest{{Name: "keepme", SizeGB: 10, MountPath: "/data"}}}); err == nil {
		t.Fatal("a launch whose every boot fails succeeded")
	}
	row, err := e.j.GetVolume(ctx, "keepme")
	if err != nil || row.VM != "" || row.State == journal.VolumeDeleted {
		t.Errorf("volume keepme after the failed launch: %+v, %v; want kept and free", row, err)
	}
}
