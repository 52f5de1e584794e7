package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/gpu"
	"github.com/org/gpuprov/journal/sqlite"
	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/sim"
	"github.com/org/gpuprov/provider/sim/simserver"
	"github.com/org/gpuprov/ssh"
)

// s6Config is scenario S6: what ranking offers by expected cost buys when
// the cheapest offer's machines fail GPU acceptance half the time. Two
// accounts, one offer each: "cheap" (sim-b, PriceCheap) boots in BootCheap
// and fails acceptance with probability FailRate; "good" (sim-a,
// PriceGood) boots in BootGood and always passes. Launches run one after
// another on one journal, each deleted once ready; every launch's time to
// a usable machine (Launch called → ready), its attempts and the time
// billed on refused machines are measured, per arm.
type s6Config struct {
	Launches            int
	FailRate            float64
	PriceCheap          float64
	PriceGood           float64
	BootCheap, BootGood time.Duration
	Horizon             time.Duration // Request.RankHorizon
	OfferBlock          time.Duration // how long a refused offer is blocked (WithAcceptanceBlocks)
	Rank                gpuprov.Rank
	Seed                uint64
	Dir                 string
}

// defaultS6: the sim runs about 100 times faster than a cloud (a 2 s boot
// for a 3-minute one), so the horizon is 36 s for an hour's run.
func defaultS6() s6Config {
	return s6Config{Launches: 50, FailRate: 0.5, PriceCheap: 2.00, PriceGood: 2.10,
		BootCheap: 2 * time.Second, BootGood: 600 * time.Millisecond, Horizon: 36 * time.Second,
		OfferBlock: gpuprov.DefaultAcceptanceOfferBlock, Seed: 1}
}

type s6Result struct {
	cfg            s6Config
	toUsable       []time.Duration
	attempts       int
	refused        int
	wasted         time.Duration // time billed on refused machines (create sent → torn down)
	onCheap        int
	costOfRefusals float64
}

func runS6(ctx context.Context, cfg s6Config) (*s6Result, error) {
	opts := simserver.Options{StateDir: filepath.Join(cfg.Dir, "sim"), Seed: cfg.Seed}
	for _, c := range []struct {
		name, id string
		price    float64
		boot     time.Duration
		faults   simserver.Faults
	}{
		{"sim-a", "good", cfg.PriceGood, cfg.BootGood, simserver.Faults{}},
		{"sim-b", "cheap", cfg.PriceCheap, cfg.BootCheap, simserver.Faults{GPUFaults: []simserver.GPUFault{{Kind: simserver.GPUECC, Rate: cfg.FailRate}}}},
	} {
		t := simserver.Timing{APILatency: simserver.Duration(2 * time.Millisecond), BootTime: simserver.Duration(c.boot),
			DeleteTime: simserver.Duration(50 * time.Millisecond)}
		opts.Clouds = append(opts.Clouds, simserver.CloudConfig{Name: c.name, Timing: &t, Faults: c.faults,
			Offers: []simserver.Offer{{ID: c.id, Region: "us-east", Zone: "us-east-1a", InstanceType: "h100." + c.id, GPU: "H100-80GB",
				GPUCount: 1, GPUMemoryGB: 80, VCPUs: 26, MemoryGB: 200, PricePerHour: c.price, Availability: "high"}}})
	}
	srv, err := simserver.Start(opts)
	if err != nil {
		return nil, err
	}
	defer srv.Close()
	db, err := sqlite.Open(ctx, filepath.Join(cfg.Dir, "journal.db"))
	if err != nil {
		return nil, err
	}
	defer db.Close()
	key, err := ssh.GenerateKey()
	if err != nil {
		return nil, err
	}
	var provs []provider.CloudProvider
	for _, c := range srv.Clouds() {
		p, err := sim.New(sim.Config{Endpoint: srv.URL(), Cloud: c, APIKey: srv.APIKey(c), PollInterval: 50 * time.Millisecond,
			ConsistencyWindow: 200 * time.Millisecond, BootTimeout: time.Minute, DeleteTimeout: time.Minute, RequestTimeout: 10 * time.Second},
			sim.WithName(c), sim.WithInstallation(db.Installation()))
		if err != nil {
			return nil, err
		}
		provs = append(provs, p)
	}
	p, err := gpuprov.New(db, gpuprov.WithProvider(provs...), gpuprov.WithSSHKey(key.Signer), gpuprov.WithSSH("root", nil, true),
		gpuprov.WithAcceptance(gpu.Options{}), gpuprov.WithAcceptanceBlocks(gpuprov.DefaultAcceptanceHostBlock, cfg.OfferBlock),
		gpuprov.WithBackoff(20*time.Millisecond, 200*time.Millisecond, cfg.Seed))
	if err != nil {
		return nil, err
	}
	defer p.Close()
	res := &s6Result{cfg: cfg}
	for i := range cfg.Launches {
		name := fmt.Sprintf("rank-%d", i)
		start := time.Now()
		vm, err := p.Launch(ctx, gpuprov.Request{Name: name, GPU: "H100-80GB", Timeout: 5 * time.Minute, Rank: cfg.Rank, RankHorizon: cfg.Horizon})
		if err != nil {
			return nil, fmt.Errorf("launch %d: %w", i, err)
		}
		res.toUsable = append(res.toUsable, time.Since(start))
		if vm.InstanceType == "h100.cheap" {
			res.onCheap++
		}
		as, err := db.Attempts(ctx, name)
		if err != nil {
			return nil, err
		}
		res.attempts += len(as)
		for _, a := range as {
			if a.ErrorKind == gpuprov.KindAccept {
				res.refused++
				billed := a.EndedAt.Sub(a.CreateSent)
				res.wasted += billed
				res.costOfRefusals += cfg.PriceCheap * billed.Hours()
			}
		}
		if err := p.Delete(ctx, name); err != nil {
			return nil, fmt.Errorf("delete %s: %w", name, err)
		}
	}
	return res, nil
}

func (r *s6Result) print() {
	rank := string(r.cfg.Rank)
	if rank == "" {
		rank = "price"
	}
	sorted := slices.Clone(r.toUsable)
	slices.Sort(sorted)
	var sum time.Duration
	for _, d := range sorted {
		sum += d
	}
	n := len(sorted)
	fmt.Printf("S6 rank=%s offer-block=%v launches=%d: time to a usable machine mean %.2fs p50 %.2fs p90 %.2fs; "+
		"%d attempts, %d machines refused (%.1fs billed on them), %d of %d ready on the cheap offer\n",
		rank, r.cfg.OfferBlock, n, (sum / time.Duration(n)).Seconds(), percentile(sorted, 50).Seconds(), percentile(sorted, 90).Seconds(),
		r.attempts, r.refused, r.wasted.Seconds(), r.onCheap, n)
}

func cmdS6(ctx context.Context, args []string) error {
	cfg := defaultS6()
	fs := flag.NewFlagSet("s6", flag.ExitOnError)
	fs.IntVar(&cfg.Launches, "launches", cfg.Launches, "launches per arm, one after another")
	fs.Float64Var(&cfg.FailRate, "fail-rate", cfg.FailRate, "the cheap offer's share of machines that fail acceptance")
	fs.DurationVar(&cfg.Horizon, "horizon", cfg.Horizon, "Request.RankHorizon")
	arms := fs.String("arms", "price,expected-cost", "the rankings to measure, comma-separated")
	blocks := fs.String("offer-blocks", "1ms,30m", "the offer blocks after a refusal to measure each ranking with, comma-separated")
	fs.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "the sim's seed (which machines fail)")
	_ = fs.Parse(args)
	for _, b := range strings.Split(*blocks, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(b))
		if err != nil {
			return err
		}
		for _, arm := range strings.Split(*arms, ",") {
			c := cfg
			c.OfferBlock, c.Rank = d, gpuprov.Rank(strings.TrimSpace(arm))
			if c.Rank == "price" {
				c.Rank = gpuprov.RankPrice
			}
			dir, err := os.MkdirTemp("", "gpuprov-s6-*")
			if err != nil {
				return err
			}
			c.Dir = dir
			res, err := runS6(ctx, c)
			os.RemoveAll(dir)
			if err != nil {
				return err
			}
			res.print()
		}
	}
	return nil
}
