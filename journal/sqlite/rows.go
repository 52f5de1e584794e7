package sqlite

import (
	"database/sql"
	"fmt"

	"github.com/org/gpuprov/journal"
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

// scanner is a *sql.Row or *sql.Rows.
type scanner interface{ Scan(dest ...any) error }

func scanVM(s scanner) (journal.VM, error) {
	var (
		v                                      journal.VM
		state                                  string
		request, offer                         sql.NullString
		deadline, lease, created, updated, rdy sql.NullInt64
		ended, nextTry, expires                sql.NullInt64
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

// vmArgs returns the values of vmWriteCols: every VM column but the lease
// and version columns, name first.
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

// vmWriteCols are the columns of vmArgs.
var vmWriteCols = []string{"name", "id", "cluster", "request", "state", "phase", "attempt", "provider",
	"region", "zone", "offer", "price_per_hour", "instance_id", "ssh_host", "ssh_port", "ssh_user",
	"host_key", "deadline", "last_error", "last_error_kind", "created_at", "updated_at", "ready_at", "ended_at",
	"next_try", "expires_at"}

func scanAttempt(s scanner) (journal.Attempt, error) {
	var (
		a                    journal.Attempt
		state                string
		offer, prepared, ids sql.NullString
		sent, started, ended sql.NullInt64
		cleaned              int64
	)
	err := s.Scan(&a.VM, &a.N, &a.Provider, &a.Region, &a.Zone, &a.OfferKey, &offer, &state, &a.Phase,
		&a.Token, &prepared, &ids, &a.HostKey, &sent, &cleaned, &a.Error, &a.ErrorKind, &started, &ended)
	if err != nil {
		return journal.Attempt{}, err
	}
	a.State = journal.AttemptState(state)
	a.Offer, a.Prepared = goJSON(offer), goJSON(prepared)
	if a.InstanceIDs, err = goStrings(ids); err != nil {
		return journal.Attempt{}, fmt.Errorf("attempt %s/%d: %w", a.VM, a.N, err)
	}
	a.CreateSent, a.StartedAt, a.EndedAt = goTime(sent), goTime(started), goTime(ended)
	a.CleanedUp = cleaned != 0
	return a, nil
}

// attemptArgs returns the values of attemptCols.
func attemptArgs(a *journal.Attempt) ([]any, error) {
	var c conv
	args := []any{a.VM, a.N, a.Provider, a.Region, a.Zone, a.OfferKey, c.json("Attempt.Offer", a.Offer),
		string(a.State), a.Phase, a.Token, c.json("Attempt.Prepared", a.Prepared),
		c.strings(a.InstanceIDs), a.HostKey, c.time("Attempt.CreateSent", a.CreateSent),
		dbBool(a.CleanedUp), a.Error, a.ErrorKind, c.time("Attempt.StartedAt", a.StartedAt),
		c.time("Attempt.EndedAt", a.EndedAt)}
	return args, c.err
}

func scanEvent(s scanner) (journal.Event, error) {
	var (
		e journal.Event
		t sql.NullInt64
	)
	err := s.Scan(&e.Seq, &t, &e.VM, &e.Attempt, &e.Type, &e.Phase, &e.Provider, &e.Region, &e.Zone,
		&e.InstanceID, &e.ErrorKind, &e.Message, &e.Owner)
	e.Time = goTime(t)
	return e, err
}

// eventArgs returns the values of eventCols but seq.
func eventArgs(e *journal.Event) ([]any, error) {
	var c conv
	args := []any{c.time("Event.Time", e.Time), e.VM, e.Attempt, e.Type, e.Phase, e.Provider,
		e.Region, e.Zone, e.InstanceID, e.ErrorKind, e.Message, e.Owner}
	return args, c.err
}

func scanBlock(s scanner) (journal.Block, error) {
	var (
		b              journal.Block
		until, created sql.NullInt64
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
