package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/gpu"
	"github.com/org/gpuprov/k3s"
	"github.com/org/gpuprov/provider"
)

// defaultWaitTimeout bounds `up --wait` when --timeout is not given.
const defaultWaitTimeout = 24 * time.Hour

type upFlags struct {
	name        string
	gpu         string
	count       int
	maxPrice    float64
	spot        string
	providers   []string
	regions     []string
	timeout     time.Duration
	nodes       int
	minNodes    int
	kubeconfig  string
	placement   string
	wait        bool
	waitPoll    time.Duration
	ttl         time.Duration
	maxCost     float64
	minVCPUs    int
	minMemory   float64
	diskGB      int
	labels      []string // KEY=VALUE
	allowFrom   []string // CIDRs
	rank        string
	gpuOrder    string // --gpu-order
	reserved    string
	reservation string
	flexStart   time.Duration
	onIntr      string // --on-interruption
	idleTimeout time.Duration
	volumes     []string // NAME:SIZE_GB:MOUNT_PATH[:delete]
	idleBelow   int
	busyCmd     string
	block       time.Duration // a capacity block's window
	blockFee    float64       // its most upfront fee, USD
	blockCount  int
	blockWithin time.Duration
	noAccept    bool
	dcgm        int
	acceptCmd   string
	ignore      []string // acceptance checks that only warn

	// changed reports whether the user typed a flag: only an absent flag
	// takes its default, a typed zero is refused.
	changed func(name string) bool
}

func newUpCmd(e *env) *cobra.Command {
	var f upFlags
	cmd := &cobra.Command{
		Use:   "up --gpu GPU[,GPU...] [--name NAME] [--nodes N]",
		Short: "Launch one GPU VM, or a k3s cluster with --nodes",
		Long: `Launch one GPU VM and wait until it is ready (reachable over SSH), or with
--nodes N a k3s cluster of N such VMs named NAME-0 … NAME-(N-1).

Offers are planned across every configured provider (or those given with
--provider), cheapest first; stockouts fail over to the next offer. --gpu may
name alternatives (--gpu h100,a100-80gb, with a count per model where they
differ: --gpu h100:1,a100-80gb:2): the offers of every alternative are planned
and tried in one launch, by price across all of them, or with --gpu-order
given every offer of the first before the second's. Ctrl-C
cancels the launch and tears down what it started; a second Ctrl-C exits at
once and leaves the rest to 'gpuprov recover'.

With --wait, a launch that finds every offer stocked out (or blocked) does not
fail: it waits for capacity, replanning every --wait-poll and whenever a
stockout block expires or a provider's listing shows the offer back in stock,
until --timeout (24h by default with --wait). A killed wait is resumed by
'gpuprov recover'. A request that no offer fits at all (a --max-price below
every price, a --region nobody has) fails at once, naming the filter.

With --nodes, --placement keeps the cluster together: same-region or
same-zone puts every node in one provider's region or zone, and compact in one
zone and one placement group (where the provider has them: aws, gcp, sim). A
placed cluster is all or nothing: when a node meets a stockout, every node is
torn down and the whole cluster is launched again in the next location.

--ttl and --max-cost put the VM on a leash: it is deleted once it has been
ready that long, or once its cost reaches the cap, by whichever gpuprov
process next runs 'gpuprov recover' (or a service with the reaper on), even
if this one is gone. 'gpuprov list' shows the time left.`,
		Example: `  gpuprov up --gpu h100 --name train-1
  gpuprov up --gpu h100 --count 8 --max-price 25 --provider aws --region us-east-1
  gpuprov up --gpu h100:1,a100-80gb:2 --gpu-order given --name train-2
  gpuprov up --gpu h100 --nodes 3 --name k --kubeconfig ./k.yaml
  gpuprov up --gpu h100 --count 8 --nodes 4 --placement compact --name train
  gpuprov up --gpu h100 --count 8 --wait --timeout 12h --ttl 8h --max-cost 200`,
		Args: cobra.NoArgs,
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			f.changed = cmd.Flags().Changed
			return up(cmd.Context(), e, &f)
		}),
	}
	fl := cmd.Flags()
	fl.StringVar(&f.name, "name", "", "VM (or cluster) name; default <gpu>-<random>")
	fl.StringVar(&f.gpu, "gpu", "", "GPU model or alias (h100, A100-80GB, l4, ...), or alternatives h100,a100-80gb, each with an optional :COUNT (required)")
	fl.IntVar(&f.count, "count", 1, "GPUs per machine (with --gpu alternatives: for those without :COUNT)")
	fl.Float64Var(&f.maxPrice, "max-price", 0, "highest price per machine-hour in USD (default: no limit)")
	fl.StringVar(&f.spot, "spot", "no", "spot capacity: no, yes (spot only) or any (either, cheapest first)")
	fl.Lookup("spot").NoOptDefVal = "yes"
	fl.StringVar(&f.onIntr, "on-interruption", "", "with --spot: replace (launch a replacement at the cloud's notice, delete the old machine once it is ready) or replace-at-reclaim (keep the old one until the cloud takes it); a process running `gpuprov recover --watch` acts on it")
	fl.StringArrayVar(&f.providers, "provider", nil, "restrict to this provider (repeatable)")
	fl.StringArrayVar(&f.regions, "region", nil, "restrict to this region (repeatable; default: default_regions from the config)")
	fl.DurationVar(&f.timeout, "timeout", gpuprov.DefaultTimeout, "give up (and tear down) after this long")
	fl.IntVar(&f.nodes, "nodes", 0, "launch a k3s cluster of N nodes (1 to 1000)")
	fl.IntVar(&f.minNodes, "min-nodes", 0, "with --nodes: how many must be ready (default: all)")
	fl.StringVar(&f.kubeconfig, "kubeconfig", "", "with --nodes: write the cluster's kubeconfig to PATH (mode 0600)")
	fl.StringVar(&f.placement, "placement", string(gpuprov.PlacementAny), "with --nodes: any, same-region, same-zone or compact (one zone, one placement group; the cluster moves as a whole on a stockout)")
	addNeedsFlags(fl, &f)
	fl.BoolVar(&f.wait, "wait", false, "wait for capacity instead of failing when every offer is stocked out (until --timeout, 24h by default with --wait)")
	fl.DurationVar(&f.waitPoll, "wait-poll", gpuprov.DefaultCapacityPoll, "with --wait: how often to replan while waiting")
	fl.DurationVar(&f.ttl, "ttl", 0, "delete the VM once it has been ready this long (default: never)")
	fl.Float64Var(&f.maxCost, "max-cost", 0, "delete the VM once its cost reaches this many USD (default: no cap)")
	fl.BoolVar(&f.noAccept, "no-accept", false, "skip the GPU acceptance checks: ready once SSH answers")
	fl.IntVar(&f.dcgm, "dcgm", 0, "also run dcgmi diag -r N (1 or 2) in acceptance, where the machine has DCGM")
	fl.StringArrayVar(&f.volumes, "volume", nil, "NAME:SIZE_GB:MOUNT_PATH[:delete] a persistent volume to mount (repeatable): made in the VM's zone if new (give its size), else the launch goes where it is (size may be empty); kept after the VM unless :delete (see docs/volumes.md)")
	fl.DurationVar(&f.idleTimeout, "idle-timeout", 0, "delete the VM once its GPUs have been idle this long, as sampled by a process running `gpuprov recover --watch` (see docs/idle.md)")
	fl.IntVar(&f.idleBelow, "idle-below", 0, "with --idle-timeout: the GPU utilization, in percent, under which a GPU is idle (default 5)")
	fl.StringVar(&f.busyCmd, "busy-command", "", "with --idle-timeout: a command that exits 0 on the machine while it is busy whatever its GPUs show (never a secret: it is a remote command line)")
	fl.StringVar(&f.acceptCmd, "accept-command", "", "a command that must exit 0 on the machine before it is ready (never a secret: it is a remote command line)")
	fl.StringArrayVar(&f.ignore, "accept-ignore", nil, "an acceptance check whose failure only warns (repeatable: "+strings.Join(gpu.Checks, ", ")+")")
	_ = cmd.RegisterFlagCompletionFunc("gpu", cobra.FixedCompletions(provider.GPUNames(), cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("placement", cobra.FixedCompletions(placementNames(), cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("spot", cobra.FixedCompletions([]string{"no", "yes", "any"}, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("on-interruption", cobra.FixedCompletions([]string{string(gpuprov.ReplaceWhenReady), string(gpuprov.ReplaceAtReclaim)}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// request builds and validates the request before anything is opened or
// created: a bad flag is exit 2 with nothing on disk and nothing in a cloud.
func (f *upFlags) request(cfg *fileConfig) (gpuprov.Request, error) {
	req := gpuprov.Request{
		Name: f.name, GPUCount: f.count, MaxPricePerHour: f.maxPrice, // GPU or GPUs: f.gpus
		Providers: f.providers, Regions: f.regions, Timeout: f.timeout,
		WaitForCapacity: f.wait, TTL: f.ttl, MaxCost: f.maxCost,
		Acceptance: gpuprov.Acceptance{Skip: f.noAccept, DCGM: f.dcgm, Command: f.acceptCmd, Ignore: f.ignore},
		Rank:       gpuprov.Rank(f.rank),
		GPUOrder:   gpuprov.GPUOrder(f.gpuOrder),
		Reserved:   provider.ReservedPolicy(f.reserved), Reservation: f.reservation, FlexStart: f.flexStart,
		OnInterruption: gpuprov.InterruptionPolicy(f.onIntr),
		IdleTimeout:    f.idleTimeout, IdleBelow: f.idleBelow, BusyCommand: f.busyCmd,
		MinVCPUs: f.minVCPUs, MinMemoryGB: f.minMemory, DiskGB: f.diskGB, SourceRanges: f.allowFrom,
	}
	for _, spec := range f.volumes {
		v, err := parseVolumeFlag(spec)
		if err != nil {
			return req, err
		}
		req.Volumes = append(req.Volumes, v)
	}
	for _, kv := range f.labels {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return req, usageErrorf("--label %q: want KEY=VALUE", kv)
		}
		if _, dup := req.Labels[k]; dup {
			return req, usageErrorf("--label %s given twice", k)
		}
		if req.Labels == nil {
			req.Labels = map[string]string{}
		}
		req.Labels[k] = v
	}
	if f.block > 0 {
		req.Block = &gpuprov.BlockRequest{Duration: f.block, MaxUpfrontUSD: f.blockFee, Count: f.blockCount, StartWithin: f.blockWithin}
	}
	if f.wait && (f.changed == nil || !f.changed("timeout")) {
		req.Timeout = defaultWaitTimeout
	}
	if len(req.Regions) == 0 {
		req.Regions = cfg.DefaultRegions
	}
	if err := f.checkNumbers(); err != nil {
		return req, err
	}
	switch f.spot {
	case "no", "false", "":
		req.Spot = provider.OnDemand
	case "yes", "true", "spot":
		req.Spot = provider.SpotOnly
	case "any":
		req.Spot = provider.SpotOrOnDemand
	default:
		return req, usageErrorf("--spot %q: want no, yes or any", f.spot)
	}
	if err := f.gpus(&req); err != nil {
		return req, err
	}
	if len(req.GPUs) > 0 && f.nodes > 0 {
		return req, usageErrorf("--gpu %q with --nodes: a cluster's nodes share one GPU model; name one", f.gpu)
	}
	first := req.Alternatives()[0]
	canon, err := provider.CanonicalGPU(first.GPU)
	if err != nil {
		field := "gpu"
		if len(req.GPUs) > 0 {
			field = "gpus[0]"
		}
		return req, &gpuprov.RequestError{Field: field, Problem: err.Error()}
	}
	if req.Name == "" {
		var b [3]byte
		_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
		req.Name = strings.ToLower(strings.SplitN(canon, "-", 2)[0]) + "-" + hex.EncodeToString(b[:])
	}
	name := req.Name
	if f.nodes > 0 {
		name = fmt.Sprintf("%s-%d", req.Name, f.nodes-1) // the longest node name must be valid too
	}
	if err := gpuprov.ValidateName(name); err != nil {
		return req, err
	}
	if f.kubeconfig != "" && f.nodes == 0 {
		return req, usageErrorf("--kubeconfig needs --nodes")
	}
	var names []string
	for _, pc := range cfg.Providers {
		names = append(names, pc.Name)
	}
	if err := req.Validate(names); err != nil {
		return req, err
	}
	return req, nil
}

// gpus puts --gpu into req: one GPU (GPU, GPUCount from --count), or
// alternatives separated by commas (GPUs), each GPU[:COUNT]. One GPU with
// a count is the single form with that count, which clusters take too.
func (f *upFlags) gpus(req *gpuprov.Request) error {
	if strings.TrimSpace(f.gpu) == "" {
		return usageErrorf("--gpu is required (known: %s)", strings.Join(provider.GPUNames(), ", "))
	}
	var alts []gpuprov.GPUChoice
	for i, part := range strings.Split(f.gpu, ",") {
		name, count, hasCount := strings.Cut(strings.TrimSpace(part), ":")
		if name == "" {
			return usageErrorf("--gpu %q: alternative %d has no GPU; want GPU[:COUNT],GPU[:COUNT],... such as h100:1,a100-80gb:2", f.gpu, i+1)
		}
		c := gpuprov.GPUChoice{GPU: name}
		if hasCount {
			n, err := strconv.Atoi(count)
			if err != nil || n < 1 || n > 64 {
				return usageErrorf("--gpu %q: %q is not a count of %s: want 1 to 64 GPUs, as in %s:2", f.gpu, count, name, name)
			}
			c.Count = n
		}
		alts = append(alts, c)
	}
	if len(alts) == 1 {
		req.GPU = alts[0].GPU
		req.GPUCount = cmp.Or(alts[0].Count, req.GPUCount)
		return nil
	}
	req.GPU, req.GPUs = "", alts
	return nil
}

// choicesText is a request's GPUs as the CLI prints them, joined by sep:
// "H100-80GB×1 or A100-80GB×2".
func choicesText(r gpuprov.Request, sep string) string {
	var parts []string
	for _, c := range r.Alternatives() {
		parts = append(parts, c.String())
	}
	return strings.Join(parts, sep)
}

// addNeedsFlags adds what a job needs of the machine, for up and offers.
func addNeedsFlags(fl *pflag.FlagSet, f *upFlags) {
	fl.IntVar(&f.minVCPUs, "min-vcpus", 0, "at least this many vCPUs (default: any)")
	fl.Float64Var(&f.minMemory, "min-memory", 0, "at least this much memory, in GB (default: any)")
	fl.IntVar(&f.diskGB, "disk", 0, "boot disk of this size in GB (default: the provider's)")
	fl.StringArrayVar(&f.allowFrom, "allow-from", nil, "CIDR that may connect to SSH and the open ports (repeatable; default: each provider's source_ranges, else anywhere)")
	fl.StringArrayVar(&f.labels, "label", nil, "KEY=VALUE label on every resource of the VM (repeatable; lowercase, at most 63 characters)")
	fl.StringVar(&f.rank, "rank", "price", "order offers by list price, or by expected-cost of a usable machine (from the journal's history of each offer)")
	fl.StringVar(&f.gpuOrder, "gpu-order", "price", "with --gpu alternatives: price (every alternative's offers ranked together by --rank) or given (every offer of the first alternative before the second's)")
	fl.StringVar(&f.reserved, "reserved", "", "capacity the account holds (reservations): empty to use it first where it fits, require to use nothing else, forbid to leave it alone")
	fl.DurationVar(&f.flexStart, "flex-start", 0, "queue for capacity (GCP flex-start, the sim's flex queue) and run at most this long: the launch waits in the cloud's queue until --timeout")
	fl.DurationVar(&f.block, "block", 0, "buy a capacity block of this window (AWS Capacity Blocks for ML, the sim's blocks) and launch into it: paid upfront, not refunded; needs --block-max-fee")
	fl.Float64Var(&f.blockFee, "block-max-fee", 0, "with --block: the most the block may cost upfront, in USD (the opt-in to buying it)")
	fl.IntVar(&f.blockCount, "block-count", 0, "with --block: instances the block holds (default 1; launch more VMs into it with --reservation)")
	fl.DurationVar(&f.blockWithin, "block-start-within", 0, "with --block: the block must start within this long (default: any start sold); --timeout must cover it")
	fl.StringVar(&f.reservation, "reservation", "", "launch into this reservation (its id or name); a targeted one is used only when named")
}

// checkNumbers refuses a numeric flag the user typed with a value out of
// range, zero included: only an absent flag takes its default, so that
// `--count 0` is an error and not a silent 1-GPU machine.
func (f *upFlags) checkNumbers() error {
	typed := func(name string) bool { return f.changed != nil && f.changed(name) }
	switch {
	case typed("count") && (f.count < 1 || f.count > 64):
		return usageErrorf("--count %d: want 1 to 64 GPUs per machine", f.count)
	case typed("max-price") && !(f.maxPrice > 0 && !math.IsInf(f.maxPrice, 0)):
		return usageErrorf("--max-price %v: want a positive price in USD per machine-hour (leave the flag out for no limit)", f.maxPrice)
	case typed("timeout") && f.timeout <= 0:
		return usageErrorf("--timeout %v: want a positive duration such as 20m", f.timeout)
	case typed("nodes") && (f.nodes < 1 || f.nodes > 1000):
		return usageErrorf("--nodes %d: want 1 to 1000 nodes", f.nodes)
	case typed("min-nodes") && !typed("nodes"):
		return usageErrorf("--min-nodes needs --nodes")
	case typed("min-nodes") && (f.minNodes < 1 || f.minNodes > f.nodes):
		return usageErrorf("--min-nodes %d: want 1 to --nodes (%d)", f.minNodes, f.nodes)
	case typed("placement") && !typed("nodes"):
		return usageErrorf("--placement needs --nodes")
	case typed("placement") && !slices.Contains(placementNames(), f.placement):
		return usageErrorf("--placement %q: want one of %s", f.placement, strings.Join(placementNames(), ", "))
	case typed("placement") && f.placement != string(gpuprov.PlacementAny) && typed("min-nodes") && f.minNodes != f.nodes:
		return usageErrorf("--min-nodes %d: a cluster placed %s is all or nothing", f.minNodes, f.placement)
	case typed("wait-poll") && !f.wait:
		return usageErrorf("--wait-poll needs --wait")
	case typed("wait-poll") && f.waitPoll <= 0:
		return usageErrorf("--wait-poll %v: want a positive duration such as 30s", f.waitPoll)
	case typed("min-vcpus") && f.minVCPUs < 1:
		return usageErrorf("--min-vcpus %d: want 1 or more (leave the flag out for any)", f.minVCPUs)
	case typed("min-memory") && !(f.minMemory > 0 && !math.IsInf(f.minMemory, 0)):
		return usageErrorf("--min-memory %v: want a positive number of GB (leave the flag out for any)", f.minMemory)
	case typed("disk") && (f.diskGB < 1 || f.diskGB > 65536):
		return usageErrorf("--disk %d: want 1 to 65536 GB (leave the flag out for the provider's default)", f.diskGB)
	case typed("ttl") && f.ttl <= 0:
		return usageErrorf("--ttl %v: want a positive duration such as 8h (leave the flag out for no limit)", f.ttl)
	case (typed("block-max-fee") || typed("block-count") || typed("block-start-within")) && !typed("block"):
		return usageErrorf("--block-max-fee, --block-count and --block-start-within need --block")
	case typed("block") && f.block <= 0:
		return usageErrorf("--block %v: want a positive window such as 24h", f.block)
	case typed("idle-timeout") && f.idleTimeout <= 0:
		return usageErrorf("--idle-timeout %v: want a positive duration such as 30m (leave the flag out to keep idle machines)", f.idleTimeout)
	case typed("flex-start") && f.flexStart <= 0:
		return usageErrorf("--flex-start %v: want a positive run duration such as 4h (leave the flag out to not queue)", f.flexStart)
	case typed("max-cost") && !(f.maxCost > 0 && !math.IsInf(f.maxCost, 0)):
		return usageErrorf("--max-cost %v: want a positive amount of USD (leave the flag out for no cap)", f.maxCost)
	}
	return nil
}

func up(ctx context.Context, e *env, f *upFlags) error {
	cfg, err := loadConfig(e.configPath)
	if err != nil {
		return err
	}
	if err := cfg.requireProviders(e.configPath); err != nil {
		return err
	}
	req, err := f.request(cfg)
	if err != nil {
		return err
	}
	if err := cfg.check(); err != nil {
		return err
	}
	pr := newProgress(e.stdout, isTTY(e.stdout))
	so := sessionOptions{events: []func(gpuprov.Event){pr.Sink}}
	if f.wait {
		so.extra = append(so.extra, gpuprov.WithCapacityPoll(f.waitPoll))
	}
	if f.nodes > 0 {
		so.joiner = newK3sJoiner(k3sConfig())
		req.OpenPorts = k3s.Ports(k3sConfig().Network)
	}
	s, err := e.openChecked(ctx, cfg, so)
	if err != nil {
		return err
	}
	defer s.Close()

	ctx, intr := interruptible(ctx, pr,
		"interrupted: tearing down what this command started (Ctrl-C again to leave it to `gpuprov recover`)")
	defer intr.stop()
	if f.nodes == 0 {
		vm, err := s.p.Launch(ctx, req)
		pr.Stop()
		if err != nil {
			return launchError(intr, err)
		}
		fmt.Fprintf(e.stdout, "%s is ready: %s %s, %s, %s×%d, %s/h\n", vm.Name, vm.Provider, vm.Location,
			vm.InstanceID, vm.GPU, vm.GPUCount, usd(vm.PricePerHour))
		if !vm.ExpiresAt.IsZero() {
			fmt.Fprintf(e.stdout, "  expires at %s (--ttl/--max-cost): deleted then by the next `gpuprov recover` or reaper\n",
				vm.ExpiresAt.UTC().Format(time.RFC3339))
		}
		fmt.Fprintf(e.stdout, "  gpuprov ssh %s          # log in\n  gpuprov down %s         # delete it\n", vm.Name, vm.Name)
		return nil
	}
	cl, err := s.p.LaunchCluster(ctx, gpuprov.ClusterRequest{Name: req.Name, Nodes: f.nodes, MinNodes: f.minNodes, Node: req,
		Placement: gpuprov.Placement(f.placement)})
	pr.Stop()
	if err != nil {
		return launchError(intr, err)
	}
	fmt.Fprintf(e.stdout, "cluster %s is ready: server %s, API %s\n", cl.Name, cl.Server, cl.URL)
	for _, n := range cl.Nodes {
		if n != nil && n.State == gpuprov.StateReady {
			fmt.Fprintf(e.stdout, "  %-24s %s %s, %s/h\n", n.Name, n.Provider, n.Location, usd(n.PricePerHour))
		}
	}
	for name, err := range cl.Errors {
		fmt.Fprintf(e.stdout, "  %-24s not ready: %s\n", name, oneLine(err.Error()))
	}
	if f.kubeconfig != "" {
		if len(cl.Kubeconfig) == 0 {
			return errors.New("the cluster returned no kubeconfig")
		}
		if err := writeSecretFile(f.kubeconfig, cl.Kubeconfig); err != nil {
			return fmt.Errorf("kubeconfig: %w", err)
		}
		fmt.Fprintf(e.stdout, "kubeconfig written to %s (mode 0600)\n", f.kubeconfig)
	}
	return nil
}

// launchError is the error of a failed or interrupted launch.
func launchError(intr *interrupt, err error) error {
	if intr.happened() {
		what := "interrupted: everything this command started was torn down"
		if errors.Is(err, gpuprov.ErrTeardownIncomplete) {
			what = "interrupted: teardown incomplete; run `gpuprov recover` to finish it"
		}
		return &exitError{code: exitInterrupted, err: errors.New(what)}
	}
	return err
}

// writeSecretFile writes b to path with mode 0600, atomically.
func writeSecretFile(path string, b []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".gpuprov-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // a no-op after the rename
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// exitNow ends the process on a second interrupt (a variable for tests).
var exitNow = os.Exit

// interrupt turns the first SIGINT/SIGTERM into a cancellation and the
// second into an immediate exit 3.
type interrupt struct {
	mu   sync.Mutex
	hit  bool
	ch   chan os.Signal
	done chan struct{}
	wg   sync.WaitGroup
}

func interruptible(ctx context.Context, pr *progress, msg string) (context.Context, *interrupt) {
	ctx, cancel := context.WithCancel(ctx)
	in := &interrupt{ch: make(chan os.Signal, 2), done: make(chan struct{})}
	signal.Notify(in.ch, os.Interrupt, syscall.SIGTERM)
	in.wg.Go(func() {
		defer cancel()
		select {
		case <-in.ch:
		case <-in.done:
			return
		}
		in.mu.Lock()
		in.hit = true
		in.mu.Unlock()
		pr.Printf("%s\n", msg)
		cancel()
		select {
		case <-in.ch:
			pr.Printf("interrupted again: leaving the rest to `gpuprov recover`\n")
			exitNow(exitInterrupted)
		case <-in.done:
		}
	})
	return ctx, in
}

func (in *interrupt) happened() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.hit
}

func (in *interrupt) stop() {
	signal.Stop(in.ch)
	close(in.done)
	in.wg.Wait()
}

// placementNames lists the --placement values.
func placementNames() []string {
	var out []string
	for _, p := range gpuprov.Placements() {
		out = append(out, string(p))
	}
	return out
}

// parseVolumeFlag reads --volume NAME:SIZE_GB:MOUNT_PATH[:delete].
func parseVolumeFlag(spec string) (gpuprov.VolumeRequest, error) {
	parts := strings.Split(spec, ":")
	if len(parts) < 3 || len(parts) > 4 || len(parts) == 4 && parts[3] != "delete" {
		return gpuprov.VolumeRequest{}, usageErrorf("--volume %q: want NAME:SIZE_GB:MOUNT_PATH or NAME:SIZE_GB:MOUNT_PATH:delete (SIZE_GB may be empty for a volume that exists)", spec)
	}
	v := gpuprov.VolumeRequest{Name: parts[0], MountPath: parts[2], DeleteWithVM: len(parts) == 4}
	if parts[1] != "" {
		n, err := strconv.Atoi(parts[1])
		if err != nil || n <= 0 {
			return v, usageErrorf("--volume %q: size %q is not a positive number of GB", spec, parts[1])
		}
		v.SizeGB = n
	}
	return v, nil
}
