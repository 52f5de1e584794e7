package k3s

import (
	"context"
	"fmt"
	"strings"
)

// DefaultDevicePluginVersion is the NVIDIA device plugin release deployed
// on GPU clusters: v0.17.1, the release NVIDIA documents for its static
// manifest (deployments/static/nvidia-device-plugin.yml) and in use with
// k3s (NVIDIA/gpu-operator issue 1453).
const DefaultDevicePluginVersion = "v0.17.1"

// Node labels.
const (
	// LabelGPUPresent is set to "true" on every node where nvidia-smi lists
	// a GPU; the device plugin runs only there.
	LabelGPUPresent = "nvidia.com/gpu.present"
	// ResourceGPU is the extended resource the device plugin advertises.
	ResourceGPU = "nvidia.com/gpu"
)

// DevicePluginManifest returns the manifest the server drops into
// /var/lib/rancher/k3s/server/manifests (k3s applies every file there): a
// RuntimeClass "nvidia" (handler nvidia, which k3s configures in containerd
// when it finds the NVIDIA container runtime at start) and the NVIDIA
// device plugin DaemonSet of that version, with runtimeClassName: nvidia
// (k3s keeps runc as the default runtime, so the plugin would see no GPU
// without it) and a nodeSelector on nvidia.com/gpu.present=true. version is
// a release tag such as DefaultDevicePluginVersion; it is not validated.
func DevicePluginManifest(version string) []byte {
	return []byte(strings.ReplaceAll(devicePluginTemplate, "@VERSION@", version))
}

const devicePluginTemplate = `# Deployed by gpuprov: the NVIDIA device plugin for the GPU nodes of this
# k3s cluster (nodes labelled nvidia.com/gpu.present=true).
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata:
  name: nvidia
handler: nvidia
---
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: nvidia-device-plugin-daemonset
  namespace: kube-system
  labels:
    app.kubernetes.io/managed-by: gpuprov
spec:
  selector:
    matchLabels:
      name: nvidia-device-plugin-ds
  updateStrategy:
    type: RollingUpdate
  template:
    metadata:
      labels:
        name: nvidia-device-plugin-ds
    spec:
      runtimeClassName: nvidia
      nodeSelector:
        nvidia.com/gpu.present: "true"
      tolerations:
        - key: nvidia.com/gpu
          operator: Exists
          effect: NoSchedule
      priorityClassName: system-node-critical
      containers:
        - name: nvidia-device-plugin-ctr
          image: nvcr.io/nvidia/k8s-device-plugin:@VERSION@
          env:
            - name: FAIL_ON_INIT_ERROR
              value: "false"
          securityContext:
            allowPrivilegeEscalation: false
            capabilities:
              drop: ["ALL"]
          volumeMounts:
            - name: device-plugin
              mountPath: /var/lib/kubelet/device-plugins
      volumes:
        - name: device-plugin
          hostPath:
            path: /var/lib/kubelet/device-plugins
`

// gpuInfo is what the GPU probe found on a node.
type gpuInfo struct {
	count   int  // GPUs listed by nvidia-smi -L
	toolkit bool // nvidia-container-runtime or nvidia-ctk on PATH
}

// probeGPUs runs the GPU probe: nvidia-smi -L where nvidia-smi exists (a
// failing nvidia-smi, e.g. a driver that is not loaded, is an error), and
// whether the NVIDIA container toolkit is on PATH.
func (r *remote) probeGPUs(ctx context.Context) (gpuInfo, error) {
	out, err := r.run(ctx, "probe NVIDIA GPUs", cmdGPUProbe)
	if err != nil {
		return gpuInfo{}, err
	}
	var g gpuInfo
	for line := range strings.Lines(string(out)) {
		switch {
		case strings.HasPrefix(line, "GPU "):
			g.count++
		case strings.TrimSpace(line) == "toolkit=yes":
			g.toolkit = true
		}
	}
	if g.count > 0 && !g.toolkit {
		return g, fmt.Errorf("%w (node %s has %d GPUs)", ErrNoToolkit, r.name, g.count)
	}
	return g, nil
}
