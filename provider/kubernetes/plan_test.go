package kubernetes

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/org/gpuprov/provider"
)

func TestGPUOfNode(t *testing.T) {
	for _, tc := range []struct {
		label, value, want string
	}{
		{LabelGPUProduct, "NVIDIA-H100-80GB-HBM3", "H100-80GB"},
		{LabelGPUProduct, "NVIDIA-A100-SXM4-40GB", "A100-40GB"},
		{LabelGPUProduct, "NVIDIA-A100-80GB-PCIe", "A100-80GB"},
		{LabelGPUProduct, "Tesla-T4", "T4"},
		{LabelGPUProduct, "NVIDIA-L4", "L4"},
		{LabelGPUProduct, "NVIDIA-GeForce-RTX-4090", "RTX4090"},
		{LabelGPUProduct, "NVIDIA-RTX-6000-Ada-Generation", "RTX6000-ADA"},
		{LabelGPUProduct, "Tesla-V100-PCIE-32GB", "V100-32GB"},
		{LabelGPUProduct, "NVIDIA-H100-NVL", "H100-NVL"},
		{LabelGKEAccelerator, "nvidia-tesla-a100", "A100-40GB"},
		{LabelGKEAccelerator, "nvidia-l4", "L4"},
		{LabelGPUProduct, "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", ""}, // a MIG slice is not a whole GPU
		{LabelGPUProduct, "NVIDIA-A100-SXM4-40GB-SHARED", ""},     // nor is a time-shared one
		{LabelGPUProduct, "NVIDIA-Quadro-Nonesuch", ""},
		{"example.com/gpu", "NVIDIA-L4", ""},
	} {
		n := &corev1.Node{}
		n.Labels = map[string]string{tc.label: tc.value}
		label, product, got, ok := gpuOf(n)
		if got != tc.want || ok != (tc.want != "") || (ok && (label != tc.label || product != tc.value)) {
			t.Errorf("%s=%s: %q %q %q %v, want %q", tc.label, tc.value, label, product, got, ok, tc.want)
		}
	}
}

// Plan offers, per zone and product, what one node can still give a pod:
// allocatable minus the requests of the pods bound to it (in any namespace),
// on nodes that are schedulable, Ready and whose taints are tolerated.
func TestPlan(t *testing.T) {
	cordoned := gpuNode("node-4", "zone-a", "NVIDIA-H100-80GB-HBM3", 8)
	cordoned.Spec.Unschedulable = true
	notReady := gpuNode("node-5", "zone-b", "NVIDIA-H100-80GB-HBM3", 8)
	notReady.Status.Conditions[0].Status = corev1.ConditionFalse
	tainted := gpuNode("node-6", "zone-c", "NVIDIA-H100-80GB-HBM3", 8)
	tainted.Spec.Taints = append(tainted.Spec.Taints, corev1.Taint{Key: "reserved", Value: "research", Effect: corev1.TaintEffectNoSchedule})
	preferNot := gpuNode("node-7", "zone-c", "NVIDIA-L4", 2)
	preferNot.Spec.Taints = []corev1.Taint{{Key: "spot", Effect: corev1.TaintEffectPreferNoSchedule}}
	mig := gpuNode("node-8", "zone-a", "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", 7)
	c := newCluster(t,
		gpuNode("node-1", "zone-a", "NVIDIA-H100-80GB-HBM3", 8),
		gpuNode("node-2", "zone-a", "NVIDIA-H100-80GB-HBM3", 8),
		gpuNode("node-3", "zone-b", "NVIDIA-L4", 4),
		cordoned, notReady, tainted, preferNot, mig)
	c.occupy("node-1", 6)
	c.occupy("node-2", 3)
	p := c.provider(t, Config{GPUPricePerHour: 2.5})
	ctx := context.Background()

	for _, tc := range []struct {
		req  provider.ResourceRequest
		want []string // zone/instance type $price
	}{
		{provider.ResourceRequest{GPU: "H100-80GB", GPUCount: 4}, []string{"zone-a/4xNVIDIA-H100-80GB-HBM3 $10.00"}},
		{provider.ResourceRequest{GPU: "H100-80GB", GPUCount: 5}, []string{"zone-a/5xNVIDIA-H100-80GB-HBM3 $12.50"}},
		{provider.ResourceRequest{GPU: "H100-80GB", GPUCount: 6}, nil}, // node-2 has 5 free, node-1 2
		{provider.ResourceRequest{GPU: "H100-80GB", GPUCount: 9}, nil}, // more than any node has
		{provider.ResourceRequest{GPU: "L4"}, []string{"zone-b/1xNVIDIA-L4 $2.50", "zone-c/1xNVIDIA-L4 $2.50"}},
		{provider.ResourceRequest{GPU: "L4", GPUCount: 3}, []string{"zone-b/3xNVIDIA-L4 $7.50"}},
		{provider.ResourceRequest{GPU: "L4", MaxPricePerHour: 2}, nil},
		{provider.ResourceRequest{GPU: "L4", Zones: []string{"zone-c"}}, []string{"zone-c/1xNVIDIA-L4 $2.50"}},
		{provider.ResourceRequest{GPU: "L4", Regions: []string{"elsewhere"}}, nil},
		{provider.ResourceRequest{GPU: "L4", Spot: provider.SpotOnly}, nil},
		// A cluster has no reservations: a request that requires one,
		// or names one, gets nothing here (and no error: another
		// provider may hold it); one that forbids them gets the nodes.
		{provider.ResourceRequest{GPU: "L4", Reserved: provider.RequireReserved}, nil},
		{provider.ResourceRequest{GPU: "L4", Reservation: "cr-0123456789abcdef0"}, nil},
		{provider.ResourceRequest{GPU: "L4", Reserved: provider.ForbidReserved, Zones: []string{"zone-b"}}, []string{"zone-b/1xNVIDIA-L4 $2.50"}},
		// A pod gets the node's CPU and memory in proportion to its
		// GPUs: 24 vCPUs of node-3's 96 for one of its 4 L4s, 48 of
		// node-7's for one of its 2.
		{provider.ResourceRequest{GPU: "L4", MinVCPUs: 30}, []string{"zone-c/1xNVIDIA-L4 $2.50"}},
		{provider.ResourceRequest{GPU: "L4", MinMemoryGB: 769}, nil},
		{provider.ResourceRequest{GPU: "L4", DiskGB: 100}, nil}, // no disk is promised
		{provider.ResourceRequest{GPU: "A100-40GB"}, nil},
	} {
		offers, err := p.Plan(ctx, &tc.req)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, o := range offers {
			got = append(got, fmt.Sprintf("%s/%s $%.2f", o.Location.Zone, o.InstanceType, o.PricePerHour))
			var d detail
			if o.Location.Region != clusterName || o.Provider != ID || !o.InStock || o.GPUMemoryGB == 0 ||
				json.Unmarshal(o.Detail, &d) != nil || d.Label != LabelGPUProduct || d.Product == "" {
				t.Errorf("offer %+v", o)
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%+v: offers %v, want %v", tc.req, got, tc.want)
		}
	}

	// The offer's shape, and a node whose CPUs other pods hold offers no
	// pod its share does not fit in.
	if o := planOne(t, p, provider.ResourceRequest{GPU: "H100-80GB", GPUCount: 4}); o.VCPUs != 48 || o.MemoryGB != 768 {
		t.Errorf("4 of 8 H100s: %d vCPUs %v GB, want 48 and 768", o.VCPUs, o.MemoryGB)
	}
	cpuHog := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "etl", Namespace: "team-c"},
		Spec: corev1.PodSpec{NodeName: "node-3", Containers: []corev1.Container{{Name: "etl", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("90")}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	if err := c.cs.Tracker().Add(cpuHog); err != nil {
		t.Fatal(err)
	}
	if offers, _ := p.Plan(ctx, &provider.ResourceRequest{GPU: "L4"}); len(offers) != 1 || offers[0].Location.Zone != "zone-c" {
		t.Errorf("node-3 with 6 CPUs left offers a pod of 24: %+v", offers)
	}

	// With tolerations of its own, the tainted node is offered; with none,
	// the GPU nodes' common nvidia.com/gpu taint is not tolerated either
	// (a PreferNoSchedule taint never keeps a pod off).
	p2 := c.provider(t, Config{Tolerations: []Toleration{{Operator: "Exists"}}})
	if offers, _ := p2.Plan(ctx, &provider.ResourceRequest{GPU: "H100-80GB", GPUCount: 8}); len(offers) != 1 || offers[0].Location.Zone != "zone-c" {
		t.Errorf("tolerating everything: %+v", offers)
	}
	p3 := c.provider(t, Config{Tolerations: []Toleration{}})
	if offers, _ := p3.Plan(ctx, &provider.ResourceRequest{GPU: "L4"}); len(offers) != 1 || offers[0].Location.Zone != "zone-c" {
		t.Errorf("tolerating nothing: %+v", offers)
	}
}

// Without the right to list pods cluster-wide, Plan counts the namespace's
// pods and still offers.
func TestPlanWithoutClusterWidePods(t *testing.T) {
	c := newCluster(t, gpuNode("node-1", "zone-a", "NVIDIA-L4", 4))
	c.cs.PrependReactor("list", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetNamespace() == "" {
			return rbacRefusal(a)
		}
		return false, nil, nil
	})
	p := c.provider(t, Config{})
	offers, err := p.Plan(context.Background(), &provider.ResourceRequest{GPU: "L4", GPUCount: 4})
	if err != nil || len(offers) != 1 {
		t.Fatalf("Plan: %+v, %v", offers, err)
	}
}
