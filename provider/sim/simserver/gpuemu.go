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
	"time"
)

// The emulated NVIDIA tools, and the field list of the real driver's
// `nvidia-smi --help-query-gpu` (driver 580.159.04, captured on an H200 for
// gpuprov: gpu/testdata/h200), from which the emulated query takes the
// names it knows.
//
//go:embed gpuemu
var gpuEmu embed.FS

// GPU fault kinds (GPUFault.Kind). Each shows in the machine's own tools
// as it does on a real one; the GPU hit is GPUFault.GPU, else the last.
const (
	GPUMissing      = "missing_gpu"     // the driver did not initialize the GPU: nvidia-smi lists one fewer, lspci still shows it
	GPUNoDriver     = "no_driver"       // nvidia-smi cannot talk to the driver: its text, exit 9
	GPUECC          = "ecc"             // uncorrectable volatile ECC errors, and an Xid 48 in the kernel log
	GPURetired      = "retired_pending" // a row remap pending (a page retirement before Ampere), Xid 63
	GPURemapFailure = "remap_failure"   // a row remapping failure, Xid 64
	GPUXid          = "xid"             // an Xid (GPUFault.Xid, default 79) in the kernel log
	GPUFallenOff    = "fallen_off_bus"  // Xid 79 and the GPU lost: nvidia-smi cannot reach it (exit 15)
	GPUWrongModel   = "wrong_model"     // every GPU another model (GPUFault.Model, default the A100 80GB; the H100 on A100 offers)
	GPUFabricDown   = "fabric_down"     // 8-GPU Hopper boards: fabric state In Progress, fabric manager failed
	GPUNarrowLink   = "narrow_link"     // the PCIe link at x8 of x16
	GPUThermal      = "thermal"         // hardware (thermal) slowdown active, 92 C
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
	// GPU is the index (on the bus) of the GPU hit; -1 or unset: the last.
	// A pointer, so that 0 names the first: GPUFault{GPU: new(0)}.
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
	if f.GPU != nil && *f.GPU < -1 {
		return fmt.Errorf("gpu fault %s: gpu %d: want an index, or -1 for the last", f.Kind, *f.GPU)
	}
	if f.Xid < 0 {
		return fmt.Errorf("gpu fault %s: xid %d is negative", f.Kind, f.Xid)
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

// gpuBoard is what the tools say of a model: nvidia-smi's name and memory
// (as the real boards report them), lspci's device id, the PCIe link and
// the power and clocks of an idle board.
type gpuBoard struct {
	name       string
	arch       string
	memMiB     int
	reserved   int    // MiB the driver reserves (FB Memory Usage Reserved)
	device     string // PCI device id, lowercase hex
	gen        int    // PCIe generation, current and max
	computeCap string
	powerLimit int     // W
	powerMin   int     // W
	idleW      float64 // W drawn idle
	gclk, gmax int     // graphics clock idle and max, MHz
	mclk       int     // memory clock, MHz
	vclk, vmax int     // video clock idle and max, MHz
	hbm        bool    // reports a memory temperature
	mig        bool    // MIG capable (mig.mode Disabled, else N/A)
	fabric     bool    // 8-GPU machines of it are HGX boards whose GPUs report an NVSwitch fabric
	switchDev  string  // the NVSwitch's PCI device id on an 8-GPU board, if any
	pages      bool    // retires pages (pre-Ampere) rather than remapping rows
}

var gpuBoards = map[string]gpuBoard{
	"H100-80GB": {"NVIDIA H100 80GB HBM3", "Hopper", 81559, 551, "2330", 5, "9.0", 700, 200, 71.35, 345, 1980, 2619, 765, 1755, true, true, true, "22a3", false},
	"H200":      {"NVIDIA H200", "Hopper", 143771, 616, "2335", 5, "9.0", 700, 200, 79.05, 345, 1980, 3201, 765, 1545, true, true, true, "22a3", false},
	"A100-80GB": {"NVIDIA A100-SXM4-80GB", "Ampere", 81920, 563, "20b2", 4, "8.0", 400, 100, 61.12, 210, 1410, 1593, 585, 1290, true, true, false, "1af1", false},
	"A100-40GB": {"NVIDIA A100-SXM4-40GB", "Ampere", 40960, 451, "20b0", 4, "8.0", 400, 100, 55.48, 210, 1410, 1215, 585, 1290, true, true, false, "1af1", false},
	"L4":        {"NVIDIA L4", "Ada Lovelace", 23034, 403, "27b8", 4, "8.9", 72, 40, 16.29, 210, 2040, 405, 765, 1770, false, false, false, "", false},
	"T4":        {"Tesla T4", "Turing", 15360, 255, "1eb8", 3, "7.5", 70, 60, 9.41, 300, 1590, 405, 540, 1470, false, false, false, "", true},
	"A10G":      {"NVIDIA A10G", "Ampere", 23028, 387, "2237", 4, "8.6", 300, 100, 18.77, 210, 1710, 405, 555, 1500, false, false, false, "", false},
}

// boardOf is the board of a canonical model; an unknown one gets a
// generic board with the offer's memory.
func boardOf(model string, memGB int) gpuBoard {
	if b, ok := gpuBoards[model]; ok {
		return b
	}
	return gpuBoard{name: "NVIDIA " + model, arch: "N/A", memMiB: memGB * 1024, reserved: 512, device: "2330", gen: 4,
		computeCap: "8.0", powerLimit: 300, powerMin: 100, idleW: 30.5, gclk: 210, gmax: 1500, mclk: 405, vclk: 555, vmax: 1500}
}

// wrongModel is the model a "wrong_model" fault shows on an offer of
// model: f.Model, else the A100 80GB (the H100 80GB on an A100 offer).
func wrongModel(f GPUFault, model string) string {
	if f.Model != "" {
		return f.Model
	}
	if model == "A100-80GB" {
		return "H100-80GB"
	}
	return "A100-80GB"
}

// hgxBuses are the GPU bus numbers of an 8-GPU HGX H100 board, and
// hgxSwitchBuses those of its four NVSwitches.
var (
	hgxBuses       = []string{"18", "2a", "3a", "5d", "9a", "ab", "ba", "db"}
	hgxSwitchBuses = []string{"05", "06", "07", "08"}
)

// busOf is the PCI address (lspci -D form) of GPU i of an instance with n
// GPUs: the HGX layout on 8, consecutive slots from 00:05.0 otherwise (as
// a VM's passthrough devices sit).
func busOf(i, n int) string {
	if n == 8 {
		return "0000:" + hgxBuses[i] + ":00.0"
	}
	return fmt.Sprintf("0000:00:%02x.0", 0x05+i)
}

// hostOf is the machine an instance of offer of runs on: the offer's own,
// else one of four per zone, by the instance id's hash (no draw from the
// seeded generator, so faults and boots draw as before; ids are themselves
// a deterministic sequence, so the same run gives the same hosts).
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

// gpuFaultsAt draws the GPU faults of a new instance from the cloud's
// seeded generator (a fault with Rate 0 always applies and draws nothing).
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

// queryField is one name nvidia-smi --query-gpu accepts: its canonical
// name (the one a csv header shows; an alias such as
// clocks_throttle_reasons.active is shown by its first name) and its unit.
type queryField struct {
	name, canonical, unit string
}

var helpFieldRE = regexp.MustCompile(`"([A-Za-z0-9_.]+)"`)

// queryFields are the field names the driver knows, aliases included, in
// the order of --help-query-gpu.
var queryFields = func() []queryField {
	b, err := gpuEmu.ReadFile("gpuemu/help_query_gpu.txt")
	if err != nil {
		panic(err)
	}
	var out []queryField
	seen := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, `"`) {
			continue
		}
		ms := helpFieldRE.FindAllStringSubmatch(line, -1)
		for _, m := range ms {
			if seen[m[1]] {
				continue
			}
			seen[m[1]] = true
			out = append(out, queryField{m[1], ms[0][1], fieldUnit(ms[0][1])})
		}
	}
	return out
}()

// fieldUnit is the unit nvidia-smi's csv (without nounits) puts in the
// header ("memory.total [MiB]") and after each value.
func fieldUnit(f string) string {
	switch {
	case strings.HasPrefix(f, "memory.") || strings.HasPrefix(f, "protected_memory."):
		return "MiB"
	case strings.HasPrefix(f, "power.draw") || strings.HasSuffix(f, "power.limit") || strings.HasSuffix(f, "_limit") ||
		strings.HasPrefix(f, "module.power.draw"):
		return "W"
	case strings.HasPrefix(f, "clocks.") && !strings.HasPrefix(f, "clocks_"):
		return "MHz"
	case strings.HasPrefix(f, "utilization.") || f == "fan.speed":
		return "%"
	case strings.HasPrefix(f, "clocks_event_reasons_counters."):
		return "us"
	}
	return ""
}

// writeGPUs writes the emulated tools into sandbox dir's bin and the state
// of in's GPUs, as of now, into dir/.sim-gpu. A CPU instance gets nothing
// (no nvidia-smi, as on a CPU machine).
func writeGPUs(dir string, in *instance, now time.Time) error {
	if in.GPUCount <= 0 {
		return nil
	}
	data, bin := filepath.Join(dir, ".sim-gpu"), filepath.Join(dir, "bin")
	for _, d := range []string{data, bin} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	files := renderGPUs(in, now)
	tools := []string{"nvidia-smi", "lspci", "dmesg"}
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
	var fl strings.Builder
	for _, f := range queryFields {
		fmt.Fprintf(&fl, "%s\t%s\t%s\n", f.name, f.canonical, f.unit)
	}
	files["fields"] = fl.String()
	// Remove what the state no longer has (a GPU's -q block, the driver's
	// refusal), then write the rest.
	old, err := os.ReadDir(data)
	if err != nil {
		return err
	}
	for _, e := range old {
		if _, ok := files[e.Name()]; !ok {
			if err := os.Remove(filepath.Join(data, e.Name())); err != nil {
				return err
			}
		}
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(data, name), []byte(body), 0o600); err != nil {
			return err
		}
	}
	return nil
}
