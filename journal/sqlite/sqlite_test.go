package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/journal/journaltest"
	"github.com/org/gpuprov/journal/sqlite"
)

// openTemp opens a journal in a new file under t's temp dir.
func openTemp(t *testing.T) *sqlite.DB {
	t.Helper()
	db, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "journal.db"))
	if err != nil {
		t.Fatal(err)
	}
	return db
}

func TestConformance(t *testing.T) {
	journaltest.RunOpener(t, journaltest.Opener{
		Open: func(t *testing.T) journal.Journal { return openTemp(t) },
		Reopen: func(t *testing.T, j journal.Journal) journal.Journal {
			db, err := sqlite.Open(context.Background(), j.(*sqlite.DB).Path())
			if err != nil {
				t.Fatal(err)
			}
			return db
		},
	})
}
