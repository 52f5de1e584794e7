package gpuprov

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The watch's loop, run by a real sh: the first output always (the watch
// runs), then one line per output that differs from the last, newlines
// kept apart from the line breaks.
func TestNoticeScriptPrintsEachChangeOnce(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	write := func(s string) {
		if err := os.WriteFile(state+".tmp", []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(state+".tmp", state); err != nil {
			t.Fatal(err)
		}
	}
	write("")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", noticeScript(`cat "`+state+`"`, 50*time.Millisecond))
	lines := make(chan string, 16)
	cmd.Stdout = &lineWriter{line: func(l string) { lines <- strings.ReplaceAll(l, string(noticeSep), "\n") }}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); _ = cmd.Wait() }()
	next := func() string {
		t.Helper()
		select {
		case l := <-lines:
			return l
		case <-ctx.Done():
			t.Fatal("no line from the loop")
			return ""
		}
	}
	if l := next(); l != "" {
		t.Fatalf("first line %q, want the empty output (nothing announced)", l)
	}
	write("{\"action\": \"terminate\",\n \"time\": \"2026-12-06T02:19:24Z\"}\n")
	if l := next(); l != "{\"action\": \"terminate\",\n \"time\": \"2026-12-06T02:19:24Z\"}\n" {
		t.Fatalf("changed output read back as %q", l)
	}
	time.Sleep(300 * time.Millisecond) // several runs of the probe with the same answer
	write("gone")
	if l := next(); l != "gone" {
		t.Fatalf("after an unchanged answer, line %q, want the next change only", l)
	}
}

func TestNoticeScriptSleepsAsAsked(t *testing.T) {
	for every, want := range map[time.Duration]string{5 * time.Second: "sleep 5.00;", 100 * time.Millisecond: "sleep 0.10;", 1500 * time.Millisecond: "sleep 1.50;"} {
		if s := noticeScript("true", every); !strings.Contains(s, want) {
			t.Errorf("noticeScript(%v) = %q, want %q", every, s, want)
		}
	}
}
