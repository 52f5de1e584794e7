package main

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"time"

	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/provider"
)

// errKilled is what a killed replica's writes and cloud calls fail with.
var errKilled = errors.New("replica killed")

// switchOff is a replica's power switch (see journal/postgres/replicatest):
// once off, the replica's journal writes and cloud calls fail, as if its
// process had died at that instant.
type switchOff struct{ off atomic.Bool }

func (s *switchOff) kill()      { s.off.Store(true) }
func (s *switchOff) dead() bool { return s.off.Load() }

// killJournal fails every write once the switch is off; leases are left as
// a dead process leaves them.
type killJournal struct {
	journal.Journal
	sw *switchOff
}

func (k *killJournal) Commit(ctx context.Context, s *journal.Step) error {
	if k.sw.dead() {
		return errKilled
	}
	return k.Journal.Commit(ctx, s)
}

func (k *killJournal) Acquire(ctx context.Context, name, owner string, now, expiry time.Time, dead ...string) (journal.VM, error) {
	if k.sw.dead() {
		return journal.VM{}, errKilled
	}
	return k.Journal.Acquire(ctx, name, owner, now, expiry, dead...)
}

func (k *killJournal) Renew(ctx context.Context, owner string, expiry time.Time, names []string) ([]string, error) {
	if k.sw.dead() {
		return nil, errKilled
	}
	return k.Journal.Renew(ctx, owner, expiry, names)
}

func (k *killJournal) Release(ctx context.Context, name, owner string) error {
	if k.sw.dead() {
		return errKilled
	}
	return k.Journal.Release(ctx, name, owner)
}

// killProvider refuses every cloud call once the switch is off.
type killProvider struct {
	provider.CloudProvider
	sw *switchOff
}

func (k *killProvider) check(op string) error {
	if k.sw.dead() {
		return provider.Errorf(provider.Failed, k.Name(), op, "%w", errKilled)
	}
	return nil
}

func (k *killProvider) Plan(ctx context.Context, r *provider.ResourceRequest) ([]provider.Offer, error) {
	if err := k.check("plan"); err != nil {
		return nil, err
	}
	return k.CloudProvider.Plan(ctx, r)
}

func (k *killProvider) Prepare(ctx context.Context, o *provider.Offer, s *provider.InstanceSpec) (json.RawMessage, error) {
	if err := k.check("prepare"); err != nil {
		return nil, err
	}
	return k.CloudProvider.Prepare(ctx, o, s)
}

func (k *killProvider) Create(ctx context.Context, o *provider.Offer, prep json.RawMessage, s *provider.InstanceSpec) (string, error) {
	if err := k.check("create"); err != nil {
		return "", err
	}
	return k.CloudProvider.Create(ctx, o, prep, s)
}

func (k *killProvider) Observe(ctx context.Context, loc provider.Location, vm string) ([]provider.Observed, error) {
	if err := k.check("observe"); err != nil {
		return nil, err
	}
	return k.CloudProvider.Observe(ctx, loc, vm)
}

func (k *killProvider) Delete(ctx context.Context, loc provider.Location, vm string, ids []string) error {
	if err := k.check("delete"); err != nil {
		return err
	}
	return k.CloudProvider.Delete(ctx, loc, vm, ids)
}

func (k *killProvider) Cleanup(ctx context.Context, loc provider.Location, vm string) error {
	if err := k.check("cleanup"); err != nil {
		return err
	}
	return k.CloudProvider.Cleanup(ctx, loc, vm)
}

func (k *killProvider) List(ctx context.Context, loc provider.Location) ([]provider.Observed, error) {
	if err := k.check("list"); err != nil {
		return nil, err
	}
	return k.CloudProvider.(provider.Lister).List(ctx, loc)
}

func (k *killProvider) Diagnose(ctx context.Context, loc provider.Location, vm, id string) (provider.Diagnosis, error) {
	if err := k.check("diagnose"); err != nil {
		return provider.Diagnosis{}, err
	}
	return k.CloudProvider.(provider.Diagnoser).Diagnose(ctx, loc, vm, id)
}
