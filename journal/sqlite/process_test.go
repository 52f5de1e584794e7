package sqlite_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/journal/sqlite"
)

// The child mode of TestTwoProcesses: set in the environment of the test
// binary it runs again.
const (
	childPathEnv = "GPUPROV_SQLITE_TEST_CHILD_PATH"
	childNameEnv = "GPUPROV_SQLITE_TEST_CHILD_NAME"
)

const (
	procRounds     = 12 // contested VMs
	procGoroutines = 8  // per process
)

var procT0 = time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)

// TestTwoProcesses runs two processes on one file, each with several
// goroutines that contend for the same leases and commit Steps at once: every
// lease has exactly one winner, and no call fails (SQLITE_BUSY included).
func TestTwoProcesses(t *testing.T) {
	if path := os.Getenv(childPathEnv); path != "" {
		runChild(path, os.Getenv(childNameEnv))
		return
	}
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "journal.db")
	db, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	for r := range procRounds {
		v := journal.VM{Name: fmt.Sprint("contested-", r), State: journal.StateProvisioning}
		if err := db.Commit(ctx, &journal.Step{Create: &v}); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()

	type child struct {
		cmd   *exec.Cmd
		stdin io.WriteCloser
		out   *bufio.Scanner
		lines []string
	}
	children := make([]*child, 2)
	for i := range children {
		cmd := exec.Command(os.Args[0], "-test.run=^TestTwoProcesses$", "-test.count=1")
		cmd.Env = append(os.Environ(), childPathEnv+"="+path, fmt.Sprintf("%s=p%d", childNameEnv, i))
		cmd.Stderr = os.Stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		c := &child{cmd: cmd, stdin: stdin, out: bufio.NewScanner(stdout)}
		children[i] = c
		t.Cleanup(func() {
			// Only matters when the test failed early; the errors say nothing new.
			_ = c.cmd.Process.Kill()
			_ = c.cmd.Wait()
		})
	}
	for i, c := range children { // both open and ready before either starts
		for c.out.Scan() && c.out.Text() != "READY" {
		}
		if c.out.Err() != nil {
			t.Fatalf("child %d: %v", i, c.out.Err())
		}
	}
	for _, c := range children {
		if _, err := io.WriteString(c.stdin, "GO\n"); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for _, c := range children {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c.out.Scan() {
				c.lines = append(c.lines, c.out.Text())
			}
		}()
	}
	wg.Wait()
	for i, c := range children {
		if err := c.cmd.Wait(); err != nil {
			t.Errorf("child %d: %v", i, err)
		}
	}

	winners := map[string][]string{}
	for i, c := range children {
		done := false
		for _, l := range c.lines {
			f := strings.Fields(l)
			switch {
			case len(f) == 3 && f[0] == "WIN":
				winners[f[1]] = append(winners[f[1]], f[2])
			case len(f) > 0 && f[0] == "ERR":
				t.Errorf("child %d: %s", i, l)
			case l == "DONE":
				done = true
			}
		}
		if !done {
			t.Errorf("child %d did not finish; its output: %q", i, c.lines)
		}
	}
	db, err = sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for r := range procRounds {
		name := fmt.Sprint("contested-", r)
		v, err := db.GetVM(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if w := winners[name]; len(w) != 1 || v.Owner != w[0] {
			t.Errorf("%s: winners %q, stored owner %q; want exactly one, stored", name, w, v.Owner)
		}
	}
	for i := range children {
		for g := range procGoroutines {
			name := fmt.Sprintf("p%d-g%d", i, g)
			if v, err := db.GetVM(ctx, name); err != nil || v.Version != procRounds+1 {
				t.Errorf("%s: Version %d, %v; want %d", name, v.Version, err, procRounds+1)
			}
		}
	}
}

// runChild is one process of TestTwoProcesses: it reports on stdout.
func runChild(path, name string) {
	ctx := context.Background()
	db, err := sqlite.Open(ctx, path)
	if err != nil {
		fmt.Println("ERR open:", err)
		return
	}
	defer db.Close()
	fmt.Println("READY")
	if line, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil || line != "GO\n" {
		fmt.Println("ERR waiting for GO:", line, err)
		return
	}
	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Printf(format+"\n", args...)
	}
	var wg sync.WaitGroup
	for g := range procGoroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			owner := fmt.Sprintf("%s-g%d", name, g)
			own := journal.VM{Name: owner, State: journal.StateProvisioning, Owner: owner}
			if err := db.Commit(ctx, &journal.Step{Create: &own}); err != nil {
				say("ERR create %s: %v", owner, err)
				return
			}
			for r := range procRounds {
				vm := fmt.Sprint("contested-", r)
				_, err := db.Acquire(ctx, vm, owner, procT0, procT0.Add(time.Minute))
				var le *journal.LeasedError
				switch {
				case err == nil:
					say("WIN %s %s", vm, owner)
				case !errors.As(err, &le):
					say("ERR acquire %s: %v", vm, err)
				}
				own.Phase = fmt.Sprint("round-", r)
				s := &journal.Step{Update: &own, Events: []journal.Event{{VM: owner, Type: "round"}}}
				if err := db.Commit(ctx, s); err != nil {
					say("ERR commit %s: %v", owner, err)
				}
			}
		}()
	}
	wg.Wait()
	say("DONE")
}
