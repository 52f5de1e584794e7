package kubernetes

import (
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
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
// Deletion is immediate, as the API server does for a pod no kubelet runs
// and as the fake always does.
type cluster struct {
	cs  *fake.Clientset
	clk *clock.Fake

	mu           sync.Mutex
	bootDelay    time.Duration
	bound        map[types.NamespacedName]time.Time
	nextPort     int32
	lbIngress    string
	beforeCreate func(pod *corev1.Pod) // runs as a pod create arrives
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

// gpuNode is a Ready node with GPU feature discovery's product label, a
// zone, internal and external addresses and gpus allocatable.
func gpuNode(name, zone, product string, gpus int) *corev1.Node {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{LabelGPUProduct: product, LabelZone: zone,
			"nvidia.com/gpu.present": "true"}},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "nvidia.com/gpu", Value: "present", Effect: corev1.TaintEffectNoSchedule}}},
		Status: corev1.NodeStatus{
			Allocatable: corev1.ResourceList{resourceGPU: *resource.NewQuantity(int64(gpus), resource.DecimalSI),
				corev1.ResourceCPU: resource.MustParse("96")},
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
	used := map[string]int64{}
	for _, p := range pods {
		if p.Spec.NodeName != "" && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			used[p.Spec.NodeName] += gpuRequest(&p)
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
			want := gpuRequest(pod)
			var insufficient, mismatch int
			var chosen *corev1.Node
			for j := range nodes {
				n := &nodes[j]
				if !matches(n.Labels, pod.Spec.NodeSelector) {
					mismatch++
					continue
				}
				alloc := n.Status.Allocatable[resourceGPU]
				if alloc.Value()-used[n.Name] < want {
					insufficient++
					continue
				}
				chosen = n
				break
			}
			if chosen == nil {
				msg := fmt.Sprintf("0/%d nodes are available:", len(nodes))
				if insufficient > 0 {
					msg += fmt.Sprintf(" %d Insufficient nvidia.com/gpu", insufficient)
				}
				if mismatch > 0 {
					if insufficient > 0 {
						msg += ","
					}
					msg += fmt.Sprintf(" %d node(s) didn't match Pod's node affinity/selector", mismatch)
				}
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
			used[chosen.Name] += want
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
			if !ok || now.Sub(at) < c.bootDelay {
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
