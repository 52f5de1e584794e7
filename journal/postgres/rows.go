package postgres

import (
	"strconv"
	"strings"

	"github.com/org/gpuprov/journal"
)

// Table names. Every table carries the gpuprov_ prefix, so a journal can
// share a database (or a schema) with other programs' tables without a
// clash; Open still refuses a schema that holds tables but no journal.
const (
	metaTable     = "gpuprov_meta"
	versionTable  = "gpuprov_schema_version"
	vmsTable      = "gpuprov_vms"
	attemptsTable = "gpuprov_attempts"
	eventsTable   = "gpuprov_events"
	seqTable      = "gpuprov_event_seq"
	blocksTable   = "gpuprov_blocks"
)

// Column lists, in the order the scan and args functions below use.
const (
	vmCols = `name, id, cluster, request, state, phase, attempt, provider, region, zone, offer,
		price_per_hour, instance_id, ssh_host, ssh_port, ssh_user, host_key, deadline, last_error,
		last_error_kind, owner, lease_expiry, version, created_at, updated_at, ready_at, ended_at,
		next_try, expires_at`
	attemptCols = `vm, n, provider, region, zone, offer_key, offer, state, phase, token, prepared,
		instance_ids, host_key, create_sent, cleaned_up, error, error_kind, started_at, ended_at`
	eventCols = `seq, time, vm, attempt, type, phase, provider, region, zone, instance_id,
		error_kind, message, owner`
	blockCols = `key, scope, provider, error_kind, reason, until, created_at`
)

// scanner is a pgx.Row or pgx.Rows.
type scanner interface{ Scan(dest ...any) error }

func scanVM(s scanner) (journal.VM, error) {
	var (
		v                                      journal.VM
		state                                  string
		request, offer                         *string
		deadline, lease, created, updated, rdy *int64
		ended, nextTry, expires                *int64
	)
	err := s.Scan(&v.Name, &v.ID, &v.Cluster, &request, &state, &v.Phase, &v.Attempt, &v.Provider,
		&v.Region, &v.Zone, &offer, &v.PricePerHour, &v.InstanceID, &v.SSHHost, &v.SSHPort, &v.SSHUser,
		&v.HostKey, &deadline, &v.LastError, &v.LastErrorKind, &v.Owner, &lease, &v.Version,
		&created, &updated, &rdy, &ended, &nextTry, &expires)
	if err != nil {
		return journal.VM{}, err
	}
	v.State = journal.VMState(state)
	v.Request, v.Offer = goJSON(request), goJSON(offer)
	v.Deadline, v.LeaseExpiry = goTime(deadline), goTime(lease)
	v.CreatedAt, v.UpdatedAt, v.ReadyAt, v.EndedAt = goTime(created), goTime(updated), goTime(rdy), goTime(ended)
	v.NextTry, v.ExpiresAt = goTime(nextTry), goTime(expires)
	return v, nil
}

// vmWriteCols are the columns of vmArgs: every VM column but the lease and
// version columns, name first.
var vmWriteCols = []string{"name", "id", "cluster", "request", "state", "phase", "attempt", "provider",
	"region", "zone", "offer", "price_per_hour", "instance_id", "ssh_host", "ssh_port", "ssh_user",
	"host_key", "deadline", "last_error", "last_error_kind", "created_at", "updated_at", "ready_at", "ended_at",
	"next_try", "expires_at"}

// vmArgs returns the values of vmWriteCols.
func vmArgs(v *journal.VM) ([]any, error) {
	var c conv
	args := []any{v.Name, v.ID, v.Cluster, c.json("VM.Request", v.Request), string(v.State), v.Phase,
		v.Attempt, v.Provider, v.Region, v.Zone, c.json("VM.Offer", v.Offer), v.PricePerHour,
		v.InstanceID, v.SSHHost, v.SSHPort, v.SSHUser, v.HostKey, c.time("VM.Deadline", v.Deadline),
		v.LastError, v.LastErrorKind, c.time("VM.CreatedAt", v.CreatedAt),
		c.time("VM.UpdatedAt", v.UpdatedAt), c.time("VM.ReadyAt", v.ReadyAt),
		c.time("VM.EndedAt", v.EndedAt), c.time("VM.NextTry", v.NextTry), c.time("VM.ExpiresAt", v.ExpiresAt)}
	return args, c.err
}

func scanAttempt(s scanner) (journal.Attempt, error) {
	var (
		a                    journal.Attempt
		state                string
		offer, prepared      *string
		ids                  []string
		sent, started, ended *int64
	)
	err := s.Scan(&a.VM, &a.N, &a.Provider, &a.Region, &a.Zone, &a.OfferKey, &offer, &state, &a.Phase,
		&a.Token, &prepared, &ids, &a.HostKey, &sent, &a.CleanedUp, &a.Error, &a.ErrorKind, &started, &ended)
	if err != nil {
		return journal.Attempt{}, err
	}
	a.State = journal.AttemptState(state)
	a.Offer, a.Prepared = goJSON(offer), goJSON(prepared)
	a.InstanceIDs = goStrings(ids)
	a.CreateSent, a.StartedAt, a.EndedAt = goTime(sent), goTime(started), goTime(ended)
	return a, nil
}

// attemptArgs returns the values of attemptCols.
func attemptArgs(a *journal.Attempt) ([]any, error) {
	var c conv
	args := []any{a.VM, a.N, a.Provider, a.Region, a.Zone, a.OfferKey, c.json("Attempt.Offer", a.Offer),
		string(a.State), a.Phase, a.Token, c.json("Attempt.Prepared", a.Prepared),
		dbStrings(a.InstanceIDs), a.HostKey, c.time("Attempt.CreateSent", a.CreateSent),
		a.CleanedUp, a.Error, a.ErrorKind, c.time("Attempt.StartedAt", a.StartedAt),
		c.time("Attempt.EndedAt", a.EndedAt)}
	return args, c.err
}

func scanEvent(s scanner) (journal.Event, error) {
	var (
		e journal.Event
		t *int64
	)
	err := s.Scan(&e.Seq, &t, &e.VM, &e.Attempt, &e.Type, &e.Phase, &e.Provider, &e.Region, &e.Zone,
		&e.InstanceID, &e.ErrorKind, &e.Message, &e.Owner)
	e.Time = goTime(t)
	return e, err
}

func scanBlock(s scanner) (journal.Block, error) {
	var (
		b              journal.Block
		until, created *int64
	)
	err := s.Scan(&b.Key, &b.Scope, &b.Provider, &b.ErrorKind, &b.Reason, &until, &created)
	b.Until, b.CreatedAt = goTime(until), goTime(created)
	return b, err
}

// blockArgs returns the values of blockCols.
func blockArgs(b *journal.Block) ([]any, error) {
	var c conv
	args := []any{b.Key, b.Scope, b.Provider, b.ErrorKind, b.Reason, c.time("Block.Until", b.Until),
		c.time("Block.CreatedAt", b.CreatedAt)}
	return args, c.err
}

// params returns "$from, $from+1, ..." for n parameters.
func params(from, n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("$")
		b.WriteString(strconv.Itoa(from + i))
	}
	return b.String()
}

// assignments returns "col = $from, ..." for cols.
func assignments(cols []string, from int) string {
	parts := make([]string, len(cols))
	for i, c := range cols {
		parts[i] = c + " = $" + strconv.Itoa(from+i)
	}
	return strings.Join(parts, ", ")
}

// splitCols splits a column list constant.
func splitCols(cols string) []string {
	f := strings.Split(cols, ",")
	for i := range f {
		f[i] = strings.TrimSpace(f[i])
	}
	return f
}
