package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/k3s"
	"github.com/org/gpuprov/provider/sim/simserver"
	"github.com/org/gpuprov/provider/sim/simserver/k3semu"
)

// -parallel 2 keeps at most two of five launches under way at a time (a
// launch starts with EvLaunch and ends with EvReady or EvFailed), uses
// both slots, and every job gets its VM and runs.
func TestParallelLimitsLaunchesUnderWay(t *testing.T) {
	t.Parallel()
	srv := fastSim(t)
	cfg := config(t, srv)
	cfg.VMs, cfg.Parallel = 5, 2
	var (
		mu                        sync.Mutex
		underWay, most, ready, nf int
	)
	cfg.Options = []gpuprov.Option{gpuprov.WithEvents(func(ev gpuprov.Event) {
		mu.Lock()
		defer mu.Unlock()
		switch ev.Type {
		case gpuprov.EvLaunch:
			underWay++
			most = max(most, underWay)
		case gpuprov.EvReady:
			underWay--
			ready++
		case gpuprov.EvFailed:
			underWay--
			nf++
		}
	})}
	var out bytes.Buffer
	if err := Run(context.Background(), cfg, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	mu.Lock()
	defer mu.Unlock()
	if most != 2 || ready != 5 || nf != 0 {
		t.Errorf("at most %d launches at once, %d ready, %d failed; want 2 at once (the limit, used), 5 ready, none failed", most, ready, nf)
	}
	for i := range 5 {
		if want := fmt.Sprintf("job-%d ready on sim-a", i); !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if left := running(t, srv); len(left) != 0 {
		t.Fatalf("instances left: %v", left)
	}
}

// A k3s cluster of three nodes, formed on the sim's k3s emulation, is
// deleted as a whole by DeleteCluster: afterwards the cloud runs none of
// its machines and the journal has no live node.
func TestDeleteClusterLeavesNothingRunning(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	so := simserver.DefaultOptions()
	clusterDir := filepath.Join(t.TempDir(), "train") // the one emulated cluster of this sim
	k3semu.Attach(&so, func(inst simserver.Instance) k3semu.Options {
		return k3semu.Options{ClusterDir: clusterDir, GPUs: inst.GPUCount}
	})
	srv := fastSim(t, simserver.WithOptions(so))
	cfg := config(t, srv)
	kcfg := k3s.Config{Network: k3s.CrossCloud, PollInterval: 100 * time.Millisecond, ReadyTimeout: 30 * time.Second}
	cfg.Options = []gpuprov.Option{gpuprov.WithJoiner(&gpuprov.K3sJoiner{Config: kcfg})}
	p, closeAll, err := open(ctx, cfg, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll()

	cl, err := p.LaunchCluster(ctx, gpuprov.ClusterRequest{Name: "train", Nodes: 3,
		Node: gpuprov.Request{GPU: "h100", Timeout: time.Minute, OpenPorts: k3s.Ports(kcfg.Network)}})
	if err != nil {
		t.Fatal(err)
	}
	if len(cl.Nodes) != 3 || cl.Server == "" || len(cl.Kubeconfig) == 0 {
		t.Fatalf("cluster %d nodes, server %q, kubeconfig of %d bytes; want 3 nodes, a server, a kubeconfig",
			len(cl.Nodes), cl.Server, len(cl.Kubeconfig))
	}
	res, err := p.Run(ctx, cl.Server, `"${GPUPROV_ROOT:-}/usr/local/bin/k3s" kubectl get nodes`)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(res.Stdout), " Ready"); n != 3 {
		t.Errorf("kubectl get nodes lists %d Ready nodes; want 3:\n%s", n, res.Stdout)
	}
	if n := len(running(t, srv)); n != 3 {
		t.Fatalf("%d instances running on the sim; want the cluster's 3", n)
	}

	if err := p.DeleteCluster(ctx, "train"); err != nil {
		t.Fatal(err)
	}
	if left := running(t, srv); len(left) != 0 {
		t.Fatalf("instances still running after DeleteCluster: %v", left)
	}
	if live, err := p.List(ctx, gpuprov.ListOptions{Live: true}); err != nil || len(live) != 0 {
		t.Errorf("live VMs after DeleteCluster: %d (%v); want none", len(live), err)
	}
	if err := p.DeleteCluster(ctx, "nope"); !errors.Is(err, gpuprov.ErrNotFound) {
		t.Errorf("DeleteCluster of an unknown cluster: %v; want ErrNotFound", err)
	}
}
