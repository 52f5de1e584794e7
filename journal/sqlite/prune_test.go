package sqlite

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/org/gpuprov/journal"
)

// TestMigrateVersion2JournalForPrune: a journal written by schema version 2
// (before the prune index) opens, gets vms_state_ended in place of
// vms_state, keeps its records, and prunes.
func TestMigrateVersion2JournalForPrune(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "journal.db")
	old := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).UnixNano()
	db := rawDB(t, path,
		"PRAGMA application_id = 1735422582",
		"CREATE TABLE gpuprov_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) STRICT",
		"INSERT INTO gpuprov_meta VALUES ('schema_version', '2'), ('installation', 'feedc0de00000002')",
		migrations[0], migrations[1])
	for _, vm := range []struct{ name, state string }{{"old-deleted", "deleted"}, {"old-ready", "ready"}} {
		for _, q := range []string{
			`INSERT INTO vms (name, id, cluster, state, phase, attempt, provider, region, zone, price_per_hour,
				instance_id, ssh_host, ssh_port, ssh_user, host_key, last_error, last_error_kind, owner, version, ended_at)
			VALUES (?1, 'x', '', ?2, '', 1, 'sim', 'r', 'r-a', 2.5, '', '', 0, '', '', '', '', '', 3, ?3)`,
			`INSERT INTO attempts (vm, n, provider, region, zone, offer_key, state, phase, token, host_key, cleaned_up, error, error_kind)
			VALUES (?1, 1, 'sim', 'r', 'r-a', 'k', 'torn-down', '', '', '', 1, '', '')`,
			`INSERT INTO events (time, vm, attempt, type, phase, provider, region, zone, instance_id, error_kind, message, owner)
			VALUES (?3, ?1, 1, 'deleted', '', '', '', '', '', '', '', '')`,
		} {
			if _, err := db.Exec(q, vm.name, vm.state, old); err != nil {
				t.Fatal(err)
			}
		}
	}
	db.Close()

	j, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if v, err := readVersion(ctx, j.db); err != nil || v != schemaVersion {
		t.Errorf("schema version: %d, %v; want %d", v, err, schemaVersion)
	}
	indexes := map[string]bool{}
	rows, err := j.db.QueryContext(ctx, "SELECT name FROM sqlite_schema WHERE type = 'index' AND tbl_name = 'vms'")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		indexes[n] = true
	}
	rows.Close()
	if !indexes["vms_state_ended"] || indexes["vms_state"] {
		t.Errorf("indexes of vms after migration: %v; want vms_state_ended and no vms_state", indexes)
	}
	if got, err := j.GetVM(ctx, "old-ready"); err != nil || got.State != journal.StateReady {
		t.Fatalf("old-ready after migration: %+v, %v", got, err)
	}
	res, err := j.Prune(ctx, journal.PruneOptions{Before: time.Unix(0, old+1), Now: time.Unix(0, old)})
	if err != nil || res != (journal.PruneResult{VMs: 1, Attempts: 1, Events: 1}) {
		t.Errorf("Prune of the migrated journal = %+v, %v; want 1 VM, 1 attempt, 1 event", res, err)
	}
	if as, err := j.Attempts(ctx, "old-ready"); err != nil || len(as) != 1 {
		t.Errorf("attempts of old-ready after Prune: %v, %v; want its one", as, err)
	}
}

// TestPruneQueriesUseIndexes: every statement of Prune finds its rows
// through an index, never by scanning a table, so a prune of a big journal
// costs what it removes.
func TestPruneQueriesUseIndexes(t *testing.T) {
	d, err := Open(context.Background(), filepath.Join(t.TempDir(), "journal.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for _, q := range []struct {
		sql  string
		args []any
		want string // an index the plan must use
	}{
		{pruneVMs, []any{1, 2, 3}, "vms_state_ended"},
		{pruneEvents, []any{"[]"}, "events_vm"},
		{pruneAttempts, []any{"[]"}, "sqlite_autoindex_attempts_1"},
		{pruneRows, []any{"[]"}, "sqlite_autoindex_vms_1"},
		{pruneBlocks, []any{1, 2}, "blocks_until"},
		{pruneVolumes, []any{1, 2}, "volumes_state_ended"},
	} {
		rows, err := d.db.Query("EXPLAIN QUERY PLAN "+q.sql, q.args...)
		if err != nil {
			t.Fatal(err)
		}
		var plan []string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		rows.Close()
		all := strings.Join(plan, "; ")
		for _, step := range plan {
			if strings.HasPrefix(step, "SCAN ") && !strings.HasPrefix(step, "SCAN json_each") {
				t.Errorf("%s\nscans a table: %s", q.sql, all)
			}
		}
		if !strings.Contains(all, q.want) {
			t.Errorf("%s\nplan %q does not use %s", q.sql, all, q.want)
		}
	}
}
