// Package primeintellect is the gpuprov adapter for the Prime Intellect GPU
// marketplace, registered under the id "primeintellect":
//
//	import _ "github.com/org/gpuprov/provider/primeintellect"
//
// with a config section such as
//
//	[primeintellect]
//	api_key  = "..."                 # or the PRIME_API_KEY environment variable
//	security = "secure_cloud"        # default: secure and community offers
//
// Each primitive and the API calls it makes (base https://api.primeintellect.ai/api/v1):
//
//	Plan      GET /availability/gpus?gpu_count=N, every page: one offer per item whose
//	          stockStatus is not Unavailable; Detail = {cloudId, gpuType, socket, gpuCount,
//	          provider, dataCenterId, country, security, image}
//	Prepare   GET /ssh_keys/ (paged), POST /ssh_keys/ (the VM's key, gpuprov-<vm>-<inst>)
//	Create    GET /pods/ (paged; adopt the pod named for the VM), then one POST /pods/
//	          named gpuprov-<vm>-<inst> with the offer's ids and sshKeyId
//	Observe   GET /pods/ (paged), filtered by name; installationStatus and sshConnection
//	          come with each pod
//	Delete    DELETE /pods/{id}; 404 is success
//	Cleanup   DELETE /ssh_keys/{id} of the VM; 404 is success
//	Diagnose  GET /pods/{id} (installationFailure, status); GET /pods/history when gone
//	List      GET /pods/ (paged), names gpuprov-*-<inst>
//
// Pods have no labels and the API does not return their environment, so the
// installation is a five-character tag at the end of the name. Prime takes
// no user-data: the core pins the host key on first contact. A 402 (empty
// wallet) blocks the whole provider. The API key is a bearer token and is
// never logged.
package primeintellect
