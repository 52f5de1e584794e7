package rowcodec

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/org/gpuprov/journal"
)

// countScanner records how many destinations a Scan was given.
type countScanner struct{ n int }

func (s *countScanner) Scan(dest ...any) error { s.n = len(dest); return nil }

// nativeLists is a Lists for the test: the driver takes a []string.
type nativeLists struct{}

func (nativeLists) Value(ss []string) (any, error) { return ss, nil }
func (nativeLists) Dest() (any, func() ([]string, error)) {
	var ss []string
	return &ss, func() ([]string, error) { return ss, nil }
}

// TestColumnsMatchValues: every column list has exactly as many names as
// its Args function returns values and its Scan function takes
// destinations, so a column added to one and not the other fails here.
func TestColumnsMatchValues(t *testing.T) {
	c := Codec{Lists: nativeLists{}}
	count := func(scan func(Scanner) error) int {
		var s countScanner
		if err := scan(&s); err != nil {
			t.Fatal(err)
		}
		return s.n
	}
	must := func(args []any, err error) int {
		if err != nil {
			t.Fatal(err)
		}
		return len(args)
	}
	a := journal.Attempt{InstanceIDs: []string{"i-1"}}
	for _, tc := range []struct {
		name      string
		cols, got int
	}{
		{"VMArgs", len(VMWriteCols), must(c.VMArgs(&journal.VM{}))},
		{"CreateArgs", len(VMCreateCols), must(c.CreateArgs(&journal.VM{}))},
		{"ScanVM", len(Split(VMCols)), count(func(s Scanner) error { _, err := c.ScanVM(s); return err })},
		{"AttemptArgs", len(Split(AttemptCols)), must(c.AttemptArgs(&a))},
		{"ScanAttempt", len(Split(AttemptCols)), count(func(s Scanner) error { _, err := c.ScanAttempt(s); return err })},
		{"EventArgs", len(Split(EventWriteCols)), must(c.EventArgs(&journal.Event{}))},
		{"ScanEvent", len(Split(EventCols)), count(func(s Scanner) error { _, err := c.ScanEvent(s); return err })},
		{"BlockArgs", len(Split(BlockCols)), must(c.BlockArgs(&journal.Block{}))},
		{"ScanBlock", len(Split(BlockCols)), count(func(s Scanner) error { _, err := c.ScanBlock(s); return err })},
	} {
		if tc.got != tc.cols {
			t.Errorf("%s: %d values for %d columns", tc.name, tc.got, tc.cols)
		}
	}
	all := map[string]bool{}
	for _, col := range Split(VMCols) {
		all[col] = true
	}
	for _, col := range VMCreateCols {
		if !all[col] {
			t.Errorf("VMCreateCols has %s, which VMCols lacks", col)
		}
	}
}

// TestConversions: the storage rules of the package documentation.
func TestConversions(t *testing.T) {
	if v, err := Time("f", time.Time{}); v != nil || err != nil {
		t.Errorf("Time(zero) = %v, %v; want NULL", v, err)
	}
	tm := time.Date(2031, 3, 4, 5, 6, 7, 123456789, time.FixedZone("x", 3600))
	if v, err := Time("f", tm); err != nil || v == nil || !GoTime(v).Equal(tm) || GoTime(v).Location() != time.UTC {
		t.Errorf("Time(%v) = %v, %v; want it back to the nanosecond, in UTC", tm, v, err)
	}
	if _, err := Time("VM.Deadline", time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC)); err == nil || !strings.Contains(err.Error(), "VM.Deadline") {
		t.Errorf("Time of 2300: %v, want an error naming the field", err)
	}
	if CmpTime(time.Time{}) != math.MinInt64 || CmpTime(time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC)) != math.MaxInt64 {
		t.Error("CmpTime does not clamp the zero time and far times")
	}
	if v, err := JSON("f", json.RawMessage{}); v != nil || err != nil {
		t.Errorf("JSON(empty) = %v, %v; want NULL", v, err)
	}
	if _, err := JSON("VM.Offer", json.RawMessage(`{"x"`)); err == nil || !strings.Contains(err.Error(), "VM.Offer") {
		t.Errorf("JSON of invalid JSON: %v, want an error naming the field", err)
	}
	if got := GoJSON(nil); got != nil {
		t.Errorf("GoJSON(NULL) = %q, want nil", got)
	}
	bad := errors.New("bad list")
	c := Codec{Lists: failingLists{bad}}
	if _, err := c.AttemptArgs(&journal.Attempt{InstanceIDs: []string{"i"}}); !errors.Is(err, bad) {
		t.Errorf("AttemptArgs with a failing list: %v, want %v", err, bad)
	}
	if args, err := c.AttemptArgs(&journal.Attempt{}); err != nil || args[11] != nil {
		t.Errorf("AttemptArgs of no instance ids: %v, %v; want NULL without asking Lists", args, err)
	}
}

type failingLists struct{ err error }

func (f failingLists) Value([]string) (any, error)           { return nil, f.err }
func (f failingLists) Dest() (any, func() ([]string, error)) { return new(any), nil }
