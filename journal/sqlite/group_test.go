package sqlite

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/org/gpuprov/journal"
)

func openInternal(t *testing.T) *DB {
	t.Helper()
	d, err := Open(context.Background(), filepath.Join(t.TempDir(), "journal.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// waitFor spins until cond holds; the goroutines it waits for are runnable,
// so it needs no clock.
func waitFor(cond func() bool) {
	for !cond() {
		runtime.Gosched()
	}
}

// TestGroupCommit: Steps queued while the writer waits for the write lock
// commit as one group, and each gets its own outcome: a conflicting Step and
// a lease-lost one fail alone, the others commit.
func TestGroupCommit(t *testing.T) {
	ctx := context.Background()
	d := openInternal(t)
	const n = 8
	vms := make([]journal.VM, n)
	for i := range vms {
		vms[i] = journal.VM{Name: fmt.Sprintf("vm-%d", i), State: journal.StatePending, Owner: "o1"}
		if err := d.Commit(ctx, &journal.Step{Create: &vms[i]}); err != nil {
			t.Fatal(err)
		}
	}
	// Three Steps fail, two of them after writing something their
	// savepoint must undo while the rest of the group commits.
	vms[3].Version = 0        // stale: ErrConflict, after its Create
	vms[5].Owner = "intruder" // ErrLeaseLost
	want := map[int]error{3: journal.ErrConflict, 5: journal.ErrLeaseLost, 6: journal.ErrNotFound}

	if err := d.lockWrite(ctx); err != nil {
		t.Fatal(err)
	}
	received, batches := d.received.Load(), d.batches.Load()
	errs := make([]error, n)
	steps := make([]*journal.Step, n)
	var wg sync.WaitGroup
	commit := func(i int) {
		wg.Add(1)
		steps[i] = &journal.Step{
			Update:   &vms[i],
			Attempts: []journal.Attempt{{VM: vms[i].Name, N: 1, State: journal.AttemptActive}},
			Events:   []journal.Event{{VM: vms[i].Name, Type: "step"}},
		}
		switch i {
		case 3:
			steps[i].Create = &journal.VM{Name: "extra-3", State: journal.StatePending}
		case 6: // ErrNotFound, after its Update and first Attempt
			steps[i].Attempts = append(steps[i].Attempts, journal.Attempt{VM: "ghost", N: 1})
		}
		go func() {
			defer wg.Done()
			errs[i] = d.Commit(ctx, steps[i])
		}()
	}
	commit(0)
	waitFor(func() bool { return d.received.Load() == received+1 }) // the writer holds Step 0, waiting for the lock
	for i := 1; i < n; i++ {
		commit(i)
		waitFor(func() bool { return len(d.reqs) == i }) // queued in index order
	}
	d.unlockWrite()
	wg.Wait()

	if got := d.batches.Load() - batches; got != 1 {
		t.Errorf("%d Steps committed in %d groups, want 1", n, got)
	}
	for i, err := range errs {
		if w := want[i]; (w == nil && err != nil) || (w != nil && !errors.Is(err, w)) {
			t.Errorf("Step %d: err = %v, want %v", i, err, w)
		}
	}
	events, err := d.Events(ctx, journal.EventQuery{})
	if err != nil {
		t.Fatal(err)
	}
	var last int64
	for i := range n {
		v, err := d.GetVM(ctx, vms[i].Name)
		if err != nil {
			t.Fatal(err)
		}
		as, err := d.Attempts(ctx, vms[i].Name)
		if err != nil {
			t.Fatal(err)
		}
		if want[i] != nil {
			if v.Version != 1 || len(as) != 0 || steps[i].Events[0].Seq != 0 {
				t.Errorf("failed Step %d was written: Version %d, %d attempts, Seq %d", i, v.Version, len(as), steps[i].Events[0].Seq)
			}
			continue
		}
		if v.Version != 2 || vms[i].Version != 2 || len(as) != 1 {
			t.Errorf("Step %d: stored Version %d, given Version %d, %d attempts; want 2, 2, 1", i, v.Version, vms[i].Version, len(as))
		}
		if seq := steps[i].Events[0].Seq; seq <= last {
			t.Errorf("Step %d: Seq %d, want more than the previous Step's %d (queue order)", i, seq, last)
		} else {
			last = seq
		}
	}
	if _, err := d.GetVM(ctx, "extra-3"); !errors.Is(err, journal.ErrNotFound) {
		t.Errorf("the Create of failed Step 3 was committed: %v", err)
	}
	if len(events) != n-len(want) {
		t.Errorf("%d events stored, want %d", len(events), n-len(want))
	}
}

// TestCommitAbandoned: a Commit whose context ends while it is queued
// returns the context's error, and its Step is never written.
func TestCommitAbandoned(t *testing.T) {
	ctx := context.Background()
	d := openInternal(t)
	if err := d.lockWrite(ctx); err != nil {
		t.Fatal(err)
	}
	received := d.received.Load()
	var wg sync.WaitGroup
	var errA, errB error
	wg.Add(1)
	go func() {
		defer wg.Done()
		errA = d.Commit(ctx, &journal.Step{Events: []journal.Event{{VM: "a", Type: "kept"}}})
	}()
	waitFor(func() bool { return d.received.Load() == received+1 })
	cctx, cancel := context.WithCancel(ctx)
	bDone := make(chan struct{})
	go func() {
		defer close(bDone)
		errB = d.Commit(cctx, &journal.Step{Events: []journal.Event{{VM: "b", Type: "abandoned"}}})
	}()
	waitFor(func() bool { return len(d.reqs) == 1 })
	cancel()
	<-bDone
	d.unlockWrite()
	wg.Wait()
	if errA != nil || !errors.Is(errB, context.Canceled) {
		t.Fatalf("Commit A: %v, want nil; Commit B: %v, want context.Canceled", errA, errB)
	}
	events, err := d.Events(ctx, journal.EventQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 1 || events[0].VM != "a" {
		t.Errorf("events %+v, want only A's", events)
	}
}

// TestClosed: calls after Close fail instead of hanging, and Close is
// idempotent.
func TestClosed(t *testing.T) {
	ctx := context.Background()
	d := openInternal(t)
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := d.Commit(ctx, &journal.Step{Events: []journal.Event{{VM: "a", Type: "late"}}}); err == nil {
		t.Error("Commit after Close succeeded")
	}
	if _, err := d.Acquire(ctx, "a", "o", time.Now(), time.Now()); err == nil {
		t.Error("Acquire after Close succeeded")
	}
}

// TestPragmas: every pooled connection runs in WAL mode with
// synchronous=FULL, foreign keys and the busy timeout.
func TestPragmas(t *testing.T) {
	ctx := context.Background()
	d := openInternal(t)
	var conns []interface{ Close() error }
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range maxConns {
		c, err := d.db.Conn(ctx) // each held open, so each is a distinct connection
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		for _, p := range []struct{ pragma, want string }{
			{"journal_mode", "wal"},
			{"synchronous", "2"},
			{"foreign_keys", "1"},
			{"busy_timeout", fmt.Sprint(BusyTimeout.Milliseconds())},
		} {
			var got string
			if err := c.QueryRowContext(ctx, "PRAGMA "+p.pragma).Scan(&got); err != nil {
				t.Fatal(err)
			}
			if got != p.want {
				t.Errorf("connection %d: PRAGMA %s = %s, want %s", len(conns), p.pragma, got, p.want)
			}
		}
	}
}
