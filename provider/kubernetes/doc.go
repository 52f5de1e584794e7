// Package kubernetes is the adapter for a "cloud" that is an existing
// Kubernetes cluster: an instance is a pod that requests nvidia.com/gpu and
// runs an SSH server with the host key gpuprov injected, reached through a
// Service. It is built on k8s.io/client-go and registers itself under the id
// "kubernetes":
//
//	import _ "github.com/org/gpuprov/provider/kubernetes"
//
//	p, err := provider.Build("kubernetes", provider.Settings{Installation: inst,
//		Config: kubernetes.Config{Context: "gpu-cluster", Namespace: "gpuprov", GPUPricePerHour: 1.2}})
//
// or, with Decode: provider.DecodeTOML(body), from the body of a config
// section such as
//
//	[kubernetes]
//	kubeconfig         = "~/.kube/config"   # default: $KUBECONFIG, ~/.kube/config, in a pod its service account
//	context            = "gpu-cluster"      # default: the current context
//	namespace          = "gpuprov"          # default: the context's namespace
//	service_type       = "NodePort"         # or LoadBalancer, ClusterIP
//	source_ranges      = ["203.0.113.0/24"] # LoadBalancer only: who may connect; default everyone
//	gpu_price_per_hour = 1.2                # internal price: a cluster has no price list
//	unschedulable_window = "2m"             # Insufficient nvidia.com/gpu this long → Capacity
//	storage_class      = "fast-ssd"         # persistent volumes' claims; default the cluster's default class
//
// Tests build it with New and WithClientset (client-go's fake clientset), so
// that no kubeconfig is read. One provider is one cluster: its Region is the
// cluster's name (Config.Regions, default the context's name), its zones the
// nodes' topology.kubernetes.io/zone.
//
// Primitives and the API calls they make:
//
//	Plan      nodes.list (cluster-wide) + pods.list (all namespaces, not
//	          terminated; the namespace's only without that right): per zone and
//	          GPU product (nvidia.com/gpu.product, else
//	          cloud.google.com/gke-accelerator), the allocatable nvidia.com/gpu
//	          of schedulable nodes minus what their pods request, and the pod's
//	          shape: the node's CPU and memory in proportion to its GPUs
//	Prepare   secrets.create gpuprov-<vm> (authorized_keys, the host key) and
//	          services.create gpuprov-<vm> (selector: both identity labels, port
//	          22; a LoadBalancer's loadBalancerSourceRanges when restricted);
//	          alreadyExists → get, adopt if ours (secrets.update)
//	Create    secrets.get+update (the attempt's host key) + pods.create
//	          gpuprov-<vm>-<attempt>; alreadyExists → pods.get, adopt if ours;
//	          then pods.get until the scheduler decides, bounded by
//	          unschedulable_window: "Insufficient nvidia.com/gpu" for the
//	          whole window is Capacity
//	Observe   pods.list (label selector gpuprov=<vm>,gpuprov-installation=<id>)
//	          + services.list (installation) + nodes.get per node a pod is on
//	          (its health; a NodePort's addresses); a pod's DisruptionTarget
//	          condition is its Observed.Notice (notice.go)
//	List      the same with selector gpuprov-installation=<id>,gpuprov
//	Delete    per id: pods.get (ours?) + pods.delete with a UID precondition;
//	          404 is success; not waited for. A pod terminating past its grace
//	          period on a node that is down: nodes.get + pods.delete with
//	          gracePeriodSeconds 0
//	Cleanup   services.get+delete and secrets.get+delete gpuprov-<vm> if ours;
//	          404 is success
//	Diagnose  pods.get + the Observe calls: conditions and container states
//	Quotas    resourcequotas.list in the namespace (provider.QuotaReader):
//	          requests.nvidia.com/gpu, pods, cpu and the per-VM Service and
//	          Secret counts of status.hard with status.used
//
// Persistent volumes (provider.VolumeManager, volume.go) are
// PersistentVolumeClaims gpuprov--<volume>, attached by Create:
//
//	CreateVolume   persistentvolumeclaims.create (ReadWriteOnce, <size>Gi,
//	               storage_class); alreadyExists → get, adopt if ours
//	ObserveVolume  persistentvolumeclaims.get
//	Create         persistentvolumeclaims.get per volume, then the pod names
//	               each claim in spec.volumes, mounted at its MountPath
//	DeleteVolume   persistentvolumeclaims.get + pods.list (a pod naming the
//	               claim: ErrInUse) + persistentvolumeclaims.delete with a
//	               UID precondition; 404 is success
//	DetachVolume   pods.get: success unless the pod names the claim
//	AttachVolume   refused (InvalidRequest): volumes attach at create
//
// Every call is one attempt: client-go's own resending on a Retry-After
// answer is defeated (noRetryAfter in kubeconfig.go), so the core is the
// only retry layer, and errors.go maps every StatusReason (and every 403's
// authorizer or admission plugin) to a provider.ErrorKind. The Secret holds
// the injected host key's private half: it is sent to the API server and
// never logged or journaled (Prepare's journaled result names objects only).
package kubernetes
