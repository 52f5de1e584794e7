package sim_test

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/sim"
	"github.com/org/gpuprov/provider/sim/simserver"
)

// Who may connect. The sim's firewall (simserver's package documentation,
// PUT firewalls/{name}: ports [{number, protocol, peers}], sources) opens
// its ports to its sources and, on a port with peers, to its own
// instances; the server records and reports it (Firewall.Admits, the
// admin view), and does not filter connections.

// firewallsOf returns the sim's firewalls, by name.
func firewallsOf(t *testing.T, srv *simserver.Server) map[string]simserver.Firewall {
	t.Helper()
	res, err := srv.SideResources(cloudName)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]simserver.Firewall{}
	for _, f := range res.Firewalls {
		out[f.Name] = f
	}
	return out
}

var (
	sshPort = provider.Port{Number: 22, Protocol: "tcp"}
	kube    = provider.Port{Number: 6443, Protocol: "tcp"} // k3s.Ports: the Kubernetes API
)

// TestSourceRangesReachTheFirewall: the configured source_ranges reach the
// shared firewall, which is named for them and opens 6443 to its peers
// too; a request's ranges override them with a firewall of their own;
// with neither, the firewall admits anywhere and has the name an earlier
// version gave it.
func TestSourceRangesReachTheFirewall(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, func(o *simserver.Options) { o.DisableSSH = true })
	office := []string{"203.0.113.0/24", "192.0.2.0/24"}
	p, _ := newProvider(t, e.srv, sim.Config{SourceRanges: office})
	of := e.offer(t, h100)
	mine, _ := newSpec(t, "mine")
	mine.SourceRanges = []string{"198.51.100.0/24"}
	theirs, _ := newSpec(t, "theirs")
	for _, s := range []*provider.InstanceSpec{mine, theirs} {
		if _, err := p.Prepare(ctx, &of, s); err != nil {
			t.Fatal(err)
		}
	}
	open, _ := newSpec(t, "open")
	if _, err := e.p.Prepare(ctx, &of, open); err != nil { // no source_ranges configured
		t.Fatal(err)
	}

	fws := firewallsOf(t, e.srv)
	all := []provider.Port{sshPort, kube}
	for _, tc := range []struct {
		name    string
		sources []string
		peers   bool
	}{
		{provider.SharedName(installation, all, office), []string{"192.0.2.0/24", "203.0.113.0/24"}, true},
		{provider.SharedName(installation, all, mine.SourceRanges), mine.SourceRanges, true},
		{provider.SharedName(installation, all, nil), []string{"0.0.0.0/0"}, false},
	} {
		fw, ok := fws[tc.name]
		if !ok {
			t.Fatalf("no firewall %s among %v", tc.name, fws)
		}
		want := []simserver.Port{{Number: 22, Protocol: "tcp"}, {Number: 6443, Protocol: "tcp", Peers: tc.peers}}
		if !slices.Equal(fw.Sources, tc.sources) || !slices.Equal(fw.Ports, want) {
			t.Errorf("firewall %s: sources %v, ports %+v; want %v, %+v", tc.name, fw.Sources, fw.Ports, tc.sources, want)
		}
	}
	if len(fws) != 3 {
		t.Fatalf("firewalls %v, want 3", fws)
	}
}

// TestClusterFirewallAdmitsItsPeersAndTheCallersRange: a cluster launched
// with the caller's range opens its API server (6443/tcp) to that range
// and to its own nodes only, and SSH to that range only.
func TestClusterFirewallAdmitsItsPeersAndTheCallersRange(t *testing.T) {
	e := newEngineEnv(t, simserver.Faults{}, sim.Config{})
	node := engineReq("")
	node.OpenPorts = []provider.Port{kube}
	node.SourceRanges = []string{"203.0.113.0/24"}
	if _, err := e.p.LaunchCluster(context.Background(), gpuprov.ClusterRequest{Name: "k", Nodes: 2, Node: node,
		Placement: gpuprov.PlacementSameZone}); err != nil {
		t.Fatalf("launch: %v", err)
	}
	var used []string
	for _, ins := range e.clusterInstances(t, "k") {
		for _, in := range ins {
			used = append(used, in.Firewall)
		}
	}
	if len(used) != 2 || used[0] != used[1] {
		t.Fatalf("the nodes use firewalls %v, want one shared", used)
	}
	fw := firewallsOf(t, e.srv)[used[0]]
	caller, stranger := netip.MustParseAddr("203.0.113.10"), netip.MustParseAddr("198.51.100.1")
	for _, tc := range []struct {
		port   int
		from   netip.Addr
		peer   bool
		admits bool
	}{
		{6443, caller, false, true},
		{6443, stranger, true, true}, // another node of the cluster, wherever its address
		{6443, stranger, false, false},
		{22, caller, false, true},
		{22, stranger, true, false},
		{22, stranger, false, false},
	} {
		if got := fw.Admits(tc.port, "tcp", tc.from, tc.peer); got != tc.admits {
			t.Errorf("%d/tcp from %s (peer %v): admitted %v, want %v (firewall %+v)", tc.port, tc.from, tc.peer, got, tc.admits, fw)
		}
	}
}

// TestErrorsNameTheProviderOnce: the *provider.Error of a shared firewall
// gone at create, or still in use at CleanupShared, prints "sim-a:
// <op>: <kind>: ..." once; what it wraps is the server's answer, not
// another *provider.Error naming the provider again.
func TestErrorsNameTheProviderOnce(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, func(o *simserver.Options) { o.DisableSSH = true })
	e.launch(t, func() *provider.InstanceSpec { s, _ := newSpec(t, "a"); return s }())
	inUse := e.p.CleanupShared(ctx, provider.Location{})
	if !errors.Is(inUse, provider.ErrInUse) || !sim.IsAPIError(inUse, "conflict") {
		t.Fatalf("cleanup with a live instance: %v, want ErrInUse and the server's conflict", inUse)
	}

	of := e.offer(t, h100)
	s, _ := newSpec(t, "b")
	s.OpenPorts = []provider.Port{{Number: 8080, Protocol: "tcp"}}
	prep, err := e.p.Prepare(ctx, &of, s)
	if err != nil {
		t.Fatal(err)
	}
	other, _ := newProvider(t, e.srv, sim.Config{})
	e.clk.Advance(time.Second)
	if err := other.CleanupShared(ctx, of.Location); !errors.Is(err, provider.ErrInUse) {
		t.Fatalf("the other process's cleanup: %v", err) // a's firewall is in use; b's goes
	}
	_, gone := e.p.Create(ctx, &of, prep, s)
	if !errors.Is(gone, provider.ErrSharedGone) || !sim.IsAPIError(gone, "unknown_firewall") {
		t.Fatalf("create with the firewall gone: %v, want ErrSharedGone and the server's unknown_firewall", gone)
	}
	for name, err := range map[string]error{"in use": inUse, "shared gone": gone} {
		if msg := err.Error(); !strings.HasPrefix(msg, cloudName+": ") || strings.Count(msg, cloudName+":") != 1 {
			t.Errorf("%s: %q names the provider other than once, at the start", name, msg)
		}
	}
}
