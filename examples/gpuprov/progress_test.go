package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/org/gpuprov"
)

var progressEvents = []gpuprov.Event{
	{VM: "a", Type: gpuprov.EvLaunch, Message: "H100-80GB×1"},
	{VM: "a", Type: gpuprov.EvAttempt, Attempt: 1, Provider: "sim-a", Region: "us-east", Phase: "prepare", Message: "x"},
	{VM: "a", Type: gpuprov.EvFailure, Attempt: 1, Provider: "sim-a", Region: "us-east", ErrorKind: "capacity", Message: "409\nout of capacity"},
	{VM: "a", Type: gpuprov.EvAttempt, Attempt: 2, Provider: "sim-b", Region: "us-central", Phase: "prepare", Message: "y"},
	{VM: "a", Type: gpuprov.EvPhase, Attempt: 2, Provider: "sim-b", Region: "us-central", Phase: "boot"},
	{Type: gpuprov.EvRetry, Attempt: 2, Message: "create: 500"}, // the library sends retries without VM and time
}

func TestProgressPlain(t *testing.T) {
	var b bytes.Buffer
	pr := newProgress(&b, false)
	at := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, e := range progressEvents {
		if e.VM != "" {
			e.Time = at
		}
		pr.Sink(e)
	}
	pr.Stop()
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) != len(progressEvents) {
		t.Fatalf("%d lines for %d events:\n%s", len(lines), len(progressEvents), b.String())
	}
	if want := "2025-01-02T03:04:05Z a failure attempt=1 provider=sim-a region=us-east kind=capacity 409 out of capacity"; lines[2] != want {
		t.Errorf("line = %q\nwant   %q", lines[2], want)
	}
	for _, l := range lines {
		if _, err := time.Parse(time.RFC3339, strings.Fields(l)[0]); err != nil {
			t.Errorf("line %q: %v", l, err)
		}
	}
	if strings.Contains(b.String(), "\x1b[") {
		t.Error("escape sequences off a terminal")
	}
}

func TestProgressTTY(t *testing.T) {
	var b bytes.Buffer
	pr := newProgress(&b, true)
	for _, e := range progressEvents {
		pr.Sink(e)
	}
	pr.Stop()
	out := b.String()
	if !strings.Contains(out, "\x1b[1A\x1b[J") {
		t.Errorf("status line not redrawn in place:\n%q", out)
	}
	last := out[strings.LastIndex(out, "\x1b[J")+len("\x1b[J"):]
	for _, want := range []string{"a ", "provisioning/boot", "sim-b us-central", "0:00", "attempt 2"} {
		if !strings.Contains(last, want) {
			t.Errorf("last status %q lacks %q", last, want)
		}
	}
	if !strings.Contains(out, "attempt 1 on sim-a us-east failed (capacity)") {
		t.Errorf("the failure was not kept above the status lines:\n%s", out)
	}
}

// TestProgressCountsDownAWait: on a terminal, a VM waiting for capacity
// shows what is blocked and a countdown to its next try, redrawn as the
// clock moves.
func TestProgressCountsDownAWait(t *testing.T) {
	var b bytes.Buffer
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	pr := newProgress(&b, true)
	pr.Stop() // no ticker: redraws come from the events and pr.Printf
	pr.tty = true
	pr.now = func() time.Time { return now }
	next := now.Add(2*time.Minute + 10*time.Second)
	pr.Sink(gpuprov.Event{VM: "w", Type: gpuprov.EvWaiting, Time: now,
		Message: "waiting for capacity: 14 offers blocked, cheapest $2.49/h, next try at " + next.Format(time.RFC3339) + ": no offers for H100-80GB×1"})
	if !strings.Contains(b.String(), "for capacity, next try in 2m10s (14 offers blocked, cheapest $2.49/h)") || !strings.Contains(b.String(), "waiting ") {
		t.Fatalf("status line lacks the wait and its countdown:\n%q", b.String())
	}
	now = now.Add(70 * time.Second)
	b.Reset()
	pr.Printf("")
	if !strings.Contains(b.String(), "next try in 1m0s") || !strings.Contains(b.String(), "waiting ") {
		t.Errorf("countdown did not move with the clock:\n%q", b.String())
	}
}
