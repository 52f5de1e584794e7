package pgtest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// ErrExternal is returned by Shutdown and StartAgain on a server named by
// GPUPROV_TEST_POSTGRES: the tests do not own it, so they never stop it.
var ErrExternal = errors.New("pgtest: the server is external (" + EnvURL + "): it is not stopped or started by the tests")

// Shutdown stops a private server and keeps its data directory, its port
// and its password, so that StartAgain brings the same databases back at
// the same URL: to the server's clients, an outage. mode is pg_ctl's
// shutdown mode: "fast" (open transactions are rolled back and the
// connections closed) or "immediate" (a crash: no checkpoint, and the next
// start replays the WAL). It returns once the server has stopped. A
// server left stopped makes Stop fail: start it again first.
func (s *Server) Shutdown(mode string) error {
	if s.external {
		return ErrExternal
	}
	switch mode {
	case "fast", "immediate":
	default:
		return fmt.Errorf("pgtest: shutdown mode %q: want \"fast\" or \"immediate\"", mode)
	}
	out, err := s.run("pg_ctl", "-D", s.data, "-m", mode, "-w", "-t", "60", "stop")
	if err != nil {
		return fmt.Errorf("pgtest: pg_ctl stop -m %s: %w\n%s", mode, err, out)
	}
	return nil
}

// StartAgain starts a server that Shutdown stopped, with the options of its
// last start (so on the same port; the server records them in its data
// directory's postmaster.opts, which is what `pg_ctl restart` reads too),
// and returns once it accepts connections. It fails if the port has been
// taken meanwhile.
func (s *Server) StartAgain() error {
	if s.external {
		return ErrExternal
	}
	b, err := os.ReadFile(filepath.Join(s.data, "postmaster.opts"))
	if err != nil {
		return fmt.Errorf("pgtest: the options of the last start: %w", err)
	}
	// `/path/postgres "-D" "/data" "-p" "5432" ...`: everything after the
	// program is shell-quoted arguments, which pg_ctl -o passes through
	// its shell as they are.
	_, opts, ok := strings.Cut(strings.TrimSpace(string(b)), ` "`)
	if !ok {
		return fmt.Errorf("pgtest: postmaster.opts holds no options: %q", b)
	}
	out, err := s.run("pg_ctl", "-D", s.data, "-o", `"`+opts, "-l", filepath.Join(s.dir, "log"), "-w", "-t", "60", "start")
	if err != nil {
		log, _ := os.ReadFile(filepath.Join(s.dir, "log")) // best effort: the start error is the one to report
		return fmt.Errorf("pgtest: pg_ctl start: %w\n%s\n%s", err, out, lastLines(log, 20))
	}
	return nil
}

// lastLines returns the last n lines of b.
func lastLines(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
