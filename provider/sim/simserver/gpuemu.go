package simserver

import (
	"embed"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// The emulated NVIDIA tools, and the field list of the real driver's
// `nvidia-smi --help-query-gpu` (driver 580.159.04, captured on an H200 for
// gpuprov: gpu/testdata/h200), from which the emulated query takes the
// names it knows.
//
//go:embed gpuemu
var gpuEmu embed.FS

// GPU fault kinds (GPUFault.Kind).
const (
	GPUMissing      = "missing_gpu"     // nvidia-smi lists one GPU fewer; lspci still shows it
	GPUNoDriver     = "no_driver"       // nvidia-smi cannot talk to the driver (exit 9)
	GPUECC          = "ecc"             // uncorrectable ECC errors, and an Xid 48 in the kernel log
	GPURetired      = "retired_pending" // a row remap pending
	GPURemapFailure = "remap_failure"   // a row remapping failure
	GPUXid          = "xid"             // an Xid (GPUFault.Xid, default 79) in the kernel log
	GPUFallenOff    = "fallen_off_bus"  // Xid 79 and the GPU lost: nvidia-smi cannot reach it
	GPUWrongModel   = "wrong_model"     // another model (GPUFault.Model, default the A10G) than the offer's
	GPUFabricDown   = "fabric_down"     // the NVSwitch fabric not initialized (8-GPU machines)
	GPUNarrowLink   = "narrow_link"     // the PCIe link at x8 of x16
	GPUThermal      = "thermal"         // hardware thermal slowdown active, 92 C
)

// GPUFaultKinds lists the kinds.
var GPUFaultKinds = []string{GPUMissing, GPUNoDriver, GPUECC, GPURetired, GPURemapFailure, GPUXid, GPUFallenOff,
	GPUWrongModel, GPUFabricDown, GPUNarrowLink, GPUThermal}

// GPUFault is a fault of a machine's GPUs, as its own tools (nvidia-smi,
// lspci, dmesg) show it. In Faults.GPUFaults it applies to new instances
// of the offers (Offers) or hosts (Hosts) it names ("*" for all; neither:
// every instance), each with probability Rate (0: always); Server.
// InjectGPUFault applies one to a running instance.
type GPUFault struct {
	Kind   string   `json:"kind" toml:"kind"`
	Offers []string `json:"offers,omitempty" toml:"offers,omitempty"`
	Hosts  []string `json:"hosts,omitempty" toml:"hosts,omitempty"`
	Rate   float64  `json:"rate,omitempty" toml:"rate,omitempty"`
	// GPU is the index of the GPU hit; -1 or unset: the last.
	GPU *int `json:"gpu,omitempty" toml:"gpu,omitempty"`
	// Xid is the Xid of an "xid" fault (default 79).
	Xid int `json:"xid,omitempty" toml:"xid,omitempty"`
	// Model is the canonical model a "wrong_model" fault shows.
	Model string `json:"model,omitempty" toml:"model,omitempty"`
}

func (f GPUFault) validate() error {
	if !slices.Contains(GPUFaultKinds, f.Kind) {
		return fmt.Errorf("gpu fault kind %q: want one of %s", f.Kind, strings.Join(GPUFaultKinds, ", "))
	}
	if f.Rate < 0 || f.Rate > 1 {
		return fmt.Errorf("gpu fault %s: rate %v is not in [0, 1]", f.Kind, f.Rate)
	}
	return nil
}

// hits reports whether f applies to a new instance of offer on host.
func (f GPUFault) hits(offer, host string) bool {
	if len(f.Offers) > 0 && !matches(f.Offers, offer) {
		return false
	}
	return len(f.Hosts) == 0 || matches(f.Hosts, host)
}

// gpuBoard is what nvidia-smi says of a model.
type gpuBoard struct {
	name      string
	memMiB    int
	device    string // PCI device id
	gen       int
	nvswitch  bool // 8-GPU machines of it are HGX boards with NVSwitches
	switchDev string
}

var gpuBoards = map[string]gpuBoard{
	"H100-80GB": {"NVIDIA H100 80GB HBM3", 81559, "2330", 5, true, "22a3"},
	"H200":      {"NVIDIA H200", 143771, "2335", 5, true, "22a3"},
	"A100-80GB": {"NVIDIA A100-SXM4-80GB", 81920, "20b2", 4, true, "1af1"},
	"A100-40GB": {"NVIDIA A100-SXM4-40GB", 40960, "20b0", 4, true, "1af1"},
	"L4":        {"NVIDIA L4", 23034, "27b8", 4, false, ""},
	"T4":        {"Tesla T4", 15360, "1eb8", 3, false, ""},
	"A10G":      {"NVIDIA A10G", 23028, "2237", 4, false, ""},
}

func boardOf(model string, memGB int) gpuBoard {
	if b, ok := gpuBoards[model]; ok {
		return b
	}
	return gpuBoard{name: "NVIDIA " + model, memMiB: memGB * 1024, device: "2330", gen: 4}
}

// hgxBuses are the GPU bus numbers of an 8-GPU HGX H100 board.
var hgxBuses = []string{"18", "2a", "3a", "5d", "9a", "ab", "ba", "db"}

// busOf is the PCI address of GPU i of an instance with n GPUs.
func busOf(i, n int) string {
	if n == 8 {
		return "0000:" + hgxBuses[i] + ":00.0"
	}
	return fmt.Sprintf("0000:%02x:00.0", 0x06+i)
}

// hostOf is the machine an instance of offer of runs on: the offer's own,
// else one of four per zone, by the instance id's hash (no draw from the
// seeded generator, so faults and boots draw as before).
func hostOf(of *Offer, id string) string {
	if of.Host != "" {
		return of.Host
	}
	h := fnv.New32a()
	h.Write([]byte(id))
	return fmt.Sprintf("h-%s-%02d", orDefaultString(of.Zone, of.Region), h.Sum32()%4)
}

func orDefaultString(s, def string) string {
	if s != "" {
		return s
	}
	return def
}

// gpuFaultsAt draws the GPU faults of a new instance.
func (c *cloud) gpuFaultsAt(offer, host string) []GPUFault {
	var out []GPUFault
	for _, f := range c.faults.GPUFaults {
		if !f.hits(offer, host) {
			continue
		}
		if f.Rate > 0 && !c.chance(f.Rate) {
			continue
		}
		out = append(out, f)
	}
	return out
}

var helpFieldRE = regexp.MustCompile(`"([a-z0-9_.]+)"`)

// queryFields are the field names the driver knows, aliases included.
var queryFields = func() []string {
	b, err := gpuEmu.ReadFile("gpuemu/help_query_gpu.txt")
	if err != nil {
		panic(err)
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, `"`) {
			continue
		}
		for _, m := range helpFieldRE.FindAllStringSubmatch(line, -1) {
			if !slices.Contains(out, m[1]) {
				out = append(out, m[1])
			}
		}
	}
	return out
}()

// writeGPUs writes the emulated tools and the state of in's GPUs into
// sandbox dir. A CPU instance gets nothing (no nvidia-smi, as on a CPU
// machine).
func writeGPUs(dir string, in *instance) error {
	if in.GPUCount <= 0 {
		return nil
	}
	data, bin := filepath.Join(dir, ".sim-gpu"), filepath.Join(dir, "bin")
	for _, d := range []string{data, bin} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	tools := []string{"nvidia-smi", "lspci", "dmesg"}
	files := renderGPUs(in)
	if _, ok := files["fabricmanager"]; ok {
		tools = append(tools, "systemctl")
	}
	for _, name := range tools {
		b, err := gpuEmu.ReadFile("gpuemu/" + name)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(bin, name), b, 0o755); err != nil {
			return err
		}
	}
	awk, err := gpuEmu.ReadFile("gpuemu/query.awk")
	if err != nil {
		return err
	}
	files["query.awk"] = string(awk)
	files["fields"] = strings.Join(queryFields, "\n") + "\n"
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(data, name), []byte(body), 0o600); err != nil {
			return err
		}
	}
	for _, name := range []string{"nodriver", "lost"} {
		if _, ok := files[name]; !ok {
			if err := os.Remove(filepath.Join(data, name)); err != nil && !os.IsNotExist(err) {
				return err
			}
		}
	}
	return nil
}

// renderGPUs renders the state files of in's GPUs with its faults applied.
func renderGPUs(in *instance) map[string]string {
	n := in.GPUCount
	board := boardOf(in.GPU, in.GPUMemoryGB)
	type g struct {
		bus, uuid, serial, name string
		mem, width, temp        int
		ecc                     int
		retired, remapFail      string
		throttle                string
		fabric                  string
		visible, lost           bool
	}
	fabric := "N/A"
	nvswitch := board.nvswitch && n == 8
	if nvswitch {
		fabric = "Completed"
	}
	sum := fnv.New64a()
	sum.Write([]byte(in.ID))
	seed := sum.Sum64()
	gs := make([]g, n)
	for i := range gs {
		gs[i] = g{bus: busOf(i, n), uuid: fmt.Sprintf("GPU-%08x-%04x-4%03x-8%03x-%012x", uint32(seed), i, seed>>40&0xfff, seed>>52&0xfff, seed&0xffffffffffff),
			serial: fmt.Sprintf("1654%09d", (seed+uint64(i))%1000000000), name: board.name, mem: board.memMiB, width: 16, temp: 34,
			retired: "No", remapFail: "No", throttle: "0x0000000000000001", fabric: fabric, visible: true}
	}
	kmsg := []string{
		"[    0.000000] Linux version 6.8.0-gpuprov-sim (simulated kernel log)",
		"[    0.592589] NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build",
	}
	noDriver, xidAt := false, 812.0
	for _, f := range in.GPUFaults {
		i := n - 1
		if f.GPU != nil && *f.GPU >= 0 && *f.GPU < n {
			i = *f.GPU
		}
		xid := func(code int, text string) {
			b := strings.TrimSuffix(gs[i].bus, ".0")
			kmsg = append(kmsg, fmt.Sprintf("[%12.6f] NVRM: Xid (PCI:%s): %d, pid=2468, name=python, %s", xidAt, b, code, text))
			xidAt += 17.25
		}
		switch f.Kind {
		case GPUMissing:
			gs[i].visible = false
		case GPUNoDriver:
			noDriver = true
		case GPUECC:
			gs[i].ecc = 2
			xid(48, "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 6, subpartition 0.")
		case GPURetired:
			gs[i].retired = "Yes"
		case GPURemapFailure:
			gs[i].remapFail = "Yes"
		case GPUXid:
			code := f.Xid
			if code == 0 {
				code = 79
			}
			xid(code, xidText(code))
		case GPUFallenOff:
			xid(79, "GPU has fallen off the bus.")
			gs[i].lost = true
		case GPUWrongModel:
			m := boardOf(orDefaultString(f.Model, "A10G"), 24)
			for k := range gs {
				gs[k].name, gs[k].mem = m.name, m.memMiB
			}
		case GPUFabricDown:
			for k := range gs {
				if gs[k].fabric != "N/A" {
					gs[k].fabric = "In Progress"
				}
			}
		case GPUNarrowLink:
			gs[i].width = 8
		case GPUThermal:
			gs[i].throttle, gs[i].temp = "0x0000000000000040", 92
		}
	}
	var rows, list, lspci, lost []string
	fm := "" // the fabric manager's state, on an NVSwitch board
	var q strings.Builder
	kv := func(k, v string) string { return k + "=" + v }
	visible := 0
	for _, x := range gs {
		if x.visible {
			visible++
		}
	}
	fmt.Fprintf(&q, "\n==============NVSMI LOG==============\n\n%-55s: %s\n%-55s: %s\n%-55s: %s\n\n%-55s: %d\n",
		"Timestamp", "Fri Dec  4 18:22:43 2026", "Driver Version", "580.159.04", "CUDA Version", "13.0", "Attached GPUs", visible)
	idx := 0
	for _, x := range gs {
		lspci = append(lspci, fmt.Sprintf("%s 0302: 10de:%s (rev a1)", x.bus, board.device))
		if !x.visible {
			continue
		}
		smiBus := "0000" + strings.ToUpper(x.bus)
		if x.lost {
			lost = append(lost, fmt.Sprintf("Unable to determine the device handle for GPU%s: Unknown Error", strings.ToUpper(x.bus)))
			idx++
			continue
		}
		state := x.fabric
		status := map[string]string{"N/A": "N/A", "Completed": "Success", "In Progress": "N/A"}[state]
		rows = append(rows, strings.Join([]string{kv("index", fmt.Sprint(idx)), kv("uuid", x.uuid), kv("gpu_uuid", x.uuid),
			kv("serial", x.serial), kv("gpu_serial", x.serial), kv("name", x.name), kv("gpu_name", x.name),
			kv("pci.bus_id", smiBus), kv("gpu_bus_id", smiBus), kv("count", fmt.Sprint(visible)),
			kv("memory.total", fmt.Sprint(x.mem)), kv("memory.used", "0"), kv("memory.free", fmt.Sprint(x.mem)),
			kv("driver_version", "580.159.04"), kv("ecc.mode.current", "Enabled"), kv("ecc.mode.pending", "Enabled"),
			kv("ecc.errors.uncorrected.volatile.total", fmt.Sprint(x.ecc)), kv("ecc.errors.corrected.volatile.total", "0"),
			kv("retired_pages.pending", "[N/A]"), kv("remapped_rows.pending", x.retired), kv("remapped_rows.failure", x.remapFail),
			kv("remapped_rows.correctable", "0"), kv("remapped_rows.uncorrectable", fmt.Sprint(x.ecc)),
			kv("pcie.link.gen.current", fmt.Sprint(board.gen)), kv("pcie.link.gen.max", fmt.Sprint(board.gen)),
			kv("pcie.link.width.current", fmt.Sprint(x.width)), kv("pcie.link.width.max", "16"),
			kv("clocks_throttle_reasons.active", x.throttle), kv("clocks_event_reasons.active", x.throttle),
			kv("temperature.gpu", fmt.Sprint(x.temp)), kv("utilization.gpu", "0"), kv("power.draw", "71.35"),
			kv("fabric.state", state), kv("fabric.status", status)}, "\t"))
		list = append(list, fmt.Sprintf("GPU %d: %s (UUID: %s)", idx, x.name, x.uuid))
		fmt.Fprintf(&q, "GPU %s\n", smiBus)
		for _, l := range [][2]string{{"Product Name", x.name}, {"Product Brand", "NVIDIA"}, {"Serial Number", x.serial}, {"GPU UUID", x.uuid}} {
			fmt.Fprintf(&q, "    %-51s: %s\n", l[0], l[1])
		}
		fmt.Fprintf(&q, "    PCI\n        %-47s: %s\n        GPU Link Info\n            PCIe Generation\n                %-39s: %d\n                %-39s: %d\n            Link Width\n                %-39s: 16x\n                %-39s: %dx\n",
			"Bus Id", smiBus, "Max", board.gen, "Current", board.gen, "Max", "Current", x.width)
		fmt.Fprintf(&q, "    Fabric\n        %-47s: %s\n        %-47s: %s\n", "State", state, "Status", status)
		fmt.Fprintf(&q, "    Temperature\n        %-47s: %d C\n\n", "GPU Current Temp", x.temp)
		idx++
	}
	if nvswitch {
		fm = "active"
		if slices.ContainsFunc(in.GPUFaults, func(f GPUFault) bool { return f.Kind == GPUFabricDown }) {
			fm = "failed"
		}
		for _, b := range []string{"05", "06", "07", "08"} {
			lspci = append(lspci, fmt.Sprintf("0000:%s:00.0 0680: 10de:%s (rev a1)", b, board.switchDev))
		}
	}
	files := map[string]string{
		"gpus":  lines(rows),
		"L":     lines(list),
		"q":     q.String(),
		"lspci": lines(lspci),
		"kmsg":  lines(kmsg),
		"table": fmt.Sprintf("(simulated) %d × %s, driver 580.159.04, CUDA 13.0\n", visible, board.name),
	}
	if len(lost) > 0 {
		files["lost"] = lines(lost)
	}
	if fm != "" {
		files["fabricmanager"] = fm + "\n"
	}
	if noDriver {
		files["nodriver"] = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running.\n\n"
	}
	return files
}

func lines(ls []string) string {
	if len(ls) == 0 {
		return ""
	}
	return strings.Join(ls, "\n") + "\n"
}

// xidText is the driver's text after an Xid's number, as kernel logs show
// it, for the kinds the sim injects.
func xidText(code int) string {
	switch code {
	case 48:
		return "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 6, subpartition 0."
	case 63:
		return "Row Remapper: New row marked for remapping, reset gpu to activate."
	case 74:
		return "NVLink: fatal error detected on link 3(0x10000, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0)"
	case 79:
		return "GPU has fallen off the bus."
	case 94:
		return "Contained: CE User Channel (0x9). RST: No, D-RST: No"
	case 95:
		return "Uncontained: FBHUB. RST: Yes, D-RST: No"
	case 13:
		return "Graphics SM Warp Exception on (GPC 0, TPC 1, SM 0): Out Of Range Address"
	}
	return "simulated Xid"
}
