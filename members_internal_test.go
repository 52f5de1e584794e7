package gpuprov

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/org/gpuprov/clock"
	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/journal/sqlite"
	pt "github.com/org/gpuprov/provider/providertest"
)

// A pacer's share of n sends one request per n turns of the account's
// rate, with a burst of a third; back at a share of one, the whole rate.
func TestPacerShare(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	pc := newPacer(clk, 10, 3) // the account: 10 requests/s, burst 3
	pc.setShare(3)
	grantTimes := func(n int) []time.Duration {
		start := clk.Now()
		var at []time.Duration
		for range n {
			done := make(chan error, 1)
			go func() { done <- pc.wait(context.Background(), false, nil) }()
			for {
				select {
				case err := <-done:
					if err != nil {
						t.Fatal(err)
					}
				default:
					if clk.Sleeping() > 0 {
						clk.Advance(10 * time.Millisecond)
					}
					time.Sleep(100 * time.Microsecond)
					continue
				}
				break
			}
			at = append(at, clk.Now().Sub(start))
		}
		return at
	}
	// The burst of 3 became 1 (one third of it, the tokens kept), then one
	// request per 300 ms.
	got := grantTimes(3)
	if want := []time.Duration{0, 300 * time.Millisecond, 600 * time.Millisecond}; !equalDurations(got, want) {
		t.Errorf("share of 3: grants at %v, want %v", got, want)
	}
	pc.setShare(1)
	clk.Advance(time.Second) // the whole burst comes back
	got = grantTimes(4)
	if want := []time.Duration{0, 0, 0, 100 * time.Millisecond}; !equalDurations(got, want) {
		t.Errorf("share of 1: grants at %v, want %v", got, want)
	}
}

func equalDurations(a, b []time.Duration) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// members is a journal whose Members answer says how many replicas pace
// each account.
type members struct {
	journal.Journal
	mu     sync.Mutex
	live   int
	beats  int
	leaves []string
}

func (m *members) Beat(ctx context.Context, member string, accounts []string, now, expiry time.Time) (map[string]int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.beats++
	live := map[string]int{}
	for _, a := range accounts {
		live[a] = m.live
	}
	return live, nil
}

func (m *members) Leave(ctx context.Context, member string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.leaves = append(m.leaves, member)
	return nil
}

// A Provisioner on a journal with Members paces its share of each paced
// account from before its first call, follows the count as replicas come
// and go, and leaves when closed; an account without a rate is not shared.
func TestProvisionerPacesItsShare(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	db, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "journal.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	m := &members{Journal: db, live: 3}
	paced := pt.NewFake("paced", clk)
	paced.Caps.RequestsPerSecond, paced.Caps.Burst = 50, 50
	free := pt.NewFake("free", clk) // no rate: nothing to share
	p, err := New(m, WithClock(clk), WithOwner("r1"), WithProvider(paced), WithProvider(free))
	if err != nil {
		t.Fatal(err)
	}
	pc := p.providers["paced"].pc
	share := func() (time.Duration, float64) {
		pc.mu.Lock()
		defer pc.mu.Unlock()
		return pc.every, pc.burst
	}
	if every, burst := share(); every != 60*time.Millisecond || burst != 16 {
		t.Errorf("3 replicas: one request per %v, burst %v; want 60ms (50/s ÷ 3), 16", every, burst)
	}
	m.mu.Lock()
	m.live = 1
	m.mu.Unlock()
	pt.WaitFor(t, "the next beat", func() bool {
		clk.Advance(memberBeat)
		every, _ := share()
		return every == 20*time.Millisecond
	})
	if _, burst := share(); burst != 50 {
		t.Errorf("alone: burst %v, want 50", burst)
	}
	p.Close()
	if len(m.leaves) != 1 || m.leaves[0] != "r1" {
		t.Errorf("leaves on Close: %v, want [r1]", m.leaves)
	}
}
