// Package vastai is the gpuprov adapter for the Vast.ai GPU marketplace,
// registered under the id "vastai":
//
//	import _ "github.com/org/gpuprov/provider/vastai"
//
// with a config section such as
//
//	[vastai]
//	api_key         = "..."          # or the VAST_API_KEY environment variable
//	regions         = ["US", "CA"]   # countries; default: all
//	min_reliability = 0.98           # default 0.95
//
// Each primitive and the API calls it makes (base https://console.vast.ai):
//
//	Plan      POST /api/v0/bundles/: rentable on-demand asks, gpu_name in Vast's names for the
//	          GPU, num_gpus, reliability, verified, geolocation, dph_total, disk_space; one
//	          offer per ask, region = country, zone = machine-<id>; Detail = {ask_id,
//	          machine_id, host_id, gpu_name, num_gpus, geolocation, reliability, verification}
//	Prepare   nothing (checks the keys, the onstart script's and the label's length, and
//	          refuses source ranges, which Vast cannot apply)
//	Create    GET /api/v1/instances/ by label (adopt), then one PUT /api/v0/asks/{ask_id}/
//	          with image, disk, label gpuprov-<vm>.<installation>, onstart, runtype ssh
//	Observe   GET /api/v1/instances/ (every page), select_filters on the label
//	Delete    DELETE /api/v0/instances/{id}/; 404 is success
//	Cleanup   nothing
//	Diagnose  GET /api/v1/instances/, select_filters on the id
//	List      GET /api/v1/instances/ (every page), labels gpuprov-*.<installation>
//	ListNamed GET /api/v1/instances/ (every page), select_filters label in [labels]
//
// Every listing follows next_token until it is null, asks only for the
// columns the adapter reads (select_cols: never onstart, which may hold the
// private host key), and fails with ErrListCap rather than return part of
// the account.
//
// Vast has no idempotency key: the label is the identity and Create looks
// for it before accepting. An ask another renter took between Plan and
// Create answers no_such_ask (404 or 410): Capacity, blocking that
// machine's offer. The onstart script, Vast's stand-in for cloud-init,
// appends the authorized keys for root and, with inject_host_key, writes
// the host key gpuprov generated; otherwise the core pins the host key on
// first contact. The API key is a bearer token and is never logged.
package vastai
