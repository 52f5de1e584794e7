package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/gpu"
	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/k3s"
	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/sim"
	"github.com/org/gpuprov/provider/sim/simserver"
	"github.com/org/gpuprov/ssh"
)

func newDemoCmd(e *env) *cobra.Command {
	o := defaultDemoOptions()
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Provision a 2-node GPU cluster on a simulated cloud, in one command",
		Long: `Run the whole pipeline against two simulated clouds started in this process:
plan across both, fail over from a stocked-out offer, send a create whose
answer was lost again with its idempotency token (the cloud answers with the
instance that landed, not a second one), boot, SSH with a pinned host key,
bootstrap over SSH, form a (simulated) k3s cluster, check health, tear everything down and prove
that nothing is left running. No account, no credentials, no network.`,
		Args: cobra.NoArgs,
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			if o.Nodes < 1 {
				return usageErrorf("--nodes %d: want 1 node or more", o.Nodes)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			o.Out = e.stdout
			sum, err := runDemo(ctx, o)
			if err != nil {
				if ctx.Err() != nil {
					return &exitError{code: exitInterrupted, err: fmt.Errorf("interrupted: %w", err)}
				}
				return err
			}
			if sum.LeftRunning != 0 {
				return fmt.Errorf("%d instances left running", sum.LeftRunning)
			}
			return nil
		}),
	}
	cmd.Flags().IntVar(&o.Nodes, "nodes", o.Nodes, "cluster nodes (1 or more)")
	return cmd
}

// demoOptions shape the demo; tests shorten the latencies.
type demoOptions struct {
	Nodes  int
	GPU    string
	Timing simserver.Timing
	Out    io.Writer
}

func defaultDemoOptions() demoOptions {
	return demoOptions{Nodes: 2, GPU: "H100", Out: io.Discard, Timing: simserver.Timing{
		APILatency: simserver.Duration(2 * time.Millisecond),
		BootTime:   simserver.Duration(800 * time.Millisecond),
		BootJitter: simserver.Duration(300 * time.Millisecond),
		DeleteTime: simserver.Duration(200 * time.Millisecond),
	}}
}

// demoSummary is what the demo proved.
type demoSummary struct {
	Nodes        []demoNode
	Stockout     string   // the offer stocked out on purpose: cloud/offer-id
	Refused      string   // the offer whose machines have bad GPUs on purpose: cloud/offer-id
	Recovered    []string // VMs whose lost create answer was recovered: replayed with its token, or observed and adopted
	LostCreates  int      // creates whose answer the sim lost
	Replays      int      // creates the sim answered as replays of an earlier one (same token)
	ClusterURL   string
	ServerNode   string
	LeftRunning  int // instances not terminated after teardown, per the sim
	LeftSideRes  int // firewalls and SSH keys left, per the sim
	Elapsed      time.Duration
	HealthyNodes int
}

type demoNode struct {
	Name, Provider, Region string
	Price                  float64
	Attempts               int
	Refused                int // attempts whose machine failed GPU acceptance
	TimeToReady            time.Duration
	Health                 provider.Verdict
}

// runDemo runs the demo and returns its summary; it always tears down what
// it started.
func runDemo(ctx context.Context, o demoOptions) (*demoSummary, error) {
	start := time.Now()
	w := &lockedWriter{w: o.Out} // event sinks print from the engine's goroutines
	say := func(format string, args ...any) {
		fmt.Fprintf(w, "[%5.1fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	dir, err := os.MkdirTemp("", "gpuprov-demo-*")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)

	fmt.Fprintf(w, "gpuprov demo — everything below runs against a SIMULATED cloud in this process:\n"+
		"two clouds, sim-a and sim-b, whose machines are real SSH servers on 127.0.0.1.\n"+
		"Nothing is billed, no credentials are used, nothing leaves this machine.\n\n")

	gpu, err := provider.CanonicalGPU(o.GPU)
	if err != nil {
		return nil, err
	}
	so := simserver.DefaultOptions()
	so.StateFile = filepath.Join(dir, "sim", "state.json")
	cloud, offer := cheapestOffer(so, gpu, "")
	if offer == "" {
		return nil, fmt.Errorf("the simulated catalog has no %s offer", gpu)
	}
	badCloud, bad := cheapestOffer(so, gpu, offer)
	for i := range so.Clouds {
		t := o.Timing
		so.Clouds[i].Timing = &t
		if so.Clouds[i].Name == cloud {
			so.Clouds[i].Faults.StockoutOffers = []string{offer}
		}
		if so.Clouds[i].Name == badCloud && bad != "" {
			so.Clouds[i].Faults.GPUFaults = []simserver.GPUFault{{Kind: simserver.GPUECC, Offers: []string{bad}}}
		}
	}
	if err := os.MkdirAll(filepath.Dir(so.StateFile), 0o700); err != nil {
		return nil, err
	}
	attachK3s(&so, filepath.Join(dir, "k3s"))
	srv, err := simserver.Start(so)
	if err != nil {
		return nil, err
	}
	defer srv.Close()
	sum := &demoSummary{Stockout: cloud + "/" + offer}
	say("simulated clouds %v serving at %s", srv.Clouds(), srv.URL())
	say("fault injected: the cheapest %s offer (%s on %s) is out of capacity, so gpuprov must fail over", gpu, offer, cloud)
	if bad != "" {
		sum.Refused = badCloud + "/" + bad
		say("fault injected: the machines of the next offer (%s on %s) have uncorrectable ECC errors, so GPU acceptance must refuse them and move on", bad, badCloud)
	}
	say("fault injected: the answer to the first create that lands is lost, so gpuprov must send it again with the same idempotency token and get the instance that landed, not a second one")

	j, err := journal.Open(ctx, "sqlite:"+filepath.Join(dir, "journal.db"))
	if err != nil {
		return nil, err
	}
	defer j.Close()
	key, err := ssh.GenerateKey()
	if err != nil {
		return nil, err
	}
	loser := &loseOneCreate{next: http.DefaultTransport, srv: srv}
	var provs []provider.CloudProvider
	for _, c := range srv.Clouds() {
		p, err := sim.New(sim.Config{
			Endpoint: srv.URL(), Cloud: c, APIKey: srv.APIKey(c),
			PollInterval: 100 * time.Millisecond, ConsistencyWindow: 500 * time.Millisecond,
			BootTimeout: 30 * time.Second, DeleteTimeout: 30 * time.Second, RequestTimeout: 10 * time.Second,
		}, sim.WithName(c), sim.WithInstallation(j.Installation()), sim.WithHTTPClient(&http.Client{Transport: loser}))
		if err != nil {
			return nil, err
		}
		provs = append(provs, p)
	}
	nar := &narrator{say: say}
	kcfg := k3s.Config{Network: k3s.CrossCloud, PollInterval: 100 * time.Millisecond, ReadyTimeout: 30 * time.Second}
	p, err := gpuprov.New(j,
		gpuprov.WithProvider(provs...),
		gpuprov.WithEvents(nar.sink),
		gpuprov.WithSSH(sshUser, []string{key.AuthorizedKey}, true),
		gpuprov.WithConnector(&gpuprov.SSHConnector{Signer: key.Signer}),
		gpuprov.WithBootstrapper(demoBootstrapper{say: say}),
		gpuprov.WithJoiner(demoJoiner(kcfg)),
		gpuprov.WithBackoff(50*time.Millisecond, 500*time.Millisecond, 1),
		gpuprov.WithPhaseTimeouts(20*time.Second, 30*time.Second),
	)
	if err != nil {
		return nil, err
	}
	defer p.Close()

	req := gpuprov.Request{GPU: gpu, Timeout: 45 * time.Second, OpenPorts: k3s.Ports(kcfg.Network)}
	plan, err := p.Plan(ctx, gpuprov.Request{Name: "demo", GPU: gpu})
	if err != nil {
		return nil, err
	}
	say("planned %d offers for 1×%s across both clouds, cheapest first:", len(plan.Offers), gpu)
	for i, of := range plan.Offers {
		if i == 4 {
			break
		}
		note := ""
		if of.Provider == cloud && strings.Contains(string(of.Detail), offer) {
			note = "   ← stocked out (demo fault)"
		}
		if of.Provider == badCloud && bad != "" && strings.Contains(string(of.Detail), bad) {
			note = "   ← machines with ECC errors (demo fault)"
		}
		fmt.Fprintf(w, "          %d. %-6s %-22s %-12s $%.2f/h%s\n", i+1, of.Provider, of.Location, of.InstanceType, of.PricePerHour, note)
	}

	say("launching a %d-node cluster \"demo\" (each node: plan → prepare → create → boot → SSH → bootstrap → join)", o.Nodes)
	cl, lerr := p.LaunchCluster(ctx, gpuprov.ClusterRequest{Name: "demo", Nodes: o.Nodes, Node: req})
	if lerr == nil {
		sum.ServerNode, sum.ClusterURL = cl.Server, cl.URL
		say("k3s cluster formed: server %s, API %s — SIMULATED: k3s is emulated inside the sandboxes, no real Kubernetes runs", cl.Server, cl.URL)
		showNodes(ctx, p, key, cl.Server, say)
		sum.Nodes, sum.HealthyNodes = inspect(ctx, p, cl, say)
	}
	sum.Recovered = nar.recovered()

	say("tearing everything down")
	teardown(context.WithoutCancel(ctx), p, say)
	for _, c := range srv.Clouds() {
		insts, err := srv.Instances(c)
		if err != nil {
			return nil, err
		}
		for _, in := range insts {
			if in.Status != "terminated" {
				sum.LeftRunning++
			}
		}
		res, err := srv.SideResources(c)
		if err != nil {
			return nil, err
		}
		sum.LeftSideRes += len(res.Firewalls) + len(res.SSHKeys)
		st, _ := srv.Stats(c) // the cloud exists: Stats cannot fail
		sum.LostCreates += st.LostCreates
		sum.Replays += st.IdempotentReplays
	}
	sum.Elapsed = time.Since(start)
	if lerr != nil {
		return sum, fmt.Errorf("launch failed: %w", lerr)
	}
	printSummary(w, sum)
	return sum, nil
}

// cheapestOffer finds the cheapest on-demand single-GPU offer of gpu other
// than but.
func cheapestOffer(so simserver.Options, gpu, but string) (cloud, offer string) {
	best := -1.0
	for _, c := range so.Clouds {
		offers := c.Offers
		if len(offers) == 0 {
			offers = simserver.DefaultCatalog(c.Name)
		}
		for _, of := range offers {
			if of.GPU == gpu && of.GPUCount == 1 && !of.Spot && of.ID != but && (best < 0 || of.PricePerHour < best) {
				best, cloud, offer = of.PricePerHour, c.Name, of.ID
			}
		}
	}
	return cloud, offer
}

// loseOneCreate is the demo's HTTP transport: it turns the sim's
// LostCreateRate fault on for one create at a time until one create has
// landed with its answer lost, then never again. The sim only has a rate;
// this makes it exactly one, whatever the order of the nodes' creates.
type loseOneCreate struct {
	next http.RoundTripper
	srv  *simserver.Server

	mu   sync.Mutex
	done bool
}

func (t *loseOneCreate) RoundTrip(r *http.Request) (*http.Response, error) {
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/") // clouds/{cloud}/v1/instances
	if r.Method != http.MethodPost || len(parts) != 4 || parts[0] != "clouds" || parts[3] != "instances" {
		return t.next.RoundTrip(r)
	}
	cloud := parts[1]
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return t.next.RoundTrip(r)
	}
	f, err := t.srv.Faults(cloud)
	if err != nil {
		return t.next.RoundTrip(r)
	}
	before, _ := t.srv.Stats(cloud) // the cloud exists: Faults just succeeded
	lossy := f
	lossy.LostCreateRate = 1
	if err := t.srv.SetFaults(cloud, lossy); err != nil {
		return nil, err
	}
	resp, rerr := t.next.RoundTrip(r)
	if err := t.srv.SetFaults(cloud, f); err != nil {
		return nil, errors.Join(rerr, err)
	}
	if after, _ := t.srv.Stats(cloud); after.LostCreates > before.LostCreates {
		t.done = true
	}
	return resp, rerr
}

// demoJoiner is the join step: the k3s package over SSH, against the k3s
// emulation the sim installs in each sandbox. Swap in the root package's k3s
// Joiner here once it exists.
func demoJoiner(cfg k3s.Config) gpuprov.Joiner { return newK3sJoiner(cfg) }

// demoBootstrapper runs real commands over SSH in the bootstrap phase.
type demoBootstrapper struct{ say func(string, ...any) }

func (b demoBootstrapper) Bootstrap(ctx context.Context, n gpuprov.Node, c gpuprov.Conn) error {
	run := func(cmd string) (string, error) {
		out, _, err := c.Run(ctx, cmd)
		return strings.TrimSpace(string(out)), err
	}
	uname, err := run("uname -a")
	if err != nil {
		return err
	}
	nproc, err := run("nproc")
	if err != nil {
		return err
	}
	home, err := run(`printf '%s' "$HOME"`)
	if err != nil {
		return err
	}
	path := strings.TrimSuffix(home, "/") + "/gpuprov-bootstrap.txt"
	marker := fmt.Sprintf("bootstrapped %s by gpuprov demo\n", n.VM)
	if err := c.WriteFile(ctx, path, []byte(marker), 0o644); err != nil {
		return err
	}
	back, err := run("cat " + ssh.Quote(path))
	if err != nil {
		return err
	}
	if back != strings.TrimSpace(marker) {
		return fmt.Errorf("marker file reads back %q", back)
	}
	b.say("%s: bootstrap over SSH (pinned host key): `uname -a` → %.60s…; `nproc` → %s; wrote and read back %s",
		n.VM, uname, nproc, filepath.Base(path))
	return nil
}

// narrator prints events for a newcomer and remembers the VMs whose lost
// create answer was recovered (a create sent again with its token, then
// the instance; or an instance adopted).
type narrator struct {
	say func(string, ...any)

	mu     sync.Mutex
	resent map[string]bool
	got    []string
}

func (n *narrator) sink(e gpuprov.Event) {
	switch e.Type {
	case gpuprov.EvPlan, gpuprov.EvHostKeyPinned, gpuprov.EvDeleting:
		return // said otherwise, or noise
	case gpuprov.EvCreateSent:
		if strings.HasPrefix(e.Message, resendWithToken) {
			n.mu.Lock()
			if n.resent == nil {
				n.resent = map[string]bool{}
			}
			n.resent[e.VM] = true
			n.mu.Unlock()
		}
	case gpuprov.EvCreated, gpuprov.EvAdopted:
		n.mu.Lock()
		if e.Type == gpuprov.EvAdopted || n.resent[e.VM] {
			n.got = append(n.got, e.VM)
			delete(n.resent, e.VM)
		}
		n.mu.Unlock()
	}
	vm := e.VM
	if vm == "" {
		vm = "(a node)" // retries come without their VM
	}
	n.say("%-7s %s", vm, describe(e))
}

func (n *narrator) recovered() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.got...)
}

// showNodes runs `k3s kubectl get nodes` on the server over SSH with the
// pinned host key, as a user would.
func showNodes(ctx context.Context, p *gpuprov.Provisioner, key ssh.KeyPair, server string, say func(string, ...any)) {
	vm, err := p.Get(ctx, server)
	if err != nil || vm.SSH == nil {
		return
	}
	policy, err := ssh.FixedHostKey(vm.HostKey)
	if err != nil {
		say("cannot check the cluster: %v", err)
		return
	}
	c, err := ssh.Dial(ctx, ssh.Config{Addr: vm.SSH.Address(), User: vm.SSH.User, Signer: key.Signer, HostKey: policy})
	if err != nil {
		say("cannot reach %s: %v", server, err)
		return
	}
	defer c.Close()
	res, err := c.Run(ctx, `"${GPUPROV_ROOT:-}/usr/local/bin/k3s" kubectl get nodes`)
	if err != nil {
		say("`k3s kubectl get nodes` on %s: %v", server, err)
		return
	}
	say("`k3s kubectl get nodes` on %s over SSH:", server)
	for _, l := range strings.Split(strings.TrimSpace(string(res.Stdout)), "\n") {
		say("    %s", l)
	}
}

// inspect collects each node's facts and runs health on it.
func inspect(ctx context.Context, p *gpuprov.Provisioner, cl *gpuprov.Cluster, say func(string, ...any)) ([]demoNode, int) {
	var nodes []demoNode
	healthy := 0
	for _, v := range cl.Nodes {
		if v == nil {
			continue
		}
		atts, _, err := p.History(ctx, v.Name)
		if err != nil {
			say("%s: history: %v", v.Name, err)
		}
		n := demoNode{Name: v.Name, Provider: v.Provider, Region: v.Location.Region, Price: v.PricePerHour,
			Attempts: len(atts), TimeToReady: v.ReadyAt.Sub(v.CreatedAt)}
		for _, a := range atts {
			var r gpu.Report
			if a.State != journal.AttemptSucceeded || json.Unmarshal(a.Acceptance, &r) != nil {
				continue
			}
			say("%s's GPUs, as acceptance read them (%s):", v.Name, r.Summary)
			for _, g := range r.GPUs {
				say("    GPU %d  %s  %s  %s  serial %s", g.Index, g.BusID, g.Name, g.UUID, g.Serial)
			}
		}
		for _, a := range atts {
			if a.ErrorKind == gpuprov.KindAccept {
				n.Refused++
			}
		}
		d, err := p.Health(ctx, v.Name, gpuprov.HealthGPU())
		if err != nil {
			say("health %s: %v", v.Name, err)
		} else {
			n.Health = d.Verdict()
			say("health %s: %s (%s, instance %s)", v.Name, n.Health, d.Status, d.InstanceID)
		}
		if n.Health == provider.Healthy {
			healthy++
		}
		nodes = append(nodes, n)
	}
	return nodes, healthy
}

// teardown deletes every VM of the demo's journal, then closes p, which
// removes the shared firewalls waiting out their grace (WithSharedGrace).
func teardown(ctx context.Context, p *gpuprov.Provisioner, say func(string, ...any)) {
	vms, err := p.List(ctx, gpuprov.ListOptions{})
	if err != nil {
		say("list: %v", err)
		return
	}
	var wg sync.WaitGroup
	for _, v := range vms {
		if v.State.Terminal() {
			continue
		}
		wg.Go(func() {
			if err := p.Delete(ctx, v.Name); err != nil {
				say("delete %s: %v", v.Name, err)
			}
		})
	}
	wg.Wait()
	p.Close()
}

func printSummary(w io.Writer, s *demoSummary) {
	fmt.Fprintf(w, "\nSummary (simulated cloud):\n")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  VM\tPROVIDER\tREGION\tPRICE/H\tATTEMPTS\tREADY AFTER\tHEALTH")
	for _, n := range s.Nodes {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t$%.2f\t%d\t%s\t%s\n", n.Name, n.Provider, n.Region, n.Price, n.Attempts,
			n.TimeToReady.Round(100*time.Millisecond), n.Health)
	}
	tw.Flush()
	for _, n := range s.Nodes {
		if n.Attempts > 1 {
			why := s.Stockout + " was stocked out"
			if n.Refused > 0 {
				why += fmt.Sprintf("; %d machine(s) of %s refused by GPU acceptance, torn down and blocked", n.Refused, s.Refused)
			}
			fmt.Fprintf(w, "  failover: %s needed %d attempts (%s)\n", n.Name, n.Attempts, why)
		}
	}
	for _, v := range s.Recovered {
		fmt.Fprintf(w, "  lost answer: %s's create answer was lost; sent again with the same idempotency token, it was answered with the instance that landed: no duplicate\n", v)
	}
	fmt.Fprintf(w, "  cluster: k3s (simulated) with server %s at %s\n", s.ServerNode, s.ClusterURL)
	fmt.Fprintf(w, "  %d instances left running, %d side resources left (checked against the simulated clouds)\n", s.LeftRunning, s.LeftSideRes)
	fmt.Fprintf(w, "  total time %s\n", s.Elapsed.Round(100*time.Millisecond))
}

// lockedWriter serializes writes from several goroutines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}
