package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/journal/sqlite"
	"github.com/org/gpuprov/provider/sim/simserver"
)

// roleEnv names the role a re-executed copy of this program (or of its test
// binary) plays: the sim server, the launcher that gets killed, or the
// process that recovers.
const roleEnv = "GPUPROV_SCALE_ROLE"

// runRole runs role with args and returns the exit code.
func runRole(role string, args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch role {
	case "serve":
		err = roleServe(ctx, args)
	case "launch":
		err = roleLaunch(ctx, args)
	case "recover":
		err = roleRecover(ctx, args)
	default:
		err = fmt.Errorf("unknown role %q", role)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "scale %s: %v\n", role, err)
		return 1
	}
	return 0
}

// serveInfo is what the serve role prints, as one JSON line, once it
// listens.
type serveInfo struct {
	URL   string            `json:"url"`
	Admin string            `json:"admin"`
	Keys  map[string]string `json:"keys"`
}

// roleServe serves the simserver options of a JSON file until SIGTERM.
func roleServe(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	optsPath := fs.String("options", "", "simserver options (JSON)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	opts, err := simserver.LoadOptions(*optsPath)
	if err != nil {
		return err
	}
	srv, err := simserver.Start(opts)
	if err != nil {
		return err
	}
	defer srv.Close()
	info := serveInfo{URL: srv.URL(), Admin: srv.AdminToken(), Keys: map[string]string{}}
	for _, c := range srv.Clouds() {
		info.Keys[c] = srv.APIKey(c)
	}
	if err := json.NewEncoder(os.Stdout).Encode(info); err != nil {
		return err
	}
	<-ctx.Done()
	return nil
}

// driverFlags are the flags the launch and recover roles share.
type driverFlags struct {
	journal string
	info    string // serveInfo JSON
	poll    time.Duration
}

func (d *driverFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&d.journal, "journal", "", "SQLite journal path")
	fs.StringVar(&d.info, "sim", "", "the serve role's JSON line")
	fs.DurationVar(&d.poll, "poll", 500*time.Millisecond, "the adapter's poll interval")
}

// open opens the journal and a Provisioner over the sim's clouds.
func (d *driverFlags) open(ctx context.Context) (*gpuprov.Provisioner, func(), error) {
	var info serveInfo
	if err := json.Unmarshal([]byte(d.info), &info); err != nil {
		return nil, nil, fmt.Errorf("-sim: %w", err)
	}
	j, err := sqlite.Open(ctx, d.journal)
	if err != nil {
		return nil, nil, err
	}
	var accts []account
	for _, c := range cloudNames {
		accts = append(accts, account{Name: c, Endpoint: info.URL, APIKey: info.Keys[c]})
	}
	adapters, err := newAdapters(accts, j.Installation(), adapterConfig{PollInterval: d.poll,
		ConsistencyWindow: 2 * time.Second, BootTimeout: 5 * time.Minute, DeleteTimeout: 5 * time.Minute})
	if err != nil {
		j.Close()
		return nil, nil, err
	}
	p, err := gpuprov.New(j, gpuprov.WithProvider(adapters...), gpuprov.WithSSH("root", nil, false))
	if err != nil {
		j.Close()
		return nil, nil, err
	}
	return p, func() { p.Close(); j.Close() }, nil
}

// roleLaunch launches -vms VMs at once, split over the clouds, and waits
// for them (it is meant to be killed first).
func roleLaunch(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("launch", flag.ContinueOnError)
	var d driverFlags
	d.register(fs)
	n := fs.Int("vms", 100, "VMs to launch")
	if err := fs.Parse(args); err != nil {
		return err
	}
	p, closeAll, err := d.open(ctx)
	if err != nil {
		return err
	}
	defer closeAll()
	reqs := make([]gpuprov.Request, *n)
	for i := range reqs {
		reqs[i] = gpuprov.Request{Name: vmName(i), GPU: "H100-80GB", Providers: []string{cloudNames[i%len(cloudNames)]},
			Timeout: 10 * time.Minute}
	}
	var errs []error
	for _, r := range p.LaunchMany(ctx, reqs) {
		errs = append(errs, r.Err)
	}
	return errors.Join(errs...)
}

// roleRecover runs Recover once and prints what it did.
func roleRecover(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("recover", flag.ContinueOnError)
	var d driverFlags
	d.register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	p, closeAll, err := d.open(ctx)
	if err != nil {
		return err
	}
	defer closeAll()
	rep, err := p.Recover(ctx)
	if err != nil {
		return err
	}
	var failed []string
	for name, err := range rep.Resumed {
		if err != nil {
			failed = append(failed, fmt.Sprintf("%s: %v", name, err))
		}
	}
	fmt.Printf("resumed %d, skipped %d, failed %d\n", len(rep.Resumed), len(rep.Skipped), len(failed))
	for name, why := range rep.Skipped {
		fmt.Printf("skipped %s: %s\n", name, why)
	}
	if len(failed) > 0 {
		return errors.New(strings.Join(failed, "; "))
	}
	return nil
}
