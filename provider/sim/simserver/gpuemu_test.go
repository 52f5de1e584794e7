package simserver

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/org/gpuprov/gpu"
	"github.com/org/gpuprov/provider"
)

// gpuServer runs cloud c1 (catalog A) with SSH on a fake clock and the
// given GPU faults.
func gpuServer(t *testing.T, faults ...GPUFault) (*Server, func(offer string) Instance) {
	t.Helper()
	s, clk := start(t, func(o *Options) {
		o.DisableSSH = false
		o.StateDir = t.TempDir()
		o.Clouds[0].Faults.GPUFaults = faults
	})
	return s, func(offer string) Instance {
		t.Helper()
		var in Instance
		resp := request(t, s, "POST", "/clouds/c1/v1/instances", s.APIKey("c1"), map[string]any{"offer_id": offer, "name": "vm"}, &in)
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("create %s: %d", offer, resp.StatusCode)
		}
		clk.Advance(4 * time.Second)
		got, err := s.Instance("c1", in.ID)
		if err != nil || got.Status != StatusRunning {
			t.Fatalf("instance %+v, %v; want running", got, err)
		}
		return got
	}
}

// probeIn runs gpuprov's real acceptance probe in the instance's sandbox,
// as its SSH commands run (the sandbox's bin first on PATH), and parses it.
func probeIn(t *testing.T, s *Server, id string) *gpu.Probe {
	t.Helper()
	dir := s.SandboxDir("c1", id)
	cmd := exec.Command("sh", "-c", gpu.Script(gpu.ProbeOptions{Timeout: 5}))
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + filepath.Join(dir, "bin") + ":/usr/bin:/bin", "HOME=" + dir}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("probe: %v\n%s", err, out)
	}
	p, err := gpu.Parse(out)
	if err != nil {
		t.Fatalf("parse: %v\n%s", err, out)
	}
	return p
}

// TestEmulatedGPUsAnswerTheProbe: a healthy 8×H100 and 1×L4 answer the
// real probe as real machines do, and pass acceptance; a CPU instance's
// sandbox has no nvidia-smi.
func TestEmulatedGPUsAnswerTheProbe(t *testing.T) {
	s, create := gpuServer(t)
	for _, tc := range []struct {
		offer, model string
		n            int
		switches     int
		fabric       string
	}{
		{"a-h100x8-use1a", "H100-80GB", 8, 4, "Completed"},
		{"a-l4x1-use1a", "L4", 1, 0, "N/A"},
	} {
		in := create(tc.offer)
		p := probeIn(t, s, in.ID)
		if len(p.GPUs) != tc.n || p.NVSwitches() != tc.switches || p.CUDA != "13.0" || p.Driver != "580.159.04" || !p.XidRead || !p.BusRead {
			t.Fatalf("%s: probe %+v", tc.offer, p)
		}
		if f := p.Fabric[p.GPUs[0].BusID]; f.State != tc.fabric {
			t.Errorf("%s: fabric %+v", tc.offer, f)
		}
		r := gpu.Check(p, gpu.Expect{Model: tc.model, Count: tc.n}, gpu.Options{})
		if !r.OK || len(r.Findings) != 0 {
			t.Errorf("%s: %s %+v", tc.offer, r.Summary, r.Findings)
		}
		if in.HostID == "" || !strings.HasPrefix(in.HostID, "h-us-east-1a-") {
			t.Errorf("%s: host %q", tc.offer, in.HostID)
		}
	}
	// nvidia-smi -L as k3s reads it, and the driver's own refusal of an
	// unknown field (the real text, gpu/testdata/h200/err_bad_field).
	in := create("a-l4x1-use1a")
	bin := filepath.Join(s.SandboxDir("c1", in.ID), "bin")
	out, _ := exec.Command(filepath.Join(bin, "nvidia-smi"), "-L").Output()
	if !strings.HasPrefix(string(out), "GPU 0: NVIDIA L4 (UUID: GPU-") {
		t.Errorf("nvidia-smi -L: %q", out)
	}
	cmd := exec.Command(filepath.Join(bin, "nvidia-smi"), "--query-gpu=index,no_such_field", "--format=csv,noheader")
	out, err := cmd.CombinedOutput()
	want, _ := os.ReadFile("../../../gpu/testdata/h200/err_bad_field.stdout")
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || string(out) != string(want) {
		t.Errorf("unknown field: %v %q, want exit 2 %q", err, out, want)
	}
}

// TestGPUFaultsShow: each fault kind shows in the tools as the check that
// catches it expects; a fault on a host hits only that host's instances.
func TestGPUFaultsShow(t *testing.T) {
	for _, tc := range []struct {
		kind  string
		xid   int
		offer string
		n     int
		fail  string
	}{
		{GPUMissing, 0, "a-h100x8-use1a", 8, "count"},
		{GPUNoDriver, 0, "a-h100x8-use1a", 8, "driver"},
		{GPUECC, 0, "a-h100x8-use1a", 8, "ecc"},
		{GPURetired, 0, "a-h100x8-use1a", 8, "retirement"},
		{GPURemapFailure, 0, "a-h100x8-use1a", 8, "retirement"},
		{GPUXid, 95, "a-h100x8-use1a", 8, "xid"},
		{GPUFallenOff, 0, "a-h100x8-use1a", 8, "driver"},
		{GPUWrongModel, 0, "a-h100x8-use1a", 8, "model"},
		{GPUFabricDown, 0, "a-h100x8-use1a", 8, "fabric"},
		{GPUNarrowLink, 0, "a-l4x1-use1a", 1, "link"},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			s, create := gpuServer(t, GPUFault{Kind: tc.kind, Xid: tc.xid, Offers: []string{tc.offer}})
			in := create(tc.offer)
			if len(in.GPUFaults) != 1 || in.GPUFaults[0].Kind != tc.kind {
				t.Fatalf("faults %+v", in.GPUFaults)
			}
			model := map[string]string{"a-h100x8-use1a": "H100-80GB", "a-l4x1-use1a": "L4"}[tc.offer]
			r := gpu.Check(probeIn(t, s, in.ID), gpu.Expect{Model: model, Count: tc.n}, gpu.Options{})
			var failed []string
			for _, f := range r.Findings {
				if f.Severity == provider.Critical {
					failed = append(failed, f.Check)
				}
			}
			if r.OK || !slices.Contains(failed, tc.fail) {
				t.Errorf("failed %v (%s), want %s", failed, r.Summary, tc.fail)
			}
		})
	}
	t.Run("thermal warns", func(t *testing.T) {
		s, create := gpuServer(t, GPUFault{Kind: GPUThermal})
		in := create("a-l4x1-use1a")
		r := gpu.Check(probeIn(t, s, in.ID), gpu.Expect{Model: "L4", Count: 1}, gpu.Options{})
		if !r.OK || len(r.Findings) != 2 {
			t.Errorf("%s %+v; want ok with a throttle and a temperature warning", r.Summary, r.Findings)
		}
	})
	t.Run("missing on 8: 7 of 8", func(t *testing.T) {
		s, create := gpuServer(t, GPUFault{Kind: GPUMissing})
		in := create("a-h100x8-use1a")
		r := gpu.Check(probeIn(t, s, in.ID), gpu.Expect{Model: "H100-80GB", Count: 8}, gpu.Options{})
		if r.Summary != "7 of 8 GPUs visible; missing 0000:db:00.0" {
			t.Errorf("summary %q", r.Summary)
		}
	})
}

// TestGPUFaultRateAndHosts: a fault with a rate hits about that share of
// new instances (seeded: the same run gives the same count); one on a host
// hits only instances on that host.
func TestGPUFaultRateAndHosts(t *testing.T) {
	s, clk := start(t, func(o *Options) {
		o.Clouds[0].Faults.GPUFaults = []GPUFault{{Kind: GPUECC, Rate: 0.5, Offers: []string{"a-l4x1-use1a"}},
			{Kind: GPUNarrowLink, Hosts: []string{"h-eu-west-1b-01"}}}
	})
	_ = clk
	hit, hostHits, onHost := 0, 0, 0
	for i := 0; i < 200; i++ {
		var in Instance
		request(t, s, "POST", "/clouds/c1/v1/instances", s.APIKey("c1"), map[string]any{"offer_id": "a-l4x1-use1a", "name": "vm"}, &in)
		if len(in.GPUFaults) > 0 {
			hit++
		}
		var other Instance
		request(t, s, "POST", "/clouds/c1/v1/instances", s.APIKey("c1"), map[string]any{"offer_id": "a-t4x1-euw1b", "name": "vm"}, &other)
		if other.HostID == "h-eu-west-1b-01" {
			onHost++
		}
		if len(other.GPUFaults) == 1 && other.GPUFaults[0].Kind == GPUNarrowLink {
			hostHits++
			if other.HostID != "h-eu-west-1b-01" {
				t.Errorf("host fault on %s", other.HostID)
			}
		}
	}
	if hit < 80 || hit > 120 {
		t.Errorf("a rate 0.5 fault hit %d of 200", hit)
	}
	if hostHits != onHost || onHost == 0 || onHost == 200 {
		t.Errorf("host fault hit %d, instances on the host %d of 200", hostHits, onHost)
	}
}

// TestInjectGPUFaultOnARunningInstance: an Xid 79 injected after boot
// shows in the kernel log from then on, and survives a restart from the
// state file.
func TestInjectGPUFaultOnARunningInstance(t *testing.T) {
	s, create := gpuServer(t)
	in := create("a-h100x8-use1a")
	base := gpu.Check(probeIn(t, s, in.ID), gpu.Expect{Model: "H100-80GB", Count: 8}, gpu.Options{}).Baseline
	if err := s.InjectGPUFault("c1", in.ID, GPUFault{Kind: GPUXid, Xid: 79}); err != nil {
		t.Fatal(err)
	}
	if err := s.InjectGPUFault("c1", in.ID, GPUFault{Kind: "melted"}); err == nil {
		t.Error("an unknown kind was injected")
	}
	fs := gpu.Health(probeIn(t, s, in.ID), base, gpu.Options{})
	if len(fs) != 1 || fs[0].Code != "gpu-xid-79" || fs[0].Severity != provider.Critical {
		t.Errorf("health after an Xid 79: %+v", fs)
	}
	got, _ := s.Instance("c1", in.ID)
	if len(got.GPUFaults) != 1 {
		t.Errorf("instance faults %+v", got.GPUFaults)
	}
}
