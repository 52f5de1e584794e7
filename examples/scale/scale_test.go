package main

import (
	"context"
	"testing"
	"time"
)

// TestS1Reduced is S1 with 100 VMs (boot 1s±0.5s): every VM ready, none
// failed (by throttling or otherwise), no 429 (the core and the adapter
// pace themselves), no duplicate, no orphan, nothing left after deleting
// everything, and the API calls per VM within the bound this engine meets.
func TestS1Reduced(t *testing.T) {
	cfg := defaultS1()
	cfg.VMs, cfg.Boot, cfg.BootJitter, cfg.Dir, cfg.Teardown = 100, time.Second, 500*time.Millisecond, t.TempDir(), true
	res, err := runS1(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + res.Report())
	if res.Ready != cfg.VMs || res.Failed != 0 {
		t.Errorf("ready %d, failed %d of %d: %v", res.Ready, res.Failed, cfg.VMs, res.Errors)
	}
	if res.RateLimited != 0 {
		t.Errorf("%d answers were 429: the pacing let calls through faster than the account's limit", res.RateLimited)
	}
	if res.Duplicates+res.Orphans+res.Leftover != 0 {
		t.Errorf("duplicates %d, orphans %d, left after deleting every VM %d", res.Duplicates, res.Orphans, res.Leftover)
	}
	// The target at 1,000 VMs is 1.2 calls per VM beyond the create, with
	// the stockout on the path (docs/benchmarks.md: shared firewalls, the
	// stockout stopping the queue, one listing per account and interval).
	// At 100 VMs the fixed calls (plans, the firewall, the stockout's
	// first failed creates) weigh ten times more per VM.
	if beyond := float64(res.TotalCalls-cfg.VMs) / float64(cfg.VMs); beyond > 1.2 {
		t.Errorf("%.2f API calls per VM beyond the create, want ≤ 1.2", beyond)
	}
}

// TestS2Failover measures failovers against a zero-latency sim: every VM
// meets each stockout and ends ready. The latency is reported, not asserted
// (its tail is the disk's fsync; see docs/benchmarks.md); the journal
// commits a failover waits for are counted and bounded.
func TestS2Failover(t *testing.T) {
	cfg := defaultS2()
	cfg.VMs, cfg.Dir = 20, t.TempDir()
	res, err := runS2(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(res.Report())
	if res.Failed != 0 || len(res.Latencies) != cfg.VMs*cfg.Stockouts {
		t.Errorf("failed %d, measured %d failovers, want 0 and %d", res.Failed, len(res.Latencies), cfg.VMs*cfg.Stockouts)
	}
	// Every failover journals the next create's intent before it sends it:
	// one commit, and one more where the VM is the first in its location
	// (its Prepare makes what the later VMs there share, after the attempt
	// is journaled).
	if n, most := res.Commits, len(res.Latencies)+cfg.Stockouts; n < len(res.Latencies) || n > most {
		t.Errorf("%d journal commits within %d failovers, want between %d and %d", n, len(res.Latencies), len(res.Latencies), most)
	}
}

// TestS3Reduced is S3 with 100 VMs: the launcher process is killed with
// SIGKILL once every VM is in phase boot, and a new process recovers them
// at once (the dead owner's leases are taken over without waiting for
// their expiry): every VM re-owned within 2s (6s under the race detector),
// every VM ready, no orphan, no
// duplicate, nothing left after deleting everything.
func TestS3Reduced(t *testing.T) {
	if testing.Short() {
		t.Skip("runs three processes for about 10s")
	}
	cfg := defaultS3()
	cfg.VMs, cfg.Boot, cfg.Dir = 100, 5*time.Second, t.TempDir()
	res, err := runS3(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + res.Report())
	if res.LastReown > reownBound {
		t.Errorf("the last VM was re-owned %v after the recovering process started, want ≤ %v", res.LastReown, time.Duration(reownBound))
	}
	if res.Orphans+res.Duplicates+res.Leftover != 0 {
		t.Errorf("orphans %d, duplicates %d, left after deleting every VM %d", res.Orphans, res.Duplicates, res.Leftover)
	}
}
