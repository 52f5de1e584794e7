// Package runpod is the gpuprov adapter for RunPod pods, registered under
// the id "runpod", on RunPod's REST API v2 (REST v1 was retired on
// 2026-11-15):
//
//	import _ "github.com/org/gpuprov/provider/runpod"
//
// with a config section such as
//
//	[runpod]
//	api_key = "..."                  # or the RUNPOD_API_KEY environment variable
//	clouds  = ["SECURE"]             # default: SECURE and COMMUNITY
//
// Each primitive and the API calls it makes (base https://api.runpod.io/v2):
//
//	Plan      GET /catalog/gpus?include=AVAILABILITY&product=POD&count=N&cloud=C per cloud:
//	          one offer per (GPU type, cloud, data center with stock); Detail =
//	          {gpuTypeId, count, cloud, dataCenterId}
//	Prepare   nothing (no per-pod key or firewall on RunPod)
//	Create    GET /pods (adopt what carries the identity), then one POST /pods named
//	          gpuprov-<vm>, env GPUPROV_VM, GPUPROV_INSTALLATION and PUBLIC_KEY, ports 22/tcp
//	Observe   GET /pods, filtered by name and env; SSH from runtime.ports (22 → public port)
//	Delete    DELETE /pods/{id}; 404 is success
//	Cleanup   nothing
//	Diagnose  GET /pods/{id}
//	List      GET /pods, filtered by name prefix and env
//
// Persistent volumes (provider.VolumeManager, volume.go) are network
// volumes of one data center, attached by Create (VolumeLimits
// AttachAtCreate, one per pod, Secure Cloud only):
//
//	CreateVolume   GET /network-volumes (adopt gpuprov--<volume>-<installation mark> in the data center),
//	               GET /catalog/datacenters/{dc} (has network volumes?), POST /network-volumes
//	ObserveVolume  GET /network-volumes, GET /pods?includeClusterPods=true (who mounts it)
//	Create         + GET /network-volumes/{id}; POST /pods with mounts.network [{volumeId, path}]
//	DeleteVolume   GET /pods?includeClusterPods=true (refused while a pod mounts it),
//	               DELETE /network-volumes/{id}; 404 is success
//	Attach/Detach  nothing to do: a pod's volume is given at its create and released with it
//
// RunPod has no error code for a stockout: a create it cannot place answers
// HTTP 400 whose detail contains CapacityText. The account-wide SSH key set
// (PUT /account/ssh-keys) is shared and never touched: keys reach the pod in
// its PUBLIC_KEY variable, which RunPod's images install for root. The API
// key is a bearer token and is never logged.
package runpod
