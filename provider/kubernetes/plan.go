package kubernetes

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/org/gpuprov/provider"
)

// Node labels and resources the adapter reads.
const (
	// resourceGPU is the extended resource of NVIDIA's device plugin.
	resourceGPU corev1.ResourceName = "nvidia.com/gpu"
	// LabelGPUProduct is NVIDIA GPU feature discovery's product label (also
	// set by the GPU operator): the NVML device name with spaces as dashes,
	// "NVIDIA-H100-80GB-HBM3", "Tesla-T4".
	LabelGPUProduct = "nvidia.com/gpu.product"
	// LabelGKEAccelerator is GKE's accelerator label ("nvidia-l4"), read
	// when a node has no product label.
	LabelGKEAccelerator = "cloud.google.com/gke-accelerator"
	// LabelZone is the well-known zone label.
	LabelZone = corev1.LabelTopologyZone
)

// productAliases are GPU feature discovery spellings the shared GPU table
// does not list (NVML names of PCIe variants), and their canonical names.
var productAliases = map[string]string{
	"Tesla-V100-PCIE-16GB":  "V100",
	"Tesla-V100-SXM2-16GB":  "V100",
	"Tesla-V100-PCIE-32GB":  "V100-32GB",
	"Tesla-V100S-PCIE-32GB": "V100-32GB",
	"Tesla-P100-PCIE-16GB":  "P100",
	"Tesla-P100-SXM2-16GB":  "P100",
	"NVIDIA-H100-SXM5-80GB": "H100-80GB",
	"NVIDIA-H200-NVL":       "H200",
}

// gpuOf says which GPU a node has: the label it was read from, the label's
// value (what the pod's node selector names) and the canonical GPU name.
// A node with neither label, a MIG slice or time-shared GPU ("-MIG-",
// "-SHARED", which are not whole GPUs), or a product no table knows has
// none.
func gpuOf(n *corev1.Node) (label, product, canonical string, ok bool) {
	for _, l := range []string{LabelGPUProduct, LabelGKEAccelerator} {
		v := n.Labels[l]
		if v == "" {
			continue
		}
		if strings.Contains(v, "-MIG-") || strings.HasSuffix(v, "-SHARED") {
			return "", "", "", false
		}
		if c, known := productAliases[v]; known {
			return l, v, c, true
		}
		if g, known := provider.LookupGPU(v); known {
			return l, v, g.Name, true
		}
		return "", "", "", false
	}
	return "", "", "", false
}

// detail is Offer.Detail: what Create's node selector names.
type detail struct {
	Label   string `json:"label"`   // the product label's key
	Product string `json:"product"` // its value
}

// Plan lists the nodes (cluster-wide) and the pods bound to them, and offers,
// for each zone and GPU product, a pod with the request's GPU count where at
// least one schedulable, ready node can still give it that many allocatable
// nvidia.com/gpu and its shape of CPU and memory (see shape) beyond what its
// pods request. Nodes that are cordoned, not Ready, or carry a
// NoSchedule/NoExecute taint the configured tolerations do not tolerate
// offer nothing; neither does a request for more GPUs per pod than any node
// has. An offer's VCPUs and MemoryGB are the smallest shape among the nodes
// that can take it, so the pod fits on any of them; Create requests exactly
// that. The price is gpu_price_per_hour times the count; spot is never
// offered. Offers are cheapest first, then by zone and product.
//
// Without the right to list pods cluster-wide, Plan counts the pods of the
// namespace only (and logs it): an offer may then meet the scheduler's
// "Insufficient nvidia.com/gpu", which Create reports as Capacity.
func (p *Provider) Plan(ctx context.Context, req *provider.ResourceRequest) ([]provider.Offer, error) {
	if req.Spot == provider.SpotOnly {
		return []provider.Offer{}, nil
	}
	if len(req.Regions) > 0 && !slices.Contains(req.Regions, p.region) {
		return []provider.Offer{}, nil
	}
	count := max(req.GPUCount, 1)
	nodes, err := p.listNodes(ctx)
	if err != nil {
		return nil, err
	}
	used, err := p.requested(ctx)
	if err != nil {
		return nil, err
	}
	type group struct {
		zone, label, product, gpu string
		vcpus, memGiB             int64 // the smallest shape of a node that can take the pod
	}
	groups := map[[3]string]*group{}
	for i := range nodes {
		n := &nodes[i]
		label, product, gpu, ok := gpuOf(n)
		if !ok || (req.GPU != "" && gpu != req.GPU) || !p.schedulable(n) {
			continue
		}
		vcpus, memGiB, ok := shape(n, int64(count))
		if !ok || !fits(n, used[n.Name], usage{gpus: int64(count), milliCPU: vcpus * 1000, memory: memGiB << 30}) {
			continue
		}
		zone := n.Labels[LabelZone]
		k := [3]string{zone, label, product}
		if g := groups[k]; g != nil {
			g.vcpus, g.memGiB = min(g.vcpus, vcpus), min(g.memGiB, memGiB)
			continue
		}
		groups[k] = &group{zone: zone, label: label, product: product, gpu: gpu, vcpus: vcpus, memGiB: memGiB}
	}
	offers := []provider.Offer{}
	for _, g := range groups {
		model, _ := provider.LookupGPU(g.gpu)
		d, _ := json.Marshal(detail{Label: g.label, Product: g.product}) // two strings always marshal
		o := provider.Offer{
			Provider: p.name, Location: provider.Location{Region: p.region, Zone: g.zone},
			InstanceType: instanceType(count, g.product), GPU: g.gpu, GPUCount: count,
			GPUMemoryGB: model.MemoryGB, VCPUs: int(g.vcpus), MemoryGB: float64(g.memGiB),
			PricePerHour: p.cfg.GPUPricePerHour * float64(count), InStock: true, Detail: d,
		}
		if req.Accepts(&o) {
			offers = append(offers, o)
		}
	}
	slices.SortFunc(offers, func(a, b provider.Offer) int {
		return cmp.Or(cmp.Compare(a.PricePerHour, b.PricePerHour), cmp.Compare(a.Location.Zone, b.Location.Zone),
			cmp.Compare(a.InstanceType, b.InstanceType))
	})
	return offers, nil
}

// shape is the CPU (whole vCPUs) and memory (whole GiB) a pod of gpus GPUs
// gets on n: the node's allocatable CPU and memory in proportion to the
// share of its allocatable GPUs the pod takes, rounded down, as a cloud
// sizes its GPU instances. A node with less than one vCPU or one GiB for
// that share (or no GPUs) has no shape.
func shape(n *corev1.Node, gpus int64) (vcpus, memGiB int64, ok bool) {
	alloc := n.Status.Allocatable
	g := alloc[resourceGPU]
	if g.Value() <= 0 {
		return 0, 0, false
	}
	vcpus = alloc.Cpu().MilliValue() * gpus / g.Value() / 1000
	memGiB = alloc.Memory().Value() / g.Value() * gpus >> 30
	return vcpus, memGiB, vcpus >= 1 && memGiB >= 1
}

// fits reports whether want fits in n's allocatable beyond used.
func fits(n *corev1.Node, used, want usage) bool {
	alloc := n.Status.Allocatable
	g := alloc[resourceGPU]
	return g.Value()-used.gpus >= want.gpus && alloc.Cpu().MilliValue()-used.milliCPU >= want.milliCPU &&
		alloc.Memory().Value()-used.memory >= want.memory
}

// instanceType names a pod shape: "2xNVIDIA-H100-80GB-HBM3".
func instanceType(count int, product string) string { return fmt.Sprintf("%dx%s", count, product) }

func (p *Provider) listNodes(ctx context.Context) ([]corev1.Node, error) {
	cctx, cancel := p.call(ctx)
	defer cancel()
	list, err := p.cs.CoreV1().Nodes().List(cctx, metav1.ListOptions{})
	if err != nil {
		return nil, p.classify("plan: list nodes", err)
	}
	return list.Items, nil
}

// requested sums, per node, the requests of the pods bound to it that have
// not terminated.
func (p *Provider) requested(ctx context.Context) (map[string]usage, error) {
	opts := metav1.ListOptions{FieldSelector: "status.phase!=Succeeded,status.phase!=Failed"}
	cctx, cancel := p.call(ctx)
	defer cancel()
	list, err := p.cs.CoreV1().Pods(metav1.NamespaceAll).List(cctx, opts)
	if apierrors.IsForbidden(err) {
		p.log.Warn("kubernetes: may not list pods cluster-wide; counting the namespace's pods only",
			"provider", p.name, "namespace", p.cfg.Namespace)
		list, err = p.cs.CoreV1().Pods(p.cfg.Namespace).List(cctx, opts)
	}
	if err != nil {
		return nil, p.classify("plan: list pods", err)
	}
	used := map[string]usage{}
	for i := range list.Items {
		pod := &list.Items[i]
		if pod.Spec.NodeName == "" || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		used[pod.Spec.NodeName] = used[pod.Spec.NodeName].plus(podUsage(pod))
	}
	return used, nil
}

// usage is what pods request of a node: GPUs, CPU in millicores, memory in
// bytes.
type usage struct{ gpus, milliCPU, memory int64 }

func (u usage) plus(v usage) usage {
	return usage{gpus: u.gpus + v.gpus, milliCPU: u.milliCPU + v.milliCPU, memory: u.memory + v.memory}
}

func (u usage) atLeast(v usage) usage {
	return usage{gpus: max(u.gpus, v.gpus), milliCPU: max(u.milliCPU, v.milliCPU), memory: max(u.memory, v.memory)}
}

// podUsage is a pod's effective request of each resource: the larger of
// its containers' sum and its largest init container, a limit alone
// counting as the request (the API server defaults a request to its limit;
// an extended resource's request equals its limit).
func podUsage(pod *corev1.Pod) usage {
	get := func(c *corev1.Container) usage {
		req := func(name corev1.ResourceName) resource.Quantity {
			if q, ok := c.Resources.Requests[name]; ok {
				return q
			}
			return c.Resources.Limits[name]
		}
		g, cpu, mem := req(resourceGPU), req(corev1.ResourceCPU), req(corev1.ResourceMemory)
		return usage{gpus: g.Value(), milliCPU: cpu.MilliValue(), memory: mem.Value()}
	}
	var sum, initMax usage
	for i := range pod.Spec.Containers {
		sum = sum.plus(get(&pod.Spec.Containers[i]))
	}
	for i := range pod.Spec.InitContainers {
		initMax = initMax.atLeast(get(&pod.Spec.InitContainers[i]))
	}
	return sum.atLeast(initMax)
}

// schedulable reports whether a pod of this adapter could land on n: not
// cordoned, Ready, and every NoSchedule or NoExecute taint tolerated.
func (p *Provider) schedulable(n *corev1.Node) bool {
	if n.Spec.Unschedulable {
		return false
	}
	ready := false
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			ready = c.Status == corev1.ConditionTrue
		}
	}
	if !ready {
		return false
	}
	tols := p.tolerations()
	for i := range n.Spec.Taints {
		t := &n.Spec.Taints[i]
		if t.Effect == corev1.TaintEffectPreferNoSchedule {
			continue
		}
		if !slices.ContainsFunc(tols, func(tol corev1.Toleration) bool {
			return tol.ToleratesTaint(logr.Discard(), t, false)
		}) {
			return false
		}
	}
	return true
}

func (p *Provider) tolerations() []corev1.Toleration {
	out := make([]corev1.Toleration, len(p.cfg.Tolerations))
	for i, t := range p.cfg.Tolerations {
		out[i] = t.v1()
	}
	return out
}

// gpuQuantity is n nvidia.com/gpu.
func gpuQuantity(n int) resource.Quantity { return *resource.NewQuantity(int64(n), resource.DecimalSI) }
