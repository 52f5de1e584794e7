package sim_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/journal/journaltest"
	"github.com/org/gpuprov/journal/sqlite"
	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/sim"
	"github.com/org/gpuprov/provider/sim/simserver"
	"github.com/org/gpuprov/ssh"
	gossh "golang.org/x/crypto/ssh"
)

// spotOffers: two spot H100 offers in two zones, and the on-demand one.
func spotOffers() []simserver.Offer {
	mk := func(id, zone string, price float64, spot bool) simserver.Offer {
		return simserver.Offer{ID: id, Region: "us-east", Zone: zone, InstanceType: "gpu.h100", GPU: "H100-80GB",
			GPUCount: 1, GPUMemoryGB: 80, VCPUs: 26, MemoryGB: 200, PricePerHour: price, Spot: spot, Availability: "high"}
	}
	return []simserver.Offer{mk("spot-a", "us-east-1a", 1.00, true), mk("spot-b", "us-east-1b", 1.20, true),
		mk("od-a", "us-east-1a", 3.00, false)}
}

// spotEnv is a real-clock sim whose calls and boots are instant, with real
// SSH to its instances, and a journal that processes open Provisioners on.
type spotEnv struct {
	srv *simserver.Server
	j   *sqlite.DB
	key gossh.Signer
	cp  *sim.Provider
}

func newSpotEnv(t *testing.T) *spotEnv {
	t.Helper()
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl is not installed: the instances read their metadata endpoint with it (scripts/test.sh installs it)")
	}
	srv, db, cp := newRealSim(t, spotOffers(), simserver.Faults{})
	key, err := ssh.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	return &spotEnv{srv: srv, j: db, key: key.Signer, cp: cp}
}

// process opens a Provisioner on the journal, as another process would:
// its own owner, the same client key.
func (e *spotEnv) process(t *testing.T, opts ...gpuprov.Option) *gpuprov.Provisioner {
	t.Helper()
	p, err := gpuprov.New(e.j, append([]gpuprov.Option{gpuprov.WithProvider(e.cp), gpuprov.WithSSHKey(e.key),
		gpuprov.WithSSH("root", nil, true), gpuprov.WithBackoff(20*time.Millisecond, 200*time.Millisecond, 1)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// launchAndLeave launches req in a process that then closes: nothing of
// the launcher runs when the interruption comes.
func (e *spotEnv) launchAndLeave(t *testing.T, req gpuprov.Request) *gpuprov.VM {
	t.Helper()
	launcher := e.process(t)
	vm, err := launcher.Launch(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if err := launcher.Close(); err != nil {
		t.Fatal(err)
	}
	return vm
}

// readyOnAnother waits (bounded) until VM name is ready on an instance
// other than old, and returns it.
func (e *spotEnv) readyOnAnother(t *testing.T, p *gpuprov.Provisioner, name, old string) *gpuprov.VM {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		v, err := p.Get(context.Background(), name)
		if err != nil {
			t.Fatal(err)
		}
		if v.State == gpuprov.StateReady && v.InstanceID != old {
			return v
		}
		if v.State.Terminal() {
			t.Fatalf("VM %s ended %s: %s", name, v.State, v.LastError)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("VM %s was not ready on a new instance in time", name)
	return nil
}

// instance returns the sim's record of instance id.
func (e *spotEnv) instance(t *testing.T, id string) simserver.Instance {
	t.Helper()
	in, err := e.srv.Instance(cloudName, id)
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// live returns the sim's instances of vm that are not terminated.
func (e *spotEnv) live(t *testing.T, vm string) []simserver.Instance { return liveOf(t, e.srv, vm) }

// preemptions is the number of preemptions the offer history counts.
func (e *spotEnv) preemptions(t *testing.T) int64 {
	t.Helper()
	stats, err := e.j.OfferStats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, s := range stats {
		n += s.Preempted
	}
	return n
}

// events returns the journal's events of vm of type typ.
func (e *spotEnv) events(t *testing.T, vm, typ string) []journal.Event {
	t.Helper()
	evs, err := e.j.Events(context.Background(), journal.EventQuery{VM: vm})
	if err != nil {
		t.Fatal(err)
	}
	var out []journal.Event
	for _, ev := range evs {
		if ev.Type == typ {
			out = append(out, ev)
		}
	}
	return out
}

// hookCall is what the interruption hook saw.
type hookCall struct {
	in       gpuprov.Interruption
	ckptErr  error
	deadline time.Time
}

// The acceptance of spot done right: a ready spot VM, whose launcher has
// gone, gets a 30 s notice; a reaper in another process hears it over SSH
// from the machine's metadata endpoint, runs the hook with ~30 s left
// (which checkpoints on the machine), and replaces the VM on another offer
// before the reclaim; the interrupted machine is gone, nothing leaks.
func TestInterruptionNoticeReplacesBeforeTheReclaim(t *testing.T) {
	e := newSpotEnv(t)
	vm := e.launchAndLeave(t, gpuprov.Request{Name: "train", GPU: "H100-80GB", Spot: provider.SpotOnly,
		OnInterruption: gpuprov.ReplaceWhenReady, Timeout: time.Minute, TTL: time.Hour})
	first := e.instance(t, vm.InstanceID)
	if first.OfferID != "spot-a" {
		t.Fatalf("launched on %s, want the cheapest spot offer spot-a", first.OfferID)
	}

	calls := make(chan hookCall, 4)
	reaper := e.process(t, gpuprov.WithReaper(50*time.Millisecond), gpuprov.WithNoticePoll(100*time.Millisecond),
		gpuprov.WithInterruptionHandler(func(ctx context.Context, in gpuprov.Interruption) {
			c := hookCall{in: in}
			c.deadline, _ = ctx.Deadline()
			if in.SSH == nil {
				c.ckptErr = context.Canceled
			} else {
				_, c.ckptErr = in.SSH.Run(ctx, "echo step-1200 > checkpoint")
			}
			calls <- c
		}))
	if err := e.srv.PreemptIn(cloudName, vm.InstanceID, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	reclaimAt := e.instance(t, vm.InstanceID).Events[len(e.instance(t, vm.InstanceID).Events)-1].At.Add(30 * time.Second)

	var c hookCall
	select {
	case c = <-calls:
	case <-time.After(20 * time.Second):
		t.Fatal("the hook was not called")
	}
	t.Logf("hook called with %v left (reclaim at %v)", c.in.Left, reclaimAt)
	if c.in.Left < 25*time.Second || c.in.Left > 30*time.Second {
		t.Errorf("hook called with %v left, want about 30s", c.in.Left)
	}
	if !c.in.Heard || c.in.Notice.Kind != provider.NoticePreempt || !c.in.Replacing || c.in.InstanceID != vm.InstanceID {
		t.Errorf("hook told %+v", c.in)
	}
	if c.deadline.IsZero() || c.deadline.Sub(reclaimAt).Abs() > time.Second {
		t.Errorf("hook's context ends at %v, want the reclaim at %v", c.deadline, reclaimAt)
	}
	if c.ckptErr != nil {
		t.Errorf("checkpoint over the hook's SSH: %v", c.ckptErr)
	}

	got := e.readyOnAnother(t, reaper, "train", vm.InstanceID)
	repl := e.instance(t, got.InstanceID)
	if repl.OfferID == "spot-a" || !repl.Spot {
		t.Errorf("replacement on %s (spot %v), want another spot offer", repl.OfferID, repl.Spot)
	}
	if got.ReadyAt.After(reclaimAt) {
		t.Errorf("replacement ready at %v, after the reclaim at %v", got.ReadyAt, reclaimAt)
	}
	old := e.instance(t, vm.InstanceID)
	if old.Status != simserver.StatusTerminated || old.TerminatedAt.After(reclaimAt) {
		t.Errorf("interrupted instance %s, terminated at %v; want deleted before the reclaim at %v", old.Status, old.TerminatedAt, reclaimAt)
	}
	if slices.ContainsFunc(old.Events, func(ev simserver.Event) bool { return ev.Type == simserver.EventPreempted }) {
		t.Error("the cloud reclaimed the machine before gpuprov deleted it")
	}
	if d := got.ExpiresAt.Sub(vm.ReadyAt.Add(time.Hour)); d.Abs() > time.Millisecond {
		t.Errorf("replacement expires at %v, want the TTL counted from the first ready: %v", got.ExpiresAt, vm.ReadyAt.Add(time.Hour))
	}
	if live := e.live(t, "train"); len(live) != 1 || live[0].ID != got.InstanceID {
		t.Errorf("live instances of train: %+v, want only the replacement", live)
	}
	if len(got.Interruptions) != 1 || got.Interruptions[0].InstanceID != vm.InstanceID || !got.Interruptions[0].Notice ||
		got.Interruptions[0].Replace != gpuprov.ReplaceWhenReady {
		t.Errorf("VM's interruptions: %+v", got.Interruptions)
	}
	for _, typ := range []string{gpuprov.EvInterruption, gpuprov.EvReplacing, gpuprov.EvRetired} {
		if evs := e.events(t, "train", typ); len(evs) != 1 || evs[0].Owner != reaper.Owner() {
			t.Errorf("%d %s events (%+v), want one by the reaper", len(evs), typ, evs)
		}
	}
	if n := e.preemptions(t); n != 1 {
		t.Errorf("the offer history counts %d preemptions, want 1", n)
	}
	logStory(t, e.j, "train")
}

// logStory logs vm's events (go test -v shows the story).
func logStory(t *testing.T, j journal.Journal, vm string) {
	t.Helper()
	evs, err := j.Events(context.Background(), journal.EventQuery{VM: vm})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		t.Logf("%s #%d %-13s %s %s", ev.Time.Format("15:04:05.000"), ev.Attempt, ev.Type, ev.InstanceID, ev.Message)
	}
}

// A spot VM that asks for spot or on-demand ("any") is replaced on
// on-demand when no spot offer is left (the interrupted one blocked, the
// other stocked out), and its attempt says so.
func TestInterruptionReplacementGoesOnDemandWhenSpotIsOut(t *testing.T) {
	e := newSpotEnv(t)
	vm := e.launchAndLeave(t, gpuprov.Request{Name: "any-1", GPU: "H100-80GB", Spot: provider.SpotOrOnDemand,
		OnInterruption: gpuprov.ReplaceWhenReady, Timeout: time.Minute})
	if err := e.srv.SetFaults(cloudName, simserver.Faults{StockoutOffers: []string{"spot-b"}}); err != nil {
		t.Fatal(err)
	}
	reaper := e.process(t, gpuprov.WithReaper(50*time.Millisecond), gpuprov.WithNoticePoll(100*time.Millisecond))
	if err := e.srv.PreemptIn(cloudName, vm.InstanceID, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	got := e.readyOnAnother(t, reaper, "any-1", vm.InstanceID)
	if in := e.instance(t, got.InstanceID); in.OfferID != "od-a" || in.Spot {
		t.Errorf("replacement on %s (spot %v), want on-demand od-a", in.OfferID, in.Spot)
	}
	var said bool
	for _, ev := range e.events(t, "any-1", gpuprov.EvAttempt) {
		said = said || strings.Contains(ev.Message, "on-demand: replaces interrupted spot instance "+vm.InstanceID)
	}
	if !said {
		logStory(t, e.j, "any-1")
		t.Error("no attempt says the replacement went on-demand")
	}
	if live := e.live(t, "any-1"); len(live) != 1 {
		logStory(t, e.j, "any-1")
		t.Errorf("live instances: %+v, want the replacement only", live)
	}
}

// A preemption that came without a notice (the instance reclaimed at
// once) is seen by the reaper's watch when the machine stops answering,
// through the cloud's own diagnosis, and replaced the same way.
func TestPreemptionWithoutNoticeIsReplacedFromObserve(t *testing.T) {
	e := newSpotEnv(t)
	vm := e.launchAndLeave(t, gpuprov.Request{Name: "cold", GPU: "H100-80GB", Spot: provider.SpotOnly,
		OnInterruption: gpuprov.ReplaceWhenReady, Timeout: time.Minute})
	calls := make(chan gpuprov.Interruption, 4)
	reaper := e.process(t, gpuprov.WithReaper(50*time.Millisecond), gpuprov.WithNoticePoll(100*time.Millisecond),
		gpuprov.WithInterruptionHandler(func(_ context.Context, in gpuprov.Interruption) { calls <- in }))
	if err := e.srv.Preempt(cloudName, vm.InstanceID); err != nil {
		t.Fatal(err)
	}
	got := e.readyOnAnother(t, reaper, "cold", vm.InstanceID)
	select {
	case in := <-calls:
		if in.Heard || in.SSH != nil || in.Left != 0 || !in.Replacing {
			t.Errorf("hook told %+v, want a reclaim found (not heard), no SSH, nothing left, replacing", in)
		}
	default:
		t.Error("the hook was not called")
	}
	if len(got.Interruptions) != 1 || got.Interruptions[0].Notice {
		t.Errorf("interruptions %+v, want one found without a notice", got.Interruptions)
	}
	if live := e.live(t, "cold"); len(live) != 1 || live[0].ID != got.InstanceID {
		t.Errorf("live instances: %+v, want the replacement only", live)
	}
	// Health counted the preemption once; the interruption adds nothing.
	if n := e.preemptions(t); n != 1 {
		t.Errorf("the offer history counts %d preemptions, want 1", n)
	}
}

// Without OnInterruption a notice is an event and a hook call, nothing
// more: the VM stays ready on its machine until the cloud takes it.
func TestInterruptionNoticeWithoutReplacement(t *testing.T) {
	e := newSpotEnv(t)
	vm := e.launchAndLeave(t, gpuprov.Request{Name: "note", GPU: "H100-80GB", Spot: provider.SpotOnly, Timeout: time.Minute})
	calls := make(chan gpuprov.Interruption, 4)
	reaper := e.process(t, gpuprov.WithReaper(50*time.Millisecond), gpuprov.WithNoticePoll(100*time.Millisecond),
		gpuprov.WithInterruptionHandler(func(_ context.Context, in gpuprov.Interruption) { calls <- in }))
	if err := e.srv.PreemptIn(cloudName, vm.InstanceID, time.Minute); err != nil {
		t.Fatal(err)
	}
	select {
	case in := <-calls:
		if in.Replacing || !in.Heard || in.Left < 50*time.Second {
			t.Errorf("hook told %+v", in)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the hook was not called")
	}
	v, err := reaper.Get(context.Background(), "note")
	if err != nil {
		t.Fatal(err)
	}
	if v.State != gpuprov.StateReady || v.InstanceID != vm.InstanceID || len(v.Interruptions) != 1 || v.Owner != "" {
		t.Errorf("after the notice: %s on %s, interruptions %+v, lease %q; want ready on %s, one interruption, no lease",
			v.State, v.InstanceID, v.Interruptions, v.Owner, vm.InstanceID)
	}
	if n := len(e.events(t, "note", gpuprov.EvReplacing)); n != 0 {
		t.Errorf("%d replacing events, want none", n)
	}
}

// deadOwner is a lease owner on this host whose process is gone, so that
// a Recover takes its VMs over at once.
func deadOwner(t *testing.T) string {
	t.Helper()
	host, _ := os.Hostname()
	for pid := 4_000_000; pid > 100_000; pid -= 7919 {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); os.IsNotExist(err) {
			return fmt.Sprintf("%s/%d/1/dead", host, pid)
		}
	}
	t.Skip("no free pid to stand for a dead process")
	return ""
}

// A reaper that dies at any journaled step of a replacement leaves nothing
// behind: another process's Recover finishes the replacement, the
// interrupted machine is deleted, one machine runs.
func TestInterruptionReplacementSurvivesACrash(t *testing.T) {
	for _, at := range []struct{ ev string }{{gpuprov.EvReplacing}, {gpuprov.EvCreateSent}, {gpuprov.EvAccepted}, {gpuprov.EvTeardown}} {
		t.Run(at.ev, func(t *testing.T) {
			e := newSpotEnv(t)
			vm := e.launchAndLeave(t, gpuprov.Request{Name: "crash", GPU: "H100-80GB", Spot: provider.SpotOnly,
				OnInterruption: gpuprov.ReplaceWhenReady, Timeout: time.Minute})
			var dead atomic.Bool
			killed := make(chan struct{})
			reaper, err := gpuprov.New(&journaltest.Killable{Journal: e.j, Dead: dead.Load}, gpuprov.WithProvider(e.cp),
				gpuprov.WithSSHKey(e.key), gpuprov.WithSSH("root", nil, true), gpuprov.WithOwner(deadOwner(t)),
				gpuprov.WithReaper(50*time.Millisecond), gpuprov.WithNoticePoll(100*time.Millisecond),
				gpuprov.WithEvents(func(ev gpuprov.Event) {
					// The replacement's steps: after the interruption.
					if ev.Type == at.ev && (ev.Type == gpuprov.EvReplacing || ev.Type == gpuprov.EvTeardown || ev.Attempt > 1) && !dead.Swap(true) {
						close(killed)
					}
				}))
			if err != nil {
				t.Fatal(err)
			}
			if err := e.srv.PreemptIn(cloudName, vm.InstanceID, 30*time.Second); err != nil {
				t.Fatal(err)
			}
			select {
			case <-killed:
			case <-time.After(20 * time.Second):
				t.Fatalf("the reaper never reached %s", at.ev)
			}
			reaper.Close()

			p := e.process(t)
			if _, err := p.Recover(context.Background()); err != nil {
				t.Fatal(err)
			}
			got, err := p.Get(context.Background(), "crash")
			if err != nil {
				t.Fatal(err)
			}
			if got.State != gpuprov.StateReady || got.InstanceID == vm.InstanceID || got.InstanceID == "" {
				logStory(t, e.j, "crash")
				t.Fatalf("after Recover: %s on %q (%s), want ready on a new instance", got.State, got.InstanceID, got.LastError)
			}
			if live := e.live(t, "crash"); len(live) != 1 || live[0].ID != got.InstanceID {
				logStory(t, e.j, "crash")
				t.Errorf("live instances: %+v, want the replacement only", live)
			}
			if n := len(e.events(t, "crash", gpuprov.EvRetired)); n != 1 {
				t.Errorf("%d retired events, want 1", n)
			}
		})
	}
}

// ReplaceAtReclaim launches the replacement at the notice but keeps the
// interrupted machine until the notice's time: the VM is ready on the
// replacement only then, and one machine runs at the end.
func TestInterruptionReplaceAtReclaimKeepsTheOldMachineToTheEnd(t *testing.T) {
	e := newSpotEnv(t)
	vm := e.launchAndLeave(t, gpuprov.Request{Name: "late", GPU: "H100-80GB", Spot: provider.SpotOnly,
		OnInterruption: gpuprov.ReplaceAtReclaim, Timeout: time.Minute})
	reaper := e.process(t, gpuprov.WithReaper(50*time.Millisecond), gpuprov.WithNoticePoll(100*time.Millisecond))
	if err := e.srv.PreemptIn(cloudName, vm.InstanceID, 3*time.Second); err != nil {
		t.Fatal(err)
	}
	in := e.instance(t, vm.InstanceID)
	reclaimAt := in.Events[len(in.Events)-1].At.Add(3 * time.Second)
	got := e.readyOnAnother(t, reaper, "late", vm.InstanceID)
	if got.ReadyAt.Before(reclaimAt) {
		t.Errorf("ready on the replacement at %v, before the reclaim at %v", got.ReadyAt, reclaimAt)
	}
	if old := e.instance(t, vm.InstanceID); old.Status != simserver.StatusTerminated {
		t.Errorf("interrupted instance is %s, want terminated", old.Status)
	}
	if live := e.live(t, "late"); len(live) != 1 || live[0].ID != got.InstanceID {
		t.Errorf("live instances: %+v, want the replacement only", live)
	}
	evs := e.events(t, "late", gpuprov.EvRetired)
	if len(evs) != 1 || !strings.Contains(evs[0].Message, "its reclaim time passed") {
		t.Errorf("retired events %+v, want one saying the reclaim time passed", evs)
	}
}
