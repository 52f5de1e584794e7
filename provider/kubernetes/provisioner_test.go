package kubernetes

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/gpuprovtest"
	"github.com/org/gpuprov/provider"
)

// A launch plans both zones of the cluster (zone-a first: equal prices,
// zone order), but another tenant's job takes zone-a's GPUs as the pod
// arrives: the scheduler answers "Insufficient nvidia.com/gpu" for longer
// than the unschedulable window, Create reports Capacity, the core tears
// the attempt down (pod, Service, Secret), blocks the offer, and the pod in
// zone-b runs and is reached through its NodePort. The Secret of the second
// attempt carries the host key the journal pinned. Deleting the VM leaves
// nothing of it in the namespace.
func TestProvisionerFailsOverOnInsufficientGPU(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, gpuNode("node-1", "zone-a", "NVIDIA-H100-80GB-HBM3", 8), gpuNode("node-2", "zone-b", "NVIDIA-H100-80GB-HBM3", 8))
	c.bootDelay = 40 * time.Second
	c.beforeCreate = func(pod *corev1.Pod) {
		if pod.Namespace == namespace && pod.Spec.NodeSelector[LabelZone] == "zone-a" && len(c.pods("team-b")) == 0 {
			c.occupy("node-1", 8)
		}
	}
	t.Cleanup(c.clk.AutoAdvance())
	prov, j := gpuprovtest.New(t, c.clk, func(inst string) []provider.CloudProvider {
		return []provider.CloudProvider{c.provider(t, Config{GPUPricePerHour: 1.5, UnschedulableWindow: 90 * time.Second}, WithInstallation(inst))}
	}, gpuprov.WithSSH("root", []string{userKey(t)}, true))

	started := c.clk.Now()
	vm, err := prov.Launch(ctx, gpuprov.Request{Name: "train", GPU: "h100", GPUCount: 4, Timeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if vm.State != gpuprov.StateReady || vm.Location != (provider.Location{Region: clusterName, Zone: "zone-b"}) ||
		vm.SSH == nil || vm.SSH.Host != "203.0.113.2" || vm.SSH.Port < 30000 || vm.SSH.User != "root" || vm.PricePerHour != 6 {
		t.Fatalf("vm %+v ssh %+v", vm, vm.SSH)
	}
	if waited := c.clk.Now().Sub(started); waited < 90*time.Second {
		t.Fatalf("ready after %v: the unschedulable window of 90s was not waited out", waited)
	}

	as := gpuprovtest.CheckAttempts(t, j, "train", gpuprovtest.Attempt{Zone: "zone-a", Kind: "capacity"}, gpuprovtest.Attempt{Zone: "zone-b"})
	if !strings.Contains(as[0].Error, "Insufficient nvidia.com/gpu") {
		t.Fatalf("first attempt's error %q does not name the scheduler's reason", as[0].Error)
	}
	blocks, err := j.Blocks(ctx, c.clk.Now())
	if err != nil || len(blocks) != 1 || blocks[0].ErrorKind != "capacity" || !strings.Contains(blocks[0].Key, "zone-a") {
		t.Fatalf("blocks %+v (%v)", blocks, err)
	}

	// What the namespace holds: the second attempt's pod, and one Service
	// and Secret (the first attempt's were cleaned up and made again).
	if pods := c.names(t, podsGVR); !slices.Equal(pods, []string{"gpuprov-train-2"}) {
		t.Fatalf("pods %v", pods)
	}
	if svcs, secs := c.names(t, svcGVR), c.names(t, secGVR); !slices.Equal(svcs, []string{"gpuprov-train"}) || !slices.Equal(secs, []string{"gpuprov-train"}) {
		t.Fatalf("services %v secrets %v", svcs, secs)
	}
	sec, err := c.cs.CoreV1().Secrets(namespace).Get(ctx, "gpuprov-train", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if vm.HostKey == "" || strings.TrimSpace(string(sec.Data[secretHostKeyPub])) != vm.HostKey ||
		!strings.Contains(string(sec.Data[secretHostKey]), "OPENSSH PRIVATE KEY") ||
		!strings.Contains(string(sec.Data[secretAuthorizedKeys]), "ssh-ed25519 ") {
		t.Fatalf("secret %v does not carry the pinned host key %q", sec.Data, vm.HostKey)
	}

	if err := prov.Delete(ctx, "train"); err != nil {
		t.Fatal(err)
	}
	if pods, svcs, secs := c.names(t, podsGVR), c.names(t, svcGVR), c.names(t, secGVR); len(pods)+len(svcs)+len(secs) != 0 {
		t.Fatalf("left in the namespace: pods %v services %v secrets %v", pods, svcs, secs)
	}
}

// A namespace whose ResourceQuota has no GPUs left refuses the pod: the
// launch blocks the cluster (Quota's region scope) and, with no other
// cluster configured, fails cleanly with nothing left behind.
func TestProvisionerQuotaBlocksTheCluster(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, gpuNode("node-1", "zone-a", "NVIDIA-L4", 4), gpuNode("node-2", "zone-b", "NVIDIA-L4", 4))
	c.cs.PrependReactor("create", "pods", quotaRefusal)
	t.Cleanup(c.clk.AutoAdvance())
	prov, j := gpuprovtest.New(t, c.clk, func(inst string) []provider.CloudProvider {
		return []provider.CloudProvider{c.provider(t, Config{}, WithInstallation(inst))}
	})
	_, err := prov.Launch(ctx, gpuprov.Request{Name: "quota", GPU: "L4", Timeout: time.Hour})
	if err == nil {
		t.Fatal("launch succeeded against a full quota")
	}
	as, aerr := j.Attempts(ctx, "quota")
	if aerr != nil || len(as) != 1 || as[0].ErrorKind != "quota" {
		t.Fatalf("attempts %+v (%v); launch error %v", as, aerr, err)
	}
	blocks, berr := j.Blocks(ctx, c.clk.Now())
	if berr != nil || len(blocks) != 1 || blocks[0].Scope != "region" || !strings.Contains(blocks[0].Key, clusterName) {
		t.Fatalf("blocks %+v (%v)", blocks, berr)
	}
	if pods, svcs, secs := c.names(t, podsGVR), c.names(t, svcGVR), c.names(t, secGVR); len(pods)+len(svcs)+len(secs) != 0 {
		t.Fatalf("left in the namespace: pods %v services %v secrets %v", pods, svcs, secs)
	}
}

func userKey(t *testing.T) string {
	t.Helper()
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	sp, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sp)))
}
