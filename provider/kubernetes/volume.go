package kubernetes

import (
	"context"
	"path"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/org/gpuprov/provider"
)

// Persistent volumes (provider.VolumeManager) are PersistentVolumeClaims in
// the adapter's namespace, one per volume, named gpuprov--<volume>
// (provider.VolumeResourceName: never the name of a VM's Secret, Service
// or pod, gpuprov-<vm>[-<attempt>]) and labelled with the volume's name
// (provider.LabelVM), the installation (provider.LabelInstallation),
// provider.LabelVolume and the request's labels. A claim asks for
// ReadWriteOnce, <size>Gi of storage and the configured storage_class (none
// set: the cluster's default class). The cluster's provisioner makes the
// PersistentVolume behind it; the kubelet formats and mounts it.
//
// A claim is attached at create (VolumeLimits.AttachAtCreate): the pod names
// it in spec.volumes and its container mounts it at the VolumeMount's path
// (podFor). A running pod cannot take a new volume (a pod's volumes are
// immutable), so AttachVolume refuses, and a claim is released when its pod
// is deleted. A claim is usable anywhere in the cluster (VolumeCluster),
// subject to its storage class's topology: a zonal class binds it to the
// zone of its first pod (volumeBindingMode WaitForFirstConsumer) or of its
// provisioning (Immediate), and from then on its pods must run there.
//
// Vendor references (the Kubernetes documentation and API reference):
//
//   - PersistentVolumeClaim v1, its spec and status.phase:
//     https://kubernetes.io/docs/reference/kubernetes-api/config-and-storage-resources/persistent-volume-claim-v1/
//   - claims, binding, access modes, reclaiming, and "Storage Object in Use
//     Protection" (the kubernetes.io/pvc-protection finalizer):
//     https://kubernetes.io/docs/concepts/storage/persistent-volumes/
//   - volumeBindingMode Immediate and WaitForFirstConsumer:
//     https://kubernetes.io/docs/concepts/storage/storage-classes/#volume-binding-mode
//   - storage quotas (requests.storage, persistentvolumeclaims,
//     <class>.storageclass.storage.k8s.io/requests.storage):
//     https://kubernetes.io/docs/concepts/policy/resource-quotas/#storage-resource-quota
//   - LimitRange on claims: https://kubernetes.io/docs/concepts/policy/limit-range/
//   - storage capacity tracking (the scheduler's "did not have enough free
//     storage"): https://kubernetes.io/docs/concepts/storage/storage-capacity/

const (
	opCreateVolume  = "create volume"
	opObserveVolume = "observe volume"
	opAttachVolume  = "attach volume"
	opDetachVolume  = "detach volume"
	opDeleteVolume  = "delete volume"
)

// minVolumeGB is the smallest volume: a claim's size is a quantity of
// bytes with no floor of the API's own, and gpuprov sizes volumes in whole
// GiB. There is no ceiling but the storage class's and the namespace's
// (a LimitRange or a ResourceQuota refuses the create; see volumeError).
const minVolumeGB = 1

// VolumeLimits implements provider.VolumeManager: claims of the cluster
// (VolumeCluster), 1 GiB and up, attached by Create and mounted by the
// kubelet at the path asked (no FixedMount). Kubernetes sets no number of
// claims per pod; a node's CSI driver may bound the volumes attached to
// one node (CSINode allocatable.count), which is per node and not known at
// plan time, so MaxPerInstance is 0.
func (p *Provider) VolumeLimits() provider.VolumeLimits {
	return provider.VolumeLimits{Scope: provider.VolumeCluster, MinGB: minVolumeGB, AttachAtCreate: true}
}

// claimName returns the claim of volume name, gpuprov--<name>, or
// InvalidRequest when that is no DNS label: the name is the claim's, the
// pod's volume's (a DNS label, at most 63 characters: a volume name of at
// most 54) and a label value.
func (p *Provider) claimName(op, name string) (string, error) {
	claim := provider.VolumeResourceName(name)
	if name == "" || len(validation.IsDNS1123Label(claim)) > 0 || len(validation.IsValidLabelValue(name)) > 0 {
		return "", p.errorf(provider.InvalidRequest, op,
			"volume %q: claim name %q is not a DNS label (1-63 lowercase letters, digits or '-', a volume name of at most 54)", name, claim)
	}
	return claim, nil
}

// claimID checks a volume id (a claim's name, Volume.ID) before any call.
func (p *Provider) claimID(op, id string) error {
	if !strings.HasPrefix(id, provider.VolumeResourceName("")) || len(validation.IsDNS1123Label(id)) > 0 {
		return p.errorf(provider.InvalidRequest, op, "volume id %q is not a claim gpuprov names (gpuprov--<volume>)", id)
	}
	return nil
}

// volumeInstallation is the installation spec's volume belongs to.
func (p *Provider) volumeInstallation(spec *provider.VolumeSpec) string {
	if spec.Installation != "" {
		return spec.Installation
	}
	return p.installation
}

// ourClaim reports whether pvc is a gpuprov volume of installation:
// provider.LabelVolume tells a volume from anything else carrying gpuprov's
// labels.
func ourClaim(pvc *corev1.PersistentVolumeClaim, installation string) bool {
	return provider.IsVolumeOf(pvc.Labels, installation)
}

// gib is q in whole GiB, rounded up.
func gib(q resource.Quantity) int {
	return int((q.Value() + 1<<30 - 1) >> 30)
}

// volumeOf normalizes a claim. Its status.phase (PersistentVolumeClaim v1)
// maps as:
//
//	metadata.deletionTimestamp set       deleting (the pvc-protection finalizer
//	                                     keeps it while a pod uses it)
//	Lost (its PersistentVolume is gone)  failed
//	Bound                                available
//	Pending, or none yet                 available: with WaitForFirstConsumer a
//	                                     claim stays Pending until a pod uses it,
//	                                     so Pending cannot mean creating (the
//	                                     core would wait for it forever)
//
// SizeGB is status.capacity.storage once bound (the volume made, which
// may be larger than asked), else spec.resources.requests.storage.
// AttachedTo is not read (it would take a pods.list per look).
func (p *Provider) volumeOf(pvc *corev1.PersistentVolumeClaim) provider.Volume {
	size := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
	if c, ok := pvc.Status.Capacity[corev1.ResourceStorage]; ok && pvc.Status.Phase == corev1.ClaimBound {
		size = c
	}
	v := provider.Volume{ID: pvc.Name, Name: pvc.Labels[provider.LabelVM], Location: provider.Location{Region: p.region},
		SizeGB: gib(size), Status: provider.VolumeAvailable, Created: pvc.CreationTimestamp.Time}
	switch {
	case pvc.DeletionTimestamp != nil:
		v.Status = provider.VolumeDeleting
	case pvc.Status.Phase == corev1.ClaimLost:
		v.Status = provider.VolumeFailed
	}
	return v
}

// CreateVolume implements provider.VolumeManager: persistentvolumeclaims.create
// of gpuprov--<spec.Name> in the namespace, labelled with the volume's
// identity and the request's labels, accessModes [ReadWriteOnce],
// resources.requests.storage <SizeGB>Gi and storageClassName storage_class
// (unset without one: the cluster's default class). The claim is returned
// available at once (see volumeOf): it is bound when the class's
// provisioner makes its volume, at once (Immediate) or when its first pod
// is scheduled (WaitForFirstConsumer).
//
// Kubernetes has no idempotency token: the claim's name is the key. A
// claim of that name that exists (409 AlreadyExists: a create sent again)
// is read and returned when it is this volume of this installation; one
// being deleted is Transient (a create after it is gone makes it anew);
// another installation's volume, or a claim gpuprov did not make, is
// InvalidRequest and left alone. A size under 1 GiB, a name that makes no
// claim name, or a location that is not this cluster is InvalidRequest
// before any call. A create the namespace's ResourceQuota refuses is Quota
// (the cluster), one its LimitRange refuses Unavailable (the cluster); see
// volumeError.
func (p *Provider) CreateVolume(ctx context.Context, spec provider.VolumeSpec) (provider.Volume, error) {
	if err := p.checkRegion(opCreateVolume, spec.Location); err != nil {
		return provider.Volume{}, err
	}
	claim, err := p.claimName(opCreateVolume, spec.Name)
	if err != nil {
		return provider.Volume{}, err
	}
	if spec.SizeGB < minVolumeGB {
		return provider.Volume{}, p.errorf(provider.InvalidRequest, opCreateVolume,
			"volume %s: size %d GB is under the %d GiB a claim is made of at least", spec.Name, spec.SizeGB, minVolumeGB)
	}
	installation := p.volumeInstallation(&spec)
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: claim, Namespace: p.cfg.Namespace, Labels: spec.VolumeLabels(installation)},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceStorage: *resource.NewQuantity(int64(spec.SizeGB)<<30, resource.BinarySI),
			}},
		},
	}
	if p.cfg.StorageClass != "" {
		pvc.Spec.StorageClassName = new(p.cfg.StorageClass)
	}
	claims := p.cs.CoreV1().PersistentVolumeClaims(p.cfg.Namespace)
	cctx, cancel := p.call(ctx)
	made, err := claims.Create(cctx, pvc, metav1.CreateOptions{})
	cancel()
	switch {
	case apierrors.IsAlreadyExists(err):
		return p.adoptVolume(ctx, &spec, claim, installation)
	case err != nil:
		return provider.Volume{}, p.volumeError(opCreateVolume, err)
	}
	v := p.volumeOf(made)
	p.log.Info("kubernetes: created volume", "provider", p.name, "volume", spec.Name, "claim", claim,
		"size_gb", spec.SizeGB, "storage_class", p.cfg.StorageClass)
	return v, nil
}

// adoptVolume returns the claim of a create that met AlreadyExists when it
// is spec's volume of installation (see CreateVolume).
func (p *Provider) adoptVolume(ctx context.Context, spec *provider.VolumeSpec, claim, installation string) (provider.Volume, error) {
	cctx, cancel := p.call(ctx)
	cur, err := p.cs.CoreV1().PersistentVolumeClaims(p.cfg.Namespace).Get(cctx, claim, metav1.GetOptions{})
	cancel()
	switch {
	case apierrors.IsNotFound(err):
		return provider.Volume{}, p.errorf(provider.Transient, opCreateVolume, "claim %s/%s exists and then did not", p.cfg.Namespace, claim)
	case err != nil:
		return provider.Volume{}, p.volumeError(opCreateVolume, err)
	case !ourClaim(cur, installation) || cur.Labels[provider.LabelVM] != spec.Name:
		return provider.Volume{}, p.errorf(provider.InvalidRequest, opCreateVolume,
			"claim %s/%s exists and is not volume %s of installation %s (another installation's volume, or a claim gpuprov did not make); left alone",
			p.cfg.Namespace, claim, spec.Name, installation)
	case cur.DeletionTimestamp != nil:
		return provider.Volume{}, p.errorf(provider.Transient, opCreateVolume,
			"claim %s/%s is being deleted (it goes once no pod uses it); a create after that makes it anew", p.cfg.Namespace, claim)
	}
	p.log.Info("kubernetes: volume exists; adopted", "provider", p.name, "volume", spec.Name, "claim", claim)
	return p.volumeOf(cur), nil
}

// ObserveVolume implements provider.VolumeManager: persistentvolumeclaims.get
// of gpuprov--<name>, returned when it is that volume of this installation;
// nil when there is no such claim, or the claim of that name is not this
// installation's volume. A location that is not this cluster, or a name
// that makes no claim name, is InvalidRequest before any call.
func (p *Provider) ObserveVolume(ctx context.Context, loc provider.Location, name string) (*provider.Volume, error) {
	if err := p.checkRegion(opObserveVolume, loc); err != nil {
		return nil, err
	}
	claim, err := p.claimName(opObserveVolume, name)
	if err != nil {
		return nil, err
	}
	cctx, cancel := p.call(ctx)
	pvc, err := p.cs.CoreV1().PersistentVolumeClaims(p.cfg.Namespace).Get(cctx, claim, metav1.GetOptions{})
	cancel()
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, p.volumeError(opObserveVolume, err)
	case !ourClaim(pvc, p.installation) || pvc.Labels[provider.LabelVM] != name:
		return nil, nil
	}
	v := p.volumeOf(pvc)
	return &v, nil
}

// AttachVolume implements provider.VolumeManager by refusing: a claim is
// attached by the create of its pod (InstanceSpec.Volumes), and a running
// pod's volumes cannot be changed. The core never calls it on this
// provider (VolumeLimits.AttachAtCreate). InvalidRequest, with no call.
func (p *Provider) AttachVolume(ctx context.Context, loc provider.Location, id, instanceID string) (string, error) {
	return "", p.errorf(provider.InvalidRequest, opAttachVolume,
		"volume %s: volumes attach at create on kubernetes (the pod's create names the claim); pod %s cannot take one while it runs", id, instanceID)
}

// DetachVolume implements provider.VolumeManager: pods.get of instanceID.
// A pod that is gone, or does not name claim id, does not have the volume:
// success, which is what a detach asks. A pod that names it keeps it until
// the pod is deleted (a pod's volumes cannot be changed): InvalidRequest,
// as the volume is released with its instance. A location that is not
// this cluster, or ids that are no names, are InvalidRequest before any
// call.
func (p *Provider) DetachVolume(ctx context.Context, loc provider.Location, id, instanceID string) error {
	if err := p.checkRegion(opDetachVolume, loc); err != nil {
		return err
	}
	if err := p.claimID(opDetachVolume, id); err != nil {
		return err
	}
	if len(validation.IsDNS1123Subdomain(instanceID)) > 0 {
		return p.errorf(provider.InvalidRequest, opDetachVolume, "instance id %q is not a pod name", instanceID)
	}
	cctx, cancel := p.call(ctx)
	pod, err := p.cs.CoreV1().Pods(p.cfg.Namespace).Get(cctx, instanceID, metav1.GetOptions{})
	cancel()
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return p.volumeError(opDetachVolume, err)
	case !podUsesClaim(pod, id):
		return nil
	}
	return p.errorf(provider.InvalidRequest, opDetachVolume,
		"claim %s/%s is a volume of pod %s from its create; it is released when the pod is deleted", p.cfg.Namespace, id, instanceID)
}

// DeleteVolume implements provider.VolumeManager: persistentvolumeclaims.get
// of claim id and, when it is this installation's volume, pods.list of the
// namespace: a claim that a pod names cannot really be deleted (the
// kubernetes.io/pvc-protection finalizer keeps it, terminating, until no
// pod uses it), so a pod naming it is an error matching provider.ErrInUse:
// Transient when every such pod is being deleted (its end releases the
// claim), InvalidRequest otherwise. A pod the kubelet is done with
// (deletionTimestamp with a zero grace period) no longer counts, as for the
// protection controller. Otherwise persistentvolumeclaims.delete with the
// claim's UID as precondition; not waited for. A claim that is gone (404),
// or is being deleted already, is success. Another installation's claim,
// or one gpuprov did not make, is InvalidRequest and left alone. The
// claim's PersistentVolume goes with it or stays, as the storage class's
// reclaimPolicy says (Delete, the default for a provisioned volume, or
// Retain).
func (p *Provider) DeleteVolume(ctx context.Context, loc provider.Location, id string) error {
	if err := p.checkRegion(opDeleteVolume, loc); err != nil {
		return err
	}
	if err := p.claimID(opDeleteVolume, id); err != nil {
		return err
	}
	claims := p.cs.CoreV1().PersistentVolumeClaims(p.cfg.Namespace)
	cctx, cancel := p.call(ctx)
	pvc, err := claims.Get(cctx, id, metav1.GetOptions{})
	cancel()
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return p.volumeError(opDeleteVolume, err)
	case !ourClaim(pvc, p.installation):
		return p.errorf(provider.InvalidRequest, opDeleteVolume,
			"claim %s/%s is not a volume of installation %s; left alone", p.cfg.Namespace, id, p.installation)
	case pvc.DeletionTimestamp != nil:
		return nil
	}
	if err := p.claimInUse(ctx, id); err != nil {
		return err
	}
	cctx, cancel = p.call(ctx)
	err = claims.Delete(cctx, id, preconditions(pvc.UID))
	cancel()
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return p.volumeError(opDeleteVolume, err)
	}
	p.log.Info("kubernetes: deleted volume", "provider", p.name, "volume", pvc.Labels[provider.LabelVM], "claim", id)
	return nil
}

// claimInUse lists the namespace's pods (all of them, as the protection
// controller does: a pod of another installation holds a claim as well)
// and returns the ErrInUse error of DeleteVolume when one names claim.
func (p *Provider) claimInUse(ctx context.Context, claim string) error {
	cctx, cancel := p.call(ctx)
	pods, err := p.cs.CoreV1().Pods(p.cfg.Namespace).List(cctx, metav1.ListOptions{})
	cancel()
	if err != nil {
		return p.volumeError(opDeleteVolume, err)
	}
	var users []string
	leaving := true
	for i := range pods.Items {
		pod := &pods.Items[i]
		if !podUsesClaim(pod, claim) || podIsShutDown(pod) {
			continue
		}
		users = append(users, pod.Name)
		if pod.DeletionTimestamp == nil {
			leaving = false
		}
	}
	if len(users) == 0 {
		return nil
	}
	slices.Sort(users)
	kind := provider.InvalidRequest
	if leaving {
		kind = provider.Transient
	}
	return p.errorf(kind, opDeleteVolume, "claim %s/%s is %w by pod %s", p.cfg.Namespace, claim, provider.ErrInUse, strings.Join(users, ", "))
}

// podUsesClaim reports whether pod names claim among its volumes.
func podUsesClaim(pod *corev1.Pod, claim string) bool {
	return slices.ContainsFunc(pod.Spec.Volumes, func(v corev1.Volume) bool {
		return v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == claim
	})
}

// podIsShutDown reports whether the kubelet is done with pod, or it was
// force-deleted: a deletionTimestamp with a zero grace period. The
// protection controller then lets its claims go
// (pkg/controller/volume/pvcprotection, podIsShutDown).
func podIsShutDown(pod *corev1.Pod) bool {
	return pod.DeletionTimestamp != nil && pod.DeletionGracePeriodSeconds != nil && *pod.DeletionGracePeriodSeconds == 0
}

// volumeError classifies a volume call's failure as every call's is
// (classify, errors.go). The answers a claim's calls meet, and what they
// are (references in the comment at the top of this file):
//
//	answer (call)                                              kind
//	403 "exceeded quota: <q>, requested: requests.storage=…"   Quota, the cluster (forbidden): a
//	  (or persistentvolumeclaims=1, or                          ResourceQuota's storage resources
//	  <class>.storageclass.storage.k8s.io/requests.storage)
//	  (create)
//	403 "minimum|maximum storage usage per                     Unavailable, the cluster (forbidden):
//	  PersistentVolumeClaim is …, but request is …" (create)   the namespace's LimitRange refuses
//	                                                           the size; no offer here takes it
//	404 NotFound (get, delete)                                 none: Observe nil, Delete success
//	409 AlreadyExists (create)                                 adoptVolume: ours, or InvalidRequest
//	409 Conflict (delete: the UID precondition)                Transient: read again
//	422 Invalid (create)                                       InvalidRequest
//	a pod of the namespace names the claim (delete)            ErrInUse: Transient if every such pod
//	                                                           is being deleted, else InvalidRequest
//
// A volume that cannot be made where its pod is scheduled is no API error
// of a claim: the scheduler reports it on the pod, and Create's
// unschedulable window reads it (see insufficient: "node(s) did not have
// enough free storage" is Capacity).
func (p *Provider) volumeError(op string, err error) *provider.Error {
	return p.classify(op, err)
}

// checkMounts refuses, before any call, volumes Create cannot give the
// pod: a claim id gpuprov does not name, a mount path that is not absolute
// and clean, or is "/", or meets the Secret's mount (secretMountPath, in
// either direction), and two volumes at one path or of one claim.
func (p *Provider) checkMounts(op string, mounts []provider.VolumeMount) error {
	seen := map[string]bool{}
	for _, m := range mounts {
		if err := p.claimID(op, m.ID); err != nil {
			return err
		}
		mp := m.MountPath
		switch {
		case !path.IsAbs(mp) || path.Clean(mp) != mp || mp == "/":
			return p.errorf(provider.InvalidRequest, op, "volume %s: mount path %q is not an absolute, clean path other than /", m.Name, mp)
		case mp == secretMountPath || strings.HasPrefix(secretMountPath, mp+"/") || strings.HasPrefix(mp, secretMountPath+"/"):
			return p.errorf(provider.InvalidRequest, op, "volume %s: mount path %q meets %s, where the pod's SSH keys are mounted", m.Name, mp, secretMountPath)
		case seen[mp] || seen["claim "+m.ID]:
			return p.errorf(provider.InvalidRequest, op, "volume %s: mount path %q or claim %s given twice", m.Name, mp, m.ID)
		}
		seen[mp], seen["claim "+m.ID] = true, true
	}
	return nil
}

// checkClaims reads the claim of each of spec's volumes before the pod is
// created: a claim that is gone, being deleted, lost, or not this
// installation's volume would keep the pod unschedulable for good
// (the scheduler's `persistentvolumeclaim "…" not found` or `… is being
// deleted`), so it is InvalidRequest now, naming it. The volume exists in
// this cluster only, so no other offer could take the launch.
func (p *Provider) checkClaims(ctx context.Context, op string, spec *provider.InstanceSpec) error {
	for _, m := range spec.Volumes {
		cctx, cancel := p.call(ctx)
		pvc, err := p.cs.CoreV1().PersistentVolumeClaims(p.cfg.Namespace).Get(cctx, m.ID, metav1.GetOptions{})
		cancel()
		switch {
		case apierrors.IsNotFound(err):
			return p.errorf(provider.InvalidRequest, op, "volume %s: claim %s/%s does not exist", m.Name, p.cfg.Namespace, m.ID)
		case err != nil:
			return p.volumeError(op+": get claim", err)
		case !ourClaim(pvc, spec.Installation):
			return p.errorf(provider.InvalidRequest, op, "volume %s: claim %s/%s is not a volume of installation %s", m.Name, p.cfg.Namespace, m.ID, spec.Installation)
		case pvc.DeletionTimestamp != nil:
			return p.errorf(provider.InvalidRequest, op, "volume %s: claim %s/%s is being deleted", m.Name, p.cfg.Namespace, m.ID)
		case pvc.Status.Phase == corev1.ClaimLost:
			return p.errorf(provider.InvalidRequest, op, "volume %s: claim %s/%s lost its PersistentVolume (%s)", m.Name, p.cfg.Namespace, m.ID, pvc.Spec.VolumeName)
		}
	}
	return nil
}

// volumesOf are the pod's volumes and the container's mounts of spec's
// persistent volumes: each claim as a volume of its own name, mounted
// read-write at its MountPath.
func volumesOf(spec *provider.InstanceSpec) ([]corev1.Volume, []corev1.VolumeMount) {
	var vols []corev1.Volume
	var mounts []corev1.VolumeMount
	for _, m := range spec.Volumes {
		vols = append(vols, corev1.Volume{Name: m.ID, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: m.ID},
		}})
		mounts = append(mounts, corev1.VolumeMount{Name: m.ID, MountPath: m.MountPath})
	}
	return vols, mounts
}
