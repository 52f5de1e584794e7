package kubernetes

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"

	"github.com/org/gpuprov/provider"
)

// brokenWaiting are container waiting reasons after which the pod cannot
// start: the image name does not parse, the image may not be pulled, the
// container's config (a Secret key, an env reference) or the runtime refuses
// it. An image pull that keeps failing (ErrImagePull, ImagePullBackOff) is
// left Pending, bounded by boot_timeout: registries fail transiently.
var brokenWaiting = map[string]bool{
	"InvalidImageName":           true,
	"ErrImageNeverPull":          true,
	"CreateContainerConfigError": true,
	"CreateContainerError":       true,
	"RunContainerError":          true,
}

// podStatus normalizes a pod's status; down says why the pod's node cannot
// run it ("" when the node is healthy or unknown, see nodeDown), now is for
// the unschedulable window and the deletion deadline:
//
//	deletionTimestamp passed, node down                     Unknown ("Terminating: <why>"): no
//	                                                        kubelet will finish the deletion
//	deletionTimestamp set otherwise                         Stopping
//	Pending or Running on a node that is down               Unknown ("<phase>: <why>"): the
//	                                                        pod's real state cannot be known
//	Pending, unschedulable for unschedulable_window         Failed ("Unschedulable: <scheduler message>")
//	Pending, a container waiting for a reason in brokenWaiting  Failed
//	Pending otherwise (unscheduled, pulling, starting)      Pending
//	Running and Ready                                       Running
//	Running, not Ready (sshd not listening yet)             Pending
//	Succeeded or Failed (sshd exited, evicted, node lost)   Failed
//	Unknown or anything else                                Unknown
//
// A terminating pod past its deadline on a node that is down is not
// Stopping, because it never stops on its own: the core sends Delete again
// for an instance that is not stopping, and Delete forces it (deletePod).
func (p *Provider) podStatus(pod *corev1.Pod, down string, now time.Time) (provider.InstanceStatus, string) {
	phase := string(pod.Status.Phase)
	if ts := pod.DeletionTimestamp; ts != nil {
		if down != "" && !now.Before(ts.Time) {
			return provider.StatusUnknown, "Terminating: " + down
		}
		return provider.StatusStopping, "Terminating"
	}
	if down != "" && pod.Spec.NodeName != "" && (pod.Status.Phase == corev1.PodPending || pod.Status.Phase == corev1.PodRunning) {
		return provider.StatusUnknown, phase + ": " + down
	}
	switch pod.Status.Phase {
	case corev1.PodPending:
		if c, ok := unschedulable(pod); ok {
			since := c.LastTransitionTime.Time
			if since.IsZero() {
				since = pod.CreationTimestamp.Time
			}
			vendor := phase + ": Unschedulable: " + c.Message
			if !since.IsZero() && now.Sub(since) >= p.cfg.UnschedulableWindow {
				return provider.StatusFailed, vendor
			}
			return provider.StatusPending, vendor
		}
		for _, cs := range pod.Status.ContainerStatuses {
			if w := cs.State.Waiting; w != nil && w.Reason != "" {
				if brokenWaiting[w.Reason] {
					return provider.StatusFailed, phase + ": " + w.Reason
				}
				return provider.StatusPending, phase + ": " + w.Reason
			}
		}
		return provider.StatusPending, phase
	case corev1.PodRunning:
		if podReady(pod) {
			return provider.StatusRunning, phase
		}
		return provider.StatusPending, phase + ": not ready"
	case corev1.PodSucceeded, corev1.PodFailed:
		if pod.Status.Reason != "" {
			return provider.StatusFailed, phase + ": " + pod.Status.Reason
		}
		return provider.StatusFailed, phase
	}
	return provider.StatusUnknown, phase
}

// nodeDown says why node (named name) cannot run or stop its pods, or ""
// when it can or nothing is known (node is nil and not gone: it could not
// be read). A node is down when it is gone, carries the
// node.kubernetes.io/unreachable taint, or its Ready condition is not True:
// the node lifecycle controller sets Ready to Unknown ("Kubelet stopped
// posting node status.") and taints the node unreachable when its kubelet
// stops reporting (pkg/controller/nodelifecycle/node_lifecycle_controller.go).
// A pod on such a node stays Terminating until it is force-deleted (the
// Kubernetes task "Force Delete StatefulSet Pods").
func nodeDown(name string, node *corev1.Node, gone bool) string {
	switch {
	case gone:
		return fmt.Sprintf("node %s is gone", name)
	case node == nil:
		return ""
	}
	for _, t := range node.Spec.Taints {
		if t.Key == corev1.TaintNodeUnreachable {
			return fmt.Sprintf("node %s is unreachable", name)
		}
	}
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			if c.Status == corev1.ConditionTrue {
				return ""
			}
			why := "Ready=" + string(c.Status)
			if c.Message != "" {
				why += " " + c.Message
			}
			return fmt.Sprintf("node %s is not ready (%s)", name, why)
		}
	}
	return fmt.Sprintf("node %s is not ready (no Ready condition)", name)
}

func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// listing is one look at the namespace: the pods of the selector, the
// Services of the VMs, and the nodes the pods are bound to.
type listing struct {
	pods     []corev1.Pod
	services map[string]*corev1.Service // by VM
	nodes    map[string]*corev1.Node    // by name; nil entry: not readable, or gone
	gone     map[string]bool            // nodes that no longer exist
}

// down says why pod's node cannot run or stop it ("": it can, or unknown).
func (l *listing) down(pod *corev1.Pod) string {
	n := pod.Spec.NodeName
	if n == "" {
		return ""
	}
	return nodeDown(n, l.nodes[n], l.gone[n])
}

// look lists the pods matching sel, the Services of this installation and,
// for each node a pod is bound to, the node: its addresses (NodePort) and
// its health (see nodeDown). A node that may not be read counts as healthy.
func (p *Provider) look(ctx context.Context, op string, sel labels.Selector) (*listing, error) {
	cctx, cancel := p.call(ctx)
	defer cancel()
	core := p.cs.CoreV1()
	pods, err := core.Pods(p.cfg.Namespace).List(cctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return nil, p.classify(op+": list pods", err)
	}
	l := &listing{services: map[string]*corev1.Service{}, nodes: map[string]*corev1.Node{}, gone: map[string]bool{}}
	for _, pod := range pods.Items {
		if p.ours(pod.Labels, pod.Labels[provider.LabelVM]) && sel.Matches(labels.Set(pod.Labels)) {
			l.pods = append(l.pods, pod)
		}
	}
	if len(l.pods) == 0 {
		return l, nil
	}
	svcs, err := core.Services(p.cfg.Namespace).List(cctx, metav1.ListOptions{LabelSelector: labels.Set{provider.LabelInstallation: p.installation}.String()})
	if err != nil {
		return nil, p.classify(op+": list services", err)
	}
	for i := range svcs.Items {
		s := &svcs.Items[i]
		if vm := s.Labels[provider.LabelVM]; p.ours(s.Labels, vm) {
			l.services[vm] = s
		}
	}
	for _, pod := range l.pods {
		n := pod.Spec.NodeName
		if _, seen := l.nodes[n]; seen || n == "" || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		node, gone, err := p.node(cctx, n)
		if err != nil {
			return nil, p.classify(op+": get node", err)
		}
		l.nodes[n], l.gone[n] = node, gone
	}
	return l, nil
}

// node reads a node: nil and gone when it no longer exists, nil alone when
// it may not be read (without nodes get a NodePort endpoint falls back to
// the pod's hostIP and a node's health is unknown).
func (p *Provider) node(ctx context.Context, name string) (*corev1.Node, bool, error) {
	node, err := p.cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	switch {
	case err == nil:
		return node, false, nil
	case apierrors.IsNotFound(err):
		return nil, true, nil
	case apierrors.IsForbidden(err):
		return nil, false, nil
	}
	return nil, false, err
}

// observed normalizes one pod of l, with the interruption its
// DisruptionTarget condition announces (disruptionNotice).
func (p *Provider) observed(pod *corev1.Pod, l *listing, now time.Time) provider.Observed {
	status, vendor := p.podStatus(pod, l.down(pod), now)
	o := provider.Observed{
		ID: pod.Name, VM: pod.Labels[provider.LabelVM], Status: status, VendorStatus: vendor,
		Location:     provider.Location{Region: p.region, Zone: pod.Labels[labelZone]},
		InstanceType: pod.Annotations[annotationInstanceType], Created: pod.CreationTimestamp.Time,
		PrivateIP: pod.Status.PodIP, Notice: disruptionNotice(pod),
	}
	host, port := p.endpoint(pod, l)
	if host != "" && p.cfg.ServiceType != ServiceClusterIP {
		o.PublicIP = host
	}
	if status == provider.StatusRunning {
		if host == "" || port == 0 {
			// Running but not reachable yet (no node port or load
			// balancer ingress assigned).
			o.Status, o.VendorStatus = provider.StatusPending, vendor+": no endpoint"
		} else {
			user := pod.Annotations[annotationSSHUser]
			if user == "" {
				user = "root"
			}
			o.SSH = &provider.SSHEndpoint{Host: host, Port: port, User: user}
		}
	}
	return o
}

// endpoint is where SSH reaches the pod through its VM's Service: a
// NodePort's node port on the pod's node (ExternalIP, else InternalIP, else
// the pod's hostIP), a LoadBalancer's first ingress (IP, else hostname) on
// port 22, a ClusterIP's cluster IP on port 22.
func (p *Provider) endpoint(pod *corev1.Pod, l *listing) (string, int) {
	svc := l.services[pod.Labels[provider.LabelVM]]
	if svc == nil {
		return "", 0
	}
	var sp *corev1.ServicePort
	for i := range svc.Spec.Ports {
		if svc.Spec.Ports[i].Name == "ssh" || svc.Spec.Ports[i].Port == 22 {
			sp = &svc.Spec.Ports[i]
			break
		}
	}
	if sp == nil {
		return "", 0
	}
	switch svc.Spec.Type {
	case corev1.ServiceTypeNodePort:
		return nodeAddress(pod, l.nodes[pod.Spec.NodeName]), int(sp.NodePort)
	case corev1.ServiceTypeLoadBalancer:
		for _, in := range svc.Status.LoadBalancer.Ingress {
			if in.IP != "" {
				return in.IP, int(sp.Port)
			}
			if in.Hostname != "" {
				return in.Hostname, int(sp.Port)
			}
		}
		return "", 0
	case corev1.ServiceTypeClusterIP:
		if ip := svc.Spec.ClusterIP; ip != "" && ip != corev1.ClusterIPNone {
			return ip, int(sp.Port)
		}
	}
	return "", 0
}

func nodeAddress(pod *corev1.Pod, node *corev1.Node) string {
	if node != nil {
		for _, want := range []corev1.NodeAddressType{corev1.NodeExternalIP, corev1.NodeInternalIP} {
			for _, a := range node.Status.Addresses {
				if a.Type == want && a.Address != "" {
					return a.Address
				}
			}
		}
	}
	return pod.Status.HostIP
}

// selector selects the pods of this installation, and of vm when given.
func (p *Provider) selector(vm string) labels.Selector {
	sel := labels.SelectorFromSet(labels.Set{provider.LabelInstallation: p.installation})
	if vm != "" {
		r, _ := labels.NewRequirement(provider.LabelVM, selection.Equals, []string{vm}) // vm is a valid label value
		return sel.Add(*r)
	}
	r, _ := labels.NewRequirement(provider.LabelVM, selection.Exists, nil)
	return sel.Add(*r)
}

// Observe lists the pods of the namespace that carry both identity labels
// of vm and were created for loc's zone, with their VM's Service (and, for
// a NodePort, their node), and normalizes them (podStatus). Failed pods are
// listed as Failed until deleted.
func (p *Provider) Observe(ctx context.Context, loc provider.Location, vm string) ([]provider.Observed, error) {
	if err := p.checkRegion("observe", loc); err != nil {
		return nil, err
	}
	l, err := p.look(ctx, "observe", p.selector(vm))
	if err != nil {
		return nil, err
	}
	now := p.clock.Now()
	out := []provider.Observed{}
	for i := range l.pods {
		if l.pods[i].Labels[labelZone] == loc.Zone {
			out = append(out, p.observed(&l.pods[i], l, now))
		}
	}
	return out, nil
}

// List returns every pod of this installation that carries a VM label: in
// loc's zone, or in every zone when loc is zero. One list of pods, one of
// Services, and a node read per node with a running pod (NodePort).
func (p *Provider) List(ctx context.Context, loc provider.Location) ([]provider.Observed, error) {
	if !loc.IsZero() {
		if err := p.checkRegion("list", loc); err != nil {
			return nil, err
		}
	}
	l, err := p.look(ctx, "list", p.selector(""))
	if err != nil {
		return nil, err
	}
	now := p.clock.Now()
	out := []provider.Observed{}
	for i := range l.pods {
		if loc.IsZero() || l.pods[i].Labels[labelZone] == loc.Zone {
			out = append(out, p.observed(&l.pods[i], l, now))
		}
	}
	return out, nil
}

// Delete requests the deletion of each pod (one get, to check it is still
// this VM's, and one delete with the pod's UID as precondition; grace period
// the pod's, 10s). A pod that is gone (404) is success; a pod of the name
// that is not this VM's is left alone. A pod already terminating is
// success, unless its grace period is over and its node is down (gone,
// unreachable or not Ready, see nodeDown): no kubelet will then confirm the
// deletion, and the pod would stay Terminating for as long as the node is
// away, so it is deleted again with GracePeriodSeconds 0 (what `kubectl
// delete --grace-period=0 --force` sends; the Kubernetes task "Force Delete
// StatefulSet Pods"). The kubelet, should it come back, stops the
// containers of a pod the API no longer has. It tries every id and returns
// the first error.
func (p *Provider) Delete(ctx context.Context, loc provider.Location, vm string, ids []string) error {
	if err := p.checkRegion("delete", loc); err != nil {
		return err
	}
	var first error
	for _, id := range ids {
		if err := p.deletePod(ctx, vm, id); err != nil && first == nil {
			first = err
		}
	}
	return first
}

func (p *Provider) deletePod(ctx context.Context, vm, name string) error {
	cctx, cancel := p.call(ctx)
	defer cancel()
	pods := p.cs.CoreV1().Pods(p.cfg.Namespace)
	pod, err := pods.Get(cctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return p.classify("delete: get pod", err)
	case !p.ours(pod.Labels, vm):
		p.log.Warn("kubernetes: delete leaves a pod that is not this VM's", "provider", p.name, "vm", vm, "pod", name)
		return nil
	}
	opts := preconditions(pod.UID)
	if ts := pod.DeletionTimestamp; ts != nil {
		if p.clock.Now().Before(ts.Time) || pod.Spec.NodeName == "" {
			return nil // the kubelet has its grace period to stop the pod
		}
		node, gone, err := p.node(cctx, pod.Spec.NodeName)
		if err != nil {
			return p.classify("delete: get node", err)
		}
		down := nodeDown(pod.Spec.NodeName, node, gone)
		if down == "" {
			return nil // a live kubelet finishes the deletion
		}
		p.log.Info("kubernetes: forcing the deletion of a pod whose node is down", "provider", p.name, "vm", vm, "pod", name, "reason", down)
		opts.GracePeriodSeconds = new(int64(0))
	}
	err = pods.Delete(cctx, name, opts)
	if err != nil && !apierrors.IsNotFound(err) {
		if apierrors.IsConflict(err) {
			return nil // the UID precondition failed: that pod is gone, this is a newer one
		}
		return p.classify("delete", err)
	}
	return nil
}

// describeUnschedulable is a finding's text for an unschedulable pod.
func describeUnschedulable(c corev1.PodCondition, now time.Time) string {
	if c.LastTransitionTime.IsZero() {
		return "unschedulable: " + c.Message
	}
	return fmt.Sprintf("unschedulable for %v: %s", now.Sub(c.LastTransitionTime.Time).Round(time.Second), strings.TrimSpace(c.Message))
}
