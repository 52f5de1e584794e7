package gpuprov_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/clock"
	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/journal/sqlite"
	pt "github.com/org/gpuprov/provider/providertest"
)

// smallDisk mounts a tmpfs of size bytes and returns its path; it skips
// the test where mounting is not allowed (not root, no CAP_SYS_ADMIN).
// CI runs as root and so runs it.
func smallDisk(t *testing.T, size int) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "disk")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d,mode=0700", size)); err != nil {
		t.Skipf("cannot mount a small tmpfs to fill (needs root): %v", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			// Still in use by a file left open: lazily, so the test's
			// temp dir can go.
			_ = syscall.Unmount(dir, syscall.MNT_DETACH)
		}
	})
	return dir
}

// fill writes a file until the disk at dir is full.
func fill(t *testing.T, dir string) string {
	path := filepath.Join(dir, "filler")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4096)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling the disk: %v", err)
			}
			return path
		}
	}
}

// A SQLite journal whose disk fills up in the middle of 24 launches: no
// cloud call goes out without its journaled intent, the launches that
// cannot write end with an error that says the journal is unreachable
// (disk full), nothing is duplicated, and once there is room again Recover
// finishes every VM with nothing leaked.
func TestJournalDiskFullMidLaunch(t *testing.T) {
	dir := smallDisk(t, 8<<20)
	clk := clock.NewFake(t0)
	t.Cleanup(clk.AutoAdvance())
	ctx := context.Background()
	db, err := sqlite.Open(ctx, filepath.Join(dir, "journal.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	f := pt.NewFake("a", clk,
		pt.Offer("us-east", "us-east-1a", "h100.1", "H100-80GB", 1, 2.00),
		pt.Offer("us-east", "us-east-1b", "h100.1", "H100-80GB", 1, 2.10))
	f.Idempotent = false // a duplicate would show as a second instance
	f.Installation = db.Installation()
	f.BootTime = 30 * time.Second

	var created atomic.Int32
	var filler atomic.Value
	full := make(chan struct{})
	sink := func(e gpuprov.Event) {
		if e.Type == gpuprov.EvCreated && created.Add(1) == 8 {
			filler.Store(fill(t, dir)) // the disk fills with 8 instances made
			close(full)
		}
	}
	p, err := gpuprov.New(db, gpuprov.WithClock(clk), gpuprov.WithProvider(f), gpuprov.WithEvents(sink),
		gpuprov.WithBackoff(100*time.Millisecond, time.Second, 1))
	if err != nil {
		t.Fatal(err)
	}
	const n = 24
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			_, errs[i] = p.Launch(ctx, gpuprov.Request{Name: fmt.Sprintf("vm-%02d", i), GPU: "H100", Timeout: time.Hour})
		})
	}
	wg.Wait()
	select {
	case <-full:
	default:
		t.Fatal("the disk never filled: the test proves nothing")
	}
	failed := 0
	for i, err := range errs {
		if err == nil {
			continue
		}
		failed++
		if !errors.Is(err, journal.ErrUnreachable) {
			t.Errorf("vm-%02d: %v, want an error that says the journal is unreachable", i, err)
		}
	}
	if failed == 0 {
		t.Fatal("no launch met the full disk")
	}
	t.Logf("%d of %d launches ended on the full disk; %d instances made", failed, n, len(f.All()))
	for _, in := range f.All() {
		// Every instance the cloud made had its intent journaled first:
		// the journal names its VM's attempt in phase create or later.
		v, err := db.GetVM(ctx, in.VM)
		if err != nil || v.Attempt == 0 {
			t.Errorf("instance %s of %s exists without a journaled intent: %v %+v", in.ID, in.VM, err, v)
		}
	}
	p.Close()

	// Room again: Recover (a new process, as after a restart) finishes
	// every VM. A launch whose fence waited for the journal may have run
	// into its deadline first (the fake clock runs on while the disk is
	// full, by the waits' sleeps): Recover then ends it failed with
	// everything torn down, which the checks below accept.
	if err := os.Remove(filler.Load().(string)); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Minute) // the first process's leases lapse
	p2, err := gpuprov.New(db, gpuprov.WithClock(clk), gpuprov.WithProvider(f),
		gpuprov.WithBackoff(100*time.Millisecond, time.Second, 1))
	if err != nil {
		t.Fatal(err)
	}
	defer p2.Close()
	if _, err := p2.Recover(ctx); err != nil {
		t.Fatalf("Recover: %v", err)
	}
	vms, err := db.ListVMs(ctx, journal.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	byVM := map[string][]pt.Instance{}
	for _, in := range f.Live() {
		byVM[in.VM] = append(byVM[in.VM], in)
	}
	for _, v := range vms {
		switch live := byVM[v.Name]; {
		case v.State == journal.StateReady && (len(live) != 1 || live[0].ID != v.InstanceID):
			t.Errorf("%s ready on %s, the cloud holds %+v", v.Name, v.InstanceID, live)
		case v.State != journal.StateReady && v.State.Active():
			t.Errorf("%s stuck in %s after Recover", v.Name, v.State)
		case v.State.Terminal() && len(live) > 0:
			t.Errorf("%s %s, leaked %+v", v.Name, v.State, live)
		}
		delete(byVM, v.Name)
	}
	if len(byVM) > 0 {
		t.Errorf("instances of no journaled VM: %v", byVM)
	}
}
