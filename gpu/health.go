package gpu

import (
	"fmt"
	"slices"
	"strings"

	"github.com/org/gpuprov/provider"
)

// Health compares the machine's probe p with a baseline (the accepted
// Report's, or the previous check's) and returns what is wrong or new:
//
//	gpu-driver         the driver does not answer, or cannot reach a GPU      critical
//	gpu-gone           fewer GPUs than the baseline, or one on the bus that
//	                   nvidia-smi does not list                               critical
//	gpu-xid-N          an Xid since the baseline: critical for the kinds the
//	                   catalog says need a reset or a reboot, else a warning
//	gpu-ecc            uncorrected ECC errors rising (or any, against an
//	                   empty baseline)                                         critical
//	gpu-remap-failure  a row remapping failure                                 critical
//	gpu-pending        retired pages or a row remap pending                    warn
//	gpu-slowdown       hardware or thermal slowdown active                     warn
//	gpu-fabric         the NVSwitch fabric or the fabric manager down          critical
//
// A baseline from another boot counts every Xid of this boot as new.
// Repeated lines of one Xid on one GPU are one finding. A finding whose
// check (see Checks) is in o.Off is not returned.
func Health(p *Probe, base Baseline, o Options) []provider.Finding {
	var fs []provider.Finding
	add := func(sev provider.Severity, code, format string, args ...any) {
		if slices.Contains(o.Off, healthCheck(code)) {
			return
		}
		fs = append(fs, provider.Finding{Severity: sev, Code: code, Message: fmt.Sprintf(format, args...)})
	}
	if len(p.GPUs) == 0 {
		msg := firstLine(p.QueryError)
		if msg == "" {
			msg = fmt.Sprintf("nvidia-smi exited %d and listed no GPU", p.QueryRC)
		}
		add(provider.Critical, "gpu-driver", "the driver does not answer: %s", msg)
	} else if len(p.Lost) > 0 {
		add(provider.Critical, "gpu-driver", "the driver cannot reach GPU %s: %s", strings.Join(p.Lost, ", "), firstLine(p.QueryError))
	}
	if base.GPUs > 0 && len(p.GPUs) < base.GPUs {
		add(provider.Critical, "gpu-gone", "%d of %d GPUs visible", len(p.GPUs), base.GPUs)
	}
	if m := p.missing(); len(m) > 0 {
		add(provider.Critical, "gpu-gone", "on the bus but not listed by nvidia-smi: %s", strings.Join(m, ", "))
	} else if p.BusRead && len(base.Bus) > 0 {
		now := map[string]bool{}
		for _, d := range p.GPUsOnBus() {
			now[d.Addr] = true
		}
		var gone []string
		for _, a := range base.Bus {
			if !now[a] {
				gone = append(gone, a)
			}
		}
		if len(gone) > 0 {
			add(provider.Critical, "gpu-gone", "gone from the PCI bus: %s", strings.Join(gone, ", "))
		}
	}
	sameBoot := base.BootID != "" && base.BootID == p.BootID
	var fresh []Xid
	for i, x := range p.Xids {
		if sameBoot && (x.Since >= 0 && x.Since <= base.XidSince || x.Since < 0 && i < base.XidCount) {
			continue
		}
		fresh = append(fresh, x)
	}
	for _, x := range groupXids(fresh) {
		info, ok := XidOf(x.Code)
		sev, name := provider.Warn, x.Text
		if ok {
			name = info.Name
			if info.Kind != XidApp {
				sev = provider.Critical
				name += " (" + info.Kind.String() + ")"
			}
		}
		times := ""
		if x.n > 1 {
			times = fmt.Sprintf(", %d times", x.n)
		}
		add(sev, fmt.Sprintf("gpu-xid-%d", x.Code), "Xid %d on %s%s: %s; see %s", x.Code, x.Bus, times, name, XidCatalog)
	}
	for _, g := range p.GPUs {
		if g.Uncorrected != nil && *g.Uncorrected > 0 {
			if before, ok := base.Uncorrected[g.UUID]; !ok || *g.Uncorrected > before {
				add(provider.Critical, "gpu-ecc", "GPU %d (%s): uncorrectable ECC errors at %d (were %d)", g.Index, g.BusID, *g.Uncorrected, before)
			}
		}
		if g.RemapFailure != nil && *g.RemapFailure {
			add(provider.Critical, "gpu-remap-failure", "GPU %d (%s) had a row remapping failure", g.Index, g.BusID)
		}
		if g.RetiredPend != nil && *g.RetiredPend || g.RemapPending != nil && *g.RemapPending {
			add(provider.Warn, "gpu-pending", "GPU %d (%s) has retired pages or a row remap pending: a GPU reset applies them", g.Index, g.BusID)
		}
		if g.Throttle != nil {
			if why := slowdown(*g.Throttle); why != "" {
				add(provider.Warn, "gpu-slowdown", "GPU %d (%s): %s", g.Index, g.BusID, why)
			}
		}
		if f, ok := p.Fabric[g.BusID]; ok && !notReadable(f.State) && (f.State != "Completed" || f.Status != "Success") {
			add(provider.Critical, "gpu-fabric", "GPU %d's NVSwitch fabric is %q (status %q)", g.Index, f.State, f.Status)
		}
	}
	if p.NVSwitches() > 0 && p.FabricManager != "" && p.FabricManager != "active" {
		add(provider.Critical, "gpu-fabric", "nvidia-fabricmanager is %s", p.FabricManager)
	}
	slices.SortStableFunc(fs, func(a, b provider.Finding) int { return int(b.Severity) - int(a.Severity) })
	return fs
}

// healthCheck names the acceptance check a Health code belongs to.
func healthCheck(code string) string {
	switch {
	case strings.HasPrefix(code, "gpu-xid-"):
		return CheckXid
	case code == "gpu-ecc":
		return CheckECC
	case code == "gpu-remap-failure", code == "gpu-pending":
		return CheckRetirement
	case code == "gpu-slowdown":
		return CheckThrottle
	case code == "gpu-fabric":
		return CheckFabric
	case code == "gpu-gone":
		return CheckCount
	}
	return CheckDriver
}
