package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/provider"
)

// Config is what a fleet keeps alive and how.
type Config struct {
	// Target is how many machines to keep ready.
	Target int
	// GPU is the GPU kind ("H100", ...); GPUCount GPUs per machine (default 1).
	GPU      string
	GPUCount int
	// Prefix names the machines: <prefix>-0 … <prefix>-<Target-1>, the
	// slots every replica shares (default "fleet").
	Prefix string
	// Providers restricts launches to these provider names; empty: all.
	Providers []string
	// LaunchTimeout bounds one launch (default 10m).
	LaunchTimeout time.Duration
	// HealthInterval is how often slots are reconciled and ready machines
	// health-checked (default 30s).
	HealthInterval time.Duration
	// RecoverInterval is how often Recover runs, taking over the VMs of
	// replicas whose leases have lapsed (default 15s).
	RecoverInterval time.Duration
	// SweepInterval is how often a Sweep dry run counts orphans (default
	// 5m; 0 after defaults means never).
	SweepInterval time.Duration
	// MaxReplace bounds how many machines this replica replaces at once
	// (default 2).
	MaxReplace int
	// Owner is this replica's lease owner id; empty: gpuprov's default
	// (host/pid/start/random). The recovering Provisioner uses Owner
	// with "+recover" appended.
	Owner string
	// Logger receives the fleet's logs; nil discards them.
	Logger *slog.Logger
}

func (c *Config) defaults() error {
	if c.Target < 0 {
		return fmt.Errorf("fleet: target %d is negative", c.Target)
	}
	if c.GPU == "" {
		return errors.New("fleet: no GPU kind")
	}
	if c.Prefix == "" {
		c.Prefix = "fleet"
	}
	if err := gpuprov.ValidateName(fmt.Sprintf("%s-%d", c.Prefix, max(c.Target-1, 0))); err != nil {
		return fmt.Errorf("fleet: prefix %q: %w", c.Prefix, err)
	}
	for _, d := range []struct {
		v   *time.Duration
		def time.Duration
	}{{&c.LaunchTimeout, 10 * time.Minute}, {&c.HealthInterval, 30 * time.Second}, {&c.RecoverInterval, 15 * time.Second}, {&c.SweepInterval, 5 * time.Minute}} {
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	if c.MaxReplace <= 0 {
		c.MaxReplace = 2
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Fleet keeps Target machines of one kind alive, as one replica among
// several sharing a journal. Slots are claimed through the journal: a
// launch of slot k by two replicas creates the VM once, and the other gets
// journal.ErrExists and leaves the slot alone.
//
// A replica runs two Provisioners with distinct lease owners: the driver
// launches, checks health and replaces; the recoverer only runs Recover.
// Because their owners differ, the recoverer never takes over what the
// driver is driving while the driver's heartbeat keeps its leases alive;
// it takes over a VM only once its lease lapses (a dead replica's, or its
// own driver's if that stalled). (One Provisioner doing both could drive a
// VM twice: the engine's Recover skips only VMs in a running Launch, not
// one being deleted or just created.)
type Fleet struct {
	cfg     Config
	j       journal.Journal
	p, rec  *gpuprov.Provisioner
	metrics *Metrics
	log     *slog.Logger

	mu      sync.Mutex
	busy    map[string]bool // slots with a launch or replacement under way here
	replace chan struct{}   // semaphore: replacements under way
	wg      sync.WaitGroup
}

// New builds a fleet replica on j. opts configure both Provisioners
// (providers, lease TTL, clock, logger); WithOwner is set by the fleet
// itself, and so are m's Engine.Options (its events and API calls). m may
// be nil.
func New(j journal.Journal, cfg Config, m *Metrics, opts ...gpuprov.Option) (*Fleet, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	f := &Fleet{cfg: cfg, j: j, metrics: m, log: cfg.Logger, busy: map[string]bool{}, replace: make(chan struct{}, cfg.MaxReplace)}
	build := func(owner string) (*gpuprov.Provisioner, error) {
		o := append([]gpuprov.Option{gpuprov.WithLogger(cfg.Logger)}, opts...)
		if owner != "" {
			o = append(o, gpuprov.WithOwner(owner))
		}
		if m != nil {
			o = append(o, m.Engine.Options()...)
		}
		return gpuprov.New(j, o...)
	}
	var err error
	if f.p, err = build(cfg.Owner); err != nil {
		return nil, err
	}
	recOwner := ""
	if cfg.Owner != "" {
		recOwner = cfg.Owner + "+recover"
	}
	if f.rec, err = build(recOwner); err != nil {
		f.p.Close()
		return nil, err
	}
	if m != nil {
		m.target.Set(float64(cfg.Target))
	}
	return f, nil
}

// Owners returns the lease owners of the driver and the recoverer.
func (f *Fleet) Owners() (driver, recoverer string) { return f.p.Owner(), f.rec.Owner() }

// slot returns the VM name of slot k.
func (f *Fleet) slot(k int) string { return fmt.Sprintf("%s-%d", f.cfg.Prefix, k) }

// Run keeps the fleet at its target until ctx ends, then waits for the
// launches, replacements and recoveries it started (they end with ctx: a
// launch cut short tears down what it started, and the slot is launched
// again by a replica still running) and closes its Provisioners.
func (f *Fleet) Run(ctx context.Context) error {
	defer f.p.Close()
	defer f.rec.Close()
	defer f.wg.Wait()
	f.every(ctx, f.cfg.RecoverInterval, f.recoverOnce)
	if f.cfg.SweepInterval > 0 {
		f.every(ctx, f.cfg.SweepInterval, f.sweepOnce)
	}
	t := time.NewTicker(f.cfg.HealthInterval)
	defer t.Stop()
	for {
		if err := f.reconcile(ctx); err != nil && ctx.Err() == nil {
			f.log.Warn("fleet: reconcile", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// every runs fn now and then every d until ctx ends, in a goroutine the
// fleet waits for.
func (f *Fleet) every(ctx context.Context, d time.Duration, fn func(context.Context)) {
	f.wg.Go(func() {
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			fn(ctx)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	})
}

func (f *Fleet) recoverOnce(ctx context.Context) {
	rep, err := f.rec.Recover(ctx)
	if err != nil {
		f.log.Warn("fleet: recover", "err", err)
		return
	}
	for vm, err := range rep.Resumed {
		f.log.Info("fleet: took over", "vm", vm, "err", err)
	}
}

func (f *Fleet) sweepOnce(ctx context.Context) {
	orphans, err := f.p.Sweep(ctx, gpuprov.SweepOptions{})
	if err != nil && ctx.Err() == nil {
		f.log.Warn("fleet: sweep", "err", err)
	}
	if f.metrics != nil && err == nil {
		f.metrics.setOrphans(orphans)
	}
}

// reconcile looks at every slot once: a free slot (no VM, or a deleted or
// failed one) is launched; a ready machine is health-checked and replaced
// when it is gone, preempted or unhealthy; a VM being driven is left to its
// driver (or to Recover, if that driver died).
func (f *Fleet) reconcile(ctx context.Context) error {
	vms, err := f.j.ListVMs(ctx, journal.ListOptions{})
	if err != nil {
		return err
	}
	byName := map[string]journal.VM{}
	for _, v := range vms {
		if strings.HasPrefix(v.Name, f.cfg.Prefix+"-") {
			byName[v.Name] = v
		}
	}
	for k := range f.cfg.Target {
		name := f.slot(k)
		v, ok := byName[name]
		if f.claimed(name) {
			continue
		}
		switch {
		case !ok || v.State.Terminal():
			f.start(ctx, name, func(ctx context.Context) { f.launch(ctx, name) })
		case v.State == journal.StateReady:
			f.check(ctx, v)
		}
	}
	return nil
}

// claimed reports whether this replica has work under way on slot name.
func (f *Fleet) claimed(name string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.busy[name]
}

// start runs work on slot name in a goroutine, marking the slot busy.
func (f *Fleet) start(ctx context.Context, name string, work func(context.Context)) {
	f.mu.Lock()
	f.busy[name] = true
	f.mu.Unlock()
	f.wg.Go(func() {
		defer func() {
			f.mu.Lock()
			delete(f.busy, name)
			f.mu.Unlock()
		}()
		work(ctx)
	})
}

// launch launches slot name; another replica's claim of it is not an error.
func (f *Fleet) launch(ctx context.Context, name string) {
	ctx, cancel := context.WithTimeout(ctx, f.cfg.LaunchTimeout)
	defer cancel()
	_, err := f.p.Launch(ctx, gpuprov.Request{Name: name, GPU: f.cfg.GPU, GPUCount: f.cfg.GPUCount,
		Providers: f.cfg.Providers, Timeout: f.cfg.LaunchTimeout})
	switch {
	case errors.Is(err, journal.ErrExists):
		f.log.Debug("fleet: slot claimed by another replica", "vm", name)
	case err != nil:
		f.log.Warn("fleet: launch", "vm", name, "err", err)
	}
}

// check diagnoses a ready machine and, when it is gone or unhealthy,
// replaces it if fewer than MaxReplace replacements are under way.
func (f *Fleet) check(ctx context.Context, v journal.VM) {
	d, err := f.p.Health(ctx, v.Name)
	if err != nil {
		f.log.Warn("fleet: health", "vm", v.Name, "err", err)
		return
	}
	verdict := d.Verdict()
	if verdict != provider.Gone && verdict != provider.Unhealthy {
		return
	}
	reason := string(verdict)
	for _, fd := range d.Findings {
		if fd.Severity == provider.Critical {
			reason = fd.Code
			break
		}
	}
	select {
	case f.replace <- struct{}{}:
	default:
		f.log.Info("fleet: replacement deferred (bound reached)", "vm", v.Name, "reason", reason)
		return
	}
	f.start(ctx, v.Name, func(ctx context.Context) {
		defer func() { <-f.replace }()
		f.replaceVM(ctx, v, reason)
	})
}

// replaceVM deletes the machine v and launches its slot again. It deletes
// only if the slot still holds the instance found unhealthy: another
// replica may have replaced it meanwhile.
func (f *Fleet) replaceVM(ctx context.Context, v journal.VM, reason string) {
	now, err := f.j.GetVM(ctx, v.Name)
	if err != nil || now.State != journal.StateReady || now.InstanceID != v.InstanceID {
		return
	}
	f.log.Info("fleet: replacing", "vm", v.Name, "instance", v.InstanceID, "reason", reason)
	if err := f.p.Delete(ctx, v.Name); err != nil {
		if !errors.Is(err, gpuprov.ErrBusy) {
			f.log.Warn("fleet: delete", "vm", v.Name, "err", err)
		}
		return
	}
	if f.metrics != nil {
		f.metrics.replaced.WithLabelValues(reason).Inc()
	}
	f.launch(ctx, v.Name)
}
