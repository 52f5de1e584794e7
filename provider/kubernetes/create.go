package kubernetes

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/org/gpuprov/provider"
)

// Labels and annotations the adapter adds to a pod besides the VM identity.
const (
	// labelZone is the zone the pod was created for ("" without zones), so
	// that Observe of one location does not see another's pods.
	labelZone = "gpuprov-zone"
	// annotationSSHUser is the login user the startup script set up.
	annotationSSHUser = "gpuprov-ssh-user"
	// annotationInstanceType is the offer's instance type.
	annotationInstanceType = "gpuprov-instance-type"
	// containerName is the pod's one container.
	containerName = "vm"
)

// PodName is the name of the pod of vm's attempt: gpuprov-<vm>-<attempt>.
// It is the instance id. Being derived from the attempt, a create that is
// replayed after a lost answer meets AlreadyExists and adopts the pod
// instead of making a second one.
func PodName(vm string, attempt int) string {
	return fmt.Sprintf("%s-%d", provider.ResourceName(vm), attempt)
}

// StartupScript is the pod's command (run by /bin/sh -c as root). It is the
// whole contract between the adapter and an image: the image needs /bin/sh
// and either an OpenSSH sshd (on PATH or at /usr/sbin/sshd) or one of
// apt-get, dnf or apk with network access to install openssh-server. The
// script:
//
//  0. refuses a $GPUPROV_SSH_USER that is not a user name (a lowercase
//     letter or '_', then lowercase letters, digits, '_' and '-'): the
//     name is expanded by the shell to find its home;
//  1. installs openssh-server (and sudo) when sshd is missing;
//  2. creates the login user $GPUPROV_SSH_USER (default root) when missing,
//     with passwordless sudo;
//  3. installs /etc/gpuprov/ssh/authorized_keys (the Secret, mounted read
//     only) as the user's ~/.ssh/authorized_keys, mode 0600;
//  4. installs the injected host key /etc/gpuprov/ssh/ssh_host_ed25519_key
//     as the only host key (every other host key is removed, so the key
//     the core pins is the one sshd offers); without one, generates one;
//  5. execs sshd in the foreground on port 22, public keys only.
//
// GPUPROV_SSH_DIR overrides the Secret's mount path, and GPUPROV_ROOT
// prefixes every system path the script writes (/etc/ssh, /run/sshd,
// /etc/sudoers.d; tests run it in a scratch directory). The pod is Ready when
// port 22 accepts connections (a TCP readiness probe). The pod's restart
// policy is Never: sshd exiting ends the instance.
const StartupScript = `set -eu
u="${GPUPROV_SSH_USER:-root}"
l=abcdefghijklmnopqrstuvwxyz
case "$u" in
  [_$l]*) case "$u" in *[!_${l}0123456789-]*) u= ;; esac ;;
  *) u= ;;
esac
if [ -z "$u" ]; then
  echo "gpuprov: GPUPROV_SSH_USER is not a user name" >&2
  exit 1
fi
k="${GPUPROV_SSH_DIR:-` + secretMountPath + `}"
r="${GPUPROV_ROOT:-}"
if ! command -v sshd >/dev/null 2>&1 && [ ! -x /usr/sbin/sshd ]; then
  if command -v apt-get >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq --no-install-recommends openssh-server sudo >/dev/null
  elif command -v dnf >/dev/null 2>&1; then
    dnf install -y -q openssh-server sudo
  elif command -v apk >/dev/null 2>&1; then
    apk add --no-cache -q openssh-server sudo
  else
    echo "gpuprov: the image has no sshd and no apt-get, dnf or apk to install it" >&2
    exit 1
  fi
fi
if [ "$u" != root ] && ! id -u "$u" >/dev/null 2>&1; then
  useradd -m -s /bin/sh "$u" 2>/dev/null || adduser -D -s /bin/sh "$u"
  if [ -d "$r/etc/sudoers.d" ]; then
    echo "$u ALL=(ALL) NOPASSWD:ALL" >"$r/etc/sudoers.d/gpuprov"
    chmod 0440 "$r/etc/sudoers.d/gpuprov"
  fi
fi
h=$(eval echo "~$u")
install -d -m 0700 -o "$u" "$h/.ssh"
install -m 0600 -o "$u" "$k/authorized_keys" "$h/.ssh/authorized_keys"
mkdir -p "$r/run/sshd" "$r/etc/ssh"
rm -f "$r"/etc/ssh/ssh_host_*
if [ -f "$k/ssh_host_ed25519_key" ]; then
  install -m 0600 "$k/ssh_host_ed25519_key" "$r/etc/ssh/ssh_host_ed25519_key"
  install -m 0644 "$k/ssh_host_ed25519_key.pub" "$r/etc/ssh/ssh_host_ed25519_key.pub"
else
  ssh-keygen -q -t ed25519 -N "" -f "$r/etc/ssh/ssh_host_ed25519_key"
fi
sshd=$(command -v sshd || echo /usr/sbin/sshd)
exec "$sshd" -D -e -p 22 -o HostKey="$r/etc/ssh/ssh_host_ed25519_key" -o PasswordAuthentication=no \
  -o KbdInteractiveAuthentication=no -o PermitRootLogin=prohibit-password -o UsePAM=no
`

// userRE is a Linux user name by the rule the Azure adapter applies to its
// admin user: a lowercase letter or '_', then up to 31 lowercase letters,
// digits, '_' or '-' (what useradd accepts everywhere, and nothing a shell
// would expand).
var userRE = regexp.MustCompile(`^[a-z_][a-z0-9_-]{0,31}$`)

// sshUser returns the instance's login user: spec.SSHUser, default root.
// A name userRE does not match is InvalidRequest: StartupScript creates the
// user and expands ~user in a shell, so the name must be a plain user name.
func (p *Provider) sshUser(op string, spec *provider.InstanceSpec) (string, error) {
	if spec.SSHUser == "" {
		return "root", nil
	}
	if !userRE.MatchString(spec.SSHUser) {
		return "", p.errorf(provider.InvalidRequest, op, "ssh user %q is not a Linux user name (a lowercase letter or '_', then up to 31 lowercase letters, digits, '_' or '-')", spec.SSHUser)
	}
	return spec.SSHUser, nil
}

// resources are the container's requests and limits: the offer's GPUs,
// and its vCPUs and memory (GiB) where the offer has them (an offer
// journaled by an older version has none). Requests equal limits: a
// ResourceQuota on cpu or memory needs both set ("must specify"), and the
// pod is in the Guaranteed QoS class, last to be evicted.
func resources(offer *provider.Offer) corev1.ResourceRequirements {
	list := corev1.ResourceList{resourceGPU: gpuQuantity(offer.GPUCount)}
	if offer.VCPUs > 0 && offer.MemoryGB > 0 {
		list[corev1.ResourceCPU] = *resource.NewQuantity(int64(offer.VCPUs), resource.DecimalSI)
		list[corev1.ResourceMemory] = *resource.NewQuantity(int64(offer.MemoryGB)<<30, resource.BinarySI)
	}
	return corev1.ResourceRequirements{Limits: list, Requests: list.DeepCopy()}
}

// podFor builds the pod of spec's attempt on offer for the login user.
func (p *Provider) podFor(offer *provider.Offer, d detail, spec *provider.InstanceSpec, user string) *corev1.Pod {
	image := spec.Image
	if image == "" {
		image = p.cfg.Image
	}
	labels := spec.Labels()
	labels[labelZone] = offer.Location.Zone
	selector := map[string]string{d.Label: d.Product}
	if offer.Location.Zone != "" {
		selector[LabelZone] = offer.Location.Zone
	}
	mode := int32(0o400)
	grace := int64(10)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: PodName(spec.VM, spec.Attempt), Namespace: p.cfg.Namespace, Labels: labels,
			Annotations: map[string]string{annotationSSHUser: user, annotationInstanceType: offer.InstanceType},
		},
		Spec: corev1.PodSpec{
			Hostname:      spec.VM,
			RestartPolicy: corev1.RestartPolicyNever,
			NodeSelector:  selector,
			Tolerations:   p.tolerations(),
			// The instance is a machine for its user, not a workload of
			// the cluster: no service-account token, no service links.
			AutomountServiceAccountToken:  new(false),
			EnableServiceLinks:            new(false),
			TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{
				Name:      containerName,
				Image:     image,
				Command:   []string{"/bin/sh", "-c", StartupScript},
				Env:       []corev1.EnvVar{{Name: "GPUPROV_SSH_USER", Value: user}},
				Ports:     []corev1.ContainerPort{{Name: "ssh", ContainerPort: 22, Protocol: corev1.ProtocolTCP}},
				Resources: resources(offer),
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(22)}},
					PeriodSeconds: 5,
				},
				VolumeMounts: []corev1.VolumeMount{{Name: "gpuprov-ssh", MountPath: secretMountPath, ReadOnly: true}},
			}},
			Volumes: []corev1.Volume{{Name: "gpuprov-ssh", VolumeSource: corev1.VolumeSource{
				Secret: &corev1.SecretVolumeSource{SecretName: provider.ResourceName(spec.VM), DefaultMode: &mode},
			}}},
		},
	}
	if p.cfg.RuntimeClass != "" {
		pod.Spec.RuntimeClassName = new(p.cfg.RuntimeClass)
	}
	vols, mounts := volumesOf(spec)
	pod.Spec.Volumes = append(pod.Spec.Volumes, vols...)
	pod.Spec.Containers[0].VolumeMounts = append(pod.Spec.Containers[0].VolumeMounts, mounts...)
	return pod
}

// Create writes the attempt's host key into the VM's Secret (when the core
// injects one), creates the pod gpuprov-<vm>-<attempt> (labels, node
// selector on the offer's product label and zone, nvidia.com/gpu and the
// offer's CPU and memory as requests and limits, tolerations, the Secret
// mounted, StartupScript as command) and waits, bounded by
// unschedulable_window, for the scheduler's decision:
//
//   - bound to a node: the pod's name is returned, the core polls Observe
//     until it runs;
//   - still unschedulable for "Insufficient nvidia.com/gpu" (or cpu, or
//     memory) when the window ends: a Capacity error (the pod exists; the
//     core's teardown deletes it, blocks the offer and moves on). This is
//     the cluster's stockout: the Kubernetes API reports it only as the
//     pod's PodScheduled condition, so this bounded wait on the scheduler
//     is the one wait the contract allows (on an operation whose result
//     carries the error);
//   - unschedulable for another reason (an untolerated taint, a node
//     selector no node matches any more): Failed, with the scheduler's
//     message;
//   - undecided when the window ends: the name is returned; Observe
//     reports the pod Failed should it be unschedulable for the window.
//
// The instance's persistent volumes (spec.Volumes, made by CreateVolume)
// go into the pod: each claim as a volume named like the claim, mounted
// read-write in the container at its MountPath, where the kubelet mounts
// it (the core then finds a mount point there). Each claim is read first
// (persistentvolumeclaims.get): one that is gone, being deleted, lost or
// not this installation's volume is InvalidRequest, before the pod is
// made (see checkClaims).
//
// A pod of that name that exists already (a replayed create whose first
// answer was lost) is adopted when it carries the VM's identity. A login
// user that is not a user name, or a volume's mount path that is not
// absolute and clean or meets the SSH keys' mount, is InvalidRequest
// before any call. A create
// an admission plugin refuses is classified by the plugin's message, one
// the authorizer refuses is Credentials (see forbidden).
func (p *Provider) Create(ctx context.Context, offer *provider.Offer, prep json.RawMessage, spec *provider.InstanceSpec) (string, error) {
	if err := p.checkRegion("create", offer.Location); err != nil {
		return "", err
	}
	var d detail
	if err := json.Unmarshal(offer.Detail, &d); err != nil || d.Label == "" || d.Product == "" {
		return "", p.errorf(provider.InvalidRequest, "create", "offer %s has no product detail (%s)", offer.Key(), offer.Detail)
	}
	var pr prepared
	if err := json.Unmarshal(prep, &pr); err != nil || pr.Secret == "" {
		return "", p.errorf(provider.Failed, "create", "prepared state %s does not parse: %v", prep, err)
	}
	user, err := p.sshUser("create", spec)
	if err != nil {
		return "", err
	}
	if err := p.checkMounts("create", spec.Volumes); err != nil {
		return "", err
	}
	if err := p.checkClaims(ctx, "create", spec); err != nil {
		return "", err
	}
	if spec.HostKey != nil && spec.HostKey.PrivatePEM != "" {
		if err := p.ensureSecret(ctx, "create", spec); err != nil {
			return "", err
		}
	}
	pod := p.podFor(offer, d, spec, user)
	start := p.clock.Now()
	cctx, cancel := p.call(ctx)
	_, err = p.cs.CoreV1().Pods(p.cfg.Namespace).Create(cctx, pod, metav1.CreateOptions{})
	cancel()
	if apierrors.IsAlreadyExists(err) {
		cctx, cancel := p.call(ctx)
		cur, gerr := p.cs.CoreV1().Pods(p.cfg.Namespace).Get(cctx, pod.Name, metav1.GetOptions{})
		cancel()
		if gerr != nil {
			return "", p.classify("create: get existing pod", gerr)
		}
		if !p.ours(cur.Labels, spec.VM) {
			return "", p.notOurs("create", "pod", pod.Name)
		}
		p.log.Info("kubernetes: adopted the pod of a replayed create", "provider", p.name, "vm", spec.VM, "pod", pod.Name)
		err = nil
	}
	if err != nil {
		return "", p.classify("create", err)
	}
	if err := p.awaitScheduling(ctx, pod.Name, start); err != nil {
		return "", err
	}
	return pod.Name, nil
}

// awaitScheduling polls the pod until the scheduler has bound it or
// unschedulable_window has passed since start (see Create). It polls fast
// first (the scheduler usually answers in well under a second), then at
// PollInterval.
func (p *Provider) awaitScheduling(ctx context.Context, name string, start time.Time) error {
	window := p.cfg.UnschedulableWindow
	wait := 250 * time.Millisecond
	for {
		cctx, cancel := p.call(ctx)
		pod, err := p.cs.CoreV1().Pods(p.cfg.Namespace).Get(cctx, name, metav1.GetOptions{})
		cancel()
		switch {
		case err != nil && provider.KindOf(p.classify("create", err)) != provider.Transient:
			// The pod was created; what a failed read means is for the
			// core's Observe to find out.
			return nil
		case err == nil:
			if pod.Spec.NodeName != "" || pod.Status.Phase != corev1.PodPending || pod.DeletionTimestamp != nil {
				return nil
			}
		}
		elapsed := p.clock.Now().Sub(start)
		if elapsed >= window {
			if err != nil {
				return nil
			}
			if c, ok := unschedulable(pod); ok {
				if insufficient(c.Message) {
					return p.errorf(provider.Capacity, "create", "pod %s unschedulable for %v: %s", name, window.Round(time.Second), c.Message)
				}
				return p.errorf(provider.Failed, "create", "pod %s unschedulable for %v: %s", name, window.Round(time.Second), c.Message)
			}
			return nil
		}
		if err := p.clock.Sleep(ctx, min(wait, window-elapsed)); err != nil {
			return p.errorf(provider.Transient, "create", "waiting for pod %s to be scheduled: %w", name, err)
		}
		wait = min(2*wait, p.cfg.PollInterval)
	}
}

// unschedulable returns the pod's PodScheduled condition when the scheduler
// has found no node for it (status False, reason Unschedulable).
func unschedulable(pod *corev1.Pod) (corev1.PodCondition, bool) {
	if pod.Spec.NodeName != "" {
		return corev1.PodCondition{}, false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return c, true
		}
	}
	return corev1.PodCondition{}, false
}

// insufficientGPU reports whether a scheduler message says nodes lack free
// GPUs: "0/5 nodes are available: 3 Insufficient nvidia.com/gpu, 2 node(s)
// didn't match Pod's node affinity/selector." (the NodeResourcesFit
// plugin's "Insufficient <resource>" reason).
func insufficientGPU(msg string) bool {
	return strings.Contains(msg, "Insufficient "+string(resourceGPU))
}

// insufficient reports whether a scheduler message says nodes lack free
// GPUs, CPU or memory (NodeResourcesFit's "Insufficient nvidia.com/gpu",
// "Insufficient cpu", "Insufficient memory"): the pod's shape does not fit
// what the nodes have left, the cluster's stockout. So is a persistent
// volume the nodes' storage cannot make (VolumeBinding's
// ErrReasonNotEnoughSpace, "node(s) did not have enough free storage",
// pkg/scheduler/framework/plugins/volumebinding/binder.go: a CSI driver's
// storage capacity, https://kubernetes.io/docs/concepts/storage/storage-capacity/).
func insufficient(msg string) bool {
	return insufficientGPU(msg) || strings.Contains(msg, "Insufficient "+string(corev1.ResourceCPU)) ||
		strings.Contains(msg, "Insufficient "+string(corev1.ResourceMemory)) ||
		strings.Contains(msg, errReasonNotEnoughSpace)
}

// errReasonNotEnoughSpace is the scheduler's VolumeBinding reason for nodes
// whose storage cannot make a pod's unbound claims (see insufficient).
const errReasonNotEnoughSpace = "node(s) did not have enough free storage"

// preconditions makes a delete apply only to the object with uid: a newer
// object of the same name is never deleted in its place.
func preconditions(uid types.UID) metav1.DeleteOptions {
	if uid == "" {
		return metav1.DeleteOptions{}
	}
	return metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}
}
