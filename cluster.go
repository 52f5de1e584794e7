package gpuprov

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/org/gpuprov/journal"
)

// EvClusterServer marks the node that became its cluster's server.
const EvClusterServer = "cluster-server"

// ClusterRequest asks for a cluster of Nodes VMs named <Name>-0 … <Name>-(N-1).
type ClusterRequest struct {
	Name  string
	Nodes int
	// MinNodes is how many nodes must be ready for the cluster to count;
	// 0 means all of them (all or nothing). With fewer, every node is deleted.
	MinNodes int
	// Node is the request for each node; its Name is ignored.
	Node Request
}

// Cluster is a formed cluster.
type Cluster struct {
	Name   string
	Nodes  []*VM
	Server string // the server node's VM name
	// URL and Kubeconfig come from the Joiner (empty without one). The
	// kubeconfig holds credentials: write it with mode 0600.
	URL        string
	Kubeconfig []byte
	// Errors are the nodes that did not become ready, with why.
	Errors map[string]error
}

// LaunchCluster launches the nodes concurrently, each with the failover of
// Launch (a node whose offer fails is replaced by the next offer). With a
// Joiner, the first node to be ready becomes the server and the others join
// it as they become ready. If fewer than MinNodes are ready, every node is
// deleted and the error says why each failed.
func (p *Provisioner) LaunchCluster(ctx context.Context, req ClusterRequest) (*Cluster, error) {
	if err := ValidateName(req.Name); err != nil {
		return nil, err
	}
	if req.Nodes < 1 || req.Nodes > 1000 {
		return nil, &RequestError{"nodes", fmt.Sprintf("%d is not between 1 and 1000", req.Nodes)}
	}
	if req.MinNodes < 0 || req.MinNodes > req.Nodes {
		return nil, &RequestError{"min_nodes", fmt.Sprintf("%d is not between 0 and %d", req.MinNodes, req.Nodes)}
	}
	min := req.MinNodes
	if min == 0 {
		min = req.Nodes
	}
	reqs := make([]Request, req.Nodes)
	for i := range reqs {
		reqs[i] = req.Node
		reqs[i].Name = fmt.Sprintf("%s-%d", req.Name, i)
		r := reqs[i]
		if err := r.normalize(p.providerSet()); err != nil {
			return nil, err
		}
	}
	co := &coordinator{p: p, cluster: req.Name, changed: make(chan struct{})}
	var join func(context.Context, Node, Conn) error
	if p.joiner != nil {
		join = co.join
	}
	cl := &Cluster{Name: req.Name, Nodes: make([]*VM, req.Nodes), Errors: map[string]error{}}
	var wg sync.WaitGroup
	errs := make([]error, req.Nodes)
	for i := range reqs {
		wg.Go(func() { cl.Nodes[i], errs[i] = p.launch(ctx, reqs[i], req.Name, join) })
	}
	wg.Wait()
	ready := 0
	for i, err := range errs {
		if err != nil {
			cl.Errors[reqs[i].Name] = err
		} else {
			ready++
		}
	}
	if co.server != nil {
		cl.Server, cl.URL, cl.Kubeconfig = co.server.Server.VM, co.server.URL, co.server.Kubeconfig
	}
	if ready >= min {
		return cl, nil
	}
	// Not enough: give back what was got. Deletion runs even when ctx ended.
	dctx := context.WithoutCancel(ctx)
	var derrs []error
	for _, v := range cl.Nodes {
		if v != nil && v.State == StateReady {
			if err := p.Delete(dctx, v.Name); err != nil {
				derrs = append(derrs, err)
			}
		}
	}
	all := []error{fmt.Errorf("gpuprov: cluster %s: %d of %d nodes ready, %d needed; the ready ones were deleted", req.Name, ready, req.Nodes, min)}
	for _, e := range errs {
		if e != nil {
			all = append(all, e)
		}
	}
	return cl, errors.Join(append(all, derrs...)...)
}

// coordinator elects the cluster's server: the first node to reach the join
// phase serves; the others wait for it and join. If serving fails, the next
// node to get there tries.
type coordinator struct {
	p       *Provisioner
	cluster string

	mu       sync.Mutex
	server   *JoinInfo
	electing bool
	changed  chan struct{} // closed and replaced on every change
}

func (co *coordinator) join(ctx context.Context, n Node, c Conn) error {
	for {
		co.mu.Lock()
		if co.server != nil {
			info := *co.server
			co.mu.Unlock()
			return co.p.joiner.Join(ctx, info, n, c)
		}
		if !co.electing {
			co.electing = true
			co.mu.Unlock()
			info, err := co.p.joiner.Serve(ctx, n, c)
			if err == nil {
				info.Server = n
				err = co.p.j.Commit(context.WithoutCancel(ctx), &journal.Step{Events: []journal.Event{{
					Time: co.p.clock.Now(), VM: n.VM, Type: EvClusterServer, Owner: co.p.owner,
					Message: "server of cluster " + co.cluster}}})
			}
			co.mu.Lock()
			co.electing = false
			if err == nil {
				co.server = &info
			}
			close(co.changed)
			co.changed = make(chan struct{})
			co.mu.Unlock()
			return err
		}
		ch := co.changed
		co.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// recoveredJoin is the join phase of a node resumed by Recover: it finds the
// cluster's server from the journal and asks it again (Serve is idempotent)
// for what agents need; if no server was elected, this node serves.
func (p *Provisioner) recoveredJoin(cluster, self string) func(context.Context, Node, Conn) error {
	return func(ctx context.Context, n Node, c Conn) error {
		nodes, err := p.j.ListVMs(ctx, journal.ListOptions{Cluster: cluster})
		if err != nil {
			return err
		}
		for _, v := range nodes {
			evs, err := p.j.Events(ctx, journal.EventQuery{VM: v.Name})
			if err != nil {
				return err
			}
			isServer := false
			for _, e := range evs {
				if e.Type == EvClusterServer && !e.Time.Before(v.CreatedAt) {
					isServer = true
				}
			}
			if !isServer || v.State != journal.StateReady && v.Name != self {
				continue
			}
			if v.Name == self {
				_, err := p.joiner.Serve(ctx, n, c)
				return err
			}
			d, err := p.newDriver(v)
			if err != nil {
				return err
			}
			sn := d.node()
			sc, err := p.connector.Connect(ctx, sn)
			if err != nil {
				return fmt.Errorf("reaching server %s: %w", v.Name, err)
			}
			defer sc.Close()
			info, err := p.joiner.Serve(ctx, sn, sc)
			if err != nil {
				return fmt.Errorf("asking server %s: %w", v.Name, err)
			}
			info.Server = sn
			return p.joiner.Join(ctx, info, n, c)
		}
		co := &coordinator{p: p, cluster: cluster, changed: make(chan struct{})}
		return co.join(ctx, n, c)
	}
}
