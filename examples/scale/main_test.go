package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// TestMain lets the test binary play the roles the scenarios re-execute
// (the sim, the launcher, the recovering process).
func TestMain(m *testing.M) {
	if role := os.Getenv(roleEnv); role != "" {
		os.Exit(runRole(role, os.Args[1:]))
	}
	code := m.Run()
	if cliDir != "" {
		os.RemoveAll(cliDir)
	}
	os.Exit(code)
}

var (
	cliOnce sync.Once
	cliDir  string
	cliBin  string
	cliErr  error
)

// gpuprovCLI builds the gpuprov CLI once per test binary.
func gpuprovCLI(t *testing.T) string {
	t.Helper()
	cliOnce.Do(func() {
		cliDir, cliErr = os.MkdirTemp("", "gpuprov-chaos-cli-*")
		if cliErr != nil {
			return
		}
		cliBin = filepath.Join(cliDir, "gpuprov")
		out, err := exec.Command("go", "build", "-o", cliBin, "github.com/org/gpuprov/examples/gpuprov").CombinedOutput()
		if err != nil {
			cliErr = fmt.Errorf("building the CLI: %v\n%s", err, out)
		}
	})
	if cliErr != nil {
		t.Fatal(cliErr)
	}
	return cliBin
}
