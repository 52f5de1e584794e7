package gpuprovtest

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/clock"
	"github.com/org/gpuprov/internal/rest/resttest"
	"github.com/org/gpuprov/journal/sqlite"
	"github.com/org/gpuprov/provider"
)

// Launched is what LaunchEchoed saw of one launch: its error, the message
// of every event the sinks got, and the SQLite journal's path.
type Launched struct {
	Err    error
	Events []string
	Path   string
}

// LaunchEchoed opens a SQLite journal in t's temp dir, builds the provider
// for the journal's installation, and launches req through a Provisioner on
// clk (backoff 100ms to 1s, then opts) with a sink noting every event. The
// provider's gateway is the test's: it answers the create with an echo of
// the credentials, a 500 first (retried) and then a 401, so the launch must
// fail as Credentials.
func LaunchEchoed(t testing.TB, clk clock.Clock, build func(installation string) provider.CloudProvider, req gpuprov.Request, opts ...gpuprov.Option) Launched {
	t.Helper()
	ctx := context.Background()
	l := Launched{Path: filepath.Join(t.TempDir(), "journal.db")}
	db, err := sqlite.Open(ctx, l.Path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	var mu sync.Mutex
	prov, err := gpuprov.New(db, append([]gpuprov.Option{gpuprov.WithClock(clk), gpuprov.WithProvider(build(db.Installation())),
		gpuprov.WithBackoff(100*time.Millisecond, time.Second, 1),
		gpuprov.WithEvents(func(ev gpuprov.Event) { mu.Lock(); l.Events = append(l.Events, ev.Message); mu.Unlock() })}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer prov.Close()
	_, l.Err = prov.Launch(ctx, req)
	if l.Err == nil || provider.KindOf(l.Err) != provider.Credentials {
		t.Fatalf("launch: %v, want the 401's credentials error", l.Err)
	}
	mu.Lock()
	defer mu.Unlock()
	l.Events = slices.Clone(l.Events)
	return l
}

// LaunchLeaks fails t when the launch error, the event messages or the
// bytes of the SQLite journal (and its -wal) of l hold any of secrets
// (name → value) in a form resttest.Leaks knows, and when the journal lacks the
// masked echo "[REDACTED]": the launch then did not exercise what the test
// claims.
func LaunchLeaks(t testing.TB, secrets map[string]string, l Launched) {
	t.Helper()
	var journal []byte
	for _, f := range []string{l.Path, l.Path + "-wal"} {
		b, err := os.ReadFile(f)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		journal = append(journal, b...)
	}
	msgs := strings.Join(l.Events, "\n")
	for name, secret := range secrets {
		if f := resttest.Leaks(l.Err.Error(), secret); len(f) > 0 {
			t.Errorf("the launch error holds the %s as %q: %v", name, f, l.Err)
		}
		if f := resttest.Leaks(msgs, secret); len(f) > 0 {
			t.Errorf("an event holds the %s as %q:\n%s", name, f, msgs)
		}
		if f := resttest.Leaks(string(journal), secret); len(f) > 0 {
			t.Errorf("the journal's bytes hold the %s as %q", name, f)
		}
	}
	if !bytes.Contains(journal, []byte("[REDACTED]")) {
		t.Error("the journal does not hold the masked echo: the test did not exercise what it claims")
	}
}
