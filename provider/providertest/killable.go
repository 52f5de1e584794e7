package providertest

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"

	"github.com/org/gpuprov/provider"
)

// ErrKilled is what a killed provider's calls fail with.
var ErrKilled = errors.New("providertest: process killed")

// Killable wraps a provider for engine tests that simulate the death of the
// process using it: once dead reports true every call fails (as Failed,
// wrapping ErrKilled), as if the process had died before sending it; a
// call already under way completes, as a request on the wire would. What
// WithList returns implements provider.Lister and provider.NameLister
// exactly when p does. Refused counts the mutations (prepare, create,
// delete, cleanup) refused after the death.
func Killable(p provider.CloudProvider, dead func() bool) *Killed {
	return &Killed{CloudProvider: p, dead: dead}
}

// Killed is a provider wrapped by Killable.
type Killed struct {
	provider.CloudProvider
	dead    func() bool
	refused atomic.Int64
}

// WithList returns k as a provider.Lister when the wrapped provider is one
// (and as a provider.NameLister too when it is also that), else k alone.
func (k *Killed) WithList() provider.CloudProvider {
	if _, ok := k.CloudProvider.(provider.Lister); !ok {
		return k
	}
	if _, ok := k.CloudProvider.(provider.NameLister); ok {
		return killedNameLister{killedLister{k}}
	}
	return killedLister{k}
}

// Refused is how many mutations were refused after the death.
func (k *Killed) Refused() int64 { return k.refused.Load() }

func (k *Killed) check(op string, mutation bool) error {
	if !k.dead() {
		return nil
	}
	if mutation {
		k.refused.Add(1)
	}
	return provider.Errorf(provider.Failed, k.Name(), op, "%w", ErrKilled)
}

// Plan implements provider.CloudProvider.
func (k *Killed) Plan(ctx context.Context, r *provider.ResourceRequest) ([]provider.Offer, error) {
	if err := k.check("plan", false); err != nil {
		return nil, err
	}
	return k.CloudProvider.Plan(ctx, r)
}

// Prepare implements provider.CloudProvider.
func (k *Killed) Prepare(ctx context.Context, o *provider.Offer, s *provider.InstanceSpec) (json.RawMessage, error) {
	if err := k.check("prepare", true); err != nil {
		return nil, err
	}
	return k.CloudProvider.Prepare(ctx, o, s)
}

// Create implements provider.CloudProvider.
func (k *Killed) Create(ctx context.Context, o *provider.Offer, prep json.RawMessage, s *provider.InstanceSpec) (string, error) {
	if err := k.check("create", true); err != nil {
		return "", err
	}
	return k.CloudProvider.Create(ctx, o, prep, s)
}

// Observe implements provider.CloudProvider.
func (k *Killed) Observe(ctx context.Context, loc provider.Location, vm string) ([]provider.Observed, error) {
	if err := k.check("observe", false); err != nil {
		return nil, err
	}
	return k.CloudProvider.Observe(ctx, loc, vm)
}

// Delete implements provider.CloudProvider.
func (k *Killed) Delete(ctx context.Context, loc provider.Location, vm string, ids []string) error {
	if err := k.check("delete", true); err != nil {
		return err
	}
	return k.CloudProvider.Delete(ctx, loc, vm, ids)
}

// Cleanup implements provider.CloudProvider.
func (k *Killed) Cleanup(ctx context.Context, loc provider.Location, vm string) error {
	if err := k.check("cleanup", true); err != nil {
		return err
	}
	return k.CloudProvider.Cleanup(ctx, loc, vm)
}

type killedLister struct{ *Killed }

func (k killedLister) List(ctx context.Context, loc provider.Location) ([]provider.Observed, error) {
	if err := k.check("list", false); err != nil {
		return nil, err
	}
	return k.CloudProvider.(provider.Lister).List(ctx, loc)
}

type killedNameLister struct{ killedLister }

func (k killedNameLister) ListNamed(ctx context.Context, loc provider.Location, vms []string) ([]provider.Observed, error) {
	if err := k.check("list", false); err != nil {
		return nil, err
	}
	return k.CloudProvider.(provider.NameLister).ListNamed(ctx, loc, vms)
}
