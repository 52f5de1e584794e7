package aws_test

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/clock"
	"github.com/org/gpuprov/gpuprovtest"
	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/journal/sqlite"
	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/aws"
	pt "github.com/org/gpuprov/provider/providertest"
)

// A launch on the fake EC2 meets InsufficientInstanceCapacity (HTTP 500)
// in the first zone of us-east-1, VcpuLimitExceeded in the next zone of
// us-east-1, and succeeds in us-west-2. The journal shows the three
// attempts, the offer block and the block of us-east-1's G bucket (the
// vCPU quota of g6.xlarge's family class; every L4 offer there is in it),
// and each teardown; the
// cloud holds only the ready VM's instance and key and the shared security
// group of its region, and nothing at all once the VM is deleted (the
// core's CleanupShared a grace after the installation's last VM in the
// region).
func TestProvisionerFailsOverAcrossZonesAndRegions(t *testing.T) {
	clk := clock.NewFake(t0)
	stop := clk.AutoAdvance()
	defer stop()
	f := newFakeEC2(t, clk)
	firstZone := subnetID("use1-az1")
	f.fail(&fakeRule{Action: "RunInstances", Code: "InsufficientInstanceCapacity", Status: http.StatusInternalServerError,
		Match: func(r *fakeReq) bool {
			return r.Region == "us-east-1" && r.Form.Get("NetworkInterface.1.SubnetId") == firstZone
		}})
	f.fail(&fakeRule{Action: "RunInstances", Code: "VcpuLimitExceeded", Status: http.StatusBadRequest,
		Match: func(r *fakeReq) bool { return r.Region == "us-east-1" }})

	ctx := context.Background()
	db, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "journal.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	p, err := aws.New(aws.Config{Regions: []string{"us-east-1", "us-west-2"}, RequestsPerSecond: 1000},
		aws.WithInstallation(db.Installation()), aws.WithEndpoint(f.endpoint()), aws.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var events []gpuprov.Event
	prov, err := gpuprov.New(db, gpuprov.WithProvider(p), gpuprov.WithClock(clk),
		gpuprov.WithBackoff(100*time.Millisecond, 5*time.Second, 1),
		gpuprov.WithSSH("ubuntu", []string{newSpec(t, "k").AuthorizedKeys[0]}, true),
		gpuprov.WithEvents(func(ev gpuprov.Event) { mu.Lock(); events = append(events, ev); mu.Unlock() }))
	if err != nil {
		t.Fatal(err)
	}
	defer prov.Close()

	vm, err := prov.Launch(ctx, gpuprov.Request{Name: "train", GPU: "L4", Timeout: time.Hour})
	if err != nil {
		t.Fatalf("launch: %v", err)
	}
	if vm.State != gpuprov.StateReady || vm.Location.Region != "us-west-2" || vm.Location.Zone != "usw2-az1" ||
		vm.InstanceType != "g6.xlarge" || vm.SSH == nil || vm.SSH.Port != 22 || vm.SSH.User != "ubuntu" {
		t.Fatalf("launched %+v", vm)
	}

	// The journal: three attempts, the first two torn down with their kinds.
	as := gpuprovtest.CheckAttempts(t, db, "train", gpuprovtest.Attempt{Zone: "use1-az1", Kind: "capacity"}, gpuprovtest.Attempt{Zone: "use1-az2", Kind: "quota"},
		gpuprovtest.Attempt{Region: "us-west-2"})
	if a := as[2]; a.Token == "" || len(a.InstanceIDs) != 1 {
		t.Fatalf("attempt 3: %+v", a)
	}
	blocks, err := db.Blocks(ctx, clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, b := range blocks {
		keys = append(keys, b.Key)
	}
	slices.Sort(keys)
	if want := []string{"family:aws|us-east-1|G|od", "offer:aws|us-east-1|use1-az1|g6.xlarge|od"}; !slices.Equal(keys, want) {
		t.Fatalf("blocks %v, want %v", keys, want)
	}
	evs, err := db.Events(ctx, journal.EventQuery{VM: "train"})
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, ev := range evs {
		count[ev.Type]++
	}
	for typ, n := range map[string]int{gpuprov.EvAttempt: 3, gpuprov.EvFailure: 2, gpuprov.EvBlocked: 2,
		gpuprov.EvTeardown: 2, gpuprov.EvTornDown: 2, gpuprov.EvReady: 1} {
		if count[typ] != n {
			t.Fatalf("%d %q events, want %d (events %v)", count[typ], typ, n, count)
		}
	}
	mu.Lock()
	sinkEvents := len(events)
	mu.Unlock()
	if sinkEvents != len(evs) {
		t.Fatalf("the sink saw %d events, the journal holds %d", sinkEvents, len(evs))
	}

	// The cloud: one RunInstances per attempt (none retried), only the
	// ready VM's resources left.
	if n := len(f.requests("RunInstances")); n != 3 {
		t.Fatalf("%d RunInstances, want 3", n)
	}
	live := f.live()
	if len(live) != 1 || live[0].ID != vm.InstanceID || live[0].Region != "us-west-2" || live[0].State != "running" {
		t.Fatalf("live instances %+v, want only %s", live, vm.InstanceID)
	}
	// us-east-1's shared group goes a grace after the core left the region
	// (no instance of its used it); us-west-2's serves the ready VM.
	shared := provider.SharedName(db.Installation(), []provider.Port{{Number: 22, Protocol: "tcp"}}, nil)
	want := []string{"key:us-west-2/gpuprov-train", "sg:us-west-2/" + shared}
	clk.Advance(gpuprov.DefaultSharedGrace)
	pt.WaitFor(t, fmt.Sprintf("the side resources are %v", want), func() bool { return slices.Equal(f.side(), want) })

	if err := prov.Delete(ctx, "train"); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if live := f.live(); len(live) != 0 {
		t.Fatalf("instances left after delete: %+v", live)
	}
	clk.Advance(gpuprov.DefaultSharedGrace)
	pt.WaitFor(t, "no side resource is left a grace after the delete", func() bool { return len(f.side()) == 0 })
}
