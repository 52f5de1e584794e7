package kubernetes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/gpuprovtest"
	"github.com/org/gpuprov/provider"
)

// forbiddenStatus is the body the API server writes for a 403: the Status
// that apierrors.NewForbidden(resource, name, err) builds, which is what
// admission.NewForbidden (k8s.io/apiserver pkg/admission/errors.go) returns
// for every admission plugin's refusal and what the authorization filter
// returns for a denied request (name "" for a create or a list: `pods is
// forbidden: ...`). causes is the JSON of details.causes, or "".
func forbiddenStatus(resourceName, name, detail, causes string) string {
	msg := fmt.Sprintf("%s %q is forbidden: %s", resourceName, name, detail)
	if name == "" {
		msg = fmt.Sprintf("%s is forbidden: %s", resourceName, detail)
	}
	m, _ := json.Marshal(msg)
	details := fmt.Sprintf(`{"name":%q,"kind":%q}`, name, resourceName)
	if name == "" {
		details = fmt.Sprintf(`{"kind":%q}`, resourceName)
	}
	if causes != "" {
		details = strings.TrimSuffix(details, "}") + `,"causes":` + causes + "}"
	}
	return `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":` + string(m) +
		`,"reason":"Forbidden","details":` + details + `,"code":403}`
}

// TestAdmissionRefusals sends a pod create to an HTTP server that answers
// with the 403 body each refuser writes, through client-go as the adapter
// builds it, and checks the error kind and block scope. Only the
// authorizer's denial is Credentials; each admission plugin's refusal is
// what its text says (see forbidden in errors.go). Every row cites the
// source that formats its message (kubernetes/kubernetes v1.37.2 and
// k8s.io/apiserver v0.37.2).
func TestAdmissionRefusals(t *testing.T) {
	const pod = "gpuprov-train-1"
	for _, tc := range []struct {
		name   string
		body   string
		kind   provider.ErrorKind
		scope  provider.Scope
		reason string // the reference
	}{
		{"rbac", forbiddenStatus("pods", "", `User "system:serviceaccount:gpuprov:gpuprov" cannot create resource "pods" in API group "" in the namespace "gpuprov"`, ""),
			provider.Credentials, provider.ScopeProvider,
			"staging/src/k8s.io/apiserver/pkg/endpoints/handlers/responsewriters/errors.go, forbiddenMessage (namespaced)"},
		{"rbac at the cluster scope", forbiddenStatus("nodes", "", `User "system:serviceaccount:gpuprov:gpuprov" cannot list resource "nodes" in API group "" at the cluster scope`, ""),
			provider.Credentials, provider.ScopeProvider,
			"responsewriters/errors.go, forbiddenMessage (cluster scope)"},
		{"quota exceeded", forbiddenStatus("pods", pod, "exceeded quota: gpu, requested: requests.nvidia.com/gpu=2, used: requests.nvidia.com/gpu=16, limited: requests.nvidia.com/gpu=16", ""),
			provider.Quota, provider.ScopeRegion,
			`staging/src/k8s.io/apiserver/pkg/admission/plugin/resourcequota/controller.go, CheckRequest: "exceeded quota: %s, requested: %s, used: %s, limited: %s"`},
		{"no covering quota", forbiddenStatus("pods", pod, "insufficient quota to consume: requests.nvidia.com/gpu", ""),
			provider.Quota, provider.ScopeRegion,
			`resourcequota/controller.go, CheckRequest: "insufficient quota to consume: %v" (limitedResources without a covering quota)`},
		{"quota status unknown", forbiddenStatus("pods", pod, "status unknown for quota: compute, resources: limits.cpu,limits.memory", ""),
			provider.Transient, provider.ScopeOffer,
			`resourcequota/controller.go, CheckRequest: "status unknown for quota: %s, resources: %s" (hasUsageStats false until the quota controller counts)`},
		{"quota must specify", forbiddenStatus("pods", pod, "failed quota: compute: must specify limits.cpu for: vm; limits.memory for: vm", ""),
			provider.Unavailable, provider.ScopeRegion,
			`resourcequota/controller.go: "failed quota: %s: %v" around pkg/quota/v1/evaluator/core/pods.go Constraints: "must specify %s"`},
		{"limit range max gpu", forbiddenStatus("pods", pod, "maximum nvidia.com/gpu usage per Container is 1, but limit is 8", ""),
			provider.Unavailable, provider.ScopeOffer,
			`plugin/pkg/admission/limitranger/admission.go, maxConstraint: "maximum %s usage per %s is %s, but limit is %s"`},
		{"limit range min cpu per pod", forbiddenStatus("pods", pod, "minimum cpu usage per Pod is 64, but request is 48", ""),
			provider.Unavailable, provider.ScopeOffer,
			`limitranger/admission.go, minConstraint: "minimum %s usage per %s is %s, but request is %s"`},
		{"limit range two violations", forbiddenStatus("pods", pod, "[maximum cpu usage per Container is 8, but limit is 48, maximum memory usage per Container is 64Gi, but limit is 768Gi]", ""),
			provider.Unavailable, provider.ScopeOffer,
			"limitranger/admission.go, PodValidateLimitFunc: utilerrors.NewAggregate of the violations, \"[a, b]\""},
		{"limit range lister failed", forbiddenStatus("pods", pod, "unable to create /v1, Resource=pods at this time because there was an error enforcing limit ranges", ""),
			provider.Transient, provider.ScopeOffer,
			`limitranger/admission.go, GetLimitRanges: "unable to %s %v at this time because there was an error enforcing limit ranges"`},
		{"namespace terminating", forbiddenStatus("pods", pod, "unable to create new content in namespace gpuprov because it is being terminated",
			`[{"reason":"NamespaceTerminating","message":"namespace gpuprov is being terminated","field":"metadata.namespace"}]`),
			provider.Unavailable, provider.ScopeRegion,
			"staging/src/k8s.io/apiserver/pkg/admission/plugin/namespace/lifecycle/admission.go, Admit: the message and the NamespaceTerminating cause"},
		{"runtime class missing", forbiddenStatus("pods", pod, `pod rejected: RuntimeClass "nvidia" not found`, ""),
			provider.Unavailable, provider.ScopeRegion,
			`plugin/pkg/admission/runtimeclass/admission.go, prepareObjects: "pod rejected: RuntimeClass %q not found"`},
		{"runtime class selector conflict", forbiddenStatus("pods", pod, "conflict: runtimeClass.scheduling.nodeSelector[nvidia.com/gpu.product] = NVIDIA-L4; pod.spec.nodeSelector[nvidia.com/gpu.product] = NVIDIA-H100-80GB-HBM3", ""),
			provider.Unavailable, provider.ScopeOffer,
			`runtimeclass/admission.go, setScheduling: "conflict: runtimeClass.scheduling.nodeSelector[%s] = %s; pod.spec.nodeSelector[%s] = %s"`},
		{"pod security", forbiddenStatus("pods", pod, `violates PodSecurity "restricted:latest": runAsNonRoot != true (pod or container "vm" must set securityContext.runAsNonRoot=true)`, ""),
			provider.Unavailable, provider.ScopeRegion, "Pod Security Admission (kubernetes.io/docs/concepts/security/pod-security-admission)"},
		{"webhook denial", forbiddenStatus("pods", pod, `admission webhook "gpu-policy.example.com" denied the request: GPU pods need a cost-center label`, ""),
			provider.Unavailable, provider.ScopeRegion,
			`staging/src/k8s.io/apiserver/pkg/admission/plugin/webhook/errors/statuserror.go, ToStatusErr: "admission webhook %q denied the request: %s"`},
		{"another plugin", forbiddenStatus("pods", pod, "pod node label selector conflicts with its namespace node label selector", ""),
			provider.Failed, provider.ScopeOffer,
			"plugin/pkg/admission/podnodeselector/admission.go: a refusal this adapter does not know is Failed (teardown, next offer), not Credentials"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusForbidden)
				io.WriteString(w, tc.body)
			}))
			defer srv.Close()
			rc := &rest.Config{Host: srv.URL}
			tune(rc)
			cs, err := k8s.NewForConfig(rc)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, err = cs.CoreV1().Pods(namespace).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: pod}}, metav1.CreateOptions{})
			pe := classifyError("kubernetes", "create", err)
			if pe.Kind != tc.kind || pe.Scope() != tc.scope || pe.BlockFor != 0 {
				t.Fatalf("%v: %s/%s, want %s/%s (%s)", err, pe.Kind, pe.Scope(), tc.kind, tc.scope, tc.reason)
			}
			var want metav1.Status
			if err := json.Unmarshal([]byte(tc.body), &want); err != nil {
				t.Fatal(err)
			}
			msg := pe.Error()
			if !apierrors.IsForbidden(pe) || msg != "kubernetes: create: "+tc.kind.String()+": "+want.Message {
				t.Fatalf("error %q: want one prefix and the server's message %q", msg, want.Message)
			}
		})
	}
}

// limitRanger answers a pod create as the LimitRanger admission plugin
// does for a namespace with lr (Container limits, Max only): 403 with the
// violations maxConstraint writes, aggregated
// (plugin/pkg/admission/limitranger/admission.go, PodValidateLimitFunc).
func limitRanger(lr *corev1.LimitRange) k8stesting.ReactionFunc {
	return func(a k8stesting.Action) (bool, runtime.Object, error) {
		pod := a.(k8stesting.CreateAction).GetObject().(*corev1.Pod)
		var errs []error
		for _, l := range lr.Spec.Limits {
			if l.Type != corev1.LimitTypeContainer {
				continue
			}
			for _, c := range pod.Spec.Containers {
				for name, enforced := range l.Max {
					lim, ok := c.Resources.Limits[name]
					switch {
					case !ok:
						errs = append(errs, fmt.Errorf("maximum %s usage per %s is %s.  No limit is specified", name, l.Type, enforced.String()))
					case lim.Cmp(enforced) > 0:
						errs = append(errs, fmt.Errorf("maximum %s usage per %s is %s, but limit is %s", name, l.Type, enforced.String(), lim.String()))
					}
				}
			}
		}
		if len(errs) == 0 {
			return false, nil, nil
		}
		return true, nil, apierrors.NewForbidden(podsResource, pod.Name, utilerrors.NewAggregate(errs))
	}
}

// A namespace whose LimitRange allows one GPU per container refuses the
// first offer's pod of two GPUs: the launch does not abort (that refusal is
// not a credentials problem) but blocks that offer (Unavailable's 30
// minutes) and goes on to the next one, on a second cluster, where the VM
// becomes ready; the first cluster is left with nothing of it.
func TestProvisionerFailsOverPastALimitRange(t *testing.T) {
	ctx := context.Background()
	a := newCluster(t, gpuNode("node-1", "zone-a", "NVIDIA-L4", 4))
	b := newCluster(t, gpuNode("node-1", "zone-a", "NVIDIA-L4", 4))
	b.clk = a.clk
	a.cs.PrependReactor("create", "pods", limitRanger(&corev1.LimitRange{Spec: corev1.LimitRangeSpec{Limits: []corev1.LimitRangeItem{{
		Type: corev1.LimitTypeContainer, Max: corev1.ResourceList{resourceGPU: resource.MustParse("1")}}}}}))
	t.Cleanup(a.clk.AutoAdvance())
	prov, j := gpuprovtest.New(t, a.clk, func(inst string) []provider.CloudProvider {
		return []provider.CloudProvider{
			a.provider(t, Config{GPUPricePerHour: 1}, WithName("k8s-a"), WithInstallation(inst)),
			b.provider(t, Config{GPUPricePerHour: 2, Regions: []string{"lab-b"}}, WithName("k8s-b"), WithInstallation(inst)),
		}
	})

	vm, err := prov.Launch(ctx, gpuprov.Request{Name: "wide", GPU: "L4", GPUCount: 2, Timeout: time.Hour})
	if err != nil {
		t.Fatalf("launch aborted: %v", err)
	}
	if vm.State != gpuprov.StateReady || vm.Provider != "k8s-b" {
		t.Fatalf("vm %+v", vm)
	}
	as := gpuprovtest.CheckAttempts(t, j, "wide", gpuprovtest.Attempt{Provider: "k8s-a", Region: clusterName, Zone: "zone-a", Kind: "unavailable"},
		gpuprovtest.Attempt{Provider: "k8s-b", Region: "lab-b", Zone: "zone-a"})
	if !strings.Contains(as[0].Error, "maximum nvidia.com/gpu usage per Container is 1, but limit is 2") {
		t.Fatalf("first attempt's error %q does not carry the LimitRanger's message", as[0].Error)
	}
	blocks, err := j.Blocks(ctx, a.clk.Now())
	if err != nil || len(blocks) != 1 || blocks[0].Scope != "offer" || blocks[0].Provider != "k8s-a" ||
		!strings.Contains(blocks[0].Key, "|2xNVIDIA-L4|") || blocks[0].Until.Sub(blocks[0].CreatedAt) != 30*time.Minute {
		t.Fatalf("blocks %+v (%v)", blocks, err)
	}
	if pods, svcs, secs := a.names(t, podsGVR), a.names(t, svcGVR), a.names(t, secGVR); len(pods)+len(svcs)+len(secs) != 0 {
		t.Fatalf("left on the first cluster: pods %v services %v secrets %v", pods, svcs, secs)
	}
	if pods := b.names(t, podsGVR); !slices.Equal(pods, []string{"gpuprov-wide-2"}) {
		t.Fatalf("pods on the second cluster %v", pods)
	}
}

// quotaConstraints answers a pod create as the ResourceQuota plugin does in
// a namespace whose quota tracks the required compute resources: a
// container that lacks one (as podComputeUsageHelper maps requests and
// limits to quota names) is refused with "failed quota: <quota>: must
// specify <resource> for: <containers>; ..."
// (pkg/quota/v1/evaluator/core/pods.go Constraints, wrapped by
// staging/src/k8s.io/apiserver/pkg/admission/plugin/resourcequota/controller.go).
func quotaConstraints(quota string, required ...corev1.ResourceName) k8stesting.ReactionFunc {
	return func(a k8stesting.Action) (bool, runtime.Object, error) {
		pod := a.(k8stesting.CreateAction).GetObject().(*corev1.Pod)
		missing := map[corev1.ResourceName][]string{}
		for _, c := range pod.Spec.Containers {
			has := map[corev1.ResourceName]bool{}
			for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
				if _, ok := c.Resources.Requests[r]; ok {
					has[r], has["requests."+r] = true, true
				}
				if _, ok := c.Resources.Limits[r]; ok {
					has["limits."+r] = true
				}
			}
			for _, r := range required {
				if !has[r] {
					missing[r] = append(missing[r], c.Name)
				}
			}
		}
		if len(missing) == 0 {
			return false, nil, nil
		}
		var parts []string
		for _, r := range slices.Sorted(maps.Keys(missing)) {
			parts = append(parts, fmt.Sprintf("%s for: %s", r, strings.Join(missing[r], ",")))
		}
		return true, nil, apierrors.NewForbidden(podsResource, pod.Name,
			fmt.Errorf("failed quota: %s: %w", quota, errors.New("must specify "+strings.Join(parts, "; "))))
	}
}

// A namespace with a compute ResourceQuota (limits.cpu, limits.memory,
// requests.cpu, requests.memory) admits the pod: it sets the offer's CPU
// and memory as requests and limits. Before, every create there was
// refused with "must specify" and blocked the cluster for the quota TTL.
func TestComputeQuotaAdmitsThePod(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, gpuNode("node-1", "zone-a", "NVIDIA-L4", 4))
	c.cs.PrependReactor("create", "pods", quotaConstraints("compute", corev1.ResourceLimitsCPU, corev1.ResourceLimitsMemory,
		corev1.ResourceRequestsCPU, corev1.ResourceRequestsMemory))
	p := c.provider(t, Config{})
	o := planOne(t, p, provider.ResourceRequest{GPU: "L4", GPUCount: 2})
	if o.VCPUs != 48 || o.MemoryGB != 768 {
		t.Fatalf("offer %+v: want half of the node's 96 CPUs and 1536 GiB for 2 of its 4 GPUs", o)
	}
	s := spec("quota", 1)
	prep, err := p.Prepare(ctx, &o, s)
	if err != nil {
		t.Fatal(err)
	}
	id, err := p.Create(ctx, &o, prep, s)
	if err != nil {
		t.Fatalf("Create in a namespace with a compute quota: %v", err)
	}
	pod, err := c.cs.CoreV1().Pods(namespace).Get(ctx, id, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r := pod.Spec.Containers[0].Resources
	for _, l := range []corev1.ResourceList{r.Requests, r.Limits} {
		if l.Cpu().String() != "48" || l.Memory().String() != "768Gi" || l.Name(resourceGPU, resource.DecimalSI).Value() != 2 {
			t.Fatalf("resources %+v", r)
		}
	}
}
