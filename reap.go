package gpuprov

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/org/gpuprov/journal"
)

// EvDeleting's message, when Reap deletes a VM, starts with "expired: ".

// errSkipped is deleteIf's answer when its condition no longer holds.
var errSkipped = errors.New("gpuprov: skipped")

// Reaped is one expired VM that Reap deleted, or tried to.
type Reaped struct {
	Name string
	// Why says which limit it reached: its TTL or its cost cap.
	Why string
	// Err is why the deletion did not finish (nil: deleted). ErrBusy: a
	// process of this or another host drives the VM; a later Reap tries
	// again.
	Err error
}

// reapParallel bounds the deletions one Reap runs at once.
const reapParallel = 16

// Reap deletes every ready VM of the journal whose expiry has passed: the
// end of its TTL, or the moment its accrued cost reached its MaxCost (see
// Request). It does not matter which process launched the VM or whether it
// still runs: the expiry is journaled when the VM becomes ready, and the
// deletion is Delete's, with its confirmed teardown. A VM is deleted only if
// it is still ready and expired once its lease is held. Recover runs Reap
// at its end; WithReaper runs it in the background.
func (p *Provisioner) Reap(ctx context.Context) (out []Reaped, err error) {
	ctx, sp := p.startOp(ctx, "gpuprov.Reap")
	if sp.IsRecording() {
		defer func() {
			sp.SetAttributes(attrCount.Int(len(out)))
			endSpan(sp, err)
		}()
	}
	return p.reap(ctx)
}

// reap is Reap within its span.
func (p *Provisioner) reap(ctx context.Context) ([]Reaped, error) {
	rows, err := p.j.ListVMs(ctx, journal.ListOptions{States: []journal.VMState{journal.StateReady}})
	if err != nil {
		return nil, fmt.Errorf("gpuprov: reap: listing VMs: %w", err)
	}
	now := p.clock.Now()
	var (
		out []Reaped
		mu  sync.Mutex
		wg  sync.WaitGroup
		sem = make(chan struct{}, reapParallel)
	)
	for _, r := range rows {
		if r.ExpiresAt.IsZero() || r.ExpiresAt.After(now) {
			continue
		}
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			var why string
			err := p.deleteIf(ctx, r.Name, func(row journal.VM) (string, bool) {
				if row.State != journal.StateReady || row.ExpiresAt.IsZero() || row.ExpiresAt.After(p.clock.Now()) {
					return "", false
				}
				why = expiredWhy(row)
				return "expired: " + why, true
			})
			if errors.Is(err, errSkipped) {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			out = append(out, Reaped{Name: r.Name, Why: why, Err: err})
		})
	}
	wg.Wait()
	return out, nil
}

// expiredWhy says which of row's limits its expiry is.
func expiredWhy(row journal.VM) string {
	var jr journaledRequest
	_ = json.Unmarshal(row.Request, &jr) // the row was launched from it; a bad one names no limit
	if jr.TTL > 0 && (jr.MaxCost == 0 || row.ReadyAt.Add(jr.TTL).Equal(row.ExpiresAt)) {
		return fmt.Sprintf("ready for its TTL of %v", jr.TTL)
	}
	if jr.MaxCost > 0 {
		return fmt.Sprintf("its billed cost reached its cap of %s (every attempt that billed, this machine at %s/h)",
			usd(jr.MaxCost), usd(row.PricePerHour))
	}
	return "its expiry " + row.ExpiresAt.UTC().Format(time.RFC3339) + " passed"
}

// WithReaper runs Reap every interval in the background, from New until
// Close, so that a long-running service enforces TTL and MaxCost on every VM
// of the journal (its own and those of processes that are gone). Failures
// are logged and tried again at the next interval. The reaper also watches
// every ready spot VM of the journal for interruption notices (see
// docs/interruptions.md, Request.OnInterruption, WithInterruptionHandler):
// one SSH session per VM whose cloud's machines hear of it, and, at each
// interval, an observation of those it cannot hear from; and it samples
// the GPUs of every ready VM with an IdleTimeout, one command per VM per
// interval over a kept SSH connection, deleting those idle for their
// timeout (docs/idle.md).
func WithReaper(interval time.Duration) Option {
	return func(p *Provisioner) {
		if interval <= 0 {
			p.pending = append(p.pending, fmt.Errorf("gpuprov: WithReaper(%v): want a positive interval", interval))
			return
		}
		p.reapEvery = interval
	}
}

// reaper is WithReaper's loop; it ends when ctx does (Close).
func (p *Provisioner) reaper(ctx context.Context) {
	defer p.stopIdle()
	defer p.stopWatches()
	for {
		if rows, err := p.j.ListVMs(ctx, journal.ListOptions{States: []journal.VMState{journal.StateReady}}); err != nil {
			p.log.Warn("reaper: listing the ready VMs", "err", err)
		} else {
			p.syncWatches(ctx, rows)
			p.sampleIdle(ctx, rows)
		}
		if err := p.clock.Sleep(ctx, p.reapEvery); err != nil {
			return
		}
		got, err := p.Reap(ctx)
		if err != nil {
			p.log.Warn("reap", "err", err)
			continue
		}
		for _, r := range got {
			if r.Err != nil && !errors.Is(r.Err, ErrBusy) {
				p.log.Warn("reap: deleting an expired VM", "vm", r.Name, "why", r.Why, "err", r.Err)
			}
		}
	}
}
