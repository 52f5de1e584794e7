package providertest_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/org/gpuprov/clock"
	"github.com/org/gpuprov/provider"
	pt "github.com/org/gpuprov/provider/providertest"
)

// namedFake is the fake with a ListNamed, recording the names it was asked.
type namedFake struct {
	*pt.Fake
	asked [][]string
}

func (f *namedFake) ListNamed(ctx context.Context, loc provider.Location, vms []string) ([]provider.Observed, error) {
	f.asked = append(f.asked, slices.Clone(vms))
	all, err := f.List(ctx, loc)
	var out []provider.Observed
	for _, o := range all {
		if slices.Contains(vms, o.VM) {
			out = append(out, o)
		}
	}
	return out, err
}

// WithList keeps a NameLister one, so that crash tests poll with the named
// listings the engine uses on the sim and aws, and the death stops them.
func TestKillableWithListForwardsListNamed(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	plain := pt.NewFake("fake", clk)
	if _, ok := pt.Killable(plain, func() bool { return false }).WithList().(provider.NameLister); ok {
		t.Fatal("WithList of a provider without ListNamed is a provider.NameLister")
	}

	nf := &namedFake{Fake: pt.NewFake("fake", clk)}
	dead := false
	k := pt.Killable(nf, func() bool { return dead }).WithList()
	if _, ok := k.(provider.Lister); !ok {
		t.Fatal("WithList of a provider.Lister is not one")
	}
	nl, ok := k.(provider.NameLister)
	if !ok {
		t.Fatal("WithList of a provider.NameLister is not one")
	}
	loc := provider.Location{Region: "r1", Zone: "r1a"}
	if _, err := nl.ListNamed(context.Background(), loc, []string{"vm-a", "vm-b"}); err != nil {
		t.Fatalf("ListNamed while alive: %v", err)
	}
	if len(nf.asked) != 1 || !slices.Equal(nf.asked[0], []string{"vm-a", "vm-b"}) {
		t.Fatalf("the wrapped ListNamed was asked %v, want [[vm-a vm-b]]", nf.asked)
	}

	dead = true
	_, err := nl.ListNamed(context.Background(), loc, []string{"vm-a"})
	if !errors.Is(err, pt.ErrKilled) {
		t.Fatalf("ListNamed after the death: %v, want ErrKilled", err)
	}
	if len(nf.asked) != 1 {
		t.Fatalf("a dead process's ListNamed reached the provider: %v", nf.asked)
	}
}
