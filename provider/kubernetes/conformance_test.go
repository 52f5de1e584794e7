package kubernetes

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/providertest"
)

// The adapter passes the kit every adapter passes, against the fake
// clientset with the simulated scheduler and kubelets. An instance the kit
// breaks is a pod whose container exited (phase Failed), as after sshd died
// or an eviction.
func TestConformance(t *testing.T) {
	var c *cluster
	providertest.Run(t, providertest.Harness{
		New: func(t *testing.T) provider.CloudProvider {
			c = newCluster(t, gpuNode("node-1", "zone-a", "NVIDIA-H100-80GB-HBM3", 8), gpuNode("node-2", "zone-b", "NVIDIA-L4", 4))
			c.bootDelay = 30e9
			return c.provider(t, Config{GPUPricePerHour: 2})
		},
		Request:      provider.ResourceRequest{GPU: "H100-80GB", GPUCount: 2},
		Installation: installation,
		Settle:       func(t *testing.T) { c.clk.Advance(c.bootDelay) },
		Break: func(t *testing.T, id string) {
			c.setPod(t, id, func(p *corev1.Pod) {
				p.Status.Phase = corev1.PodFailed
				p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: containerName,
					State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 255, Reason: "Error"}}}}
			})
		},
	})
}
