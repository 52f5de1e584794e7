package kubernetes

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/org/gpuprov/provider"
)

// Diagnose reads the pod instanceID (and its VM's Service and node) and
// reports its status with findings from the pod's own record:
//
//	insufficient-gpu      Unschedulable for "Insufficient nvidia.com/gpu": Warn within
//	                      unschedulable_window, Critical after (the cluster's stockout)
//	unschedulable         Unschedulable for another reason: the same severities
//	container-waiting     a container waiting (image pull, config): Warn, Critical for a
//	                      reason after which it cannot start
//	container-terminated  a container exited (reason, exit code): Critical
//	evicted / disrupted   the pod was evicted (status reason) or has a DisruptionTarget
//	                      condition (preemption, taint eviction, node shutdown): Critical
//	terminating           deletion requested: Warn
//	node-down             the pod's node is gone, unreachable or not Ready: Critical
//	no-ssh-endpoint       running without a node port or ingress yet: Warn
//
// A pod that is gone (deleted, or never there) is reported not existing:
// the API keeps no record of deleted pods. It never mutates.
func (p *Provider) Diagnose(ctx context.Context, loc provider.Location, vm, instanceID string) (provider.Diagnosis, error) {
	d := provider.Diagnosis{InstanceID: instanceID}
	if err := p.checkRegion("diagnose", loc); err != nil {
		return d, err
	}
	cctx, cancel := p.call(ctx)
	pod, err := p.cs.CoreV1().Pods(p.cfg.Namespace).Get(cctx, instanceID, metav1.GetOptions{})
	cancel()
	if apierrors.IsNotFound(err) {
		d.Status = provider.StatusTerminated
		d.Findings = append(d.Findings, provider.Finding{Severity: provider.Critical, Code: "gone",
			Message: fmt.Sprintf("pod %s/%s no longer exists", p.cfg.Namespace, instanceID)})
		return d, nil
	}
	if err != nil {
		return d, p.classify("diagnose", err)
	}
	if !p.ours(pod.Labels, vm) {
		d.Findings = append(d.Findings, provider.Finding{Severity: provider.Critical, Code: "identity-mismatch",
			Message: fmt.Sprintf("pod %s does not carry the identity of VM %s in this installation", pod.Name, vm)})
		return d, nil
	}
	l, err := p.look(ctx, "diagnose", labels.SelectorFromSet(labels.Set{provider.LabelVM: vm, provider.LabelInstallation: p.installation}))
	if err != nil {
		return d, err
	}
	now := p.clock.Now()
	o := p.observed(pod, l, now)
	d.Exists, d.Status, d.VendorStatus = true, o.Status, o.VendorStatus
	d.Findings = append(d.Findings, p.findings(pod, l.down(pod), now)...)
	if o.Status == provider.StatusPending && pod.Status.Phase == corev1.PodRunning && podReady(pod) {
		d.Findings = append(d.Findings, provider.Finding{Severity: provider.Warn, Code: "no-ssh-endpoint",
			Message: fmt.Sprintf("pod runs but its %s service has no endpoint yet", p.cfg.ServiceType)})
	}
	if len(d.Findings) == 0 && o.Status != provider.StatusRunning {
		sev := provider.Warn
		if o.Status == provider.StatusFailed || o.Status == provider.StatusUnknown {
			sev = provider.Critical
		}
		d.Findings = append(d.Findings, provider.Finding{Severity: sev, Code: "status-" + string(o.Status),
			Message: fmt.Sprintf("pod is %s (%s)", o.Status, o.VendorStatus)})
	}
	return d, nil
}

// findings reads the pod's conditions and container states, and its
// node's health (down, see nodeDown).
func (p *Provider) findings(pod *corev1.Pod, down string, now time.Time) []provider.Finding {
	var out []provider.Finding
	if down != "" {
		out = append(out, provider.Finding{Severity: provider.Critical, Code: "node-down",
			Message: down + ": the pod's state is unknown; a deletion past its grace period is forced"})
	}
	if pod.DeletionTimestamp != nil {
		out = append(out, provider.Finding{Severity: provider.Warn, Code: "terminating",
			Message: "deletion requested", At: pod.DeletionTimestamp.Time})
	}
	if c, ok := unschedulable(pod); ok {
		code := "unschedulable"
		if insufficientGPU(c.Message) {
			code = "insufficient-gpu"
		}
		sev := provider.Warn
		if status, _ := p.podStatus(pod, down, now); status == provider.StatusFailed {
			sev = provider.Critical
		}
		out = append(out, provider.Finding{Severity: sev, Code: code, Message: describeUnschedulable(c, now), At: c.LastTransitionTime.Time})
	}
	if pod.Status.Reason == "Evicted" {
		out = append(out, provider.Finding{Severity: provider.Critical, Code: "evicted", Message: pod.Status.Message})
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue {
			out = append(out, provider.Finding{Severity: provider.Critical, Code: "disrupted",
				Message: fmt.Sprintf("%s: %s", c.Reason, c.Message), At: c.LastTransitionTime.Time})
		}
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil && w.Reason != "" {
			sev := provider.Warn
			if brokenWaiting[w.Reason] {
				sev = provider.Critical
			}
			out = append(out, provider.Finding{Severity: sev, Code: "container-waiting",
				Message: fmt.Sprintf("container %s waiting: %s %s", cs.Name, w.Reason, w.Message)})
		}
		if t := cs.State.Terminated; t != nil {
			out = append(out, provider.Finding{Severity: provider.Critical, Code: "container-terminated",
				Message: fmt.Sprintf("container %s exited %d (%s) %s", cs.Name, t.ExitCode, t.Reason, t.Message), At: t.FinishedAt.Time})
		}
	}
	return out
}
