package journal_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/org/gpuprov/journal"
)

func TestEventStringAndLogValue(t *testing.T) {
	ev := journal.Event{Seq: 7, Time: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC), VM: "train-1", Attempt: 2,
		Type: "failure", Provider: "aws", Region: "us-east-1", Zone: "use1-az1", Phase: "create",
		ErrorKind: "capacity", Message: "InsufficientInstanceCapacity"}
	want := "2026-03-01T12:00:00Z train-1 failure attempt=2 aws/us-east-1/use1-az1 phase=create kind=capacity: InsufficientInstanceCapacity"
	if got := ev.String(); got != want {
		t.Fatalf("String() = %q, want %q", got, want)
	}
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("gpuprov", "event", ev)
	var line struct {
		Event map[string]any `json:"event"`
	}
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatalf("%v: %s", err, buf.Bytes())
	}
	for k, v := range map[string]any{"vm": "train-1", "type": "failure", "attempt": float64(2), "zone": "use1-az1", "error_kind": "capacity", "seq": float64(7)} {
		if line.Event[k] != v {
			t.Errorf("logged event[%q] = %v, want %v (%s)", k, line.Event[k], v, buf.Bytes())
		}
	}
	if _, ok := line.Event["instance_id"]; ok {
		t.Errorf("an empty field was logged: %s", buf.Bytes())
	}
}
