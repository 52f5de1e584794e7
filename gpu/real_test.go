package gpu_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/org/gpuprov/gpu"
	"github.com/org/gpuprov/provider"
)

// TestHGXFabric: the real -q of an 8-GPU HGX H100 gives the driver, the
// CUDA version and every GPU's fabric as Completed/Success, by bus id.
func TestHGXFabric(t *testing.T) {
	p := mustParse(t, probe("query:6", "No devices were found", "q", read(t, hgxQ)))
	if p.Driver != "535.161.08" || p.CUDA != "12.2" {
		t.Errorf("driver %q, CUDA %q", p.Driver, p.CUDA)
	}
	bus, _ := hgxGPUs(t)
	if len(p.Fabric) != 8 {
		t.Fatalf("fabric of %d GPUs: %v", len(p.Fabric), p.Fabric)
	}
	for _, b := range bus {
		if f := p.Fabric[gpu.NormBus(b)]; f != (gpu.Fabric{State: "Completed", Status: "Success"}) {
			t.Errorf("%s: fabric %+v", b, f)
		}
	}
}

// TestA100NVSwitchMachine: the real lspci -nn of an 8-GPU A100 SXM4 VM with
// six NVSwitches, where nvidia-smi finds no device and the fabric manager
// is down: the driver, count and fabric checks fail, and the count names
// every GPU the bus has.
func TestA100NVSwitchMachine(t *testing.T) {
	p := mustParse(t, probe("query:6", "No devices were found", "bus", read(t, "gpud-a100-nvswitch/lspci_nn.stdout"), "fm:3", "inactive", "xid", ""))
	onBus := p.GPUsOnBus()
	if len(onBus) != 8 || p.NVSwitches() != 6 || onBus[0] != (gpu.Device{Addr: "0001:00:00.0", Class: "0302", Device: "20b2"}) {
		t.Fatalf("bus: %d GPUs (%+v), %d NVSwitches", len(onBus), onBus, p.NVSwitches())
	}
	r := gpu.Check(p, gpu.Expect{Model: "A100-80GB", Count: 8}, gpu.Options{})
	if got := checks(r, provider.Critical); !slices.Equal(got, []string{"driver", "count", "fabric"}) {
		t.Errorf("failed %v: %+v", got, r.Findings)
	}
	want := "the driver does not answer: No devices were found; 0 of 8 GPUs visible; missing 0001:00:00.0, 0002:00:00.0, 0003:00:00.0, 0004:00:00.0, 000b:00:00.0, 000c:00:00.0, 000d:00:00.0, 000e:00:00.0; 6 NVSwitches on the bus and nvidia-fabricmanager is inactive"
	if r.Summary != want {
		t.Errorf("summary\n%q\nwant\n%q", r.Summary, want)
	}
	var ae *gpu.AcceptanceError
	if err := r.Err(); err == nil || err.Error() != "gpu acceptance: "+want {
		t.Errorf("Err: %v", err)
	} else if !asAcceptance(err, &ae) || ae.Report != r {
		t.Errorf("Err is %T", err)
	}
}

func asAcceptance(err error, target **gpu.AcceptanceError) bool {
	ae, ok := err.(*gpu.AcceptanceError)
	*target = ae
	return ok
}

// TestRealXidLines: real kernel-log Xid lines in dmesg -T's and dmesg
// --time-format iso's forms: five Xid 119 on one GPU are one failing
// finding; Xid 13 (an application's) only warns. Health against the
// baseline they leave reports nothing until a new line comes.
func TestRealXidLines(t *testing.T) {
	xid := read(t, "gpud-xid/dmesg_T_xid119.txt") + read(t, "gpud-xid/dmesg_iso_xid13.txt")
	q, _ := hgx(t, nil)
	p := mustParse(t, probe("query", q, "xid", xid, "boot", "b-1"))
	if len(p.Xids) != 10 || p.Xids[0].Code != 119 || p.Xids[0].Bus != "0000:9b:00" || p.Xids[0].Since != -1 || p.Xids[9].Code != 13 {
		t.Fatalf("Xids: %+v", p.Xids)
	}
	if !strings.HasPrefix(p.Xids[0].Text, "pid=2024380, name=nvidia-smi, Timeout after 6s") {
		t.Errorf("text %q", p.Xids[0].Text)
	}
	r := gpu.Check(p, gpu.Expect{Model: "H100-80GB", Count: 8}, gpu.Options{})
	var got []string
	for _, f := range r.Findings {
		if f.Check == "xid" {
			got = append(got, fmt.Sprintf("%s GPU %d: %s", f.Severity, f.GPU, f.Message))
			if !strings.HasPrefix(f.Cite, gpu.XidCatalog) {
				t.Errorf("cite %q", f.Cite)
			}
		}
	}
	want := []string{
		"critical GPU 4: Xid 119 on 0000:9b:00 since boot, 5 times: GSP RPC Timeout (reset the GPU)",
		"warn GPU -1: Xid 13 on 0000:38:00 since boot, 5 times: Graphics Engine Exception",
	}
	if !slices.Equal(got, want) {
		t.Errorf("findings\n%q\nwant\n%q", got, want)
	}
	base := r.Baseline
	if base.XidCount != 10 || base.XidSince != -1 {
		t.Fatalf("baseline %+v", base)
	}
	if fs := gpu.Health(p, base, gpu.Options{}); len(fs) != 0 {
		t.Errorf("nothing new, yet %+v", fs)
	}
	more := mustParse(t, probe("query", q, "xid", xid+"[Sun Feb 23 17:01:02 2025] NVRM: Xid (PCI:0000:9b:00): 79, pid=1, name=x, GPU has fallen off the bus.\n", "boot", "b-1"))
	fs := gpu.Health(more, base, gpu.Options{})
	if len(fs) != 1 || fs[0].Code != "gpu-xid-79" || fs[0].Severity != provider.Critical {
		t.Errorf("after a new Xid 79: %+v", fs)
	}
}

// TestMemoryFigures: the memory.total real boards report (MiB) pass the
// memory check for their model at the default tolerance; a 40 GB A100
// offered as an 80 GB one fails it. The rows are the real H100 row with
// the name and memory.total of each board put in.
func TestMemoryFigures(t *testing.T) {
	row := strings.Split(strings.TrimSpace(project(t, read(t, "exporter-h100/query_all.csv"))), ", ")
	for _, tc := range []struct {
		name, model string
		mib         string
		ok          bool
	}{
		{"NVIDIA H100 80GB HBM3", "H100-80GB", "81559", true},
		{"NVIDIA H200", "H200", "143771", true},
		{"NVIDIA A100-SXM4-80GB", "A100-80GB", "81920", true},
		{"NVIDIA A100-SXM4-40GB", "A100-40GB", "40960", true},
		{"NVIDIA A100-PCIE-40GB", "A100-40GB", "40536", true},
		{"NVIDIA L4", "L4", "23034", true},
		{"Tesla T4", "T4", "15360", true},
		{"NVIDIA A100-SXM4-80GB", "A100-80GB", "40536", false},
	} {
		cols := slices.Clone(row)
		cols[col("name")], cols[col("memory.total")] = tc.name, tc.mib
		r := gpu.Check(mustParse(t, probe("query", strings.Join(cols, ", "))), gpu.Expect{Model: tc.model, Count: 1}, gpu.Options{})
		failed := checks(r, provider.Critical)
		if tc.ok != !slices.Contains(failed, "memory") || slices.Contains(failed, "model") {
			t.Errorf("%s %s MiB as %s: failed %v (%s)", tc.name, tc.mib, tc.model, failed, r.Summary)
		}
	}
}

// dcgmJSON is `dcgmi diag -j` in DCGM's documented shape (NVIDIA/DCGM
// nvvs JsonOutput: "DCGM GPU Diagnostic" > test_categories > tests >
// results > status).
const dcgmJSON = `{"DCGM GPU Diagnostic": {"test_categories": [
 {"category": "Deployment", "tests": [
  {"name": "Denylist", "results": [{"gpu_ids": "0,1", "status": "PASS"}]},
  {"name": "Persistence Mode", "results": [{"gpu_ids": "0,1", "status": "WARN", "warnings": ["Persistence mode for GPU 0 is disabled."]}]}]},
 {"category": "Hardware", "tests": [
  {"name": "GPU Memory", "results": [{"gpu_ids": "0", "status": "PASS"}, {"gpu_ids": "1", "status": "FAIL"}]}]}],
 "version": "3.3.5"}}`

// TestDCGM: a failed diagnostic test fails the dcgm check and a warned one
// warns; dcgmi absent is said to be skipped, not failed; and DCGMScript,
// run for real where dcgmi is not installed, says so.
func TestDCGM(t *testing.T) {
	p := mustParse(t, probe("query", "", "dcgm:226", dcgmJSON))
	if !p.DCGM.Ran || !slices.Equal(p.DCGM.Failed, []string{"GPU Memory"}) || !slices.Equal(p.DCGM.Warned, []string{"Persistence Mode"}) {
		t.Fatalf("DCGM %+v", p.DCGM)
	}
	r := gpu.Check(p, gpu.Expect{}, gpu.Options{})
	if !slices.Contains(checks(r, provider.Critical), "dcgm") || !slices.Contains(checks(r, provider.Warn), "dcgm") {
		t.Errorf("findings %+v", r.Findings)
	}

	script := gpu.DCGMScript(1)
	if out, err := exec.Command("sh", "-n", "-c", unwrap(t, script)).CombinedOutput(); err != nil {
		t.Fatalf("sh -n: %v\n%s", err, out)
	}
	bin := t.TempDir()
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	if err := os.Symlink(sh, filepath.Join(bin, "sh")); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(sh, "-c", script)
	cmd.Env = []string{"PATH=" + bin}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	q, _ := hgx(t, nil)
	p = mustParse(t, append(probe("query", q), out...))
	r = gpu.Check(p, gpu.Expect{Model: "H100-80GB", Count: 8}, gpu.Options{})
	if !r.OK || !slices.ContainsFunc(r.Skipped, func(s gpu.Skipped) bool {
		return s.Check == "dcgm" && strings.Contains(s.Why, "dcgmi: not installed")
	}) {
		t.Errorf("ok %v, skipped %+v", r.OK, r.Skipped)
	}
}

// unwrap returns the body of an `sh -c '…'` command.
func unwrap(t *testing.T, cmd string) string {
	t.Helper()
	body, ok := strings.CutPrefix(cmd, "sh -c '")
	if !ok || !strings.HasSuffix(body, "'") || strings.Count(body, "'") != 1 {
		t.Fatalf("not one sh -c '…' with no quote inside: %s", cmd)
	}
	return strings.TrimSuffix(body, "'")
}

// TestScriptWithoutLspci runs the probe where lspci and dmesg fail as on
// the real H200 (no lspci; here dmesg refused and no sudo): the bus comes
// from sysfs (the H200's real vendor, class and device values) and the
// Xids from journalctl.
func TestScriptWithoutLspci(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	dev := filepath.Join(dir, "sys/bus/pci/devices/0000:00:06.0")
	other := filepath.Join(dir, "sys/bus/pci/devices/0000:00:01.0")
	for _, d := range []string{bin, dev, other} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{
		filepath.Join(dev, "vendor"): "0x10de\n", filepath.Join(dev, "class"): "0x030200\n", filepath.Join(dev, "device"): "0x2335\n",
		filepath.Join(other, "vendor"): "0x1af4\n", filepath.Join(other, "class"): "0x010000\n", filepath.Join(other, "device"): "0x1042\n",
		filepath.Join(dir, "row"):     project(t, read(t, "h200/query_gpu_csv.stdout")),
		filepath.Join(dir, "journal"): read(t, "gpud-xid/dmesg_iso_xid13.txt"),
	}
	for name, body := range files {
		if err := os.WriteFile(name, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tool := range []string{"sh", "cat", "cut", "grep", "tail", "timeout"} {
		path, err := exec.LookPath(tool)
		if err != nil {
			t.Skipf("no %s here", tool)
		}
		if err := os.Symlink(path, filepath.Join(bin, tool)); err != nil {
			t.Fatal(err)
		}
	}
	scripts := map[string]string{
		"nvidia-smi": fmt.Sprintf("case \"$1\" in --query-gpu=*) cat %s/row ;; *) echo \"Failed to parse\"; exit 2 ;; esac\n", dir),
		"dmesg":      "echo 'dmesg: read kernel buffer failed: Operation not permitted'; exit 1\n",
		"journalctl": fmt.Sprintf("[ \"$*\" = \"-k -b --no-pager -q\" ] || exit 3; cat %s/journal\n", dir),
	}
	for name, body := range scripts {
		if err := os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/sh\n"+body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	out, err := cmd2(sh, bin, dir).CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	p := mustParse(t, out)
	if !p.BusRead || !slices.Equal(p.Bus, []gpu.Device{{Addr: "0000:00:06.0", Class: "0302", Device: "2335"}}) {
		t.Errorf("bus %+v (read %v)\n%s", p.Bus, p.BusRead, out)
	}
	if !p.XidRead || len(p.Xids) != 5 || p.Xids[0].Code != 13 {
		t.Errorf("xids %+v (read %v)\n%s", p.Xids, p.XidRead, out)
	}
	if p.FabricManager != "" || p.FabricManagerWhy != "" {
		t.Errorf("fm asked without an NVSwitch: %q %q", p.FabricManager, p.FabricManagerWhy)
	}
	r := gpu.Check(p, gpu.Expect{Model: "H200", Count: 1}, gpu.Options{})
	if !r.OK || checks(r, provider.Warn) == nil {
		t.Errorf("ok %v, findings %+v", r.OK, r.Findings)
	}

	// journalctl without the right to read the system journal prints
	// nothing and exits 0: the log is unreadable, not clean.
	if err := os.WriteFile(filepath.Join(dir, "journal"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = cmd2(sh, bin, dir).CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	p = mustParse(t, out)
	r = gpu.Check(p, gpu.Expect{Model: "H200", Count: 1}, gpu.Options{})
	if p.XidRead || !slices.ContainsFunc(r.Skipped, func(s gpu.Skipped) bool { return s.Check == "xid" }) {
		t.Errorf("an empty journal read as a clean log: %+v\n%s", r.Skipped, out)
	}
}

// cmd2 is the probe run with PATH bin and sysfs under dir.
func cmd2(sh, bin, dir string) *exec.Cmd {
	cmd := exec.Command(sh, "-c", gpu.Script(gpu.ProbeOptions{Timeout: 5}))
	cmd.Env = []string{"PATH=" + bin, "GPUPROV_SYSFS=" + filepath.Join(dir, "sys")}
	return cmd
}

// TestOff: a check turned off is listed as skipped and finds nothing.
func TestOff(t *testing.T) {
	q, bus := hgx(t, func(i int, c []string) {
		c[col("pcie.link.width.current")] = "4"
	})
	r := gpu.Check(mustParse(t, probe("query", q, "bus", bus, "fm", "active", "xid", "")), gpu.Expect{Model: "H100-80GB", Count: 8}, gpu.Options{Off: []string{"link"}})
	if !r.OK || len(r.Findings) != 0 || !slices.Contains(r.Skipped, gpu.Skipped{Check: "link", GPU: -1, Why: "turned off (Options.Off)"}) {
		t.Errorf("ok %v, findings %+v, skipped %+v", r.OK, r.Findings, r.Skipped)
	}
}

// TestQAgreesWithQuery: on the two machines captured with both, nvidia-smi
// -q and the GPU query parse to the same facts.
func TestQAgreesWithQuery(t *testing.T) {
	for _, dir := range []string{"h200", "exporter-h100"} {
		csv := "h200/query_gpu_csv.stdout"
		if dir != "h200" {
			csv = "exporter-h100/query_all.csv"
		}
		p := mustParse(t, probe("query", project(t, read(t, csv)), "q", read(t, dir+"/q.stdout")))
		if len(p.GPUs) != 1 || len(p.QGPUs) != 1 || p.FromQ {
			t.Fatalf("%s: %d GPUs, %d from -q", dir, len(p.GPUs), len(p.QGPUs))
		}
		a, b := p.GPUs[0], p.QGPUs[0]
		a.NA, b.NA = nil, nil
		a.Throttle, b.Throttle = nil, nil // -q shows the reasons, the query the bits of the moment after
		if fmt.Sprintf("%+v", deref(a)) != fmt.Sprintf("%+v", deref(b)) {
			t.Errorf("%s:\nquery %+v\n-q    %+v", dir, deref(a), deref(b))
		}
		for _, f := range []string{"retired_pages.pending"} {
			if _, ok := p.QGPUs[0].NA[f]; !ok {
				t.Errorf("%s: -q's %s not recorded as not readable: %v", dir, f, p.QGPUs[0].NA)
			}
		}
	}
}

// deref turns a GPU's pointers into values for comparing.
func deref(g gpu.GPU) map[string]any {
	m := map[string]any{"index": g.Index, "uuid": g.UUID, "serial": g.Serial, "name": g.Name, "bus": g.BusID, "ecc": g.ECCMode}
	for k, v := range map[string]*int64{"mib": g.MemoryMiB, "unc": g.Uncorrected, "gen": g.LinkGen, "genmax": g.LinkGenMax,
		"width": g.LinkWidth, "widthmax": g.LinkWidthMax, "temp": g.TempC} {
		if v != nil {
			m[k] = *v
		}
	}
	for k, v := range map[string]*bool{"retired": g.RetiredPend, "remap": g.RemapPending, "remapfail": g.RemapFailure} {
		if v != nil {
			m[k] = *v
		}
	}
	return m
}

// TestQOnlyMachines: machines of which only nvidia-smi -q is public are
// judged from it, and what they really show is found: the 8-GPU HGX H100
// passes but warns of the hardware slowdown and power brake its -q shows
// active; of the 4-GPU A100 SXM4, GPU 1 has a row remap pending and fails;
// the L4, whose PCIe link runs at x8 of its x16, fails the link check.
// Each says that the GPUs were read from -q.
func TestQOnlyMachines(t *testing.T) {
	for _, tc := range []struct {
		q, model   string
		count      int
		fail, warn []string
		summary    string
	}{
		{hgxQ, "H100-80GB", 8, nil, []string{"driver", "throttle"}, "8 GPUs H100-80GB healthy (driver 535.161.08, CUDA 12.2, 9 warnings)"},
		{"gls-a100x4/q.stdout", "A100-80GB", 4, []string{"retirement"}, []string{"driver"}, "GPU 1 has a row remap pending (a reset applies it)"},
		{"gls-l4/q.stdout", "L4", 1, []string{"link"}, []string{"driver"}, "GPU 0 (0000:01:00.0) runs its PCIe link at x8 of x16"},
	} {
		t.Run(tc.q, func(t *testing.T) {
			p := mustParse(t, probe("query:6", "No devices were found", "q", read(t, tc.q), "xid", ""))
			if !p.FromQ || len(p.GPUs) != tc.count {
				t.Fatalf("from -q %v, %d GPUs", p.FromQ, len(p.GPUs))
			}
			for _, g := range p.GPUs {
				if g.UUID == "" || g.Serial == "" || g.MemoryMiB == nil || g.LinkWidthMax == nil || g.Uncorrected == nil || *g.Uncorrected != 0 ||
					g.RemapPending == nil || g.RemapFailure == nil || g.Throttle == nil || g.TempC == nil {
					t.Errorf("GPU %d parsed as %+v", g.Index, deref(g))
				}
			}
			r := gpu.Check(p, gpu.Expect{Model: tc.model, Count: tc.count}, gpu.Options{})
			if got := checks(r, provider.Critical); !slices.Equal(got, tc.fail) {
				t.Errorf("failed %v, want %v: %+v", got, tc.fail, r.Findings)
			}
			if got := checks(r, provider.Warn); !slices.Equal(got, tc.warn) {
				t.Errorf("warned %v, want %v: %+v", got, tc.warn, r.Findings)
			}
			if r.Summary != tc.summary {
				t.Errorf("summary %q, want %q", r.Summary, tc.summary)
			}
			if !slices.ContainsFunc(r.Findings, func(f gpu.Finding) bool {
				return f.Check == "driver" && strings.Contains(f.Message, "No devices were found")
			}) {
				t.Errorf("no word of the failed query: %+v", r.Findings)
			}
		})
	}
}

// TestTruncatedT4: the head of a real T4's -q (the rest of the output cut
// off) gives the driver, the CUDA version and the GPU's identity; the model
// check passes, and every check the missing lines would have fed is said to
// be skipped, not passed.
func TestTruncatedT4(t *testing.T) {
	p := mustParse(t, probe("query:6", "No devices were found", "q", read(t, "k8s-device-plugin-390/q_head.stdout"), "xid", ""))
	if p.Driver != "525.89.02" || p.CUDA != "12.0" || len(p.GPUs) != 1 {
		t.Fatalf("driver %q, CUDA %q, GPUs %+v", p.Driver, p.CUDA, p.GPUs)
	}
	g := p.GPUs[0]
	if g.Name != "Tesla T4" || g.Serial != "1322320069283" || g.UUID != "GPU-84b0bf9a-67bf-493c-9214-4fad8b125a6d" || g.BusID != "0000:00:1e.0" {
		t.Errorf("GPU %+v", deref(g))
	}
	r := gpu.Check(p, gpu.Expect{Model: "T4", Count: 1}, gpu.Options{})
	if !r.OK || slices.Contains(checks(r, provider.Critical), "model") {
		t.Errorf("ok %v: %+v", r.OK, r.Findings)
	}
	var skipped []string
	for _, s := range r.Skipped {
		skipped = append(skipped, s.Check)
	}
	for _, c := range []string{"memory", "ecc", "retirement", "link", "temperature", "throttle"} {
		if !slices.Contains(skipped, c) {
			t.Errorf("check %s neither made nor said to be skipped: %v", c, r.Skipped)
		}
	}
}
