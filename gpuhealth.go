package gpuprov

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/org/gpuprov/gpu"
	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/provider"
)

// HealthOption adds to what Health looks at.
type HealthOption func(*healthConfig)

type healthConfig struct{ gpu bool }

// HealthGPU adds the machine's own view of its GPUs to Health: one SSH
// command (the acceptance probe, gpu.Script) on the ready VM, compared with
// the last check this Provisioner made of it, else with the VM's
// acceptance: Xid errors in the kernel log since then, uncorrected ECC
// errors rising, retired pages or row remaps pending, thermal or hardware
// slowdown, a GPU gone from the bus, the fabric manager down (see
// gpu.Health). Critical findings make the verdict unhealthy, warnings
// degraded. It needs the Provisioner's login key (WithSSHKey) and the VM's
// pinned host key; a probe that cannot run is a critical "gpu-probe"
// finding, not an error.
func HealthGPU() HealthOption { return func(c *healthConfig) { c.gpu = true } }

// gpuBaselines remembers, per VM, what the last GPU health check saw, so
// that the next one reports what is new ("Xid since the last check").
type gpuBaselines struct {
	mu sync.Mutex
	m  map[string]gpu.Baseline
}

func (b *gpuBaselines) get(name string) (gpu.Baseline, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	v, ok := b.m[name]
	return v, ok
}

func (b *gpuBaselines) put(name string, v gpu.Baseline) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.m == nil {
		b.m = map[string]gpu.Baseline{}
	}
	b.m[name] = v
}

// gpuHealth runs the probe on the ready VM row and returns its findings.
func (p *Provisioner) gpuHealth(ctx context.Context, row journal.VM) []provider.Finding {
	if row.State != StateReady {
		return nil
	}
	base, ok := p.gpuBase.get(row.Name)
	if !ok {
		base = p.acceptedBaseline(ctx, row)
	}
	res, err := p.Run(ctx, row.Name, gpu.Script(gpu.ProbeOptions{}))
	if err != nil && len(res.Stdout) == 0 {
		return []provider.Finding{{Severity: provider.Critical, Code: "gpu-probe", At: p.clock.Now(),
			Message: fmt.Sprintf("the GPU probe did not run: %v%s", err, lastLine(res.Stderr))}}
	}
	probe, err := gpu.Parse(res.Stdout)
	if err != nil {
		return []provider.Finding{{Severity: provider.Critical, Code: "gpu-probe", At: p.clock.Now(),
			Message: fmt.Sprintf("the GPU probe's output: %v", err)}}
	}
	fs := gpu.Health(probe, base, p.accept.opts)
	now := p.clock.Now()
	for i := range fs {
		if fs[i].At.IsZero() {
			fs[i].At = now
		}
	}
	p.gpuBase.put(row.Name, gpu.BaselineOf(probe, base))
	return fs
}

// acceptedBaseline is the baseline journaled with the VM's accepted
// attempt, or the zero baseline (everything since boot) when there is none.
func (p *Provisioner) acceptedBaseline(ctx context.Context, row journal.VM) gpu.Baseline {
	as, err := p.j.Attempts(ctx, row.Name)
	if err != nil {
		return gpu.Baseline{}
	}
	for i := len(as) - 1; i >= 0; i-- {
		if as[i].State == journal.AttemptSucceeded && len(as[i].Acceptance) > 0 {
			var r gpu.Report
			if json.Unmarshal(as[i].Acceptance, &r) == nil {
				return r.Baseline
			}
		}
	}
	return gpu.Baseline{}
}
