package kubernetes

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/org/gpuprov/provider"
)

// disruptedPod reads a pod of testdata/notice (SOURCES.md there says where
// each comes from).
func disruptedPod(t *testing.T, name string) *corev1.Pod {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "notice", name))
	if err != nil {
		t.Fatal(err)
	}
	var pod corev1.Pod
	if err := json.Unmarshal(b, &pod); err != nil {
		t.Fatal(err)
	}
	return &pod
}

// Observe and List report the interruption a pod's DisruptionTarget
// condition announces: preempted by the scheduler (no time: the scheduler
// adds the condition before it deletes), deleted by the taint manager (at
// the deletionTimestamp the delete set), nothing for a condition that is
// not True or a pod without one.
func TestObserveReportsDisruptionTarget(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, gpuNode("node-1", "zone-a", "NVIDIA-L4", 4))
	p := c.provider(t, Config{ServiceType: ServiceLoadBalancer})
	c.lbIngress = "198.51.100.7"
	o, id := launch(t, c, p, "train")
	observe := func() provider.Observed {
		t.Helper()
		obs, err := p.Observe(ctx, o.Location, "train")
		if err != nil || len(obs) != 1 {
			t.Fatalf("Observe: %+v, %v", obs, err)
		}
		listed, err := p.List(ctx, o.Location)
		if err != nil || len(listed) != 1 || (listed[0].Notice == nil) != (obs[0].Notice == nil) ||
			(obs[0].Notice != nil && *listed[0].Notice != *obs[0].Notice) {
			t.Fatalf("List: %+v, %v; Observe: %+v", listed, err, obs)
		}
		return obs[0]
	}
	// disrupt gives the launched pod the fixture's conditions, and its
	// deletionTimestamp when it has one.
	disrupt := func(fixture *corev1.Pod) {
		c.setPod(t, id, func(pod *corev1.Pod) {
			pod.Status.Conditions = append(pod.Status.Conditions, fixture.Status.Conditions...)
			pod.DeletionTimestamp, pod.DeletionGracePeriodSeconds = fixture.DeletionTimestamp, fixture.DeletionGracePeriodSeconds
		})
	}
	restore := func() {
		c.setPod(t, id, func(pod *corev1.Pod) {
			var keep []corev1.PodCondition
			for _, cond := range pod.Status.Conditions {
				if cond.Type != corev1.DisruptionTarget {
					keep = append(keep, cond)
				}
			}
			pod.Status.Conditions, pod.DeletionTimestamp, pod.DeletionGracePeriodSeconds = keep, nil, nil
		})
	}

	if got := observe(); got.Status != provider.StatusRunning || got.Notice != nil {
		t.Fatalf("a running pod: %+v, notice %+v", got, got.Notice)
	}

	disrupt(disruptedPod(t, "preemption-by-scheduler.json"))
	got := observe()
	want := provider.Notice{Kind: provider.NoticePreempt,
		Detail: "DisruptionTarget PreemptionByScheduler: default-scheduler: preempting to accommodate a higher priority pod"}
	if got.Notice == nil || *got.Notice != want || got.Status != provider.StatusRunning {
		t.Errorf("preempted by the scheduler: %+v, notice %+v; want %+v", got, got.Notice, want)
	}

	restore()
	disrupt(disruptedPod(t, "deletion-by-taint-manager.json"))
	got = observe()
	want = provider.Notice{Kind: provider.NoticeMaintenance, At: time.Date(2026, 5, 1, 9, 5, 30, 0, time.UTC),
		Detail: "DisruptionTarget DeletionByTaintManager: Taint manager: deleting due to NoExecute taint"}
	if got.Notice == nil || *got.Notice != want || got.Status != provider.StatusStopping {
		t.Errorf("deleted by the taint manager: %+v, notice %+v; want %+v", got, got.Notice, want)
	}

	restore()
	notTrue := disruptedPod(t, "preemption-by-scheduler.json")
	notTrue.Status.Conditions[0].Status = corev1.ConditionFalse
	disrupt(notTrue)
	if got := observe(); got.Notice != nil {
		t.Errorf("a DisruptionTarget condition that is not True: notice %+v", got.Notice)
	}
}

// Every documented reason, and one the table does not list (the device
// taint eviction's), is an interruption; only the scheduler's preemption
// is a preemption.
func TestDisruptionNoticeKinds(t *testing.T) {
	for reason, want := range map[string]provider.NoticeKind{
		"PreemptionByScheduler":        provider.NoticePreempt,
		"DeletionByTaintManager":       provider.NoticeMaintenance,
		"EvictionByEvictionAPI":        provider.NoticeMaintenance,
		"DeletionByPodGC":              provider.NoticeMaintenance,
		"TerminationByKubelet":         provider.NoticeMaintenance,
		"DeletionByDeviceTaintManager": provider.NoticeMaintenance,
	} {
		pod := &corev1.Pod{Status: corev1.PodStatus{Conditions: []corev1.PodCondition{
			{Type: corev1.PodReady, Status: corev1.ConditionTrue},
			{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: reason},
		}}}
		n := disruptionNotice(pod)
		if n == nil || n.Kind != want || n.Detail != "DisruptionTarget "+reason || !n.At.IsZero() {
			t.Errorf("%s: %+v, want %s", reason, n, want)
		}
	}
	if n := disruptionNotice(&corev1.Pod{}); n != nil {
		t.Errorf("a pod without conditions: %+v", n)
	}
}
