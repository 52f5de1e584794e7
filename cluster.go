package gpuprov

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/org/gpuprov/journal"
)

// EvClusterServer marks the node elected its cluster's server, journaled
// before it is asked to serve.
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
	// A taken node name fails the cluster before any node is launched (a
	// node launched and then given back costs money and time).
	for _, r := range reqs {
		row, err := p.j.GetVM(ctx, r.Name)
		switch {
		case err == nil && !row.State.Terminal():
			return nil, errorf("cluster %s: a VM named %s exists and is not deleted: %w", req.Name, r.Name, ErrExists)
		case err != nil && !errors.Is(err, journal.ErrNotFound):
			return nil, vmError(r.Name, err)
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
// node to get there tries. A coordinator of a resumed cluster (resumed set)
// first looks in the journal for the server elected before the crash.
type coordinator struct {
	p       *Provisioner
	cluster string
	resumed bool

	mu       sync.Mutex
	server   *JoinInfo
	electing bool
	changed  chan struct{} // closed and replaced on every change
}

// serverPoll is how often a resumed node waiting for a server that another
// process drives looks at the journal again.
const serverPoll = 5 * time.Second

func (co *coordinator) join(ctx context.Context, n Node, c Conn) error {
	for {
		co.mu.Lock()
		if co.server != nil {
			info := *co.server
			co.mu.Unlock()
			if info.Server.VM == n.VM {
				// The server itself, resumed after its election.
				_, err := co.p.joiner.Serve(ctx, n, c)
				return err
			}
			return co.p.joiner.Join(ctx, info, n, c)
		}
		if !co.electing {
			co.electing = true
			co.mu.Unlock()
			info, wait, err := co.elect(ctx, n, c)
			co.mu.Lock()
			co.electing = false
			if err == nil && !wait {
				co.server = &info
			}
			close(co.changed)
			co.changed = make(chan struct{})
			co.mu.Unlock()
			switch {
			case err != nil:
				return err
			case !wait && info.Server.VM == n.VM:
				return nil // this node serves
			case !wait:
				return co.p.joiner.Join(ctx, info, n, c)
			}
			// The elected server is still being resumed: wait for it.
			co.mu.Lock()
			ch := co.changed
			co.mu.Unlock()
			t := co.p.clock.NewTimer(serverPoll)
			select {
			case <-ch:
			case <-t.C():
			case <-ctx.Done():
				t.Stop()
				return context.Cause(ctx)
			}
			t.Stop()
			continue
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

// elect finds or makes the cluster's server for node n. In a resumed
// cluster the server elected before the crash keeps its role: if it is
// ready, elect asks it again (Serve is idempotent) for what agents need; if
// it is still being resumed, wait is true. Otherwise n serves.
func (co *coordinator) elect(ctx context.Context, n Node, c Conn) (info JoinInfo, wait bool, err error) {
	if co.resumed {
		v, found, err := co.p.electedServer(ctx, co.cluster)
		switch {
		case err != nil:
			return JoinInfo{}, false, err
		case found && v.Name != n.VM && v.State == journal.StateReady:
			d, err := co.p.newDriver(v)
			if err != nil {
				return JoinInfo{}, false, err
			}
			sn := d.node()
			sc, err := co.p.connector.Connect(ctx, sn)
			if err != nil {
				return JoinInfo{}, false, fmt.Errorf("reaching server %s of cluster %s: %w", v.Name, co.cluster, err)
			}
			defer sc.Close()
			info, err := co.p.joiner.Serve(ctx, sn, sc)
			if err != nil {
				return JoinInfo{}, false, fmt.Errorf("asking server %s of cluster %s: %w", v.Name, co.cluster, err)
			}
			info.Server = sn
			return info, false, nil
		case found && v.Name != n.VM && v.State.Active():
			return JoinInfo{}, true, nil
		}
	}
	// The election is journaled before Serve touches the machine, so that
	// after a crash mid-Serve the node that may already run a server keeps
	// the role instead of a second node serving too.
	if err := co.p.j.Commit(context.WithoutCancel(ctx), &journal.Step{Events: []journal.Event{{
		Time: co.p.clock.Now(), VM: n.VM, Type: EvClusterServer, Owner: co.p.owner,
		Message: "server of cluster " + co.cluster}}}); err != nil {
		return JoinInfo{}, false, err
	}
	info, err = co.p.joiner.Serve(ctx, n, c)
	if err != nil {
		return JoinInfo{}, false, err
	}
	info.Server = n
	return info, false, nil
}

// electedServer returns the node of cluster that was elected its server
// (the newest election of a node's current incarnation), if any.
func (p *Provisioner) electedServer(ctx context.Context, cluster string) (journal.VM, bool, error) {
	nodes, err := p.j.ListVMs(ctx, journal.ListOptions{Cluster: cluster})
	if err != nil {
		return journal.VM{}, false, err
	}
	var best journal.VM
	var bestAt time.Time
	for _, v := range nodes {
		evs, err := p.j.Events(ctx, journal.EventQuery{VM: v.Name})
		if err != nil {
			return journal.VM{}, false, err
		}
		for _, e := range evs {
			if e.Type == EvClusterServer && !e.Time.Before(v.CreatedAt) && e.Time.After(bestAt) {
				best, bestAt = v, e.Time
			}
		}
	}
	return best, !bestAt.IsZero(), nil
}

// resumedClusters hands out one coordinator per cluster to the nodes one
// Recover call resumes, so they elect one server between them.
type resumedClusters struct {
	p  *Provisioner
	mu sync.Mutex
	m  map[string]*coordinator
}

// join is the join phase of a resumed node of cluster; the server elected
// before the crash keeps its role.
func (rc *resumedClusters) join(cluster string) func(context.Context, Node, Conn) error {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.m == nil {
		rc.m = map[string]*coordinator{}
	}
	co := rc.m[cluster]
	if co == nil {
		co = &coordinator{p: rc.p, cluster: cluster, resumed: true, changed: make(chan struct{})}
		rc.m[cluster] = co
	}
	return co.join
}
