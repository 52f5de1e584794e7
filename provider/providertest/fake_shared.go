package providertest

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"

	"github.com/org/gpuprov/provider"
)

// SharedFake is a Fake with a shared side resource per region (see
// provider.SharedCleaner): Prepare makes it unless it exists, Create finds
// it or fails with provider.ErrSharedGone, CleanupShared removes it.
//
// Unlike a cloud, it does not refuse to remove a resource that an instance
// still uses: it removes it and counts the removal (DeletedInUse), so that
// a test proves the core itself never asks while its own VMs use it. With
// RefuseInUse it refuses, as the clouds that share side resources do (the
// sim's 409 conflict, EC2's DependencyViolation), with a Transient error
// matching provider.ErrInUse.
type SharedFake struct {
	*Fake

	// RefuseInUse makes CleanupShared leave a region's resource while an
	// instance there is live, and say so (provider.ErrInUse).
	RefuseInUse bool

	// GoneAtCreate removes the region's shared resource just before the
	// next n creates, as another process would between a VM's Prepare
	// and its create.
	GoneAtCreate int

	mu           sync.Mutex
	shared       map[string]bool // region → the resource exists
	made         int
	deletedInUse int
}

// NewSharedFake wraps f.
func NewSharedFake(f *Fake) *SharedFake { return &SharedFake{Fake: f, shared: map[string]bool{}} }

// Prepare prepares as the Fake does and makes the region's shared resource
// unless it exists.
func (s *SharedFake) Prepare(ctx context.Context, o *provider.Offer, spec *provider.InstanceSpec) (json.RawMessage, error) {
	b, err := s.Fake.Prepare(ctx, o, spec)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.shared[o.Location.Region] {
		s.shared[o.Location.Region] = true
		s.made++
	}
	return b, nil
}

// Create fails, Transient and matching provider.ErrSharedGone, when the
// region's shared resource is gone, and otherwise creates as the Fake does.
func (s *SharedFake) Create(ctx context.Context, o *provider.Offer, prepared json.RawMessage, spec *provider.InstanceSpec) (string, error) {
	s.mu.Lock()
	if s.GoneAtCreate > 0 {
		s.GoneAtCreate--
		delete(s.shared, o.Location.Region)
	}
	ok := s.shared[o.Location.Region]
	s.mu.Unlock()
	if !ok {
		return "", &provider.Error{Kind: provider.Transient, Provider: s.Name(), Op: "create",
			Err: fmt.Errorf("%w: no shared resource in %s", provider.ErrSharedGone, o.Location.Region)}
	}
	return s.Fake.Create(ctx, o, prepared, spec)
}

// CleanupShared removes the shared resource of loc's region (of every
// region for a zero Location), counting a removal while an instance in the
// region is live.
func (s *SharedFake) CleanupShared(ctx context.Context, loc provider.Location) error {
	live := map[string]bool{}
	for _, in := range s.Live() {
		live[in.Location.Region] = true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var inUse []string
	for r := range s.shared {
		if loc.Region != "" && r != loc.Region {
			continue
		}
		if live[r] && s.RefuseInUse {
			inUse = append(inUse, r)
			continue
		}
		if live[r] {
			s.deletedInUse++
		}
		delete(s.shared, r)
	}
	if len(inUse) > 0 {
		slices.Sort(inUse)
		return &provider.Error{Kind: provider.Transient, Provider: s.Name(), Op: "cleanup",
			Err: fmt.Errorf("%w: shared resource of %v", provider.ErrInUse, inUse)}
	}
	return nil
}

// Shared returns the regions holding a shared resource, sorted.
func (s *SharedFake) Shared() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for r := range s.shared {
		out = append(out, r)
	}
	slices.Sort(out)
	return out
}

// Made counts the shared resources Prepare made.
func (s *SharedFake) Made() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.made
}

// DeletedInUse counts the removals of a shared resource while an instance
// in its region was live.
func (s *SharedFake) DeletedInUse() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.deletedInUse
}

// Remove removes the region's shared resource, as another process would.
func (s *SharedFake) Remove(region string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.shared, region)
}
