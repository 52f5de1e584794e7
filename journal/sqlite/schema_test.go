package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/org/gpuprov/journal"
)

// rawDB opens path through the bare driver with the journal's DSN, as a
// journal connection would, without Open's checks, and runs stmts.
func rawDB(t *testing.T, path string, stmts ...string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", dsn(path, false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	for _, s := range stmts {
		if _, err := db.Exec(s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	return db
}

// TestMigrate: migrate upgrades an older journal keeping its installation
// id, and itself refuses (inside its write transaction, writing nothing) a
// database of another program and a newer journal, whatever Open's
// read-only look saw before.
func TestMigrate(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		setup []string
		want  error
	}{
		{"from version 0", []string{
			"CREATE TABLE gpuprov_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) STRICT",
			"INSERT INTO gpuprov_meta VALUES ('schema_version', '0'), ('installation', 'feedc0de00000001')",
		}, nil},
		{"another program's tables", []string{"CREATE TABLE users (id INTEGER)"}, ErrNotJournal},
		{"newer journal", []string{
			"CREATE TABLE gpuprov_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) STRICT",
			"INSERT INTO gpuprov_meta VALUES ('schema_version', '99'), ('installation', 'feedc0de00000001')",
		}, ErrNewerSchema},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := rawDB(t, filepath.Join(t.TempDir(), "journal.db"), tc.setup...)
			conn, err := db.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			id, err := migrate(ctx, conn)
			conn.Close()
			if !errors.Is(err, tc.want) {
				t.Fatalf("migrate: %q, %v; want %v", id, err, tc.want)
			}
			var tables int
			if err := db.QueryRow("SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name IN ('vms', 'attempts', 'events', 'blocks')").Scan(&tables); err != nil {
				t.Fatal(err)
			}
			if tc.want != nil {
				if tables != 0 {
					t.Errorf("refused migrate created %d tables", tables)
				}
				return
			}
			if id != "feedc0de00000001" || tables != 4 {
				t.Errorf("migrate from version 0: installation %q, %d of 4 tables; want feedc0de00000001, all", id, tables)
			}
			v, err := readVersion(ctx, db)
			if err != nil || v != schemaVersion {
				t.Errorf("schema version after migrate: %d, %v; want %d", v, err, schemaVersion)
			}
		})
	}
}

// TestMigrateKeepsAVersion1Journal: a journal written by the first schema
// (before a waiting VM's next try and a ready VM's expiry were journaled)
// opens, keeps its VMs, and reads them back with those times zero; its VMs
// can then carry them.
func TestMigrateKeepsAVersion1Journal(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "journal.db")
	db := rawDB(t, path,
		"PRAGMA application_id = 1735422582",
		"CREATE TABLE gpuprov_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) STRICT",
		"INSERT INTO gpuprov_meta VALUES ('schema_version', '1'), ('installation', 'feedc0de00000001')",
		migrations[0],
		`INSERT INTO vms (name, id, cluster, request, state, phase, attempt, provider, region, zone,
			price_per_hour, instance_id, ssh_host, ssh_port, ssh_user, host_key, last_error,
			last_error_kind, owner, version, ready_at)
		VALUES ('old-1', 'x1', '', '{"gpu":"H100-80GB"}', 'ready', '', 1, 'sim', 'r', 'r-a',
			2.5, 'i-1', '127.0.0.1', 22, 'root', '', '', '', '', 3, 1000)`)
	db.Close()
	j, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	v, err := j.GetVM(ctx, "old-1")
	if err != nil {
		t.Fatal(err)
	}
	if v.State != "ready" || v.InstanceID != "i-1" || !v.NextTry.IsZero() || !v.ExpiresAt.IsZero() {
		t.Errorf("old VM after migration: state %s instance %s next try %v expires %v; want ready, i-1, zero, zero",
			v.State, v.InstanceID, v.NextTry, v.ExpiresAt)
	}
	if got, err := readVersion(ctx, j.db); err != nil || got != schemaVersion {
		t.Errorf("schema version: %d, %v; want %d", got, err, schemaVersion)
	}
}

// TestMigrateVersion3JournalForMembers: a journal written by schema version
// 3 (before journal.Members) opens, gets the members table, keeps its VMs
// and their leases, and its processes can beat at once.
func TestMigrateVersion3JournalForMembers(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "journal.db")
	db := rawDB(t, path,
		"PRAGMA application_id = 1735422582",
		"CREATE TABLE gpuprov_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) STRICT",
		"INSERT INTO gpuprov_meta VALUES ('schema_version', '3'), ('installation', 'feedc0de00000003')",
		migrations[0], migrations[1], migrations[2],
		`INSERT INTO vms (name, id, cluster, state, phase, attempt, provider, region, zone, price_per_hour,
			instance_id, ssh_host, ssh_port, ssh_user, host_key, last_error, last_error_kind, owner, lease_expiry, version)
		VALUES ('old-1', 'x1', '', 'provisioning', 'boot', 1, 'sim', 'r', 'r-a', 2.5, 'i-1', '', 0, '', '', '', '', 'o1', 5000, 3)`)
	db.Close()
	j, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if v, err := readVersion(ctx, j.db); err != nil || v != schemaVersion {
		t.Errorf("schema version: %d, %v; want %d", v, err, schemaVersion)
	}
	if j.Installation() != "feedc0de00000003" {
		t.Errorf("installation %q after migration, want feedc0de00000003", j.Installation())
	}
	v, err := j.GetVM(ctx, "old-1")
	if err != nil || v.Owner != "o1" || v.LeaseExpiry.UnixNano() != 5000 || v.Version != 3 || v.InstanceID != "i-1" {
		t.Errorf("old VM after migration: %+v, %v; want it as written", v, err)
	}
	now := time.Unix(0, 1e18)
	live, err := j.Beat(ctx, "p1", []string{"sim"}, now, now.Add(time.Minute))
	if err != nil || live["sim"] != 1 {
		t.Errorf("Beat on the migrated journal = %v, %v; want sim: 1", live, err)
	}
}

// TestMigrateVersion4JournalForOfferHistory: a journal written by schema
// version 4 opens at the current version; its attempts read back with no host and no
// acceptance, and outcomes can be counted at once.
func TestMigrateVersion4JournalForOfferHistory(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "journal.db")
	db := rawDB(t, path,
		"PRAGMA application_id = 1735422582",
		"CREATE TABLE gpuprov_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) STRICT",
		"INSERT INTO gpuprov_meta VALUES ('schema_version', '4'), ('installation', 'feedc0de00000004')",
		migrations[0], migrations[1], migrations[2], migrations[3],
		`INSERT INTO vms (name, id, cluster, state, phase, attempt, provider, region, zone, price_per_hour,
			instance_id, ssh_host, ssh_port, ssh_user, host_key, last_error, last_error_kind, owner, lease_expiry, version)
		VALUES ('old-1', 'x1', '', 'ready', '', 1, 'sim', 'r', 'r-a', 2.5, 'i-1', '', 0, '', '', '', '', '', NULL, 3)`,
		`INSERT INTO attempts (vm, n, provider, region, zone, offer_key, state, phase, token, host_key, cleaned_up, error, error_kind)
		VALUES ('old-1', 1, 'sim', 'r', 'r-a', 'sim|r|r-a|t|od', 'succeeded', '', 'tok', '', 0, '', '')`)
	db.Close()
	j, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if v, err := readVersion(ctx, j.db); err != nil || v != schemaVersion {
		t.Errorf("schema version: %d, %v; want %d", v, err, schemaVersion)
	}
	as, err := j.Attempts(ctx, "old-1")
	if err != nil || len(as) != 1 || as[0].Host != "" || as[0].Acceptance != nil || as[0].OfferKey != "sim|r|r-a|t|od" {
		t.Fatalf("old attempt after migration: %+v, %v", as, err)
	}
	a := as[0]
	a.Host, a.Acceptance = "m-7", json.RawMessage(`{"ok": true, "gpus": []}`)
	if err := j.Commit(ctx, &journal.Step{Attempts: []journal.Attempt{a}}); err != nil {
		t.Fatal(err)
	}
	if as, err := j.Attempts(ctx, "old-1"); err != nil || len(as) != 1 || as[0].Host != "m-7" || string(as[0].Acceptance) != `{"ok": true, "gpus": []}` {
		t.Errorf("the old attempt with a host and an acceptance result: %+v, %v", as, err)
	}
	now := time.Unix(1e9, 0)
	err = j.Commit(ctx, &journal.Step{Outcomes: []journal.Outcome{{OfferKey: "sim|r|r-a|t|od", Provider: "sim", Kind: journal.OutcomeCreated, At: now}}})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := j.OfferStats(ctx); err != nil || st["sim|r|r-a|t|od"].Created != 1 {
		t.Errorf("history on the migrated journal: %v, %v", st, err)
	}
}

// TestMigrateVersion5JournalForVolumes: a journal written by schema version
// 5 (before journal.Volumes) opens at version 6 with the volumes table,
// keeps its VMs, and a Step can create a volume and attach it to one of
// them.
func TestMigrateVersion5JournalForVolumes(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "journal.db")
	db := rawDB(t, path,
		"PRAGMA application_id = 1735422582",
		"CREATE TABLE gpuprov_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) STRICT",
		"INSERT INTO gpuprov_meta VALUES ('schema_version', '5'), ('installation', 'feedc0de00000005')",
		migrations[0], migrations[1], migrations[2], migrations[3], migrations[4],
		`INSERT INTO vms (name, id, cluster, state, phase, attempt, provider, region, zone, price_per_hour,
			instance_id, ssh_host, ssh_port, ssh_user, host_key, last_error, last_error_kind, owner, lease_expiry, version)
		VALUES ('old-1', 'x1', '', 'ready', '', 1, 'sim', 'r', 'r-a', 2.5, 'i-1', '', 0, '', '', '', '', '', NULL, 3)`)
	db.Close()
	j, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if v, err := readVersion(ctx, j.db); err != nil || v != 6 || schemaVersion != 6 {
		t.Errorf("schema version: %d, %v; want 6", v, err)
	}
	if j.Installation() != "feedc0de00000005" {
		t.Errorf("installation %q after migration, want feedc0de00000005", j.Installation())
	}
	if vs, err := j.ListVolumes(ctx, journal.VolumeListOptions{}); err != nil || len(vs) != 0 {
		t.Fatalf("volumes of the migrated journal: %v, %v; want none", vs, err)
	}
	old, err := j.GetVM(ctx, "old-1")
	if err != nil || old.Version != 3 || old.InstanceID != "i-1" {
		t.Fatalf("old VM after migration: %+v, %v; want it as written", old, err)
	}
	now := time.Unix(1e9, 0)
	vol := journal.Volume{Name: "data", ID: "v1", Provider: "sim", Zone: "r-a", SizeGB: 100, State: journal.VolumeCreating, CreatedAt: now}
	if err := j.Commit(ctx, &journal.Step{Volumes: []journal.VolumeWrite{{Volume: vol, Create: true}}}); err != nil {
		t.Fatal(err)
	}
	vol.Version, vol.State, vol.VM, vol.CloudID = 1, journal.VolumeAttached, "old-1", "disk-1"
	old.Phase = "attached"
	if err := j.Commit(ctx, &journal.Step{Update: &old, Volumes: []journal.VolumeWrite{{Volume: vol}}}); err != nil {
		t.Fatal(err)
	}
	if got, err := j.ListVolumes(ctx, journal.VolumeListOptions{VM: "old-1", Live: true}); err != nil || len(got) != 1 ||
		got[0].CloudID != "disk-1" || got[0].Version != 2 {
		t.Errorf("the old VM's volumes: %+v, %v; want data at Version 2", got, err)
	}
}
