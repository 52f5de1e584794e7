package kubernetes

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/org/gpuprov/provider"
)

// disruptionNotice is the interruption a pod's DisruptionTarget condition
// announces, or nil. The control plane adds the condition, status True,
// when the pod "is about to be deleted due to a disruption", its reason
// saying which (Kubernetes documentation, "Pod conditions", DisruptionTarget,
// https://kubernetes.io/docs/concepts/workloads/pods/pod-condition/; before
// that page, https://kubernetes.io/docs/concepts/workloads/pods/disruptions/#pod-disruption-conditions):
//
//	PreemptionByScheduler   preempted to make room for a pod of higher priority  → NoticePreempt
//	DeletionByTaintManager  a NoExecute taint it does not tolerate               → NoticeMaintenance
//	EvictionByEvictionAPI   evicted through the API (a drain, an autoscaler)     → NoticeMaintenance
//	DeletionByPodGC         bound to a node that no longer exists                → NoticeMaintenance
//	TerminationByKubelet    node-pressure eviction or graceful node shutdown     → NoticeMaintenance
//
// any other reason is a NoticeMaintenance too: the pod is going, for a
// reason of the cluster's. Detail is the reason and the condition's
// message. At is the pod's deletionTimestamp when it has one: the API
// server sets it to the time of the delete plus the grace period, and the
// kubelet kills what still runs then (ObjectMeta.deletionTimestamp, "a user
// may request that a pod is deleted in 30 seconds ... After that 30
// seconds, the Kubelet will send a hard termination signal"); adding
// deletionGracePeriodSeconds to it would count the grace period twice. A
// condition that came before the delete (the scheduler and the eviction
// API add it first) has no time: zero.
func disruptionNotice(pod *corev1.Pod) *provider.Notice {
	for _, c := range pod.Status.Conditions {
		if c.Type != corev1.DisruptionTarget || c.Status != corev1.ConditionTrue {
			continue
		}
		n := &provider.Notice{Kind: provider.NoticeMaintenance, Detail: "DisruptionTarget " + c.Reason}
		if c.Reason == corev1.PodReasonPreemptionByScheduler {
			n.Kind = provider.NoticePreempt
		}
		if c.Message != "" {
			n.Detail += ": " + c.Message
		}
		if ts := pod.DeletionTimestamp; ts != nil {
			n.At = ts.UTC()
		}
		return n
	}
	return nil
}
