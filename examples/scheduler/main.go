// Command scheduler is a small GPU batch-job scheduler written the way a
// service that embeds gpuprov is: from a module of its own
// (example.com/scheduler, outside gpuprov's import path, with a replace of
// github.com/org/gpuprov by this repository), so it can use gpuprov's public
// packages only and an internal import fails to build. Each run
//
//  1. loads its SSH client key from its state folder, making it the first
//     time (ssh.LoadOrCreateKey), so that a restart logs in to the machines
//     an earlier run launched; a run holding another key is told so at once
//     (gpuprov.ErrKeyMismatch, naming both fingerprints);
//  2. opens the SQLite journal there and takes over whatever a killed run
//     left (RecoverInBackground): it returns as soon as each VM is taken
//     over, a boot or a wait for capacity goes on in the background, and the
//     run waits for those (Wait) and runs their jobs like the others';
//  3. launches the VMs of -n jobs, at most -parallel at a time (LaunchEach
//     with Limit), running each job's command over SSH as soon as its VM is
//     ready (Provisioner.Run, host key pinned). With -wait a job whose offers
//     are all stocked out waits for capacity, re-planning every -poll,
//     instead of failing; a request no offer can satisfy (-max-price below
//     every price, a -region nobody has) fails at once, naming the filter;
//  4. checks the health of every live VM and deletes it.
//
// It talks to the simulated cloud (provider/sim) at -sim with the key in
// $GPUPROV_SIM_KEY; start one with `go run ./examples/gpuprov sim serve -o
// json`. With -hold it stops after the jobs without deleting, which is how
// its tests restart it, or kill it mid-run and recover in a new process.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/journal"
	_ "github.com/org/gpuprov/journal/sqlite"
	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/sim"
	"github.com/org/gpuprov/ssh"
)

// keyFile is the client key's name in the state folder.
const keyFile = "id_ed25519"

// Config is what one run needs.
type Config struct {
	State    string        // folder of the journal and the client key
	SimURL   string        // the sim server's URL
	Cloud    string        // the sim cloud (account) to use
	APIKey   string        // that cloud's key; a secret
	VMs      int           // how many jobs, one VM each
	Parallel int           // at most this many launches at a time; 0: all at once
	Wait     bool          // wait for capacity when every offer is stocked out
	Poll     time.Duration // how often a wait re-plans; 0: gpuprov's default
	MaxPrice float64       // USD per hour; 0: no cap
	Region   string        // the only region to launch in; "": any
	Timeout  time.Duration // bounds each launch, waits included; 0: gpuprov's default
	Hold     bool          // stop after the jobs, leaving the VMs running

	// Options are more Provisioner options, for a program that embeds Run
	// (its tests add event sinks, a cluster Joiner).
	Options []gpuprov.Option
}

func main() {
	var cfg Config
	flag.StringVar(&cfg.State, "state", "scheduler-state", "folder of the journal and the SSH key")
	flag.StringVar(&cfg.SimURL, "sim", "", "the sim server's URL (gpuprov sim serve)")
	flag.StringVar(&cfg.Cloud, "cloud", "sim-a", "the sim cloud to use")
	flag.IntVar(&cfg.VMs, "n", 5, "how many jobs to run, one VM each")
	flag.IntVar(&cfg.Parallel, "parallel", 4, "launch at most this many VMs at a time (0: all at once)")
	flag.BoolVar(&cfg.Wait, "wait", false, "wait for capacity when every offer is stocked out")
	flag.DurationVar(&cfg.Poll, "poll", gpuprov.DefaultCapacityPoll, "how often a wait for capacity re-plans")
	flag.Float64Var(&cfg.MaxPrice, "max-price", 0, "USD per hour a VM may cost (0: no cap)")
	flag.StringVar(&cfg.Region, "region", "", "launch in this region only")
	flag.DurationVar(&cfg.Timeout, "timeout", 30*time.Minute, "bound of each launch, waits included")
	flag.BoolVar(&cfg.Hold, "hold", false, "leave the VMs running after the jobs")
	flag.Parse()
	cfg.APIKey = os.Getenv("GPUPROV_SIM_KEY")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := Run(ctx, cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "scheduler:", err)
		os.Exit(1)
	}
}

// Run is one scheduler run; it reports on out.
func Run(ctx context.Context, cfg Config, out io.Writer) error {
	if cfg.SimURL == "" || cfg.APIKey == "" || cfg.VMs < 1 {
		return errors.New("need -sim URL, $GPUPROV_SIM_KEY and -n ≥ 1")
	}
	out = &syncWriter{w: out} // the launches, the waits and the event sink all report
	p, closeAll, err := open(ctx, cfg, out)
	if err != nil {
		return err
	}
	defer closeAll() // also halts what the recovery still drives, for the next run

	// What a killed run left is taken over first. It goes on in the
	// background: a VM waiting for capacity does not hold up the start.
	rep, err := p.RecoverInBackground(ctx)
	if err != nil {
		return err
	}
	continuing := map[string]bool{}
	for _, v := range rep.VMs {
		fmt.Fprintf(out, "recovered %s (%s): %s%s\n", v.Name, v.State, v.Outcome, note(v))
		continuing[v.Name] = v.Outcome == gpuprov.OutcomeContinuing
	}

	// The jobs whose VM a previous run (or the recovery) has are not
	// launched again.
	live, err := p.List(ctx, gpuprov.ListOptions{Live: true})
	if err != nil {
		return err
	}
	state := map[string]gpuprov.State{}
	for _, v := range live {
		state[v.Name] = v.State
	}
	jb := &jobs{p: p, out: out}
	var reqs []gpuprov.Request
	var recovered []string
	for i := range cfg.VMs {
		name := fmt.Sprintf("job-%d", i)
		st, ok := state[name]
		switch {
		case !ok:
			reqs = append(reqs, cfg.request(name))
		case st == gpuprov.StateReady:
			vm, err := p.Get(ctx, name)
			jb.done(ctx, name, vm, err)
		case continuing[name]:
			recovered = append(recovered, name)
		default:
			fmt.Fprintf(out, "%s is %s, not driven by this run: left alone\n", name, st)
		}
	}
	var wg sync.WaitGroup
	for _, name := range recovered {
		wg.Go(func() {
			vm, err := p.Wait(ctx, name) // ErrEnded if it failed instead
			jb.done(ctx, name, vm, err)
		})
	}
	err = p.LaunchEach(ctx, reqs, func(i int, r gpuprov.LaunchResult) {
		jb.done(ctx, reqs[i].Name, r.VM, r.Err)
	}, gpuprov.Limit(cfg.Parallel))
	wg.Wait()
	if err != nil {
		return err
	}
	if cfg.Hold {
		return jb.err()
	}
	return errors.Join(jb.err(), drain(ctx, p, out))
}

// request is the launch request of job name.
func (cfg Config) request(name string) gpuprov.Request {
	r := gpuprov.Request{Name: name, GPU: "h100", Timeout: cfg.Timeout,
		MaxPricePerHour: cfg.MaxPrice, WaitForCapacity: cfg.Wait}
	if cfg.Region != "" {
		r.Regions = []string{cfg.Region}
	}
	return r
}

// note is what a recovery report adds about one VM: why it was skipped or
// how it ended.
func note(v gpuprov.Recovered) string {
	switch {
	case v.Reason != "":
		return " (" + v.Reason + ")"
	case v.Err != nil:
		return ": " + v.Err.Error()
	}
	return ""
}

// jobs runs each job's command on its VM once the VM is ready, and keeps
// what failed. The launches and the waits call done concurrently.
type jobs struct {
	p   *gpuprov.Provisioner
	out io.Writer

	mu     sync.Mutex
	failed []error
}

// done is told that job name's VM is ready (err nil) or could not be had
// (a launch's or a Wait's error, which names the VM).
func (j *jobs) done(ctx context.Context, name string, vm *gpuprov.VM, err error) {
	if err == nil {
		err = j.work(ctx, name, vm)
	}
	if err != nil {
		fmt.Fprintln(j.out, err)
		j.mu.Lock()
		j.failed = append(j.failed, err)
		j.mu.Unlock()
	}
}

// work is the job: a command over SSH, with the host key pinned at launch.
func (j *jobs) work(ctx context.Context, name string, vm *gpuprov.VM) error {
	res, err := j.p.Run(ctx, name, "echo running on $(hostname)")
	if err != nil {
		return fmt.Errorf("%s: command failed: %w", name, err)
	}
	fmt.Fprintf(j.out, "%s ready on %s %s at $%.2f/h: %s\n", name, vm.Provider, vm.Location,
		vm.PricePerHour, strings.TrimSpace(string(res.Stdout)))
	return nil
}

func (j *jobs) err() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	return errors.Join(j.failed...)
}

// drain checks the health of every live VM and deletes it.
func drain(ctx context.Context, p *gpuprov.Provisioner, out io.Writer) error {
	vms, err := p.List(ctx, gpuprov.ListOptions{Live: true})
	if err != nil {
		return err
	}
	var errs []error
	for _, v := range vms {
		if d, err := p.Health(ctx, v.Name); err == nil {
			fmt.Fprintf(out, "%s health: %s\n", v.Name, d.Verdict())
		}
		if err := p.Delete(ctx, v.Name); err != nil {
			errs = append(errs, err)
			continue
		}
		fmt.Fprintf(out, "%s deleted\n", v.Name)
	}
	return errors.Join(errs...)
}

// open builds the Provisioner: journal, provider, SSH key, events.
func open(ctx context.Context, cfg Config, out io.Writer) (*gpuprov.Provisioner, func(), error) {
	if err := os.MkdirAll(cfg.State, 0o700); err != nil {
		return nil, nil, err
	}
	j, err := journal.Open(ctx, "sqlite:"+filepath.Join(cfg.State, "journal.db"))
	if err != nil {
		return nil, nil, err
	}
	// The same key at every start: it is the one installed on the VMs that
	// earlier runs launched.
	key, err := ssh.LoadOrCreateKey(filepath.Join(cfg.State, keyFile))
	if err != nil {
		j.Close()
		return nil, nil, err
	}
	opts := []gpuprov.Option{
		gpuprov.WithRegistryProvider("sim", provider.Settings{Name: cfg.Cloud,
			Config: sim.Config{Endpoint: cfg.SimURL, Cloud: cfg.Cloud, APIKey: cfg.APIKey}}),
		gpuprov.WithSSHKey(key),
		gpuprov.WithEvents(func(ev gpuprov.Event) {
			if ev.Type == gpuprov.EvWaiting { // "waiting for capacity: …, next try at …"
				fmt.Fprintf(out, "%s %s\n", ev.VM, ev.Message)
			}
		}),
	}
	if cfg.Poll > 0 {
		opts = append(opts, gpuprov.WithCapacityPoll(cfg.Poll))
	}
	p, err := gpuprov.New(j, append(opts, cfg.Options...)...)
	if err != nil {
		j.Close()
		return nil, nil, err
	}
	return p, func() { p.Close(); j.Close() }, nil
}

// syncWriter makes each Write whole when several goroutines report.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(b)
}
