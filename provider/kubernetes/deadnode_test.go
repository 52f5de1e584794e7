package kubernetes

import (
	"context"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stesting "k8s.io/client-go/testing"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/gpuprovtest"
	"github.com/org/gpuprov/provider"
)

// What makes a node unable to run or stop its pods: gone, tainted
// node.kubernetes.io/unreachable, or Ready not True, as the node lifecycle
// controller records a node whose kubelet stopped reporting
// (pkg/controller/nodelifecycle/node_lifecycle_controller.go).
func TestNodeDown(t *testing.T) {
	ready := gpuNode("node-1", "zone-a", "NVIDIA-L4", 4)
	unknown := ready.DeepCopy()
	unknown.Status.Conditions[0] = corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionUnknown,
		Reason: "NodeStatusUnknown", Message: "Kubelet stopped posting node status."}
	notReady := ready.DeepCopy()
	notReady.Status.Conditions[0].Status = corev1.ConditionFalse
	tainted := ready.DeepCopy()
	tainted.Spec.Taints = append(tainted.Spec.Taints, corev1.Taint{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoExecute})
	noCondition := ready.DeepCopy()
	noCondition.Status.Conditions = nil
	for _, tc := range []struct {
		name string
		node *corev1.Node
		gone bool
		want string
	}{
		{"ready", ready, false, ""},
		{"not readable", nil, false, ""},
		{"gone", nil, true, "node node-1 is gone"},
		{"kubelet stopped reporting", unknown, false, "node node-1 is not ready (Ready=Unknown Kubelet stopped posting node status.)"},
		{"not ready", notReady, false, "node node-1 is not ready (Ready=False)"},
		{"unreachable taint", tainted, false, "node node-1 is unreachable"},
		{"no ready condition", noCondition, false, "node node-1 is not ready (no Ready condition)"},
	} {
		if got := nodeDown("node-1", tc.node, tc.gone); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// A pod on a node that is down is neither Pending nor Stopping forever:
// running, its state is Unknown; deleted, it is Stopping while its grace
// period runs (a live kubelet would finish it) and Unknown once it is over,
// so that the core sends Delete again; that Delete forces it
// (GracePeriodSeconds 0), as the Kubernetes task "Force Delete StatefulSet
// Pods" does for a pod on an unreachable node. A terminating pod past its
// grace period on a node that is Ready is left to its kubelet.
func TestDeleteForcesAPodOnADeadNode(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, gpuNode("node-1", "zone-a", "NVIDIA-L4", 4))
	p := c.provider(t, Config{ServiceType: ServiceLoadBalancer})
	c.lbIngress = "198.51.100.7"
	o, id := launch(t, c, p, "dead")
	observe := func() provider.Observed {
		t.Helper()
		obs, err := p.Observe(ctx, o.Location, "dead")
		if err != nil || len(obs) != 1 {
			t.Fatalf("Observe: %+v, %v", obs, err)
		}
		return obs[0]
	}
	forced := func() bool {
		for _, a := range c.cs.Actions() {
			if d, ok := a.(k8stesting.DeleteAction); ok && d.GetResource() == podsGVR {
				if g := d.GetDeleteOptions().GracePeriodSeconds; g != nil && *g == 0 {
					return true
				}
			}
		}
		return false
	}

	c.nodeGoesDown("node-1")
	if got := observe(); got.Status != provider.StatusUnknown || got.VendorStatus != "Running: node node-1 is unreachable" || got.SSH != nil {
		t.Fatalf("running pod on an unreachable node observed as %+v", got)
	}
	if err := p.Delete(ctx, o.Location, "dead", []string{id}); err != nil {
		t.Fatal(err)
	}
	if got := observe(); got.Status != provider.StatusStopping {
		t.Fatalf("pod within its grace period observed as %+v", got)
	}
	if err := p.Delete(ctx, o.Location, "dead", []string{id}); err != nil || forced() {
		t.Fatalf("Delete within the grace period: %v, forced %v", err, forced())
	}
	c.clk.Advance(10 * time.Second)
	if got := observe(); got.Status != provider.StatusUnknown || got.VendorStatus != "Terminating: node node-1 is unreachable" {
		t.Fatalf("pod past its grace period observed as %+v", got)
	}
	if err := p.Delete(ctx, o.Location, "dead", []string{id}); err != nil || !forced() {
		t.Fatalf("Delete past the grace period: %v, forced %v", err, forced())
	}
	if obs, err := p.Observe(ctx, o.Location, "dead"); err != nil || len(obs) != 0 {
		t.Fatalf("after the forced delete: %+v, %v", obs, err)
	}

	// On a node whose kubelet reports Ready, a slow termination is the
	// kubelet's to finish.
	c2 := newCluster(t, gpuNode("node-1", "zone-a", "NVIDIA-L4", 4))
	p2 := c2.provider(t, Config{})
	o2, id2 := launch(t, c2, p2, "slow")
	c2.setPod(t, id2, func(pod *corev1.Pod) {
		at := metav1.NewTime(c2.clk.Now())
		pod.DeletionTimestamp = &at
	})
	c2.clk.Advance(time.Minute)
	c2.cs.ClearActions()
	if err := p2.Delete(ctx, o2.Location, "slow", []string{id2}); err != nil {
		t.Fatal(err)
	}
	for _, a := range c2.cs.Actions() {
		if a.GetVerb() == "delete" {
			t.Fatalf("a terminating pod on a Ready node was deleted again: %+v", a)
		}
	}
}

// A node that goes down as the VM is deleted: the pod stays Terminating (no
// kubelet confirms it), and before, the teardown waited on a Stopping pod
// until its 5-minute delete timeout and left the VM deleting. Now the
// adapter reports it Unknown once its 10 s grace period is over, the core
// sends Delete again at once (an instance it saw stopping and now does not:
// deleteInstances in failover.go), and that Delete forces it: the teardown
// ends within the grace period and a poll, and the VM is deleted.
func TestProvisionerTeardownOnADeadNode(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, gpuNode("node-1", "zone-a", "NVIDIA-L4", 4))
	var once sync.Once
	c.beforeDelete = func(*corev1.Pod) { once.Do(func() { c.nodeGoesDown("node-1") }) }
	t.Cleanup(c.clk.AutoAdvance())
	prov, _ := gpuprovtest.New(t, c.clk, func(inst string) []provider.CloudProvider {
		return []provider.CloudProvider{c.provider(t, Config{}, WithInstallation(inst))}
	})
	if _, err := prov.Launch(ctx, gpuprov.Request{Name: "lost", GPU: "L4", Timeout: time.Hour}); err != nil {
		t.Fatal(err)
	}

	const grace, poll = 10 * time.Second, 5 * time.Second // the pod's grace period, PollInterval
	start := c.clk.Now()
	if err := prov.Delete(ctx, "lost"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	took := c.clk.Now().Sub(start)
	t.Logf("teardown took %v", took)
	if took < grace || took > grace+2*poll {
		t.Fatalf("teardown took %v, want past the %v grace period and within it plus a %v poll (one to see the pod past its grace, one to see it gone)", took, grace, poll)
	}
	vm, err := prov.Get(ctx, "lost")
	if err != nil || vm.State != gpuprov.StateDeleted {
		t.Fatalf("vm %+v (%v)", vm, err)
	}
	if pods, svcs, secs := c.names(t, podsGVR), c.names(t, svcGVR), c.names(t, secGVR); len(pods)+len(svcs)+len(secs) != 0 {
		t.Fatalf("left in the namespace: pods %v services %v secrets %v", pods, svcs, secs)
	}
}
