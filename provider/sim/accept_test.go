package sim_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/gpu"
	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/journal/sqlite"
	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/sim"
	"github.com/org/gpuprov/provider/sim/simserver"
	"github.com/org/gpuprov/ssh"
)

// acceptEnv is a Provisioner with real SSH on a real-clock sim whose
// calls and boots are instant: the acceptance phase runs the real probe
// over SSH against the sim's emulated GPUs.
type acceptEnv struct {
	srv *simserver.Server
	j   *sqlite.DB
	p   *gpuprov.Provisioner
	evs chan gpuprov.Event
}

// hgxOffers are three 8×H100 offers, each one machine (a marketplace's
// listing), cheapest first.
func hgxOffers() []simserver.Offer {
	mk := func(id, host string, price float64) simserver.Offer {
		return simserver.Offer{ID: id, Region: "us-east", Zone: "us-east-1a", InstanceType: "hgx." + host, GPU: "H100-80GB",
			GPUCount: 8, GPUMemoryGB: 80, VCPUs: 208, MemoryGB: 1800, PricePerHour: price, Availability: "high", Host: host}
	}
	return []simserver.Offer{mk("hgx-a", "m-1001", 18.00), mk("hgx-b", "m-1002", 19.00), mk("hgx-c", "m-1003", 20.00)}
}

func newAcceptEnv(t testing.TB, offers []simserver.Offer, faults []simserver.GPUFault, opts ...gpuprov.Option) *acceptEnv {
	t.Helper()
	srv, db, cp := newRealSim(t, offers, simserver.Faults{GPUFaults: faults})
	key, err := ssh.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	e := &acceptEnv{srv: srv, j: db, evs: make(chan gpuprov.Event, 1000)}
	e.p, err = gpuprov.New(db, append([]gpuprov.Option{gpuprov.WithProvider(cp), gpuprov.WithSSHKey(key.Signer),
		gpuprov.WithSSH("root", nil, true), gpuprov.WithBackoff(20*time.Millisecond, 200*time.Millisecond, 1),
		gpuprov.WithEvents(func(ev gpuprov.Event) {
			select {
			case e.evs <- ev:
			default:
			}
		})}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.p.Close() })
	return e
}

// newRealSim starts sim-a with offers and faults on the real clock, its
// calls and boots instant and its instances reachable over SSH, and opens
// a journal and an adapter for it with short polls.
func newRealSim(t testing.TB, offers []simserver.Offer, faults simserver.Faults) (*simserver.Server, *sqlite.DB, *sim.Provider) {
	t.Helper()
	srv := simserver.NewServer(t, simserver.WithOptions(simserver.Options{StateDir: t.TempDir(),
		Clouds: []simserver.CloudConfig{{Name: cloudName, Offers: offers, Faults: faults}}}),
		simserver.WithTiming(simserver.Timing{}))
	db, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "journal.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	cp, err := sim.New(sim.Config{Endpoint: srv.URL(), Cloud: cloudName, APIKey: srv.APIKey(cloudName),
		PollInterval: 20 * time.Millisecond, ConsistencyWindow: 200 * time.Millisecond, RequestTimeout: 5 * time.Second,
		BootTimeout: 20 * time.Second, DeleteTimeout: 20 * time.Second},
		sim.WithName(cloudName), sim.WithInstallation(db.Installation()))
	if err != nil {
		t.Fatal(err)
	}
	return srv, db, cp
}

func (e *acceptEnv) creates(t *testing.T, offer string) int {
	t.Helper()
	ins, err := e.srv.Instances(cloudName)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, in := range ins {
		if in.OfferID == offer {
			n++
		}
	}
	return n
}

func hgxRequest(name string) gpuprov.Request {
	return gpuprov.Request{Name: name, GPU: "H100-80GB", GPUCount: 8, Timeout: time.Minute}
}

// TestAcceptanceRefusesAndRemembersABadMachine: the cheapest machine shows
// 7 of 8 GPUs; it is torn down, its host blocked, and the VM is ready on
// the next machine with 8 healthy GPUs; the findings are on the attempts
// and in the events; a second launch does not try the bad host again; the
// history counts one acceptance failure and two ready launches.
func TestAcceptanceRefusesAndRemembersABadMachine(t *testing.T) {
	ctx := context.Background()
	e := newAcceptEnv(t, hgxOffers(), []simserver.GPUFault{{Kind: simserver.GPUMissing, Hosts: []string{"m-1001"}}})
	vm, err := e.p.Launch(ctx, hgxRequest("train"))
	if err != nil {
		t.Fatal(err)
	}
	if vm.InstanceType != "hgx.m-1002" {
		t.Fatalf("ready on %s, want the next machine hgx.m-1002", vm.InstanceType)
	}
	as, err := e.j.Attempts(ctx, "train")
	if err != nil || len(as) != 2 {
		t.Fatalf("attempts %+v, %v", as, err)
	}
	var bad, good gpu.Report
	if err := json.Unmarshal(as[0].Acceptance, &bad); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(as[1].Acceptance, &good); err != nil {
		t.Fatal(err)
	}
	if as[0].Host != "m-1001" || as[0].ErrorKind != gpuprov.KindAccept || bad.OK ||
		bad.Summary != "7 of 8 GPUs visible; missing 0000:db:00.0" || len(bad.GPUs) != 7 || bad.GPUs[0].UUID == "" {
		t.Errorf("the bad attempt: host %q kind %q report %+v", as[0].Host, as[0].ErrorKind, bad)
	}
	if as[1].Host != "m-1002" || !good.OK || len(good.GPUs) != 8 || !strings.HasPrefix(good.Summary, "8 GPUs H100-80GB healthy") {
		t.Errorf("the good attempt: host %q report %+v", as[1].Host, good)
	}
	if st := as[0].State; st != journal.AttemptTornDown {
		t.Errorf("the bad attempt is %s, want torn down", st)
	}
	blocks, err := e.j.Blocks(ctx, time.Now())
	if err != nil || len(blocks) != 1 || blocks[0].Key != "host:"+cloudName+"|m-1001" || blocks[0].ErrorKind != gpuprov.KindAccept ||
		blocks[0].Until.Sub(blocks[0].CreatedAt) != gpuprov.DefaultAcceptanceHostBlock {
		t.Errorf("blocks %+v, %v; want the host m-1001 for %v", blocks, err, gpuprov.DefaultAcceptanceHostBlock)
	}
	evs, err := e.j.Events(ctx, journal.EventQuery{VM: "train"})
	if err != nil {
		t.Fatal(err)
	}
	var said []string
	for _, ev := range evs {
		if ev.Type == gpuprov.EvRejected || ev.Type == gpuprov.EvAccepted {
			said = append(said, ev.Type+": "+ev.Message)
		}
	}
	if len(said) != 2 || said[0] != "rejected: 7 of 8 GPUs visible; missing 0000:db:00.0" || !strings.HasPrefix(said[1], "accepted: 8 GPUs H100-80GB healthy (driver 580.159.04, CUDA 13.0)") {
		t.Errorf("events %q", said)
	}

	if _, err := e.p.Launch(ctx, hgxRequest("train-2")); err != nil {
		t.Fatal(err)
	}
	if n := e.creates(t, "hgx-a"); n != 1 {
		t.Errorf("%d creates on the blocked host's offer, want the first launch's one", n)
	}
	stats, err := e.j.OfferStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	a, b := stats[cloudName+"|us-east|us-east-1a|hgx.m-1001|od"], stats[cloudName+"|us-east|us-east-1a|hgx.m-1002|od"]
	if a.Created != 1 || a.AcceptanceFailed != 1 || a.Ready != 0 || a.Wasted <= 0 || b.Created != 2 || b.Ready != 2 || b.ReadyP50 <= 0 {
		t.Errorf("history: bad host %+v, good host %+v", a, b)
	}
	ins, _ := e.srv.Instances(cloudName)
	for _, in := range ins {
		if in.OfferID == "hgx-a" && in.Status != simserver.StatusTerminated && in.Status != simserver.StatusStopping {
			t.Errorf("the refused machine %s is %s", in.ID, in.Status)
		}
	}
}

// TestAcceptanceOptOutAndOfferBlock: a request that skips acceptance is
// ready on the bad machine; a machine of an offer without a host is
// blocked as its offer, for a short while.
func TestAcceptanceOptOutAndOfferBlock(t *testing.T) {
	ctx := context.Background()
	offers := hgxOffers()
	for i := range offers {
		offers[i].Host = ""
	}
	e := newAcceptEnv(t, offers, []simserver.GPUFault{{Kind: simserver.GPUECC, Offers: []string{"hgx-a"}}})
	req := hgxRequest("skip")
	req.Acceptance.Skip = true
	vm, err := e.p.Launch(ctx, req)
	if err != nil || vm.InstanceType != "hgx.m-1001" {
		t.Fatalf("skipping acceptance: %v on %+v", err, vm)
	}
	vm, err = e.p.Launch(ctx, hgxRequest("check"))
	if err != nil || vm.InstanceType != "hgx.m-1002" {
		t.Fatalf("with acceptance: %v on %+v", err, vm)
	}
	blocks, _ := e.j.Blocks(ctx, time.Now())
	if len(blocks) != 1 || blocks[0].Key != "offer:"+cloudName+"|us-east|us-east-1a|hgx.m-1001|od" ||
		blocks[0].Until.Sub(blocks[0].CreatedAt) != gpuprov.DefaultAcceptanceOfferBlock {
		t.Errorf("blocks %+v", blocks)
	}
}

// TestHealthGPUSeesAnXidAfterReady: a ready machine is healthy by its GPUs;
// once it logs an Xid 79, Health with HealthGPU says unhealthy with the
// finding, and a check after that does not report the same Xid again.
func TestHealthGPUSeesAnXidAfterReady(t *testing.T) {
	ctx := context.Background()
	e := newAcceptEnv(t, hgxOffers(), nil)
	vm, err := e.p.Launch(ctx, hgxRequest("job"))
	if err != nil {
		t.Fatal(err)
	}
	d, err := e.p.Health(ctx, "job", gpuprov.HealthGPU())
	if err != nil || d.Verdict() != provider.Healthy {
		t.Fatalf("before: %v %+v", err, d)
	}
	if err := e.srv.InjectGPUFault(cloudName, vm.InstanceID, simserver.GPUFault{Kind: simserver.GPUXid, Xid: 79}); err != nil {
		t.Fatal(err)
	}
	d, err = e.p.Health(ctx, "job", gpuprov.HealthGPU())
	if err != nil || d.Verdict() != provider.Unhealthy || !slices.ContainsFunc(d.Findings, func(f provider.Finding) bool {
		return f.Code == "gpu-xid-79" && f.Severity == provider.Critical && strings.Contains(f.Message, "fallen off the bus")
	}) {
		t.Fatalf("after an Xid 79: %v %+v", err, d)
	}
	if d, _ = e.p.Health(ctx, "job"); d.Verdict() != provider.Healthy {
		t.Errorf("without HealthGPU the cloud's view alone: %+v", d)
	}
	if d, _ = e.p.Health(ctx, "job", gpuprov.HealthGPU()); d.Verdict() != provider.Healthy {
		t.Errorf("the same Xid reported twice: %+v", d)
	}
}

// BenchmarkAcceptPhase measures what the acceptance phase adds to a launch
// on the sim: the phase's time (phase accept → accepted, from the journal's
// events) per launch of an 8-GPU machine, against one SSH round trip on an
// open connection (`true`, timed on a ready machine) and the probe's own
// run there. The phase is one SSH command on the connection connect
// opened: it costs one round trip plus the probe's run time.
//
//	go test ./provider/sim -run '^$' -bench AcceptPhase -benchtime 20x
func BenchmarkAcceptPhase(b *testing.B) {
	ctx := context.Background()
	e := newAcceptEnv(b, hgxOffers(), nil)
	var phase, rtt, probe time.Duration
	for i := range b.N {
		name := fmt.Sprintf("bench-%d", i)
		if _, err := e.p.Launch(ctx, hgxRequest(name)); err != nil {
			b.Fatal(err)
		}
		evs, err := e.j.Events(ctx, journal.EventQuery{VM: name})
		if err != nil {
			b.Fatal(err)
		}
		var start time.Time
		for _, ev := range evs {
			switch {
			case ev.Type == gpuprov.EvPhase && ev.Message == gpuprov.PhaseAccept:
				start = ev.Time
			case ev.Type == gpuprov.EvAccepted:
				phase += ev.Time.Sub(start)
			}
		}
		c, err := e.p.SSH(ctx, name)
		if err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		if _, err := c.Run(ctx, "true"); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if _, err := c.Run(ctx, gpu.Script(gpu.ProbeOptions{})); err != nil {
			b.Fatal(err)
		}
		rtt, probe = rtt+t1.Sub(t0), probe+time.Since(t1)
		c.Close()
		if err := e.p.Delete(ctx, name); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(phase.Microseconds())/1000/float64(b.N), "accept-ms/launch")
	b.ReportMetric(float64(rtt.Microseconds())/1000/float64(b.N), "ssh-rtt-ms")
	b.ReportMetric(float64(probe.Microseconds())/1000/float64(b.N), "probe-run-ms")
}
