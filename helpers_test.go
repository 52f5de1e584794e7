package gpuprov_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/clock"
	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/journal/sqlite"
	"github.com/org/gpuprov/provider"
	pt "github.com/org/gpuprov/provider/providertest"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// env is one test world: a fake clock that runs sleeps instantly, a SQLite
// journal in a temp dir, fake clouds and a Provisioner.
type env struct {
	t     *testing.T
	clk   *clock.Fake
	path  string
	j     journal.Journal
	fakes []*pt.Fake
	p     *gpuprov.Provisioner
	// observeOnly hides the fakes' List method, so the engine observes
	// each VM separately instead of sharing a listing.
	observeOnly bool
	// shared wraps each fake in a pt.SharedFake (see useShared).
	shared map[string]*pt.SharedFake
	// paced wraps each fake in a pt.Paced (see usePaced).
	paced map[string]*pt.Paced

	mu     sync.Mutex
	events []gpuprov.Event
}

// Two clouds: "a" has the cheapest H100 in us-east (two zones) and one in
// eu-west; "b" is dearer.
func standardFakes(c clock.Clock) []*pt.Fake {
	a := pt.NewFake("a", c,
		pt.Offer("us-east", "us-east-1a", "h100.1", "H100-80GB", 1, 2.00),
		pt.Offer("us-east", "us-east-1b", "h100.1", "H100-80GB", 1, 2.10),
		pt.Offer("eu-west", "eu-west-1a", "h100.1", "H100-80GB", 1, 2.20),
	)
	b := pt.NewFake("b", c,
		pt.Offer("central", "", "gpu-h100", "H100-80GB", 1, 2.50),
	)
	return []*pt.Fake{a, b}
}

func newEnv(t *testing.T, opts ...gpuprov.Option) *env {
	t.Helper()
	clk := clock.NewFake(t0)
	stop := clk.AutoAdvance()
	t.Cleanup(stop)
	return newEnvWith(t, clk, standardFakes(clk), opts...)
}

func newEnvWith(t *testing.T, clk *clock.Fake, fakes []*pt.Fake, opts ...gpuprov.Option) *env {
	t.Helper()
	e := &env{t: t, clk: clk, fakes: fakes, path: filepath.Join(t.TempDir(), "journal.db")}
	db, err := sqlite.Open(context.Background(), e.path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	e.j = db
	for _, f := range fakes {
		f.Installation = db.Installation()
	}
	e.p = e.provisioner(db, opts...)
	return e
}

// provisioner builds a Provisioner on j with the env's fakes and clock.
func (e *env) provisioner(j journal.Journal, opts ...gpuprov.Option) *gpuprov.Provisioner {
	e.t.Helper()
	base := []gpuprov.Option{
		gpuprov.WithClock(e.clk),
		gpuprov.WithBackoff(100*time.Millisecond, 5*time.Second, 1),
		gpuprov.WithEvents(func(ev gpuprov.Event) { e.mu.Lock(); e.events = append(e.events, ev); e.mu.Unlock() }),
	}
	for _, f := range e.fakes {
		if sf := e.shared[f.Name()]; sf != nil {
			base = append(base, gpuprov.WithProvider(sf))
		} else if pf := e.paced[f.Name()]; pf != nil {
			base = append(base, gpuprov.WithProvider(pf))
		} else if e.observeOnly {
			base = append(base, gpuprov.WithProvider(noList{f}))
		} else {
			base = append(base, gpuprov.WithProvider(f))
		}
	}
	p, err := gpuprov.New(j, append(base, opts...)...)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { p.Close() })
	return p
}

// useShared makes the env's fakes shared-resource fakes, for the
// Provisioners built from now on.
func (e *env) useShared() {
	e.shared = map[string]*pt.SharedFake{}
	for _, f := range e.fakes {
		e.shared[f.Name()] = pt.NewSharedFake(f)
	}
}

// usePaced makes the env's fakes pt.Paced fakes (quiet: their Prepare
// sends nothing), for the Provisioners built from now on.
func (e *env) usePaced(quiet bool) {
	e.paced = map[string]*pt.Paced{}
	for _, f := range e.fakes {
		pf := pt.NewPaced(f)
		pf.QuietPrepare = quiet
		e.paced[f.Name()] = pf
	}
}

// noList is a provider without provider.Lister.
type noList struct{ provider.CloudProvider }

func (e *env) fake(name string) *pt.Fake {
	for _, f := range e.fakes {
		if f.Name() == name {
			return f
		}
	}
	e.t.Fatalf("no fake %s", name)
	return nil
}

func (e *env) eventTypes(vm string) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for _, ev := range e.events {
		if ev.VM == vm {
			out = append(out, ev.Type)
		}
	}
	return out
}

// live returns every live instance on every fake.
func (e *env) live() []pt.Instance {
	var out []pt.Instance
	for _, f := range e.fakes {
		out = append(out, f.Live()...)
	}
	return out
}

func (e *env) side() []string {
	var out []string
	for _, f := range e.fakes {
		for _, s := range f.SideResources() {
			out = append(out, f.Name()+":"+s)
		}
	}
	return out
}

func h100(name string) gpuprov.Request {
	return gpuprov.Request{Name: name, GPU: "h100", Timeout: time.Hour}
}

func pe(kind provider.ErrorKind, msg string) error {
	return provider.Errorf(kind, "fake", "op", "%s", msg)
}

// assertClean checks the invariant every launch ends with: a ready VM has
// exactly its one instance and side resources in its location; any other
// end leaves nothing.
func (e *env) assertClean(name string) journal.VM {
	e.t.Helper()
	row, err := e.j.GetVM(context.Background(), name)
	if err != nil {
		e.t.Fatal(err)
	}
	var mine []pt.Instance
	for _, in := range e.live() {
		if in.VM == name {
			mine = append(mine, in)
		}
	}
	switch row.State {
	case journal.StateReady:
		if len(mine) != 1 || mine[0].ID != row.InstanceID {
			e.t.Fatalf("ready VM %s with instance %q has live instances %+v%s", name, row.InstanceID, mine, e.story(name))
		}
		want := []string{row.Provider + ":" + name + "|" + provider.Location{Region: row.Region, Zone: row.Zone}.String()}
		if pf := e.paced[row.Provider]; pf != nil && pf.QuietPrepare {
			want = nil // its Prepare makes nothing
		}
		if got := e.sideOf(name); !equal(got, want) {
			e.t.Fatalf("side resources of ready VM %s: %v, want %v%s", name, got, want, e.story(name))
		}
	case journal.StateFailed, journal.StateDeleted:
		if len(mine) != 0 {
			e.t.Fatalf("%s VM %s leaks instances %+v%s", row.State, name, mine, e.story(name))
		}
		if got := e.sideOf(name); len(got) != 0 {
			e.t.Fatalf("%s VM %s leaks side resources %v%s", row.State, name, got, e.story(name))
		}
	default:
		e.t.Fatalf("VM %s ended in active state %s (%s)", name, row.State, row.LastError)
	}
	as, err := e.j.Attempts(context.Background(), name)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, a := range as {
		ok := a.State == journal.AttemptTornDown || (a.State == journal.AttemptSucceeded && row.State == journal.StateReady && a.N == row.Attempt)
		if !ok {
			e.t.Fatalf("VM %s (%s): attempt %d left %s", name, row.State, a.N, a.State)
		}
	}
	return row
}

// story is the journal's events of VM name, one a line, for a failure
// message that says how the VM got where it is.
func (e *env) story(name string) string {
	evs, err := e.j.Events(context.Background(), journal.EventQuery{VM: name})
	if err != nil {
		return "\n(no events: " + err.Error() + ")"
	}
	var b strings.Builder
	for _, ev := range evs {
		fmt.Fprintf(&b, "\n  %s a%d %s %s %s %s", ev.Time.Format("15:04:05.000"), ev.Attempt, ev.Type, ev.Phase, ev.InstanceID, ev.Message)
	}
	return b.String()
}

func (e *env) sideOf(vm string) []string {
	var out []string
	for _, s := range e.side() {
		if len(s) > 0 && containsVM(s, vm) {
			out = append(out, s)
		}
	}
	return out
}

func containsVM(side, vm string) bool {
	// side is provider:vm|location
	for i := 0; i < len(side); i++ {
		if side[i] == ':' {
			rest := side[i+1:]
			return len(rest) > len(vm) && rest[:len(vm)] == vm && rest[len(vm)] == '|'
		}
	}
	return false
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
