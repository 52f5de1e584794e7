package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/gpuprovtest"
	"github.com/org/gpuprov/provider"
)

// resourceQuota is a ResourceQuota in the adapter's namespace as the quota
// controller leaves it: status.hard copied from spec.hard, status.used what
// it counted. used values name only the resources it counted.
func resourceQuota(name string, hard, used map[string]string, scopes ...corev1.ResourceQuotaScope) *corev1.ResourceQuota {
	list := func(m map[string]string) corev1.ResourceList {
		l := corev1.ResourceList{}
		for k, v := range m {
			l[corev1.ResourceName(k)] = resource.MustParse(v)
		}
		return l
	}
	return &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec:       corev1.ResourceQuotaSpec{Hard: list(hard), Scopes: scopes},
		Status:     corev1.ResourceQuotaStatus{Hard: list(hard), Used: list(used)},
	}
}

func addObjects(t *testing.T, c *cluster, objs ...runtime.Object) {
	t.Helper()
	for _, o := range objs {
		if err := c.cs.Tracker().Add(o); err != nil {
			t.Fatal(err)
		}
	}
}

func quotaLines(qs []provider.QuotaLimit) []string {
	var out []string
	for _, q := range qs {
		s := fmt.Sprintf("%s %s %s %s limit %v", q.Region, q.Name, q.Unit, q.What, q.Limit)
		if q.UsageKnown {
			s += fmt.Sprintf(" used %v", q.Usage)
		}
		if len(q.Families)+len(q.GPUs) > 0 || q.Spot || q.OnDemand {
			s += " (restricted)"
		}
		out = append(out, s)
	}
	return out
}

// Quotas reads the namespace's ResourceQuota objects. The resource names and
// what the API server counts under them are those of the Kubernetes "Resource
// Quotas" documentation and its pod and service evaluators
// (k8s.io/kubernetes pkg/quota/v1/evaluator/core, pods.go and services.go):
// an extended resource is counted only as requests.nvidia.com/gpu
// ("Resource quota for extended resources"), so limits.nvidia.com/gpu is
// not read; memory has no unit in the contract; a quota whose scopes cannot
// match the adapter's Guaranteed, non-terminating pod (BestEffort,
// Terminating) or depend on a priority class the adapter cannot see is left
// out, and a scoped quota counts pods only, never Services.
func TestQuotas(t *testing.T) {
	prio := resourceQuota("high-priority", map[string]string{"requests.nvidia.com/gpu": "0"}, map[string]string{"requests.nvidia.com/gpu": "0"})
	prio.Spec.ScopeSelector = &corev1.ScopeSelector{MatchExpressions: []corev1.ScopedResourceSelectorRequirement{{
		ScopeName: corev1.ResourceQuotaScopePriorityClass, Operator: corev1.ScopeSelectorOpIn, Values: []string{"high"}}}}
	fresh := resourceQuota("fresh", map[string]string{"requests.nvidia.com/gpu": "4"}, nil) // not counted yet
	objs := []runtime.Object{
		resourceQuota("gpu",
			map[string]string{"requests.nvidia.com/gpu": "8", "limits.nvidia.com/gpu": "8", "requests.memory": "1Ti", "pods": "10"},
			map[string]string{"requests.nvidia.com/gpu": "4", "limits.nvidia.com/gpu": "0", "requests.memory": "512Gi", "pods": "3"}),
		resourceQuota("compute",
			map[string]string{"requests.cpu": "100500m", "limits.cpu": "200", "cpu": "300"},
			map[string]string{"requests.cpu": "60250m", "limits.cpu": "60", "cpu": "60250m"}),
		// No GPU entries: object counts only.
		resourceQuota("objects",
			map[string]string{"services.nodeports": "5", "services.loadbalancers": "2", "count/secrets": "10", "services": "6", "configmaps": "5"},
			map[string]string{"services.nodeports": "1", "services.loadbalancers": "0", "count/secrets": "2", "services": "1", "configmaps": "1"}),
		resourceQuota("best-effort", map[string]string{"pods": "0"}, map[string]string{"pods": "0"}, corev1.ResourceQuotaScopeBestEffort),
		resourceQuota("batch", map[string]string{"pods": "0"}, map[string]string{"pods": "0"}, corev1.ResourceQuotaScopeTerminating),
		resourceQuota("long-running", map[string]string{"pods": "5", "requests.nvidia.com/gpu": "16"},
			map[string]string{"pods": "5", "requests.nvidia.com/gpu": "12"}, corev1.ResourceQuotaScopeNotTerminating, corev1.ResourceQuotaScopeNotBestEffort),
		prio, fresh,
		// Another namespace's quota bounds another team.
		&corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "gpu", Namespace: "team-b"},
			Status: corev1.ResourceQuotaStatus{Hard: corev1.ResourceList{requestsGPU: resource.MustParse("0")}}},
	}
	common := []string{
		"lab compute/cpu vCPUs CPUs requested in namespace gpuprov limit 300 used 60.25",
		"lab compute/limits.cpu vCPUs CPU limits in namespace gpuprov limit 200 used 60",
		"lab compute/requests.cpu vCPUs CPUs requested in namespace gpuprov limit 100.5 used 60.25",
		"lab fresh/requests.nvidia.com/gpu GPUs GPUs in namespace gpuprov limit 4",
		"lab gpu/pods instances pods in namespace gpuprov limit 10 used 3",
		"lab gpu/requests.nvidia.com/gpu GPUs GPUs in namespace gpuprov limit 8 used 4",
		"lab long-running/pods instances pods in namespace gpuprov limit 5 used 5",
		"lab long-running/requests.nvidia.com/gpu GPUs GPUs in namespace gpuprov limit 16 used 12",
		"lab objects/count/secrets instances Secrets in namespace gpuprov limit 10 used 2",
	}
	for _, tc := range []struct {
		service string
		objects []string // the objects quota's lines, between gpu's and long-running's in name order
	}{
		{ServiceNodePort, []string{
			"lab objects/services instances Services in namespace gpuprov limit 6 used 1",
			"lab objects/services.nodeports instances node ports in namespace gpuprov limit 5 used 1",
		}},
		{ServiceLoadBalancer, []string{
			"lab objects/services instances Services in namespace gpuprov limit 6 used 1",
			"lab objects/services.loadbalancers instances LoadBalancer Services in namespace gpuprov limit 2 used 0",
			"lab objects/services.nodeports instances node ports in namespace gpuprov limit 5 used 1",
		}},
		{ServiceClusterIP, []string{
			"lab objects/services instances Services in namespace gpuprov limit 6 used 1",
		}},
	} {
		t.Run(tc.service, func(t *testing.T) {
			c := newCluster(t, gpuNode("node-1", "zone-a", "NVIDIA-L4", 4))
			addObjects(t, c, objs...)
			p := c.provider(t, Config{ServiceType: tc.service})
			got, err := p.Quotas(context.Background(), clusterName)
			if err != nil {
				t.Fatal(err)
			}
			want := slices.Concat(common, tc.objects)
			slices.Sort(want)
			if g := quotaLines(got); strings.Join(g, "\n") != strings.Join(want, "\n") {
				t.Errorf("quotas:\n%s\nwant:\n%s", strings.Join(g, "\n"), strings.Join(want, "\n"))
			}
		})
	}
}

// What the core decides from the quotas on the adapter's own offers, and
// what a user then reads in the plan: the GPU quota counts the offer's GPUs,
// the CPU quota its vCPUs (the pod requests exactly the offer's shape), the
// pods quota one. A namespace without quotas reads as none, and another
// region (another cluster's name) is not this cluster's: no call.
func TestQuotasOnOffers(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, gpuNode("node-1", "zone-a", "NVIDIA-H100-80GB-HBM3", 8), gpuNode("node-2", "zone-b", "NVIDIA-L4", 4))
	p := c.provider(t, Config{})

	if qs, err := p.Quotas(ctx, clusterName); err != nil || len(qs) != 0 {
		t.Fatalf("a namespace without ResourceQuotas: %+v, %v", qs, err)
	}
	addObjects(t, c,
		resourceQuota("gpu", map[string]string{"requests.nvidia.com/gpu": "8", "pods": "10"}, map[string]string{"requests.nvidia.com/gpu": "4", "pods": "3"}),
		resourceQuota("compute", map[string]string{"requests.cpu": "100"}, map[string]string{"requests.cpu": "60"}))
	qs, err := p.Quotas(ctx, clusterName)
	if err != nil || len(qs) != 3 {
		t.Fatalf("quotas %+v, %v", qs, err)
	}
	byName := map[string]*provider.QuotaLimit{}
	for i := range qs {
		byName[qs[i].Name] = &qs[i]
	}
	gpus, pods, cpus := byName["gpu/requests.nvidia.com/gpu"], byName["gpu/pods"], byName["compute/requests.cpu"]
	if gpus == nil || pods == nil || cpus == nil {
		t.Fatalf("quotas %+v", qs)
	}

	h100x4 := planOne(t, p, provider.ResourceRequest{GPU: "H100-80GB", GPUCount: 4}) // 48 vCPUs
	h100x5 := planOne(t, p, provider.ResourceRequest{GPU: "H100-80GB", GPUCount: 5}) // 60 vCPUs
	l4 := planOne(t, p, provider.ResourceRequest{GPU: "L4"})                         // 24 vCPUs
	if cpu := resources(&h100x4).Requests[corev1.ResourceCPU]; cpu.Value() != int64(h100x4.VCPUs) || h100x4.VCPUs != 48 {
		t.Fatalf("the pod requests %v CPUs for an offer of %d vCPUs", cpu.String(), h100x4.VCPUs)
	}
	for _, tc := range []struct {
		q         *provider.QuotaLimit
		o         *provider.Offer
		shortfall string // empty: fits
	}{
		{gpus, &h100x4, ""},
		{gpus, &h100x5, "quota 4 of 5 GPUs for GPUs in namespace gpuprov in lab (gpu/requests.nvidia.com/gpu: limit 8, 4 in use)"},
		{gpus, &l4, ""},
		{cpus, &h100x4, "quota 40 of 48 vCPUs for CPUs requested in namespace gpuprov in lab (compute/requests.cpu: limit 100, 60 in use)"},
		{cpus, &l4, ""},
		{pods, &h100x5, ""},
	} {
		if fits := tc.q.Fits(tc.o); fits != (tc.shortfall == "") {
			t.Errorf("%s on %s: fits %v", tc.q.Name, tc.o.InstanceType, fits)
		} else if !fits && tc.q.Shortfall(tc.o) != tc.shortfall {
			t.Errorf("%s on %s: %q, want %q", tc.q.Name, tc.o.InstanceType, tc.q.Shortfall(tc.o), tc.shortfall)
		}
	}

	c.cs.ClearActions()
	if qs, err := p.Quotas(ctx, "other-cluster"); err != nil || qs != nil {
		t.Fatalf("another cluster's region: %+v, %v", qs, err)
	}
	if n := len(c.cs.Actions()); n != 0 {
		t.Fatalf("another cluster's region made %d calls", n)
	}
}

// Without the right to list resourcequotas (it is optional in the RBAC
// section) the read is Credentials, whatever the 403's text: a list never
// passes through the ResourceQuota admission plugin, so it is never a quota
// exhaustion (which would block the cluster). The core then plans as if it
// could not tell. A 5xx stays Transient.
func TestQuotasRefused(t *testing.T) {
	for _, tc := range []struct {
		name  string
		react k8stesting.ReactionFunc
		kind  provider.ErrorKind
		text  string
	}{
		{"rbac", rbacRefusal, provider.Credentials, `cannot list resource "resourcequotas"`},
		{"403 naming a quota", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "resourcequotas"}, "",
				errors.New("exceeded quota: gpu, requested: requests.nvidia.com/gpu=1"))
		}, provider.Credentials, "exceeded quota"},
		{"unavailable", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewServiceUnavailable("etcdserver: leader changed")
		}, provider.Transient, "leader changed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, gpuNode("node-1", "zone-a", "NVIDIA-L4", 4))
			c.cs.PrependReactor("list", "resourcequotas", tc.react)
			p := c.provider(t, Config{})
			qs, err := p.Quotas(context.Background(), clusterName)
			if qs != nil || provider.KindOf(err) != tc.kind || errors.Is(err, provider.Quota) || !strings.Contains(err.Error(), tc.text) {
				t.Fatalf("%+v, %v: want %s naming %q", qs, err, tc.kind, tc.text)
			}
			if tc.kind == provider.Credentials && provider.ScopeOf(err) == provider.ScopeRegion {
				t.Fatalf("scope %s", provider.ScopeOf(err))
			}
		})
	}
}

// Through the core: a namespace whose GPU quota is used up leaves the
// cluster's offers out of the plan with the quota named, and a launch fails
// without creating a pod, Service or Secret (before, it created the pod,
// met the ResourceQuota plugin's 403 and tore everything down). Once the
// quota frees up and the core's cache has expired, the offer is back.
func TestProvisionerReadsQuotasBeforeTrying(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, gpuNode("node-1", "zone-a", "NVIDIA-L4", 4))
	addObjects(t, c, resourceQuota("gpu", map[string]string{"requests.nvidia.com/gpu": "2"}, map[string]string{"requests.nvidia.com/gpu": "2"}))
	t.Cleanup(c.clk.AutoAdvance())
	prov, _ := gpuprovtest.New(t, c.clk, func(inst string) []provider.CloudProvider {
		return []provider.CloudProvider{c.provider(t, Config{}, WithInstallation(inst))}
	})
	want := "quota 0 of 1 GPUs for GPUs in namespace gpuprov in lab (gpu/requests.nvidia.com/gpu: limit 2, 2 in use)"

	res, err := prov.Plan(ctx, gpuprov.Request{GPU: "L4"})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Offers) != 0 || len(res.Skipped) != 1 || res.Skipped[0].Reason != want || res.Skipped[0].Offer.Location.Zone != "zone-a" {
		t.Fatalf("plan offers %+v skipped %+v", res.Offers, res.Skipped)
	}
	c.cs.ClearActions()
	_, err = prov.Launch(ctx, gpuprov.Request{Name: "q", GPU: "L4", Timeout: time.Minute})
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("launch: %v, want an error naming %q", err, want)
	}
	for _, a := range c.cs.Actions() {
		if a.GetVerb() == "create" {
			t.Fatalf("launch against a used-up quota created %s", a.GetResource().Resource)
		}
	}

	rq := resourceQuota("gpu", map[string]string{"requests.nvidia.com/gpu": "2"}, map[string]string{"requests.nvidia.com/gpu": "0"})
	if err := c.cs.Tracker().Update(corev1.SchemeGroupVersion.WithResource("resourcequotas"), rq, namespace); err != nil {
		t.Fatal(err)
	}
	c.clk.Advance(gpuprov.DefaultQuotaTTL + time.Second)
	if res, err := prov.Plan(ctx, gpuprov.Request{GPU: "L4"}); err != nil || len(res.Offers) != 1 || len(res.Skipped) != 0 {
		t.Fatalf("after the quota freed up: offers %+v skipped %+v, %v", res.Offers, res.Skipped, err)
	}
}
