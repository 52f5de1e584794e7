package gpuprov_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/clock"
	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/journal/sqlite"
	"github.com/org/gpuprov/provider"
	pt "github.com/org/gpuprov/provider/providertest"
)

var errCrash = errors.New("process killed")

// crashJournal lets the first k writes through; from the (k+1)-th on every
// write fails, as if the process had died just before it. The lease is left
// as a dead process leaves it: not renewed, not released.
type crashJournal struct {
	journal.Journal
	mu      sync.Mutex
	left    int
	crashed bool
	writes  int
	onCrash func()
}

func (c *crashJournal) write() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.crashed {
		return errCrash
	}
	if c.left == 0 {
		c.crashed = true
		if c.onCrash != nil {
			c.onCrash()
		}
		return errCrash
	}
	c.left--
	c.writes++
	return nil
}

// dying returns a context that ends when the journal dies. A process
// killed there does nothing more; the test's process lives on, and what it
// still runs must not act for the dead one. A driver that cannot confirm
// its lease waits for the journal (lease.go's fence) and sleeps on the
// test's shared fake clock while it waits: without this, it moved the
// clock to the launch's deadline before the Recover, which then found
// every launch out of time.
func (c *crashJournal) dying() context.Context {
	ctx, kill := context.WithCancelCause(context.Background())
	c.mu.Lock()
	defer c.mu.Unlock()
	prev := c.onCrash
	c.onCrash = func() {
		if prev != nil {
			prev()
		}
		kill(errCrash)
	}
	return ctx
}

func (c *crashJournal) Commit(ctx context.Context, s *journal.Step) error {
	if err := c.write(); err != nil {
		return err
	}
	return c.Journal.Commit(ctx, s)
}

func (c *crashJournal) Renew(ctx context.Context, owner string, now, expiry time.Time, names []string) ([]string, error) {
	c.mu.Lock()
	dead := c.crashed
	c.mu.Unlock()
	if dead {
		return nil, errCrash
	}
	return c.Journal.Renew(ctx, owner, now, expiry, names)
}

func (c *crashJournal) Release(ctx context.Context, name, owner string) error {
	c.mu.Lock()
	dead := c.crashed
	c.mu.Unlock()
	if dead {
		return errCrash
	}
	return c.Journal.Release(ctx, name, owner)
}

type crashScenario struct {
	name  string
	setup func(fakes []*pt.Fake)
	req   func() gpuprov.Request
	// wantFailedAfter, when set, is the number of attempts an aborting
	// launch has: recovery must end it failed, not try more offers.
	wantFailedAfter int
	// wantReady: every run must end ready, whatever write it crashed at.
	wantReady bool
}

var crashScenarios = []crashScenario{
	{
		// Attempt 1 meets a stockout; attempt 2's create lands but its
		// response is lost, the cloud lists it late, and it boots slowly.
		name: "stockout then lost create",
		setup: func(fakes []*pt.Fake) {
			a := fakes[0]
			a.BootTime, a.ListLag, a.DeleteTime = 40*time.Second, 5*time.Second, 20*time.Second
			a.Caps.ConsistencyWindow = 15 * time.Second
			a.Script(
				&pt.Rule{Op: pt.OpCreate, Match: func(c *pt.Call) bool { return c.Location.Zone == "us-east-1a" }, Err: pe(provider.Capacity, "none")},
				&pt.Rule{Op: pt.OpCreate, Match: func(c *pt.Call) bool { return c.Location.Zone == "us-east-1b" }, Err: pe(provider.Transient, "response lost"), Land: true, Times: 1},
			)
		},
		req: func() gpuprov.Request { return h100("crashy") },
	},
	{
		// Every offer fails after its instance landed: the launch ends
		// failed after four teardowns.
		name: "everything fails after landing",
		setup: func(fakes []*pt.Fake) {
			for _, f := range fakes {
				f.BootTime, f.DeleteTime = 10*time.Second, 10*time.Second
				f.Script(&pt.Rule{Op: pt.OpCreate, Err: pe(provider.Failed, "internal error"), Land: true})
			}
		},
		req: func() gpuprov.Request { return h100("doomed") },
	},
	{
		// A cloud without idempotency tokens that lists new instances
		// late: only observing (for the whole consistency window) before
		// any resend keeps a lost create from becoming two machines.
		name: "lost create on a non-idempotent cloud",
		setup: func(fakes []*pt.Fake) {
			a := fakes[0]
			a.Idempotent = false
			a.BootTime, a.ListLag = 30*time.Second, 20*time.Second
			a.Caps.ConsistencyWindow = 25 * time.Second
			a.Script(&pt.Rule{Op: pt.OpCreate, Err: pe(provider.Transient, "timeout"), Land: true, Times: 1})
		},
		req: func() gpuprov.Request { return h100("twin") },
	},
	{
		// The first offer's instance fails while booting, and the read API
		// fails every other call throughout: teardowns must delete the
		// journaled instance without waiting for a look, and recovery
		// must finish them.
		name: "read API half down",
		setup: func(fakes []*pt.Fake) {
			a := fakes[0]
			a.BootTime, a.DeleteTime = 10*time.Second, 10*time.Second
			a.FailBoot(a.Offers[0].Key())
			var looks atomic.Int64
			odd := func(*pt.Call) bool { return looks.Add(1)%2 == 1 }
			a.Script(
				&pt.Rule{Op: pt.OpObserve, Match: odd, Err: pe(provider.Transient, "HTTP 503")},
				&pt.Rule{Op: pt.OpList, Match: odd, Err: pe(provider.Transient, "HTTP 503")},
			)
		},
		req: func() gpuprov.Request { return h100("halfdown") },
	},
	{
		// Credentials fail after the instance landed: the launch aborts
		// after one teardown, and a crash in that teardown must not turn
		// into a new attempt on another offer after recovery.
		name: "abort survives a crash",
		setup: func(fakes []*pt.Fake) {
			a := fakes[0]
			a.BootTime, a.DeleteTime = 10*time.Second, 10*time.Second
			a.Script(&pt.Rule{Op: pt.OpCreate, Err: pe(provider.Credentials, "token revoked"), Land: true})
		},
		req:             func() gpuprov.Request { return h100("aborted") },
		wantFailedAfter: 1,
	},
	{
		// Every offer stocks out once; the launch waits for capacity (its
		// wait and next try journaled), and a crash anywhere, in the wait
		// too, is resumed by Recover into the same wait, then ready.
		name: "wait for capacity",
		setup: func(fakes []*pt.Fake) {
			fakes[0].Script(&pt.Rule{Op: pt.OpCreate, Err: pe(provider.Capacity, "no capacity"), Times: 3})
			fakes[1].Script(&pt.Rule{Op: pt.OpCreate, Err: pe(provider.Capacity, "no capacity"), Times: 1})
		},
		req: func() gpuprov.Request {
			r := h100("waiter")
			r.WaitForCapacity, r.Timeout = true, 3*time.Hour
			return r
		},
		wantReady: true,
	},
}

// runCrash launches with a journal that dies after k writes, then recovers
// with a fresh Provisioner on the same file and checks that nothing leaked,
// nothing is duplicated and the VM ended ready or cleanly failed. It
// returns the number of writes the launch made (when it did not crash).
func runCrash(t *testing.T, sc crashScenario, k int) (writes int, crashed bool) {
	return runCrashWith(t, sc, k, false)
}

// crashPaced makes runCrashWith's clouds pt.Paced fakes whose Prepare sends
// nothing: the engine then journals a new attempt with its create intent,
// in one write, and a crash must still leave nothing behind.
var crashPaced bool

// crashLate makes runCrashWith recover only after the launch's deadline has
// passed: every VM must then end failed (or ready, when it had already been
// journaled ready), with everything its attempts started torn down.
var crashLate bool

// runCrashWith is runCrash, with shared side resources (pt.SharedFake)
// when shared is set: then no shared resource may have been removed while
// an instance of its region was live, a ready VM's region still has its
// shared resource, and after the VM is deleted and Sweep ran none is left.
func runCrashWith(t *testing.T, sc crashScenario, k int, shared bool) (writes int, crashed bool) {
	clk := clock.NewFake(t0)
	stop := clk.AutoAdvance()
	defer stop()
	fakes := standardFakes(clk)
	sc.setup(fakes)
	e := newEnvWith(t, clk, fakes)
	e.p.Close() // the env's own provisioner is not used
	if crashPaced {
		e.usePaced(true)
	}
	if shared {
		e.useShared()
		defer func() {
			if t.Failed() {
				return
			}
			for _, sf := range e.shared {
				if n := sf.DeletedInUse(); n > 0 {
					t.Errorf("k=%d: %s: %d shared resources removed while an instance of their region was live", k, sf.Name(), n)
				}
			}
		}()
	}

	mutating := func() int {
		n := 0
		for _, f := range fakes {
			n += len(f.Calls(pt.OpPrepare, pt.OpCreate, pt.OpDelete, pt.OpCleanup))
		}
		return n
	}
	var atCrash int
	cj := &crashJournal{Journal: e.j, left: k, onCrash: func() { atCrash = mutating() }}
	p1 := e.provisioner(cj)
	_, err := p1.Launch(context.Background(), sc.req())
	cj.mu.Lock()
	crashed, writes = cj.crashed, cj.writes
	cj.mu.Unlock()
	p1.Close()
	if !crashed {
		return writes, false
	}
	if !errors.Is(err, errCrash) {
		t.Fatalf("k=%d: crashed launch returned %v", k, err)
	}
	readyBefore := false
	if row, err := e.j.GetVM(context.Background(), sc.req().Name); err == nil {
		readyBefore = row.State == journal.StateReady
	}
	if after := mutating(); after != atCrash {
		t.Fatalf("k=%d: %d cloud mutations after the journal died", k, after-atCrash)
	}

	// A new process: its own journal handle on the same file, after the
	// dead process's lease has expired.
	clk.Advance(2 * time.Minute)
	if crashLate {
		clk.Advance(sc.req().Timeout)
	}
	db2, err := sqlite.Open(context.Background(), e.path)
	if err != nil {
		t.Fatal(err)
	}
	defer db2.Close()
	p2 := e.provisioner(db2)
	rep, err := p2.Recover(context.Background())
	if err != nil {
		t.Fatalf("k=%d: recover: %v", k, err)
	}
	name := sc.req().Name
	if reason, skipped := rep.Skipped[name]; skipped {
		t.Fatalf("k=%d: recover skipped %s: %s", k, name, reason)
	}
	e.j = db2
	if _, err := db2.GetVM(context.Background(), name); errors.Is(err, journal.ErrNotFound) {
		// Killed before the VM was journaled: nothing may exist.
		if live, side := e.live(), e.side(); len(live)+len(side) != 0 {
			t.Fatalf("k=%d: unjournaled VM left %v %v", k, live, side)
		}
		return writes, true
	}
	row := e.assertClean(name)
	if row.State != journal.StateReady && row.State != journal.StateFailed {
		t.Fatalf("k=%d: ended %s", k, row.State)
	}
	if shared {
		if sf := e.shared[row.Provider]; row.State == journal.StateReady && !slices.Contains(sf.Shared(), row.Region) {
			t.Fatalf("k=%d: ready VM in %s/%s has no shared resource there (%v)", k, row.Provider, row.Region, sf.Shared())
		}
		if row.State == journal.StateReady {
			if err := p2.Delete(context.Background(), name); err != nil {
				t.Fatalf("k=%d: delete: %v", k, err)
			}
		}
		// As a user reruns `down --all` when a listing failed (the read
		// API half down answers every other call 503).
		var err error
		for range 3 {
			if _, err = p2.Sweep(context.Background(), gpuprov.SweepOptions{Delete: true}); err == nil {
				break
			}
		}
		if err != nil {
			t.Fatalf("k=%d: sweep: %v", k, err)
		}
		for _, sf := range e.shared {
			if left := sf.Shared(); len(left) > 0 {
				t.Fatalf("k=%d: %s: shared resources left after delete and sweep: %v", k, sf.Name(), left)
			}
		}
	}
	// Killed before the failure was journaled, the next process may adopt
	// the instance and finish; once it was journaled, the launch ends as it
	// was ending. Either way no other offer is tried.
	if crashLate && row.State == journal.StateReady && !readyBefore {
		t.Fatalf("k=%d: made ready by a Recover after the launch's deadline", k)
	}
	if sc.wantReady && !crashLate && row.State != journal.StateReady {
		t.Fatalf("k=%d: ended %s (%s); want ready", k, row.State, row.LastError)
	}
	if n := sc.wantFailedAfter; n > 0 && row.Attempt != n && !(crashLate && row.Attempt < n) {
		t.Fatalf("k=%d: an aborting launch ended %s after %d attempts, want %d", k, row.State, row.Attempt, n)
	}
	return writes, true
}

// TestCrashAtEveryJournalWriteWithSharedResources is the same with a
// shared side resource per region on both clouds.
func TestCrashAtEveryJournalWriteWithSharedResources(t *testing.T) {
	for _, sc := range crashScenarios {
		t.Run(sc.name, func(t *testing.T) {
			total, _ := runCrashWith(t, sc, -1, true)
			for k := 0; k < total; k++ {
				t.Run(fmt.Sprintf("k=%d", k), func(t *testing.T) {
					if _, crashed := runCrashWith(t, sc, k, true); !crashed {
						t.Fatalf("did not crash at write %d of %d", k+1, total)
					}
				})
			}
		})
	}
}

// TestCrashAtEveryJournalWriteWithQuietPrepares is the same with clouds
// that pace their own requests and whose Prepare sends none.
func TestCrashAtEveryJournalWriteWithQuietPrepares(t *testing.T) {
	crashPaced = true
	defer func() { crashPaced = false }()
	TestCrashAtEveryJournalWrite(t)
}

// TestCrashAtEveryJournalWriteRecoveredLate is the same with the recovery
// after the launch's deadline: nothing is made ready late, nothing leaks.
func TestCrashAtEveryJournalWriteRecoveredLate(t *testing.T) {
	crashLate = true
	defer func() { crashLate = false }()
	TestCrashAtEveryJournalWrite(t)
}

// TestCrashAtEveryJournalWrite kills the engine after each journal write of
// multi-attempt launches in turn (including between "create sent" and "id
// recorded") and recovers.
func TestCrashAtEveryJournalWrite(t *testing.T) {
	for _, sc := range crashScenarios {
		t.Run(sc.name, func(t *testing.T) {
			total, crashed := runCrash(t, sc, -1)
			if crashed {
				t.Fatal("a run with an unlimited journal crashed")
			}
			if total < 5 {
				t.Fatalf("scenario makes only %d writes; it should cover several attempts", total)
			}
			for k := 0; k < total; k++ {
				t.Run(fmt.Sprintf("k=%d", k), func(t *testing.T) {
					if _, crashed := runCrash(t, sc, k); !crashed {
						t.Fatalf("did not crash at write %d of %d", k+1, total)
					}
				})
			}
		})
	}
}

// crashAfterCreate is a crashJournal that dies at the first write after the
// fake's first create went out: the process is killed before the instance
// id, or anything else the create told it, is journaled.
type crashAfterCreate struct {
	*crashJournal
	f *pt.Fake
}

func (c *crashAfterCreate) Commit(ctx context.Context, s *journal.Step) error {
	if len(c.f.Calls(pt.OpCreate)) > 0 {
		c.mu.Lock()
		if !c.crashed {
			c.left = 0
		}
		c.mu.Unlock()
	}
	return c.crashJournal.Commit(ctx, s)
}

// TestRecoverAtOnceAfterAQueuedCreate: the create waited a minute for the
// account's turn after its intent was journaled, went out, and the process
// died before journaling what came back. A Recover that takes the dead
// process's lease at once looks while the cloud still lists the new
// instance late. The send time is unknown to it — at the latest, the
// takeover — so on a cloud without idempotency tokens the listing lag is
// waited out from the takeover, not from the journaled intent (which lies
// a minute before the send), and the instance is adopted, not created
// twice. On a cloud that honours the token the create is replayed at once.
// A Delete that takes over at once waits the lag out too before it finds
// nothing, so the instance is deleted, not left running. (The listing lag
// is the clouds' documented eventual consistency: "if you run a command to
// modify or describe the resource that you just created, its ID might not
// have propagated throughout the system" —
// https://docs.aws.amazon.com/ec2/latest/devguide/eventual-consistency.html.)
func TestRecoverAtOnceAfterAQueuedCreate(t *testing.T) {
	host, err := os.Hostname()
	if err != nil {
		t.Skip(err)
	}
	for _, tc := range []struct {
		idempotent, delete bool
	}{{false, false}, {true, false}, {false, true}, {true, true}} {
		idempotent := tc.idempotent
		t.Run(fmt.Sprintf("idempotent=%v/delete=%v", idempotent, tc.delete), func(t *testing.T) {
			clk := clock.NewFake(t0)
			stop := clk.AutoAdvance()
			defer stop()
			fakes := standardFakes(clk)
			a := fakes[0]
			a.Idempotent = idempotent
			a.BootTime, a.ListLag = 10*time.Second, 20*time.Second
			a.Caps.ConsistencyWindow = 25 * time.Second
			a.Caps.RequestsPerSecond, a.Caps.Burst = 1.0/60, 1 // the Prepare takes the turn; the create waits a minute
			e := newEnvWith(t, clk, fakes)
			e.p.Close()
			cj := &crashAfterCreate{crashJournal: &crashJournal{Journal: e.j, left: -1}, f: a}
			// An owner of this host and pid that started at another time:
			// the next Provisioner knows it dead and takes its lease at once.
			p1 := e.provisioner(cj, gpuprov.WithOwner(fmt.Sprintf("%s/%d/1/dead", host, os.Getpid())))
			if _, err := p1.Launch(context.Background(), h100("queued")); !errors.Is(err, errCrash) {
				t.Fatalf("launch: %v, want the crash", err)
			}
			p1.Close()
			calls := a.Calls(pt.OpCreate)
			if len(calls) != 1 {
				t.Fatalf("%d creates before the crash, want 1", len(calls))
			}
			if waited := calls[0].At.Sub(t0); waited < time.Minute {
				t.Fatalf("create sent %v after the start, want it to have waited a minute for its turn", waited)
			}

			db2, err := sqlite.Open(context.Background(), e.path)
			if err != nil {
				t.Fatal(err)
			}
			defer db2.Close()
			a.Caps.RequestsPerSecond, a.Caps.Burst = 0, 0 // the next process is not kept waiting for turns
			p2 := e.provisioner(db2)
			e.j = db2
			if tc.delete {
				if err := p2.Delete(context.Background(), "queued"); err != nil {
					t.Fatal(err)
				}
				if row := e.assertClean("queued"); row.State != journal.StateDeleted { // nothing live
					t.Fatalf("ended %s (%s), want deleted", row.State, row.LastError)
				}
				return
			}
			if _, err := p2.Recover(context.Background()); err != nil {
				t.Fatal(err)
			}
			row := e.assertClean("queued") // one live instance, the journaled one
			if row.State != journal.StateReady {
				t.Fatalf("ended %s (%s), want ready", row.State, row.LastError)
			}
			creates := len(a.Calls(pt.OpCreate))
			if !idempotent && creates != 1 {
				t.Fatalf("%d creates on a cloud without tokens, want 1: the instance adopted", creates)
			}
			if idempotent && creates != 2 {
				t.Fatalf("%d creates on a cloud that honours the token, want 2: the create replayed", creates)
			}
		})
	}
}

// stepJournal passes every write through until one that starts attempt n
// of some VM; the writes after it fail, as if the process died there.
type stepJournal struct {
	*crashJournal
	n int
}

func (s *stepJournal) Commit(ctx context.Context, st *journal.Step) error {
	err := s.crashJournal.Commit(ctx, st)
	for _, a := range st.Attempts {
		if a.N == s.n && a.State == journal.AttemptActive {
			s.mu.Lock()
			s.left = 0
			s.mu.Unlock()
		}
	}
	return err
}

// TestResumedAttemptPaysWhatEarlierAttemptsOwe: attempt 1 met a stockout
// in zone 1a and left its side resources for the next attempt to clean up
// (it might have been in the same zone); attempt 2, in 1b, was journaled
// started, and the process died before that cleanup was done. The Recover
// that resumes attempt 2 cleans up 1a first, as a new attempt would have:
// the ready VM keeps only its own zone's side resources.
func TestResumedAttemptPaysWhatEarlierAttemptsOwe(t *testing.T) {
	clk := clock.NewFake(t0)
	stop := clk.AutoAdvance()
	defer stop()
	fakes := standardFakes(clk)
	a := fakes[0]
	var dead atomic.Bool
	a.Script(
		&pt.Rule{Op: pt.OpCreate, Match: func(c *pt.Call) bool { return c.Location.Zone == "us-east-1a" }, Err: pe(provider.Capacity, "none")},
		// While the first process lives, its cleanup of 1a does not get
		// through: it dies owing it.
		&pt.Rule{Op: pt.OpCleanup, Match: func(c *pt.Call) bool { return !dead.Load() && c.Location.Zone == "us-east-1a" }, Err: pe(provider.Transient, "try again")},
	)
	e := newEnvWith(t, clk, fakes)
	e.p.Close()
	sj := &stepJournal{crashJournal: &crashJournal{Journal: e.j, left: -1}, n: 2}
	p1 := e.provisioner(sj)
	if _, err := p1.Launch(context.Background(), h100("owes")); err == nil {
		t.Fatal("the launch survived its journal's death")
	}
	p1.Close()
	dead.Store(true)
	as, err := e.j.Attempts(context.Background(), "owes")
	if err != nil {
		t.Fatal(err)
	}
	if len(as) != 2 || as[0].CleanedUp || as[1].State != journal.AttemptActive || !slices.Contains(e.sideOf("owes"), "a:owes|us-east/us-east-1a") {
		t.Fatalf("the crash did not leave attempt 1's cleanup owed with attempt 2 started: attempts %+v, side %v", as, e.sideOf("owes"))
	}
	clk.Advance(2 * time.Minute)
	rep, err := e.provisioner(e.j).Recover(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := rep.Resumed["owes"]; err != nil {
		t.Fatalf("recover: %v", err)
	}
	row := e.assertClean("owes")
	if row.State != journal.StateReady || row.Zone != "us-east-1b" {
		t.Fatalf("recovered VM %s in %s, want ready in us-east-1b", row.State, row.Zone)
	}
	as, _ = e.j.Attempts(context.Background(), "owes")
	if !as[0].CleanedUp {
		t.Fatalf("attempt 1's cleanup is still owed in the journal: %+v", as[0])
	}
}
