package kubernetes

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/org/gpuprov/clock"
)

const (
	installation = "inst-k8s-test"
	namespace    = "gpuprov"
	clusterName  = "lab"
)

var (
	podsGVR  = corev1.SchemeGroupVersion.WithResource("pods")
	podsGVK  = corev1.SchemeGroupVersion.WithKind("Pod")
	nodesGVR = corev1.SchemeGroupVersion.WithResource("nodes")
	nodesGVK = corev1.SchemeGroupVersion.WithKind("Node")
	svcGVR   = corev1.SchemeGroupVersion.WithResource("services")
	svcGVK   = corev1.SchemeGroupVersion.WithKind("Service")
	secGVR   = corev1.SchemeGroupVersion.WithResource("secrets")
	secGVK   = corev1.SchemeGroupVersion.WithKind("Secret")
)

// cluster is client-go's fake clientset with a small simulated control
// plane on the fake clock, run by reactors whenever pods are read:
//
//   - a scheduler binds each pending, unbound pod to a node that matches its
//     node selector and has enough nvidia.com/gpu not requested by the pods
//     bound to it, setting PodScheduled=True and the host IP; finding none,
//     it sets PodScheduled=False, reason Unschedulable, with the default
//     scheduler's message ("0/3 nodes are available: 1 Insufficient
//     nvidia.com/gpu, 2 node(s) didn't match Pod's node affinity/selector.");
//   - a kubelet turns a pod bound for bootDelay Running and Ready;
//   - Service creation allocates node ports (30000 on) and cluster IPs, and
//     a LoadBalancer gets an ingress IP when lbIngress is set.
//
// Deleting a pod is immediate when no kubelet has to confirm it (the pod is
// not bound, already terminated, or the delete's grace period is 0) or its
// node's kubelet is alive (Ready: it stops the pod at once and confirms).
// On a node that is down (see nodeGoesDown) the API server sets the pod's
// deletionTimestamp to now plus the grace period and the pod stays, as on
// a real cluster, until a delete with GracePeriodSeconds 0 (pod
// strategy's CheckGracefulDelete and rest.BeforeDelete in k8s.io/apiserver).
type cluster struct {
	cs  *fake.Clientset
	clk *clock.Fake

	mu           sync.Mutex
	bootDelay    time.Duration
	bound        map[types.NamespacedName]time.Time
	nextPort     int32
	lbIngress    string
	beforeCreate func(pod *corev1.Pod) // runs as a pod create arrives
	beforeDelete func(pod *corev1.Pod) // runs as a pod delete arrives
	// volumeFit, when set, is the scheduler's VolumeBinding filter: the
	// reason node cannot have pod's claims ("" when it can).
	volumeFit func(pod *corev1.Pod, node *corev1.Node) string
}

func newCluster(t *testing.T, nodes ...*corev1.Node) *cluster {
	t.Helper()
	objs := make([]runtime.Object, len(nodes))
	for i, n := range nodes {
		objs[i] = n
	}
	c := &cluster{cs: fake.NewClientset(objs...), clk: clock.NewFake(time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC)),
		bound: map[types.NamespacedName]time.Time{}, nextPort: 30000}
	c.cs.PrependReactor("get", "pods", c.onRead)
	c.cs.PrependReactor("list", "pods", c.onRead)
	c.cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		c.mu.Lock()
		hook := c.beforeCreate
		c.mu.Unlock()
		pod := a.(k8stesting.CreateAction).GetObject().(*corev1.Pod)
		// What the API server sets on every new pod.
		pod.Status.Phase, pod.CreationTimestamp = corev1.PodPending, metav1.NewTime(c.clk.Now())
		if hook != nil {
			hook(pod)
		}
		return false, nil, nil
	})
	c.cs.PrependReactor("delete", "pods", c.onDelete)
	c.cs.PrependReactor("create", "services", func(a k8stesting.Action) (bool, runtime.Object, error) {
		svc := a.(k8stesting.CreateAction).GetObject().(*corev1.Service)
		c.mu.Lock()
		defer c.mu.Unlock()
		c.nextPort++
		svc.Spec.ClusterIP = fmt.Sprintf("10.96.0.%d", c.nextPort-30000)
		if svc.Spec.Type == corev1.ServiceTypeNodePort || svc.Spec.Type == corev1.ServiceTypeLoadBalancer {
			for i := range svc.Spec.Ports {
				if svc.Spec.Ports[i].NodePort == 0 {
					svc.Spec.Ports[i].NodePort = c.nextPort
					c.nextPort++
				}
			}
		}
		if svc.Spec.Type == corev1.ServiceTypeLoadBalancer && c.lbIngress != "" {
			svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: c.lbIngress}}
		}
		return false, nil, nil
	})
	return c
}

// onDelete answers a pod delete as the API server does (see cluster).
func (c *cluster) onDelete(a k8stesting.Action) (bool, runtime.Object, error) {
	da := a.(k8stesting.DeleteAction)
	c.mu.Lock()
	hook := c.beforeDelete
	c.mu.Unlock()
	obj, err := c.cs.Tracker().Get(podsGVR, da.GetNamespace(), da.GetName())
	if err != nil {
		return false, nil, nil // the tracker answers NotFound
	}
	if hook != nil {
		hook(obj.(*corev1.Pod))
		if obj, err = c.cs.Tracker().Get(podsGVR, da.GetNamespace(), da.GetName()); err != nil {
			return false, nil, nil
		}
	}
	pod := obj.(*corev1.Pod)
	opts := da.GetDeleteOptions()
	if pre := opts.Preconditions; pre != nil && pre.UID != nil && *pre.UID != pod.UID {
		return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "pods"}, pod.Name, errors.New("the UID in the precondition does not match the UID in record"))
	}
	grace := int64(0)
	switch {
	case opts.GracePeriodSeconds != nil:
		grace = *opts.GracePeriodSeconds
	case pod.Spec.TerminationGracePeriodSeconds != nil:
		grace = *pod.Spec.TerminationGracePeriodSeconds
	}
	if grace == 0 || pod.Spec.NodeName == "" || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed ||
		c.kubeletAlive(pod.Spec.NodeName) {
		return false, nil, nil // deleted at once
	}
	if pod.DeletionTimestamp == nil {
		at := metav1.NewTime(c.clk.Now().Add(time.Duration(grace) * time.Second))
		pod.DeletionTimestamp, pod.DeletionGracePeriodSeconds = &at, &grace
		c.update(pod)
	}
	return true, pod, nil
}

// kubeletAlive reports whether node's kubelet reports Ready.
func (c *cluster) kubeletAlive(node string) bool {
	obj, err := c.cs.Tracker().Get(nodesGVR, "", node)
	if err != nil {
		return false
	}
	for _, cond := range obj.(*corev1.Node).Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

// nodeGoesDown is what the node lifecycle controller does when a node's
// kubelet stops reporting: Ready becomes Unknown ("Kubelet stopped posting
// node status."), the node is tainted node.kubernetes.io/unreachable
// (NoSchedule and NoExecute), and its pods' Ready condition becomes False
// (MarkPodsNotReady) while their phase stays what the kubelet last wrote
// (pkg/controller/nodelifecycle/node_lifecycle_controller.go,
// pkg/controller/util/node/controller_utils.go).
func (c *cluster) nodeGoesDown(name string) {
	obj, err := c.cs.Tracker().Get(nodesGVR, "", name)
	if err != nil {
		panic(err)
	}
	n := obj.(*corev1.Node).DeepCopy()
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == corev1.NodeReady {
			n.Status.Conditions[i] = corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionUnknown,
				Reason: "NodeStatusUnknown", Message: "Kubelet stopped posting node status.", LastTransitionTime: metav1.NewTime(c.clk.Now())}
		}
	}
	n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoSchedule},
		corev1.Taint{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoExecute})
	if err := c.cs.Tracker().Update(nodesGVR, n, ""); err != nil {
		panic(err)
	}
	for _, pod := range c.pods(metav1.NamespaceAll) {
		if pod.Spec.NodeName != name {
			continue
		}
		for i := range pod.Status.Conditions {
			if pod.Status.Conditions[i].Type == corev1.PodReady {
				pod.Status.Conditions[i].Status = corev1.ConditionFalse
			}
		}
		c.update(&pod)
	}
}

// gpuNode is a Ready node with GPU feature discovery's product label, a
// zone, internal and external addresses, gpus allocatable and 96 CPUs and
// 1536 GiB of memory.
func gpuNode(name, zone, product string, gpus int) *corev1.Node {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{LabelGPUProduct: product, LabelZone: zone,
			"nvidia.com/gpu.present": "true"}},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "nvidia.com/gpu", Value: "present", Effect: corev1.TaintEffectNoSchedule}}},
		Status: corev1.NodeStatus{
			Allocatable: corev1.ResourceList{resourceGPU: *resource.NewQuantity(int64(gpus), resource.DecimalSI),
				corev1.ResourceCPU: resource.MustParse("96"), corev1.ResourceMemory: resource.MustParse("1536Gi")},
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
			Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0." + name[len(name)-1:]},
				{Type: corev1.NodeExternalIP, Address: "203.0.113." + name[len(name)-1:]}},
		},
	}
	if zone == "" {
		delete(n.Labels, LabelZone)
	}
	return n
}

// provider builds the adapter on the fake clientset and clock.
func (c *cluster) provider(t *testing.T, cfg Config, opts ...Option) *Provider {
	t.Helper()
	if cfg.Namespace == "" {
		cfg.Namespace = namespace
	}
	if len(cfg.Regions) == 0 {
		cfg.Regions = []string{clusterName}
	}
	p, err := New(cfg, append([]Option{WithClientset(c.cs), WithClock(c.clk), WithInstallation(installation)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// onRead runs the scheduler and the kubelets before a pod read is answered.
func (c *cluster) onRead(k8stesting.Action) (bool, runtime.Object, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reconcile()
	return false, nil, nil
}

func (c *cluster) pods(ns string) []corev1.Pod {
	obj, err := c.cs.Tracker().List(podsGVR, podsGVK, ns)
	if err != nil {
		panic(err)
	}
	items := obj.(*corev1.PodList).Items
	sort.Slice(items, func(i, j int) bool { return items[i].Name < items[j].Name })
	return items
}

func (c *cluster) nodes() []corev1.Node {
	obj, err := c.cs.Tracker().List(nodesGVR, nodesGVK, "")
	if err != nil {
		panic(err)
	}
	items := obj.(*corev1.NodeList).Items
	sort.Slice(items, func(i, j int) bool { return items[i].Name < items[j].Name })
	return items
}

func (c *cluster) update(pod *corev1.Pod) {
	if err := c.cs.Tracker().Update(podsGVR, pod, pod.Namespace); err != nil {
		panic(err)
	}
}

// reconcile is one pass of the scheduler and the kubelets; c.mu is held.
func (c *cluster) reconcile() {
	now := c.clk.Now()
	pods := c.pods(metav1.NamespaceAll)
	used := map[string]usage{}
	for _, p := range pods {
		if p.Spec.NodeName != "" && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			used[p.Spec.NodeName] = used[p.Spec.NodeName].plus(podUsage(&p))
		}
	}
	nodes := c.nodes()
	for i := range pods {
		pod := &pods[i]
		key := types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}
		switch {
		case pod.Status.Phase != "" && pod.Status.Phase != corev1.PodPending:
			continue
		case pod.Spec.NodeName == "":
			want := podUsage(pod)
			short := map[string]int{} // NodeResourcesFit's reasons, counted over the nodes
			mismatch := 0
			var chosen *corev1.Node
			for j := range nodes {
				n := &nodes[j]
				if !matches(n.Labels, pod.Spec.NodeSelector) {
					mismatch++
					continue
				}
				if c.volumeFit != nil {
					if r := c.volumeFit(pod, n); r != "" {
						short[r]++
						continue
					}
				}
				if fits(n, used[n.Name], want) {
					chosen = n
					break
				}
				alloc, u := n.Status.Allocatable, used[n.Name]
				gpus := alloc[resourceGPU]
				if alloc.Cpu().MilliValue()-u.milliCPU < want.milliCPU {
					short["Insufficient cpu"]++
				}
				if alloc.Memory().Value()-u.memory < want.memory {
					short["Insufficient memory"]++
				}
				if gpus.Value()-u.gpus < want.gpus {
					short["Insufficient nvidia.com/gpu"]++
				}
			}
			if chosen == nil {
				// The scheduler's FitError message: each reason with
				// the number of nodes it kept the pod off, sorted
				// (kubernetes v1.37.2 pkg/scheduler/framework/types.go;
				// NodeResourcesFit's "Insufficient <resource>").
				if mismatch > 0 {
					short["node(s) didn't match Pod's node affinity/selector"] = mismatch
				}
				var reasons []string
				for r, n := range short {
					reasons = append(reasons, fmt.Sprintf("%d %s", n, r))
				}
				slices.Sort(reasons)
				msg := fmt.Sprintf("0/%d nodes are available: %s", len(nodes), strings.Join(reasons, ", "))
				msg += fmt.Sprintf(". preemption: 0/%d nodes are available: %d No preemption victims found for incoming pod.", len(nodes), len(nodes))
				if c, ok := unschedulable(pod); ok && c.Message == msg {
					continue
				}
				since := metav1.NewTime(now)
				if c, ok := unschedulable(pod); ok {
					since = c.LastTransitionTime
				}
				pod.Status.Phase = corev1.PodPending
				pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
					Reason: corev1.PodReasonUnschedulable, Message: msg, LastTransitionTime: since}}
				c.update(pod)
				continue
			}
			used[chosen.Name] = used[chosen.Name].plus(want)
			pod.Spec.NodeName = chosen.Name
			pod.Status.Phase = corev1.PodPending
			pod.Status.HostIP = chosen.Status.Addresses[0].Address
			pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(now)}}
			pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: containerName,
				State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}}
			c.bound[key] = now
			c.update(pod)
			if c.bootDelay > 0 {
				continue
			}
			fallthrough
		default:
			at, ok := c.bound[key]
			if !ok || now.Sub(at) < c.bootDelay || !c.kubeletAlive(pod.Spec.NodeName) {
				continue
			}
			pod.Status.Phase = corev1.PodRunning
			pod.Status.PodIP = "10.244.0." + fmt.Sprint(len(c.bound))
			pod.Status.Conditions = append(pod.Status.Conditions, corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue})
			pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: containerName, Ready: true,
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(now)}}}}
			c.update(pod)
		}
	}
}

func matches(labels, selector map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// occupy binds a pod of another tenant to node, requesting gpus: capacity
// the cluster gives away between a Plan and a create.
func (c *cluster) occupy(node string, gpus int) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "training-" + node, Namespace: "team-b"},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "t",
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{resourceGPU: gpuQuantity(gpus)}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	if err := c.cs.Tracker().Add(pod); err != nil {
		panic(err)
	}
}

// setPod changes a pod as the cluster would (a kubelet, an eviction).
func (c *cluster) setPod(t *testing.T, name string, change func(*corev1.Pod)) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	obj, err := c.cs.Tracker().Get(podsGVR, namespace, name)
	if err != nil {
		t.Fatal(err)
	}
	pod := obj.(*corev1.Pod)
	change(pod)
	c.update(pod)
}

// names lists the names of what the namespace holds of a kind.
func (c *cluster) names(t *testing.T, gvr schema.GroupVersionResource) []string {
	t.Helper()
	var out []string
	switch gvr {
	case podsGVR:
		for _, p := range c.pods(namespace) {
			out = append(out, p.Name)
		}
	case svcGVR:
		obj, err := c.cs.Tracker().List(svcGVR, svcGVK, namespace)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range obj.(*corev1.ServiceList).Items {
			out = append(out, s.Name)
		}
	case secGVR:
		obj, err := c.cs.Tracker().List(secGVR, secGVK, namespace)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range obj.(*corev1.SecretList).Items {
			out = append(out, s.Name)
		}
	}
	sort.Strings(out)
	return out
}
