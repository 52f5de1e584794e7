package gpuprovtest

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/clock"
	"github.com/org/gpuprov/journal/sqlite"
	"github.com/org/gpuprov/provider"
)

// New opens a SQLite journal in t's temp dir, builds the providers for the
// journal's installation, and returns a Provisioner on them and clk with a
// test's backoff (100ms to 1s), then opts; both are closed at the end of t.
// It is the world of an adapter's Provisioner-level test: a failover, a
// teardown, a block scope.
func New(t testing.TB, clk clock.Clock, build func(installation string) []provider.CloudProvider, opts ...gpuprov.Option) (*gpuprov.Provisioner, *sqlite.DB) {
	t.Helper()
	db, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "journal.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	base := []gpuprov.Option{gpuprov.WithClock(clk), gpuprov.WithProvider(build(db.Installation())...),
		gpuprov.WithBackoff(100*time.Millisecond, time.Second, 1)}
	p, err := gpuprov.New(db, append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p, db
}
