package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
)

func main() {
	if role := os.Getenv(roleEnv); role != "" {
		os.Exit(runRole(role, os.Args[1:]))
	}
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var err error
	switch os.Args[1] {
	case "s1":
		err = cmdS1(ctx, os.Args[2:])
	case "s2":
		err = cmdS2(ctx, os.Args[2:])
	case "s3":
		err = cmdS3(ctx, os.Args[2:])
	case "s5":
		err = cmdS5(ctx, os.Args[2:])
	case "s6":
		err = cmdS6(ctx, os.Args[2:])
	default:
		usage()
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "scale:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: scale s1|s2|s3|s5|s6 [flags]   (see go doc ./examples/scale)")
}

func cmdS1(ctx context.Context, args []string) error {
	cfg := defaultS1()
	fs := flag.NewFlagSet("s1", flag.ExitOnError)
	fs.IntVar(&cfg.VMs, "vms", cfg.VMs, "VMs to launch")
	fs.Float64Var(&cfg.RateLimit, "rate", cfg.RateLimit, "API requests per second per account")
	fs.IntVar(&cfg.Burst, "burst", cfg.Burst, "the adapter's token bucket burst")
	fs.DurationVar(&cfg.Poll, "poll", cfg.Poll, "the adapter's poll interval")
	fs.DurationVar(&cfg.Boot, "boot", cfg.Boot, "boot time")
	fs.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "fault seed")
	fs.BoolVar(&cfg.Teardown, "teardown", false, "delete every VM afterwards and count what is left")
	fs.Func("stockout-ranks", "per cloud, the rank of its stocked-out offer (0: cheapest; default 0,1)", func(v string) error {
		cfg.StockoutRanks = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil {
				return err
			}
			cfg.StockoutRanks = append(cfg.StockoutRanks, n)
		}
		return nil
	})
	runs := fs.Int("runs", 1, "runs (each in a fresh sim and journal)")
	_ = fs.Parse(args)
	for i := range *runs {
		dir, err := os.MkdirTemp("", "gpuprov-s1-*")
		if err != nil {
			return err
		}
		cfg.Dir = dir
		cfg.Seed += uint64(i)
		res, err := runS1(ctx, cfg)
		os.RemoveAll(dir)
		if err != nil {
			return err
		}
		fmt.Print(res.Report())
	}
	return nil
}

func cmdS2(ctx context.Context, args []string) error {
	cfg := defaultS2()
	fs := flag.NewFlagSet("s2", flag.ExitOnError)
	fs.IntVar(&cfg.VMs, "vms", cfg.VMs, "VMs to launch")
	fs.IntVar(&cfg.Stockouts, "stockouts", cfg.Stockouts, "stockouts each VM meets")
	fs.IntVar(&cfg.Concurrency, "concurrency", cfg.Concurrency, "VMs launched at a time")
	runs := fs.Int("runs", 1, "runs")
	_ = fs.Parse(args)
	for range *runs {
		dir, err := os.MkdirTemp("", "gpuprov-s2-*")
		if err != nil {
			return err
		}
		cfg.Dir = dir
		res, err := runS2(ctx, cfg)
		os.RemoveAll(dir)
		if err != nil {
			return err
		}
		fmt.Print(res.Report())
	}
	return nil
}

func cmdS3(ctx context.Context, args []string) error {
	cfg := defaultS3()
	fs := flag.NewFlagSet("s3", flag.ExitOnError)
	fs.IntVar(&cfg.VMs, "vms", cfg.VMs, "VMs to launch")
	fs.DurationVar(&cfg.Boot, "boot", cfg.Boot, "boot time (every VM must reach boot before the first boot ends)")
	fs.DurationVar(&cfg.Poll, "poll", cfg.Poll, "the adapter's poll interval")
	fs.DurationVar(&cfg.SaveInterval, "save-interval", cfg.SaveInterval, "the sim's state-file save interval (0: after every mutation)")
	runs := fs.Int("runs", 1, "runs")
	_ = fs.Parse(args)
	for range *runs {
		dir, err := os.MkdirTemp("", "gpuprov-s3-*")
		if err != nil {
			return err
		}
		cfg.Dir = dir
		res, err := runS3(ctx, cfg)
		os.RemoveAll(dir)
		if err != nil {
			return err
		}
		fmt.Print(res.Report())
	}
	return nil
}

func cmdS5(ctx context.Context, args []string) error {
	cfg := defaultS5()
	fs := flag.NewFlagSet("s5", flag.ExitOnError)
	fs.IntVar(&cfg.VMs, "vms", cfg.VMs, "VMs to launch, split evenly over the replicas")
	fs.IntVar(&cfg.Replicas, "replicas", cfg.Replicas, "Provisioners on the shared journal, each with its own adapter and pacer")
	fs.Float64Var(&cfg.RateLimit, "rate", cfg.RateLimit, "the account's API requests per second")
	fs.IntVar(&cfg.Burst, "burst", cfg.Burst, "each replica's adapter token bucket burst")
	fs.DurationVar(&cfg.Boot, "boot", cfg.Boot, "boot time")
	fs.DurationVar(&cfg.Stagger, "stagger", cfg.Stagger, "start replica i this much after replica i-1 (0: all at once)")
	fs.StringVar(&cfg.Journal, "journal", "", "PostgreSQL URL to make the journal's schema in (default: a private server)")
	fs.BoolVar(&cfg.Share, "share", cfg.Share, "let the replicas share the account's rate (false hides journal.Members: the baseline)")
	fs.BoolVar(&cfg.Timeline, "timeline", false, "report every second's requests and 429s")
	runs := fs.Int("runs", 1, "runs (each in a fresh sim and journal)")
	_ = fs.Parse(args)
	for i := range *runs {
		cfg.Seed = defaultS5().Seed + uint64(i)
		res, err := runS5(ctx, cfg)
		if err != nil {
			return err
		}
		fmt.Print(res.Report())
	}
	return nil
}
