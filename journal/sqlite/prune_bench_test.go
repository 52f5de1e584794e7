package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/org/gpuprov/journal"
)

// pruneBenchVMs is the number of ended VMs BenchmarkPrune prunes.
const pruneBenchVMs = 100_000

// pruneBenchLaunchers is the number of goroutines that run launches' journal
// writes while the prune (and the VACUUM) runs.
const pruneBenchLaunchers = 8

// BenchmarkPrune measures what pruning a journal that has lived for months
// costs and gives back. The journal holds 100,000 deleted VMs (each with 2
// attempts and 6 events, as a launch and a delete leave them) and 100 ready
// ones; 8 goroutines run launches' journal writes (a Create, 4 Updates with
// attempts and events, the last releasing the lease) beside each step, and
// the latency of their Commits is reported (p50, p99, max), along with the
// file size and each step's duration. The cases:
//
//   - default: Prune with the default batch (500 VMs), then 10,000 new VMs
//     written into the freed pages, then a VACUUM;
//   - batch-100: Prune with batches of 100;
//   - incremental: the file converted to auto_vacuum=INCREMENTAL first (a
//     VACUUM), Prune, then PRAGMA incremental_vacuum;
//   - vacuum-unpruned: a VACUUM of the whole unpruned file, the cost of a
//     VACUUM when the retention keeps that much.
//
// Run it alone, once:
//
//	go test ./journal/sqlite -run '^$' -bench BenchmarkPrune -benchtime 1x
func BenchmarkPrune(b *testing.B) {
	ctx := context.Background()
	now := time.Now()
	tmpl := filepath.Join(b.TempDir(), "template.db")
	start := time.Now()
	d, err := Open(ctx, tmpl)
	if err != nil {
		b.Fatal(err)
	}
	if err := bulkSteps(ctx, d, pruneBenchVMs, func(i int) *journal.Step {
		return launchSteps(fmt.Sprintf("old-%06d", i), now.Add(-40*24*time.Hour+time.Duration(i)*time.Second), journal.StateDeleted)
	}); err != nil {
		b.Fatal(err)
	}
	if err := bulkSteps(ctx, d, 100, func(i int) *journal.Step {
		return launchSteps(fmt.Sprintf("ready-%03d", i), now.Add(-time.Hour), journal.StateReady)
	}); err != nil {
		b.Fatal(err)
	}
	if err := d.Close(); err != nil {
		b.Fatal(err)
	}
	b.Logf("built %d VMs in %.1fs: %.1f MB", pruneBenchVMs+100, time.Since(start).Seconds(), float64(fileSizes(tmpl).db)/1e6)
	opts := journal.PruneOptions{Before: now.Add(-30 * 24 * time.Hour), Now: now}

	// open opens a copy of the template.
	open := func(b *testing.B) (*DB, *pruneReport) {
		path := filepath.Join(b.TempDir(), "journal.db")
		if err := copyFile(tmpl, path); err != nil {
			b.Fatal(err)
		}
		d, err := Open(ctx, path)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { d.Close() })
		return d, &pruneReport{path: path}
	}
	// prune prunes d with batch beside the launchers.
	prune := func(b *testing.B, r *pruneReport, d *DB, batch int) {
		o := opts
		o.Batch = batch
		var res journal.PruneResult
		r.step(b, d, fmt.Sprintf("prune (batch %d)", o.BatchSize()), "prune", func() error {
			var err error
			res, err = d.Prune(ctx, o)
			return err
		})
		if res.VMs != pruneBenchVMs {
			b.Fatalf("Prune removed %+v, want %d VMs", res, pruneBenchVMs)
		}
		b.Logf("prune removed %d VMs, %d attempts, %d events", res.VMs, res.Attempts, res.Events)
		r.size(b, d, "after prune", "after-prune")
	}

	b.Run("default", func(b *testing.B) {
		for range b.N {
			d, r := open(b)
			r.size(b, d, "before", "before")
			r.step(b, d, "nothing else", "idle", func() error { time.Sleep(2 * time.Second); return nil })
			prune(b, r, d, 0)
			r.step(b, d, "10,000 new VMs (5,000 per transaction)", "refill", func() error {
				return bulkSteps(ctx, d, 10_000, func(i int) *journal.Step {
					return launchSteps(fmt.Sprintf("new-%05d", i), now, journal.StateDeleted)
				})
			})
			r.size(b, d, "after 10,000 new VMs", "after-10k-new")
			r.step(b, d, "VACUUM", "vacuum", func() error { return exclusive(ctx, d, "VACUUM") })
			r.size(b, d, "after VACUUM", "after-vacuum")
		}
	})
	b.Run("batch-100", func(b *testing.B) {
		for range b.N {
			d, r := open(b)
			prune(b, r, d, 100)
		}
	})
	b.Run("incremental", func(b *testing.B) {
		for range b.N {
			d, r := open(b)
			if err := exclusive(ctx, d, "PRAGMA auto_vacuum = INCREMENTAL"); err != nil {
				b.Fatal(err)
			}
			r.step(b, d, "VACUUM to auto_vacuum=INCREMENTAL", "convert", func() error { return exclusive(ctx, d, "VACUUM") })
			r.size(b, d, "converted", "converted")
			prune(b, r, d, 0)
			r.step(b, d, "PRAGMA incremental_vacuum", "incremental-vacuum", func() error {
				return exclusive(ctx, d, "PRAGMA incremental_vacuum")
			})
			r.size(b, d, "after incremental_vacuum", "after-incremental-vacuum")
		}
	})
	b.Run("vacuum-unpruned", func(b *testing.B) {
		for range b.N {
			d, r := open(b)
			r.step(b, d, "VACUUM of the unpruned file", "vacuum", func() error { return exclusive(ctx, d, "VACUUM") })
			r.size(b, d, "after VACUUM", "after-vacuum")
		}
	})
}

// exclusive runs the statement q under this process's write lock, as
// Commits' groups run, so they wait for it.
func exclusive(ctx context.Context, d *DB, q string) error {
	if err := d.lockWrite(ctx); err != nil {
		return err
	}
	defer d.unlockWrite()
	rows, err := d.db.QueryContext(ctx, q) // PRAGMA incremental_vacuum works as its rows are stepped through
	if err != nil {
		return err
	}
	for rows.Next() {
	}
	if err := rows.Close(); err != nil {
		return err
	}
	return rows.Err()
}

// pruneReport prints and reports BenchmarkPrune's figures.
type pruneReport struct{ path string }

// step runs f beside the launchers and reports its duration and their
// Commits' latency.
func (r *pruneReport) step(b *testing.B, d *DB, what, unit string, f func() error) {
	var took time.Duration
	var err error
	lat := runLaunchers(context.Background(), d, fmt.Sprintf("%s-%d", unit, time.Now().UnixNano()), func() {
		t := time.Now()
		err = f()
		took = time.Since(t)
	})
	if err != nil {
		b.Fatalf("%s: %v", what, err)
	}
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	if unit != "idle" {
		b.ReportMetric(took.Seconds(), "s-"+unit)
	}
	b.ReportMetric(ms(pct(lat, 50)), "ms-p50-"+unit)
	b.ReportMetric(ms(pct(lat, 99)), "ms-p99-"+unit)
	b.ReportMetric(ms(pct(lat, 100)), "ms-max-"+unit)
	b.Logf("%-40s %6.2f s; beside it %5d commits by %d launchers: p50 %6.2f ms, p99 %7.2f ms, max %7.1f ms",
		what+":", took.Seconds(), len(lat), pruneBenchLaunchers, ms(pct(lat, 50)), ms(pct(lat, 99)), ms(pct(lat, 100)))
}

// size reports the file's size after a checkpoint (the -wal size before
// it is printed) and its free pages.
func (r *pruneReport) size(b *testing.B, d *DB, what, unit string) {
	wal := fileSizes(r.path).wal
	checkpoint(b, d.db)
	s := fileSizes(r.path)
	b.ReportMetric(float64(s.db)/1e6, "MB-"+unit)
	b.Logf("%-40s %6.1f MB, %.1f MB of it free pages (-wal %.1f MB before the checkpoint)",
		"file "+what+":", float64(s.db)/1e6, float64(freePages(b, d.db))/1e6, float64(wal)/1e6)
}

// pct returns the p-th percentile of ds (100: the maximum).
func pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}

// runLaunchers runs work while pruneBenchLaunchers goroutines run launches'
// journal writes, and returns the latency of every Commit they made while
// work ran.
func runLaunchers(ctx context.Context, d *DB, prefix string, work func()) []time.Duration {
	stop := make(chan struct{})
	lat := make([][]time.Duration, pruneBenchLaunchers)
	errs := make([]error, pruneBenchLaunchers)
	var wg sync.WaitGroup
	for g := range pruneBenchLaunchers {
		wg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				if err := launch(ctx, d, fmt.Sprintf("%s-%d-%d", prefix, g, n), &lat[g]); err != nil {
					errs[g] = err
					return
				}
			}
		})
	}
	work()
	close(stop)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			panic(err) // a benchmark helper without b: a failed Commit is a bug
		}
	}
	return slices.Concat(lat...)
}

// launch runs the journal writes of one launch that ends ready, appending
// each Commit's latency to lat.
func launch(ctx context.Context, d *DB, name string, lat *[]time.Duration) error {
	now := time.Now()
	v := &journal.VM{Name: name, ID: "id-" + name, State: journal.StatePending, Request: benchRequest,
		Owner: "host/1/1", LeaseExpiry: now.Add(30 * time.Second), CreatedAt: now, UpdatedAt: now}
	commit := func(s *journal.Step) error {
		t := time.Now()
		err := d.Commit(ctx, s)
		*lat = append(*lat, time.Since(t))
		return err
	}
	if err := commit(&journal.Step{Create: v, Events: []journal.Event{{Time: now, VM: name, Type: "launch", Owner: v.Owner}}}); err != nil {
		return err
	}
	a := benchAttempt(name, 1, now)
	for _, ph := range []string{"prepare", "create", "boot"} {
		v.State, v.Phase, v.Attempt, v.UpdatedAt = journal.StateProvisioning, ph, 1, time.Now()
		a.Phase = ph
		if err := commit(&journal.Step{Update: v, Attempts: []journal.Attempt{a},
			Events: []journal.Event{{Time: time.Now(), VM: name, Attempt: 1, Type: "phase", Phase: ph, Provider: "sim", Region: "eu-1", Zone: "eu-1a", Owner: v.Owner}}}); err != nil {
			return err
		}
	}
	v.State, v.Phase, v.ReadyAt = journal.StateReady, "", time.Now()
	a.State = journal.AttemptSucceeded
	return commit(&journal.Step{Update: v, ReleaseLease: true, Attempts: []journal.Attempt{a},
		Events: []journal.Event{{Time: time.Now(), VM: name, Attempt: 1, Type: "ready", Provider: "sim", Owner: v.Owner}}})
}

var (
	benchRequest = json.RawMessage(`{"name":"x","gpu":"H100-80GB","count":8,"image":"ubuntu-24.04","timeout":"20m0s","labels":{"team":"ml","job":"train-7"}}`)
	benchOffer   = json.RawMessage(`{"provider":"sim","region":"eu-1","zone":"eu-1a","instance_type":"gpu.8x","gpu":"H100-80GB","gpus":8,"price_per_hour":12.5}`)
)

func benchAttempt(vm string, n int, t time.Time) journal.Attempt {
	return journal.Attempt{VM: vm, N: n, Provider: "sim", Region: "eu-1", Zone: "eu-1a", OfferKey: "sim/eu-1/eu-1a/gpu.8x",
		Offer: benchOffer, State: journal.AttemptActive, Phase: "create", Token: fmt.Sprintf("gpuprov-%s-%d", vm, n),
		Prepared: json.RawMessage(`{"security_group":"sg-0123456789abcdef0"}`), InstanceIDs: []string{fmt.Sprintf("i-%016x", n)},
		HostKey: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKx1W4hnLr8bqFjLq7VnPRv0LzD0g0r2Qh7Qe2m9T1xZ", CreateSent: t, StartedAt: t}
}

// launchSteps is everything a launch that took two attempts leaves, ending
// in state at end (deleted or ready), as one Step: the VM, its 2 attempts
// and its 6 events.
func launchSteps(name string, end time.Time, state journal.VMState) *journal.Step {
	start := end.Add(-2 * time.Hour)
	v := &journal.VM{Name: name, ID: "id-" + name, Request: benchRequest, State: state, Attempt: 2,
		Provider: "sim", Region: "eu-1", Zone: "eu-1b", Offer: benchOffer, PricePerHour: 12.5,
		CreatedAt: start, UpdatedAt: end, ReadyAt: start.Add(5 * time.Minute)}
	if state == journal.StateReady {
		v.InstanceID, v.SSHHost, v.SSHPort, v.SSHUser = "i-0000000000000002", "192.0.2.7", 22, "ubuntu"
	} else {
		v.EndedAt = end
	}
	a1, a2 := benchAttempt(name, 1, start), benchAttempt(name, 2, start.Add(time.Minute))
	a1.State, a1.Error, a1.ErrorKind, a1.EndedAt, a1.CleanedUp = journal.AttemptTornDown, "sim: InsufficientCapacity in eu-1a", "capacity", start.Add(time.Minute), true
	a2.State, a2.Zone = journal.AttemptTornDown, "eu-1b"
	ev := func(d time.Duration, typ string, n int, msg string) journal.Event {
		return journal.Event{Time: start.Add(d), VM: name, Attempt: n, Type: typ, Provider: "sim", Region: "eu-1", Zone: "eu-1a", Message: msg, Owner: "host/4242/1700000000/ab12cd34"}
	}
	return &journal.Step{Create: v, Attempts: []journal.Attempt{a1, a2}, Events: []journal.Event{
		ev(0, "launch", 0, "H100-80GB×8"), ev(time.Second, "attempt", 1, "sim/eu-1a gpu.8x $12.50/h"),
		ev(time.Minute, "attempt-failed", 1, "capacity: InsufficientCapacity"), ev(time.Minute+time.Second, "attempt", 2, "sim/eu-1b gpu.8x $12.50/h"),
		ev(5*time.Minute, "ready", 2, "192.0.2.7:22"), ev(2*time.Hour, string(state), 2, ""),
	}}
}

// bulkSteps commits n Steps made by mk through the Commit code path
// (runner.Prepare, apply) but thousands to a transaction: the test-only fast
// way to build a big journal.
func bulkSteps(ctx context.Context, d *DB, n int, mk func(i int) *journal.Step) error {
	const perTx = 5000
	for from := 0; from < n; from += perTx {
		err := d.writeTx(ctx, func(tx *sql.Tx) error {
			q := newTxStmts(ctx, tx, d.stmts)
			for i := from; i < min(n, from+perTx); i++ {
				p, err := runner.Prepare(mk(i))
				if err != nil {
					return err
				}
				if _, err := apply(q, p); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// sizes are the sizes of a database file and its -wal file.
type sizes struct{ db, wal int64 }

func fileSizes(path string) sizes {
	var s sizes
	if fi, err := os.Stat(path); err == nil {
		s.db = fi.Size()
	}
	if fi, err := os.Stat(path + "-wal"); err == nil {
		s.wal = fi.Size()
	}
	return s
}

// freePages returns the bytes of the free pages of db.
func freePages(b *testing.B, db *sql.DB) int64 {
	var free, size int64
	if err := db.QueryRow("PRAGMA freelist_count").Scan(&free); err != nil {
		b.Fatal(err)
	}
	if err := db.QueryRow("PRAGMA page_size").Scan(&size); err != nil {
		b.Fatal(err)
	}
	return free * size
}

// checkpoint copies the WAL into the database file and truncates it, so
// the file's size says what the database holds.
func checkpoint(b *testing.B, db *sql.DB) {
	if _, err := db.Exec("PRAGMA wal_checkpoint(TRUNCATE)"); err != nil {
		b.Fatal(err)
	}
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
