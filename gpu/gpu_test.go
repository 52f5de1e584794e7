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

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", path))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// project picks gpu.Fields out of a real `--format=csv` output (header and
// rows) by the header's names, and drops the units a "[unit]" header says
// the values carry, as --format=csv,noheader,nounits prints them. The
// values are the driver's. clocks_event_reasons.active is the newer name
// of clocks_throttle_reasons.active.
func project(t *testing.T, csv string) string {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(csv), "\n")
	header := strings.Split(lines[0], ", ")
	col, unit := map[string]int{}, map[int]string{}
	for i, h := range header {
		name, u, ok := strings.Cut(h, " [")
		if ok {
			unit[i] = strings.TrimSuffix(u, "]")
		}
		if _, dup := col[name]; !dup {
			col[name] = i
		}
	}
	var out []string
	for _, row := range lines[1:] {
		vals := strings.Split(row, ", ")
		var picked []string
		for _, f := range gpu.Fields {
			i, ok := col[f]
			if !ok && f == "clocks_throttle_reasons.active" {
				i, ok = col["clocks_event_reasons.active"]
			}
			if !ok {
				t.Fatalf("the capture has no column %s", f)
			}
			picked = append(picked, strings.TrimSuffix(vals[i], " "+unit[i]))
		}
		out = append(out, strings.Join(picked, ", "))
	}
	return strings.Join(out, "\n") + "\n"
}

// probe assembles the script's output from sections (name → output, rc 0
// unless the name is "name:rc").
func probe(secs ...string) []byte {
	var b strings.Builder
	for i := 0; i+1 < len(secs); i += 2 {
		name, rc, _ := strings.Cut(secs[i], ":")
		if rc == "" {
			rc = "0"
		}
		out := secs[i+1]
		if out != "" && !strings.HasSuffix(out, "\n") {
			out += "\n"
		}
		fmt.Fprintf(&b, "@@gpuprov %s\n%s@@gpuprov rc %s\n", name, out, rc)
	}
	return []byte(b.String())
}

func mustParse(t *testing.T, out []byte) *gpu.Probe {
	t.Helper()
	p, err := gpu.Parse(out)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return p
}

func checks(r *gpu.Report, sev provider.Severity) []string {
	var out []string
	for _, f := range r.Findings {
		if f.Severity == sev && !slices.Contains(out, f.Check) {
			out = append(out, f.Check)
		}
	}
	return out
}

// TestRealMachines: the outputs of a real H200 (captured for gpuprov) and
// a real H100 on an NVSwitch fabric (a public capture) parse, and both
// machines pass as what they are; what the H200 reports as [N/A] is said
// to be unchecked, not passed.
func TestRealMachines(t *testing.T) {
	h200 := probe("query", project(t, read(t, "h200/query_gpu_csv.stdout")), "q", read(t, "h200/q.stdout"),
		"xid", read(t, "h200/dmesg_nvrm_xid.stdout"), "boot", "9f1c0000-0000-4000-8000-000000000001")
	h100 := probe("query", project(t, read(t, "exporter-h100/query_all.csv")), "q", read(t, "exporter-h100/q.stdout"))
	for _, tc := range []struct {
		name, model, summary string
		out                  []byte
		bus, uuid            string
		mib                  int64
		fabric               gpu.Fabric
		skipped              []string
	}{
		{"h200", "H200", "1 GPU H200 healthy (driver 580.159.04, CUDA 13.0)", h200, "0000:00:06.0",
			"GPU-911462c6-8918-2b50-6b9e-1fa196a7e26e", 143771, gpu.Fabric{State: "N/A", Status: "N/A"},
			[]string{"retirement: retired_pages.pending is [N/A] on GPU 0"}},
		{"h100 on an NVSwitch fabric", "H100-80GB", "1 GPU H100-80GB healthy (driver 590.48.01, CUDA 13.1)", h100, "0000:00:09.0",
			"GPU-00000000-0000-0000-0000-000000000000", 81559, gpu.Fabric{State: "Completed", Status: "Success"},
			[]string{"retirement: retired_pages.pending is [N/A] on GPU 0", "xid: the kernel log is not readable (dmesg, sudo -n dmesg and journalctl -k all refused)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := mustParse(t, tc.out)
			if len(p.GPUs) != 1 {
				t.Fatalf("GPUs: %+v", p.GPUs)
			}
			g := p.GPUs[0]
			if g.BusID != tc.bus || g.UUID != tc.uuid || g.MemoryMiB == nil || *g.MemoryMiB != tc.mib ||
				g.LinkWidth == nil || *g.LinkWidth != 16 || g.Uncorrected == nil || *g.Uncorrected != 0 {
				t.Errorf("GPU parsed as %+v", g)
			}
			if got := p.Fabric[tc.bus]; got != tc.fabric {
				t.Errorf("fabric %+v, want %+v", got, tc.fabric)
			}
			r := gpu.Check(p, gpu.Expect{Model: tc.model, Count: 1}, gpu.Options{})
			if !r.OK || r.Summary != tc.summary {
				t.Errorf("report: ok %v, %q; findings %+v; want ok, %q", r.OK, r.Summary, r.Findings, tc.summary)
			}
			var skipped []string
			for _, s := range r.Skipped {
				skipped = append(skipped, s.Check+": "+s.Why)
			}
			if !slices.Equal(skipped, tc.skipped) {
				t.Errorf("skipped %q, want %q", skipped, tc.skipped)
			}
		})
	}
}

// hgxQ is the real nvidia-smi -q of an 8-GPU HGX H100 on NVSwitches
// (testdata/gpud-hgx-h100).
const hgxQ = "gpud-hgx-h100/q.stdout"

// hgxGPUs returns the bus ids and UUIDs of the eight GPUs of hgxQ, in its
// order.
func hgxGPUs(t *testing.T) (bus, uuid []string) {
	t.Helper()
	for _, line := range strings.Split(read(t, hgxQ), "\n") {
		if b, ok := strings.CutPrefix(line, "GPU "); ok {
			bus = append(bus, b)
		}
		if u, ok := strings.CutPrefix(strings.TrimSpace(line), "GPU UUID"); ok {
			uuid = append(uuid, strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(u), ":")))
		}
	}
	if len(bus) != 8 || len(uuid) != 8 {
		t.Fatalf("%s: %d GPUs, %d UUIDs", hgxQ, len(bus), len(uuid))
	}
	return bus, uuid
}

// hgx builds the GPU query of the 8-GPU HGX H100 of hgxQ, for which only
// -q exists: each row is the real H100 row of exporter-h100 with this
// machine's index, UUID and bus id put in; edit changes a row (an empty
// index drops it: a GPU nvidia-smi does not list). bus is the machine's
// lspci -D -n as the probe prints it: the eight GPUs (10de:2330, the
// H100 SXM5's device id) and four NVSwitches (class 0680).
func hgx(t *testing.T, edit func(i int, cols []string)) (query, bus string) {
	t.Helper()
	row := strings.TrimSpace(project(t, read(t, "exporter-h100/query_all.csv")))
	addrs, uuids := hgxGPUs(t)
	var q, l []string
	for i, a := range addrs {
		cols := strings.Split(row, ", ")
		cols[col("index")], cols[col("uuid")], cols[col("pci.bus_id")] = fmt.Sprint(i), uuids[i], a
		if edit != nil {
			edit(i, cols)
		}
		if cols[0] != "" {
			q = append(q, strings.Join(cols, ", "))
		}
		l = append(l, gpu.NormBus(a)+" 0302: 10de:2330 (rev a1)")
	}
	for _, a := range []string{"05", "06", "07", "08"} {
		l = append(l, fmt.Sprintf("0000:%s:00.0 0680: 10de:22a3 (rev a1)", a))
	}
	return strings.Join(q, "\n"), strings.Join(l, "\n")
}

func col(f string) int { return slices.Index(gpu.Fields, f) }

// TestFaults: each fault a bad machine shows fails the check it should,
// with a message a user can act on, and nothing else; the faults are the
// real H100 row with one value changed.
func TestFaults(t *testing.T) {
	q8 := read(t, hgxQ)
	// The first GPU's fabric as a real unfinished one (gpu-operator-2511).
	stuck := strings.Replace(q8, "    Fabric\n        State                             : Completed\n        Status                            : Success\n",
		read(t, "gpu-operator-2511/fabric_in_progress.txt"), 1)
	if stuck == q8 {
		t.Fatal("the HGX -q has no Fabric block to replace")
	}
	for _, tc := range []struct {
		name    string
		edit    func(i int, cols []string)
		q, xid  string
		fm      string
		opts    gpu.Options
		fail    []string
		warn    []string
		summary string
	}{
		{name: "healthy", summary: "8 GPUs H100-80GB healthy (driver 535.161.08, CUDA 12.2)"},
		{name: "7 of 8 visible", edit: func(i int, c []string) {
			if i == 7 {
				c[0] = ""
			}
		}, fail: []string{"count"}, summary: "7 of 8 GPUs visible; missing 0000:db:00.0"},
		{name: "uncorrectable ECC", edit: func(i int, c []string) {
			if i == 2 {
				c[col("ecc.errors.uncorrected.volatile.total")] = "2"
			}
		}, fail: []string{"ecc"}, summary: "GPU 2 (0000:4c:00.0) has 2 uncorrectable ECC errors since the driver loaded"},
		{name: "row remap pending", edit: func(i int, c []string) {
			if i == 1 {
				c[col("remapped_rows.pending")] = "Yes"
			}
		}, fail: []string{"retirement"}},
		{name: "remap failure", edit: func(i int, c []string) {
			if i == 1 {
				c[col("remapped_rows.failure")] = "Yes"
			}
		}, fail: []string{"retirement"}},
		{name: "narrow link", edit: func(i int, c []string) {
			if i == 4 {
				c[col("pcie.link.width.current")] = "8"
			}
		}, fail: []string{"link"}, summary: "GPU 4 (0000:9b:00.0) runs its PCIe link at x8 of x16"},
		{name: "link generation down at idle is no fault", edit: func(i int, c []string) {
			c[col("pcie.link.gen.current")] = "1"
		}},
		{name: "narrow link ignored", opts: gpu.Options{Ignore: []string{"link"}}, edit: func(i int, c []string) {
			if i == 4 {
				c[col("pcie.link.width.current")] = "1"
			}
		}, warn: []string{"link"}},
		{name: "wrong model", edit: func(i int, c []string) {
			c[col("name")] = "NVIDIA A100-SXM4-80GB"
		}, fail: []string{"model"}},
		{name: "too little memory", edit: func(i int, c []string) {
			if i == 0 {
				c[col("memory.total")] = "40536"
			}
		}, fail: []string{"memory"}},
		{name: "fabric not initialized", q: stuck, fail: []string{"fabric"},
			summary: `GPU 0's NVSwitch fabric is "In Progress" (status "N/A"), not Completed/Success: CUDA fails with "system not yet initialized"`},
		{name: "fabric manager down", fm: "inactive", fail: []string{"fabric"}},
		{name: "Xid 79 since boot", xid: "[  812.114221] NVRM: Xid (PCI:0000:bb:00): 79, pid=2468, name=python, GPU has fallen off the bus.",
			fail: []string{"xid"}, summary: "Xid 79 on 0000:bb:00 since boot: GPU has fallen off the bus (reboot or drain the node)"},
		{name: "Xid 79 with the xid check off", opts: gpu.Options{Off: []string{"xid"}},
			xid: "[  812.114221] NVRM: Xid (PCI:0000:bb:00): 79, pid=2468, name=python, GPU has fallen off the bus."},
		{name: "an application's Xid only warns", xid: "[  812.114221] NVRM: Xid (PCI:0000:bb:00): 13, pid=2468, name=python, Graphics SM Warp Exception",
			warn: []string{"xid"}},
		{name: "hardware slowdown warns", edit: func(i int, c []string) {
			c[col("clocks_throttle_reasons.active")] = "0x0000000000000048"
		}, warn: []string{"throttle"}},
		{name: "every field [N/A]", edit: func(i int, c []string) {
			for k := 5; k < len(c); k++ {
				c[k] = "[N/A]"
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			query, bus := hgx(t, tc.edit)
			secs := []string{"query", query, "q", cmpOr(tc.q, q8), "bus", bus, "xid", tc.xid}
			if tc.fm != "" {
				secs = append(secs, "fm:3", tc.fm)
			} else {
				secs = append(secs, "fm", "active")
			}
			r := gpu.Check(mustParse(t, probe(secs...)), gpu.Expect{Model: "H100-80GB", Count: 8}, tc.opts)
			if got := checks(r, provider.Critical); !slices.Equal(got, tc.fail) {
				t.Errorf("failed %v, want %v: %+v", got, tc.fail, r.Findings)
			}
			if got := checks(r, provider.Warn); !slices.Equal(got, tc.warn) {
				t.Errorf("warned %v, want %v: %+v", got, tc.warn, r.Findings)
			}
			if r.OK != (len(tc.fail) == 0) || r.Err() == nil == !r.OK {
				t.Errorf("OK %v, Err %v", r.OK, r.Err())
			}
			if tc.summary != "" && r.Summary != tc.summary {
				t.Errorf("summary %q, want %q", r.Summary, tc.summary)
			}
			for _, g := range r.GPUs {
				for _, c := range g.Failed {
					if !slices.Contains(tc.fail, c) {
						t.Errorf("GPU %d failed %s", g.Index, c)
					}
				}
			}
		})
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// TestNAIsSaid: a GPU whose every checked field is [N/A] or [Not
// Supported] passes nothing silently: each check it could not make is
// listed with the field and the GPU.
func TestNAIsSaid(t *testing.T) {
	row := "0, GPU-x, 1322320069283, Tesla T4, 00000000:00:1E.0, [N/A], 525.89.02, [Not Supported], [Unknown Error], [N/A], [Insufficient Permissions], [N/A], [N/A], [N/A], N/A, [N/A], [Not Supported], [N/A]"
	p := mustParse(t, probe("query", row))
	r := gpu.Check(p, gpu.Expect{Model: "T4", Count: 1}, gpu.Options{})
	if !r.OK {
		t.Fatalf("failed: %+v", r.Findings)
	}
	var got []string
	for _, s := range r.Skipped {
		got = append(got, s.Check)
	}
	for _, want := range []string{"memory", "ecc", "retirement", "link", "throttle", "temperature", "xid"} {
		if !slices.Contains(got, want) {
			t.Errorf("check %s not reported as skipped (skipped: %v)", want, got)
		}
	}
	if g := p.GPUs[0]; g.NA["ecc.errors.uncorrected.volatile.total"] != "[Unknown Error]" || g.NA["remapped_rows.pending"] != "[Insufficient Permissions]" || g.NA["pcie.link.width.current"] != "N/A" {
		t.Errorf("not-readable reasons %v", g.NA)
	}
}

// TestDriverErrors: the driver's own words when it cannot talk to the GPU
// end acceptance with those words; an older driver that does not know a
// field gets the base fields, and the checks it could not make are said.
func TestDriverErrors(t *testing.T) {
	for _, tc := range []struct {
		name, out string
		rc        string
		want      string
	}{
		{"no driver", "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running.", "9",
			"the driver does not answer: NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running."},
		{"no devices", "No devices were found", "6", "the driver does not answer: No devices were found"},
		{"not installed", "sh: 1: nvidia-smi: not found", "127", "the driver does not answer: nvidia-smi is not installed: sh: 1: nvidia-smi: not found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := gpu.Check(mustParse(t, probe("query:"+tc.rc, tc.out)), gpu.Expect{Model: "H100-80GB", Count: 1}, gpu.Options{})
			if r.OK || !strings.HasPrefix(r.Summary, tc.want) {
				t.Errorf("summary %q, want it to start %q", r.Summary, tc.want)
			}
		})
	}
	for _, lost := range []string{
		"Unable to determine the device handle for GPU0000:BB:00.0: Unknown Error",
		"Unable to determine the device handle for GPU0000:BB:00.0: GPU is lost.  Reboot the system to recover this GPU",
		// the form that names the GPU's index first, as some drivers print it
		"Unable to determine the device handle for GPU7: 0000:BB:00.0: Unknown Error",
	} {
		t.Run(lost, func(t *testing.T) {
			query, bus := hgx(t, nil)
			rows := strings.Split(query, "\n")
			rows[5] = lost
			p := mustParse(t, probe("query:15", strings.Join(rows, "\n"), "bus", bus))
			if !slices.Equal(p.Lost, []string{"0000:bb:00.0"}) {
				t.Errorf("lost %v", p.Lost)
			}
			r := gpu.Check(p, gpu.Expect{Model: "H100-80GB", Count: 8}, gpu.Options{})
			if got := checks(r, provider.Critical); !slices.Equal(got, []string{"driver", "count"}) {
				t.Errorf("failed %v: %s", got, r.Summary)
			}
			if want := "the driver cannot reach GPU 0000:bb:00.0: " + lost + "; 7 of 8 GPUs visible; missing 0000:bb:00.0"; r.Summary != want {
				t.Errorf("summary %q\nwant    %q", r.Summary, want)
			}
		})
	}
	t.Run("an older driver", func(t *testing.T) {
		var base []string
		for _, f := range gpu.Fields {
			if !strings.HasPrefix(f, "remapped_rows.") {
				base = append(base, f)
			}
		}
		row := strings.Split(strings.TrimSpace(project(t, read(t, "exporter-h100/query_all.csv"))), ", ")
		var vals []string
		for _, f := range base {
			vals = append(vals, row[col(f)])
		}
		p := mustParse(t, probe("query:2", read(t, "h200/err_bad_field.stdout"), "query-base", strings.Join(vals, ", ")))
		if len(p.GPUs) != 1 || !slices.Equal(p.Unknown, []string{"remapped_rows.pending", "remapped_rows.failure"}) {
			t.Fatalf("GPUs %+v, unknown %v", p.GPUs, p.Unknown)
		}
		r := gpu.Check(p, gpu.Expect{Model: "H100-80GB", Count: 1}, gpu.Options{})
		n := 0
		for _, s := range r.Skipped {
			if s.Check == "retirement" && strings.Contains(s.Why, "not known to this driver") {
				n++
			}
		}
		if !r.OK || n != 2 {
			t.Errorf("ok %v, skipped %+v", r.OK, r.Skipped)
		}
	})
	if _, err := gpu.Parse([]byte("Welcome to Ubuntu\n")); err == nil {
		t.Error("output that is not the probe's parsed")
	}
}

// TestHealth: against the accepted machine's baseline, only what is new
// is reported: an Xid 79 since, ECC errors rising, a GPU gone; an Xid seen
// at acceptance is not reported again, and after a reboot every Xid is new.
func TestHealth(t *testing.T) {
	query, bus := hgx(t, nil)
	old := "[   12.000001] NVRM: Xid (PCI:0000:19:00): 13, pid=1, name=x, Graphics SM Warp Exception"
	accepted := mustParse(t, probe("query", query, "bus", bus, "xid", old, "boot", "boot-1"))
	base := gpu.Check(accepted, gpu.Expect{Model: "H100-80GB", Count: 8}, gpu.Options{}).Baseline
	if base.BootID != "boot-1" || base.XidSince != 12.000001 || base.GPUs != 8 || len(base.Bus) != 8 {
		t.Fatalf("baseline %+v", base)
	}
	codes := func(fs []provider.Finding) (out []string) {
		for _, f := range fs {
			out = append(out, f.Severity.String()+" "+f.Code)
		}
		return out
	}
	if fs := gpu.Health(accepted, base, gpu.Options{}); len(fs) != 0 {
		t.Errorf("nothing new, yet %v", codes(fs))
	}
	xid79 := old + "\n[ 5012.114221] NVRM: Xid (PCI:0000:bb:00): 79, pid=2468, name=python, GPU has fallen off the bus."
	later := mustParse(t, probe("query", query, "bus", bus, "xid", xid79, "boot", "boot-1"))
	if got := codes(gpu.Health(later, base, gpu.Options{})); !slices.Equal(got, []string{"critical gpu-xid-79"}) {
		t.Errorf("after an Xid 79: %v", got)
	}
	rebooted := mustParse(t, probe("query", query, "bus", bus, "xid", old, "boot", "boot-2"))
	if got := codes(gpu.Health(rebooted, base, gpu.Options{})); !slices.Equal(got, []string{"warn gpu-xid-13"}) {
		t.Errorf("after a reboot: %v", got)
	}
	gone, _ := hgx(t, func(i int, c []string) {
		if i == 6 {
			c[0] = ""
		}
		if i == 1 {
			c[col("ecc.errors.uncorrected.volatile.total")] = "4"
		}
	})
	worse := mustParse(t, probe("query", gone, "bus", bus, "xid", old, "boot", "boot-1"))
	if got := codes(gpu.Health(worse, base, gpu.Options{})); !slices.Equal(got, []string{"critical gpu-gone", "critical gpu-gone", "critical gpu-ecc"}) {
		t.Errorf("a GPU gone and ECC rising: %v", got)
	}
}

// TestScriptRuns runs the probe script for real, under sh, with fake
// nvidia-smi, lspci and dmesg on PATH that answer as the real H200 did,
// and parses what it printed: the script and the parser agree.
func TestScriptRuns(t *testing.T) {
	script := gpu.Script(gpu.ProbeOptions{Timeout: 5})
	if strings.Count(script, "'") != 2 {
		t.Fatalf("the script has a quote inside its sh -c '…'")
	}
	if out, err := exec.Command("sh", "-n", "-c", strings.TrimSuffix(strings.TrimPrefix(script, "sh -c '"), "'")).CombinedOutput(); err != nil {
		t.Fatalf("sh -n: %v\n%s", err, out)
	}
	dir := t.TempDir()
	row := project(t, read(t, "h200/query_gpu_csv.stdout"))
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "row"), []byte(row), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "q"), []byte(read(t, "h200/q.stdout")), 0o600); err != nil {
		t.Fatal(err)
	}
	write("nvidia-smi", fmt.Sprintf(`case "$1" in
--query-gpu=%s) cat %s/row ;;
-q) cat %s/q ;;
*) echo "unexpected: $*" >&2; exit 3 ;;
esac
`, strings.Join(gpu.Fields, ","), dir, dir))
	write("lspci", `[ "$*" = "-D -n -d 10de:" ] || exit 3; echo "0000:00:06.0 0302: 10de:2335 (rev a1)"`)
	write("dmesg", `echo "[    0.592589] NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  580.159.04"
echo "[  812.114221] NVRM: Xid (PCI:0000:00:06): 79, pid=2468, name=python, GPU has fallen off the bus."`)
	cmd := exec.Command("sh", "-c", script)
	cmd.Env = []string{"PATH=" + dir + ":/usr/bin:/bin"}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("script: %v\n%s", err, out)
	}
	p := mustParse(t, out)
	if len(p.GPUs) != 1 || p.GPUs[0].Name != "NVIDIA H200" || p.CUDA != "13.0" || !p.BusRead || len(p.Bus) != 1 ||
		!p.XidRead || len(p.Xids) != 1 || p.Xids[0].Code != 79 || p.Xids[0].Since != 812.114221 || p.BootID == "" {
		t.Fatalf("parsed %+v\nfrom\n%s", p, out)
	}
	r := gpu.Check(p, gpu.Expect{Model: "H200", Count: 1}, gpu.Options{})
	if r.OK || !strings.HasPrefix(r.Summary, "Xid 79 on 0000:00:06 since boot") {
		t.Errorf("summary %q", r.Summary)
	}
}

// TestFabricManagerUnknown: where systemd cannot answer (a container, a VM
// without systemd), the fabric manager's state is said to be unknown, not
// failed.
func TestFabricManagerUnknown(t *testing.T) {
	query, bus := hgx(t, nil)
	q8 := read(t, hgxQ)
	noSystemd := "System has not been booted with systemd as init system (PID 1). Can't operate.\nFailed to connect to bus: Host is down"
	r := gpu.Check(mustParse(t, probe("query", query, "q", q8, "bus", bus, "fm:1", noSystemd, "xid", "")), gpu.Expect{Model: "H100-80GB", Count: 8}, gpu.Options{})
	said := slices.ContainsFunc(r.Skipped, func(s gpu.Skipped) bool {
		return s.Check == "fabric" && strings.Contains(s.Why, "System has not been booted with systemd")
	})
	if !r.OK || !said {
		t.Errorf("ok %v, skipped %+v, findings %+v", r.OK, r.Skipped, r.Findings)
	}
}
