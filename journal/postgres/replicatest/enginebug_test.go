package replicatest_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/sim/simserver"
)

// pauseJournal holds the Commit that creates VM name, after it committed,
// until resume is closed: the instant between Launch's first journal write
// and the moment the launching goroutine registers itself as the VM's driver.
type pauseJournal struct {
	journal.Journal
	name    string
	once    sync.Once
	created chan struct{}
	resume  chan struct{}
}

func (p *pauseJournal) Commit(ctx context.Context, s *journal.Step) error {
	err := p.Journal.Commit(ctx, s)
	if err == nil && s.Create != nil && s.Create.Name == p.name {
		p.once.Do(func() { close(p.created) })
		<-p.resume
	}
	return err
}

// pauseDelete holds the cloud Delete of VM name until resume is closed.
type pauseDelete struct {
	provider.CloudProvider
	name       string
	once       sync.Once
	concurrent atomic.Int64 // Deletes of name sent while the first was held
	deleting   chan struct{}
	resume     chan struct{}
}

func (p *pauseDelete) Delete(ctx context.Context, loc provider.Location, vm string, ids []string) error {
	first := false
	if vm == p.name {
		p.once.Do(func() { first = true; close(p.deleting) })
	}
	if first { // only the first call waits; a second driver's passes
		select {
		case <-p.resume:
		case <-ctx.Done():
			return ctx.Err()
		}
	} else if vm == p.name {
		p.concurrent.Add(1)
	}
	return p.CloudProvider.Delete(ctx, loc, vm, ids)
}

func (p *pauseDelete) List(ctx context.Context, loc provider.Location) ([]provider.Observed, error) {
	return p.CloudProvider.(provider.Lister).List(ctx, loc)
}

// TestRecoverSkipsOwnWork: Recover, run periodically by a replica (as a
// fleet of replicas must, to take over each other's VMs), must leave alone
// the VMs its own process is driving — including a Launch caught between
// its first journal write and its first step, and a Delete in flight. A
// lease is per process (acquiring one the process holds succeeds), so only
// the Provisioner's own claim on the VM keeps a second driver off it.
func TestRecoverSkipsOwnWork(t *testing.T) {
	timing := simserver.Timing{BootTime: simserver.Duration(300 * time.Millisecond), DeleteTime: simserver.Duration(100 * time.Millisecond)}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := func(name string) gpuprov.Request {
		return gpuprov.Request{Name: name, GPU: "H100", Providers: []string{cloud}, Timeout: 20 * time.Second}
	}

	t.Run("launch", func(t *testing.T) {
		w := newWorld(t, timing)
		pj := &pauseJournal{name: "vm-race", created: make(chan struct{}), resume: make(chan struct{})}
		r := w.replicaWith("replica-0", func(j journal.Journal) journal.Journal { pj.Journal = j; return pj }, nil)
		var launchErr error
		done := make(chan struct{})
		go func() { defer close(done); _, launchErr = r.p.Launch(ctx, req("vm-race")) }()
		<-pj.created
		rep, err := r.p.Recover(ctx)
		close(pj.resume)
		<-done
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := rep.Resumed["vm-race"]; ok {
			t.Errorf("Recover resumed vm-race, which its own Launch was driving (Recover report: %+v)", rep)
		}
		if launchErr != nil {
			t.Errorf("Launch failed because its own process's Recover drove the VM too: %v", launchErr)
		}
		checkNoSelfRecovery(t, r, "vm-race")
	})

	t.Run("delete", func(t *testing.T) {
		w := newWorld(t, timing)
		pd := &pauseDelete{name: "vm-del", deleting: make(chan struct{}), resume: make(chan struct{})}
		r := w.replicaWith("replica-0", nil, func(cp provider.CloudProvider) provider.CloudProvider { pd.CloudProvider = cp; return pd })
		if _, err := r.p.Launch(ctx, req("vm-del")); err != nil {
			t.Fatal(err)
		}
		var delErr error
		done := make(chan struct{})
		go func() { defer close(done); delErr = r.p.Delete(ctx, "vm-del") }()
		<-pd.deleting
		rep, err := r.p.Recover(ctx)
		close(pd.resume)
		<-done
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := rep.Resumed["vm-del"]; ok {
			t.Errorf("Recover resumed vm-del, which its own Delete was tearing down (Recover report: %+v)", rep)
		}
		if delErr != nil {
			t.Errorf("Delete: %v", delErr)
		}
		if n := pd.concurrent.Load(); n > 0 {
			t.Errorf("%d cloud Deletes of vm-del were sent by a second driver while the first was in flight", n)
		}
		checkNoSelfRecovery(t, r, "vm-del")
	})
}

// checkNoSelfRecovery fails t if the journal holds a "recovered" event of vm
// by the owner that was driving it.
func checkNoSelfRecovery(t *testing.T, r *replica, vm string) {
	t.Helper()
	evs, err := r.db.Events(context.Background(), journal.EventQuery{VM: vm})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		if e.Type == gpuprov.EvRecovered {
			t.Errorf("event %d: %s %q by %s: the process took the VM over from itself", e.Seq, e.Type, e.Message, e.Owner)
		}
	}
	var types []string
	for _, e := range evs {
		types = append(types, e.Owner+":"+e.Type)
	}
	t.Logf("%s's events: %s", vm, strings.Join(types, " "))
}
