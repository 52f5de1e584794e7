package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/sim/simserver"
)

// TestDemo runs the demo in process with short latencies and checks the
// facts its summary claims.
func TestDemo(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	var out bytes.Buffer
	o := defaultDemoOptions()
	o.Out = &out
	o.Timing = simserver.Timing{
		APILatency: simserver.Duration(time.Millisecond),
		BootTime:   simserver.Duration(300 * time.Millisecond),
		BootJitter: simserver.Duration(100 * time.Millisecond),
		DeleteTime: simserver.Duration(100 * time.Millisecond),
	}
	start := time.Now()
	sum, err := runDemo(ctx, o)
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("demo took %v; want well under a minute", d)
	}
	if len(sum.Nodes) != 2 {
		t.Fatalf("nodes = %d, want 2\n%s", len(sum.Nodes), out.String())
	}
	failover := false
	for _, n := range sum.Nodes {
		if n.TimeToReady <= 0 {
			t.Errorf("%s: not ready (time to ready %v)", n.Name, n.TimeToReady)
		}
		if n.Health != provider.Healthy {
			t.Errorf("%s: health %q, want healthy", n.Name, n.Health)
		}
		if n.Attempts >= 2 {
			failover = true
		}
		if n.Provider == "" || n.Region == "" || n.Price <= 0 {
			t.Errorf("%s: incomplete summary %+v", n.Name, n)
		}
	}
	if !failover {
		t.Errorf("no node needed a second attempt; the stocked-out offer was not tried first\n%s", out.String())
	}
	if len(sum.Recovered) != 1 || sum.LostCreates != 1 || sum.Replays != 1 {
		t.Errorf("recovered %v after %d lost creates and %d replays; want exactly one of each\n%s", sum.Recovered, sum.LostCreates, sum.Replays, out.String())
	}
	if sum.ServerNode == "" || !strings.HasPrefix(sum.ClusterURL, "https://") {
		t.Errorf("no cluster: server %q url %q", sum.ServerNode, sum.ClusterURL)
	}
	if sum.LeftRunning != 0 || sum.LeftSideRes != 0 {
		t.Errorf("left %d instances and %d side resources, want none", sum.LeftRunning, sum.LeftSideRes)
	}
	for _, want := range []string{"SIMULATED", "0 instances left running", "same idempotency token", "stocked out"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
}
