package kubernetes

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/org/gpuprov/provider"
)

// TestPodStatus is the status table: pod phases, conditions and container
// states as the kubelet and scheduler report them (Pod Lifecycle), and the
// normalized status each becomes.
func TestPodStatus(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	p := &Provider{cfg: Config{UnschedulableWindow: 2 * time.Minute}}
	unsched := func(age time.Duration, msg string) corev1.PodStatus {
		return corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled,
			Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: msg, LastTransitionTime: metav1.NewTime(now.Add(-age))}}}
	}
	waiting := func(reason string) corev1.PodStatus {
		return corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{Name: containerName,
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason}}}}}
	}
	ready := func(ok corev1.ConditionStatus) corev1.PodStatus {
		return corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: ok}}}
	}
	const gpuMsg = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
	for _, tc := range []struct {
		name     string
		status   corev1.PodStatus
		deleting bool
		want     provider.InstanceStatus
		vendor   string
	}{
		{"just created", corev1.PodStatus{Phase: corev1.PodPending}, false, provider.StatusPending, "Pending"},
		{"unschedulable within the window", unsched(time.Minute, gpuMsg), false, provider.StatusPending, "Pending: Unschedulable: " + gpuMsg},
		{"unschedulable beyond the window", unsched(2*time.Minute, gpuMsg), false, provider.StatusFailed, "Pending: Unschedulable: " + gpuMsg},
		{"untolerated taint beyond the window", unsched(3*time.Minute, "0/1 nodes are available: 1 node(s) had untolerated taint {dedicated: x}."), false, provider.StatusFailed, "Pending: Unschedulable: 0/1 nodes are available: 1 node(s) had untolerated taint {dedicated: x}."},
		{"creating the container", waiting("ContainerCreating"), false, provider.StatusPending, "Pending: ContainerCreating"},
		{"image pull backing off", waiting("ImagePullBackOff"), false, provider.StatusPending, "Pending: ImagePullBackOff"},
		{"invalid image name", waiting("InvalidImageName"), false, provider.StatusFailed, "Pending: InvalidImageName"},
		{"secret key missing", waiting("CreateContainerConfigError"), false, provider.StatusFailed, "Pending: CreateContainerConfigError"},
		{"running and ready", ready(corev1.ConditionTrue), false, provider.StatusRunning, "Running"},
		{"running, sshd not listening yet", ready(corev1.ConditionFalse), false, provider.StatusPending, "Running: not ready"},
		{"sshd exited", corev1.PodStatus{Phase: corev1.PodFailed}, false, provider.StatusFailed, "Failed"},
		{"evicted", corev1.PodStatus{Phase: corev1.PodFailed, Reason: "Evicted"}, false, provider.StatusFailed, "Failed: Evicted"},
		{"succeeded", corev1.PodStatus{Phase: corev1.PodSucceeded}, false, provider.StatusFailed, "Succeeded"},
		{"node lost", corev1.PodStatus{Phase: corev1.PodUnknown}, false, provider.StatusUnknown, "Unknown"},
		{"terminating", ready(corev1.ConditionTrue), true, provider.StatusStopping, "Terminating"},
	} {
		pod := &corev1.Pod{Status: tc.status}
		if tc.deleting {
			pod.DeletionTimestamp = &metav1.Time{Time: now}
		}
		if got, vendor := p.podStatus(pod, "", now); got != tc.want || vendor != tc.vendor {
			t.Errorf("%s: %s %q, want %s %q", tc.name, got, vendor, tc.want, tc.vendor)
		}
	}
}

// launch prepares and creates vm on the cluster's first offer and lets the
// pod boot.
func launch(t *testing.T, c *cluster, p *Provider, vm string) (provider.Offer, string) {
	t.Helper()
	ctx := context.Background()
	o := planOne(t, p, provider.ResourceRequest{GPU: "L4"})
	s := spec(vm, 1)
	prep, err := p.Prepare(ctx, &o, s)
	if err != nil {
		t.Fatal(err)
	}
	id, err := p.Create(ctx, &o, prep, s)
	if err != nil {
		t.Fatal(err)
	}
	c.clk.Advance(c.bootDelay)
	return o, id
}

// The SSH endpoint of each Service type, and a pod that runs before its
// endpoint exists is still Pending.
func TestEndpoints(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		serviceType string
		lbIngress   string
		host        string
		port        int // 0: any node port
		status      provider.InstanceStatus
	}{
		{ServiceNodePort, "", "203.0.113.1", 0, provider.StatusRunning},
		{ServiceLoadBalancer, "198.51.100.7", "198.51.100.7", 22, provider.StatusRunning},
		{ServiceLoadBalancer, "", "", 0, provider.StatusPending}, // no ingress yet
		{ServiceClusterIP, "", "10.96.0.1", 22, provider.StatusRunning},
	} {
		t.Run(tc.serviceType+"_"+tc.lbIngress, func(t *testing.T) {
			c := newCluster(t, gpuNode("node-1", "zone-a", "NVIDIA-L4", 4))
			c.lbIngress = tc.lbIngress
			p := c.provider(t, Config{ServiceType: tc.serviceType})
			o, id := launch(t, c, p, "ep")
			obs, err := p.Observe(ctx, o.Location, "ep")
			if err != nil || len(obs) != 1 || obs[0].ID != id || obs[0].Status != tc.status {
				t.Fatalf("Observe: %+v, %v", obs, err)
			}
			got := obs[0]
			if tc.status == provider.StatusPending {
				if got.SSH != nil || !strings.HasSuffix(got.VendorStatus, "no endpoint") {
					t.Fatalf("unreachable pod observed as %+v", got)
				}
				return
			}
			if got.SSH == nil || got.SSH.Host != tc.host || got.SSH.User != "ubuntu" || (tc.port != 0 && got.SSH.Port != tc.port) ||
				(tc.port == 0 && got.SSH.Port < 30000) || got.PrivateIP == "" || got.InstanceType != "1xNVIDIA-L4" ||
				got.Location != o.Location || got.VM != "ep" {
				t.Fatalf("observed %+v ssh %+v", got, got.SSH)
			}
		})
	}
	// A NodePort on a node without an external address is reached on its
	// internal one.
	n := gpuNode("node-1", "zone-a", "NVIDIA-L4", 4)
	n.Status.Addresses = n.Status.Addresses[:1]
	c := newCluster(t, n)
	p := c.provider(t, Config{})
	o, _ := launch(t, c, p, "inner")
	if obs, err := p.Observe(ctx, o.Location, "inner"); err != nil || len(obs) != 1 || obs[0].SSH == nil || obs[0].SSH.Host != "10.0.0.1" {
		t.Fatalf("Observe: %+v, %v", obs, err)
	}
}

// Observe and List see this installation's pods only, of the location's
// zone; Delete and Cleanup touch nothing that is not the VM's.
func TestOthersAreLeftAlone(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, gpuNode("node-1", "zone-a", "NVIDIA-L4", 4), gpuNode("node-2", "zone-b", "NVIDIA-L4", 4))
	mine := c.provider(t, Config{})
	theirs := c.provider(t, Config{}, func(p *Provider) { p.installation = "other-journal" })
	o, id := launch(t, c, mine, "shared-name")
	// Another journal's VM of the same name: its objects have the same
	// names, so it can exist only where ours does not: make it in the
	// other zone after ours is deleted and check each side.
	if obs, err := theirs.Observe(ctx, o.Location, "shared-name"); err != nil || len(obs) != 0 {
		t.Fatalf("another installation observes %+v, %v", obs, err)
	}
	if l, err := theirs.List(ctx, provider.Location{}); err != nil || len(l) != 0 {
		t.Fatalf("another installation lists %+v, %v", l, err)
	}
	if err := theirs.Delete(ctx, o.Location, "shared-name", []string{id}); err != nil {
		t.Fatal(err)
	}
	if err := theirs.Cleanup(ctx, o.Location, "shared-name"); err != nil {
		t.Fatal(err)
	}
	if err := mine.Delete(ctx, o.Location, "another-vm", []string{id}); err != nil {
		t.Fatal(err)
	}
	if pods, svcs, secs := c.names(t, podsGVR), c.names(t, svcGVR), c.names(t, secGVR); len(pods) != 1 || len(svcs) != 1 || len(secs) != 1 {
		t.Fatalf("another installation's delete and cleanup removed something: %v %v %v", pods, svcs, secs)
	}
	other := provider.Location{Region: clusterName, Zone: "zone-b"}
	if obs, err := mine.Observe(ctx, other, "shared-name"); err != nil || len(obs) != 0 {
		t.Fatalf("Observe of the other zone: %+v, %v", obs, err)
	}
	if l, err := mine.List(ctx, other); err != nil || len(l) != 0 {
		t.Fatalf("List of the other zone: %+v, %v", l, err)
	}
	if l, err := mine.List(ctx, provider.Location{}); err != nil || len(l) != 1 || l[0].ID != id || l[0].VM != "shared-name" {
		t.Fatalf("List: %+v, %v", l, err)
	}
	if _, err := mine.Observe(ctx, provider.Location{Region: "another-cluster"}, "shared-name"); provider.KindOf(err) != provider.InvalidRequest {
		t.Fatalf("Observe of another cluster's location: %v", err)
	}
	if err := mine.Delete(ctx, o.Location, "shared-name", []string{id, "gpuprov-shared-name-9"}); err != nil {
		t.Fatal(err)
	}
	if err := mine.Cleanup(ctx, o.Location, "shared-name"); err != nil {
		t.Fatal(err)
	}
	if pods, svcs, secs := c.names(t, podsGVR), c.names(t, svcGVR), c.names(t, secGVR); len(pods)+len(svcs)+len(secs) != 0 {
		t.Fatalf("left: %v %v %v", pods, svcs, secs)
	}
	// Objects of the VM's names that another journal made are Unavailable
	// to Prepare, and not adopted.
	theirSpec := spec("shared-name", 1)
	theirSpec.Installation = "other-journal"
	if _, err := theirs.Prepare(ctx, &o, theirSpec); err != nil {
		t.Fatal(err)
	}
	if _, err := mine.Prepare(ctx, &o, spec("shared-name", 1)); provider.KindOf(err) != provider.Unavailable || provider.ScopeOf(err) != provider.ScopeRegion {
		t.Fatalf("Prepare over another journal's secret: %v", err)
	}
	if err := mine.Cleanup(ctx, o.Location, "shared-name"); err != nil || !slices.Equal(c.names(t, secGVR), []string{"gpuprov-shared-name"}) {
		t.Fatalf("Cleanup removed another journal's objects: %v", err)
	}
}

// Diagnose names the stockout of a pod the scheduler cannot place, an
// eviction, and a pod that is gone.
func TestDiagnose(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, gpuNode("node-1", "zone-a", "NVIDIA-L4", 1))
	p := c.provider(t, Config{UnschedulableWindow: time.Minute})
	o, id := launch(t, c, p, "diag")
	d, err := p.Diagnose(ctx, o.Location, "diag", id)
	if err != nil || !d.Exists || d.Status != provider.StatusRunning || d.Verdict() != provider.Healthy {
		t.Fatalf("running pod: %+v, %v", d, err)
	}

	c.setPod(t, id, func(pod *corev1.Pod) {
		pod.Status.Phase, pod.Status.Reason, pod.Status.Message = corev1.PodFailed, "Evicted", "The node was low on resource: ephemeral-storage."
		pod.Status.Conditions = append(pod.Status.Conditions, corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue,
			Reason: "TerminationByKubelet", Message: "The node was low on resource: ephemeral-storage."})
	})
	d, err = p.Diagnose(ctx, o.Location, "diag", id)
	if err != nil || d.Status != provider.StatusFailed || d.Verdict() != provider.Unhealthy || !hasFinding(d, "evicted") || !hasFinding(d, "disrupted") {
		t.Fatalf("evicted pod: %+v, %v", d, err)
	}

	if err := p.Delete(ctx, o.Location, "diag", []string{id}); err != nil {
		t.Fatal(err)
	}
	d, err = p.Diagnose(ctx, o.Location, "diag", id)
	if err != nil || d.Exists || d.Verdict() != provider.Gone {
		t.Fatalf("deleted pod: %+v, %v", d, err)
	}

	// A second VM finds the node's only GPU taken (by the evicted pod's
	// successor of another tenant): Warn within the window, Critical after.
	c.occupy("node-1", 1)
	s := spec("starved", 1)
	if _, err := p.Prepare(ctx, &o, s); err != nil {
		t.Fatal(err)
	}
	stop := c.clk.AutoAdvance()
	_, err = p.Create(ctx, &o, []byte(`{"namespace":"gpuprov","secret":"gpuprov-starved","service":"gpuprov-starved"}`), s)
	stop()
	if provider.KindOf(err) != provider.Capacity {
		t.Fatalf("Create: %v", err)
	}
	d, err = p.Diagnose(ctx, o.Location, "starved", PodName("starved", 1))
	if err != nil || d.Status != provider.StatusFailed || !hasFinding(d, "insufficient-gpu") || d.Verdict() != provider.Unhealthy {
		t.Fatalf("starved pod: %+v, %v", d, err)
	}
}

func hasFinding(d provider.Diagnosis, code string) bool {
	return slices.ContainsFunc(d.Findings, func(f provider.Finding) bool { return f.Code == code })
}
