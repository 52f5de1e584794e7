package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/journal"

	// Journal backends and cloud adapters, registered for their side effect.
	// provider/all imports every adapter gpuprov ships.
	_ "github.com/org/gpuprov/journal/postgres" // journal = "postgres://…": the journal a team's services share
	_ "github.com/org/gpuprov/journal/sqlite"
	_ "github.com/org/gpuprov/provider/all"
)

// Exit codes.
const (
	exitOK          = 0 // success
	exitFailure     = 1 // provisioning (or any runtime) failure
	exitUsage       = 2 // usage, bad flags, invalid request, bad config, journal directory problems
	exitInterrupted = 3 // interrupted by SIGINT/SIGTERM
)

// exitError carries the exit code of a failed command. A silent one has
// already said everything (ssh passing on the remote exit code).
type exitError struct {
	code   int
	err    error
	silent bool
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func usageErrorf(format string, args ...any) error {
	return &exitError{code: exitUsage, err: fmt.Errorf(format, args...)}
}

// classify maps an error returned by a command's RunE to an exit code.
func classify(err error) *exitError {
	var ee *exitError
	if errors.As(err, &ee) {
		return ee
	}
	var ce *configError
	var de *dirError
	switch {
	case errors.As(err, &ce), errors.As(err, &de), errors.Is(err, gpuprov.ErrInvalidRequest):
		return &exitError{code: exitUsage, err: err}
	case errors.Is(err, journal.ErrExists):
		// A launch under a name a VM that is not deleted holds: refused
		// before anything was created for it.
		return &exitError{code: exitUsage, err: err}
	}
	return &exitError{code: exitFailure, err: err}
}

// runE wraps a command's body so that its errors carry their exit code;
// errors cobra raises itself (unknown command, bad flag, wrong arguments)
// then stay unwrapped, and main gives them exit code 2.
func runE(fn func(cmd *cobra.Command, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		if err := fn(cmd, args); err != nil {
			return classify(err)
		}
		return nil
	}
}

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

// run runs the CLI with args and returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	e := &env{stdout: stdout, stderr: stderr}
	root := newRoot(e)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	var ee *exitError
	if !errors.As(err, &ee) {
		// cobra's own: unknown command or flag, wrong number of arguments.
		fmt.Fprintf(stderr, "gpuprov: %v\nRun 'gpuprov --help' for usage.\n", err)
		return exitUsage
	}
	if !ee.silent {
		msg := ee.err.Error()
		var ce *configError
		if !errors.As(ee.err, &ce) {
			msg = strings.TrimSpace(msg)
		}
		fmt.Fprintf(stderr, "gpuprov: %s\n", onePrefix(msg))
	}
	return ee.code
}

// onePrefix drops the "gpuprov: " that the library's errors carry at each
// level they were wrapped ("gpuprov: launch x failed: gpuprov: no offers"):
// the CLI prints the one prefix. A path ending in /gpuprov is left alone.
func onePrefix(msg string) string {
	msg = strings.TrimPrefix(msg, "gpuprov: ")
	return strings.ReplaceAll(msg, ": gpuprov: ", ": ")
}
