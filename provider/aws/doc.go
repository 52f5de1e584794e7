// Package aws is the gpuprov adapter for Amazon EC2, built on
// aws-sdk-go-v2 (service/ec2, and service/ssm for the image lookup). It
// registers itself under the id "aws":
//
//	import _ "github.com/org/gpuprov/provider/aws"
//
// and reads an [aws] config section such as
//
//	profile  = "gpu"                        # shared-config profile; default: the SDK's default chain
//	regions  = ["us-east-1", "us-west-2"]   # default: every region of the catalog
//	spot     = true                         # also offer spot capacity to requests that accept it
//	refine   = true                         # ask EC2 for zones (and spot prices) at Plan time
//	image    = "ami-0123456789abcdef0"      # default: the Deep Learning Base OSS Nvidia Driver AMI via SSM
//	source_ranges = ["203.0.113.0/24"]      # who may connect; default anywhere (0.0.0.0/0)
//
// Credentials come from the SDK's default chain (environment, shared files,
// SSO, instance role), starting at the profile. Tests use New with
// WithEndpoint, which takes a base URL, static keys and an *http.Client, so
// they never read the environment or a file.
//
// # Primitives and the calls they make
//
//	Plan       the embedded catalog (catalog.json, from AWS's Price List), and, unless the
//	           request forbids reserved capacity, DescribeCapacityReservations per region
//	           (state active, Linux/UNIX, default tenancy, the request's types) or, for a named
//	           reservation, by id: one offer per usable reservation (reservations.go). With
//	           refine: DescribeInstanceTypeOfferings (LocationType availability-zone-id) and,
//	           for spot, DescribeSpotPriceHistory (Linux/UNIX, StartTime now). A failing call
//	           falls back to the catalog, or plans without reservations.
//	Prepare    DescribeVpcs (is-default) + DescribeSubnets (vpc-id, availability-zone-id,
//	           default-for-az), or DescribeSubnets of the configured subnet;
//	           the shared security group (below): nothing when it is remembered, else
//	           CreateSecurityGroup gpuprov-fw-<hash> (InvalidGroup.Duplicate → DescribeSecurityGroups,
//	           adopt if it is this installation's shared group) + AuthorizeSecurityGroupIngress per
//	           port with the sources it does not admit yet (tcp/22 and OpenPorts from the sources,
//	           OpenPorts from the group itself too when the sources are restricted;
//	           InvalidPermission.Duplicate is success);
//	           ImportKeyPair gpuprov-<vm> (InvalidKeyPair.Duplicate is success);
//	           ssm:GetParameter of the image parameter unless an image is given.
//	Create     RunInstances: one instance, ClientToken, NetworkInterfaces[0] with the subnet,
//	           group and a public IP, KeyName, tags on instance and volume, base64 cloud-init
//	           user-data, InstanceInitiatedShutdownBehavior terminate, IMDSv2, spot market
//	           options for a spot offer, Placement.GroupName for a compact cluster's node,
//	           CapacityReservationSpecification targeting the reservation of a reservation
//	           offer (with the capacity-block market for a Capacity Block), or preference none
//	           for a request that forbids reserved capacity.
//	           InvalidGroup.NotFound (the shared group went since Prepare) is Transient and
//	           matches provider.ErrSharedGone.
//	Observe    DescribeInstances filtered on tag:gpuprov, tag:gpuprov-installation, the live
//	           states and the zone; plus DescribeInstances by id for an id Create returned
//	           within the consistency window (InvalidInstanceID.NotFound: not visible yet).
//	List       DescribeInstances filtered on tag:gpuprov-installation and tag-key gpuprov,
//	           per region.
//	ListNamed  the same with tag:gpuprov filtered on the VMs named (at most 200 values per
//	           filter: more are split over several requests), per region.
//	Delete     TerminateInstances; InvalidInstanceID.NotFound is success.
//	Cleanup    DescribeKeyPairs + DeleteKeyPair, found by name and installation tag; and a
//	           per-VM group gpuprov-<vm> made before groups were shared, found by name,
//	           installation tag and the VM's tag gpuprov=<vm> (which no shared group carries):
//	           DescribeSecurityGroups + DeleteSecurityGroup (DependencyViolation is Transient;
//	           InvalidGroup.NotFound is success). Never the shared group.
//	CleanupShared  DescribeSecurityGroups (tag:gpuprov-installation, tag:gpuprov-shared) +
//	           DeleteSecurityGroup of each, in the region or every region; DependencyViolation
//	           leaves the group and matches provider.ErrInUse; InvalidGroup.NotFound is success.
//	EnsurePlacementGroup  CreatePlacementGroup (strategy cluster, tagged); InvalidPlacementGroup.
//	           Duplicate → DescribePlacementGroups, adopt a cluster group of this installation.
//	DeletePlacementGroup  DescribePlacementGroups + DeletePlacementGroup of this installation's
//	           group; gone is success, InvalidPlacementGroup.InUse matches provider.ErrInUse.
//	BlockOfferings  DescribeCapacityBlockOfferings per region and Capacity Block type of the
//	           GPU (duration in hours, count, from now); PurchaseBlock PurchaseCapacityBlock
//	           (Linux/UNIX, the VM's tags and gpuprov-attempt on the capacity reservation);
//	           FindBlock DescribeCapacityReservations by those tags (blocks.go).
//	Diagnose   DescribeInstances by id (terminated instances included, with StateReason) and
//	           DescribeInstanceStatus (IncludeAllInstances: status checks, scheduled events).
//	NoticeProbe  (provider.NoticeWatcher, spot instances) no API call: a shell
//	           command the core runs on the machine, IMDSv2 spot/instance-action and
//	           events/recommendations/rebalance (notice.go)
//	Quotas     (provider.QuotaReader) Service Quotas GetServiceQuota, service code ec2, for
//	           the P and G/VT on-demand and Spot vCPU quotas of the region (quotas.go).
//
// Every client makes exactly one attempt per call (RetryMaxAttempts 1): the
// core is the only retry layer, and InsufficientInstanceCapacity, which
// EC2 answers with HTTP 500, must reach it as Capacity instead of being
// retried. errors.go maps each error code to a provider.ErrorKind, by code
// before status.
//
// # The shared security group
//
// The VMs of an installation that open the same ports in one VPC share one
// security group (provider.SharedCleaner) instead of one each, which at a
// thousand VMs would cost as many EC2 calls as the instances. It is named
// provider.SharedName(installation, ports, sources), gpuprov-fw-<12 hex
// digits>, for the port set tcp/22 and OpenPorts (in any order) and the
// sources (the request's ranges, else source_ranges, else 0.0.0.0/0), and
// tagged Name,
// gpuprov-installation and gpuprov-shared=true: no VM's identity and no
// caller's labels. The provider remembers each group it made or adopted (by
// region, VPC and name), so only the first Prepare of a group sends
// security-group requests, and concurrent first Prepares make one group. A
// group found made already (by another process, or by one that died before
// opening its ports) is adopted and its missing rules opened. Each port
// admits the sources; when they are restricted, every port but SSH also
// admits the group's own members (a rule whose source is the group), so a
// cluster's nodes in the VPC reach each other. Cleanup never
// touches it; CleanupShared deletes it once no instance uses it (EC2 refuses
// while one does, shutting-down included). Per-VM groups gpuprov-<vm> made
// before groups were shared are still removed by their VM's Cleanup.
//
// Zones are availability-zone ids (use1-az4), which name the same physical
// zone in every account; zone names (us-east-1a) are shuffled per account.
//
// The default API rate is 5 requests per second with a burst of 10 for
// the whole account: EC2 meters each action per account and region with a
// token bucket (EC2 Developer Guide, "Request throttling for the Amazon
// EC2 API"), and the bucket of mutating actions, the smallest that a
// launch spends from, refills at 5 per second.
package aws
