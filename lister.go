package gpuprov

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/org/gpuprov/clock"
	"github.com/org/gpuprov/provider"
)

// listing is one List call of one location, shared by every VM that polls
// there: a thousand VMs booting in one zone cost one API call per poll
// interval, not a thousand.
type listing struct {
	started time.Time
	turns   int32 // the account's turns the List took (its pages, for a RequestPacer)
	done    chan struct{}
	byVM    map[string][]provider.Observed
	err     error
}

// poller coalesces the looks at one location of one provider (at every
// location, for a provider whose Capabilities.ListAll is set). Listings
// start at most once per PollInterval: every VM polls that often, so one
// listing per interval serves them all, and a thousand staggered VMs do not
// keep a listing running all the time.
type poller struct {
	mu       sync.Mutex
	last     *listing // the newest finished listing
	inflight *listing
	next     *listing // starts when inflight ends; shared by those inflight is too old for
}

// listFor returns vm's instances in loc from a listing that started no
// earlier than fresh: the newest finished one if it qualifies, else the one
// in flight if it does, else a new one. The List call runs on a context of
// its own (bounded), so one caller giving up does not fail the others.
func (pp *paced) listFor(ctx context.Context, clk clock.Clock, loc provider.Location, vm string, fresh time.Time) ([]provider.Observed, time.Time, error) {
	where := loc
	if pp.caps.ListAll {
		where = provider.Location{}
	}
	pp.mu.Lock()
	pl := pp.pollers[where]
	if pl == nil {
		pl = &poller{}
		pp.pollers[where] = pl
	}
	pp.mu.Unlock()

	pl.mu.Lock()
	var l *listing
	switch {
	case pl.last != nil && !pl.last.started.Before(fresh):
		l = pl.last
	case pl.inflight != nil && !pl.inflight.started.Before(fresh):
		l = pl.inflight
	case pl.inflight != nil:
		// At most one List per location runs at a time: callers it is
		// too old for share the one that starts when it ends.
		if pl.next == nil {
			pl.next = &listing{done: make(chan struct{})}
		}
		l = pl.next
	default:
		l = &listing{started: pp.nextListing(pl, clk), done: make(chan struct{})}
		pl.inflight = l
		go pp.runListing(pl, l, where, clk)
	}
	pl.mu.Unlock()

	select {
	case <-l.done:
	case <-ctx.Done():
		return nil, time.Time{}, context.Cause(ctx)
	}
	if l.err != nil {
		return nil, time.Time{}, l.err
	}
	if where == loc {
		return l.byVM[vm], l.started, nil
	}
	var here []provider.Observed
	for _, o := range l.byVM[vm] {
		if o.Location.Region == loc.Region && (loc.Zone == "" || o.Location.Zone == loc.Zone) {
			here = append(here, o)
		}
	}
	return here, l.started, nil
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

func (pp *paced) runListing(pl *poller, l *listing, loc provider.Location, clk clock.Clock) {
	defer close(l.done)
	if err := clk.Sleep(context.Background(), l.started.Sub(clk.Now())); err != nil {
		l.err = err
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var all []provider.Observed
	var turns atomic.Int32
	l.err = pp.call(context.WithValue(withPriority(ctx), turnsKey{}, &turns), "list", loc, func(ctx context.Context) (err error) {
		all, err = pp.lister.List(ctx, loc)
		return err
	})
	l.turns = turns.Load()
	if l.err == nil {
		l.byVM = make(map[string][]provider.Observed)
		for _, o := range all {
			l.byVM[o.VM] = append(l.byVM[o.VM], o)
		}
	}
	pl.mu.Lock()
	if pl.inflight == l {
		pl.inflight = nil
	}
	if l.err == nil && (pl.last == nil || pl.last.started.Before(l.started)) {
		pl.last = l
	}
	if n := pl.next; n != nil {
		pl.next = nil
		n.started = pp.nextListing(pl, clk)
		pl.inflight = n
		go pp.runListing(pl, n, loc, clk)
	}
	pl.mu.Unlock()
}
