package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/journal"
	_ "github.com/org/gpuprov/journal/postgres"
	_ "github.com/org/gpuprov/journal/sqlite"
	_ "github.com/org/gpuprov/provider/aws"
	_ "github.com/org/gpuprov/provider/gcp"
	_ "github.com/org/gpuprov/provider/lambda"
	_ "github.com/org/gpuprov/provider/primeintellect"
	_ "github.com/org/gpuprov/provider/runpod"
	_ "github.com/org/gpuprov/provider/sim"
)

func main() {
	if err := run(context.Background(), os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "fleet:", err)
		os.Exit(1)
	}
}

// flags are the command line.
type flags struct {
	cfg                      Config
	journal, config          string
	simEndpoint, simKey, sim string
	listen                   string
	leaseTTL                 time.Duration
}

func parseFlags(args []string) (*flags, error) {
	f := &flags{}
	fs := flag.NewFlagSet("fleet", flag.ContinueOnError)
	fs.IntVar(&f.cfg.Target, "target", 2, "machines to keep ready")
	fs.StringVar(&f.cfg.GPU, "gpu", "H100", "GPU kind")
	fs.IntVar(&f.cfg.GPUCount, "gpu-count", 1, "GPUs per machine")
	fs.StringVar(&f.cfg.Prefix, "prefix", "fleet", "VM name prefix: machines are <prefix>-0 … <prefix>-<target-1>")
	fs.StringVar(&f.journal, "journal", "", "journal URL: postgres://… (shared by replicas) or sqlite:/path (one machine); default: the config's journal")
	fs.StringVar(&f.config, "config", "", "provider config: examples/gpuprov's TOML format ([name] tables, type = adapter)")
	fs.StringVar(&f.simEndpoint, "sim-endpoint", "", "instead of -config: a simulated cloud's URL (gpuprov sim serve)")
	fs.StringVar(&f.simKey, "sim-key", "", "the simulated cloud's API key (or env GPUPROV_SIM_KEY)")
	fs.StringVar(&f.sim, "sim-cloud", "sim-a", "the simulated cloud's name")
	fs.StringVar(&f.listen, "listen", "127.0.0.1:9464", "address of the /metrics endpoint")
	fs.DurationVar(&f.cfg.HealthInterval, "health-interval", 30*time.Second, "reconcile and health-check interval")
	fs.DurationVar(&f.cfg.RecoverInterval, "recover-interval", 15*time.Second, "Recover interval (takes over dead replicas' VMs)")
	fs.DurationVar(&f.cfg.SweepInterval, "sweep-interval", 5*time.Minute, "orphan count (Sweep dry run) interval")
	fs.DurationVar(&f.cfg.LaunchTimeout, "launch-timeout", 10*time.Minute, "bound on one launch")
	fs.IntVar(&f.cfg.MaxReplace, "max-replace", 2, "machines replaced at once, at most")
	fs.DurationVar(&f.leaseTTL, "lease-ttl", 30*time.Second, "VM lease TTL: a dead replica's VMs are taken over this long after its last heartbeat")
	fs.StringVar(&f.cfg.Owner, "owner", "", "lease owner id (default host/pid/start/random)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if f.simKey == "" {
		f.simKey = os.Getenv("GPUPROV_SIM_KEY")
	}
	return f, nil
}

// providerOptions returns the providers of the config file or of the sim
// flags, and the config file's journal URL.
func (f *flags) providerOptions() ([]gpuprov.Option, string, error) {
	switch {
	case f.config != "" && f.simEndpoint != "":
		return nil, "", errors.New("give -config or -sim-endpoint, not both")
	case f.config != "":
		pf, err := loadProviderFile(f.config)
		if err != nil {
			return nil, "", err
		}
		if len(pf.Providers) == 0 {
			return nil, "", fmt.Errorf("config %s names no provider", f.config)
		}
		return pf.options(), pf.Journal, nil
	case f.simEndpoint != "":
		pt := providerTable{Name: f.sim, Type: "sim", body: map[string]any{"endpoint": f.simEndpoint, "api_key": f.simKey, "cloud": f.sim}}
		return (&providerFile{Providers: []providerTable{pt}}).options(), "", nil
	}
	return nil, "", errors.New("no provider: give -config FILE or -sim-endpoint URL")
}

func run(ctx context.Context, args []string) error {
	f, err := parseFlags(args)
	if err != nil {
		return err
	}
	popts, cfgJournal, err := f.providerOptions()
	if err != nil {
		return err
	}
	if f.journal == "" {
		f.journal = cfgJournal
	}
	if f.journal == "" {
		return errors.New("no journal: give -journal postgres://… or sqlite:/path")
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	f.cfg.Logger = log
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()

	j, err := journal.Open(ctx, f.journal) // errors name the database, never its password
	if err != nil {
		return err
	}
	defer j.Close()
	topt, stopTracing, err := tracing(ctx)
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := stopTracing(sctx); err != nil { // the spans still queued are lost
			log.Warn("fleet: flushing traces", "err", err)
		}
	}()
	if topt != nil {
		popts = append(popts, topt)
		log.Info("fleet: exporting traces over OTLP")
	}
	m := NewMetrics(j)
	fl, err := New(j, f.cfg, m, append(popts, gpuprov.WithLeaseTTL(f.leaseTTL))...)
	if err != nil {
		return err
	}
	driver, recoverer := fl.Owners()
	log.Info("fleet: started", "target", f.cfg.Target, "gpu", f.cfg.GPU, "installation", j.Installation(), "owner", driver, "recover_owner", recoverer)

	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	log.Info("fleet: metrics", "url", "http://"+ln.Addr().String()+"/metrics")

	runErr := fl.Run(ctx)
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx) // stopping: a metrics scrape cut short loses nothing
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return errors.Join(runErr, err)
	}
	return runErr
}
