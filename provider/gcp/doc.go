// Package gcp is the adapter for Google Compute Engine GPU VMs, built on the
// REST clients of cloud.google.com/go/compute/apiv1. It registers itself
// under the id "gcp":
//
//	import _ "github.com/org/gpuprov/provider/gcp"
//
//	p, err := provider.Build("gcp", provider.Settings{Installation: inst,
//		Config: gcp.Config{Project: "my-project", Regions: []string{"us-central1"}}})
//
// or, with Decode: provider.DecodeTOML(body), from the body of a config
// section such as
//
//	[gcp]
//	project          = "my-project"          # required
//	regions          = ["us-central1"]       # or zones = ["us-central1-a"]; default: the whole catalog
//	credentials_file = "/path/sa.json"       # default: Application Default Credentials
//	network          = "default"             # and subnetwork
//	spot             = true                  # offer Spot VMs to requests that accept spot
//	source_ranges    = ["203.0.113.0/24"]    # who may connect; default anywhere
//	image            = "projects/deeplearning-platform-release/global/images/family/common-cu128-ubuntu-2204-nvidia-570"
//	refine           = true                  # ask the API which zones offer each GPU
//
// Tests build it with New and WithEndpoint, which points every client at a
// mock through an *http.Client, without authentication unless
// WithCredentials gives some. Every error a primitive returns is masked of
// the adapter's credentials (the access tokens it sent, the credentials
// file's private key) after it was classified.
//
// Primitives and the API calls they make:
//
//	Plan      the embedded catalog (catalog.json: machine types, GPUs, prices per
//	          region, zones); with refine, acceleratorTypes.aggregatedList, falling
//	          back to the catalog's zones when it fails; unless the request
//	          forbids reserved capacity, reservations.aggregatedList for an offer
//	          per READY reservation of a catalog shape
//	Quotas    regions.get and projects.get: the GPU, vCPU and GPUS_ALL_REGIONS
//	          quotas that bound the offers
//	Prepare   firewalls.insert gpuprov-<vm> (INGRESS tcp:22 + open ports from the
//	          sources, target tag gpuprov-<vm>) and, with restricted sources,
//	          the installation's shared rule for the open ports (sourceTags =
//	          targetTags = its name); alreadyExists → firewalls.get, and
//	          firewalls.update when it admits other sources or ports;
//	          globalOperations.get; images.getFromFamily
//	Create    instances.insert (requestId, labels, tag, metadata user-data and
//	          ssh-keys, scheduling, guestAccelerators for N1, resourcePolicies for a
//	          compact cluster's node, reservationAffinity for a reservation offer
//	          or a request that forbids reserved capacity) + zoneOperations.get
//	          until DONE, bounded; the operation's error codes decide the kind;
//	          alreadyExists → instances.get and adopt if the labels are ours
//	Observe   instances.list in the zone, filter on both identity labels
//	          (aggregatedList narrowed to the region when the location has no zone)
//	List      instances.aggregatedList, filter on the installation label
//	Delete    instances.get (is it still that id?) + instances.delete, one per id;
//	          404 is success; not waited for
//	Cleanup   firewalls.delete gpuprov-<vm> + globalOperations.get; 404 is success
//	EnsurePlacementGroup  resourcePolicies.insert gpuprov-<cluster> in the region
//	          (groupPlacementPolicy.collocation COLLOCATED, the identity in the
//	          description: resource policies take no labels) + regionOperations.get;
//	          alreadyExists → resourcePolicies.get, adopt if ours
//	DeletePlacementGroup  resourcePolicies.get (ours?) + resourcePolicies.delete +
//	          regionOperations.get; 404 is success, resourceInUseByAnotherResource
//	          matches provider.ErrInUse
//	Diagnose  instances.get + zoneOperations.list filtered on targetId
//	          (preempted, hostError, guestTerminate, terminateOnHostMaintenance,
//	          automaticRestart, migrateOnHostMaintenance), statusMessage,
//	          lastStopTimestamp
//	NoticeProbe  (provider.NoticeWatcher) no API call: a shell command the core
//	          runs on the machine, the metadata server's instance/preempted (long
//	          polled) and instance/maintenance-event (notice.go)
//
// Every call is one attempt: the clients' own retryers are turned off with
// a gax call option on every call, the core is the only retry layer. The
// insert's one bounded wait reads the error codes from the operation itself
// after Wait, because Wait reports a failed operation only as an HTTP
// status. errors.go maps every documented reason and operation code to a
// provider.ErrorKind. User-data holds the injected host key: it is sent to
// the API and never logged or journaled.
package gcp
