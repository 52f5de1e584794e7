package simserver

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// instancesInState reads the state file and counts c1's instances.
func instancesInState(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var st stateFile
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	return len(st.Clouds["c1"].Instances)
}

// TestSaveIntervalBatchesSaves checks that with SaveInterval the state file
// catches up with the mutations within the interval, and that Close writes
// what is left.
func TestSaveIntervalBatchesSaves(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.json")
	s, _ := start(t, func(o *Options) {
		o.StateFile, o.SaveInterval = path, Duration(20*time.Millisecond)
	})
	for _, name := range []string{"a", "b", "c"} {
		create(t, s, name, nil)
	}
	deadline := time.Now().Add(5 * time.Second)
	for instancesInState(t, path) != 3 {
		if time.Now().After(deadline) {
			t.Fatalf("the state file holds %d instances 5s after 3 creates", instancesInState(t, path))
		}
		time.Sleep(10 * time.Millisecond) // a bounded poll on the file, not a wait for a fixed time
	}

	// A mutation right before Close is saved by Close.
	path2 := filepath.Join(t.TempDir(), "state.json")
	s2, _ := start(t, func(o *Options) {
		o.StateFile, o.SaveInterval = path2, Duration(time.Hour)
	})
	create(t, s2, "d", nil)
	if err := s2.Close(); err != nil {
		t.Fatal(err)
	}
	if n := instancesInState(t, path2); n != 1 {
		t.Fatalf("after Close the state file holds %d instances, want 1", n)
	}
}
