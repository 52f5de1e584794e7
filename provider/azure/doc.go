// Package azure is the adapter for Azure GPU virtual machines, built on the
// official SDK (armcompute/v6, armnetwork/v7, azcore, azidentity). It
// registers itself under the id "azure":
//
//	import _ "github.com/org/gpuprov/provider/azure"
//
//	p, err := provider.Build("azure", provider.Settings{Installation: inst,
//		Config: azure.Config{SubscriptionID: "0b1f6471-...", Regions: []string{"eastus"}}})
//
// or, with Decode: provider.DecodeTOML(body), from the body of a config
// section such as
//
//	[azure]
//	subscription_id = "0b1f6471-1bf0-4dda-aec3-111122223333"   # required
//	regions         = ["eastus", "westus3"]    # default: every region of the catalog
//	zones           = ["1", "2"]               # default: regional placement
//	resource_group  = ""                       # default: gpuprov-<installation>-<region>, made by Prepare
//	image           = "microsoft-dsvm:ubuntu-hpc:2204:latest"
//	admin_user      = "azureuser"
//	spot            = true                     # offer Spot VMs to requests that accept spot
//	source_ranges   = ["203.0.113.0/24"]       # who may connect; default: anywhere
//
// The config holds no credential: calls authenticate with azidentity's
// DefaultAzureCredential (environment, workload identity, managed
// identity, Azure CLI), built at the first call. Tests build the provider
// with New and WithEndpoint, which points every client at a mock through an
// *http.Client and looks no credential up. Every error a primitive returns
// is masked of the tokens the adapter sent (and of the environment's
// client secret or passwords) after it was classified.
//
// Primitives and the ARM calls they make:
//
//	Plan      the embedded catalog (catalog.json: sizes, GPUs, pay-as-you-go and
//	          Spot prices per region); for a request that names a capacity
//	          reservation group, GET capacityReservationGroups (the
//	          subscription's), then the group's capacityReservations and the
//	          group with $expand=instanceView (reserve.go)
//	Quotas    GET locations/<region>/usages: regional, Spot and family vCPUs
//	Prepare   PUT resourcegroups/gpuprov-<installation>-<region> (default resource
//	          group; once per process), GET+PUT virtualNetworks/gpuprov-<region>
//	          (once; both made again when the group was deleted), PUT
//	          networkSecurityGroups/gpuprov-<vm>-nsg (SSH + open ports, from the sources),
//	          PUT publicIPAddresses/gpuprov-<vm>-ip (Standard, static),
//	          PUT networkInterfaces/gpuprov-<vm>-nic; each PUT's operation polled,
//	          bounded
//	Create    PATCH the NIC's tags when the prepared data is of the other pricing;
//	          PUT virtualMachines/gpuprov-<vm>-<attempt> (If-None-Match: *, tags,
//	          custom data, Spot settings) + its Azure-AsyncOperation polled until it
//	          ends or operation_timeout passes; 412 or PropertyChangeNotAllowed →
//	          GET and adopt if the tags are ours
//	Observe   GET virtualMachines (the region's resource group, all pages), filter
//	          on both identity tags; GET instanceView per VM; GET the NIC and the
//	          public IP of a running VM
//	List      the same in every configured region, filter on the installation tag
//	Delete    DELETE virtualMachines/<name> per id (not waited for); 404/204 is success
//	Cleanup   DELETE the NIC (waited for, bounded), then the public IP and the
//	          security group; gone is success, still in use is Transient
//	Diagnose  GET virtualMachines/<name>?$expand=instanceView; for a VM that is
//	          gone, GET its NIC (the gpuprov-spot tag attributes an eviction)
//	NoticeProbe  (provider.NoticeWatcher) no API call: a shell command the core
//	          runs on the machine, IMDS Scheduled Events, with the documented
//	          approval as the notice's Ack (notice.go)
//	Volumes   (provider.VolumeManager) Premium SSD managed disks gpuprov--<name>
//	          in a zone: GET+PUT disks (create), GET disks (observe), PATCH
//	          virtualMachines/<name> with storageProfile.dataDisks (attach at
//	          the lowest free LUN, /dev/disk/azure/scsi1/lun<N>; detach by
//	          toBeDetached), DELETE disks; each operation polled, bounded
//	          (volume.go)
//
// Every call is one attempt: the pipelines' retry policy is off
// (MaxRetries -1) and so is automatic resource provider registration; the
// core is the only retry layer. Operation waits sleep on the injected
// clock. errors.go maps every documented code to a provider.ErrorKind.
// The custom data holds the injected host key: it is sent to the API and
// never logged or journaled.
package azure
