package journaltest

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/org/gpuprov/journal"
)

// testConcurrentAcquire: of many goroutines acquiring one lease at once,
// exactly one wins and the others are told who did.
func testConcurrentAcquire(t *testing.T, h *harness) {
	contestAcquire(t, []journal.Journal{h.journal()})
}

// testConcurrentUpdates: read-modify-write loops that retry on ErrConflict
// lose no update.
func testConcurrentUpdates(t *testing.T, h *harness) {
	raceUpdates(t, []journal.Journal{h.journal()})
}

// testConcurrentEvents: concurrent Commits get distinct Seqs, increasing
// within each Step, and a reader following the log with After sees every
// event exactly once, in Seq order.
func testConcurrentEvents(t *testing.T, h *harness) {
	followEvents(t, []journal.Journal{h.journal()})
}

// testTwoHandles: two handles on one store, used at once as two processes
// would, see each other's writes, never both win a lease and lose no update.
func testTwoHandles(t *testing.T, h *harness) {
	j1 := h.journal()
	j2 := h.reopen(j1)
	if j1.Installation() != j2.Installation() {
		t.Errorf("two handles on one store have installations %q and %q", j1.Installation(), j2.Installation())
	}
	v := create(t, j1, newVM("vm-shared"))
	equal(t, "VM written by one handle, read by the other", getVM(t, j2, "vm-shared"), v)
	t.Run("Acquire", func(t *testing.T) { contestAcquire(t, []journal.Journal{j1, j2}) })
	t.Run("Updates", func(t *testing.T) { raceUpdates(t, []journal.Journal{j1, j2}) })
	t.Run("Events", func(t *testing.T) { followEvents(t, []journal.Journal{j1, j2}) })
}

// contestAcquire makes goroutines (spread over js) acquire the lease of one
// VM at once, round after round, on a free lease and on an expired one.
func contestAcquire(t *testing.T, js []journal.Journal) {
	const rounds, goroutines = 8, 16
	for r := 0; r < rounds; r++ {
		name := fmt.Sprintf("vm-contest-%d", r)
		v := newVM(name)
		if r%2 == 1 {
			clockOf(js[0]).lease(&v, "gone", -time.Second)
		}
		create(t, js[0], v)

		errs := make([]error, goroutines)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for g := range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				_, errs[g] = js[g%len(js)].Acquire(ctx, name, fmt.Sprintf("owner-%d", g), t0, at(time.Minute))
			}()
		}
		close(start)
		wg.Wait()

		winner := ""
		for g, err := range errs {
			if err == nil {
				if winner != "" {
					t.Fatalf("%s: both %s and owner-%d won the lease", name, winner, g)
				}
				winner = fmt.Sprintf("owner-%d", g)
			}
		}
		if winner == "" {
			t.Fatalf("%s: nobody won the lease; errors: %v", name, errs)
		}
		for g, err := range errs {
			var le *journal.LeasedError
			if err != nil && (!errors.As(err, &le) || le.Owner != winner) {
				t.Errorf("%s: owner-%d lost with %v, want a LeasedError naming %s", name, g, err, winner)
			}
		}
		if got := getVM(t, js[len(js)-1], name); got.Owner != winner {
			t.Errorf("%s: stored owner %q, want the winner %s", name, got.Owner, winner)
		}
	}
}

// raceUpdates makes goroutines (spread over js) increment one VM's Attempt
// by read-modify-write, retrying on ErrConflict, each Step with a new VM and
// an event; every increment, VM and event of a successful Step must land
// exactly once, and nothing of a failed one.
func raceUpdates(t *testing.T, js []journal.Journal) {
	const goroutines, increments = 8, 10
	v := newVM("vm-counter")
	v.Owner, v.LeaseExpiry, v.Attempt = "o1", at(time.Hour), 0
	create(t, js[0], v)

	errs := make([]error, goroutines)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			j := js[g%len(js)]
			<-start
			for done, try := 0, 0; done < increments; try++ {
				v, err := j.GetVM(ctx, "vm-counter")
				if err != nil {
					errs[g] = err
					return
				}
				v.Attempt++
				// The Create runs before the Update: a conflicting Step
				// must not leave it behind.
				extra := newVM(fmt.Sprintf("vm-extra-%d-%d", g, try))
				err = j.Commit(ctx, &journal.Step{Create: &extra, Update: &v,
					Events: []journal.Event{newEvent("vm-counter", fmt.Sprintf("inc-%d", g))}})
				switch {
				case err == nil:
					done++
				case !errors.Is(err, journal.ErrConflict):
					errs[g] = err
					return
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("concurrent updates: %v", err)
	}
	got := getVM(t, js[len(js)-1], "vm-counter")
	if want := goroutines * increments; got.Attempt != want || got.Version != int64(want)+1 {
		t.Errorf("after %d increments: Attempt %d, Version %d; want %d, %d", want, got.Attempt, got.Version, want, want+1)
	}
	es, err := js[0].Events(ctx, journal.EventQuery{VM: "vm-counter"})
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != goroutines*increments {
		t.Errorf("events of successful updates: %d, want %d (a failed Step must write none)", len(es), goroutines*increments)
	}
	vms, err := js[0].ListVMs(ctx, journal.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	extras := 0
	for _, v := range vms {
		if strings.HasPrefix(v.Name, "vm-extra-") {
			extras++
		}
	}
	if extras != goroutines*increments {
		t.Errorf("VMs created by successful Steps: %d, want %d (a failed Step must write none)", extras, goroutines*increments)
	}
}

// followEvents makes goroutines (spread over js) commit Steps of two events
// while a reader follows the log with After.
func followEvents(t *testing.T, js []journal.Journal) {
	const writers, steps = 8, 12
	base, err := js[0].Events(ctx, journal.EventQuery{})
	if err != nil {
		t.Fatal(err)
	}
	var after int64
	if len(base) > 0 {
		after = base[len(base)-1].Seq
	}
	for w := range writers {
		create(t, js[0], newVM(fmt.Sprintf("vm-w%d", w)))
	}

	done := make(chan struct{})
	var seen []journal.Event
	var followErr error
	var fwg sync.WaitGroup
	fwg.Add(1)
	go func() {
		defer fwg.Done()
		j := js[len(js)-1]
		for {
			finished := false
			select {
			case <-done:
				finished = true // this read starts after every commit returned
			default:
			}
			es, err := j.Events(ctx, journal.EventQuery{After: after})
			if err != nil {
				followErr = err
				return
			}
			if len(es) > 0 {
				seen = append(seen, es...)
				after = es[len(es)-1].Seq
			}
			if finished {
				return
			}
		}
	}()

	committed := make([][]int64, writers)
	errs := make([]error, writers)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			j, vm := js[w%len(js)], fmt.Sprintf("vm-w%d", w)
			for i := range steps {
				a := newAttempt(vm, 1)
				a.Phase = fmt.Sprint("step-", i)
				s := &journal.Step{Attempts: []journal.Attempt{a}, Events: []journal.Event{newEvent(vm, "a"), newEvent(vm, "b")}}
				if err := j.Commit(ctx, s); err != nil {
					errs[w] = err
					return
				}
				committed[w] = append(committed[w], s.Events[0].Seq, s.Events[1].Seq)
			}
		}()
	}
	wg.Wait()
	close(done)
	fwg.Wait()
	if err := errors.Join(append(errs, followErr)...); err != nil {
		t.Fatalf("concurrent commits: %v", err)
	}

	all := map[int64]bool{}
	for w, ss := range committed {
		for i, s := range ss {
			if s <= 0 || all[s] || (i > 0 && s <= ss[i-1]) {
				t.Fatalf("writer %d got Seqs %v: want positive, distinct from every other, increasing", w, ss)
			}
			all[s] = true
		}
	}
	if len(seen) != len(all) {
		t.Errorf("the follower saw %d events, %d were committed", len(seen), len(all))
	}
	for i, e := range seen {
		if !all[e.Seq] || (i > 0 && e.Seq <= seen[i-1].Seq) {
			t.Fatalf("the follower saw Seqs %v: want each committed one once, increasing", seqs(seen))
		}
	}
}
