package main

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/org/gpuprov/journal/sqlite"
)

// tree lists every path under dir, for comparing before and after.
func tree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		out = append(out, rel)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestCLIRefusedJournalLeavesNothing: a journal that cannot be used (a
// foreign file, another program's SQLite database, a truncated journal) is
// exit 2 with one line naming the file, and leaves the home folder exactly
// as it was: no SSH key generated, no -wal or -shm beside the file.
func TestCLIRefusedJournalLeavesNothing(t *testing.T) {
	c0 := newCLIEnv(t)
	sim := startSim(t, c0, simTimings)

	truncated := func(t *testing.T, path string) {
		full := filepath.Join(t.TempDir(), "full.db")
		db, err := sqlite.Open(context.Background(), full)
		if err != nil {
			t.Fatal(err)
		}
		db.Close()
		b, err := os.ReadFile(full)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, b[:len(b)/2], 0o600); err != nil {
			t.Fatal(err)
		}
	}
	otherApp := func(t *testing.T, path string) {
		db, err := sql.Open("sqlite", path)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		for _, s := range []string{"PRAGMA journal_mode = WAL", "CREATE TABLE notes (body TEXT)", "INSERT INTO notes VALUES ('mine')"} {
			if _, err := db.Exec(s); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, tc := range []struct {
		name string
		make func(t *testing.T, path string)
		want string
	}{
		{"foreign file", func(t *testing.T, path string) {
			if err := os.WriteFile(path, []byte("name,state\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		}, "not a SQLite database"},
		{"another program's SQLite database in WAL mode", otherApp, "not a gpuprov journal"},
		{"truncated journal", truncated, "not a SQLite database"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCLIEnv(t)
			c.writeConfig(sim.config)
			if err := os.MkdirAll(c.stateDir(), 0o700); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(c.stateDir(), "journal.db")
			tc.make(t, path)
			before := tree(t, c.home)
			for _, args := range [][]string{{"list"}, {"up", "--gpu", "h100", "--name", "r1", "--provider", "sim-a"}} {
				r := c.run(args...)
				if r.code != 2 {
					t.Fatalf("%s: exit %d, want 2\n%s%s", args[0], r.code, r.stdout, r.stderr)
				}
				want := "gpuprov: cannot use the journal: " + path + ": " + tc.want
				if !strings.HasPrefix(r.stderr, want) || strings.Count(r.stderr, "\n") != 1 {
					t.Errorf("%s: stderr %q, want one line starting %q", args[0], r.stderr, want)
				}
			}
			if after := tree(t, c.home); !slices.Equal(before, after) {
				t.Errorf("the home folder changed:\nbefore %q\nafter  %q", before, after)
			}
		})
	}
	if live := sim.live(t); len(live) != 0 {
		t.Errorf("a refused journal launched instances: %+v", live)
	}
}

// TestCLIUnknownAndDuplicateNames: an unknown VM is exit 2 with one sentence
// for every command that takes a name; a launch under the name of a VM that
// is not deleted is exit 2 and creates nothing.
func TestCLIUnknownAndDuplicateNames(t *testing.T) {
	c := newCLIEnv(t)
	sim := startSim(t, c, simTimings)
	c.writeConfig(sim.config)
	for _, args := range [][]string{{"show", "nosuch"}, {"down", "nosuch"}, {"ssh", "nosuch", "--", "true"}, {"health", "nosuch"}} {
		r := c.run(args...)
		want := "gpuprov: no VM named nosuch in the journal (`gpuprov list -a` lists them)\n"
		if r.code != 2 || r.stderr != want {
			t.Errorf("%s: exit %d, stderr %q; want 2 and %q", args[0], r.code, r.stderr, want)
		}
	}
	c.ok("up", "--gpu", "h100", "--name", "dup-1", "--provider", "sim-a", "--timeout", "60s")
	r := c.run("up", "--gpu", "h100", "--name", "dup-1", "--provider", "sim-a", "--timeout", "60s")
	if r.code != 2 || !strings.Contains(r.stderr, "a VM named dup-1 exists and is not deleted") || strings.Contains(r.stderr, ": gpuprov: ") {
		t.Errorf("duplicate: exit %d, stderr %q; want 2 and one sentence saying the name is taken", r.code, r.stderr)
	}
	if live := sim.live(t); len(live) != 1 {
		t.Errorf("%d instances live, want the first launch's one", len(live))
	}
	c.ok("down", "dup-1")
}

// TestCLISweepGrace: --grace 0 means no grace at all, as a user reads it
// (the library's zero value would mean its 10-minute default), and the
// default is the library's DefaultSweepGrace. The orphan is a VM launched
// after a copy of the journal was taken, found again once the copy is put
// back (a lost database).
func TestCLISweepGrace(t *testing.T) {
	c := newCLIEnv(t)
	sim := startSim(t, c, simTimings)
	c.writeConfig(sim.config)
	c.ok("list") // creates the journal and its installation id
	path := filepath.Join(c.stateDir(), "journal.db")
	saved, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	c.ok("up", "--gpu", "h100", "--name", "lost-1", "--provider", "sim-a", "--timeout", "60s")
	for _, suffix := range []string{"", "-wal", "-shm"} {
		_ = os.Remove(path + suffix) // the -wal and -shm are gone after a clean exit
	}
	if err := os.WriteFile(path, saved, 0o600); err != nil {
		t.Fatal(err)
	}

	if r := c.ok("sweep"); !strings.Contains(r.stdout, "no orphans") {
		t.Errorf("sweep with the default grace reported a seconds-old instance:\n%s", r.stdout)
	}
	r := c.ok("sweep", "--grace", "0")
	if !strings.Contains(r.stdout, "lost-1") {
		t.Errorf("sweep --grace 0 did not report the orphan:\n%s", r.stdout)
	}
	if r := c.run("sweep", "--help"); !strings.Contains(r.stdout, `(default 10m0s)`) {
		t.Errorf("--help does not show the default grace:\n%s", r.stdout)
	}
	if r := c.ok("sweep", "--grace", "0", "--delete"); !strings.Contains(r.stdout, "deleted") {
		t.Errorf("sweep --grace 0 --delete did not delete the orphan:\n%s", r.stdout)
	}
}

// TestCLIJournalUnreachable: a PostgreSQL journal whose server does not
// answer is one line that says the journal is unreachable and where, without
// the password, and launches nothing.
func TestCLIJournalUnreachable(t *testing.T) {
	c := newCLIEnv(t)
	sim := startSim(t, c, simTimings)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nobody listens there now
	const password = "s3cret-pw"
	c.writeConfig(fmt.Sprintf("journal = %q\n%s", "postgres://gpuprov:"+password+"@"+addr+"/gpuprov?connect_timeout=2", sim.config))
	for _, args := range [][]string{{"list"}, {"up", "--gpu", "h100", "--name", "u1", "--provider", "sim-a"}} {
		r := c.run(args...)
		if r.code == 0 {
			t.Fatalf("%s: exit 0 with the journal unreachable\n%s", args[0], r.stdout)
		}
		if !strings.Contains(r.stderr, "journal unreachable") || !strings.Contains(r.stderr, addr) || strings.Count(r.stderr, "\n") != 1 {
			t.Errorf("%s: stderr %q, want one line saying the journal at %s is unreachable", args[0], r.stderr, addr)
		}
		if strings.Contains(r.stderr, password) {
			t.Errorf("%s: stderr shows the password: %q", args[0], r.stderr)
		}
	}
	if live := sim.live(t); len(live) != 0 {
		t.Errorf("launched with no journal: %+v", live)
	}
}
