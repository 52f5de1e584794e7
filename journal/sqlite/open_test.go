package sqlite_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/journal/sqlite"
)

// rawExec runs statements on path through the bare driver, as another
// program would, and closes the database (checkpointing its WAL).
func rawExec(t *testing.T, path string, stmts ...string) {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, s := range stmts {
		if _, err := db.Exec(s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

// TestFileModes: the database and its -wal and -shm files are 0600.
func TestFileModes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.db")
	db, err := sqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	v := journal.VM{Name: "vm-a", State: journal.StatePending}
	if err := db.Commit(context.Background(), &journal.Step{Create: &v}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatalf("%v (WAL mode keeps -wal and -shm while the journal is open)", err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", p, fi.Mode().Perm())
		}
	}
}

// TestOpenRefuses: files that are not journals this code can open are
// refused with an error naming the file and saying why, byte for byte
// untouched.
func TestOpenRefuses(t *testing.T) {
	for _, tc := range []struct {
		name    string
		make    func(t *testing.T, path string)
		want    error
		message string
	}{
		{"text file", func(t *testing.T, path string) {
			writeFile(t, path, []byte("name,state\nvm-a,ready\n"))
		}, sqlite.ErrNotDatabase, `not a SQLite database (its first bytes are "name,state\nvm-a,"`},
		{"shorter than a header", func(t *testing.T, path string) {
			writeFile(t, path, []byte("SQLite"))
		}, sqlite.ErrNotDatabase, `not a SQLite database (its first bytes are "SQLite"`},
		{"corrupt after the header", func(t *testing.T, path string) {
			writeFile(t, path, append([]byte("SQLite format 3\x00"), bytes.Repeat([]byte{0xa5}, 8192)...))
		}, sqlite.ErrNotDatabase, "not a SQLite database"},
		{"another program's database", func(t *testing.T, path string) {
			rawExec(t, path, "CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)", "INSERT INTO users (name) VALUES ('ada')")
		}, sqlite.ErrNotJournal, "not a gpuprov journal"},
		{"another program's application_id", func(t *testing.T, path string) {
			rawExec(t, path, "PRAGMA application_id = 1234")
		}, sqlite.ErrNotJournal, "not a gpuprov journal"},
		{"another program's database in WAL mode", func(t *testing.T, path string) {
			rawExec(t, path, "PRAGMA journal_mode = WAL", "CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
		}, sqlite.ErrNotJournal, "not a gpuprov journal"},
		{"truncated journal", func(t *testing.T, path string) {
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
			writeFile(t, path, b[:len(b)/2])
		}, sqlite.ErrNotDatabase, "not a SQLite database"},
		{"newer schema", func(t *testing.T, path string) {
			db, err := sqlite.Open(context.Background(), path)
			if err != nil {
				t.Fatal(err)
			}
			db.Close()
			rawExec(t, path, "UPDATE gpuprov_meta SET value = '99' WHERE key = 'schema_version'")
		}, sqlite.ErrNewerSchema, "schema version 99"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "journal.db")
			tc.make(t, path)
			before, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			listBefore := listDir(t, filepath.Dir(path))
			db, err := sqlite.Open(context.Background(), path)
			if listAfter := listDir(t, filepath.Dir(path)); listAfter != listBefore {
				t.Errorf("Open left files behind: directory held %s, now %s", listBefore, listAfter)
			}
			if err == nil {
				db.Close()
				t.Fatal("Open succeeded")
			}
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), tc.message) {
				t.Errorf("Open: %v; want %v, naming %s and saying %q", err, tc.want, path, tc.message)
			}
			after, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(before, after) {
				t.Errorf("Open modified the refused file (%d bytes before, %d after)", len(before), len(after))
			}
		})
	}
}

// listDir lists the names in dir, for comparing before and after.
func listDir(t *testing.T, dir string) string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return "[" + strings.Join(names, " ") + "]"
}

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestOpenBadPlaces: a missing or non-directory parent, and a directory in
// place of the file, are errors naming the path; nothing is created.
func TestOpenBadPlaces(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "plain"), []byte("x"))
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, path, says string
	}{
		{"missing directory", filepath.Join(dir, "missing", "journal.db"), filepath.Join(dir, "missing") + " does not exist"},
		{"parent is a file", filepath.Join(dir, "plain", "journal.db"), filepath.Join(dir, "plain") + " is not a directory"},
		{"path is a directory", filepath.Join(dir, "sub"), "not a regular file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db, err := sqlite.Open(context.Background(), tc.path)
			if err == nil {
				db.Close()
				t.Fatal("Open succeeded")
			}
			if !strings.Contains(err.Error(), tc.path) || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("Open: %v; want it to name %s and say %q", err, tc.path, tc.says)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(dir, "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Open created the missing directory: %v", err)
	}
}

// readOnlyDir makes dir unwritable for this process until the test ends:
// by its mode, or, for root (whom modes do not stop), by the immutable
// attribute.
func readOnlyDir(t *testing.T, dir string) {
	t.Helper()
	if os.Geteuid() != 0 {
		if err := os.Chmod(dir, 0o500); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.Chmod(dir, 0o700) }) // so TempDir can remove it
		return
	}
	if out, err := exec.Command("chattr", "+i", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot make a directory unwritable for root: chattr: %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("chattr", "-i", dir).Run() }) // so TempDir can remove it
}

// TestOpenUnwritableDir: a directory the process cannot write is an error
// naming the path, for a new journal and for an existing one (WAL mode
// creates files next to it).
func TestOpenUnwritableDir(t *testing.T) {
	t.Run("new journal", func(t *testing.T) {
		dir := t.TempDir()
		readOnlyDir(t, dir)
		path := filepath.Join(dir, "journal.db")
		db, err := sqlite.Open(context.Background(), path)
		if err == nil {
			db.Close()
			t.Fatal("Open succeeded")
		}
		if !strings.Contains(err.Error(), path) || !errors.Is(err, fs.ErrPermission) {
			t.Errorf("Open: %v; want a permission error naming %s", err, path)
		}
	})
	t.Run("existing journal", func(t *testing.T) {
		dir := t.TempDir()
		path := filepath.Join(dir, "journal.db")
		db, err := sqlite.Open(context.Background(), path)
		if err != nil {
			t.Fatal(err)
		}
		db.Close()
		readOnlyDir(t, dir)
		db, err = sqlite.Open(context.Background(), path)
		if err == nil {
			db.Close()
			t.Fatal("Open succeeded")
		}
		if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "can this process create files in "+dir) {
			t.Errorf("Open: %v; want it to name %s and ask about %s", err, path, dir)
		}
	})
}

// TestOpenAcceptsEmpty: an empty file, and a SQLite database with no
// tables, become journals.
func TestOpenAcceptsEmpty(t *testing.T) {
	for _, tc := range []struct {
		name string
		make func(t *testing.T, path string)
	}{
		{"empty file", func(t *testing.T, path string) { writeFile(t, path, nil) }},
		{"database without tables", func(t *testing.T, path string) { rawExec(t, path, "PRAGMA user_version = 3") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "journal.db")
			tc.make(t, path)
			db, err := sqlite.Open(context.Background(), path)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			v := journal.VM{Name: "vm-a", State: journal.StatePending}
			if err := db.Commit(context.Background(), &journal.Step{Create: &v}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestOpenConcurrently: processes opening one new file at once all succeed
// and agree on the installation id.
func TestOpenConcurrently(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.db")
	const n = 8
	ids := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			db, err := sqlite.Open(context.Background(), path)
			if err != nil {
				errs[i] = err
				return
			}
			ids[i] = db.Installation()
			errs[i] = db.Close()
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if id != ids[0] || len(id) != 16 {
			t.Fatalf("installation ids %q: want one 16-digit id", ids)
		}
	}
}

// TestURLs: journal.Open accepts the three URL forms and refuses others.
func TestURLs(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	for _, tc := range []struct {
		url, file string // file: "" when Open must fail
	}{
		{"sqlite:" + filepath.Join(dir, "a.db"), filepath.Join(dir, "a.db")},
		{"sqlite://" + filepath.Join(dir, "b.db"), filepath.Join(dir, "b.db")},
		{"sqlite:c.db", filepath.Join(dir, "c.db")},
		{"sqlite:", ""},
		{"sqlite://host/d.db", ""},
		{"sqlite:" + filepath.Join(dir, "e.db") + "?mode=ro", ""},
	} {
		t.Run(tc.url, func(t *testing.T) {
			j, err := journal.Open(context.Background(), tc.url)
			if tc.file == "" {
				if err == nil {
					j.Close()
					t.Fatal("Open succeeded")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer j.Close()
			if got := j.(*sqlite.DB).Path(); got != tc.file {
				t.Errorf("Path() = %s, want %s", got, tc.file)
			}
			if _, err := os.Stat(tc.file); err != nil {
				t.Error(err)
			}
		})
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "d.db") || strings.HasPrefix(e.Name(), "e.db") {
			t.Errorf("a refused URL created %s", e.Name())
		}
	}
}
