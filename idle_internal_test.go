package gpuprov

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseIdle(t *testing.T) {
	cases := []struct {
		name    string
		out     string
		busyCmd bool
		idle    bool
		err     string
	}{
		{"every GPU idle", "0\n3\nrc 0\n", false, true, ""},
		{"one GPU at the threshold", "0\n5\nrc 0\n", false, false, ""},
		{"busy command says busy", "0\nrc 0\nbusy 0\n", true, false, ""},
		{"busy command says not", "0\nrc 0\nbusy 1\n", true, true, ""},
		{"nvidia-smi failed", "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\nrc 9\n", false, false, "not a utilization"},
		{"driver exit status", "rc 9\n", false, false, "exited 9"},
		{"no GPU", "rc 0\n", false, false, "no GPU"},
		{"busy status missing", "0\nrc 0\n", true, false, "missing"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := parseIdle([]byte(c.out), c.busyCmd)
			if got := s.idle(DefaultIdleBelow); got != c.idle {
				t.Errorf("idle = %v, want %v (%+v)", got, c.idle, s)
			}
			if c.err == "" && s.err != nil || c.err != "" && (s.err == nil || !strings.Contains(s.err.Error(), c.err)) {
				t.Errorf("err %v, want %q", s.err, c.err)
			}
		})
	}
}

// The sample's command is valid sh with and without a busy command, and
// runs the busy command's own text as given.
func TestIdleCommandIsValidShell(t *testing.T) {
	for _, busy := range []string{"", "pgrep -f 'aws s3 sync' >/dev/null", "test -f /tmp/busy && exit 0; exit 1"} {
		if out, err := exec.Command("sh", "-n", "-c", idleCommand(busy)).CombinedOutput(); err != nil {
			t.Errorf("idleCommand(%q): %v: %s", busy, err, out)
		}
	}
	// Run for real, with a stand-in nvidia-smi: a busy command that exits
	// still leaves its status to read.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "nvidia-smi"), []byte("#!/bin/sh\necho 0\necho 12\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", "-c", idleCommand("exit 1"))
	cmd.Env = append(os.Environ(), "PATH="+dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if s := parseIdle(out, true); s.err != nil || s.busy || len(s.utils) != 2 || s.utils[1] != 12 {
		t.Errorf("sample %+v from %q", s, out)
	}
}
