package simserver

import (
	"fmt"
	"hash/fnv"
	"strings"
	"time"
)

// The state files of an instance's emulated GPUs (R/.sim-gpu), which the
// scripts in gpuemu/ print or select from:
//
//	gpus          one line per GPU the driver enumerates, by index: tab-separated
//	              canonical-field=value pairs, or "!" and the error nvidia-smi
//	              prints for a GPU it cannot reach
//	fields        the field names --query-gpu accepts: name, canonical name, unit
//	q             the header of nvidia-smi -q; q.N the block of GPU N
//	L, table      nvidia-smi -L, and nvidia-smi alone
//	nodriver      present when nvidia-smi cannot talk to the driver: its text
//	lspci, kmsg   lspci -D -n -d 10de:, and the kernel log
//	fabricmanager systemctl is-active nvidia-fabricmanager (NVSwitch boards)

const (
	simDriver = "580.159.04"
	simCUDA   = "13.0"
)

// Clock event reason bits (nvml.h nvmlClocksEventReason*).
const (
	reasonIdle        = 0x1
	reasonHWSlowdown  = 0x8
	reasonHWThermal   = 0x40
	reasonsSupported  = "0x00000000000001FF"
	lostText          = "Unable to determine the device handle for GPU%s: Unknown Error"
	noDriverText      = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running.\n\n"
	xidUnknownProcess = "pid='<unknown>', name=<unknown>"
)

// simGPU is one GPU of an instance, faults applied.
type simGPU struct {
	bus                  string // lspci -D form, 0000:18:00.0
	board                gpuBoard
	uuid, serial         string
	width                int
	temp                 int
	reasons              uint64
	ecc                  int // uncorrectable volatile (and aggregate) DRAM errors
	pending, failure     bool
	fabricState          string
	fabricStatus         string
	missing, lost        bool // missing: not initialized by the driver; lost: fell off the bus
	smiIndex             int
	throttleMicroseconds int
}

// smiBus is the bus id as nvidia-smi prints it: 00000000:18:00.0.
func (g *simGPU) smiBus() string { return "0000" + strings.ToUpper(g.bus) }

func onOff(b bool, on, off string) string {
	if b {
		return on
	}
	return off
}

// renderGPUs renders the state files of in's GPUs with its faults applied,
// the -q timestamp being now.
func renderGPUs(in *instance, now time.Time) map[string]string {
	n := in.GPUCount
	offered := boardOf(in.GPU, in.GPUMemoryGB)
	sum := fnv.New64a()
	sum.Write([]byte(in.ID))
	seed := sum.Sum64()
	gs := make([]simGPU, n)
	for i := range gs {
		h := fnv.New64a()
		fmt.Fprintf(h, "%s/%d", in.ID, i)
		u := h.Sum64()
		gs[i] = simGPU{bus: busOf(i, n), board: offered,
			uuid:   fmt.Sprintf("GPU-%08x-%04x-%04x-%04x-%012x", uint32(u>>32), uint16(u>>16), uint16(u), uint16(seed>>48), seed&0xffffffffffff),
			serial: fmt.Sprintf("165%010d", u%10000000000), width: 16, temp: 33 + i%4, reasons: reasonIdle}
	}
	kmsg := bootLog(gs, in)
	noDriver := false
	wrong := ""
	fabricDown := false
	for k, f := range in.GPUFaults {
		i := n - 1
		if f.GPU != nil && *f.GPU >= 0 && *f.GPU < n {
			i = *f.GPU
		}
		at := faultUptime(in, k)
		g := &gs[i]
		switch f.Kind {
		case GPUMissing:
			g.missing = true
			kmsg = append(kmsg, fmt.Sprintf("[%12.6f] NVRM: GPU %s: RmInitAdapter failed! (0x24:0x72:1568)", at, g.bus),
				fmt.Sprintf("[%12.6f] NVRM: GPU %s: rm_init_adapter failed, device minor number %d", at+0.000312, g.bus, i))
		case GPUNoDriver:
			noDriver = true
		case GPUECC:
			g.ecc += 2
			kmsg = append(kmsg, xidLines(g, at, 48, xidUnknownProcess, xidText(48))...)
		case GPURetired:
			g.pending = true
			kmsg = append(kmsg, xidLines(g, at, 63, xidUnknownProcess, retirementText(g.board, 63))...)
		case GPURemapFailure:
			g.failure = true
			kmsg = append(kmsg, xidLines(g, at, 64, xidUnknownProcess, retirementText(g.board, 64))...)
		case GPUXid:
			code := f.Xid
			if code == 0 {
				code = 79
			}
			kmsg = append(kmsg, xidLines(g, at, code, "pid=2468, name=python", xidText(code))...)
		case GPUFallenOff:
			g.lost = true
			kmsg = append(kmsg, xidLines(g, at, 79, "pid=2468, name=python", xidText(79))...)
			kmsg = append(kmsg, fmt.Sprintf("[%12.6f] NVRM: GPU %s: GPU has fallen off the bus.", at+0.000051, g.bus))
		case GPUWrongModel:
			wrong = wrongModel(f, in.GPU)
		case GPUFabricDown:
			fabricDown = true
		case GPUNarrowLink:
			g.width = 8
		case GPUThermal:
			g.reasons = reasonHWSlowdown | reasonHWThermal
			g.temp = 92
			g.throttleMicroseconds = 48210000
		}
	}
	if wrong != "" {
		b := boardOf(wrong, in.GPUMemoryGB)
		for i := range gs {
			gs[i].board = b
		}
	}
	board := gs[0].board
	nvswitch := n == 8 && board.switchDev != ""
	for i := range gs {
		switch {
		case n == 8 && board.fabric && fabricDown:
			gs[i].fabricState, gs[i].fabricStatus = "In Progress", "N/A"
		case n == 8 && board.fabric:
			gs[i].fabricState, gs[i].fabricStatus = "Completed", "Success"
		default:
			gs[i].fabricState, gs[i].fabricStatus = "N/A", "N/A"
		}
	}
	if noDriver {
		// The module is not loaded: nothing of NVRM in the log.
		kmsg = kmsg[:2]
	}

	files := map[string]string{}
	var lspci []string
	for _, g := range gs {
		rev := "a1"
		if g.lost {
			rev = "ff" // config space reads all ones once a device is off the bus
		}
		lspci = append(lspci, fmt.Sprintf("%s 0302: 10de:%s (rev %s)", g.bus, g.board.device, rev))
	}
	if nvswitch {
		for _, b := range hgxSwitchBuses {
			lspci = append(lspci, fmt.Sprintf("0000:%s:00.0 0680: 10de:%s (rev a1)", b, board.switchDev))
		}
		files["fabricmanager"] = onOff(fabricDown && board.fabric, "failed", "active") + "\n"
	}
	files["lspci"] = lines(lspci)
	files["kmsg"] = lines(kmsg)
	if noDriver {
		files["nodriver"] = noDriverText
		return files
	}

	// What the driver enumerates: every GPU it initialized, a lost one
	// included (it keeps its index and answers with an error).
	var seen []*simGPU
	for i := range gs {
		if !gs[i].missing {
			gs[i].smiIndex = len(seen)
			seen = append(seen, &gs[i])
		}
	}
	var rows, list []string
	var q strings.Builder
	fmt.Fprintf(&q, "\n==============NVSMI LOG==============\n\n%-55s: %s\n%-55s: %s\n%-55s: %s\n\n%-55s: %d\n",
		"Timestamp", now.UTC().Format("Mon Jan _2 15:04:05 2006"), "Driver Version", simDriver, "CUDA Version", simCUDA,
		"Attached GPUs", len(seen))
	files["q"] = q.String()
	for _, g := range seen {
		idx := fmt.Sprint(g.smiIndex)
		if g.lost {
			e := fmt.Sprintf(lostText, strings.ToUpper(g.bus))
			rows = append(rows, "!\t"+e)
			list = append(list, e)
			files["q."+idx] = e + "\n"
			continue
		}
		rows = append(rows, queryRow(g, len(seen), now))
		list = append(list, fmt.Sprintf("GPU %d: %s (UUID: %s)", g.smiIndex, g.board.name, g.uuid))
		files["q."+idx] = qBlock(g)
	}
	files["gpus"] = lines(rows)
	files["L"] = lines(list)
	files["table"] = smiTable(seen, now)
	return files
}

// faultUptime is the kernel's time, in seconds since boot, of the k-th
// fault of in: a fault drawn at create shows during boot, after the
// driver loaded; one injected later at the instance's uptime then.
func faultUptime(in *instance, k int) float64 {
	base := 14.203117 + float64(k)*0.731
	if k < len(in.GPUFaultsAt) && !in.GPUFaultsAt[k].IsZero() && !in.BootingAt.IsZero() {
		if up := in.GPUFaultsAt[k].Sub(in.BootingAt).Seconds(); up > base {
			return up + float64(k)*0.000731
		}
	}
	return base
}

// bootLog is the start of the kernel log: the kernel, the GPUs on the PCI
// bus, and the NVIDIA driver loading (the lines of the real H200 capture,
// gpu/testdata/h200/dmesg_gpu_lines.stdout).
func bootLog(gs []simGPU, in *instance) []string {
	out := []string{
		"[    0.000000] Linux version 6.8.0-gpuprov-sim (gpuprov simulated cloud) #1 SMP PREEMPT_DYNAMIC",
		fmt.Sprintf("[    0.000000] Command line: BOOT_IMAGE=/vmlinuz root=LABEL=cloudimg-rootfs ro console=ttyS0 gpuprov.instance=%s", in.ID),
	}
	for i, g := range gs {
		out = append(out, fmt.Sprintf("[%12.6f] pci %s: [10de:%s] type 00 class 0x030200 PCIe Endpoint", 0.159946+float64(i)*0.001021, g.bus, g.board.device))
	}
	return append(out,
		"[    0.498739] nvidia: loading out-of-tree module taints kernel.",
		"[    0.592574] nvidia-nvlink: Nvlink Core is being initialized, major device number 240",
		"[    0.592589] NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  "+simDriver+"  Release Build  (dvs-builder@U22-I3-B17-02-5)  ",
		"[    3.519259] NVRM: Persistence mode is deprecated and will be removed in a future release. Please use nvidia-persistenced instead.",
	)
}

// xidLines are the kernel's lines for an Xid on g: the first names the GPU
// and its serial, as the driver does before reporting it.
func xidLines(g *simGPU, at float64, code int, proc, text string) []string {
	b := strings.TrimSuffix(g.bus, ".0")
	return []string{
		fmt.Sprintf("[%12.6f] NVRM: GPU at PCI:%s: %s", at, b, g.uuid),
		fmt.Sprintf("[%12.6f] NVRM: GPU Board Serial Number: %s", at, g.serial),
		fmt.Sprintf("[%12.6f] NVRM: Xid (PCI:%s): %d, %s, %s", at+0.000027, b, code, proc, text),
	}
}

// xidText is the driver's text after an Xid's number, as public kernel logs
// and NVIDIA's Xid catalog show it, for the kinds the sim injects.
func xidText(code int) string {
	switch code {
	case 13:
		return "Graphics SM Warp Exception on (GPC 0, TPC 1, SM 0): Out Of Range Address"
	case 31:
		return "Ch 00000008, intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_8 faulted @ 0x7f3a_1c000000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_WRITE"
	case 43:
		return "Ch 00000008"
	case 45:
		return "Ch 00000008"
	case 48:
		return "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at physAddr 0x7fffa8860 partition 7, subpartition 1."
	case 63:
		return "Row Remapper: New row (0x00000000007fffa8) marked for remapping, reset gpu to activate."
	case 64:
		return "Row Remapper: Failed to remap row (0x00000000007fffa8)."
	case 74:
		return "NVLink: fatal error detected on link 14(0x100000, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0)"
	case 79:
		return "GPU has fallen off the bus."
	case 92:
		return "High single-bit ECC error rate detected"
	case 94:
		return "Contained: SM (0x1). RST: No, D-RST: No"
	case 95:
		return "Uncontained: FBHUB. RST: Yes, D-RST: No"
	case 119:
		return "Timeout after 6s of waiting for RPC response from GPU0 GSP! Expected function 76 (GSP_RM_CONTROL) (0x20803032 0x58c)."
	}
	return "Unknown error"
}

// retirementText is the text of an Xid 63 (a new retirement pending) or
// 64 (one that failed) on b: dynamic page retirement before Ampere, the
// row remapper since.
func retirementText(b gpuBoard, code int) string {
	if !b.pages {
		return xidText(code)
	}
	if code == 63 {
		return "Dynamic Page Retirement: New page retired, reboot to activate (0x00000000007fffa8)."
	}
	return "Dynamic Page Retirement: Blacklisting failed.  Page should have been blacklisted on boot(0x00000000007fffa8)."
}

// queryRow is g's line of the gpus file: the fields the sim models, by
// canonical name; the others answer [N/A].
func queryRow(g *simGPU, count int, now time.Time) string {
	b := g.board
	mem := b.memMiB
	active := func(bit uint64) string { return onOff(g.reasons&bit != 0, "Active", "Not Active") }
	power := fmt.Sprintf("%.2f", b.idleW+float64(g.smiIndex%3)*0.37)
	kv := [][2]string{
		{"timestamp", now.UTC().Format("2006/01/02 15:04:05.000")},
		{"driver_version", simDriver}, {"count", fmt.Sprint(count)},
		{"name", b.name}, {"serial", g.serial}, {"uuid", g.uuid}, {"pci.bus_id", g.smiBus()},
		{"pci.domain", "0x0000"}, {"pci.bus", "0x" + strings.ToUpper(g.bus[5:7])}, {"pci.device", "0x" + strings.ToUpper(g.bus[8:10])},
		{"pci.baseClass", "0x3"}, {"pci.subClass", "0x2"}, {"pci.device_id", "0x" + strings.ToUpper(b.device) + "10DE"},
		{"pcie.link.gen.current", fmt.Sprint(b.gen)}, {"pcie.link.gen.gpucurrent", fmt.Sprint(b.gen)},
		{"pcie.link.gen.max", fmt.Sprint(b.gen)}, {"pcie.link.gen.gpumax", fmt.Sprint(b.gen)},
		{"pcie.link.width.current", fmt.Sprint(g.width)}, {"pcie.link.width.max", "16"},
		{"index", fmt.Sprint(g.smiIndex)}, {"display_attached", "No"}, {"display_active", "Disabled"},
		{"persistence_mode", "Enabled"}, {"addressing_mode", "None"}, {"accounting.mode", "Disabled"}, {"accounting.buffer_size", "4000"},
		{"pstate", "P0"}, {"compute_mode", "Default"}, {"compute_cap", b.computeCap},
		{"clocks_event_reasons.supported", reasonsSupported},
		{"clocks_event_reasons.active", fmt.Sprintf("0x%016X", g.reasons)},
		{"clocks_event_reasons.gpu_idle", active(reasonIdle)},
		{"clocks_event_reasons.applications_clocks_setting", active(0x2)},
		{"clocks_event_reasons.sw_power_cap", active(0x4)},
		{"clocks_event_reasons.hw_slowdown", active(reasonHWSlowdown)},
		{"clocks_event_reasons.hw_thermal_slowdown", active(reasonHWThermal)},
		{"clocks_event_reasons.hw_power_brake_slowdown", active(0x80)},
		{"clocks_event_reasons.sw_thermal_slowdown", active(0x20)},
		{"clocks_event_reasons.sync_boost", active(0x10)},
		{"clocks_event_reasons_counters.hw_thermal_slowdown", fmt.Sprint(g.throttleMicroseconds)},
		{"memory.total", fmt.Sprint(mem)}, {"memory.reserved", fmt.Sprint(b.reserved)}, {"memory.used", "0"},
		{"memory.free", fmt.Sprint(mem - b.reserved)},
		{"utilization.gpu", "0"}, {"utilization.memory", "0"},
		{"ecc.mode.current", "Enabled"}, {"ecc.mode.pending", "Enabled"},
		{"ecc.errors.corrected.volatile.total", "0"}, {"ecc.errors.corrected.aggregate.total", "0"},
		{"ecc.errors.corrected.volatile.dram", "0"}, {"ecc.errors.corrected.aggregate.dram", "0"},
		{"ecc.errors.uncorrected.volatile.total", fmt.Sprint(g.ecc)}, {"ecc.errors.uncorrected.aggregate.total", fmt.Sprint(g.ecc)},
		{"ecc.errors.uncorrected.volatile.dram", fmt.Sprint(g.ecc)}, {"ecc.errors.uncorrected.aggregate.dram", fmt.Sprint(g.ecc)},
		{"temperature.gpu", fmt.Sprint(g.temp)},
		{"power.management", "Enabled"}, {"power.draw", power}, {"power.draw.average", power}, {"power.draw.instant", power},
		{"power.limit", fmt.Sprintf("%d.00", b.powerLimit)}, {"enforced.power.limit", fmt.Sprintf("%d.00", b.powerLimit)},
		{"power.default_limit", fmt.Sprintf("%d.00", b.powerLimit)}, {"power.min_limit", fmt.Sprintf("%d.00", b.powerMin)},
		{"power.max_limit", fmt.Sprintf("%d.00", b.powerLimit)},
		{"clocks.current.graphics", fmt.Sprint(b.gclk)}, {"clocks.current.sm", fmt.Sprint(b.gclk)},
		{"clocks.current.memory", fmt.Sprint(b.mclk)}, {"clocks.current.video", fmt.Sprint(b.vclk)},
		{"clocks.max.graphics", fmt.Sprint(b.gmax)}, {"clocks.max.sm", fmt.Sprint(b.gmax)}, {"clocks.max.memory", fmt.Sprint(b.mclk)},
		{"fabric.state", g.fabricState}, {"fabric.status", g.fabricStatus},
	}
	if b.hbm {
		kv = append(kv, [2]string{"temperature.memory", fmt.Sprint(g.temp + 2)})
	}
	if b.mig {
		kv = append(kv, [2]string{"mig.mode.current", "Disabled"}, [2]string{"mig.mode.pending", "Disabled"})
	}
	if b.pages {
		// Dynamic page retirement: a pending retirement is a retired page
		// waiting for the next driver load.
		kv = append(kv, [2]string{"retired_pages.single_bit_ecc.count", "0"},
			[2]string{"retired_pages.double_bit.count", fmt.Sprint(g.ecc)},
			[2]string{"retired_pages.pending", onOff(g.pending || g.failure, "Yes", "No")})
	} else {
		kv = append(kv, [2]string{"remapped_rows.correctable", "0"}, [2]string{"remapped_rows.correctable_inactive", "0"},
			[2]string{"remapped_rows.uncorrectable", fmt.Sprint(g.ecc + btoi(g.pending))},
			[2]string{"remapped_rows.uncorrectable_inactive", "0"},
			[2]string{"remapped_rows.pending", onOff(g.pending, "Yes", "No")},
			[2]string{"remapped_rows.failure", onOff(g.failure, "Yes", "No")})
	}
	parts := make([]string, len(kv))
	for i, p := range kv {
		parts[i] = p[0] + "=" + p[1]
	}
	return strings.Join(parts, "\t")
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// qBlock is g's block of nvidia-smi -q, in the layout of the real driver
// (gpuemu/q_gpu.tmpl, from gpu/testdata/h200/q.stdout).
func qBlock(g *simGPU) string {
	b := g.board
	active := func(bit uint64) string { return onOff(g.reasons&bit != 0, "Active", "Not Active") }
	memTemp := "N/A"
	if b.hbm {
		memTemp = fmt.Sprintf("%d C", g.temp+2)
	}
	rp := [3]string{"N/A", "N/A", "N/A"}
	if b.pages {
		rp = [3]string{"0", fmt.Sprint(g.ecc), onOff(g.pending || g.failure, "Yes", "No")}
	}
	r := strings.NewReplacer(
		"{{bus}}", g.smiBus(), "{{name}}", b.name, "{{arch}}", b.arch, "{{mig}}", onOff(b.mig, "Disabled", "N/A"),
		"{{serial}}", g.serial, "{{uuid}}", g.uuid, "{{pdi}}", fmt.Sprintf("0x%s", g.uuid[len(g.uuid)-16:]),
		"{{minor}}", fmt.Sprint(g.smiIndex), "{{busnum}}", strings.ToUpper(g.bus[5:7]), "{{devid}}", strings.ToUpper(b.device),
		"{{gen}}", fmt.Sprint(b.gen), "{{genmax}}", fmt.Sprint(b.gen), "{{width}}", fmt.Sprint(g.width), "{{widthmax}}", "16",
		"{{r1}}", active(reasonIdle), "{{r2}}", active(0x2), "{{r4}}", active(0x4), "{{r8}}", active(reasonHWSlowdown),
		"{{r10}}", active(0x10), "{{r20}}", active(0x20), "{{r40}}", active(reasonHWThermal), "{{r80}}", active(0x80),
		"{{hwtus}}", fmt.Sprint(g.throttleMicroseconds),
		"{{mem}}", fmt.Sprint(b.memMiB), "{{memres}}", fmt.Sprint(b.reserved), "{{memfree}}", fmt.Sprint(b.memMiB-b.reserved),
		"{{ecc}}", fmt.Sprint(g.ecc), "{{rpsbe}}", rp[0], "{{rpdbe}}", rp[1], "{{rppend}}", rp[2],
		"{{rrunc}}", fmt.Sprint(g.ecc+btoi(g.pending)), "{{rrpend}}", onOff(g.pending, "Yes", "No"), "{{rrfail}}", onOff(g.failure, "Yes", "No"),
		"{{temp}}", fmt.Sprint(g.temp), "{{memtemp}}", memTemp,
		"{{power}}", fmt.Sprintf("%.2f", b.idleW+float64(g.smiIndex%3)*0.37), "{{plimit}}", fmt.Sprint(b.powerLimit), "{{pmin}}", fmt.Sprint(b.powerMin),
		"{{gclk}}", fmt.Sprint(b.gclk), "{{gmax}}", fmt.Sprint(b.gmax), "{{mclk}}", fmt.Sprint(b.mclk),
		"{{vclk}}", fmt.Sprint(b.vclk), "{{vmax}}", fmt.Sprint(b.vmax),
		"{{fstate}}", g.fabricState, "{{fstatus}}", g.fabricStatus,
	)
	out := r.Replace(qTemplate)
	if b.pages {
		// No row remapper before Ampere: the section is one N/A line.
		start := strings.Index(out, "    Remapped Rows\n")
		end := strings.Index(out, "    Temperature\n")
		out = out[:start] + fmt.Sprintf("    %-51s: N/A\n", "Remapped Rows") + out[end:]
	}
	return out
}

var qTemplate = func() string {
	b, err := gpuEmu.ReadFile("gpuemu/q_gpu.tmpl")
	if err != nil {
		panic(err)
	}
	return string(b)
}()

// smiTable is plain nvidia-smi's answer, in the driver's layout
// (gpu/testdata/h200/nvidia_smi.stdout).
func smiTable(gs []*simGPU, now time.Time) string {
	const sep = "+-----------------------------------------+------------------------+----------------------+\n"
	var t strings.Builder
	fmt.Fprintf(&t, "%s       \n", now.UTC().Format("Mon Jan _2 15:04:05 2006"))
	t.WriteString("+-----------------------------------------------------------------------------------------+\n")
	fmt.Fprintf(&t, "| NVIDIA-SMI %-22s Driver Version: %-14s CUDA Version: %-9s|\n", simDriver, simDriver, simCUDA)
	t.WriteString(sep)
	t.WriteString("| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |\n")
	t.WriteString("| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |\n")
	t.WriteString("|                                         |                        |               MIG M. |\n")
	t.WriteString("|=========================================+========================+======================|\n")
	for _, g := range gs {
		b := g.board
		if g.lost {
			continue
		}
		name := b.name
		if len(name) > 29 {
			name = name[:26] + "..."
		}
		left := fmt.Sprintf(" %3d  %s", g.smiIndex, name)
		fmt.Fprintf(&t, "|%s%*s  |%19s Off |%21d |\n", left, 39-len(left), "On", g.smiBus(), g.ecc)
		l2 := fmt.Sprintf(" N/A  %3dC    P0", g.temp)
		r2 := fmt.Sprintf("%dW / %4dW", int(b.idleW), b.powerLimit)
		fmt.Fprintf(&t, "|%s%*s |%23s |%7d%%%13s |\n", l2, 40-len(l2), r2, fmt.Sprintf("0MiB / %dMiB", b.memMiB), 0, "Default")
		fmt.Fprintf(&t, "|%41s|%24s|%21s |\n", "", "", onOff(b.mig, "Disabled", "N/A"))
		t.WriteString(sep)
	}
	t.WriteString("\n+-----------------------------------------------------------------------------------------+\n")
	t.WriteString("| Processes:                                                                              |\n")
	t.WriteString("|  GPU   GI   CI              PID   Type   Process name                        GPU Memory |\n")
	t.WriteString("|        ID   ID                                                               Usage      |\n")
	t.WriteString("|=========================================================================================|\n")
	t.WriteString("|  No running processes found                                                             |\n")
	t.WriteString("+-----------------------------------------------------------------------------------------+\n")
	return t.String()
}

func lines(ls []string) string {
	if len(ls) == 0 {
		return ""
	}
	return strings.Join(ls, "\n") + "\n"
}
