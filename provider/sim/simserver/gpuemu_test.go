package simserver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/org/gpuprov/clock"
	sshc "github.com/org/gpuprov/ssh"
)

// h200 reads a file of the real driver's answers captured on an H200
// (gpu/testdata/h200, driver 580.159.04).
func h200(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "gpu", "testdata", "h200", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// captureQuery is the field list of the capture's --query-gpu commands
// (summary.tsv: query_gpu_noheader, query_gpu_csv).
const captureQuery = "index,uuid,serial,name,pci.bus_id,memory.total,driver_version,ecc.mode.current,ecc.mode.pending," +
	"ecc.errors.uncorrected.volatile.total,ecc.errors.corrected.volatile.total,retired_pages.pending,remapped_rows.pending," +
	"remapped_rows.failure,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max," +
	"clocks_throttle_reasons.active,clocks_event_reasons.active,temperature.gpu,power.draw,persistence_mode,compute_mode,mig.mode.current"

// gpuEnv is a server with real SSH (cloud c1, a fake clock) and a key to
// log in to its instances with.
type gpuEnv struct {
	t    *testing.T
	s    *Server
	clk  *clock.Fake
	key  sshc.KeyPair
	opts Options
}

// offersWithCPU are catalog A's 8×H100, L4 and T4 offers, a CPU offer and
// an 8×H100 that is one machine (m-7).
func offersWithCPU() []Offer {
	var out []Offer
	for _, o := range catalogA() {
		switch o.ID {
		case "a-h100x8-use1a", "a-l4x1-use1a", "a-t4x1-euw1b":
			out = append(out, o)
		}
	}
	cpu := Offer{ID: "cpu-4", Region: "us-east", Zone: "us-east-1a", InstanceType: "cpu.4x", VCPUs: 4, MemoryGB: 16, PricePerHour: 0.1, Availability: "high"}
	m7 := out[0]
	m7.ID, m7.Host = "m7-h100x8", "m-7"
	return append(out, cpu, m7)
}

func newGPUEnv(t *testing.T, mutate func(*Options)) *gpuEnv {
	t.Helper()
	key, err := sshc.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	e := &gpuEnv{t: t, key: key}
	e.s, e.clk = start(t, func(o *Options) {
		o.DisableSSH = false
		o.StateDir = t.TempDir()
		o.StateFile = filepath.Join(t.TempDir(), "state.json")
		o.Clouds[0].Offers = offersWithCPU()
		if mutate != nil {
			mutate(o)
		}
		e.opts = *o
	})
	return e
}

// create creates an instance of offer and boots it.
func (e *gpuEnv) create(offer string) Instance {
	e.t.Helper()
	var in Instance
	resp := request(e.t, e.s, "POST", "/clouds/c1/v1/instances", e.s.APIKey("c1"), map[string]any{"offer_id": offer, "name": "vm",
		"user_data": "#cloud-config\nssh_authorized_keys:\n  - " + strings.TrimSpace(e.key.AuthorizedKey) + "\n"}, &in)
	if resp.StatusCode != http.StatusCreated {
		e.t.Fatalf("create %s: %d", offer, resp.StatusCode)
	}
	e.clk.Advance(4 * time.Second)
	got, err := e.s.Instance("c1", in.ID)
	if err != nil || got.Status != StatusRunning || got.SSH == nil {
		e.t.Fatalf("instance %+v, %v; want running with SSH", got, err)
	}
	return got
}

// run runs cmd on in over SSH and returns its stdout and exit status.
func (e *gpuEnv) run(in Instance, cmd string) (string, int) {
	e.t.Helper()
	hk, err := sshc.FixedHostKey(in.HostKey)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := sshc.Dial(ctx, sshc.Config{Addr: fmt.Sprintf("%s:%d", in.SSH.Host, in.SSH.Port), User: in.SSH.User,
		Signer: e.key.Signer, HostKey: hk})
	if err != nil {
		e.t.Fatalf("ssh to %s: %v", in.ID, err)
	}
	defer c.Close()
	r, err := c.Run(ctx, cmd)
	if ee := (*sshc.ExitError)(nil); err != nil && !errors.As(err, &ee) {
		e.t.Fatalf("ssh %s %q: %v", in.ID, cmd, err)
	}
	return string(r.Stdout), r.ExitCode
}

// qKeys is the layout of nvidia-smi -q: each line's indent and key.
func qKeys(block string) []string {
	var out []string
	for _, l := range strings.Split(block, "\n") {
		k, _, _ := strings.Cut(l, ":")
		out = append(out, strings.TrimRight(k, " ")+"|")
	}
	return out
}

// TestEmulatedGPUToolsAnswerAsTheRealDriver: a healthy 8×H100 and 1×L4
// answer nvidia-smi (query with and without header and units, -i, -q,
// -L, a bare call), lspci, dmesg and systemctl over SSH in the formats of
// the real driver's answers captured on an H200; a CPU instance has no
// nvidia-smi.
func TestEmulatedGPUToolsAnswerAsTheRealDriver(t *testing.T) {
	e := newGPUEnv(t, nil)
	realQ := h200(t, "q.stdout")
	realHead, realBlock, _ := strings.Cut(realQ, "GPU 00000000:00:06.0\n")
	realRow := strings.Split(strings.TrimSpace(h200(t, "query_gpu_noheader.stdout")), ", ")
	for _, tc := range []struct {
		offer, name, mem, fabric string
		n, switches              int
	}{
		{"a-h100x8-use1a", "NVIDIA H100 80GB HBM3", "81559", "Completed", 8, 4},
		{"a-l4x1-use1a", "NVIDIA L4", "23034", "N/A", 1, 0},
	} {
		t.Run(tc.offer, func(t *testing.T) {
			in := e.create(tc.offer)
			out, rc := e.run(in, "nvidia-smi --query-gpu="+captureQuery+" --format=csv,noheader,nounits")
			rows := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
			if rc != 0 || len(rows) != tc.n {
				t.Fatalf("query: rc %d, %d rows, want 0 and %d:\n%s", rc, len(rows), tc.n, out)
			}
			uuids := map[string]bool{}
			for i, row := range rows {
				cols := strings.Split(row, ", ")
				if len(cols) != len(realRow) {
					t.Fatalf("row %d has %d fields, the real one %d: %q", i, len(cols), len(realRow), row)
				}
				for j, want := range realRow {
					shape := func(s string) string { return regexp.MustCompile(`[0-9a-fA-F]`).ReplaceAllString(s, "h") }
					switch j {
					case 0, 1, 2, 3, 4, 5, 14, 15, 20, 21, 24: // values of the board, compared below
					default:
						if shape(cols[j]) != shape(want) && !(j >= 11 && j <= 13 && tc.n == 1 && cols[j] == want) {
							t.Errorf("row %d field %d = %q, the real H200's %q", i, j, cols[j], want)
						}
					}
				}
				if cols[0] != fmt.Sprint(i) || cols[3] != tc.name || cols[5] != tc.mem || uuids[cols[1]] ||
					!regexp.MustCompile(`^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`).MatchString(cols[1]) ||
					!regexp.MustCompile(`^00000000:[0-9A-F]{2}:[0-9A-F]{2}\.0$`).MatchString(cols[4]) ||
					!regexp.MustCompile(`^\d+\.\d\d$`).MatchString(cols[21]) {
					t.Errorf("row %d: %q", i, row)
				}
				uuids[cols[1]] = true
			}
			if tc.n == 8 && !strings.HasPrefix(rows[0], "0, GPU-") || tc.n == 8 && !strings.Contains(rows[7], "00000000:DB:00.0") {
				t.Errorf("8-GPU bus ids are not the HGX layout:\n%s", out)
			}

			// With header and units, and for one GPU: the real header, byte for byte.
			out, rc = e.run(in, "nvidia-smi --query-gpu="+captureQuery+" --format=csv -i 0")
			realCSV := strings.Split(h200(t, "query_gpu_csv_i0.stdout"), "\n")
			got := strings.Split(out, "\n")
			if rc != 0 || len(got) != 3 || got[0] != realCSV[0] || !strings.Contains(got[1], ", "+tc.mem+" MiB, ") ||
				!regexp.MustCompile(`, \d+\.\d\d W, `).MatchString(got[1]) {
				t.Errorf("csv -i 0: rc %d\n%s\nreal:\n%s", rc, out, realCSV[0])
			}
			// Every field the driver lists, in one query.
			fields := strings.Fields(h200(t, "help_query_gpu.fields"))
			out, rc = e.run(in, "nvidia-smi --query-gpu="+strings.Join(fields, ",")+" --format=csv,noheader")
			if first, _, _ := strings.Cut(out, "\n"); rc != 0 || len(strings.Split(first, ", ")) != len(fields) || len(fields) != 214 {
				t.Errorf("all %d fields: rc %d, %d columns", len(fields), rc, len(strings.Split(first, ", ")))
			}
			// The driver's own errors, text and status.
			for _, c := range []struct{ cmd, capture string }{
				{"nvidia-smi --query-gpu=no_such_field --format=csv", "err_bad_field"},
				{"nvidia-smi --query-gpu=index --format=csv -i 99", "err_bad_index_query"},
				{"nvidia-smi -i 99", "err_bad_index"},
			} {
				out, rc := e.run(in, c.cmd)
				if want := h200(t, c.capture+".stdout"); out != want || fmt.Sprint(rc) != strings.TrimSpace(h200(t, c.capture+".rc")) {
					t.Errorf("%s: %d %q, want the real %s %q", c.cmd, rc, out, h200(t, c.capture+".rc"), want)
				}
			}

			// -q: the real layout, line for line, in the header and in each GPU's block.
			out, rc = e.run(in, "nvidia-smi -q")
			head, rest, _ := strings.Cut(out, "GPU 0000")
			if rc != 0 || strings.Join(qKeys(head), "") != strings.Join(qKeys(realHead), "") ||
				!strings.Contains(head, fmt.Sprintf("Attached GPUs                                          : %d\n", tc.n)) {
				t.Fatalf("-q header:\n%s\nreal:\n%s", head, realHead)
			}
			blocks := strings.SplitAfter("GPU 0000"+rest, "\n\n")
			blocks = blocks[:len(blocks)-1] // after the last block's blank line: nothing
			if len(blocks) != tc.n {
				t.Fatalf("-q has %d GPU blocks, want %d", len(blocks), tc.n)
			}
			_, b0, _ := strings.Cut(blocks[0], "\n")
			if strings.Join(qKeys(b0), "") != strings.Join(qKeys(realBlock), "") {
				t.Errorf("-q block layout differs from the real one:\n%s", b0)
			}
			for _, want := range []string{
				"    Product Name                                       : " + tc.name + "\n",
				"    FB Memory Usage\n        Total                                          : " + tc.mem + " MiB\n",
				"    Fabric\n        State                                          : " + tc.fabric + "\n",
				"            Link Width\n                Max                                    : 16x\n                Current                                : 16x\n",
				"        HW Slowdown                                    : Not Active\n            HW Thermal Slowdown                        : Not Active\n",
				"        DRAM Uncorrectable                         : 0\n",
				"    Retired Pages\n        Single Bit ECC                                 : N/A\n",
				"        Pending                                        : No\n        Remapping Failure Occurred                     : No\n",
			} {
				if !strings.Contains(b0, want) {
					t.Errorf("-q lacks %q", want)
				}
			}

			// -L and a bare nvidia-smi.
			out, _ = e.run(in, "nvidia-smi -L")
			if l := strings.Split(strings.TrimSuffix(out, "\n"), "\n"); len(l) != tc.n ||
				!regexp.MustCompile(`^GPU 0: `+tc.name+` \(UUID: GPU-[0-9a-f-]{36}\)$`).MatchString(l[0]) {
				t.Errorf("-L:\n%s", out)
			}
			out, rc = e.run(in, "nvidia-smi")
			realTable := strings.Split(h200(t, "nvidia_smi.stdout"), "\n")
			table := strings.Split(out, "\n")
			if rc != 0 || len(table) != len(realTable)+4*(tc.n-1) || !strings.Contains(out, "CUDA Version: 13.0") {
				t.Errorf("nvidia-smi: rc %d\n%s", rc, out)
			}
			for i, l := range table {
				if want := realTable[min(i, len(realTable)-1)]; len(l) != len(want) && (tc.n == 1 || i < 12) {
					t.Errorf("table line %d is %d wide, the real one %d: %q", i, len(l), len(want), l)
				}
			}

			// lspci, dmesg, the fabric manager.
			out, _ = e.run(in, "lspci -D -n -d 10de:")
			bus := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
			if len(bus) != tc.n+tc.switches || !regexp.MustCompile(`^0000:[0-9a-f]{2}:[0-9a-f]{2}\.0 0302: 10de:[0-9a-f]{4} \(rev a1\)$`).MatchString(bus[0]) ||
				tc.switches > 0 && !strings.HasSuffix(out, "0680: 10de:22a3 (rev a1)\n") {
				t.Errorf("lspci:\n%s", out)
			}
			if tc.n == 8 && bus[0] != "0000:18:00.0 0302: 10de:2330 (rev a1)" {
				t.Errorf("lspci first GPU %q", bus[0])
			}
			out, _ = e.run(in, "dmesg")
			if !regexp.MustCompile(`(?m)^\[ {4}0\.\d{6}\] NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  580\.159\.04  Release Build`).MatchString(out) ||
				strings.Contains(out, "Xid") {
				t.Errorf("dmesg:\n%s", out)
			}
			out, rc = e.run(in, "systemctl is-active nvidia-fabricmanager")
			if tc.switches > 0 && (out != "active\n" || rc != 0) {
				t.Errorf("fabric manager: %q %d", out, rc)
			}
		})
	}
	t.Run("cpu", func(t *testing.T) {
		in := e.create("cpu-4")
		if out, rc := e.run(in, "command -v nvidia-smi lspci dmesg | grep -c \"$HOME\""); rc == 0 {
			t.Errorf("a CPU instance has emulated GPU tools: %s", out)
		}
	})
}

// TestEmulatedGPUsAreStablePerInstance: UUIDs and serials derive from the
// instance id: the same on every render, distinct across instances and
// GPUs.
func TestEmulatedGPUsAreStablePerInstance(t *testing.T) {
	mk := func(id string) map[string]string {
		in := &instance{Instance: Instance{ID: id, GPU: "H100-80GB", GPUCount: 8, GPUMemoryGB: 80}}
		return renderGPUs(in, t0)
	}
	a, b, c := mk("i-1"), mk("i-1"), mk("i-2")
	if a["L"] != b["L"] || a["gpus"] != b["gpus"] || a["L"] == c["L"] {
		t.Fatalf("renders: %q / %q / %q", a["L"], b["L"], c["L"])
	}
	seen := map[string]bool{}
	for _, l := range strings.Split(a["gpus"], "\n") {
		for _, kv := range strings.Split(l, "\t") {
			if strings.HasPrefix(kv, "uuid=") || strings.HasPrefix(kv, "serial=") {
				if seen[kv] {
					t.Errorf("%s twice", kv)
				}
				seen[kv] = true
			}
		}
	}
}

// TestGPUFaultKindsShowInTheTools: each fault kind, drawn at create, shows
// in the tools' answers as it does on a real machine.
func TestGPUFaultKindsShowInTheTools(t *testing.T) {
	const query = "nvidia-smi --query-gpu=index,name,memory.total,ecc.errors.uncorrected.volatile.total,remapped_rows.pending," +
		"remapped_rows.failure,retired_pages.pending,pcie.link.width.current,clocks_event_reasons.active,temperature.gpu --format=csv,noheader,nounits"
	for _, tc := range []struct {
		name   string
		f      GPUFault
		offer  string
		cmd    string
		rc     int
		want   []string // substrings of the answer
		absent string   // not in the answer
	}{
		{"missing_gpu", GPUFault{Kind: GPUMissing}, "a-h100x8-use1a", "nvidia-smi -L | wc -l; lspci -D -n -d 10de: | grep -c 0302; dmesg | grep rm_init_adapter", 0,
			[]string{"7\n8\n", "NVRM: GPU 0000:db:00.0: rm_init_adapter failed, device minor number 7"}, ""},
		{"no_driver", GPUFault{Kind: GPUNoDriver}, "a-l4x1-use1a", "nvidia-smi -q", 9,
			[]string{"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running.\n\n"}, "GPU 0000"},
		{"ecc", GPUFault{Kind: GPUECC}, "a-h100x8-use1a", query + "; dmesg | grep Xid", 0,
			[]string{"7, NVIDIA H100 80GB HBM3, 81559, 2, No, No, [N/A], 16,", "NVRM: Xid (PCI:0000:db:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit error (DBE)"}, ""},
		{"retired_pending", GPUFault{Kind: GPURetired, GPU: new(2)}, "a-h100x8-use1a", query + "; nvidia-smi -q -i 2 | grep -A6 'Remapped Rows'", 0,
			[]string{"2, NVIDIA H100 80GB HBM3, 81559, 0, Yes, No, [N/A]", "        Pending                                        : Yes\n"}, ""},
		{"retired_pending T4", GPUFault{Kind: GPURetired}, "a-t4x1-euw1b", query, 0, []string{"0, Tesla T4, 15360, 0, [N/A], [N/A], Yes, 16,"}, ""},
		{"remap_failure", GPUFault{Kind: GPURemapFailure}, "a-l4x1-use1a", query, 0, []string{"0, NVIDIA L4, 23034, 0, No, Yes, [N/A]"}, ""},
		{"xid 94", GPUFault{Kind: GPUXid, Xid: 94}, "a-l4x1-use1a", "dmesg | grep Xid", 0,
			[]string{"] NVRM: Xid (PCI:0000:00:05): 94, pid=2468, name=python, Contained: SM (0x1). RST: No, D-RST: No\n"}, ""},
		{"xid default", GPUFault{Kind: GPUXid}, "a-l4x1-use1a", "dmesg | grep Xid", 0, []string{": 79, pid=2468, name=python, GPU has fallen off the bus.\n"}, ""},
		{"fallen_off_bus", GPUFault{Kind: GPUFallenOff, GPU: new(4)}, "a-h100x8-use1a", query + "; echo rc=$?; lspci | grep 9a:00; dmesg | grep -c 'fallen off'", 0,
			[]string{"3, NVIDIA H100", "Unable to determine the device handle for GPU0000:9A:00.0: Unknown Error\n5, NVIDIA H100", "rc=15\n", "0000:9a:00.0 0302: 10de:2330 (rev ff)\n2\n"}, ""},
		{"wrong_model", GPUFault{Kind: GPUWrongModel}, "a-h100x8-use1a", query + "; lspci | head -1; nvidia-smi -q | grep -m1 -A1 '^    Fabric$'", 0,
			[]string{"0, NVIDIA A100-SXM4-80GB, 81920,", "0000:18:00.0 0302: 10de:20b2 (rev a1)", "State                                          : N/A"}, "H100"},
		{"wrong_model L4", GPUFault{Kind: GPUWrongModel, Model: "T4"}, "a-l4x1-use1a", query, 0, []string{"0, Tesla T4, 15360,"}, ""},
		{"fabric_down", GPUFault{Kind: GPUFabricDown}, "a-h100x8-use1a", "nvidia-smi -q -i 0 | grep -A2 '^    Fabric'; nvidia-smi --query-gpu=fabric.state,fabric.status --format=csv,noheader; systemctl is-active nvidia-fabricmanager", 3,
			[]string{"        State                                          : In Progress\n        Status                                         : N/A\n", "In Progress, N/A\n", "failed\n"}, "Completed"},
		{"narrow_link", GPUFault{Kind: GPUNarrowLink}, "a-l4x1-use1a", query + "; nvidia-smi -q | grep -A2 'Link Width'", 0,
			[]string{"0, NVIDIA L4, 23034, 0, No, No, [N/A], 8,", "Max                                    : 16x\n                Current                                : 8x\n"}, ""},
		{"thermal", GPUFault{Kind: GPUThermal}, "a-l4x1-use1a", query + "; nvidia-smi -q | grep -A6 'Clocks Event Reasons$'", 0,
			[]string{", 16, 0x0000000000000048, 92\n", "HW Slowdown                                    : Active\n            HW Thermal Slowdown                        : Active\n"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.f.Offers = []string{tc.offer}
			e := newGPUEnv(t, func(o *Options) { o.Clouds[0].Faults.GPUFaults = []GPUFault{tc.f} })
			in := e.create(tc.offer)
			if len(in.GPUFaults) != 1 || in.GPUFaults[0].Kind != tc.f.Kind {
				t.Fatalf("instance faults %+v", in.GPUFaults)
			}
			e.t = t
			out, rc := e.run(in, tc.cmd)
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("answer lacks %q:\n%s", w, out)
				}
			}
			if rc != tc.rc || tc.absent != "" && strings.Contains(out, tc.absent) {
				t.Errorf("rc %d, want %d; answer:\n%s", rc, tc.rc, out)
			}
			// Other offers are untouched.
			if other := e.create("a-t4x1-euw1b"); tc.offer != "a-t4x1-euw1b" && len(other.GPUFaults) != 0 {
				t.Errorf("a fault for %s hit a T4: %+v", tc.offer, other.GPUFaults)
			}
		})
	}
}

// TestInjectGPUFaultAfterBoot: a fault injected into a running instance
// (the admin route, then InjectGPUFault) shows from then on, stamped at the
// instance's uptime, lists in the instance, and survives a restart of the
// server from its state file; bad injections are refused.
func TestInjectGPUFaultAfterBoot(t *testing.T) {
	e := newGPUEnv(t, nil)
	in := e.create("a-h100x8-use1a")
	if out, _ := e.run(in, "dmesg | grep -c Xid"); out != "0\n" {
		t.Fatalf("a healthy machine has Xids: %s", out)
	}
	e.clk.Advance(10 * time.Minute)
	var got Instance
	resp := request(t, e.s, "POST", "/admin/clouds/c1/instances/"+in.ID+"/gpu-faults", e.s.AdminToken(),
		map[string]any{"kind": "xid", "xid": 79, "gpu": 3}, &got)
	if resp.StatusCode != http.StatusOK || len(got.GPUFaults) != 1 || got.GPUFaults[0].Xid != 79 {
		t.Fatalf("admin inject: %d %+v", resp.StatusCode, got.GPUFaults)
	}
	out, _ := e.run(in, "dmesg | grep Xid")
	if !regexp.MustCompile(`^\[ *60[0-9]\.\d{6}\] NVRM: Xid \(PCI:0000:5d:00\): 79, pid=2468, name=python, GPU has fallen off the bus\.\n$`).MatchString(out) {
		t.Errorf("after the injection, dmesg: %q", out)
	}
	if err := e.s.InjectGPUFault("c1", in.ID, GPUFault{Kind: GPUFallenOff}); err != nil {
		t.Fatal(err)
	}
	if out, rc := e.run(in, "nvidia-smi --query-gpu=index --format=csv,noheader"); rc != 15 ||
		out != "0\n1\n2\n3\n4\n5\n6\nUnable to determine the device handle for GPU0000:DB:00.0: Unknown Error\n" {
		t.Errorf("a lost GPU: %d %q", rc, out)
	}
	for _, c := range []struct {
		path string
		body map[string]any
		code int
	}{
		{"/admin/clouds/c1/instances/" + in.ID + "/gpu-faults", map[string]any{"kind": "melted"}, http.StatusBadRequest},
		{"/admin/clouds/c1/instances/" + in.ID + "/gpu-faults", map[string]any{"kind": "ecc", "rate": 2}, http.StatusBadRequest},
		{"/admin/clouds/c1/instances/i-nope/gpu-faults", map[string]any{"kind": "ecc"}, http.StatusNotFound},
		{"/admin/clouds/c1/instances/" + e.create("cpu-4").ID + "/gpu-faults", map[string]any{"kind": "ecc"}, http.StatusBadRequest},
	} {
		if resp := request(t, e.s, "POST", c.path, e.s.AdminToken(), c.body, nil); resp.StatusCode != c.code {
			t.Errorf("%s %v: %d, want %d", c.path, c.body, resp.StatusCode, c.code)
		}
	}

	// Restart from the state file: the faults are still the instance's
	// and its tools', and a new one still lands.
	if err := e.s.Close(); err != nil {
		t.Fatal(err)
	}
	opts := e.opts
	s2, err := Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s2.Close() })
	e.s = s2
	in2, err := s2.Instance("c1", in.ID)
	if err != nil || len(in2.GPUFaults) != 2 || in2.GPUFaults[1].Kind != GPUFallenOff || in2.HostID != in.HostID {
		t.Fatalf("after restart: %+v, %v", in2, err)
	}
	if err := s2.InjectGPUFault("c1", in.ID, GPUFault{Kind: GPUThermal, GPU: new(0)}); err != nil {
		t.Fatal(err)
	}
	out, rc := e.run(in2, "dmesg | grep -c Xid; nvidia-smi --query-gpu=temperature.gpu -i 0 --format=csv,noheader")
	if out != "2\n92\n" || rc != 0 {
		t.Errorf("after restart and a thermal fault: %d %q", rc, out)
	}
}

// TestGPUFaultRateAndHosts: a fault with a rate hits about that share of
// new instances, the same ones on every run with the same seed; one on a
// host hits only the instances on that host; an offer that names its
// machine puts its instances there.
func TestGPUFaultRateAndHosts(t *testing.T) {
	draw := func() (hits []bool, hostHits, onHost int, m7 string) {
		s, _ := start(t, func(o *Options) {
			o.Clouds[0].Offers = offersWithCPU()
			o.Clouds[0].Faults.GPUFaults = []GPUFault{{Kind: GPUECC, Rate: 0.5, Offers: []string{"a-l4x1-use1a"}},
				{Kind: GPUNarrowLink, Hosts: []string{"h-eu-west-1b-01", "m-7"}}}
		})
		for i := 0; i < 200; i++ {
			var in, other Instance
			request(t, s, "POST", "/clouds/c1/v1/instances", s.APIKey("c1"), map[string]any{"offer_id": "a-l4x1-use1a", "name": "vm"}, &in)
			hits = append(hits, len(in.GPUFaults) == 1 && in.GPUFaults[0].Kind == GPUECC)
			request(t, s, "POST", "/clouds/c1/v1/instances", s.APIKey("c1"), map[string]any{"offer_id": "a-t4x1-euw1b", "name": "vm"}, &other)
			if !strings.HasPrefix(other.HostID, "h-eu-west-1b-0") {
				t.Fatalf("host %q", other.HostID)
			}
			if other.HostID == "h-eu-west-1b-01" {
				onHost++
			}
			if len(other.GPUFaults) == 1 {
				hostHits++
				if other.HostID != "h-eu-west-1b-01" {
					t.Errorf("host fault on %s", other.HostID)
				}
			}
		}
		var mi Instance
		request(t, s, "POST", "/clouds/c1/v1/instances", s.APIKey("c1"), map[string]any{"offer_id": "m7-h100x8", "name": "vm"}, &mi)
		if len(mi.GPUFaults) != 1 {
			t.Errorf("the m-7 machine's instance has faults %+v", mi.GPUFaults)
		}
		return hits, hostHits, onHost, mi.HostID
	}
	hits, hostHits, onHost, m7 := draw()
	again, _, _, _ := draw()
	n := 0
	for _, h := range hits {
		if h {
			n++
		}
	}
	if n < 80 || n > 120 || fmt.Sprint(hits) != fmt.Sprint(again) {
		t.Errorf("a rate 0.5 fault hit %d of 200, differently on a rerun: %v", n, fmt.Sprint(hits) != fmt.Sprint(again))
	}
	if hostHits != onHost || onHost < 20 || onHost > 80 || m7 != "m-7" {
		t.Errorf("host fault hit %d, instances on the host %d of 200; m7 offer's host %q", hostHits, onHost, m7)
	}
}
