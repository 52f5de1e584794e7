package kubernetes

import (
	"context"
	"encoding/json"
	"errors"
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

	"github.com/org/gpuprov/provider"
)

// quotaRefusal answers a pod create as the ResourceQuota admission plugin
// does when the namespace's GPUs are used up: 403 Forbidden, "exceeded
// quota: <quota>, requested: ..., used: ..., limited: ..."
// (plugin/pkg/admission/resourcequota/controller.go, through
// admission.NewForbidden).
func quotaRefusal(a k8stesting.Action) (bool, runtime.Object, error) {
	pod := a.(k8stesting.CreateAction).GetObject().(*corev1.Pod)
	return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, pod.Name,
		errors.New("exceeded quota: gpu-quota, requested: requests.nvidia.com/gpu=1, used: requests.nvidia.com/gpu=8, limited: requests.nvidia.com/gpu=8"))
}

// rbacRefusal answers as the RBAC authorizer does for a verb the identity
// lacks (403 Forbidden, `User "..." cannot <verb> resource "<resource>"
// ...`).
func rbacRefusal(a k8stesting.Action) (bool, runtime.Object, error) {
	res := a.GetResource().Resource
	scope := ` in the namespace "` + a.GetNamespace() + `"`
	if a.GetNamespace() == "" {
		scope = " at the cluster scope"
	}
	return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: res}, "",
		errors.New(`User "system:serviceaccount:gpuprov:gpuprov" cannot `+a.GetVerb()+` resource "`+res+`" in API group ""`+scope))
}

var testHostKey = &provider.HostKey{
	PrivatePEM: "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----\n",
	Public:     "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHostKeyForTests",
}

func spec(vm string, attempt int) *provider.InstanceSpec {
	return &provider.InstanceSpec{VM: vm, Installation: installation, Attempt: attempt, SSHUser: "ubuntu",
		AuthorizedKeys: []string{"ssh-ed25519 AAAAuser user@laptop"}, HostKey: testHostKey,
		UserLabels: map[string]string{"team": "vision"}}
}

func planOne(t *testing.T, p *Provider, req provider.ResourceRequest) provider.Offer {
	t.Helper()
	offers, err := p.Plan(context.Background(), &req)
	if err != nil || len(offers) == 0 {
		t.Fatalf("Plan(%+v): %v, %v", req, offers, err)
	}
	return offers[0]
}

// The pod Create sends: the deterministic name, both identity labels and the
// caller's, the zone label, a node selector on the product label and zone,
// nvidia.com/gpu limits, the configured tolerations and runtime class, the
// Secret mounted read only, no service-account token, the startup script.
// Prepare journals no key material; the Secret gets the host key at Create.
func TestCreateSendsThePod(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, gpuNode("node-1", "zone-a", "NVIDIA-A100-SXM4-80GB", 8))
	p := c.provider(t, Config{Image: "registry.example/cuda-sshd:12", RuntimeClass: "nvidia",
		Tolerations: []Toleration{{Key: "nvidia.com/gpu", Operator: "Exists"}, {Key: "pool", Value: "gpu", Effect: "NoSchedule"}}})
	o := planOne(t, p, provider.ResourceRequest{GPU: "A100-80GB", GPUCount: 2})
	s := spec("vision", 3)
	s.HostKey = nil // as the core calls Prepare: the attempt's key comes after
	prep, err := p.Prepare(ctx, &o, s)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(prep), "PRIVATE") || !strings.Contains(string(prep), `"secret":"gpuprov-vision"`) {
		t.Fatalf("prepared %s", prep)
	}
	sec, _ := c.cs.CoreV1().Secrets(namespace).Get(ctx, "gpuprov-vision", metav1.GetOptions{})
	if _, has := sec.Data[secretHostKey]; has || string(sec.Data[secretAuthorizedKeys]) != "ssh-ed25519 AAAAuser user@laptop\n" {
		t.Fatalf("secret after prepare %v", sec.Data)
	}
	s.HostKey = testHostKey
	id, err := p.Create(ctx, &o, prep, s)
	if err != nil || id != "gpuprov-vision-3" {
		t.Fatalf("Create: %q, %v", id, err)
	}
	pod, err := c.cs.CoreV1().Pods(namespace).Get(ctx, id, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l := pod.Labels
	if l[provider.LabelVM] != "vision" || l[provider.LabelInstallation] != installation || l["team"] != "vision" || l[labelZone] != "zone-a" {
		t.Fatalf("labels %v", l)
	}
	if want := map[string]string{LabelGPUProduct: "NVIDIA-A100-SXM4-80GB", LabelZone: "zone-a"}; !mapsEqual(pod.Spec.NodeSelector, want) {
		t.Fatalf("node selector %v", pod.Spec.NodeSelector)
	}
	ct := pod.Spec.Containers[0]
	lim := ct.Resources.Limits[resourceGPU]
	if lim.Value() != 2 || ct.Image != "registry.example/cuda-sshd:12" || ct.Command[2] != StartupScript ||
		ct.Env[0].Value != "ubuntu" || pod.Annotations[annotationSSHUser] != "ubuntu" {
		t.Fatalf("container %+v", ct)
	}
	if pod.Spec.RestartPolicy != corev1.RestartPolicyNever || *pod.Spec.AutomountServiceAccountToken || *pod.Spec.RuntimeClassName != "nvidia" ||
		len(pod.Spec.Tolerations) != 2 || pod.Spec.Tolerations[1].Value != "gpu" {
		t.Fatalf("pod spec %+v", pod.Spec)
	}
	if v := pod.Spec.Volumes[0].Secret; v == nil || v.SecretName != "gpuprov-vision" || *v.DefaultMode != 0o400 ||
		ct.VolumeMounts[0].MountPath != secretMountPath || !ct.VolumeMounts[0].ReadOnly {
		t.Fatalf("volume %+v mount %+v", pod.Spec.Volumes, ct.VolumeMounts)
	}
	sec, _ = c.cs.CoreV1().Secrets(namespace).Get(ctx, "gpuprov-vision", metav1.GetOptions{})
	if string(sec.Data[secretHostKey]) != testHostKey.PrivatePEM || string(sec.Data[secretHostKeyPub]) != testHostKey.Public+"\n" {
		t.Fatalf("secret after create %v", sec.Data)
	}
	svc, _ := c.cs.CoreV1().Services(namespace).Get(ctx, "gpuprov-vision", metav1.GetOptions{})
	if svc.Spec.Type != corev1.ServiceTypeNodePort || svc.Spec.Selector[provider.LabelVM] != "vision" ||
		svc.Spec.Selector[provider.LabelInstallation] != installation || svc.Labels["team"] != "vision" || svc.Spec.Ports[0].Port != 22 {
		t.Fatalf("service %+v", svc)
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// A create whose answer is lost (the API server timed out after storing
// the pod) is Transient; the replay of the same attempt meets AlreadyExists
// and adopts the pod: one pod, one id.
func TestReplayedCreateAdopts(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, gpuNode("node-1", "zone-a", "NVIDIA-L4", 4))
	lost := true
	c.cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if !lost {
			return false, nil, nil
		}
		lost = false
		pod := a.(k8stesting.CreateAction).GetObject().(*corev1.Pod).DeepCopy()
		pod.Status.Phase = corev1.PodPending
		if err := c.cs.Tracker().Create(podsGVR, pod, namespace); err != nil {
			t.Error(err)
		}
		return true, nil, apierrors.NewTimeoutError("request did not complete within requested timeout - context deadline exceeded", 2)
	})
	p := c.provider(t, Config{})
	o := planOne(t, p, provider.ResourceRequest{GPU: "L4", GPUCount: 1})
	s := spec("replay", 1)
	prep, err := p.Prepare(ctx, &o, s)
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.Create(ctx, &o, prep, s)
	if provider.KindOf(err) != provider.Transient || provider.RetryAfterOf(err) != 2*time.Second {
		t.Fatalf("lost answer: %v (kind %s), want transient with retry after 2s", err, provider.KindOf(err))
	}
	id, err := p.Create(ctx, &o, prep, s)
	if err != nil || id != "gpuprov-replay-1" {
		t.Fatalf("replay: %q, %v", id, err)
	}
	if pods := c.names(t, podsGVR); !slices.Equal(pods, []string{"gpuprov-replay-1"}) {
		t.Fatalf("pods %v", pods)
	}
	// A pod of that name that another installation made is not adopted.
	c.setPod(t, id, func(p *corev1.Pod) { p.Labels[provider.LabelInstallation] = "someone-else" })
	if _, err := p.Create(ctx, &o, prep, s); provider.KindOf(err) != provider.Unavailable {
		t.Fatalf("foreign pod adopted: %v", err)
	}
}

// The scheduler's "Insufficient nvidia.com/gpu" for the whole window is a
// Capacity error from Create, after the window on the fake clock; another
// unschedulable reason is Failed; both carry the scheduler's message.
func TestCreateWaitsOutTheUnschedulableWindow(t *testing.T) {
	for _, tc := range []struct {
		name     string
		occupy   bool
		cpuHog   bool   // another tenant's pod takes the node's CPUs
		selector string // a product label value no node has any more
		kind     provider.ErrorKind
		message  string
	}{
		{"insufficient gpu", true, false, "", provider.Capacity, "1 Insufficient nvidia.com/gpu"},
		// NodeResourcesFit's "Insufficient cpu" (kubernetes v1.37.2
		// pkg/scheduler/framework/plugins/noderesources/fit.go): the
		// pod's share of the node's CPUs is taken, the same stockout.
		{"insufficient cpu", false, true, "", provider.Capacity, "1 Insufficient cpu"},
		{"selector matches no node", false, false, "NVIDIA-B200", provider.Failed, "didn't match Pod's node affinity/selector"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			c := newCluster(t, gpuNode("node-1", "zone-a", "NVIDIA-H100-80GB-HBM3", 8))
			t.Cleanup(c.clk.AutoAdvance())
			p := c.provider(t, Config{UnschedulableWindow: time.Minute})
			o := planOne(t, p, provider.ResourceRequest{GPU: "H100-80GB", GPUCount: 8})
			if tc.occupy {
				c.occupy("node-1", 1)
			}
			if tc.cpuHog {
				hog := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "etl", Namespace: "team-c"},
					Spec: corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "etl", Resources: corev1.ResourceRequirements{
						Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("90")}}}}},
					Status: corev1.PodStatus{Phase: corev1.PodRunning}}
				if err := c.cs.Tracker().Add(hog); err != nil {
					t.Fatal(err)
				}
			}
			if tc.selector != "" {
				o.Detail, _ = json.Marshal(detail{Label: LabelGPUProduct, Product: tc.selector})
			}
			s := spec("starved", 1)
			prep, err := p.Prepare(ctx, &o, s)
			if err != nil {
				t.Fatal(err)
			}
			start := c.clk.Now()
			_, err = p.Create(ctx, &o, prep, s)
			if provider.KindOf(err) != tc.kind || !strings.Contains(err.Error(), tc.message) {
				t.Fatalf("Create: %v (kind %s), want %s naming %q", err, provider.KindOf(err), tc.kind, tc.message)
			}
			if waited := c.clk.Now().Sub(start); waited < time.Minute || waited > time.Minute+5*time.Second {
				t.Fatalf("Create waited %v, want the 1m window", waited)
			}
			// The pod is there for the core's teardown to find.
			obs, err := p.Observe(ctx, o.Location, "starved")
			if err != nil || len(obs) != 1 || obs[0].Status != provider.StatusFailed || !strings.Contains(obs[0].VendorStatus, "Unschedulable") {
				t.Fatalf("Observe after the window: %+v, %v", obs, err)
			}
		})
	}
}

// Refusals classified at the primitive: a ResourceQuota's is Quota (the
// cluster's region is blocked), RBAC's is Credentials, for Plan's node list,
// Prepare's Secret and Create's pod alike.
func TestRefusals(t *testing.T) {
	ctx := context.Background()
	t.Run("quota", func(t *testing.T) {
		c := newCluster(t, gpuNode("node-1", "zone-a", "NVIDIA-L4", 4))
		c.cs.PrependReactor("create", "pods", quotaRefusal)
		p := c.provider(t, Config{})
		o := planOne(t, p, provider.ResourceRequest{GPU: "L4"})
		s := spec("q", 1)
		prep, err := p.Prepare(ctx, &o, s)
		if err != nil {
			t.Fatal(err)
		}
		_, err = p.Create(ctx, &o, prep, s)
		if provider.KindOf(err) != provider.Quota || provider.ScopeOf(err) != provider.ScopeRegion || !apierrors.IsForbidden(err) {
			t.Fatalf("Create: %v, want quota for the region wrapping the API error", err)
		}
	})
	for _, tc := range []struct{ verb, resource, op string }{
		{"list", "nodes", "plan"},
		{"create", "secrets", "prepare"},
		{"create", "pods", "create"},
	} {
		t.Run("rbac "+tc.verb+" "+tc.resource, func(t *testing.T) {
			c := newCluster(t, gpuNode("node-1", "zone-a", "NVIDIA-L4", 4))
			p := c.provider(t, Config{})
			o := planOne(t, p, provider.ResourceRequest{GPU: "L4"})
			c.cs.PrependReactor(tc.verb, tc.resource, rbacRefusal)
			s := spec("r", 1)
			var err error
			switch tc.op {
			case "plan":
				_, err = p.Plan(ctx, &provider.ResourceRequest{GPU: "L4"})
			case "prepare":
				_, err = p.Prepare(ctx, &o, s)
			case "create":
				_, err = p.Create(ctx, &o, json.RawMessage(`{"namespace":"gpuprov","secret":"gpuprov-r","service":"gpuprov-r"}`), s)
			}
			if provider.KindOf(err) != provider.Credentials || provider.ScopeOf(err) != provider.ScopeProvider || !strings.Contains(err.Error(), "cannot "+tc.verb) {
				t.Fatalf("%s: %v, want credentials", tc.op, err)
			}
		})
	}
}
