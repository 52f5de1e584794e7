package sim_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/provider/sim"
	"github.com/org/gpuprov/provider/sim/simserver"
)

// h100OrA100 asks for an H100, else an A100-80GB, in that order.
func h100OrA100(name string) gpuprov.Request {
	return gpuprov.Request{Name: name, GPUs: []gpuprov.GPUChoice{{GPU: "h100"}, {GPU: "a100-80gb"}},
		GPUOrder: gpuprov.GPUOrderGiven, Timeout: time.Hour}
}

// attemptList is a VM's attempts as "offer error-kind", in order.
func attemptList(t *testing.T, j journal.Journal, vm string) []string {
	t.Helper()
	as, err := j.Attempts(context.Background(), vm)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, a := range as {
		out = append(out, a.OfferKey+" "+a.ErrorKind)
	}
	return out
}

// TestGPUAlternativesStockedOutH100GetsTheA100: a request for an H100 or
// an A100-80GB, with sim-a's on-demand H100 offers stocked out, gets the
// A100 in one Launch: both H100 offers are tried and stock out, then the
// A100 is ready; one instance runs, and once deleted nothing is left.
func TestGPUAlternativesStockedOutH100GetsTheA100(t *testing.T) {
	ctx := context.Background()
	e := newEngineEnv(t, simserver.Faults{StockoutOffers: []string{"a-h100x1-use1a", "a-h100x1-euw1b"}}, sim.Config{})
	vm, err := e.p.Launch(ctx, h100OrA100("train"))
	if err != nil {
		t.Fatal(err)
	}
	if vm.State != gpuprov.StateReady || vm.GPU != "A100-80GB" || vm.GPUCount != 1 || vm.InstanceType != "gpu.a100.1x" {
		t.Fatalf("got %s %s %s×%d, want ready on gpu.a100.1x A100-80GB×1", vm.State, vm.InstanceType, vm.GPU, vm.GPUCount)
	}
	want := []string{
		"sim-a|us-east|us-east-1a|gpu.h100.1x|od capacity",
		"sim-a|eu-west|eu-west-1b|gpu.h100.1x|od capacity",
		"sim-a|us-east|us-east-1b|gpu.a100.1x|od ",
	}
	if got := attemptList(t, e.j, "train"); !slices.Equal(got, want) {
		t.Errorf("attempts\n\t%q\nwant\n\t%q", got, want)
	}
	all, err := e.srv.Instances(cloudName)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 1 || all[0].ID != vm.InstanceID || all[0].OfferID != "a-a100x1-use1b" {
		t.Fatalf("the sim made %+v; want the one A100 instance %s", all, vm.InstanceID)
	}
	// Get and List report the model the VM runs, not the first asked for.
	got, err := e.p.Get(ctx, "train")
	if err != nil || got.GPU != "A100-80GB" {
		t.Errorf("Get: %v, GPU %q", err, got.GPU)
	}

	if err := e.p.Delete(ctx, "train"); err != nil {
		t.Fatal(err)
	}
	if live := e.live(t, "train"); len(live) != 0 {
		t.Fatalf("live after delete: %+v", live)
	}
	e.p.Close() // removes the shared firewall waiting out its grace
	res, err := e.srv.SideResources(cloudName)
	if err != nil || len(res.Firewalls)+len(res.SSHKeys) != 0 {
		t.Fatalf("side resources after delete: %+v %v", res, err)
	}
}

// TestGPUAlternativesAcceptTheModelLaunched: over real SSH against the
// sim's emulated GPUs, the acceptance phase of a VM that failed over from
// the H100 to the A100 checks for an A100-80GB, and accepts it.
func TestGPUAlternativesAcceptTheModelLaunched(t *testing.T) {
	ctx := context.Background()
	offers := []simserver.Offer{
		{ID: "h100", Region: "us-east", Zone: "us-east-1a", InstanceType: "h100.1", GPU: "H100-80GB", GPUCount: 1, GPUMemoryGB: 80,
			VCPUs: 26, MemoryGB: 200, PricePerHour: 2.49, Availability: "high"},
		{ID: "a100", Region: "us-east", Zone: "us-east-1a", InstanceType: "a100.1", GPU: "A100-80GB", GPUCount: 1, GPUMemoryGB: 80,
			VCPUs: 30, MemoryGB: 200, PricePerHour: 1.79, Availability: "high"},
	}
	e := newAcceptEnv(t, offers, nil)
	if err := e.srv.SetFaults(cloudName, simserver.Faults{StockoutOffers: []string{"h100"}}); err != nil {
		t.Fatal(err)
	}
	vm, err := e.p.Launch(ctx, h100OrA100("train"))
	if err != nil {
		t.Fatal(err)
	}
	if vm.GPU != "A100-80GB" {
		t.Fatalf("ready on %s, want the A100-80GB", vm.GPU)
	}
	if got := attemptList(t, e.j, "train"); len(got) != 2 || !strings.HasSuffix(got[0], "capacity") || !strings.HasSuffix(got[1], " ") {
		t.Errorf("attempts %q, want the H100 stocked out then the A100 ready", got)
	}
	evs, err := e.j.Events(ctx, journal.EventQuery{VM: "train"})
	if err != nil {
		t.Fatal(err)
	}
	var said []string
	for _, ev := range evs {
		if ev.Type == gpuprov.EvAccepted || ev.Type == gpuprov.EvRejected {
			said = append(said, ev.Type+": "+ev.Message)
		}
	}
	if len(said) != 1 || !strings.HasPrefix(said[0], "accepted: 1 GPU A100-80GB healthy") {
		t.Errorf("acceptance events %q, want the A100-80GB accepted", said)
	}
	if err := e.p.Delete(ctx, "train"); err != nil {
		t.Fatal(err)
	}
}
