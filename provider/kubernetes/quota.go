package kubernetes

import (
	"context"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/org/gpuprov/provider"
)

// requestsGPU is the one quota name the API server counts nvidia.com/gpu
// under. Extended resources cannot be overcommitted, so a quota holds them
// only as requests.<name> (Kubernetes "Resource Quotas", "Resource quota
// for extended resources"; the pod evaluator's isExtendedResourceNameForQuota
// in pkg/quota/v1/evaluator/core/pods.go). limits.nvidia.com/gpu or a bare
// nvidia.com/gpu in a quota's hard list passes validation but is never
// counted, so it bounds nothing and is not read.
var requestsGPU = corev1.ResourceName(corev1.DefaultResourceRequestsPrefix + string(resourceGPU))

// quotaResource is what one quota name means for an instance of this
// adapter: a pod (GPUs, CPU, the pod itself), its Service or its Secret.
type quotaResource struct {
	unit provider.QuotaUnit
	what string // "GPUs", completed with " in namespace <ns>"
	pod  bool   // counted by the pod evaluator, which honours quota scopes
}

// quotaResources maps the quota names that bound one more instance. CPU
// quantities count in vCPUs: the pod requests and is limited to exactly the
// offer's VCPUs (resources in create.go), and the pod evaluator counts cpu
// and requests.cpu from the requests, limits.cpu from the limits. Memory has
// no unit in provider.QuotaLimit and is left out. Service and Secret counts
// are per VM: Prepare makes one of each.
func (p *Provider) quotaResources() map[corev1.ResourceName]quotaResource {
	m := map[corev1.ResourceName]quotaResource{
		requestsGPU:                      {provider.QuotaGPUs, "GPUs", true},
		corev1.ResourcePods:              {provider.QuotaInstances, "pods", true},
		"count/pods":                     {provider.QuotaInstances, "pods (any phase)", true},
		corev1.ResourceCPU:               {provider.QuotaVCPUs, "CPUs requested", true},
		corev1.ResourceRequestsCPU:       {provider.QuotaVCPUs, "CPUs requested", true},
		corev1.ResourceLimitsCPU:         {provider.QuotaVCPUs, "CPU limits", true},
		corev1.ResourceServices:          {provider.QuotaInstances, "Services", false},
		"count/services":                 {provider.QuotaInstances, "Services", false},
		corev1.ResourceSecrets:           {provider.QuotaInstances, "Secrets", false},
		"count/secrets":                  {provider.QuotaInstances, "Secrets", false},
		corev1.ResourceServicesNodePorts: {provider.QuotaInstances, "node ports", false},
	}
	switch p.cfg.ServiceType {
	case ServiceClusterIP:
		// A ClusterIP Service allocates no node port.
		delete(m, corev1.ResourceServicesNodePorts)
	case ServiceLoadBalancer:
		// A LoadBalancer Service counts one load balancer and, as the
		// adapter leaves allocateLoadBalancerNodePorts unset (true), a
		// node port per port (services.go, serviceEvaluator.Usage).
		m[corev1.ResourceServicesLoadBalancers] = quotaResource{provider.QuotaInstances, "LoadBalancer Services", false}
	}
	return m
}

// Quotas implements provider.QuotaReader: the ResourceQuota objects of the
// namespace (one resourcequotas.list), each status.hard entry that bounds an
// instance with its status.used, as "<quota>/<resource>":
//
//	requests.nvidia.com/gpu                 GPUs
//	pods, count/pods                        instances
//	cpu, requests.cpu, limits.cpu           vCPUs (milli-CPUs as fractions)
//	services, count/services,               instances (one Service and one
//	secrets, count/secrets                  Secret per VM)
//	services.nodeports                      instances, NodePort or LoadBalancer
//	services.loadbalancers                  instances, LoadBalancer only
//
// Every limit covers every offer of the cluster. A quota scoped so that it
// cannot count the adapter's pod (BestEffort, Terminating,
// CrossNamespacePodAffinity) is left out, as is one scoped by PriorityClass
// (an admission plugin may give the pod the cluster's default class, which
// the adapter cannot see) and, in a scoped quota, every non-pod resource
// (the API server matches scoped quotas to pods only). Memory quotas are
// left out: the contract has no unit for them. A hard limit without a
// used entry (the quota controller has not counted yet) has UsageKnown
// false.
//
// Another region than the cluster's has no quotas (nil, nil). A 403 is
// Credentials: a list is never admitted by the ResourceQuota plugin, so the
// refusal is the authorizer's (no resourcequotas list right), never a
// used-up quota; the core then plans as if it could not tell.
func (p *Provider) Quotas(ctx context.Context, region string) ([]provider.QuotaLimit, error) {
	if region != p.region {
		return nil, nil
	}
	cctx, cancel := p.call(ctx)
	defer cancel()
	list, err := p.cs.CoreV1().ResourceQuotas(p.cfg.Namespace).List(cctx, metav1.ListOptions{})
	if err != nil {
		pe := p.classify("quotas: list resourcequotas", err)
		if apierrors.IsForbidden(err) {
			pe.Kind, pe.Block = provider.Credentials, provider.ScopeDefault
		}
		return nil, pe
	}
	items := list.Items
	slices.SortFunc(items, func(a, b corev1.ResourceQuota) int { return strings.Compare(a.Name, b.Name) })
	known := p.quotaResources()
	out := []provider.QuotaLimit{}
	for i := range items {
		rq := &items[i]
		scoped, counts := quotaScopes(rq)
		if !counts {
			continue
		}
		for _, name := range slices.Sorted(maps.Keys(rq.Status.Hard)) {
			r, ok := known[name]
			if !ok || (scoped && !r.pod) {
				continue
			}
			hard := rq.Status.Hard[name]
			q := provider.QuotaLimit{
				Name: rq.Name + "/" + string(name), What: r.what + " in namespace " + p.cfg.Namespace,
				Region: p.region, Unit: r.unit, Limit: quantity(r.unit, hard),
			}
			if used, ok := rq.Status.Used[name]; ok {
				q.Usage, q.UsageKnown = quantity(r.unit, used), true
			}
			out = append(out, q)
		}
	}
	return out, nil
}

// quantity reads a quota quantity in unit: CPUs with their milli-CPUs
// ("500m" is 0.5), counts as whole numbers.
func quantity(unit provider.QuotaUnit, q resource.Quantity) float64 {
	if unit == provider.QuotaVCPUs {
		return float64(q.MilliValue()) / 1000
	}
	return float64(q.Value())
}

// quotaScopes says whether rq has scopes and whether it counts the
// adapter's pod: every scope of spec.scopes and spec.scopeSelector must
// match it (the quota admission's generic.Matches; the pod's side is
// podMatchesScopeFunc in pkg/quota/v1/evaluator/core/pods.go). The pod
// sets requests equal to limits (NotBestEffort), no activeDeadlineSeconds
// (NotTerminating) and no pod affinity. PriorityClass is left out as
// unknowable (see Quotas), and any other scope does not match a pod.
func quotaScopes(rq *corev1.ResourceQuota) (scoped, counts bool) {
	scopes := slices.Clone(rq.Spec.Scopes)
	if sel := rq.Spec.ScopeSelector; sel != nil {
		for _, e := range sel.MatchExpressions {
			scopes = append(scopes, e.ScopeName)
		}
	}
	for _, s := range scopes {
		switch s {
		case corev1.ResourceQuotaScopeNotBestEffort, corev1.ResourceQuotaScopeNotTerminating:
		default:
			return true, false
		}
	}
	return len(scopes) > 0, true
}

var _ provider.QuotaReader = (*Provider)(nil)
