package gpuprov

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/org/gpuprov/clock"
	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/provider"
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
	// Node is the request for each node; its Name is ignored. It names
	// one GPU: GPU alternatives (Request.GPUs) are refused.
	Node Request
	// Placement says how close together the nodes must be; "" is
	// PlacementAny.
	Placement Placement
}

// Placement is how close together a cluster's nodes are placed.
type Placement string

const (
	// PlacementAny lets each node fail over on its own, wherever its
	// cheapest offer is (nodes may land on different clouds).
	PlacementAny Placement = "any"
	// PlacementSameRegion puts every node in one provider's region.
	PlacementSameRegion Placement = "same-region"
	// PlacementSameZone puts every node in one zone of one provider.
	PlacementSameZone Placement = "same-zone"
	// PlacementCompact puts every node in one zone and in one placement
	// group (an AWS cluster placement group, the sim's groups), on
	// providers whose Capabilities.CompactPlacement is true.
	PlacementCompact Placement = "compact"
)

// Placements lists the placements a ClusterRequest takes.
func Placements() []Placement {
	return []Placement{PlacementAny, PlacementSameRegion, PlacementSameZone, PlacementCompact}
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
func (p *Provisioner) LaunchCluster(ctx context.Context, req ClusterRequest) (c *Cluster, err error) {
	ctx, sp := p.startOp(ctx, "gpuprov.LaunchCluster")
	if sp.IsRecording() {
		sp.SetAttributes(attrCluster.String(req.Name), attrCount.Int(req.Nodes), attrGPU.String(req.Node.GPU))
		defer func() { endSpan(sp, err) }()
	}
	return p.launchCluster(ctx, req)
}

// launchCluster is LaunchCluster within its span.
func (p *Provisioner) launchCluster(ctx context.Context, req ClusterRequest) (*Cluster, error) {
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
	if req.Placement == "" {
		req.Placement = PlacementAny
	}
	if !slices.Contains(Placements(), req.Placement) {
		return nil, &RequestError{"placement", fmt.Sprintf("%q: want one of %v", req.Placement, Placements())}
	}
	if req.Placement != PlacementAny && min != req.Nodes {
		return nil, &RequestError{"min_nodes", fmt.Sprintf("%d: a cluster placed %s is all or nothing (leave min_nodes 0)", req.MinNodes, req.Placement)}
	}
	if req.Node.Block != nil {
		// Each node would buy a block of its own: a cluster buys none.
		return nil, &RequestError{"node.block", "a cluster does not buy capacity blocks: buy one block for every node with one launch (block.count), then launch the cluster into it with node.reservation"}
	}
	if len(req.Node.GPUs) > 0 {
		// Nodes failing over on their own would mix models in one cluster.
		return nil, &RequestError{"node.gpus", "a cluster's nodes share one GPU model: name it in node.gpu (GPU alternatives are for single VMs)"}
	}
	if len(req.Node.Volumes) > 0 {
		return nil, &RequestError{"node.volumes", "a volume attaches to one machine: a cluster's nodes cannot share the node's volumes (launch single VMs with volumes)"}
	}
	reqs := make([]Request, req.Nodes)
	for i := range reqs {
		reqs[i] = req.Node
		reqs[i].Name = fmt.Sprintf("%s-%d", req.Name, i)
		if err := reqs[i].normalize(p.providerSet()); err != nil {
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
	if req.Placement != PlacementAny {
		return p.launchPlaced(ctx, req, reqs)
	}
	cl, errs := p.launchNodes(ctx, req.Name, reqs, min, "", false)
	ready := 0
	for i, err := range errs {
		if err != nil {
			cl.Errors[reqs[i].Name] = err
		} else {
			ready++
		}
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

// launchNodes launches the nodes of cluster concurrently, each with its own
// failover, and forms the cluster as they become ready. placementGroup,
// when set, is the compact cluster's group every node is created in. With
// failFast, the first node that fails cancels the others (a placed cluster
// fails over as a whole).
func (p *Provisioner) launchNodes(ctx context.Context, cluster string, reqs []Request, min int, placementGroup string, failFast bool) (*Cluster, []error) {
	co := &coordinator{p: p, cluster: cluster, changed: make(chan struct{})}
	var join func(context.Context, Node, Conn) error
	if p.joiner != nil {
		join = co.join
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	cl := &Cluster{Name: cluster, Nodes: make([]*VM, len(reqs)), Errors: map[string]error{}}
	var wg sync.WaitGroup
	errs := make([]error, len(reqs))
	for i := range reqs {
		wg.Go(func() {
			cl.Nodes[i], errs[i] = p.launchNode(ctx, reqs[i], clusterNode{cluster: cluster, join: join,
				placementGroup: placementGroup, nodes: len(reqs), min: min})
			if errs[i] != nil && failFast {
				cancel(fmt.Errorf("%w: node %s failed", errClusterMoves, reqs[i].Name))
			}
		})
	}
	wg.Wait()
	if co.server != nil {
		cl.Server, cl.URL, cl.Kubeconfig = co.server.Server.VM, co.server.URL, co.server.Kubeconfig
	}
	return cl, errs
}

// errClusterMoves cancels the other nodes of a placed cluster when one
// fails: the cluster is relaunched as a whole elsewhere.
var errClusterMoves = errors.New("the cluster moves to another location")

// launchPlaced launches a cluster whose nodes must share one location (a
// region, a zone, a placement group): it picks the cheapest location that
// is not blocked and can hold the cluster, pins every node to it, and when
// any node fails there (a stockout on the third node, say), cancels the
// others, deletes every node and relaunches all of them in the next
// location, up to the offers bound. Nothing of a location given up is left.
func (p *Provisioner) launchPlaced(ctx context.Context, req ClusterRequest, reqs []Request) (*Cluster, error) {
	maxRounds := cmp.Or(req.Node.MaxOffers, p.maxOffers)
	tried := map[string]bool{}
	var history []error
	for round := 1; ; round++ {
		if err := context.Cause(ctx); err != nil {
			return nil, errors.Join(append([]error{errorf("cluster %s: %w", req.Name, err)}, history...)...)
		}
		if round > maxRounds {
			return nil, errors.Join(append([]error{errorf("cluster %s: %w: tried %d locations (the bound)", req.Name, ErrOffersExhausted, maxRounds)}, history...)...)
		}
		loc, o, err := p.placeCluster(ctx, req.Placement, reqs[0], tried)
		if err != nil {
			return nil, errors.Join(append([]error{errorf("cluster %s: %w", req.Name, err)}, history...)...)
		}
		tried[loc] = true
		pinned := make([]Request, len(reqs))
		for i, r := range reqs {
			r.Providers, r.Regions = []string{o.Provider}, []string{o.Location.Region}
			if req.Placement != PlacementSameRegion {
				r.Zones = []string{o.Location.Zone}
			}
			pinned[i] = r
		}
		group := ""
		if req.Placement == PlacementCompact {
			group = provider.PlacementGroupName(req.Name)
		}
		p.log.Info("cluster placed", "cluster", req.Name, "placement", req.Placement, "location", loc, "round", round)
		cl, errs := p.launchNodes(ctx, req.Name, pinned, len(pinned), group, true)
		var failed []error
		for i, err := range errs {
			if err != nil {
				cl.Errors[pinned[i].Name] = err
				failed = append(failed, err)
			}
		}
		if len(failed) == 0 {
			return cl, nil
		}
		// Give back what this location gave, whatever ctx says, and move on.
		dctx := context.WithoutCancel(ctx)
		for _, v := range cl.Nodes {
			if v != nil && !v.State.Terminal() {
				if err := p.Delete(dctx, v.Name); err != nil {
					return cl, errors.Join(append([]error{errorf("cluster %s: deleting node %s after %s failed: %w", req.Name, v.Name, loc, err)}, failed...)...)
				}
			}
		}
		if group != "" {
			// Every node there is gone: the group goes too, whichever node
			// was the last (a cancelled node leaves it to the others).
			pp := p.providers[o.Provider]
			gctx, cancel := clock.WithDeadline(dctx, p.clock, p.clock.Now().Add(pp.caps.DeleteTimeout))
			err := p.deletePlacementGroup(gctx, pp, o.Location, group)
			cancel()
			if err != nil {
				return cl, errors.Join(append([]error{errorf("cluster %s: deleting placement group %s in %s after its nodes failed: %w", req.Name, group, loc, err)}, failed...)...)
			}
		}
		history = append(history, fmt.Errorf("%s: %w", loc, errors.Join(failed...)))
	}
}

// placeCluster picks the cheapest offer for the cluster's nodes (nr, a
// normalized node request) whose location (per placement) is not in tried
// and not blocked, on a provider that can place it.
func (p *Provisioner) placeCluster(ctx context.Context, placement Placement, nr Request, tried map[string]bool) (string, *provider.Offer, error) {
	res, err := p.plan(ctx, &nr, time.Time{})
	if err != nil {
		return "", nil, err
	}
	skipped := 0
	for i := range res.Offers {
		o := &res.Offers[i]
		if placement == PlacementCompact && !p.providers[o.Provider].caps.CompactPlacement {
			continue
		}
		loc := o.Provider + "/" + o.Location.Region
		if placement != PlacementSameRegion {
			loc += "/" + o.Location.Zone
		}
		if tried[loc] {
			skipped++
			continue
		}
		if _, blocked := blockedBy(o, res.blocks); blocked {
			skipped++
			continue
		}
		return loc, o, nil
	}
	what := "no offer"
	if placement == PlacementCompact {
		what = "no offer on a provider that can place a compact cluster"
	}
	return "", nil, fmt.Errorf("%w for a %s cluster of %s×%d: %s left (%d planned, %d blocked or tried)%s", ErrNoOffers,
		placement, nr.GPU, nr.GPUCount, what, len(res.Offers), skipped, res.errorSummary())
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
	elected := []journal.Event{{Time: co.p.clock.Now(), VM: n.VM, Type: EvClusterServer, Owner: co.p.owner,
		Message: "server of cluster " + co.cluster}}
	if err := co.p.j.Commit(context.WithoutCancel(ctx), &journal.Step{Events: elected}); err != nil {
		return JoinInfo{}, false, err
	}
	co.p.emit(elected)
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
