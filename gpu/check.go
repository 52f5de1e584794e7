package gpu

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/org/gpuprov/provider"
)

// Check names, as Options.Ignore and Report findings use them.
const (
	CheckDriver      = "driver"
	CheckCount       = "count"
	CheckModel       = "model"
	CheckMemory      = "memory"
	CheckECC         = "ecc"
	CheckRetirement  = "retirement"
	CheckLink        = "link"
	CheckFabric      = "fabric"
	CheckXid         = "xid"
	CheckThrottle    = "throttle"
	CheckTemperature = "temperature"
	CheckDCGM        = "dcgm"
	CheckCommand     = "command"
)

// Checks lists every check, in the order they are made.
var Checks = []string{CheckDriver, CheckCount, CheckModel, CheckMemory, CheckECC, CheckRetirement, CheckLink,
	CheckFabric, CheckXid, CheckThrottle, CheckTemperature, CheckDCGM, CheckCommand}

// Sources each finding cites: NVIDIA's documentation page and section.
const (
	smiDoc        = "https://docs.nvidia.com/deploy/nvidia-smi/index.html"
	citeECC       = smiDoc + ", ECC Mode and ECC Errors (ecc.mode.current, ecc.errors.uncorrected.volatile.total)"
	citeLink      = smiDoc + ", PCI > GPU Link Info (pcie.link.width.current, pcie.link.width.max)"
	citeThrottle  = smiDoc + ", Clocks Event Reasons (clocks_event_reasons.active; NVML nvmlClocksEventReason*)"
	citeTemp      = smiDoc + ", Temperature (temperature.gpu)"
	citeRetire    = "https://docs.nvidia.com/deploy/dynamic-page-retirement/index.html, Visibility (retired_pages.pending)"
	citeRemap     = "https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/index.html, Row Remapping (remapped_rows.pending, remapped_rows.failure)"
	citeFabric    = "https://docs.nvidia.com/datacenter/tesla/fabric-manager-user-guide/index.html, GPU fabric state and the nvidia-fabricmanager service"
	citeDCGM      = "https://docs.nvidia.com/datacenter/dcgm/latest/user-guide/dcgm-diagnostics.html, Run Levels (dcgmi diag -r)"
	citeGPUTable  = "provider.LookupGPU (gpuprov's GPU table)"
	citeDriverMsg = "the driver's own message (nvidia-smi)"
	citeBus       = "lspci -D -n -d 10de: against nvidia-smi --query-gpu=pci.bus_id"
)

// Throttle (clocks event) reasons the throttle check warns of: the bits of
// clocks_event_reasons.active (clocks_throttle_reasons.active), which
// nvidia-smi --help-query-gpu defines by NVML's nvmlClocksEventReason*
// constants in nvml.h.
const (
	ThrottleSWThermal   = 0x20
	ThrottleHWSlowdown  = 0x08
	ThrottleHWThermal   = 0x40
	ThrottleHWPowerBrak = 0x80
)

// Expect is what the machine should have: the offer's GPUs.
type Expect struct {
	// Model is the canonical GPU name (provider.CanonicalGPU); "" skips the
	// model check, and the memory check then holds each GPU to its own
	// model's memory.
	Model string
	// Count is how many GPUs the offer has; 0 skips the count check.
	Count int
}

// Options are the checks' thresholds. The zero value is the default.
type Options struct {
	// MemoryTolerance is how far below the model's memory (GiB, from
	// provider's GPU table) a GPU's memory.total may be: default 0.10
	// (boards report less than their marketed size: an L4 has 22.5 GiB
	// of its 24 GB, a T4 15 of 16).
	MemoryTolerance float64
	// MaxTemperatureC warns of a GPU at or above it at acceptance:
	// default 85.
	MaxTemperatureC int64
	// Ignore names checks (Checks) whose failures only warn: the finding
	// is kept, with Severity Warn, and the machine passes.
	Ignore []string
	// Off names checks not made at all; each is listed in Report.Skipped
	// as turned off, never passed silently.
	Off []string
}

func (o Options) tolerance() float64 {
	if o.MemoryTolerance > 0 {
		return o.MemoryTolerance
	}
	return 0.10
}

func (o Options) maxTemp() int64 {
	if o.MaxTemperatureC > 0 {
		return o.MaxTemperatureC
	}
	return 85
}

// Finding is one thing a check found. GPU is the GPU's index, or -1 for
// the machine.
type Finding struct {
	Check    string            `json:"check"`
	Severity provider.Severity `json:"severity"`
	GPU      int               `json:"gpu"`
	Message  string            `json:"message"`
	Cite     string            `json:"cite,omitempty"`
}

// Skipped is a check that could not be made, and why: never a silent pass.
type Skipped struct {
	Check string `json:"check"`
	GPU   int    `json:"gpu"`
	Why   string `json:"why"`
}

// GPUResult is one GPU as the report lists it.
type GPUResult struct {
	Index  int      `json:"index"`
	UUID   string   `json:"uuid,omitempty"`
	Serial string   `json:"serial,omitempty"`
	BusID  string   `json:"bus_id,omitempty"`
	Name   string   `json:"name,omitempty"`
	Failed []string `json:"failed,omitempty"`
}

// Baseline is what a later Health compares with: the boot, the newest Xid
// seen, the GPUs and their uncorrected ECC counts.
type Baseline struct {
	BootID      string           `json:"boot_id,omitempty"`
	XidSince    float64          `json:"xid_since"`           // newest Xid's seconds since boot; -1: none
	XidCount    int              `json:"xid_count,omitempty"` // Xid lines seen (for logs without timestamps)
	GPUs        int              `json:"gpus"`
	Bus         []string         `json:"bus,omitempty"`
	Uncorrected map[string]int64 `json:"uncorrected,omitempty"` // by UUID
}

// Report is the result of the acceptance checks.
type Report struct {
	OK       bool        `json:"ok"`
	Summary  string      `json:"summary"`
	Driver   string      `json:"driver,omitempty"`
	CUDA     string      `json:"cuda,omitempty"`
	GPUs     []GPUResult `json:"gpus"`
	Findings []Finding   `json:"findings,omitempty"`
	Skipped  []Skipped   `json:"skipped,omitempty"`
	Baseline Baseline    `json:"baseline"`
	want     Expect
}

// AcceptanceError is a machine that failed acceptance.
type AcceptanceError struct{ Report *Report }

func (e *AcceptanceError) Error() string { return "gpu acceptance: " + e.Report.Summary }

// Err returns nil when the machine passed, else an *AcceptanceError.
func (r *Report) Err() error {
	if r.OK {
		return nil
	}
	return &AcceptanceError{r}
}

// Fail adds a failing finding (a check made outside Check, such as the
// request's own command) and updates OK and the summary.
func (r *Report) Fail(f Finding) {
	r.Findings = append(r.Findings, f)
	r.finish()
}

// Check judges the probe against what the offer promised.
func Check(p *Probe, want Expect, o Options) *Report {
	r := &Report{Driver: p.Driver, CUDA: p.CUDA, GPUs: []GPUResult{}, want: want}
	if r.Driver == "" && len(p.GPUs) > 0 {
		r.Driver = p.GPUs[0].Driver
	}
	for _, g := range p.GPUs {
		r.GPUs = append(r.GPUs, GPUResult{Index: g.Index, UUID: g.UUID, Serial: g.Serial, BusID: g.BusID, Name: g.Name})
	}
	for _, c := range o.Off {
		r.Skipped = append(r.Skipped, Skipped{Check: c, GPU: -1, Why: "turned off (Options.Off)"})
	}
	add := func(check string, sev provider.Severity, gpu int, cite, format string, args ...any) {
		if slices.Contains(o.Off, check) {
			return
		}
		if sev == provider.Critical && slices.Contains(o.Ignore, check) {
			sev = provider.Warn
		}
		r.Findings = append(r.Findings, Finding{Check: check, Severity: sev, GPU: gpu, Message: fmt.Sprintf(format, args...), Cite: cite})
	}
	skip := func(check string, gpu int, format string, args ...any) {
		if slices.Contains(o.Off, check) {
			return
		}
		r.Skipped = append(r.Skipped, Skipped{Check: check, GPU: gpu, Why: fmt.Sprintf(format, args...)})
	}
	// na reports whether field cannot be read on g (present: it was
	// parsed), and lists the check it feeds as skipped when so.
	na := func(check string, g GPU, field string, present bool) bool {
		if why, ok := g.NA[field]; ok {
			skip(check, g.Index, "%s is %s on GPU %d", field, why, g.Index)
			return true
		}
		if !present {
			skip(check, g.Index, "%s was not reported for GPU %d", field, g.Index)
			return true
		}
		return false
	}

	// driver
	if len(p.GPUs) == 0 {
		msg := firstLine(p.QueryError)
		if msg == "" {
			msg = fmt.Sprintf("nvidia-smi exited %d and listed no GPU", p.QueryRC)
		}
		if p.QueryRC == 127 {
			msg = "nvidia-smi is not installed: " + msg
		}
		add(CheckDriver, provider.Critical, -1, citeDriverMsg, "the driver does not answer: %s", msg)
	} else if len(p.Lost) > 0 {
		add(CheckDriver, provider.Critical, -1, citeDriverMsg, "the driver cannot reach GPU %s: %s", strings.Join(p.Lost, ", "), firstLine(p.QueryError))
	} else if p.FromQ {
		why := firstLine(p.QueryError)
		if why == "" {
			why = fmt.Sprintf("it exited %d", p.QueryRC)
		}
		add(CheckDriver, provider.Warn, -1, citeDriverMsg, "the GPU query listed no GPU (%s); the GPUs were read from nvidia-smi -q", why)
	}

	// count
	if want.Count > 0 && len(p.GPUs) != want.Count {
		msg := fmt.Sprintf("%d of %d GPUs visible", len(p.GPUs), want.Count)
		if len(p.GPUs) > want.Count {
			msg = fmt.Sprintf("%d GPUs visible; the offer has %d", len(p.GPUs), want.Count)
		}
		if missing := p.missing(); len(missing) > 0 {
			msg += "; missing " + strings.Join(missing, ", ")
		} else if !p.BusRead {
			msg += " (the PCI bus could not be read to name the missing ones)"
		}
		add(CheckCount, provider.Critical, -1, citeBus, "%s", msg)
	}

	model, known := provider.LookupGPU(want.Model)
	for _, g := range p.GPUs {
		// model
		if want.Model != "" {
			switch m, ok := provider.LookupGPU(g.Name); {
			case na(CheckModel, g, "name", g.Name != ""):
			case !ok:
				add(CheckModel, provider.Critical, g.Index, citeGPUTable, "GPU %d is %q, not a model gpuprov knows (want %s)", g.Index, g.Name, want.Model)
			case m.Name != want.Model:
				add(CheckModel, provider.Critical, g.Index, citeGPUTable, "GPU %d is %s (%q), not %s", g.Index, m.Name, g.Name, want.Model)
			}
		}
		// memory: against the model asked for, else the GPU's own
		model, known := model, known
		if !known {
			model, known = provider.LookupGPU(g.Name)
		}
		if !known {
			skip(CheckMemory, g.Index, "neither %q nor GPU %d's name %q is in gpuprov's GPU table", want.Model, g.Index, g.Name)
		} else if !na(CheckMemory, g, "memory.total", g.MemoryMiB != nil) {
			gib := float64(*g.MemoryMiB) / 1024
			if floor := float64(model.MemoryGB) * (1 - o.tolerance()); gib < floor {
				add(CheckMemory, provider.Critical, g.Index, citeGPUTable, "GPU %d has %.1f GiB; a %s has %d (at least %.1f accepted)", g.Index, gib, model.Name, model.MemoryGB, floor)
			}
		}
		// ecc
		if g.ECCMode == "Disabled" {
			add(CheckECC, provider.Warn, g.Index, citeECC, "GPU %d has ECC disabled", g.Index)
		}
		if !na(CheckECC, g, "ecc.errors.uncorrected.volatile.total", g.Uncorrected != nil) && *g.Uncorrected > 0 {
			add(CheckECC, provider.Critical, g.Index, citeECC, "GPU %d (%s) has %d uncorrectable ECC errors since the driver loaded", g.Index, g.BusID, *g.Uncorrected)
		}
		// retirement
		if !na(CheckRetirement, g, "retired_pages.pending", g.RetiredPend != nil) && *g.RetiredPend {
			add(CheckRetirement, provider.Critical, g.Index, citeRetire, "GPU %d has retired pages pending (a reset applies them)", g.Index)
		}
		if !na(CheckRetirement, g, "remapped_rows.pending", g.RemapPending != nil) && *g.RemapPending {
			add(CheckRetirement, provider.Critical, g.Index, citeRemap, "GPU %d has a row remap pending (a reset applies it)", g.Index)
		}
		if !na(CheckRetirement, g, "remapped_rows.failure", g.RemapFailure != nil) && *g.RemapFailure {
			add(CheckRetirement, provider.Critical, g.Index, citeRemap, "GPU %d had a row remapping failure", g.Index)
		}
		// link: the width must be at its maximum; the generation drops at
		// idle and is no fault.
		if !na(CheckLink, g, "pcie.link.width.current", g.LinkWidth != nil) && !na(CheckLink, g, "pcie.link.width.max", g.LinkWidthMax != nil) &&
			*g.LinkWidth < *g.LinkWidthMax {
			add(CheckLink, provider.Critical, g.Index, citeLink, "GPU %d (%s) runs its PCIe link at x%d of x%d", g.Index, g.BusID, *g.LinkWidth, *g.LinkWidthMax)
		}
		// throttle
		if !na(CheckThrottle, g, "clocks_throttle_reasons.active", g.Throttle != nil) {
			if why := slowdown(*g.Throttle); why != "" {
				add(CheckThrottle, provider.Warn, g.Index, citeThrottle, "GPU %d is slowed down: %s", g.Index, why)
			}
		}
		// temperature
		if !na(CheckTemperature, g, "temperature.gpu", g.TempC != nil) && *g.TempC >= o.maxTemp() {
			add(CheckTemperature, provider.Warn, g.Index, citeTemp, "GPU %d is at %d C idle (warn from %d C)", g.Index, *g.TempC, o.maxTemp())
		}
	}

	// fabric
	for _, g := range p.GPUs {
		f, ok := p.Fabric[g.BusID]
		if !ok || notReadable(f.State) {
			continue
		}
		if f.State != "Completed" || f.Status != "Success" {
			add(CheckFabric, provider.Critical, g.Index, citeFabric, "GPU %d's NVSwitch fabric is %q (status %q), not Completed/Success: CUDA fails with \"system not yet initialized\"", g.Index, f.State, f.Status)
		}
	}
	switch {
	case p.NVSwitches() > 0 && p.FabricManager != "" && p.FabricManager != "active":
		add(CheckFabric, provider.Critical, -1, citeFabric, "%d NVSwitches on the bus and nvidia-fabricmanager is %s", p.NVSwitches(), p.FabricManager)
	case p.NVSwitches() > 0 && p.FabricManagerWhy != "":
		skip(CheckFabric, -1, "%d NVSwitches on the bus, and systemd cannot say whether nvidia-fabricmanager runs: %s", p.NVSwitches(), p.FabricManagerWhy)
	}

	// xid
	if !p.XidRead {
		skip(CheckXid, -1, "the kernel log is not readable (dmesg, sudo -n dmesg and journalctl -k all refused)")
	}
	for _, x := range groupXids(p.Xids) {
		info, ok := XidOf(x.Code)
		gpu := p.indexOfBus(x.Bus)
		cite := fmt.Sprintf("%s (Xid %d)", XidCatalog, x.Code)
		times := ""
		if x.n > 1 {
			times = fmt.Sprintf(", %d times", x.n)
		}
		if ok && info.Kind != XidApp {
			add(CheckXid, provider.Critical, gpu, cite, "Xid %d on %s since boot%s: %s (%s)", x.Code, x.Bus, times, info.Name, info.Kind)
			continue
		}
		name := x.Text
		if ok {
			name = info.Name
		}
		add(CheckXid, provider.Warn, gpu, cite, "Xid %d on %s since boot%s: %s", x.Code, x.Bus, times, name)
	}

	// dcgm
	if d := p.DCGM; d != nil {
		switch {
		case !d.Ran:
			skip(CheckDCGM, -1, "dcgmi diag did not run: %s", d.Text)
		case len(d.Failed) > 0:
			add(CheckDCGM, provider.Critical, -1, citeDCGM, "dcgmi diag failed: %s", strings.Join(d.Failed, ", "))
		}
		if len(d.Warned) > 0 {
			add(CheckDCGM, provider.Warn, -1, citeDCGM, "dcgmi diag warned: %s", strings.Join(d.Warned, ", "))
		}
	}
	r.Baseline = BaselineOf(p, Baseline{XidSince: -1})
	r.finish()
	return r
}

// slowdown names the hardware (and software thermal) slowdown reasons
// active in bits, or "".
func slowdown(bits uint64) string {
	var out []string
	for _, b := range []struct {
		bit  uint64
		name string
	}{{ThrottleHWSlowdown, "hardware slowdown"}, {ThrottleHWThermal, "hardware thermal slowdown"},
		{ThrottleHWPowerBrak, "hardware power brake"}, {ThrottleSWThermal, "software thermal slowdown"}} {
		if bits&b.bit != 0 {
			out = append(out, b.name)
		}
	}
	return strings.Join(out, ", ")
}

// missing lists the GPUs on the bus that nvidia-smi did not list.
func (p *Probe) missing() []string {
	seen := map[string]bool{}
	for _, g := range p.GPUs {
		seen[g.BusID] = true
	}
	var out []string
	for _, d := range p.GPUsOnBus() {
		if !seen[d.Addr] {
			out = append(out, d.Addr)
		}
	}
	return out
}

// indexOfBus returns the index of the GPU at bus (an Xid's "0000:8a:00"),
// or -1.
func (p *Probe) indexOfBus(bus string) int {
	for _, g := range p.GPUs {
		if strings.HasPrefix(g.BusID, NormBus(bus)) {
			return g.Index
		}
	}
	return -1
}

// finish sets OK, each GPU's failed checks and the one-line summary.
func (r *Report) finish() {
	r.OK = true
	var crit []string
	for i := range r.GPUs {
		r.GPUs[i].Failed = nil
	}
	for _, f := range r.Findings {
		if f.Severity != provider.Critical {
			continue
		}
		r.OK = false
		crit = append(crit, f.Message)
		for i := range r.GPUs {
			if r.GPUs[i].Index == f.GPU && !slices.Contains(r.GPUs[i].Failed, f.Check) {
				r.GPUs[i].Failed = append(r.GPUs[i].Failed, f.Check)
			}
		}
	}
	if !r.OK {
		if len(crit) > 3 {
			crit = append(crit[:3], fmt.Sprintf("and %d more", len(crit)-3))
		}
		r.Summary = strings.Join(crit, "; ")
		return
	}
	model := r.want.Model
	if model == "" && len(r.GPUs) > 0 {
		model = r.GPUs[0].Name
	}
	noun := "GPUs"
	if len(r.GPUs) == 1 {
		noun = "GPU"
	}
	r.Summary = fmt.Sprintf("%d %s %s healthy", len(r.GPUs), noun, model)
	var about []string
	if r.Driver != "" {
		about = append(about, "driver "+r.Driver)
	}
	if r.CUDA != "" {
		about = append(about, "CUDA "+r.CUDA)
	}
	if w := r.warnings(); w == 1 {
		about = append(about, "1 warning")
	} else if w > 1 {
		about = append(about, fmt.Sprintf("%d warnings", w))
	}
	if len(about) > 0 {
		r.Summary += " (" + strings.Join(about, ", ") + ")"
	}
}

func (r *Report) warnings() int {
	n := 0
	for _, f := range r.Findings {
		if f.Severity == provider.Warn {
			n++
		}
	}
	return n
}

// BaselineOf is the baseline the probe p leaves for the next Health: the
// newest Xid of p (or prev's, when p's log could not be read).
func BaselineOf(p *Probe, prev Baseline) Baseline {
	b := Baseline{BootID: p.BootID, XidSince: -1, GPUs: len(p.GPUs), Uncorrected: map[string]int64{}}
	for _, d := range p.GPUsOnBus() {
		b.Bus = append(b.Bus, d.Addr)
	}
	if !p.BusRead {
		b.Bus = prev.Bus
	}
	if p.XidRead {
		b.XidCount = len(p.Xids)
		for _, x := range p.Xids {
			b.XidSince = math.Max(b.XidSince, x.Since)
		}
	} else if prev.BootID == p.BootID {
		b.XidSince, b.XidCount = prev.XidSince, prev.XidCount
	}
	for _, g := range p.GPUs {
		if g.Uncorrected != nil && g.UUID != "" {
			b.Uncorrected[g.UUID] = *g.Uncorrected
		}
	}
	return b
}

// xidGroup is one Xid code on one GPU, n times.
type xidGroup struct {
	Xid
	n int
}

// groupXids folds repeated lines of the same Xid on the same GPU into one,
// in the order first seen.
func groupXids(xs []Xid) []xidGroup {
	var out []xidGroup
	at := map[string]int{}
	for _, x := range xs {
		k := fmt.Sprintf("%d@%s", x.Code, x.Bus)
		if i, ok := at[k]; ok {
			out[i].n++
			continue
		}
		at[k] = len(out)
		out = append(out, xidGroup{x, 1})
	}
	return out
}
