package gpuprov

import (
	"context"
	"errors"
	"time"

	"github.com/org/gpuprov/journal"
)

// DefaultRetention is how long the journal keeps the rows, attempts and
// events of a VM that ended (deleted or failed) before Prune removes them.
const DefaultRetention = 30 * 24 * time.Hour

// WithRetention sets how long Prune keeps what the journal holds of VMs
// that ended (default DefaultRetention).
func WithRetention(d time.Duration) Option { return func(p *Provisioner) { p.retention = d } }

// Prune removes from the journal what it holds of VMs that ended more than the retention ago, and expired blocks, in bounded batches beside running launches. A journal that cannot prune (not a journal.Pruner) returns an error wrapping errors.ErrUnsupported.
//
// A retention <= 0 keeps everything: Prune returns a zero result and nil.
// Otherwise it calls the journal's Prune with Before the clock's now minus
// the retention, Now the clock's now and the default batch (see
// journal.Pruner): a VM that is not deleted or failed, or whose lease is
// live, is never removed, so Prune is safe beside launches, deletes and
// Recover, in this process or others. After it, Get and History of a
// pruned VM fail with ErrNotFound. On an error (ctx's included) the result
// counts what was removed before it.
func (p *Provisioner) Prune(ctx context.Context) (res journal.PruneResult, err error) {
	ctx, sp := p.startOp(ctx, "gpuprov.Prune")
	if sp.IsRecording() {
		defer func() { endSpan(sp, err) }()
	}
	return p.prune(ctx)
}

// prune is Prune within its span.
func (p *Provisioner) prune(ctx context.Context) (journal.PruneResult, error) {
	if p.retention <= 0 {
		return journal.PruneResult{}, nil
	}
	pr, ok := p.j.(journal.Pruner)
	if !ok {
		return journal.PruneResult{}, errorf("prune: the journal (%T) cannot prune: %w", p.j, errors.ErrUnsupported)
	}
	now := p.clock.Now()
	res, err := pr.Prune(ctx, journal.PruneOptions{Before: now.Add(-p.retention), Now: now})
	if err != nil {
		return res, errorf("prune: %w", err)
	}
	return res, nil
}
