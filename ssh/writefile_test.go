package ssh

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A fake VM whose login user is not root: `id -u` says 1000, and `sudo`
// runs its command (or, when $HOME/deny exists, refuses like sudo -n
// without NOPASSWD). Every call is logged in $HOME/calls. `sha256sum`
// lies when $HOME/corrupt exists.
func newNonRootVM(t *testing.T) *fakeVM {
	t.Helper()
	bin := t.TempDir()
	scripts := map[string]string{
		"id": `echo "id $*" >> "$HOME/calls"; echo 1000`,
		"sudo": `case "$5" in
*"read -r sig pgid"*) echo "sudo $1 $2 $3 kill-loop" ;;
*) echo "sudo $1 $2 $3" ;;
esac >> "$HOME/calls"
[ "$1" = -n ] || { echo "fake sudo: -n missing" >&2; exit 2; }
shift; [ "$1" = -- ] && shift
if [ -e "$HOME/deny" ]; then echo "sudo: a password is required" >&2; exit 1; fi
exec "$@"`,
		"sha256sum": `if [ -e "$HOME/corrupt" ]; then echo "0000  -"; else exec /usr/bin/sha256sum "$@"; fi`,
	}
	for name, body := range scripts {
		if err := os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return newFakeVM(t, "PATH="+bin+":"+os.Getenv("PATH"))
}

// calls returns the id and sudo calls made on the VM, in order, but for
// those starting the Client's kill loop, which starts in the background
// at a time of its own; killLoops counts those.
func (vm *fakeVM) calls(t *testing.T) []string {
	t.Helper()
	calls, _ := vm.allCalls(t)
	return calls
}

func (vm *fakeVM) killLoops(t *testing.T) int {
	t.Helper()
	_, n := vm.allCalls(t)
	return n
}

func (vm *fakeVM) allCalls(t *testing.T) (calls []string, killLoops int) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(vm.dir, "calls"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if strings.HasSuffix(line, " kill-loop") {
			killLoops++
			continue
		}
		calls = append(calls, strings.ReplaceAll(strings.TrimSpace(line), " ", "_"))
	}
	return calls, killLoops
}

func TestWriteFileUsesSudoAndProbesOnce(t *testing.T) {
	vm := newNonRootVM(t)
	c := vm.dial(t, nil)
	path := filepath.Join(vm.dir, "etc", "app.conf")
	for _, content := range []string{"one\n", "two\n"} {
		if err := c.WriteFile(testCtx(t), path, []byte(content), 0o640); err != nil {
			t.Fatal(err)
		}
		assertFile(t, path, []byte(content), 0o640)
	}
	if res, err := c.Run(testCtx(t), "echo as-root", WithSudo()); err != nil || string(res.Stdout) != "as-root\n" {
		t.Fatalf("Run WithSudo = %+v, %v", res, err)
	}
	want := []string{"id_-u", "sudo_-n_true", "sudo_-n_--_sh", "sudo_-n_--_sh", "sudo_-n_--_sh"}
	if got := vm.calls(t); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("remote calls %v, want %v", got, want)
	}
}

func TestWriteFileWithoutPasswordlessSudo(t *testing.T) {
	vm := newNonRootVM(t)
	deny := filepath.Join(vm.dir, "deny")
	if err := os.WriteFile(deny, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	c := vm.dial(t, nil)
	path := filepath.Join(vm.dir, "f")
	err := c.WriteFile(testCtx(t), path, []byte("x"), 0o600)
	if !errors.Is(err, ErrNoSudo) || !strings.Contains(err.Error(), "NOPASSWD") {
		t.Fatalf("WriteFile = %v, want ErrNoSudo mentioning NOPASSWD", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("file written despite the sudo failure: %v", err)
	}
	// The failure is not cached: once sudo works, so does WriteFile.
	if err := os.Remove(deny); err != nil {
		t.Fatal(err)
	}
	if err := c.WriteFile(testCtx(t), path, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestWriteFileChecksumMismatchKeepsOldFile(t *testing.T) {
	vm := newNonRootVM(t)
	c := vm.dial(t, nil)
	path := filepath.Join(vm.dir, "conf", "f")
	if err := c.WriteFile(testCtx(t), path, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(vm.dir, "corrupt"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	err := c.WriteFile(testCtx(t), path, []byte("new"), 0o600)
	if !errors.Is(err, ErrChecksumMismatch) {
		t.Fatalf("WriteFile = %v, want ErrChecksumMismatch", err)
	}
	assertFile(t, path, []byte("old"), 0o600)
	if entries, _ := os.ReadDir(filepath.Dir(path)); len(entries) != 1 {
		t.Errorf("temporary file left behind: %v", entries)
	}
}

func TestWriteFileRejectsBadArguments(t *testing.T) {
	vm := newFakeVM(t)
	c := vm.dial(t, nil)
	for _, tt := range []struct {
		path string
		mode os.FileMode
	}{
		{"relative/path", 0o600},
		{"/", 0o600},
		{"/tmp/dir/", 0o600},
		{"/tmp/a\x00b", 0o600},
		{filepath.Join(vm.dir, "f"), 0o600 | os.ModeSetuid},
	} {
		if err := c.WriteFile(testCtx(t), tt.path, []byte("x"), tt.mode); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("WriteFile(%q, %v) = %v, want ErrInvalidConfig", tt.path, tt.mode, err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.WriteFile(ctx, filepath.Join(vm.dir, "f"), []byte("x"), 0o600); !errors.Is(err, context.Canceled) {
		t.Errorf("WriteFile with a cancelled ctx = %v", err)
	}
}

func TestWriteFileAwkwardPaths(t *testing.T) {
	vm := newFakeVM(t)
	c := vm.dial(t, nil)
	for _, name := range []string{"with space", "it's", "$(touch pwned)", "-dash", "日本"} {
		path := filepath.Join(vm.dir, name, name)
		if err := c.WriteFile(testCtx(t), path, []byte(name), 0o644); err != nil {
			t.Fatalf("%q: %v", name, err)
		}
		assertFile(t, path, []byte(name), 0o644)
	}
	if _, err := os.Stat(filepath.Join(vm.dir, "pwned")); err == nil {
		t.Fatal("a path was executed")
	}
}
