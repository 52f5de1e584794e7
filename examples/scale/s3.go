package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/journal/sqlite"
	"github.com/org/gpuprov/provider/sim/simserver"
)

// s3Config is scenario S3: VMs mid-boot, their launcher killed with
// SIGKILL, a new process recovering them from the same journal, against a
// sim in a third process.
type s3Config struct {
	VMs        int
	Boot       time.Duration // long enough for every VM to reach boot before the kill
	APILatency time.Duration
	Poll       time.Duration
	// SaveInterval batches the sim's state-file rewrites (0: one per
	// mutation, which at this scale is the bottleneck).
	SaveInterval time.Duration
	Dir          string
}

func defaultS3() s3Config {
	return s3Config{VMs: 1000, Boot: 20 * time.Second, APILatency: 5 * time.Millisecond, Poll: 500 * time.Millisecond,
		SaveInterval: 100 * time.Millisecond}
}

// s3Result is what S3 measured, times from the start of the recovering
// process.
type s3Result struct {
	Cfg         s3Config
	ToBoot      time.Duration // launcher start → every VM in phase boot (then SIGKILL)
	Recovered   int           // VMs with a recovered event from the new process
	LastReown   time.Duration // → the last recovered event
	LastRunning time.Duration // → the last instance turning running in the sim (the remaining boot)
	LastReady   time.Duration // → the last VM ready
	RecoverExit time.Duration // → the recovering process exiting
	Ready       int
	Skipped     string // what Recover printed about skipped VMs
	Orphans     int    // live instances that no ready VM owns
	Duplicates  int    // VMs with more than one live instance
	Leftover    int    // instances and side resources after deleting every VM
}

// runS3 runs S3 with this program re-executed as the sim, the launcher and
// the recovering process.
func runS3(ctx context.Context, cfg s3Config) (*s3Result, error) {
	timing := simserver.Timing{APILatency: simserver.Duration(cfg.APILatency), BootTime: simserver.Duration(cfg.Boot),
		DeleteTime: simserver.Duration(200 * time.Millisecond)}
	opts := simOptions(timing, simserver.Faults{}, nil, 1)
	opts.StateFile = filepath.Join(cfg.Dir, "sim", "state.json")
	opts.SaveInterval = simserver.Duration(cfg.SaveInterval)
	optsPath := filepath.Join(cfg.Dir, "sim.json")
	b, err := json.Marshal(opts)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(opts.StateFile), 0o700); err != nil {
		return nil, err
	}
	if err := os.WriteFile(optsPath, b, 0o600); err != nil {
		return nil, err
	}
	sp, err := startSimProc(optsPath)
	if err != nil {
		return nil, err
	}
	defer sp.Stop()
	jpath := filepath.Join(cfg.Dir, "journal.db")
	common := []string{"-journal", jpath, "-sim", sp.InfoJSON(), "-poll", cfg.Poll.String()}

	// Create the journal first, so the launcher and this process open the
	// same installation.
	j, err := sqlite.Open(ctx, jpath)
	if err != nil {
		return nil, err
	}
	defer j.Close()

	res := &s3Result{Cfg: cfg}
	launch, err := self("launch", append(common, "-vms", fmt.Sprint(cfg.VMs))...)
	if err != nil {
		return nil, err
	}
	var launchOut bytes.Buffer
	launch.Stdout, launch.Stderr = &launchOut, &launchOut
	start := time.Now()
	if err := launch.Start(); err != nil {
		return nil, err
	}
	waited := make(chan error, 1)
	go func() { waited <- launch.Wait() }()
	if err := waitForBoot(ctx, j, cfg.VMs, start.Add(cfg.Boot), waited); err != nil {
		_ = launch.Process.Kill()
		<-waited
		return nil, fmt.Errorf("%w; launcher printed: %s", err, launchOut.String())
	}
	res.ToBoot = time.Since(start)
	if err := launch.Process.Signal(syscall.SIGKILL); err != nil {
		return nil, err
	}
	<-waited

	rec, err := self("recover", common...)
	if err != nil {
		return nil, err
	}
	var recOut bytes.Buffer
	rec.Stdout, rec.Stderr = &recOut, &recOut
	t0 := time.Now()
	if err := rec.Run(); err != nil {
		return nil, fmt.Errorf("recover: %w: %s", err, recOut.String())
	}
	res.RecoverExit = time.Since(t0)
	res.Skipped = recOut.String()
	if err := res.measure(ctx, j, sp, t0); err != nil {
		return nil, err
	}
	// Delete everything from this process and check the sim is empty.
	var info serveInfo
	_ = json.Unmarshal([]byte(sp.InfoJSON()), &info) // it was marshalled from the same struct
	var accts []account
	for _, c := range cloudNames {
		accts = append(accts, account{Name: c, Endpoint: info.URL, APIKey: info.Keys[c]})
	}
	adapters, err := newAdapters(accts, j.Installation(), adapterConfig{PollInterval: 100 * time.Millisecond})
	if err != nil {
		return nil, err
	}
	p, err := gpuprov.New(j, gpuprov.WithProvider(adapters...))
	if err != nil {
		return nil, err
	}
	defer p.Close()
	var reqs []gpuprov.Request
	for i := range cfg.VMs {
		reqs = append(reqs, gpuprov.Request{Name: vmName(i)})
	}
	if err := deleteAll(ctx, p, reqs); err != nil {
		return res, err
	}
	p.Close() // removes the shared firewalls waiting out their grace
	for _, c := range cloudNames {
		live, err := liveInstances(info.URL, info.Admin, c)
		if err != nil {
			return res, err
		}
		side, err := sideResources(info.URL, info.Admin, c)
		if err != nil {
			return res, err
		}
		res.Leftover += len(live) + side
	}
	return res, nil
}

// waitForBoot polls the journal until n VMs are in phase boot, the
// launcher exits, or the deadline (the first boot ending) passes.
func waitForBoot(ctx context.Context, j journal.Journal, n int, deadline time.Time, exited <-chan error) error {
	for {
		vms, err := j.ListVMs(ctx, journal.ListOptions{States: []journal.VMState{journal.StateProvisioning}})
		if err != nil {
			return err
		}
		boot := 0
		for _, v := range vms {
			if v.Phase == gpuprov.PhaseBoot {
				boot++
			}
		}
		if boot == n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of %d VMs in phase boot when the first boot ends", boot, n)
		}
		select {
		case err := <-exited:
			return fmt.Errorf("the launcher exited before every VM booted: %v", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// measure reads the journal and the sim after the recovery that started at
// t0.
func (r *s3Result) measure(ctx context.Context, j journal.Journal, sp *simProc, t0 time.Time) error {
	evs, err := j.Events(ctx, journal.EventQuery{})
	if err != nil {
		return err
	}
	recovered := map[string]bool{}
	for _, e := range evs {
		if e.Type == gpuprov.EvRecovered && !e.Time.Before(t0) {
			recovered[e.VM] = true
			r.LastReown = max(r.LastReown, e.Time.Sub(t0))
		}
	}
	r.Recovered = len(recovered)
	vms, err := j.ListVMs(ctx, journal.ListOptions{})
	if err != nil {
		return err
	}
	owner := map[string]string{}
	for _, v := range vms {
		if v.State == journal.StateReady {
			r.Ready++
			r.LastReady = max(r.LastReady, v.ReadyAt.Sub(t0))
			owner[v.InstanceID] = v.Name
		}
	}
	perVM := map[string]int{}
	for _, c := range cloudNames {
		live, err := liveInstances(sp.info.URL, sp.info.Admin, c)
		if err != nil {
			return err
		}
		for _, in := range live {
			vm := in.Labels["gpuprov"]
			perVM[vm]++
			if owner[in.ID] != vm {
				r.Orphans++
			}
			for _, e := range in.Events {
				if e.Type == simserver.EventRunning {
					r.LastRunning = max(r.LastRunning, e.At.Sub(t0))
				}
			}
		}
	}
	for _, n := range perVM {
		if n > 1 {
			r.Duplicates++
		}
	}
	if r.Recovered != r.Cfg.VMs || r.Ready != r.Cfg.VMs {
		return errors.New("not every VM was recovered and ready: " + r.Report())
	}
	return nil
}

// Report renders the result.
func (r *s3Result) Report() string {
	return fmt.Sprintf("S3: %d VMs, boot %v: all in phase boot %.2fs after the launcher started; SIGKILL; recovering process:\n"+
		"  re-owned %d, last re-own at %.3fs (target ≤ 2s); last instance running at %.2fs (the remaining boot); last ready at %.2fs (%.2fs after it); process exit at %.2fs\n"+
		"  ready %d, orphans %d, duplicates %d, after deleting all: %d instances and side resources left\n",
		r.Cfg.VMs, r.Cfg.Boot, r.ToBoot.Seconds(), r.Recovered, r.LastReown.Seconds(), r.LastRunning.Seconds(),
		r.LastReady.Seconds(), (r.LastReady - r.LastRunning).Seconds(), r.RecoverExit.Seconds(),
		r.Ready, r.Orphans, r.Duplicates, r.Leftover)
}
