package main

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/org/gpuprov/journal/postgres/pgtest"
)

// TestS5SharedRate is S5 with 3 replicas × 40 VMs on one account limited
// to 20 requests/s (boot 1s±0.5s), so that pacing sets the wall time: the
// replicas on one PostgreSQL journal pace the account's rate between them.
//
//   - No request sent after the first second is answered 429. (In the
//     first, a replica that joined before the others may still pace the
//     share it learnt at its join, until its next beat.)
//   - While every replica has creates to send, the account answers at
//     least 90% of its rate: no share is left unused.
//   - From the first create, every VM is ready within 1.4 × the floor one
//     process would have for the requests answered (S1's floor: those
//     requests less the server's first second, at the account's rate, plus
//     a mean boot). The wait before the first create is the journal's
//     (each launch commits before it sends; 0.4–1.5 s here, 1.5–7 s under
//     -race on two busy cores) and one process waits it too: it is
//     reported, not bounded. S5's target is 1.3 at 1,000 VMs, where this
//     ratio is 1.07–1.09; at 120 VMs the fixed part weighs three times
//     more (the replicas' first creates 1–2 s apart, as their launches'
//     commits queue for the journal; the last boot's jitter; one poll),
//     and the ratio measured 1.04–1.25 in 20 runs, 10 with -race and 10
//     without.
//
// With each replica pacing the whole rate (the journal's Members hidden)
// the account answers 429 all along, and the test fails.
func TestS5SharedRate(t *testing.T) {
	url := os.Getenv(pgtest.EnvURL)
	if url == "" {
		pg, err := pgtest.Start()
		if err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("no PostgreSQL server (CI is set, so this fails instead of skipping): %v", err)
			}
			t.Skipf("no PostgreSQL server (set %s to a server's URL, or install the PostgreSQL server binaries): %v", pgtest.EnvURL, err)
		}
		t.Cleanup(func() {
			if err := pg.Stop(); err != nil {
				t.Errorf("stopping PostgreSQL: %v", err)
			}
		})
		url = pg.URL
	}
	cfg := defaultS5()
	cfg.VMs, cfg.Replicas, cfg.RateLimit, cfg.Boot, cfg.BootJitter, cfg.Journal = 120, 3, 20, time.Second, 500*time.Millisecond, url
	res, err := runS5(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + res.Report())
	if !res.Members {
		t.Fatal("the PostgreSQL journal does not implement journal.Members: the replicas cannot share the account's rate")
	}
	if res.Ready != cfg.VMs || res.Failed != 0 {
		t.Errorf("ready %d, failed %d of %d: %v", res.Ready, res.Failed, cfg.VMs, res.Errors)
	}
	if all, late := res.Throttled429(); late != 0 {
		t.Errorf("%d answers were 429, %d of them to requests sent after the first second: the replicas sent more than the account's rate between them", all, late)
	}
	if from, to := res.busy(); to <= from {
		t.Errorf("the replicas never had creates to send all at once (the last began at %.2fs, the first ended at %.2fs)", from.Seconds(), to.Seconds())
	} else if got := res.Paced(); got < 0.9*cfg.RateLimit {
		t.Errorf("%.1f requests/s answered while every replica had creates to send, want ≥ 90%% of the account's %.0f: the replicas left part of the rate unused", got, cfg.RateLimit)
	}
	first, _ := res.Creates()
	if ratio := res.RatioFromCreate(); ratio > 1.4 {
		t.Errorf("from the first create (%.2fs) to all ready %.2fs, %.2f × the single-process floor of %.2fs, want ≤ 1.4",
			first.Seconds(), (res.Wall - first).Seconds(), ratio, res.FloorCalls().Seconds())
	}
}
