package gpu

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// throttleBits are nvidia-smi -q's clocks event (throttle) reasons, with
// the bits clocks_event_reasons.active gives them (nvidia-smi
// --help-query-gpu).
var throttleBits = map[string]uint64{
	"Idle": 0x1, "Applications Clocks Setting": 0x2, "SW Power Cap": 0x4, "HW Slowdown": 0x8, "Sync Boost": 0x10,
	"SW Thermal Slowdown": 0x20, "HW Thermal Slowdown": 0x40, "HW Power Brake Slowdown": 0x80, "Display Clock Setting": 0x100,
}

// parseQ reads nvidia-smi -q: the driver and CUDA versions, each GPU's
// Fabric state and status, and each GPU's facts as the query reads them
// (into QGPUs), with "N/A" and bracketed values recorded as not readable.
func (p *Probe) parseQ(out string) {
	var g *GPU
	var stack []string // the headers above the current line, by depth
	flush := func() {
		if g != nil {
			p.QGPUs = append(p.QGPUs, *g)
		}
	}
	for _, raw := range strings.Split(out, "\n") {
		line := strings.TrimRight(raw, " \r")
		text := strings.TrimSpace(line)
		if text == "" {
			continue
		}
		depth := (len(line) - len(strings.TrimLeft(line, " "))) / 4
		if depth == 0 {
			if bus, ok := strings.CutPrefix(text, "GPU "); ok && strings.Count(bus, ":") == 2 && !strings.Contains(bus, " ") {
				flush()
				g = &GPU{Index: len(p.QGPUs), BusID: NormBus(bus), Driver: p.Driver}
				stack = stack[:0]
				continue
			}
		}
		key, val, hasVal := strings.Cut(text, ":")
		key, val = strings.TrimSpace(key), strings.TrimSpace(val)
		if depth == 0 {
			switch key {
			case "Driver Version":
				p.Driver = val
			case "CUDA Version":
				p.CUDA = val
			}
			continue
		}
		if g == nil {
			continue
		}
		if len(stack) > depth-1 {
			stack = stack[:depth-1]
		}
		if !hasVal {
			stack = append(stack, key)
			continue
		}
		g.setQ(p, strings.Join(append(slices.Clone(stack), key), "/"), val)
	}
	flush()
}

// setQ records one "path : value" line of a GPU's -q section.
func (g *GPU) setQ(p *Probe, path, v string) {
	unit := func(suffix string) string { // "23034 MiB" → "23034"
		if notReadable(v) {
			return v
		}
		return strings.TrimSpace(strings.TrimSuffix(v, suffix))
	}
	switch {
	case path == "Product Name":
		g.set("name", v)
	case path == "Serial Number":
		g.set("serial", v)
	case path == "GPU UUID":
		g.set("uuid", v)
	case path == "FB Memory Usage/Total":
		g.set("memory.total", unit("MiB"))
	case path == "ECC Mode/Current":
		g.set("ecc.mode.current", v)
	case strings.HasPrefix(path, "ECC Errors/Volatile/") && strings.Contains(path, "Uncorrectable"):
		const f = "ecc.errors.uncorrected.volatile.total"
		if notReadable(v) {
			g.na(f, v)
			return
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			g.na(f, fmt.Sprintf("unreadable %q", v))
			return
		}
		if g.Uncorrected == nil {
			g.Uncorrected = new(int64)
		}
		*g.Uncorrected += n
	case path == "Retired Pages/Pending Page Blacklist" || path == "Retired Pages/Pending Page Retirement":
		g.set("retired_pages.pending", v)
	case path == "Remapped Rows": // "Remapped Rows : N/A" where the GPU has none
		g.set("remapped_rows.pending", v)
		g.set("remapped_rows.failure", v)
	case path == "Remapped Rows/Pending":
		g.set("remapped_rows.pending", v)
	case path == "Remapped Rows/Remapping Failure Occurred":
		g.set("remapped_rows.failure", v)
	case path == "PCI/GPU Link Info/PCIe Generation/Current":
		g.set("pcie.link.gen.current", v)
	case path == "PCI/GPU Link Info/PCIe Generation/Max":
		g.set("pcie.link.gen.max", v)
	case path == "PCI/GPU Link Info/Link Width/Current":
		g.set("pcie.link.width.current", unit("x"))
	case path == "PCI/GPU Link Info/Link Width/Max":
		g.set("pcie.link.width.max", unit("x"))
	case strings.HasPrefix(path, "Clocks Event Reasons/") || strings.HasPrefix(path, "Clocks Throttle Reasons/"):
		_, reason, _ := strings.Cut(path, "/")
		bit, ok := throttleBits[reason]
		if !ok || notReadable(v) {
			return
		}
		if g.Throttle == nil {
			g.Throttle = new(uint64)
		}
		if v == "Active" {
			*g.Throttle |= bit
		}
	case path == "Temperature/GPU Current Temp":
		g.set("temperature.gpu", unit("C"))
	case path == "Fabric/State" || path == "Fabric/Status":
		if p.Fabric == nil {
			p.Fabric = map[string]Fabric{}
		}
		f := p.Fabric[g.BusID]
		if path == "Fabric/State" {
			f.State = v
		} else {
			f.Status = v
		}
		p.Fabric[g.BusID] = f
	}
}
