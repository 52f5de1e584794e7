// Command scheduler is a small GPU job scheduler written the way a service
// that embeds gpuprov is: from a module of its own (example.com/scheduler,
// outside gpuprov's import path, with a replace of github.com/org/gpuprov
// by this repository), so it can use gpuprov's public packages only and an
// internal import fails to build. It
//
//  1. opens the SQLite journal in its state folder and recovers whatever a
//     crashed run left (Recover at start is the crash-recovery contract);
//  2. launches -n VMs at once, running a command on each over SSH as soon
//     as it is ready (LaunchEach, Provisioner.Run with the pinned host key);
//  3. lists the live VMs, checks their health, and deletes them.
//
// It talks to the simulated cloud (provider/sim) at -sim with the key in
// $GPUPROV_SIM_KEY; start one with `go run ./examples/gpuprov sim serve -o
// json`. With -hold it stops after the launches without deleting, which is
// how its test kills it mid-run and recovers in a new process.
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
	"time"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/journal"
	_ "github.com/org/gpuprov/journal/sqlite"
	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/sim"
	"github.com/org/gpuprov/ssh"
	gossh "golang.org/x/crypto/ssh"
)

// Config is what one run needs.
type Config struct {
	State  string // folder of the journal and the client key
	SimURL string // the sim server's URL
	Cloud  string // the sim cloud (account) to use
	APIKey string // that cloud's key; a secret
	VMs    int    // how many VMs to launch
	Hold   bool   // stop after launching, leaving the VMs running
}

func main() {
	var cfg Config
	flag.StringVar(&cfg.State, "state", "scheduler-state", "folder of the journal and the SSH key")
	flag.StringVar(&cfg.SimURL, "sim", "", "the sim server's URL (gpuprov sim serve)")
	flag.StringVar(&cfg.Cloud, "cloud", "sim-a", "the sim cloud to use")
	flag.IntVar(&cfg.VMs, "n", 5, "how many VMs to launch")
	flag.BoolVar(&cfg.Hold, "hold", false, "leave the VMs running after launching them")
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
	p, closeAll, err := open(ctx, cfg)
	if err != nil {
		return err
	}
	defer closeAll()

	// Whatever a crashed run left is finished first.
	rep, err := p.Recover(ctx)
	if err != nil {
		return err
	}
	for _, v := range rep.VMs {
		fmt.Fprintf(out, "recovered %s (%s): %s\n", v.Name, v.State, v.Outcome)
	}

	// The jobs a previous run (or the recovery above) already has running
	// are not launched again.
	live, err := p.List(ctx, gpuprov.ListOptions{Live: true})
	if err != nil {
		return err
	}
	running := map[string]bool{}
	for _, v := range live {
		running[v.Name] = v.State == gpuprov.StateReady
	}
	var reqs []gpuprov.Request
	var failed []error
	work := func(name string, vm *gpuprov.VM) {
		res, err := p.Run(ctx, name, "echo running on $(hostname)")
		if err != nil {
			failed = append(failed, err)
			fmt.Fprintf(out, "%s: command failed: %v\n", name, err)
			return
		}
		fmt.Fprintf(out, "%s ready on %s %s at $%.2f/h: %s\n", name, vm.Provider, vm.Location,
			vm.PricePerHour, strings.TrimSpace(string(res.Stdout)))
	}
	for i := range cfg.VMs {
		name := fmt.Sprintf("job-%d", i)
		if ready, ok := running[name]; ok {
			if ready {
				vm, err := p.Get(ctx, name)
				if err != nil {
					return err
				}
				work(name, vm)
			}
			continue
		}
		reqs = append(reqs, gpuprov.Request{Name: name, GPU: "h100", Timeout: 5 * time.Minute})
	}
	err = p.LaunchEach(ctx, reqs, func(i int, r gpuprov.LaunchResult) {
		if r.Err != nil {
			failed = append(failed, r.Err)
			fmt.Fprintf(out, "%s failed: %v\n", reqs[i].Name, r.Err)
			return
		}
		work(r.VM.Name, r.VM)
	})
	if err != nil {
		return err
	}
	if cfg.Hold {
		return errors.Join(failed...)
	}
	return errors.Join(append(failed, drain(ctx, p, out))...)
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
func open(ctx context.Context, cfg Config) (*gpuprov.Provisioner, func(), error) {
	if err := os.MkdirAll(cfg.State, 0o700); err != nil {
		return nil, nil, err
	}
	j, err := journal.Open(ctx, "sqlite:"+filepath.Join(cfg.State, "journal.db"))
	if err != nil {
		return nil, nil, err
	}
	key, err := loadKey(filepath.Join(cfg.State, "id_ed25519"))
	if err != nil {
		j.Close()
		return nil, nil, err
	}
	p, err := gpuprov.New(j,
		gpuprov.WithRegistryProvider("sim", provider.Settings{Name: cfg.Cloud,
			Config: sim.Config{Endpoint: cfg.SimURL, Cloud: cfg.Cloud, APIKey: cfg.APIKey}}),
		gpuprov.WithSSHKey(key),
	)
	if err != nil {
		j.Close()
		return nil, nil, err
	}
	return p, func() { p.Close(); j.Close() }, nil
}

// loadKey reads the client key at path, making it (0600) on first use.
func loadKey(path string) (gossh.Signer, error) {
	if b, err := os.ReadFile(path); err == nil {
		return ssh.ParsePrivateKey(b)
	}
	kp, err := ssh.GenerateKey()
	if err != nil {
		return nil, err
	}
	if err := ssh.WritePrivateKey(path, kp); err != nil {
		return nil, err
	}
	return kp.Signer, nil
}
