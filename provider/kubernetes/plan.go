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
// least one schedulable, ready node has that many allocatable nvidia.com/gpu
// not requested by its pods. Nodes that are cordoned, not Ready, or carry a
// NoSchedule/NoExecute taint the configured tolerations do not tolerate
// offer nothing; neither does a request for more GPUs per pod than any node
// has. The price is gpu_price_per_hour times the count; spot is never
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
	used, err := p.gpusInUse(ctx)
	if err != nil {
		return nil, err
	}
	type group struct {
		zone, label, product, gpu string
		bestFree                  int64
	}
	groups := map[[3]string]*group{}
	for i := range nodes {
		n := &nodes[i]
		label, product, gpu, ok := gpuOf(n)
		if !ok || (req.GPU != "" && gpu != req.GPU) || !p.schedulable(n) {
			continue
		}
		alloc := n.Status.Allocatable[resourceGPU]
		free := alloc.Value() - used[n.Name]
		zone := n.Labels[LabelZone]
		k := [3]string{zone, label, product}
		g := groups[k]
		if g == nil {
			g = &group{zone: zone, label: label, product: product, gpu: gpu}
			groups[k] = g
		}
		g.bestFree = max(g.bestFree, free)
	}
	offers := []provider.Offer{}
	for _, g := range groups {
		if g.bestFree < int64(count) {
			continue
		}
		model, _ := provider.LookupGPU(g.gpu)
		d, _ := json.Marshal(detail{Label: g.label, Product: g.product}) // two strings always marshal
		o := provider.Offer{
			Provider: p.name, Location: provider.Location{Region: p.region, Zone: g.zone},
			InstanceType: instanceType(count, g.product), GPU: g.gpu, GPUCount: count,
			GPUMemoryGB: model.MemoryGB, PricePerHour: p.cfg.GPUPricePerHour * float64(count),
			InStock: true, Detail: d,
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

// gpusInUse sums, per node, the nvidia.com/gpu requests of the pods bound to
// it that have not terminated.
func (p *Provider) gpusInUse(ctx context.Context) (map[string]int64, error) {
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
	used := map[string]int64{}
	for i := range list.Items {
		pod := &list.Items[i]
		if pod.Spec.NodeName == "" || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		used[pod.Spec.NodeName] += gpuRequest(pod)
	}
	return used, nil
}

// gpuRequest is a pod's effective nvidia.com/gpu request: the larger of its
// containers' sum and its largest init container (an extended resource's
// request equals its limit; a limit alone counts as the request).
func gpuRequest(pod *corev1.Pod) int64 {
	get := func(c *corev1.Container) int64 {
		if q, ok := c.Resources.Requests[resourceGPU]; ok {
			return q.Value()
		}
		q := c.Resources.Limits[resourceGPU]
		return q.Value()
	}
	var sum, initMax int64
	for i := range pod.Spec.Containers {
		sum += get(&pod.Spec.Containers[i])
	}
	for i := range pod.Spec.InitContainers {
		initMax = max(initMax, get(&pod.Spec.InitContainers[i]))
	}
	return max(sum, initMax)
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
