package gpuprov

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"time"

	"github.com/org/gpuprov/journal"
)

// Leases. A VM is driven by one process at a time: the one holding its lease
// in the journal. The journal's own check (every VM write is conditional on
// the owner) stops a process whose lease was taken over at its next write,
// but a cloud call does not go through the journal: a process whose
// heartbeat could not reach the journal while its create waited for the
// account's turn would send that create after another process had taken the
// VM over. So every cloud call and remote command made for a VM is fenced:
// at the moment it is granted its turn, after every wait, the process's
// lease on the VM must still be valid for at least the margin
// (WithLeaseMargin), judged on the Provisioner's clock from the last renewal
// the journal confirmed (the time the renewal was asked, plus the TTL). A
// lease closer to its end is renewed first, synchronously; a lease the
// journal reports lost cancels the VM's driver at once. While the journal
// cannot be reached, the call waits for it, until the call's context ends.
// docs/journal.md says what window remains and how to choose TTL and margin.

// lease is what this process knows of its lease on one VM.
type lease struct {
	// until is the end of the lease on the Provisioner's clock, as the
	// journal last confirmed it: the time the confirming write was asked,
	// plus the TTL. The journal's own expiry is no earlier.
	until time.Time
	// gen counts the confirmations: a renewal that reports the lease lost
	// is believed only when no write confirmed it since it was asked.
	gen uint64
}

// fenceKey carries the fence of a VM's driver in its calls' contexts.
type (
	fenceKey struct{}
	fence    func(context.Context) error
)

// fenced returns ctx with the fence of the VM named name: its cloud calls
// (see paced.turn) and remote commands (fencedConn) wait for it.
func (p *Provisioner) fenced(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, fenceKey{}, fence(func(ctx context.Context) error { return p.fence(ctx, name) }))
}

// checkFence passes ctx's fence, if it has one.
func checkFence(ctx context.Context) error {
	if f, ok := ctx.Value(fenceKey{}).(fence); ok {
		return f(ctx)
	}
	return nil
}

// hold registers a lease this process must keep renewing.
func (p *Provisioner) hold(name string) {
	p.mu.Lock()
	p.held[name]++
	p.mu.Unlock()
}

// claim holds name for a driver unless a driver of this process holds it
// already: leases are per process, so only this keeps two drivers of one
// process (a Launch and a Recover, say) off one VM.
func (p *Provisioner) claim(name string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held[name] > 0 {
		return false
	}
	p.held[name]++
	return true
}

// grant records that the journal granted this process the lease on name
// (a Create or an Acquire) by a write asked at asked.
func (p *Provisioner) grant(name string, asked time.Time) { p.confirm(name, asked, true) }

// renewed records that the journal renewed the lease on name by a write
// asked at asked; a lease lost or let go of since stays so.
func (p *Provisioner) renewed(name string, asked time.Time) { p.confirm(name, asked, false) }

func (p *Provisioner) confirm(name string, asked time.Time, granted bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held[name] <= 0 {
		return // let go of since
	}
	l := p.leases[name]
	if l == nil {
		if !granted {
			return
		}
		l = &lease{}
		p.leases[name] = l
	}
	if until := asked.Add(p.leaseTTL); until.After(l.until) {
		l.until = until
	}
	l.gen++
}

// release stops renewing the lease and, when free is set, frees it in the
// journal (a driver that ended the VM freed it in its last write already).
func (p *Provisioner) release(name string, free bool) {
	p.mu.Lock()
	p.held[name]--
	last := p.held[name] <= 0
	if last {
		delete(p.held, name)
		delete(p.leases, name)
	}
	p.mu.Unlock()
	if last && free {
		// A detached context: releasing must happen even when the caller gave up.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := p.j.Release(ctx, name, p.owner); err != nil {
			p.log.Warn("releasing lease", "vm", name, "err", err)
		}
	}
}

// errLeaseLost is a driver's end when the journal says another process
// holds its VM's lease: it stops where it is, sending and writing nothing
// more.
func leaseLostError(name string) error {
	return errorf("VM %s: %w: another process drives it now", name, journal.ErrLeaseLost)
}

// lost acts on the journal's word that this process no longer holds the
// lease on name (renewals asked at generation gen): the VM's driver is
// cancelled at once, and every fenced call of it refused.
func (p *Provisioner) lost(name string, gen uint64) {
	p.mu.Lock()
	l := p.leases[name]
	if l == nil || l.gen != gen {
		p.mu.Unlock()
		return // confirmed since the renewal was asked, or let go of
	}
	delete(p.leases, name)
	r := p.running[name]
	p.mu.Unlock()
	p.log.Warn("lease lost; another process drives the VM now", "vm", name)
	if r != nil {
		r.cancel(leaseLostError(name))
	}
}

// fence returns nil when this process's lease on name is valid for at
// least the margin beyond now, renewing it first when it is not. It waits
// while the journal cannot be reached, and fails when the journal says
// the lease is lost or when ctx ends first.
func (p *Provisioner) fence(ctx context.Context, name string) error {
	var failed error // the last renewal's error
	for n := 0; ; n++ {
		p.mu.Lock()
		l := p.leases[name]
		var until time.Time
		var gen uint64
		if l != nil {
			until, gen = l.until, l.gen
		}
		p.mu.Unlock()
		if l == nil {
			return leaseLostError(name) // lost, or never confirmed
		}
		now := p.clock.Now()
		if until.Sub(now) >= p.leaseMargin {
			return nil
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), journalWait)
		lost, err := p.j.Renew(rctx, p.owner, now, now.Add(p.leaseTTL), []string{name})
		cancel()
		switch {
		case err == nil && len(lost) > 0:
			p.lost(name, gen)
			return leaseLostError(name)
		case err == nil:
			p.renewed(name, now)
			continue
		}
		failed = err
		wait := min(time.Duration(1<<min(n, 4))*time.Second, p.leaseTTL/3)
		p.log.Warn("lease not confirmed; waiting for the journal", "vm", name, "err", err, "retry_in", wait)
		if err := p.clock.Sleep(ctx, wait); err != nil {
			return &journalError{fmt.Errorf("lease on VM %s not confirmed since %s: %w", name,
				until.Add(-p.leaseTTL).UTC().Format(time.RFC3339), errors.Join(failed, err))}
		}
	}
}

// journalWait bounds one journal call of the lease machinery.
const journalWait = 10 * time.Second

// heartbeat renews, every third of the TTL, the leases this process holds
// and the journal confirmed; a lease the journal reports lost ends its
// driver (see lost).
func (p *Provisioner) heartbeat() {
	defer close(p.hbDone)
	for {
		t := p.clock.NewTimer(p.leaseTTL / 3)
		select {
		case <-p.stopHB:
			t.Stop()
			return
		case <-t.C():
		}
		p.mu.Lock()
		gens := make(map[string]uint64, len(p.leases))
		for name, l := range p.leases {
			gens[name] = l.gen
		}
		p.mu.Unlock()
		if len(gens) == 0 {
			continue
		}
		names := slices.Sorted(maps.Keys(gens))
		ctx, cancel := context.WithTimeout(context.Background(), journalWait)
		asked := p.clock.Now()
		lost, err := p.j.Renew(ctx, p.owner, asked, asked.Add(p.leaseTTL), names)
		cancel()
		if err != nil {
			p.log.Warn("renewing leases", "err", err)
			continue
		}
		gone := map[string]bool{}
		for _, n := range lost {
			gone[n] = true
			p.lost(n, gens[n])
		}
		for _, n := range names {
			if !gone[n] {
				p.renewed(n, asked)
			}
		}
	}
}

// fencedConn passes its context's fence before every remote command and
// file it sends: a bootstrap or a join, like a cloud call, goes out only
// under a valid lease.
type fencedConn struct{ Conn }

func (c fencedConn) Run(ctx context.Context, cmd string) ([]byte, []byte, error) {
	if err := checkFence(ctx); err != nil {
		return nil, nil, err
	}
	return c.Conn.Run(ctx, cmd)
}

func (c fencedConn) WriteFile(ctx context.Context, path string, content []byte, mode fs.FileMode) error {
	if err := checkFence(ctx); err != nil {
		return err
	}
	return c.Conn.WriteFile(ctx, path, content, mode)
}
