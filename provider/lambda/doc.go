// Package lambda is the gpuprov adapter for Lambda Cloud (Lambda's
// on-demand GPU instances), registered under the id "lambda":
//
//	import _ "github.com/org/gpuprov/provider/lambda"
//
// with a config section such as
//
//	[lambda]
//	api_key = "..."                  # or the LAMBDA_API_KEY environment variable
//	regions = ["us-east-1"]          # default: every region
//
// Each primitive and the API calls it makes (base https://cloud.lambda.ai/api/v1):
//
//	Plan      GET /instance-types: price, specs and regions_with_capacity_available;
//	          one offer per (type, region with capacity), Detail = {instance_type, region}
//	Prepare   GET /ssh-keys, POST /ssh-keys (the VM's key, gpuprov-<vm>-<inst>);
//	          GET /firewall-rulesets, POST /firewall-rulesets (the VM's ruleset in the region)
//	Create    GET /instances (adopt what carries the identity), then one
//	          POST /instance-operations/launch: name gpuprov-<vm>, tags gpuprov=<vm> and
//	          gpuprov-installation=<inst>, cloud-init user_data with the host key, the key, the ruleset
//	Observe   GET /instances, filtered by name, both tags and region
//	Delete    POST /instance-operations/terminate, one id per call; 404 is success
//	Cleanup   DELETE /firewall-rulesets/{id}, DELETE /ssh-keys/{id} of the VM; 404 is success
//	Diagnose  GET /instances/{id}; GET /audit-events for an instance that is gone
//	List      GET /instances, filtered by name prefix and installation tag
//
// Lambda has no idempotency key: Create observes by identity first and
// adopts, and an ambiguous failure is Transient for the core to resolve by
// observing. The account-wide firewall rules (PUT /firewall-rules) and the
// global ruleset are never touched. Launches are paced at one per 12
// seconds inside Create (a create that comes too early sends nothing and
// is Transient with RetryAfter); every call is paced by the core at
// Lambda's 1 request/s. errors.go maps every documented error code to a
// provider.ErrorKind. The API key is a bearer token and is never logged.
package lambda
