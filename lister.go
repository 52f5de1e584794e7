package gpuprov

import (
	"context"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/org/gpuprov/clock"
	"github.com/org/gpuprov/provider"
)

// listing is one look at one location (every location, for a provider
// whose Capabilities.ListAll is set), shared by every VM that polls there:
// a thousand VMs booting in one zone cost one listing per poll interval, not
// a thousand Observe calls.
//
// On a provider.NameLister the listing is filtered when that costs less
// than listing everything (see filterNext): it lists only the VMs waiting
// on the poller when it starts, in calls of at most provider.MaxListNames
// names, so that its size follows the VMs being watched, not the fleet.
// Its number of calls is fixed when it starts; a VM that comes to wait
// while it runs is named by one of its calls not yet sent, where that call
// has room (the last call of 100 names seldom is full), so that it costs
// no call more and answers sooner. It may answer only for the VMs it
// named: an instance it did not look for is not "nothing there".
type listing struct {
	started time.Time
	done    chan struct{}

	// filtered says the listing is ListNamed calls, decided as it starts
	// (filterNext). Before it starts (names nil) any VM may join it, and
	// is named by it if it is filtered. As a filtered listing starts it
	// takes the waiting VMs (reserved) and its room: its calls times
	// provider.MaxListNames. Each call, as it is sent, moves up to that
	// many names from reserved to names; a VM that joins while it runs
	// is reserved if there is room. Once fixed (its last call formed),
	// names is final. All under the poller's lock.
	filtered bool
	fixed    bool
	names    map[string]struct{}
	reserved map[string]struct{}
	room     int

	// Set by runListing before done is closed and before the listing
	// becomes the poller's last.
	turns  int32 // the account's turns the calls took (their pages, for a RequestPacer)
	called bool  // a call was made: a filtered listing naming no VM makes none
	count  int   // unfiltered: the instances it found
	byVM   map[string][]provider.Observed
	failed map[string]error // filtered: each VM whose call failed, and its error
	err    error            // an unfiltered listing's error
}

// serves reports whether vm may wait on l, which is in flight or about to
// start: l lists every VM, or will name vm, or named it. pl.mu is held.
func (l *listing) serves(vm string) bool {
	if !l.filtered || l.names == nil {
		return true
	}
	_, named := l.names[vm]
	_, will := l.reserved[vm]
	return named || will
}

// join has l, in flight, name vm if it can: it serves vm already, or it
// has a call not yet formed with room for it. pl.mu is held.
func (l *listing) join(vm string) bool {
	switch {
	case l.serves(vm):
		return true
	case l.fixed || len(l.names)+len(l.reserved) >= l.room:
		return false
	}
	l.reserved[vm] = struct{}{}
	return true
}

// answers reports whether l, finished, holds a good answer for vm.
func (l *listing) answers(vm string) bool {
	return l.err == nil && l.serves(vm) && l.failed[vm] == nil
}

// worked says l, finished, answers for some VM: the newest such listing
// is the poller's last.
func (l *listing) worked() bool {
	switch {
	case l.err != nil || !l.called:
		return false
	case l.filtered:
		return len(l.failed) < len(l.names)
	}
	return true
}

// result is what l, finished, says of vm; name is the provider's.
func (l *listing) result(name, vm string) ([]provider.Observed, error) {
	if l.err != nil {
		return nil, l.err
	}
	if !l.serves(vm) {
		// listFor never lets this happen; an error is the safe answer,
		// since "nothing there" would have the VM created again.
		return nil, provider.Errorf(provider.Transient, name, "list", "VM %s was not named by the listing", vm)
	}
	if err := l.failed[vm]; err != nil {
		return nil, err
	}
	return l.byVM[vm], nil
}

// poller coalesces the looks at one location of one provider (at every
// location, for a provider whose Capabilities.ListAll is set). Listings
// start at most once per PollInterval: every VM polls that often, so one
// listing per interval serves them all, and a thousand staggered VMs do not
// keep a listing running all the time.
type poller struct {
	mu       sync.Mutex
	last     *listing // the newest finished listing that worked
	inflight *listing
	next     *listing // starts when inflight ends; shared by those inflight is too old for, or does not name
	// waiting counts, per VM, the listFor calls waiting on the poller:
	// the names a filtered listing lists.
	waiting map[string]int
	// all is what the newest unfiltered listing that worked cost, for
	// filterNext (zero before one did).
	all listCost
}

// listCost is what an unfiltered listing that started at started cost: the
// account's turns its calls took and the instances it found.
type listCost struct {
	started time.Time
	turns   int32
	count   int
}

// listFor returns vm's instances in loc from a listing that started no
// earlier than fresh and looked for vm: the newest finished one if it
// qualifies, else the one in flight if it does, else a new one. The
// listing's calls run on contexts of their own (bounded), so one caller
// giving up does not fail the others.
//
// vm is among the poller's waiting VMs from before it picks a listing until
// it has read its answer, so a filtered listing that has not fixed its
// names yet names vm when it does; one that has and does not name it is
// not picked.
func (pp *paced) listFor(ctx context.Context, clk clock.Clock, loc provider.Location, vm string, fresh time.Time) ([]provider.Observed, time.Time, error) {
	where := loc
	if pp.caps.ListAll {
		where = provider.Location{}
	}
	pl := pp.poller(where)

	pl.mu.Lock()
	pl.waiting[vm]++
	defer pl.leave(vm)
	var l *listing
	switch {
	case pl.last != nil && !pl.last.started.Before(fresh) && pl.last.answers(vm):
		l = pl.last
	case pl.inflight != nil && !pl.inflight.started.Before(fresh) && pl.inflight.join(vm):
		l = pl.inflight
	case pl.inflight != nil:
		// At most one listing per location runs at a time: callers it is
		// too old for, or does not name, share the one that starts when
		// it ends.
		if pl.next == nil {
			pl.next = pp.newListing()
		}
		l = pl.next
	default:
		l = pp.newListing()
		l.started = pp.nextListing(pl, clk)
		pl.inflight = l
		go pp.runListing(pl, l, where, clk)
	}
	pl.mu.Unlock()

	select {
	case <-l.done:
	case <-ctx.Done():
		return nil, time.Time{}, context.Cause(ctx)
	}
	obs, err := l.result(pp.Name(), vm)
	if err != nil {
		return nil, time.Time{}, err
	}
	if where == loc {
		return obs, l.started, nil
	}
	var here []provider.Observed
	for _, o := range obs {
		if o.Location.Region == loc.Region && (loc.Zone == "" || o.Location.Zone == loc.Zone) {
			here = append(here, o)
		}
	}
	return here, l.started, nil
}

// poller returns the poller of where, made on first use.
func (pp *paced) poller(where provider.Location) *poller {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	pl := pp.pollers[where]
	if pl == nil {
		pl = &poller{waiting: map[string]int{}}
		pp.pollers[where] = pl
	}
	return pl
}

// leave ends vm's wait on the poller: listings that fix their names from
// now on do not name it (unless another look at it waits).
func (pl *poller) leave(vm string) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if pl.waiting[vm]--; pl.waiting[vm] <= 0 {
		delete(pl.waiting, vm)
	}
}

// newListing returns a listing that has not started; whether it is
// filtered is decided as it starts.
func (pp *paced) newListing() *listing {
	return &listing{done: make(chan struct{})}
}

// filterNext reports whether the listing starting now names the VMs
// waiting (ListNamed) rather than listing the location (List): on a
// provider.NameLister, when the named calls would cost fewer of the
// account's turns than listing everything did last time, or (for a
// provider whose List pages the core cannot see, one that does not pace
// each request) return fewer instances. A listing of everything answers
// every VM that comes to wait while it runs, where a filtered one answers
// only those it names: at the same cost it is the better one. Until an
// unfiltered listing has worked its cost is unknown, and a listing that
// needs more than one named call lists everything once to find out; one
// call is never more than listing everything. The cost is learnt again
// only when the named calls would cost as much as the last unfiltered
// listing did: a fleet that grew is listed by name from then on, and so is
// one that shrank since (at the cost of its names, which follows the VMs
// watched, not the fleet). pl.mu is held.
func (pp *paced) filterNext(pl *poller) bool {
	if _, named := pp.lister.(provider.NameLister); !named {
		return false
	}
	calls := (len(pl.waiting) + provider.MaxListNames - 1) / provider.MaxListNames
	switch {
	case calls <= 1:
		return true
	case pl.all.started.IsZero():
		return false
	case pp.perRequest:
		return int(pl.all.turns) > calls
	}
	return pl.all.count > calls*provider.MaxListNames
}

// nextListing returns when the poller's next listing may start: now, or one
// PollInterval after the last one started. pl.mu is held.
func (pp *paced) nextListing(pl *poller, clk clock.Clock) time.Time {
	at := clk.Now()
	var prev *listing
	switch {
	case pl.inflight != nil:
		prev = pl.inflight
	case pl.last != nil:
		prev = pl.last
	}
	if prev != nil {
		if t := prev.started.Add(pp.listInterval(pl)); t.After(at) {
			at = t
		}
	}
	return at
}

// listShare is the part of an account's request rate that polling may
// take: a listing of p pages starts at most every p / (listShare × rate)
// seconds. Ten thousand VMs booting make a listing of many pages; polling it
// every PollInterval would take most of the account's rate, and its cost per
// VM would grow with the fleet.
const listShare = 0.1

// listInterval is how long after a listing the poller's next one may
// start: PollInterval, or longer when the last listing's pages would take
// more than listShare of the account's rate. pl.mu is held.
func (pp *paced) listInterval(pl *poller) time.Duration {
	d := pp.caps.PollInterval
	if pl.last == nil || pp.caps.RequestsPerSecond <= 0 {
		return d
	}
	budget := time.Duration(float64(pl.last.turns) / (listShare * pp.caps.RequestsPerSecond) * float64(time.Second))
	return max(d, budget)
}

// runListing waits for l's start, makes its calls, publishes it as the
// poller's last (when it worked) and starts the poller's next listing.
func (pp *paced) runListing(pl *poller, l *listing, loc provider.Location, clk clock.Clock) {
	defer close(l.done)
	if err := clk.Sleep(context.Background(), l.started.Sub(clk.Now())); err != nil {
		l.err = err
	} else {
		pl.mu.Lock()
		l.filtered = pp.filterNext(pl)
		pl.mu.Unlock()
		var turns atomic.Int32
		ctx := context.WithValue(withPriority(context.Background()), turnsKey{}, &turns)
		if l.filtered {
			pp.listNamed(ctx, pl, l, loc)
		} else {
			pp.listAll(ctx, l, loc)
		}
		l.turns = turns.Load()
	}

	pl.mu.Lock()
	defer pl.mu.Unlock()
	if pl.inflight == l {
		pl.inflight = nil
	}
	if l.worked() && (pl.last == nil || pl.last.started.Before(l.started)) {
		pl.last = l
	}
	if !l.filtered && l.worked() && pl.all.started.Before(l.started) {
		pl.all = listCost{l.started, l.turns, l.count}
	}
	if n := pl.next; n != nil {
		pl.next = nil
		n.started = pp.nextListing(pl, clk)
		pl.inflight = n
		go pp.runListing(pl, n, loc, clk)
	}
}

// listAll is l as one List call of loc.
func (pp *paced) listAll(ctx context.Context, l *listing, loc provider.Location) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var all []provider.Observed
	l.called = true
	l.err = pp.call(ctx, "list", loc, func(ctx context.Context) (err error) {
		all, err = pp.lister.List(ctx, loc)
		return err
	})
	if l.err == nil {
		l.count = len(all)
		l.byVM = make(map[string][]provider.Observed)
		for _, o := range all {
			l.byVM[o.VM] = append(l.byVM[o.VM], o)
		}
	}
}

// listNamed lists the VMs waiting on the poller now, and those that join
// while it runs where its calls have room, in ListNamed calls of at most
// provider.MaxListNames names each, one after the other (one listing per
// poller in flight). Each call takes its names as it is sent. A call that
// fails fails the looks of its VMs only: the others have their answer.
func (pp *paced) listNamed(ctx context.Context, pl *poller, l *listing, loc provider.Location) {
	pl.mu.Lock()
	l.names = make(map[string]struct{}, len(pl.waiting))
	l.reserved = make(map[string]struct{}, len(pl.waiting))
	for vm := range pl.waiting {
		l.reserved[vm] = struct{}{}
	}
	calls := (len(l.reserved) + provider.MaxListNames - 1) / provider.MaxListNames
	l.room = calls * provider.MaxListNames
	l.fixed = calls == 0
	pl.mu.Unlock()

	// take forms call i's names: up to MaxListNames of the reserved VMs,
	// which the last call takes all of (the room bounds them).
	take := func(i int) []string {
		pl.mu.Lock()
		defer pl.mu.Unlock()
		names := slices.Sorted(maps.Keys(l.reserved))
		if i < calls-1 && len(names) > provider.MaxListNames {
			names = names[:provider.MaxListNames]
		}
		for _, vm := range names {
			l.names[vm] = struct{}{}
			delete(l.reserved, vm)
		}
		l.fixed = i == calls-1
		return names
	}

	nl := pp.lister.(provider.NameLister)
	l.byVM = make(map[string][]provider.Observed, l.room)
	for i := range calls {
		var names []string
		var obs []provider.Observed
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		err := pp.call(cctx, "list", loc, func(ctx context.Context) (err error) {
			names = take(i)
			if len(names) == 0 {
				return nil
			}
			l.called = true
			obs, err = nl.ListNamed(ctx, loc, names)
			return err
		})
		cancel()
		if names == nil && err != nil {
			names = take(i) // not sent: its VMs get the error
		}
		if err != nil {
			if l.failed == nil {
				l.failed = make(map[string]error, len(names))
			}
			for _, vm := range names {
				l.failed[vm] = err
			}
			continue
		}
		for _, o := range obs {
			l.byVM[o.VM] = append(l.byVM[o.VM], o)
		}
	}
}

// listOwn is a look at vm in loc that does not wait for the poller's next
// listing (after a create whose outcome is unknown, or one the cloud
// refused): a call of its own, at the head of the account's queue. On a
// provider.NameLister it lists vm alone, so its cost does not grow with the
// fleet; else it lists loc and keeps vm's instances. It returns when the
// call was sent, on now's clock.
func (pp *paced) listOwn(ctx context.Context, loc provider.Location, vm string, now func() time.Time) ([]provider.Observed, time.Time, error) {
	var started time.Time
	var all []provider.Observed
	nl, named := pp.lister.(provider.NameLister)
	err := pp.call(withPriority(ctx), "list", loc, func(ctx context.Context) (err error) {
		started = now()
		if named {
			all, err = nl.ListNamed(ctx, loc, []string{vm})
		} else {
			all, err = pp.lister.List(ctx, loc)
		}
		return err
	})
	if err != nil {
		return nil, time.Time{}, err
	}
	var obs []provider.Observed
	for _, o := range all {
		if o.VM == vm {
			obs = append(obs, o)
		}
	}
	return obs, started, nil
}
