package kubernetes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
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
	"k8s.io/apimachinery/pkg/util/validation/field"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/gpuprovtest"
	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/provider"
)

var (
	pvcGVR      = corev1.SchemeGroupVersion.WithResource("persistentvolumeclaims")
	pvcGVK      = corev1.SchemeGroupVersion.WithKind("PersistentVolumeClaim")
	pvcResource = schema.GroupResource{Resource: "persistentvolumeclaims"}
)

// here is the location every volume call names: the cluster and, as the
// core passes it, the zone of the offer the volume was first planned on.
var here = provider.Location{Region: clusterName, Zone: "zone-a"}

func volSpec(name string, sizeGB int) provider.VolumeSpec {
	return provider.VolumeSpec{Name: name, Installation: installation, SizeGB: sizeGB, Location: here,
		UserLabels: map[string]string{"team": "vision"}, IdempotencyToken: "token-" + name}
}

// claims lists the namespace's claims as the API server holds them.
func (c *cluster) claims(t *testing.T) map[string]*corev1.PersistentVolumeClaim {
	t.Helper()
	obj, err := c.cs.Tracker().List(pvcGVR, pvcGVK, namespace)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*corev1.PersistentVolumeClaim{}
	for _, pvc := range obj.(*corev1.PersistentVolumeClaimList).Items {
		out[pvc.Name] = &pvc
	}
	return out
}

// setClaim changes a claim as the control plane would (the provisioner
// binding it, a delete meeting the protection finalizer).
func (c *cluster) setClaim(t *testing.T, name string, change func(*corev1.PersistentVolumeClaim)) {
	t.Helper()
	obj, err := c.cs.Tracker().Get(pvcGVR, namespace, name)
	if err != nil {
		t.Fatal(err)
	}
	pvc := obj.(*corev1.PersistentVolumeClaim)
	change(pvc)
	if err := c.cs.Tracker().Update(pvcGVR, pvc, namespace); err != nil {
		t.Fatal(err)
	}
}

func resourceGi(n int64) *resource.Quantity { return resource.NewQuantity(n<<30, resource.BinarySI) }

// sent lists the calls the clientset received as "verb resource".
func (c *cluster) sent() []string {
	var out []string
	for _, a := range c.cs.Actions() {
		out = append(out, a.GetVerb()+" "+a.GetResource().Resource)
	}
	return out
}

func TestVolumeLimits(t *testing.T) {
	p := newCluster(t).provider(t, Config{})
	want := provider.VolumeLimits{Scope: provider.VolumeCluster, MinGB: 1, AttachAtCreate: true}
	if got := p.VolumeLimits(); got != want {
		t.Fatalf("VolumeLimits %+v, want %+v: claims of the cluster, 1 GiB and up, attached by Create at the path asked", got, want)
	}
}

// A volume's life on the cluster: CreateVolume makes one claim (labels,
// ReadWriteOnce, <size>Gi, the configured class); ObserveVolume reads it
// back, available while Pending (WaitForFirstConsumer) and once Bound; a
// create sent again is the same claim; Create of an instance with the
// volume sends the pod with the claim as a volume mounted at the path
// asked; the claim cannot be deleted while a pod names it (ErrInUse:
// InvalidRequest while the pod lives, Transient once it is being deleted);
// once the pod is gone it is deleted, a delete sent again succeeds, and
// ObserveVolume finds nothing.
func TestVolumeLife(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, gpuNode("node-1", "zone-a", "NVIDIA-L4", 4))
	p := c.provider(t, Config{StorageClass: "fast-ssd"})

	v, err := p.CreateVolume(ctx, volSpec("data", 50))
	if err != nil {
		t.Fatal(err)
	}
	want := provider.Volume{ID: "gpuprov--data", Name: "data", Location: provider.Location{Region: clusterName}, SizeGB: 50, Status: provider.VolumeAvailable}
	if v != want {
		t.Fatalf("CreateVolume: %+v, want %+v", v, want)
	}
	claims := c.claims(t)
	pvc := claims["gpuprov--data"]
	if len(claims) != 1 || pvc == nil {
		t.Fatalf("claims %v", claims)
	}
	wantLabels := map[string]string{provider.LabelVM: "data", provider.LabelInstallation: installation, provider.LabelVolume: "true", "team": "vision"}
	size := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
	if !mapsEqual(pvc.Labels, wantLabels) || !slices.Equal(pvc.Spec.AccessModes, []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}) ||
		size.String() != "50Gi" || pvc.Spec.StorageClassName == nil || *pvc.Spec.StorageClassName != "fast-ssd" {
		t.Fatalf("claim %+v", pvc)
	}

	// Pending, as with WaitForFirstConsumer until a pod uses it: available.
	c.setClaim(t, "gpuprov--data", func(pvc *corev1.PersistentVolumeClaim) { pvc.Status.Phase = corev1.ClaimPending })
	if got, err := p.ObserveVolume(ctx, here, "data"); err != nil || got == nil || *got != want {
		t.Fatalf("ObserveVolume of a pending claim: %+v, %v; want %+v", got, err, want)
	}

	// A create sent again: the same claim, no second one.
	again, err := p.CreateVolume(ctx, volSpec("data", 50))
	if err != nil || again.ID != v.ID || len(c.claims(t)) != 1 {
		t.Fatalf("CreateVolume again: %+v, %v; claims %v", again, err, c.claims(t))
	}

	// An instance created with the volume.
	o := planOne(t, p, provider.ResourceRequest{GPU: "L4"})
	s := spec("train", 1)
	s.Volumes = []provider.VolumeMount{{ID: v.ID, Name: "data", MountPath: "/data"}}
	prep, err := p.Prepare(ctx, &o, s)
	if err != nil {
		t.Fatal(err)
	}
	c.cs.ClearActions()
	id, err := p.Create(ctx, &o, prep, s)
	if err != nil {
		t.Fatal(err)
	}
	var sentPod *corev1.Pod
	for _, a := range c.cs.Actions() {
		if ca, ok := a.(k8stesting.CreateAction); ok && a.GetResource() == podsGVR {
			sentPod = ca.GetObject().(*corev1.Pod)
		}
	}
	if sentPod == nil {
		t.Fatalf("no pod create among %v", c.sent())
	}
	if i, j := slices.Index(c.sent(), "get persistentvolumeclaims"), slices.Index(c.sent(), "create pods"); i < 0 || i > j {
		t.Fatalf("calls %v: want the claim read before the pod is created", c.sent())
	}
	wantVol := corev1.Volume{Name: "gpuprov--data", VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "gpuprov--data"}}}
	wantMount := corev1.VolumeMount{Name: "gpuprov--data", MountPath: "/data"}
	if vols := sentPod.Spec.Volumes; len(vols) != 2 || vols[0].Secret == nil || !reflect.DeepEqual(vols[1], wantVol) {
		t.Fatalf("pod volumes %+v, want the Secret and %+v", vols, wantVol)
	}
	if ms := sentPod.Spec.Containers[0].VolumeMounts; len(ms) != 2 || ms[0].MountPath != secretMountPath || !reflect.DeepEqual(ms[1], wantMount) {
		t.Fatalf("container mounts %+v, want the Secret's and %+v", ms, wantMount)
	}

	// Bound by the provisioner, at the size it made.
	c.setClaim(t, "gpuprov--data", func(pvc *corev1.PersistentVolumeClaim) {
		pvc.Spec.VolumeName = "pvc-0b9e"
		pvc.Status = corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound,
			Capacity: corev1.ResourceList{corev1.ResourceStorage: *resourceGi(64)}}
	})
	if got, err := p.ObserveVolume(ctx, here, "data"); err != nil || got == nil || got.Status != provider.VolumeAvailable || got.SizeGB != 64 {
		t.Fatalf("ObserveVolume of a bound claim: %+v, %v", got, err)
	}

	// In use by the pod.
	c.cs.ClearActions()
	err = p.DeleteVolume(ctx, here, v.ID)
	if !errors.Is(err, provider.ErrInUse) || provider.KindOf(err) != provider.InvalidRequest || !strings.Contains(err.Error(), id) {
		t.Fatalf("DeleteVolume while %s uses it: %v (kind %s), want invalid-request matching ErrInUse naming the pod", id, err, provider.KindOf(err))
	}
	if slices.Contains(c.sent(), "delete persistentvolumeclaims") || c.claims(t)["gpuprov--data"] == nil {
		t.Fatalf("a claim in use was sent a delete: %v", c.sent())
	}
	// The pod is being deleted: its end releases the claim.
	c.setPod(t, id, func(pod *corev1.Pod) {
		at, grace := metav1.NewTime(c.clk.Now().Add(10*time.Second)), int64(10)
		pod.DeletionTimestamp, pod.DeletionGracePeriodSeconds = &at, &grace
	})
	if err := p.DeleteVolume(ctx, here, v.ID); !errors.Is(err, provider.ErrInUse) || provider.KindOf(err) != provider.Transient {
		t.Fatalf("DeleteVolume while its pod is being deleted: %v, want transient matching ErrInUse", err)
	}
	// The pod is gone.
	if err := c.cs.Tracker().Delete(podsGVR, namespace, id); err != nil {
		t.Fatal(err)
	}
	if err := p.DeleteVolume(ctx, here, v.ID); err != nil {
		t.Fatalf("DeleteVolume: %v", err)
	}
	if claims := c.claims(t); len(claims) != 0 {
		t.Fatalf("claims left %v", claims)
	}
	if err := p.DeleteVolume(ctx, here, v.ID); err != nil {
		t.Fatalf("DeleteVolume of a volume that is gone: %v", err)
	}
	if got, err := p.ObserveVolume(ctx, here, "data"); got != nil || err != nil {
		t.Fatalf("ObserveVolume after the delete: %+v, %v", got, err)
	}
}

// A claim's status maps to the volume's: Pending and Bound available,
// Lost failed, one with a deletionTimestamp (the protection finalizer
// holding it) deleting; a delete of a claim being deleted succeeds.
func TestVolumeStatus(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t)
	p := c.provider(t, Config{})
	if _, err := p.CreateVolume(ctx, volSpec("scratch", 1)); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		change func(*corev1.PersistentVolumeClaim)
		want   provider.VolumeStatus
	}{
		{"pending", func(pvc *corev1.PersistentVolumeClaim) { pvc.Status.Phase = corev1.ClaimPending }, provider.VolumeAvailable},
		{"bound", func(pvc *corev1.PersistentVolumeClaim) { pvc.Status.Phase = corev1.ClaimBound }, provider.VolumeAvailable},
		{"lost", func(pvc *corev1.PersistentVolumeClaim) { pvc.Status.Phase = corev1.ClaimLost }, provider.VolumeFailed},
		{"terminating", func(pvc *corev1.PersistentVolumeClaim) {
			now := metav1.NewTime(c.clk.Now())
			pvc.Status.Phase, pvc.DeletionTimestamp, pvc.Finalizers = corev1.ClaimBound, &now, []string{"kubernetes.io/pvc-protection"}
		}, provider.VolumeDeleting},
	} {
		c.setClaim(t, "gpuprov--scratch", tc.change)
		got, err := p.ObserveVolume(ctx, here, "scratch")
		if err != nil || got == nil || got.Status != tc.want {
			t.Errorf("%s: %+v, %v; want %s", tc.name, got, err, tc.want)
		}
	}
	c.cs.ClearActions()
	if err := p.DeleteVolume(ctx, here, "gpuprov--scratch"); err != nil || slices.Contains(c.sent(), "delete persistentvolumeclaims") {
		t.Fatalf("DeleteVolume of a claim being deleted: %v, calls %v; want success and no second delete", err, c.sent())
	}
	// A create of the name meanwhile waits for it to go.
	if _, err := p.CreateVolume(ctx, volSpec("scratch", 1)); provider.KindOf(err) != provider.Transient {
		t.Fatalf("CreateVolume of a claim being deleted: %v, want transient", err)
	}
}

// A claim of the name that is not this installation's volume (another
// installation's, one gpuprov did not make, one with gpuprov's VM labels
// but no volume label) is never adopted, observed, deleted or given to a
// pod.
func TestVolumeOthersAreLeftAlone(t *testing.T) {
	ctx := context.Background()
	others := map[string]map[string]string{
		"theirs":  {provider.LabelVM: "theirs", provider.LabelInstallation: "inst-other", provider.LabelVolume: "true"},
		"nobodys": {"app": "postgres"},
		"vmlike":  {provider.LabelVM: "vmlike", provider.LabelInstallation: installation},
	}
	var objs []runtime.Object
	for name, labels := range others {
		objs = append(objs, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: provider.VolumeResourceName(name), Namespace: namespace, Labels: labels}})
	}
	c := newCluster(t, gpuNode("node-1", "zone-a", "NVIDIA-L4", 4))
	for _, o := range objs {
		if err := c.cs.Tracker().Add(o); err != nil {
			t.Fatal(err)
		}
	}
	p := c.provider(t, Config{})
	o := planOne(t, p, provider.ResourceRequest{GPU: "L4"})
	for name, labels := range others {
		claim := provider.VolumeResourceName(name)
		if _, err := p.CreateVolume(ctx, volSpec(name, 10)); provider.KindOf(err) != provider.InvalidRequest || !strings.Contains(err.Error(), "left alone") {
			t.Errorf("CreateVolume over %s: %v, want invalid-request", claim, err)
		}
		if got, err := p.ObserveVolume(ctx, here, name); got != nil || err != nil {
			t.Errorf("ObserveVolume of %s: %+v, %v; want nil", claim, got, err)
		}
		if err := p.DeleteVolume(ctx, here, claim); provider.KindOf(err) != provider.InvalidRequest {
			t.Errorf("DeleteVolume of %s: %v, want invalid-request", claim, err)
		}
		s := spec("thief", 1)
		s.Volumes = []provider.VolumeMount{{ID: claim, Name: name, MountPath: "/data"}}
		if _, err := p.Create(ctx, &o, []byte(`{"namespace":"gpuprov","secret":"gpuprov-thief","service":"gpuprov-thief"}`), s); provider.KindOf(err) != provider.InvalidRequest {
			t.Errorf("Create with %s: %v, want invalid-request", claim, err)
		}
		if got := c.claims(t)[claim]; got == nil || !mapsEqual(got.Labels, labels) {
			t.Errorf("claim %s after: %+v", claim, got)
		}
	}
	if pods := c.names(t, podsGVR); len(pods) != 0 {
		t.Fatalf("pods made with others' claims: %v", pods)
	}
	// A claim the core never made for the VM is not there: InvalidRequest
	// before the pod, rather than a pod the scheduler never places.
	s := spec("ghost", 1)
	s.Volumes = []provider.VolumeMount{{ID: "gpuprov--ghost", Name: "ghost", MountPath: "/data"}}
	if _, err := p.Create(ctx, &o, []byte(`{"namespace":"gpuprov","secret":"gpuprov-ghost","service":"gpuprov-ghost"}`), s); provider.KindOf(err) != provider.InvalidRequest ||
		!strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("Create with a missing claim: %v", err)
	}
}

// Bad input is InvalidRequest, and nothing reaches the API server.
func TestVolumeBadInputSendsNothing(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, gpuNode("node-1", "zone-a", "NVIDIA-L4", 4))
	p := c.provider(t, Config{})
	o := planOne(t, p, provider.ResourceRequest{GPU: "L4"})
	prep, err := p.Prepare(ctx, &o, spec("train", 1))
	if err != nil {
		t.Fatal(err)
	}
	elsewhere := provider.Location{Region: "other-cluster", Zone: "zone-a"}
	withSpec := func(change func(*provider.VolumeSpec)) provider.VolumeSpec {
		s := volSpec("data", 10)
		change(&s)
		return s
	}
	create := func(mounts ...provider.VolumeMount) error {
		s := spec("train", 1)
		s.Volumes = mounts
		_, err := p.Create(ctx, &o, prep, s)
		return err
	}
	mount := func(path string) provider.VolumeMount {
		return provider.VolumeMount{ID: "gpuprov--data", Name: "data", MountPath: path}
	}
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"size 0", func() error {
			_, err := p.CreateVolume(ctx, withSpec(func(s *provider.VolumeSpec) { s.SizeGB = 0 }))
			return err
		}},
		{"negative size", func() error {
			_, err := p.CreateVolume(ctx, withSpec(func(s *provider.VolumeSpec) { s.SizeGB = -5 }))
			return err
		}},
		{"no name", func() error {
			_, err := p.CreateVolume(ctx, withSpec(func(s *provider.VolumeSpec) { s.Name = "" }))
			return err
		}},
		{"upper case", func() error {
			_, err := p.CreateVolume(ctx, withSpec(func(s *provider.VolumeSpec) { s.Name = "Data" }))
			return err
		}},
		{"too long for a claim", func() error {
			_, err := p.CreateVolume(ctx, withSpec(func(s *provider.VolumeSpec) { s.Name = strings.Repeat("d", 55) }))
			return err
		}},
		{"another cluster", func() error {
			_, err := p.CreateVolume(ctx, withSpec(func(s *provider.VolumeSpec) { s.Location = elsewhere }))
			return err
		}},
		{"observe in another cluster", func() error { _, err := p.ObserveVolume(ctx, elsewhere, "data"); return err }},
		{"observe a bad name", func() error { _, err := p.ObserveVolume(ctx, here, "Data/x"); return err }},
		{"delete in another cluster", func() error { return p.DeleteVolume(ctx, elsewhere, "gpuprov--data") }},
		{"delete an id gpuprov does not name", func() error { return p.DeleteVolume(ctx, here, "postgres-data") }},
		{"detach an id gpuprov does not name", func() error { return p.DetachVolume(ctx, here, "pvc-1", "gpuprov-train-1") }},
		{"detach from no pod name", func() error { return p.DetachVolume(ctx, here, "gpuprov--data", "Train 1") }},
		{"attach", func() error { _, err := p.AttachVolume(ctx, here, "gpuprov--data", "gpuprov-train-1"); return err }},
		{"create: relative mount path", func() error { return create(mount("data")) }},
		{"create: unclean mount path", func() error { return create(mount("/data/../etc")) }},
		{"create: mount at /", func() error { return create(mount("/")) }},
		{"create: over the ssh keys", func() error { return create(mount(secretMountPath)) }},
		{"create: above the ssh keys", func() error { return create(mount("/etc/gpuprov")) }},
		{"create: inside the ssh keys", func() error { return create(mount(secretMountPath + "/x")) }},
		{"create: one path twice", func() error {
			return create(mount("/data"), provider.VolumeMount{ID: "gpuprov--logs", Name: "logs", MountPath: "/data"})
		}},
		{"create: a claim gpuprov does not name", func() error {
			return create(provider.VolumeMount{ID: "postgres-data", Name: "data", MountPath: "/data"})
		}},
	} {
		c.cs.ClearActions()
		err := tc.call()
		if provider.KindOf(err) != provider.InvalidRequest {
			t.Errorf("%s: %v, want invalid-request", tc.name, err)
		}
		if sent := c.sent(); len(sent) != 0 {
			t.Errorf("%s: sent %v before refusing", tc.name, sent)
		}
	}
}

// AttachVolume is refused (volumes attach at create); DetachVolume is
// success where the pod does not have the claim (or is gone) and
// InvalidRequest where it does (the claim goes with the pod).
func TestAttachAndDetach(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, gpuNode("node-1", "zone-a", "NVIDIA-L4", 4))
	p := c.provider(t, Config{})
	v, err := p.CreateVolume(ctx, volSpec("data", 10))
	if err != nil {
		t.Fatal(err)
	}
	o := planOne(t, p, provider.ResourceRequest{GPU: "L4"})
	with := spec("train", 1)
	with.Volumes = []provider.VolumeMount{{ID: v.ID, Name: "data", MountPath: "/data"}}
	without := spec("infer", 1)
	var ids []string
	for _, s := range []*provider.InstanceSpec{with, without} {
		prep, err := p.Prepare(ctx, &o, s)
		if err != nil {
			t.Fatal(err)
		}
		id, err := p.Create(ctx, &o, prep, s)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	c.cs.ClearActions()
	if _, err := p.AttachVolume(ctx, here, v.ID, ids[1]); provider.KindOf(err) != provider.InvalidRequest ||
		!strings.Contains(err.Error(), "attach at create") || len(c.sent()) != 0 {
		t.Fatalf("AttachVolume: %v (calls %v), want invalid-request saying volumes attach at create, with no call", err, c.sent())
	}
	if err := p.DetachVolume(ctx, here, v.ID, ids[0]); provider.KindOf(err) != provider.InvalidRequest || !strings.Contains(err.Error(), "released when the pod is deleted") {
		t.Fatalf("DetachVolume from the pod that has it: %v, want invalid-request", err)
	}
	if err := p.DetachVolume(ctx, here, v.ID, ids[1]); err != nil {
		t.Fatalf("DetachVolume from a pod without it: %v", err)
	}
	if err := p.DetachVolume(ctx, here, v.ID, "gpuprov-gone-1"); err != nil {
		t.Fatalf("DetachVolume from a pod that is gone: %v", err)
	}
}

// The answers the API server gives a claim's create map to kinds as the
// error table says (volumeError, forbidden): a storage ResourceQuota is
// Quota on the cluster, a LimitRange on claims Unavailable on the cluster,
// RBAC Credentials, an invalid claim InvalidRequest, an overloaded server
// Transient. Each message is the one its source formats.
func TestVolumeCreateRefusals(t *testing.T) {
	ctx := context.Background()
	const claim = "gpuprov--data"
	forbid := func(msg string) error { return apierrors.NewForbidden(pvcResource, claim, errors.New(msg)) }
	for _, tc := range []struct {
		name  string
		err   error
		kind  provider.ErrorKind
		scope provider.Scope
		// ref is where the message is formatted.
		ref string
	}{
		{"storage quota", forbid("exceeded quota: storage, requested: requests.storage=500Gi, used: requests.storage=800Gi, limited: requests.storage=1Ti"),
			provider.Quota, provider.ScopeRegion,
			`apiserver pkg/admission/plugin/resourcequota/controller.go CheckRequest; requests.storage, https://kubernetes.io/docs/concepts/policy/resource-quotas/#storage-resource-quota`},
		{"class quota", forbid("exceeded quota: gold, requested: fast-ssd.storageclass.storage.k8s.io/requests.storage=500Gi, used: fast-ssd.storageclass.storage.k8s.io/requests.storage=1Ti, limited: fast-ssd.storageclass.storage.k8s.io/requests.storage=1Ti"),
			provider.Quota, provider.ScopeRegion, "the same, <class>.storageclass.storage.k8s.io/requests.storage"},
		{"claim count quota", forbid("exceeded quota: claims, requested: persistentvolumeclaims=1, used: persistentvolumeclaims=10, limited: persistentvolumeclaims=10"),
			provider.Quota, provider.ScopeRegion, "the same, persistentvolumeclaims"},
		{"limit range max", forbid("maximum storage usage per PersistentVolumeClaim is 100Gi, but request is 500Gi"),
			provider.Unavailable, provider.ScopeRegion,
			`plugin/pkg/admission/limitranger/admission.go PersistentVolumeClaimValidateLimitFunc, maxRequestConstraint: "maximum %s usage per %s is %s, but request is %s"`},
		{"limit range min", forbid("minimum storage usage per PersistentVolumeClaim is 10Gi, but request is 1Gi"),
			provider.Unavailable, provider.ScopeRegion, `the same, minConstraint: "minimum %s usage per %s is %s, but request is %s"`},
		{"rbac", forbid(`User "system:serviceaccount:gpuprov:gpuprov" cannot create resource "persistentvolumeclaims" in API group "" in the namespace "gpuprov"`),
			provider.Credentials, provider.ScopeProvider, "apiserver responsewriters/errors.go forbiddenMessage"},
		{"invalid", apierrors.NewInvalid(schema.GroupKind{Kind: "PersistentVolumeClaim"}, claim, field.ErrorList{
			field.NotSupported(field.NewPath("spec", "accessModes"), "ReadWriteOncePod", []string{"ReadWriteOnce"})}),
			provider.InvalidRequest, provider.ScopeOffer, "StatusReasonInvalid"},
		{"unavailable", apierrors.NewServiceUnavailable("etcd is slow"), provider.Transient, provider.ScopeOffer, "StatusReasonServiceUnavailable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t)
			c.cs.PrependReactor("create", "persistentvolumeclaims", func(k8stesting.Action) (bool, runtime.Object, error) {
				return true, nil, tc.err
			})
			p := c.provider(t, Config{})
			_, err := p.CreateVolume(ctx, volSpec("data", 500))
			if provider.KindOf(err) != tc.kind || provider.ScopeOf(err) != tc.scope || !strings.Contains(err.Error(), tc.err.Error()) {
				t.Fatalf("%v: kind %s scope %s, want %s/%s (%s)", err, provider.KindOf(err), provider.ScopeOf(err), tc.kind, tc.scope, tc.ref)
			}
			if !strings.HasPrefix(err.Error(), "kubernetes: create volume: ") {
				t.Fatalf("error %q: want the op named once", err)
			}
		})
	}
}

// A pod whose claim the nodes' storage cannot make is reported by the
// scheduler, not the API: "node(s) did not have enough free storage"
// (VolumeBinding's ErrReasonNotEnoughSpace) for the whole window is
// Capacity, as a GPU stockout is; a claim bound to a volume in another
// zone ("node(s) had volume node affinity conflict") is Failed.
func TestVolumeSchedulingRefusals(t *testing.T) {
	for _, tc := range []struct {
		reason string
		kind   provider.ErrorKind
	}{
		{"node(s) did not have enough free storage", provider.Capacity},
		{"node(s) had volume node affinity conflict", provider.Failed},
	} {
		t.Run(tc.reason, func(t *testing.T) {
			ctx := context.Background()
			c := newCluster(t, gpuNode("node-1", "zone-a", "NVIDIA-L4", 4))
			t.Cleanup(c.clk.AutoAdvance())
			c.volumeFit = func(pod *corev1.Pod, _ *corev1.Node) string {
				if slices.ContainsFunc(pod.Spec.Volumes, func(v corev1.Volume) bool { return v.PersistentVolumeClaim != nil }) {
					return tc.reason
				}
				return ""
			}
			p := c.provider(t, Config{UnschedulableWindow: time.Minute})
			v, err := p.CreateVolume(ctx, volSpec("data", 100))
			if err != nil {
				t.Fatal(err)
			}
			o := planOne(t, p, provider.ResourceRequest{GPU: "L4"})
			s := spec("train", 1)
			s.Volumes = []provider.VolumeMount{{ID: v.ID, Name: "data", MountPath: "/data"}}
			prep, err := p.Prepare(ctx, &o, s)
			if err != nil {
				t.Fatal(err)
			}
			_, err = p.Create(ctx, &o, prep, s)
			if provider.KindOf(err) != tc.kind || !strings.Contains(err.Error(), "1 "+tc.reason) {
				t.Fatalf("Create: %v (kind %s), want %s naming %q", err, provider.KindOf(err), tc.kind, tc.reason)
			}
		})
	}
}

// volumeAPI is an API server that answers the calls of a volume's create
// and of a pod's with what it received, recording each request's method,
// path and body: the bodies are the JSON client-go puts on the wire, read
// against the field names of the PersistentVolumeClaim v1 and Pod v1 API
// reference, not against the Go types that wrote them.
type volumeAPI struct {
	mu     sync.Mutex
	bodies map[string][]byte // "POST /api/v1/…" → body
	stored map[string][]byte // object path → body
}

func (a *volumeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	a.mu.Lock()
	defer a.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	switch r.Method {
	case http.MethodPost:
		a.bodies[r.Method+" "+r.URL.Path] = body
		var obj struct {
			Metadata struct{ Name string } `json:"metadata"`
		}
		_ = json.Unmarshal(body, &obj) // a bad body is the test's finding, below
		a.stored[r.URL.Path+"/"+obj.Metadata.Name] = body
		w.WriteHeader(http.StatusCreated)
		w.Write(body)
	case http.MethodGet:
		b, ok := a.stored[r.URL.Path]
		if !ok {
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404,"message":%q}`, r.URL.Path+" not found")
			return
		}
		if strings.Contains(r.URL.Path, "/pods/") {
			// The scheduler has bound it.
			var pod map[string]any
			_ = json.Unmarshal(b, &pod)
			pod["spec"].(map[string]any)["nodeName"] = "node-1"
			b, _ = json.Marshal(pod)
		}
		w.Write(b)
	default:
		w.WriteHeader(http.StatusMethodNotAllowed)
	}
}

// dig walks decoded JSON by object keys and array indexes.
func dig(v any, path ...any) any {
	for _, k := range path {
		switch k := k.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[k]
		case int:
			a, _ := v.([]any)
			if k >= len(a) {
				return nil
			}
			v = a[k]
		}
	}
	return v
}

// The request bodies on the wire: the claim's create carries
// metadata.labels, spec.accessModes ["ReadWriteOnce"],
// spec.resources.requests.storage "50Gi" and spec.storageClassName; the
// pod's create carries spec.volumes[].persistentVolumeClaim.claimName and
// spec.containers[0].volumeMounts[].mountPath at the path asked
// (https://kubernetes.io/docs/reference/kubernetes-api/config-and-storage-resources/persistent-volume-claim-v1/,
// https://kubernetes.io/docs/reference/kubernetes-api/workload-resources/pod-v1/#volumes).
func TestVolumeRequestBodies(t *testing.T) {
	ctx := context.Background()
	api := &volumeAPI{bodies: map[string][]byte{}, stored: map[string][]byte{}}
	srv := httptest.NewServer(api)
	defer srv.Close()
	rc := &rest.Config{Host: srv.URL}
	tune(rc)
	cs, err := k8s.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	c := newCluster(t)
	p, err := New(Config{Namespace: namespace, Regions: []string{clusterName}, StorageClass: "fast-ssd"},
		WithClientset(cs), WithInstallation(installation), WithClock(c.clk))
	if err != nil {
		t.Fatal(err)
	}
	v, err := p.CreateVolume(ctx, volSpec("data", 50))
	if err != nil {
		t.Fatal(err)
	}
	var pvc any
	if err := json.Unmarshal(api.bodies["POST /api/v1/namespaces/gpuprov/persistentvolumeclaims"], &pvc); err != nil {
		t.Fatalf("claim body: %v (%v)", err, api.bodies)
	}
	for _, tc := range []struct {
		path []any
		want any
	}{
		{[]any{"kind"}, "PersistentVolumeClaim"},
		{[]any{"metadata", "name"}, "gpuprov--data"},
		{[]any{"metadata", "labels"}, map[string]any{"gpuprov": "data", "gpuprov-installation": installation, "gpuprov-volume": "true", "team": "vision"}},
		{[]any{"spec", "accessModes"}, []any{"ReadWriteOnce"}},
		{[]any{"spec", "resources", "requests", "storage"}, "50Gi"},
		{[]any{"spec", "storageClassName"}, "fast-ssd"},
	} {
		if got := dig(pvc, tc.path...); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("claim %v = %#v, want %#v", tc.path, got, tc.want)
		}
	}

	offer := provider.Offer{Provider: ID, Location: here, InstanceType: "1xNVIDIA-L4", GPU: "L4", GPUCount: 1}
	offer.Detail, _ = json.Marshal(detail{Label: LabelGPUProduct, Product: "NVIDIA-L4"})
	s := spec("train", 1)
	s.HostKey = nil
	s.Volumes = []provider.VolumeMount{{ID: v.ID, Name: "data", MountPath: "/mnt/data"}}
	if _, err := p.Create(ctx, &offer, []byte(`{"namespace":"gpuprov","secret":"gpuprov-train","service":"gpuprov-train"}`), s); err != nil {
		t.Fatal(err)
	}
	var pod any
	if err := json.Unmarshal(api.bodies["POST /api/v1/namespaces/gpuprov/pods"], &pod); err != nil {
		t.Fatalf("pod body: %v", err)
	}
	if got, want := dig(pod, "spec", "volumes", 1), map[string]any{"name": "gpuprov--data", "persistentVolumeClaim": map[string]any{"claimName": "gpuprov--data"}}; !reflect.DeepEqual(got, want) {
		t.Errorf("pod spec.volumes[1] = %#v, want %#v", got, want)
	}
	if got, want := dig(pod, "spec", "containers", 0, "volumeMounts", 1), map[string]any{"name": "gpuprov--data", "mountPath": "/mnt/data"}; !reflect.DeepEqual(got, want) {
		t.Errorf("container volumeMounts[1] = %#v, want %#v", got, want)
	}
}

// mounts is a Connector for Provisioner-level tests: every node answers,
// presents the host key the core pinned, and records the commands run.
type mounts struct {
	mu   sync.Mutex
	runs []string
}

func (m *mounts) Connect(ctx context.Context, n gpuprov.Node) (gpuprov.Conn, error) {
	return &mountConn{m: m, vm: n.VM, key: n.HostKey}, nil
}

type mountConn struct {
	m       *mounts
	vm, key string
}

func (c *mountConn) Run(ctx context.Context, cmd string) ([]byte, []byte, error) {
	c.m.mu.Lock()
	c.m.runs = append(c.m.runs, c.vm+": "+cmd)
	c.m.mu.Unlock()
	return nil, nil, nil
}
func (c *mountConn) WriteFile(context.Context, string, []byte, fs.FileMode) error { return nil }
func (c *mountConn) HostKey() string                                              { return c.key }
func (c *mountConn) Close() error                                                 { return nil }

// Through the core: a VM launched with a volume gets a claim made before
// its pod and a pod that mounts it at the path asked, and the core finds
// it mounted there (no formatting, no link); deleted, the VM leaves the
// claim for the next VM, whose pod names it again; a VM that asked the
// volume deleted with it leaves nothing.
func TestProvisionerVolumeFollowsTheVM(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, gpuNode("node-1", "zone-a", "NVIDIA-L4", 4))
	t.Cleanup(c.clk.AutoAdvance())
	conns := &mounts{}
	prov, j := gpuprovtest.New(t, c.clk, func(inst string) []provider.CloudProvider {
		return []provider.CloudProvider{c.provider(t, Config{}, WithInstallation(inst))}
	}, gpuprov.WithConnector(conns))

	claimOf := func(pod string) string {
		t.Helper()
		obj, err := c.cs.Tracker().Get(podsGVR, namespace, pod)
		if err != nil {
			t.Fatal(err)
		}
		p := obj.(*corev1.Pod)
		for _, v := range p.Spec.Volumes {
			if v.PersistentVolumeClaim != nil {
				for _, m := range p.Spec.Containers[0].VolumeMounts {
					if m.Name == v.Name {
						return v.PersistentVolumeClaim.ClaimName + " at " + m.MountPath
					}
				}
			}
		}
		return ""
	}

	vm, err := prov.Launch(ctx, gpuprov.Request{Name: "train", GPU: "L4", Timeout: time.Hour,
		Volumes: []gpuprov.VolumeRequest{{Name: "data", SizeGB: 50, MountPath: "/data"}}})
	if err != nil {
		t.Fatal(err)
	}
	if got := claimOf(vm.InstanceID); got != "gpuprov--data at /data" {
		t.Fatalf("pod %s mounts %q", vm.InstanceID, got)
	}
	conns.mu.Lock()
	runs := slices.Clone(conns.runs)
	conns.mu.Unlock()
	i := slices.IndexFunc(runs, func(r string) bool { return strings.HasPrefix(r, "train: ") && strings.Contains(r, "mountpoint -q") })
	if i < 0 || !strings.Contains(runs[i], "/data") || strings.Contains(runs[i], "ln -sfn") || strings.Contains(runs[i], "mkfs") {
		t.Fatalf("the core's check of the mount: %v", runs)
	}
	if err := prov.Delete(ctx, "train"); err != nil {
		t.Fatal(err)
	}
	if claims := c.claims(t); len(claims) != 1 || claims["gpuprov--data"] == nil {
		t.Fatalf("claims after the VM: %v", claims)
	}

	vm, err = prov.Launch(ctx, gpuprov.Request{Name: "train-2", GPU: "L4", Timeout: time.Hour,
		Volumes: []gpuprov.VolumeRequest{{Name: "data", MountPath: "/data", DeleteWithVM: true}}})
	if err != nil {
		t.Fatal(err)
	}
	if got := claimOf(vm.InstanceID); got != "gpuprov--data at /data" {
		t.Fatalf("second pod %s mounts %q", vm.InstanceID, got)
	}
	if err := prov.Delete(ctx, "train-2"); err != nil {
		t.Fatal(err)
	}
	if claims, pods := c.claims(t), c.names(t, podsGVR); len(claims)+len(pods) != 0 {
		t.Fatalf("left: claims %v pods %v", claims, pods)
	}
	vols, err := j.ListVolumes(ctx, journal.VolumeListOptions{})
	if err != nil || len(vols) != 1 || vols[0].State != journal.VolumeDeleted || vols[0].CloudID != "gpuprov--data" {
		t.Fatalf("journal volumes %+v, %v", vols, err)
	}
}
