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
//	Prepare   GET /ssh-keys, POST /ssh-keys (the VM's key, gpuprov-<vm>-<inst>); the
//	          installation's shared ruleset for the region, ports and sources: nothing when
//	          this provider made or adopted it before, else GET /firewall-rulesets, POST
//	          /firewall-rulesets when it is not there (provider.SharedName), one rule per
//	          port and source
//	Create    GET /instances (adopt what carries the identity), then one
//	          POST /instance-operations/launch: name gpuprov-<vm>, tags gpuprov=<vm> and
//	          gpuprov-installation=<inst>, cloud-init user_data with the host key, the key, the
//	          ruleset; a launch refused 404 global/object-does-not-exist, then GET
//	          /firewall-rulesets not showing the ruleset, matches provider.ErrSharedGone
//	Observe   GET /instances, filtered by name, both tags and region
//	Delete    POST /instance-operations/terminate, one id per call; 404 is success
//	Cleanup   GET /ssh-keys, DELETE /ssh-keys/{id} of the VM; GET /firewall-rulesets and
//	          DELETE /firewall-rulesets/{id} of a per-VM ruleset an older Prepare made;
//	          gone is success; the shared ruleset is never touched
//	CleanupShared  GET /firewall-rulesets, DELETE /firewall-rulesets/{id} of each of the
//	          installation's shared rulesets in the region (every configured region for a
//	          zero Location); 400 firewall-rulesets/firewall-ruleset-in-use leaves it and
//	          matches provider.ErrInUse; 404 is success
//	Diagnose  GET /instances/{id}; GET /audit-events for an instance that is gone
//	List      GET /instances, filtered by name prefix and installation tag
//
// The firewall is shared (provider.SharedCleaner): every VM of the
// installation in a region that opens the same ports to the same sources
// is launched with one ruleset, named provider.SharedName(installation,
// ports, sources), so that the firewall costs calls once per region, port
// set and source set, not once per VM. The sources are the request's
// ranges, else Config.SourceRanges, else anywhere (provider.SourcesFor);
// Lambda's rules take IPv4 sources only and cannot name the instances
// behind a ruleset, so a restricted cluster's nodes must be inside its
// ranges. Rulesets take no tags: the installation is in the name, and
// CleanupShared deletes a ruleset only when its name is the SharedName of
// this installation and of the ports and sources its rules name. Lambda
// refuses to delete a ruleset an instance uses, which is what makes
// CleanupShared safe while other processes of the installation launch
// with it.
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
