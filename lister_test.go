package gpuprov

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/org/gpuprov/clock"
	"github.com/org/gpuprov/journal/sqlite"
	"github.com/org/gpuprov/provider"
	pt "github.com/org/gpuprov/provider/providertest"
)

var listT0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// namedCloud is a Fake that filters listings on VM names
// (provider.NameLister): ListNamed is List less the other VMs' instances.
// It records each ListNamed call's names and counts List calls. With
// entered set, each ListNamed call sends its names there and waits for
// release, so a test holds a listing in flight; fail, when set, may fail
// the call numbered n (from 1).
type namedCloud struct {
	*pt.Fake
	entered chan []string
	release chan struct{}
	fail    func(n int, vms []string) error

	mu    sync.Mutex
	named [][]string
	lists int
}

func (nc *namedCloud) List(ctx context.Context, loc provider.Location) ([]provider.Observed, error) {
	nc.mu.Lock()
	nc.lists++
	nc.mu.Unlock()
	return nc.Fake.List(ctx, loc)
}

func (nc *namedCloud) ListNamed(ctx context.Context, loc provider.Location, vms []string) ([]provider.Observed, error) {
	nc.mu.Lock()
	nc.named = append(nc.named, slices.Clone(vms))
	n := len(nc.named)
	nc.mu.Unlock()
	if nc.entered != nil {
		nc.entered <- slices.Clone(vms)
		<-nc.release
	}
	if nc.fail != nil {
		if err := nc.fail(n, vms); err != nil {
			return nil, err
		}
	}
	all, err := nc.Fake.List(ctx, loc)
	return onlyNamed(all, vms), err
}

// onlyNamed is obs less the instances of VMs not in vms.
func onlyNamed(obs []provider.Observed, vms []string) []provider.Observed {
	var out []provider.Observed
	for _, o := range obs {
		if slices.Contains(vms, o.VM) {
			out = append(out, o)
		}
	}
	return out
}

// vmNames returns n VM names, vm-000 up.
func vmNames(n int) []string {
	vms := make([]string, n)
	for i := range vms {
		vms[i] = fmt.Sprintf("vm-%03d", i)
	}
	return vms
}

// calls returns the names of each ListNamed call so far, and the number
// of List calls.
func (nc *namedCloud) calls() ([][]string, int) {
	nc.mu.Lock()
	defer nc.mu.Unlock()
	return slices.Clone(nc.named), nc.lists
}

// gatedList is a Fake without provider.NameLister whose List calls, like
// namedCloud's ListNamed calls, can be held in flight.
type gatedList struct {
	*pt.Fake
	entered chan struct{}
	release chan struct{}
}

func (g *gatedList) List(ctx context.Context, loc provider.Location) ([]provider.Observed, error) {
	g.entered <- struct{}{}
	<-g.release
	return g.Fake.List(ctx, loc)
}

var listLoc = provider.Location{Region: "us-east", Zone: "us-east-1a"}

// newListCloud returns a fake holding one instance for each of vms, in
// listLoc, on a fake clock.
func newListCloud(t *testing.T, vms ...string) (*pt.Fake, *clock.Fake) {
	t.Helper()
	clk := clock.NewFake(listT0)
	f := pt.NewFake("a", clk, pt.Offer(listLoc.Region, listLoc.Zone, "h100.1", "H100-80GB", 1, 2))
	f.Installation = "inst"
	for _, vm := range vms {
		o := f.Offers[0]
		if _, err := f.Create(context.Background(), &o, nil, &provider.InstanceSpec{VM: vm, Installation: "inst", Attempt: 1}); err != nil {
			t.Fatal(err)
		}
	}
	return f, clk
}

// look is one listFor call's answer.
type look struct {
	vm      string
	obs     []provider.Observed
	started time.Time
	err     error
}

// lookAt starts listFor(vm) on pp, fresh from fresh, and returns where its
// answer will arrive.
func lookAt(ctx context.Context, pp *paced, clk clock.Clock, vm string, fresh time.Time) <-chan look {
	ch := make(chan look, 1)
	go func() {
		obs, started, err := pp.listFor(ctx, clk, listLoc, vm, fresh)
		ch <- look{vm, obs, started, err}
	}()
	return ch
}

// waitWaiting waits until the poller of pp's location has n looks waiting.
func waitWaiting(t *testing.T, pp *paced, n int) {
	t.Helper()
	pl := pp.poller(listLoc)
	pt.WaitFor(t, fmt.Sprintf("%d looks wait on the poller", n), func() bool {
		pl.mu.Lock()
		defer pl.mu.Unlock()
		got := 0
		for _, c := range pl.waiting {
			got += c
		}
		return got == n
	})
}

// advanceListing advances clk by d once the poller's next listing sleeps
// until its start (advanced before, it would sleep d after the new time).
func advanceListing(t *testing.T, clk *clock.Fake, d time.Duration) {
	t.Helper()
	pt.WaitFor(t, "a listing sleeps until its start", func() bool { return clk.Sleeping() > 0 })
	clk.Advance(d)
}

// wantInstance checks that l answered with exactly one instance, vm's.
func wantInstance(t *testing.T, l look) {
	t.Helper()
	if l.err != nil {
		t.Fatalf("%s: %v", l.vm, l.err)
	}
	if len(l.obs) != 1 || l.obs[0].VM != l.vm {
		t.Fatalf("%s: the listing answered %+v; want its one instance", l.vm, l.obs)
	}
}

// recv receives from ch, failing the test when nothing comes within a
// few seconds of real time (a watchdog: a broken poller hangs instead).
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(5 * time.Second):
		t.Fatalf("nothing came for %s", what)
	}
	panic("unreachable")
}

// letThrough lets the ListNamed call held in nc finish.
func letThrough(t *testing.T, nc *namedCloud) {
	t.Helper()
	select {
	case nc.release <- struct{}{}:
	case <-time.After(5 * time.Second):
		t.Fatal("no listing call held in flight")
	}
}

func newTestPaced(cp provider.CloudProvider, clk clock.Clock) *paced {
	pp := newPaced(cp)
	pp.clock = clk
	return pp
}

// bigFleet has pp's poller of where know that listing everything there
// costs many calls and instances, as an unfiltered listing would have
// found in a fleet far larger than the VMs being watched: its listings
// are filtered from the first (see filterNext).
func bigFleet(pp *paced, where provider.Location) {
	pl := pp.poller(where)
	pl.mu.Lock()
	defer pl.mu.Unlock()
	pl.all = listCost{started: listT0.Add(-time.Hour), turns: 50, count: 50 * 500}
}

// A VM that starts looking while a filtered listing that does not name it
// is in flight, fresh enough by time, is not answered by it ("nothing
// there" would have it created again): it waits for the next listing,
// which names it. A look that a finished listing named is answered by it
// without a call; one it did not name is not.
func TestFilteredListingAnswersOnlyTheVMsItNamed(t *testing.T) {
	f, clk := newListCloud(t, "a", "b")
	nc := &namedCloud{Fake: f, entered: make(chan []string), release: make(chan struct{})}
	pp := newTestPaced(nc, clk)
	ctx := context.Background()

	a := lookAt(ctx, pp, clk, "a", listT0)
	if got := recv(t, nc.entered, "a listing call"); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("first listing names %v, want [a]", got)
	}
	b := lookAt(ctx, pp, clk, "b", listT0) // the listing in flight started at listT0: fresh enough
	waitWaiting(t, pp, 2)
	letThrough(t, nc)
	la := recv(t, a, "a's look")
	wantInstance(t, la)
	select {
	case lb := <-b:
		t.Fatalf("b was answered by a listing that did not name it: %+v %v", lb.obs, lb.err)
	default:
	}

	advanceListing(t, clk, time.Second) // the poll interval since the first listing
	if got := recv(t, nc.entered, "a listing call"); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("second listing names %v, want [b]: a is no longer waiting", got)
	}
	letThrough(t, nc)
	lb := recv(t, b, "b's look")
	wantInstance(t, lb)
	if !lb.started.After(la.started) {
		t.Fatalf("b's listing started at %v, not after a's (%v)", lb.started, la.started)
	}

	// The newest finished listing named b: a look at b as fresh as it is
	// answered without a call; a look at a is not (the listing did not
	// name a) and makes a listing of its own.
	wantInstance(t, recv(t, lookAt(ctx, pp, clk, "b", lb.started), "b's look answered by the last listing"))
	a2 := lookAt(ctx, pp, clk, "a", lb.started)
	advanceListing(t, clk, time.Second) // its listing starts one poll interval after b's
	if got := recv(t, nc.entered, "a listing call"); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("third listing names %v, want [a]", got)
	}
	letThrough(t, nc)
	wantInstance(t, recv(t, a2, "a's third look"))
	if named, lists := nc.calls(); len(named) != 3 || lists != 0 {
		t.Fatalf("ListNamed calls %v and %d List calls; want 3 and none", named, lists)
	}
}

// A listing names exactly the VMs waiting on the poller when it starts:
// not a VM that gave up before (its context ended), nor one served by the
// listing before.
func TestFilteredListingNamesTheVMsWaiting(t *testing.T) {
	f, clk := newListCloud(t, "x", "c", "d", "gone")
	nc := &namedCloud{Fake: f, entered: make(chan []string), release: make(chan struct{})}
	pp := newTestPaced(nc, clk)
	ctx := context.Background()

	x := lookAt(ctx, pp, clk, "x", listT0)
	recv(t, nc.entered, "the first listing call")
	var later []<-chan look
	for _, vm := range []string{"c", "d", "e"} { // e has no instance
		later = append(later, lookAt(ctx, pp, clk, vm, listT0.Add(time.Nanosecond)))
	}
	gctx, cancel := context.WithCancel(ctx)
	gone := lookAt(gctx, pp, clk, "gone", listT0.Add(time.Nanosecond))
	waitWaiting(t, pp, 5)
	cancel()
	if l := recv(t, gone, "the look that gave up"); !errors.Is(l.err, context.Canceled) {
		t.Fatalf("the look whose context ended answered %+v, %v", l.obs, l.err)
	}
	letThrough(t, nc)
	wantInstance(t, recv(t, x, "x's look"))

	advanceListing(t, clk, time.Second)
	if got := recv(t, nc.entered, "a listing call"); !slices.Equal(got, []string{"c", "d", "e"}) {
		t.Fatalf("the second listing names %v, want [c d e]", got)
	}
	letThrough(t, nc)
	wantInstance(t, recv(t, later[0], "c's look"))
	wantInstance(t, recv(t, later[1], "d's look"))
	if l := recv(t, later[2], "e's look"); l.err != nil || len(l.obs) != 0 {
		t.Fatalf("e, named by the listing and without an instance: %+v, %v; want nothing there", l.obs, l.err)
	}
	pl := pp.poller(listLoc)
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if len(pl.waiting) != 0 {
		t.Fatalf("VMs still waiting after every look returned: %v", pl.waiting)
	}
}

// More VMs than provider.MaxListNames waiting make one listing of several
// calls, each of at most MaxListNames names, together naming each VM once;
// a call that fails fails the looks of its own VMs only.
func TestFilteredListingSplitsLargeSets(t *testing.T) {
	const n = 2*provider.MaxListNames + 50
	vms := vmNames(n)
	f, clk := newListCloud(t, vms...)
	stop := clk.AutoAdvance()
	defer stop()
	failed := errors.New("injected")
	nc := &namedCloud{Fake: f, fail: func(n int, _ []string) error {
		if n == 3 { // the first listing is the seed's; the second call of the second fails
			return provider.Errorf(provider.Transient, "a", "list", "%w", failed)
		}
		return nil
	}}
	nc.entered, nc.release = make(chan []string), make(chan struct{})
	pp := newTestPaced(nc, clk)
	bigFleet(pp, listLoc)
	ctx := context.Background()

	seed := lookAt(ctx, pp, clk, vms[0], listT0)
	recv(t, nc.entered, "the first listing call")
	looks := map[string]<-chan look{}
	for _, vm := range vms {
		looks[vm] = lookAt(ctx, pp, clk, vm, listT0.Add(time.Nanosecond))
	}
	waitWaiting(t, pp, n+1)
	go func() { // let every further call through
		for range nc.entered {
			letThrough(t, nc)
		}
	}()
	letThrough(t, nc)
	wantInstance(t, recv(t, seed, "the seed's look"))

	answers := map[string]look{}
	for vm, ch := range looks {
		answers[vm] = recv(t, ch, vm+"'s look")
	}
	close(nc.entered)
	named, _ := nc.calls()
	calls := named[1:]
	if len(calls) != 3 {
		t.Fatalf("the second listing made %d calls, want 3 for %d VMs", len(calls), n)
	}
	var all []string
	for _, c := range calls {
		if len(c) > provider.MaxListNames {
			t.Fatalf("a call names %d VMs, more than MaxListNames (%d)", len(c), provider.MaxListNames)
		}
		all = append(all, c...)
	}
	slices.Sort(all)
	if !slices.Equal(all, vms) {
		t.Fatalf("the calls named %d VMs, want each of the %d waiting once", len(all), n)
	}
	for vm, l := range answers {
		if slices.Contains(calls[1], vm) {
			if !errors.Is(l.err, failed) {
				t.Fatalf("%s, named by the call that failed: %+v, %v; want its error", vm, l.obs, l.err)
			}
			continue
		}
		wantInstance(t, l)
	}
}

// A provider without NameLister is listed as before: one List call shared
// by every look fresh enough for it, including one that starts while it is
// in flight.
func TestUnfilteredListingIsShared(t *testing.T) {
	f, clk := newListCloud(t, "a", "b")
	g := &gatedList{Fake: f, entered: make(chan struct{}), release: make(chan struct{})}
	pp := newTestPaced(g, clk)
	ctx := context.Background()

	a := lookAt(ctx, pp, clk, "a", listT0)
	recv(t, g.entered, "the List call")
	b := lookAt(ctx, pp, clk, "b", listT0)
	waitWaiting(t, pp, 2)
	close(g.release)
	wantInstance(t, recv(t, a, "a's look"))
	wantInstance(t, recv(t, b, "b's look"))
	if lists := len(f.Calls(pt.OpList)); lists != 1 {
		t.Fatalf("%d List calls, want 1 shared by both looks", lists)
	}
}

// A look of its own (listOwn) lists its VM alone on a NameLister, and the
// location on a provider without.
func TestListOwn(t *testing.T) {
	f, clk := newListCloud(t, "a", "b")
	nc := &namedCloud{Fake: f}
	obs, _, err := newTestPaced(nc, clk).listOwn(context.Background(), listLoc, "a", clk.Now)
	wantInstance(t, look{vm: "a", obs: obs, err: err})
	if named, lists := nc.calls(); len(named) != 1 || !slices.Equal(named[0], []string{"a"}) || lists != 0 {
		t.Fatalf("ListNamed calls %v, List calls %d; want one naming a, none", named, lists)
	}
	obs, _, err = newTestPaced(f, clk).listOwn(context.Background(), listLoc, "b", clk.Now)
	wantInstance(t, look{vm: "b", obs: obs, err: err})
	if lists := len(f.Calls(pt.OpList)); lists != 2 { // namedCloud's ListNamed is a List of the fake too
		t.Fatalf("%d List calls of the fake, want 2", lists)
	}
}

// Launching more VMs than a call names, with lost creates and a listing
// lag, on a provider that filters on names (and lists every location at
// once): every VM ends ready with one instance (a look answered "nothing
// there" for a VM it did not name would have it created again: the fake
// does not honour tokens), and no call names more than MaxListNames.
func TestLaunchManyWithFilteredListings(t *testing.T) {
	clk := clock.NewFake(listT0)
	stop := clk.AutoAdvance()
	defer stop()
	f := pt.NewFake("a", clk,
		pt.Offer("us-east", "us-east-1a", "h100.1", "H100-80GB", 1, 2),
		pt.Offer("us-east", "us-east-1b", "h100.1", "H100-80GB", 1, 2.1))
	f.BootTime, f.ListLag, f.Idempotent = 10*time.Second, 2*time.Second, false // a blind resend would duplicate
	f.Caps.ConsistencyWindow, f.Caps.ListAll = 5*time.Second, true
	f.Script(&pt.Rule{Op: pt.OpCreate, Land: true, Times: 20, Err: provider.Errorf(provider.Transient, "a", "create", "answer lost")})
	nc := &namedCloud{Fake: f}
	j, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "journal.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	f.Installation = j.Installation()
	p, err := New(j, WithClock(clk), WithProvider(nc), WithBackoff(100*time.Millisecond, 5*time.Second, 1))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	bigFleet(p.providers["a"], provider.Location{}) // ListAll: one poller for every location

	const n = provider.MaxListNames + 50
	reqs := make([]Request, n)
	for i := range reqs {
		reqs[i] = Request{Name: fmt.Sprintf("vm-%03d", i), GPU: "H100-80GB", Timeout: time.Hour}
	}
	for _, r := range p.LaunchMany(context.Background(), reqs) {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	perVM := map[string]int{}
	for _, in := range f.Live() {
		perVM[in.VM]++
	}
	for _, r := range reqs {
		if perVM[r.Name] != 1 {
			t.Fatalf("%s has %d live instances, want 1", r.Name, perVM[r.Name])
		}
	}
	named, _ := nc.calls()
	most := 0
	for _, c := range named {
		most = max(most, len(c))
	}
	if most > provider.MaxListNames {
		t.Fatalf("a call named %d VMs, more than MaxListNames (%d)", most, provider.MaxListNames)
	}
	if _, lists := nc.calls(); len(named) == 0 || lists != 0 {
		t.Fatalf("%d ListNamed calls and %d List calls; want the looks filtered", len(named), lists)
	}
	t.Logf("%d VMs: %d ListNamed calls, the largest naming %d", n, len(named), most)
}

// A VM that comes to wait while a filtered listing runs is named by the
// listing's last call if that call has not been sent and has room, at no
// call more; when the listing's calls are full it waits for the next one.
func TestFilteredListingTakesLateVMsWhereItHasRoom(t *testing.T) {
	for _, tc := range []struct {
		waiting int
		named   bool // late is named by the listing it joins
	}{
		{provider.MaxListNames + 50, true},
		{2 * provider.MaxListNames, false},
	} {
		t.Run(fmt.Sprint(tc.waiting), func(t *testing.T) {
			vms := vmNames(tc.waiting)
			f, clk := newListCloud(t, append(slices.Clone(vms), "late")...)
			nc := &namedCloud{Fake: f, entered: make(chan []string), release: make(chan struct{})}
			pp := newTestPaced(nc, clk)
			bigFleet(pp, listLoc)
			ctx := context.Background()

			// A first listing holds the poller, so that every VM waits
			// for the second.
			seed := lookAt(ctx, pp, clk, vms[0], listT0)
			recv(t, nc.entered, "the first listing call")
			var looks []<-chan look
			for _, vm := range vms {
				looks = append(looks, lookAt(ctx, pp, clk, vm, listT0.Add(time.Nanosecond)))
			}
			waitWaiting(t, pp, tc.waiting+1)
			letThrough(t, nc)
			wantInstance(t, recv(t, seed, "the seed's look"))

			advanceListing(t, clk, time.Second) // the second listing starts
			if got := recv(t, nc.entered, "the second listing's first call"); len(got) != provider.MaxListNames || slices.Contains(got, "late") {
				t.Fatalf("the second listing's first call names %d VMs (late among them: %v), want %d",
					len(got), slices.Contains(got, "late"), provider.MaxListNames)
			}
			late := lookAt(ctx, pp, clk, "late", listT0.Add(time.Nanosecond)) // fresh enough for it
			waitWaiting(t, pp, tc.waiting+1)
			letThrough(t, nc)
			second := recv(t, nc.entered, "the second listing's second call")
			if slices.Contains(second, "late") != tc.named {
				t.Fatalf("the second call names late: %v, want %v (%d names)", !tc.named, tc.named, len(second))
			}
			if len(second) > provider.MaxListNames {
				t.Fatalf("the second call names %d VMs, more than MaxListNames", len(second))
			}
			letThrough(t, nc)
			for i, ch := range looks {
				wantInstance(t, recv(t, ch, vms[i]+"'s look"))
			}
			if !tc.named {
				select {
				case l := <-late:
					t.Fatalf("late was answered by a listing that did not name it: %+v %v", l.obs, l.err)
				default:
				}
				advanceListing(t, clk, time.Second)
				if got := recv(t, nc.entered, "the third listing's call"); !slices.Equal(got, []string{"late"}) {
					t.Fatalf("the third listing names %v, want [late]", got)
				}
				letThrough(t, nc)
			}
			wantInstance(t, recv(t, late, "late's look"))
			named, lists := nc.calls()
			want := 3
			if !tc.named {
				want = 4
			}
			if len(named) != want || lists != 0 {
				t.Fatalf("%d ListNamed calls and %d List calls, want %d and none", len(named), lists, want)
			}
		})
	}
}

// pacedNamed is a Paced fake (each primitive one request, paced by the
// core) that filters listings on names, as the sim adapter does.
type pacedNamed struct{ *pt.Paced }

func (p pacedNamed) ListNamed(ctx context.Context, loc provider.Location, vms []string) ([]provider.Observed, error) {
	all, err := p.List(ctx, loc)
	return onlyNamed(all, vms), err
}

// A listing names the VMs waiting only when that costs less than listing
// everything did: fewer of the account's turns on a provider that paces
// each request (its List pages are turns the core counts), fewer
// instances on one that does not. One named call never costs more; with
// more VMs waiting and no unfiltered listing yet, everything is listed
// once to find out.
func TestListingFiltersWhereThatCostsLess(t *testing.T) {
	f, clk := newListCloud(t)
	for _, tc := range []struct {
		name     string
		cp       provider.CloudProvider
		waiting  int
		all      listCost // the last unfiltered listing's cost
		filtered bool
	}{
		{"no NameLister", f, 250, listCost{}, false},
		{"one call", &namedCloud{Fake: f}, provider.MaxListNames, listCost{}, true},
		{"one call, everything cheap", &namedCloud{Fake: f}, 1, listCost{listT0, 1, 1}, true},
		{"two calls, cost unknown", &namedCloud{Fake: f}, provider.MaxListNames + 1, listCost{}, false},
		{"instances within the calls' room", &namedCloud{Fake: f}, 150, listCost{listT0, 1, 2 * provider.MaxListNames}, false},
		{"instances beyond the calls' room", &namedCloud{Fake: f}, 150, listCost{listT0, 1, 2*provider.MaxListNames + 1}, true},
		{"paced: pages as many as calls", pacedNamed{pt.NewPaced(f)}, 150, listCost{listT0, 2, 1000}, false},
		{"paced: more pages than calls", pacedNamed{pt.NewPaced(f)}, 150, listCost{listT0, 3, 1000}, true},
		{"paced: three calls, three pages", pacedNamed{pt.NewPaced(f)}, 250, listCost{listT0, 3, 1500}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pp := newTestPaced(tc.cp, clk)
			pp.start(clk, nil, nil) // a RequestPacer is told to use the core's pacer
			pl := pp.poller(listLoc)
			pl.mu.Lock()
			defer pl.mu.Unlock()
			for i := range tc.waiting {
				pl.waiting[fmt.Sprintf("vm-%03d", i)] = 1
			}
			pl.all = tc.all
			if got := pp.filterNext(pl); got != tc.filtered {
				t.Fatalf("filterNext = %v, want %v", got, tc.filtered)
			}
		})
	}
}

// With more VMs waiting than one call names and a small fleet, a listing
// lists everything (one List call) and answers every VM waiting; once a
// listing of everything has found more instances than the named calls
// would return, the next listing names the VMs.
func TestListingLearnsWhatListingEverythingCosts(t *testing.T) {
	const n = provider.MaxListNames + 50
	vms := vmNames(n)
	f, clk := newListCloud(t, vms...)
	stop := clk.AutoAdvance()
	defer stop()
	nc := &namedCloud{Fake: f, entered: make(chan []string), release: make(chan struct{})}
	pp := newTestPaced(nc, clk)
	ctx := context.Background()

	// round has every VM look while a one-VM look (one named call) holds
	// the poller, so that one listing serves them all, and returns the
	// calls that listing made.
	round := func() (named [][]string, lists int) {
		t.Helper()
		named0, lists0 := nc.calls()
		fresh := clk.Now().Add(time.Nanosecond) // newer than the last listing
		seed := lookAt(ctx, pp, clk, vms[0], fresh)
		recv(t, nc.entered, "the seed's ListNamed call")
		var looks []<-chan look
		for _, vm := range vms {
			looks = append(looks, lookAt(ctx, pp, clk, vm, fresh.Add(time.Nanosecond)))
		}
		waitWaiting(t, pp, n+1)
		letThrough(t, nc)
		done, exited := make(chan struct{}), make(chan struct{})
		defer func() { close(done); <-exited }()
		go func() { // the listing's own ListNamed calls, if any, go through
			defer close(exited)
			for {
				select {
				case <-nc.entered:
					nc.release <- struct{}{}
				case <-done:
					return
				}
			}
		}()
		wantInstance(t, recv(t, seed, "the seed's look"))
		for i, ch := range looks {
			wantInstance(t, recv(t, ch, vms[i]+"'s look"))
		}
		named1, lists1 := nc.calls()
		return named1[len(named0)+1:], lists1 - lists0
	}

	if named, lists := round(); len(named) != 0 || lists != 1 {
		t.Fatalf("first round: %d ListNamed calls and %d List calls besides the seed's; want everything listed once", len(named), lists)
	}
	// The fleet grows beyond what two named calls return.
	for i := range 2 * provider.MaxListNames {
		o := f.Offers[0]
		if _, err := f.Create(ctx, &o, nil, &provider.InstanceSpec{VM: fmt.Sprintf("other-%03d", i), Installation: "inst", Attempt: 1}); err != nil {
			t.Fatal(err)
		}
	}
	// The cost known (150 instances) is still within two calls' room: the
	// next listing lists everything, and finds the fleet grown.
	if named, lists := round(); len(named) != 0 || lists != 1 {
		t.Fatalf("second round: %d ListNamed calls and %d List calls; want everything listed once", len(named), lists)
	}
	named, lists := round()
	if lists != 0 || len(named) != 2 {
		t.Fatalf("third round: %d ListNamed calls and %d List calls; want the %d VMs named in 2 calls", len(named), lists, n)
	}
	// (vms[0]'s second look may have been answered by the seed's listing.)
	got := slices.Concat(named...)
	for _, vm := range vms[1:] {
		if !slices.Contains(got, vm) {
			t.Fatalf("the named calls (%d names) do not name %s, which waited", len(got), vm)
		}
	}
}
