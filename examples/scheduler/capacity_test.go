package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/provider/sim/simserver"
)

// everyOfferOut stocks out every offer of sim-a.
var everyOfferOut = simserver.WithFaults("sim-a", simserver.Faults{StockoutOffers: []string{"*"}})

// A job that waits for capacity (-wait) while every offer is stocked out
// keeps waiting, polling, with nothing running; once the cloud restocks, its
// VM is ready within about a poll, and the job runs on it.
func TestWaitForCapacityIsReadyAPollAfterTheRestock(t *testing.T) {
	t.Parallel()
	const poll = time.Second
	srv := fastSim(t, everyOfferOut)
	cfg := config(t, srv)
	cfg.VMs, cfg.Wait, cfg.Poll, cfg.Timeout = 1, true, poll, 5*time.Minute
	waiting, ready := make(chan time.Time, 64), make(chan time.Time, 1)
	cfg.Options = []gpuprov.Option{gpuprov.WithEvents(func(ev gpuprov.Event) {
		switch ev.Type {
		case gpuprov.EvWaiting:
			waiting <- time.Now()
		case gpuprov.EvReady:
			ready <- time.Now()
		}
	})}
	out := &syncBuffer{}
	result := start(t, cfg, out)

	// It starts waiting, and a poll later finds nothing and waits on.
	began := await(t, waiting, "wait for capacity")
	again := await(t, waiting, "refresh of the wait")
	if d := again.Sub(began); d < poll/2 || d > 3*poll {
		t.Errorf("the wait re-planned %v after it began; want about %v", d, poll)
	}
	if left := running(t, srv); len(left) != 0 {
		t.Fatalf("instances while every offer is out: %v", left)
	}
	if !strings.Contains(out.String(), "job-0 waiting for capacity") {
		t.Errorf("the run does not say job-0 waits:\n%s", out.String())
	}

	// The restock comes just after a refresh: the next is a poll away.
	if err := srv.SetFaults("sim-a", simserver.Faults{}); err != nil {
		t.Fatal(err)
	}
	restocked := time.Now()
	took := await(t, ready, "ready VM").Sub(restocked)
	t.Logf("ready %v after the restock (poll %v)", took, poll)
	if took > 3*poll {
		t.Errorf("the VM was ready %v after the restock; want within about a poll (%v), surely under 3", took, poll)
	}
	jobDoneAndGone(t, srv, result, out.String)
}

// A job no offer can ever satisfy fails at once, even with -wait and a
// long timeout, with ErrNoOffers and an error that names the filter; the
// cloud never sees a create.
func TestImpossibleRequestFailsAtOnce(t *testing.T) {
	t.Parallel()
	srv := fastSim(t)
	for _, tc := range []struct {
		name string
		set  func(*Config)
		want []string // in the error
	}{
		{"price cap below every offer", func(c *Config) { c.MaxPrice = 0.5 },
			[]string{"none under $0.50/h", "the cheapest is $"}},
		{"region nobody has", func(c *Config) { c.Region = "mars-north" },
			[]string{"none in regions mars-north", "they are in "}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config(t, srv)
			cfg.VMs, cfg.Wait, cfg.Timeout = 1, true, 10*time.Minute
			tc.set(&cfg)
			var out bytes.Buffer
			begin := time.Now()
			err := Run(context.Background(), cfg, &out)
			took := time.Since(begin)
			t.Logf("after %v: %v", took, err)
			if !errors.Is(err, gpuprov.ErrNoOffers) {
				t.Fatalf("Run: %v; want ErrNoOffers\n%s", err, out.String())
			}
			for _, want := range tc.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("the error does not say %q: %v", want, err)
				}
			}
			if took > 5*time.Second {
				t.Errorf("it failed after %v; want at once, not after waiting", took)
			}
			if strings.Contains(out.String(), "waiting for capacity") {
				t.Errorf("it waited for capacity:\n%s", out.String())
			}
			if st, err := srv.Stats("sim-a"); err != nil || st.Creates != 0 {
				t.Errorf("the cloud saw %d creates (%v); want none", st.Creates, err)
			}
		})
	}
}

// A service started while a VM of a killed run waits for capacity is up
// at once: RecoverInBackground hands back the VM as continuing while it
// still waits; when the cloud restocks, the run's Wait sees it ready, the
// job runs on it and the run ends as usual.
func TestStartDoesNotBlockOnAWaitingVM(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds and runs the scheduler binary")
	}
	srv := fastSim(t, everyOfferOut)
	cfg := config(t, srv)
	cfg.VMs, cfg.Wait, cfg.Poll, cfg.Timeout = 1, true, time.Second, 5*time.Minute

	// The first run, a process, starts waiting and is killed.
	first := &syncBuffer{}
	cmd := command(t, cfg, "-n", "1", "-wait", "-poll", "1s", "-hold")
	cmd.Stdout, cmd.Stderr = first, first
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	awaitOutput(t, first, "job-0 waiting for capacity")
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()

	// The next run takes it over and is up while it still waits.
	out := &syncBuffer{}
	result := start(t, cfg, out)
	awaitOutput(t, out, "recovered job-0 (waiting): continuing")
	if left := running(t, srv); len(left) != 0 {
		t.Fatalf("instances while every offer is out: %v", left)
	}
	if strings.Contains(out.String(), "job-0 ready") {
		t.Fatalf("job-0 ready before the restock:\n%s", out.String())
	}

	if err := srv.SetFaults("sim-a", simserver.Faults{}); err != nil { // the restock
		t.Fatal(err)
	}
	jobDoneAndGone(t, srv, result, out.String)
	if all, _ := srv.Instances("sim-a"); len(all) != 1 {
		t.Errorf("%d instances over both runs; want job-0's one", len(all))
	}
}

// jobDoneAndGone waits for the run's end (result) and fails t unless it
// ended well, its output says job-0 was ready, ran and was deleted, and the
// sim runs nothing.
func jobDoneAndGone(t *testing.T, srv *simserver.Server, result func() error, out func() string) {
	t.Helper()
	if err := result(); err != nil {
		t.Fatalf("%v\n%s", err, out())
	}
	for _, want := range []string{"job-0 ready on sim-a", "running on", "job-0 deleted"} {
		if !strings.Contains(out(), want) {
			t.Errorf("output lacks %q:\n%s", want, out())
		}
	}
	if left := running(t, srv); len(left) != 0 {
		t.Fatalf("instances left: %v", left)
	}
}
