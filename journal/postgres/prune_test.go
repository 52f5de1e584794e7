package postgres

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/journal/postgres/pgtest"
)

// TestMigrateVersion2JournalForPrune: a journal written by schema version 2
// (before the prune index) opens, gets gpuprov_vms_state_ended in place of
// gpuprov_vms_state, keeps its records, and prunes.
func TestMigrateVersion2JournalForPrune(t *testing.T) {
	ctx := context.Background()
	srv := pgtest.Require(t)
	u := srv.NewSchema(t)
	old := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).UnixNano()
	setup := []string{
		"CREATE TABLE " + metaTable + " (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
		"CREATE TABLE " + versionTable + " (version INTEGER PRIMARY KEY, applied_at BIGINT NOT NULL)",
		"INSERT INTO " + versionTable + " VALUES (0, 1), (1, 1), (2, 1)",
		"INSERT INTO " + metaTable + " VALUES ('installation', 'feedc0de00000002')",
		migrations[0], migrations[1],
	}
	for _, vm := range []struct{ name, state string }{{"old-deleted", "deleted"}, {"old-ready", "ready"}} {
		setup = append(setup,
			`INSERT INTO gpuprov_vms (name, id, cluster, state, phase, attempt, provider, region, zone, price_per_hour,
				instance_id, ssh_host, ssh_port, ssh_user, host_key, last_error, last_error_kind, owner, version, ended_at)
			VALUES ('`+vm.name+`', 'x', '', '`+vm.state+`', '', 1, 'sim', 'r', 'r-a', 2.5, '', '', 0, '', '', '', '', '', 3, `+strconv.FormatInt(old, 10)+`)`,
			`INSERT INTO gpuprov_attempts (vm, n, provider, region, zone, offer_key, state, phase, token, host_key, cleaned_up, error, error_kind)
			VALUES ('`+vm.name+`', 1, 'sim', 'r', 'r-a', 'k', 'torn-down', '', '', '', true, '', '')`,
			`UPDATE gpuprov_event_seq SET last = last + 1`,
			`INSERT INTO gpuprov_events (seq, time, vm, attempt, type, phase, provider, region, zone, instance_id, error_kind, message, owner)
			SELECT last, `+strconv.FormatInt(old, 10)+`, '`+vm.name+`', 1, 'deleted', '', '', '', '', '', '', '', '' FROM gpuprov_event_seq`)
	}
	if err := srv.ExecURL(ctx, u, setup...); err != nil {
		t.Fatal(err)
	}

	j, err := Open(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if v, err := classify(ctx, j.pool); err != nil || v != schemaVersion {
		t.Errorf("schema version after Open: %d, %v; want %d", v, err, schemaVersion)
	}
	rows, err := j.pool.Query(ctx, "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema() AND tablename = $1", vmsTable)
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	has := map[string]bool{}
	for _, n := range names {
		has[n] = true
	}
	if !has["gpuprov_vms_state_ended"] || has["gpuprov_vms_state"] {
		t.Errorf("indexes of %s after migration: %v; want gpuprov_vms_state_ended and no gpuprov_vms_state", vmsTable, names)
	}
	res, err := j.Prune(ctx, journal.PruneOptions{Before: time.Unix(0, old+1), Now: time.Unix(0, old)})
	if err != nil || res != (journal.PruneResult{VMs: 1, Attempts: 1, Events: 1}) {
		t.Errorf("Prune of the migrated journal = %+v, %v; want 1 VM, 1 attempt, 1 event", res, err)
	}
	if got, err := j.GetVM(ctx, "old-ready"); err != nil || got.State != journal.StateReady {
		t.Errorf("old-ready after Prune: %+v, %v", got, err)
	}
	if as, err := j.Attempts(ctx, "old-ready"); err != nil || len(as) != 1 {
		t.Errorf("attempts of old-ready after Prune: %v, %v; want its one", as, err)
	}
}

// TestPruneQueriesCanUseIndexes: each statement of Prune has an index to
// find its rows by. (With seq scans disabled the planner picks it; on a
// small table it would rightly scan.)
func TestPruneQueriesCanUseIndexes(t *testing.T) {
	ctx := context.Background()
	srv := pgtest.Require(t)
	j, err := Open(ctx, srv.NewSchema(t))
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	conn, err := j.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SET enable_seqscan = off"); err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = conn.Exec(ctx, "RESET enable_seqscan") }() // a failed reset only slows later tests
	names := []string{"a", "b"}
	for _, q := range []struct {
		sql  string
		args []any
		want string
	}{
		{prunePick, []any{int64(1), 3}, "gpuprov_vms_state_ended"},
		{pruneEvents, []any{names}, "gpuprov_events_vm"},
		{pruneAttempts, []any{names}, "gpuprov_attempts_pkey"},
		{pruneRows, []any{names}, "gpuprov_vms_pkey"},
		{pruneBlocks, []any{int64(1), 2}, "gpuprov_blocks_until"},
		{pruneVolumes, []any{int64(1), 2}, "gpuprov_volumes_state_ended"},
	} {
		rows, err := conn.Query(ctx, "EXPLAIN "+q.sql, q.args...)
		if err != nil {
			t.Fatal(err)
		}
		plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		if all := strings.Join(plan, "\n"); !strings.Contains(all, q.want) {
			t.Errorf("%s\nplan does not use %s:\n%s", q.sql, q.want, all)
		}
	}
}

// TestMigrateVersion3JournalForMembers: a journal written by schema version
// 3 (before journal.Members) opens, gets gpuprov_members, keeps its VMs
// and their leases, and its replicas can beat at once.
func TestMigrateVersion3JournalForMembers(t *testing.T) {
	ctx := context.Background()
	srv := pgtest.Require(t)
	u := srv.NewSchema(t)
	err := srv.ExecURL(ctx, u,
		"CREATE TABLE "+metaTable+" (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
		"CREATE TABLE "+versionTable+" (version INTEGER PRIMARY KEY, applied_at BIGINT NOT NULL)",
		"INSERT INTO "+versionTable+" VALUES (0, 1), (1, 1), (2, 1), (3, 1)",
		"INSERT INTO "+metaTable+" VALUES ('installation', 'feedc0de00000003')",
		migrations[0], migrations[1], migrations[2],
		`INSERT INTO gpuprov_vms (name, id, cluster, state, phase, attempt, provider, region, zone, price_per_hour,
			instance_id, ssh_host, ssh_port, ssh_user, host_key, last_error, last_error_kind, owner, lease_expiry, version)
		VALUES ('old-1', 'x1', '', 'provisioning', 'boot', 1, 'sim', 'r', 'r-a', 2.5, 'i-1', '', 0, '', '', '', '', 'o1', 5000, 3)`)
	if err != nil {
		t.Fatal(err)
	}
	j, err := Open(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if v, err := classify(ctx, j.pool); err != nil || v != schemaVersion {
		t.Errorf("schema version after Open: %d, %v; want %d", v, err, schemaVersion)
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
	srv := pgtest.Require(t)
	u := srv.NewSchema(t)
	err := srv.ExecURL(ctx, u,
		"CREATE TABLE "+metaTable+" (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
		"CREATE TABLE "+versionTable+" (version INTEGER PRIMARY KEY, applied_at BIGINT NOT NULL)",
		"INSERT INTO "+versionTable+" VALUES (0, 1), (1, 1), (2, 1), (3, 1), (4, 1)",
		"INSERT INTO "+metaTable+" VALUES ('installation', 'feedc0de00000004')",
		migrations[0], migrations[1], migrations[2], migrations[3],
		`INSERT INTO gpuprov_vms (name, id, cluster, state, phase, attempt, provider, region, zone, price_per_hour,
			instance_id, ssh_host, ssh_port, ssh_user, host_key, last_error, last_error_kind, owner, lease_expiry, version)
		VALUES ('old-1', 'x1', '', 'ready', '', 1, 'sim', 'r', 'r-a', 2.5, 'i-1', '', 0, '', '', '', '', '', NULL, 3)`,
		`INSERT INTO gpuprov_attempts (vm, n, provider, region, zone, offer_key, state, phase, token, host_key, cleaned_up, error, error_kind)
		VALUES ('old-1', 1, 'sim', 'r', 'r-a', 'sim|r|r-a|t|od', 'succeeded', '', 'tok', '', false, '', '')`)
	if err != nil {
		t.Fatal(err)
	}
	j, err := Open(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if v, err := classify(ctx, j.pool); err != nil || v != schemaVersion {
		t.Errorf("schema version after Open: %d, %v; want %d", v, err, schemaVersion)
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
// 5 (before journal.Volumes) opens at version 6 with gpuprov_volumes, keeps
// its VMs, and a Step can create a volume and attach it to one of them.
func TestMigrateVersion5JournalForVolumes(t *testing.T) {
	ctx := context.Background()
	srv := pgtest.Require(t)
	u := srv.NewSchema(t)
	err := srv.ExecURL(ctx, u,
		"CREATE TABLE "+metaTable+" (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
		"CREATE TABLE "+versionTable+" (version INTEGER PRIMARY KEY, applied_at BIGINT NOT NULL)",
		"INSERT INTO "+versionTable+" VALUES (0, 1), (1, 1), (2, 1), (3, 1), (4, 1), (5, 1)",
		"INSERT INTO "+metaTable+" VALUES ('installation', 'feedc0de00000005')",
		migrations[0], migrations[1], migrations[2], migrations[3], migrations[4],
		`INSERT INTO gpuprov_vms (name, id, cluster, state, phase, attempt, provider, region, zone, price_per_hour,
			instance_id, ssh_host, ssh_port, ssh_user, host_key, last_error, last_error_kind, owner, lease_expiry, version)
		VALUES ('old-1', 'x1', '', 'ready', '', 1, 'sim', 'r', 'r-a', 2.5, 'i-1', '', 0, '', '', '', '', '', NULL, 3)`)
	if err != nil {
		t.Fatal(err)
	}
	j, err := Open(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if v, err := classify(ctx, j.pool); err != nil || v != 6 || schemaVersion != 6 {
		t.Errorf("schema version after Open: %d, %v; want 6", v, err)
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
