package gpuprov_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/org/gpuprov"
)

// TestLaunchEachWithALimit: Limit(2) keeps at most two of six launches
// under way at a time, starts the first two first, and every one ends
// ready.
func TestLaunchEachWithALimit(t *testing.T) {
	e := newEnv(t)
	for _, f := range e.fakes {
		f.BootTime = 30 * time.Second
	}
	var (
		mu             sync.Mutex
		running, most  int
		started, ended []string
	)
	e.p = e.provisioner(e.j, gpuprov.WithEvents(func(ev gpuprov.Event) {
		mu.Lock()
		defer mu.Unlock()
		switch ev.Type {
		case gpuprov.EvLaunch:
			running++
			most = max(most, running)
			started = append(started, ev.VM)
		case gpuprov.EvReady, gpuprov.EvFailed:
			running--
			ended = append(ended, ev.VM)
		}
	}))
	var reqs []gpuprov.Request
	for i := range 6 {
		reqs = append(reqs, h100(fmt.Sprintf("job-%d", i)))
	}
	ready := 0
	err := e.p.LaunchEach(context.Background(), reqs, func(i int, r gpuprov.LaunchResult) {
		if r.Err == nil && r.VM.State == gpuprov.StateReady {
			ready++
		}
	}, gpuprov.Limit(2))
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if ready != 6 || most != 2 {
		t.Fatalf("%d ready, at most %d under way at once; want 6 ready, 2 at once", ready, most)
	}
	// The first two run together, so either may journal first; the rest
	// wait for a slot, in order.
	if first := map[string]bool{started[0]: true, started[1]: true}; !first["job-0"] || !first["job-1"] {
		t.Errorf("started %v; want job-0 and job-1 first", started)
	}
}
