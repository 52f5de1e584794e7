package azure

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"

	"github.com/org/gpuprov/provider"
)

// References for the table. Each row names the one that documents (or,
// for the in-use codes, shows Azure answering) its code and message.
const (
	refDeploy   = "https://learn.microsoft.com/en-us/azure/azure-resource-manager/troubleshooting/common-deployment-errors"
	refSKU      = "https://learn.microsoft.com/en-us/azure/azure-resource-manager/troubleshooting/error-sku-not-available"
	refAlloc    = "https://learn.microsoft.com/en-us/troubleshoot/azure/virtual-machines/windows/allocation-failure"
	refKarpAC   = "https://github.com/Azure/karpenter-provider-azure/blob/main/pkg/providers/instance/offerings/resperrorhandlers.go" // Microsoft's handlers of the four allocation codes
	refQuota    = "https://learn.microsoft.com/en-us/azure/azure-resource-manager/troubleshooting/error-resource-quota"
	refFamily   = "https://github.com/Azure/karpenter-provider-azure/issues/192" // 409 OperationNotAllowed "... standardDASv5Family Cores quota"
	refRegional = "https://github.com/nforgeio/neonKUBE/issues/1671"             // 409 OperationNotAllowed "... Total Regional Cores quota"
	refOldQuota = "https://github.com/hashicorp/terraform/issues/10056"          // 409 OperationNotAllowed "Operation results in exceeding quota limits of Core"
	refThrottle = "https://learn.microsoft.com/en-us/azure/azure-resource-manager/management/request-limits-and-throttling"
	refRP       = "https://learn.microsoft.com/en-us/azure/azure-resource-manager/troubleshooting/error-register-resource-provider"
	refToken    = "https://github.com/Azure/azure-sdk-for-java/issues/1714"              // 401 InvalidAuthenticationToken
	refExpired  = "https://github.com/hashicorp/terraform-provider-azurerm/issues/20867" // ExpiredAuthenticationToken
	refNicInUse = "https://github.com/hashicorp/terraform-provider-azurerm/issues/8105"  // 400 NicInUse
	refNicRes   = "https://github.com/cloudfoundry/bosh-azure-cpi-release/issues/366"    // 400 NicReservedForAnotherVm, 180 seconds
	refIPInUse  = "https://github.com/hashicorp/terraform-provider-azurerm/issues/688"   // 400 PublicIPAddressCannotBeDeleted
	refNSGInUse = "https://github.com/Azure/RDS-Templates/issues/695"                    // InUseNetworkSecurityGroupCannotBeDeleted
	refMarked   = "https://github.com/sassoftware/viya4-iac-azure/issues/140"            // 409 OperationNotAllowed "VM is marked for deletion"
	refLRO      = "https://github.com/Azure/azure-resource-manager-rpc/blob/master/v1.0/async-api-reference.md"
	// Troubleshooting API throttling errors (Microsoft Learn; MicrosoftDocs/SupportArticles-docs
	// support/azure/virtual-machines/windows/troubleshooting-throttling-errors.md): HTTP 429,
	// Retry-After, top-level code OperationNotAllowed, detail TooManyRequests.
	refComputeThrottle = "https://learn.microsoft.com/en-us/troubleshoot/azure/virtual-machines/troubleshooting-throttling-errors"
	// Karpenter's handlers: a zonal allocation failure marks the size in that zone
	// (handleZonalAllocationFailureError), SkuNotAvailable on demand is cached 23 h.
	refKarpCommon = "https://github.com/Azure/karpenter-provider-azure/blob/main/pkg/providers/instance/offerings/commonerrorhandlers.go"
	refLowPrio    = "https://github.com/scylladb/scylla-cluster-tests/issues/4994"          // 409 OperationNotAllowed "... approved LowPriorityCores quota"
	refT4Family   = "https://github.com/skypilot-org/skypilot/issues/464"                   // QuotaExceeded "... approved Standard NCASv3_T4 Family Cores quota"
	refPublicIP   = "https://github.com/openshift/openshift-azure/issues/2252"              // 400 PublicIPCountLimitReached "Cannot create more than 20 public IP addresses ..."
	refStaticIP   = "https://github.com/coreos/tectonic-installer/issues/1454"              // 400 StaticPublicIPCountLimitReached
	refVMSize     = "https://github.com/PaloAltoNetworks/azure-applicationgateway/issues/1" // 400 InvalidParameter target vmSize
	refPolicy     = "https://learn.microsoft.com/en-us/azure/azure-resource-manager/troubleshooting/error-policy-requestdisallowedbypolicy"
	refPolicyLoc  = "https://github.com/rancher/rancher/issues/29086"                // 403 RequestDisallowedByPolicy "Allowed locations", evaluatedExpressions on location
	refPolicyMsg  = "https://github.com/microsoft/vscode-azurefunctions/issues/1244" // the same, the policy named in the message only
)

// throttled429 is Compute's throttling answer as "Troubleshooting API
// throttling errors" shows it: the body not wrapped in "error".
const throttled429 = `{
  "code": "OperationNotAllowed",
  "message": "The server rejected the request because too many requests have been received for this subscription.",
  "details": [
    {
      "code": "TooManyRequests",
      "target": "HighCostGet",
      "message": "{\"operationGroup\":\"HighCostGet\",\"startTime\":\"2018-06-29T19:54:21.0914017+00:00\",\"endTime\":\"2018-06-29T20:14:21.0914017+00:00\",\"allowedRequestCount\":300,\"measuredRequestCount\":1238}"
    }
  ]
}`

// policyLocation is a RequestDisallowedByPolicy of the built-in "Allowed
// locations", in the shape rancher/rancher#29086 shows (error.target,
// the policy identifiers in the message, additionalInfo of type
// PolicyViolation with the evaluated expressions).
const policyLocation = `{"error":{"code":"RequestDisallowedByPolicy","target":"gpuprov-x-nsg",` +
	`"message":"Resource 'gpuprov-x-nsg' was disallowed by policy. Policy identifiers: '[{\"policyAssignment\":{\"name\":\"Allowed locations\",\"id\":\"/providers/Microsoft.Management/managementGroups/it/providers/Microsoft.Authorization/policyAssignments/720622985a284363acd7f435\"},\"policyDefinition\":{\"name\":\"Allowed locations\",\"id\":\"/providers/Microsoft.Authorization/policyDefinitions/e56962a6-4747-49cd-b67b-bf8b01975c4c\"}}]'.",` +
	`"additionalInfo":[{"type":"PolicyViolation","info":{"evaluationDetails":{"evaluatedExpressions":[` +
	`{"expression":"location","expressionKind":"Field","expressionValue":"eastus","operator":"NotIn","path":"location","result":"True","targetValue":["northcentralus","centralus"]},` +
	`{"expression":"location","expressionKind":"Field","expressionValue":"eastus","operator":"NotEquals","path":"location","result":"True","targetValue":"global"}]},` +
	`"policyDefinitionId":"/providers/Microsoft.Authorization/policyDefinitions/e56962a6-4747-49cd-b67b-bf8b01975c4c","policyDefinitionDisplayName":"Allowed locations","policyDefinitionEffect":"deny"}}]}}`

// policySize is a RequestDisallowedByPolicy of a policy on the VM size
// (the built-in "Allowed virtual machine size SKUs",
// cccc23c7-8427-4f53-ad12-b6a63eb452b3), in the same shape: it evaluated
// the size, not the location.
const policySize = `{"error":{"code":"RequestDisallowedByPolicy","target":"gpuprov-x-1",` +
	`"message":"Resource 'gpuprov-x-1' was disallowed by policy. Policy identifiers: '[{\"policyAssignment\":{\"name\":\"Allowed VM SKUs\",\"id\":\"/subscriptions/s/providers/Microsoft.Authorization/policyAssignments/0aedc612157c4e8cbaf9605e\"},\"policyDefinition\":{\"name\":\"Allowed virtual machine size SKUs\",\"id\":\"/providers/Microsoft.Authorization/policyDefinitions/cccc23c7-8427-4f53-ad12-b6a63eb452b3\"}}]'.",` +
	`"additionalInfo":[{"type":"PolicyViolation","info":{"evaluationDetails":{"evaluatedExpressions":[` +
	`{"result":"True","expressionKind":"Field","expression":"type","path":"type","expressionValue":"Microsoft.Compute/virtualMachines","targetValue":"Microsoft.Compute/virtualMachines","operator":"Equals"},` +
	`{"result":"False","expressionKind":"Field","expression":"Microsoft.Compute/virtualMachines/sku.name","path":"properties.hardwareProfile.vmSize","expressionValue":"Standard_NC24ads_A100_v4","targetValue":["Standard_B2s","Standard_D2s_v3"],"operator":"In"}]},` +
	`"policyDefinitionId":"/providers/Microsoft.Authorization/policyDefinitions/cccc23c7-8427-4f53-ad12-b6a63eb452b3","policyDefinitionEffect":"deny"}}]}}`

// armBody is an ARM error answer of status whose body is body verbatim.
func armBody(status int, body string, header http.Header) error {
	if header == nil {
		header = http.Header{}
	}
	u, _ := url.Parse("https://management.azure.com/subscriptions/s/resourceGroups/g/providers/Microsoft.Compute/virtualMachines/v")
	resp := &http.Response{StatusCode: status, Status: http.StatusText(status), Header: header,
		Body: io.NopCloser(strings.NewReader(body)), Request: &http.Request{Method: http.MethodPut, URL: u}}
	return runtime.NewResponseError(resp)
}

// armAnswer is an ARM error answer as the SDK sees it: an
// *azcore.ResponseError built from the response, as every client does.
func armAnswer(status int, code, message string, details []string, header http.Header) error {
	env := map[string]any{"code": code, "message": message}
	var ds []map[string]string
	for _, d := range details {
		ds = append(ds, map[string]string{"code": d, "message": d + " detail"})
	}
	if ds != nil {
		env["details"] = ds
	}
	doc := map[string]any{"error": env}
	if status == http.StatusOK { // a failed operation's status document
		doc["status"] = "Failed"
	}
	b, _ := json.Marshal(doc)
	if header == nil {
		header = http.Header{}
	}
	u, _ := url.Parse("https://management.azure.com/subscriptions/s/resourceGroups/g/providers/Microsoft.Compute/virtualMachines/v")
	resp := &http.Response{StatusCode: status, Status: http.StatusText(status), Header: header,
		Body: io.NopCloser(bytes.NewReader(b)), Request: &http.Request{Method: http.MethodPut, URL: u}}
	return runtime.NewResponseError(resp)
}

// TestClassify is the table of ARM error codes and statuses: every code
// codeKinds knows, with the status Azure answers it with (200 for a code
// read from a failed operation's status document), the kind, blocking
// scope, block length and Retry-After it gets, and where the code is
// documented or shown. A row with a body is answered with that body
// verbatim.
func TestClassify(t *testing.T) {
	day := restrictedFor
	for _, tc := range []struct {
		status   int
		code     string
		message  string
		details  []string
		body     string
		header   http.Header
		kind     provider.ErrorKind
		scope    provider.Scope
		blockFor time.Duration
		after    time.Duration
		ref      string
	}{
		// Capacity, reported by the VM PUT's operation: the size, in the
		// zone when the offer has one (the offer), not the whole zone.
		{200, "AllocationFailed", "Allocation failed. We do not have sufficient capacity for the requested VM size in this region.", nil, "", nil, provider.Capacity, provider.ScopeOffer, 0, 0, refDeploy},
		{200, "ZonalAllocationFailed", "Allocation failed. We do not have sufficient capacity for the requested VM size in this zone.", nil, "", nil, provider.Capacity, provider.ScopeOffer, 0, 0, refAlloc + " " + refKarpCommon},
		{200, "OverconstrainedAllocationRequest", "Allocation failed. VM(s) with the following constraints cannot be allocated, because the condition is too restrictive.", nil, "", nil, provider.Capacity, provider.ScopeOffer, 0, 0, refKarpAC},
		{200, "OverconstrainedZonalAllocationRequest", "Allocation failed. VM(s) with the following constraints cannot be allocated, because the condition is too restrictive.", nil, "", nil, provider.Capacity, provider.ScopeOffer, 0, 0, refKarpAC + " " + refKarpCommon},
		// A failed operation whose specific code is in details.
		{200, "InternalExecutionError", "An internal execution error occurred.", []string{"AllocationFailed"}, "", nil, provider.Capacity, provider.ScopeOffer, 0, 0, refLRO},
		// SkuNotAvailable, refused by the PUT: the offer, zone named or
		// not (Create makes an on-demand one Unavailable, TestCreateErrors).
		{409, "SkuNotAvailable", "The requested size for resource '/subscriptions/s/resourceGroups/g/providers/Microsoft.Compute/virtualMachines/v' is currently not available in location 'eastus' zones '' for subscription 's'. Please try another size or deploy to a different location or zones.", nil, "", nil, provider.Capacity, provider.ScopeOffer, 0, 0, refSKU},
		{409, "SkuNotAvailable", "The requested size for resource '/subscriptions/s/resourceGroups/g/providers/Microsoft.Compute/virtualMachines/v' is currently not available in location 'eastus' zones '2' for subscription 's'.", nil, "", nil, provider.Capacity, provider.ScopeOffer, 0, 0, refSKU},
		// Quota: what it counts.
		{409, "OperationNotAllowed", "Operation could not be completed as it results in exceeding approved standardDASv5Family Cores quota. Additional details - Deployment Model: Resource Manager, Location: eastus, Current Limit: 100, Current Usage: 96, Additional Required: 64, (Minimum) New Limit Required: 160.", nil, "", nil, provider.Quota, provider.ScopeFamily, 0, 0, refFamily},
		{400, "QuotaExceeded", "Operation could not be completed as it results in exceeding approved Standard NCASv3_T4 Family Cores quota. Additional details - Deployment Model: Resource Manager, Location: southcentralus, Current Limit: 0, Current Usage: 0, Additional Required: 4, (Minimum) New Limit Required: 4.", nil, "", nil, provider.Quota, provider.ScopeFamily, 0, 0, refT4Family},
		{409, "OperationNotAllowed", "Operation could not be completed as it results in exceeding approved LowPriorityCores quota. Additional details - Deployment Model: Resource Manager, Location: eastus, Current Limit: 100, Current Usage: 100, Additional Required: 8, (Minimum) New Limit Required: 108.", nil, "", nil, provider.Quota, provider.ScopeSpot, 0, 0, refLowPrio},
		{409, "OperationNotAllowed", "Operation could not be completed as it results in exceeding approved Total Regional Cores quota. Additional details - Deployment Model: Resource Manager, Location: centralus, Current Limit: 10, Current Usage: 8, Additional Required: 4, (Minimum) New Limit Required: 12.", nil, "", nil, provider.Quota, provider.ScopeRegion, 0, 0, refRegional},
		{409, "OperationNotAllowed", "Operation results in exceeding quota limits of Core. Maximum allowed: 20, Current in use: 20, Additional requested: 2.", nil, "", nil, provider.Quota, provider.ScopeRegion, 0, 0, refOldQuota},
		{400, "QuotaExceeded", "Operation results in exceeding quota limits of Core. Maximum allowed: 10, Current in use: 0, Additional requested: 12.", nil, "", nil, provider.Quota, provider.ScopeRegion, 0, 0, refQuota},
		{400, "PublicIPCountLimitReached", "Cannot create more than 20 public IP addresses for this subscription in this region.", nil, "", nil, provider.Quota, provider.ScopeRegion, 0, 0, refPublicIP},
		{400, "StaticPublicIPCountLimitReached", "Cannot create more than 20 public IP addresses with static allocation method for this subscription in this region.", nil, "", nil, provider.Quota, provider.ScopeRegion, 0, 0, refStaticIP},
		// OperationNotAllowed that is no quota: something exists and is not as asked.
		{409, "OperationNotAllowed", "Operation 'startTenantUpdate' is not allowed on VM 'v' since the VM is marked for deletion. You can only retry the Delete operation (or wait for an ongoing one to complete).", nil, "", nil, provider.Failed, provider.ScopeOffer, 0, 0, refMarked},
		// Throttling: 429 whatever the code, with its Retry-After; Compute's
		// answer has the top-level code OperationNotAllowed.
		{429, "OperationNotAllowed", "", nil, throttled429, http.Header{"Retry-After": {"1200"}}, provider.Transient, provider.ScopeOffer, 0, 1200 * time.Second, refComputeThrottle},
		{200, "OperationNotAllowed", "", nil, `{"status":"Failed","error":` + throttled429 + `}`, nil, provider.Transient, provider.ScopeOffer, 0, 0, refComputeThrottle + " " + refLRO},
		{429, "", "", nil, "", nil, provider.Transient, provider.ScopeOffer, 0, 0, refThrottle},
		{500, "InternalServerError", "An internal server error occurred.", nil, "", nil, provider.Transient, provider.ScopeOffer, 0, 0, refDeploy},
		{200, "InternalServerError", "An internal server error occurred.", nil, "", nil, provider.Transient, provider.ScopeOffer, 0, 0, refDeploy},
		{503, "", "", nil, "", nil, provider.Transient, provider.ScopeOffer, 0, 0, refThrottle},
		{409, "AnotherOperationInProgress", "Operation 'delete' on VM 'v' is not allowed because another operation is in progress.", nil, "", nil, provider.Transient, provider.ScopeOffer, 0, 0, refDeploy},
		// Still in use: a dependency being deleted (Cleanup retries).
		{400, "NicInUse", "Network Interface /subscriptions/s/resourceGroups/g/providers/Microsoft.Network/networkInterfaces/n is used by existing resource /subscriptions/s/resourceGroups/g/providers/Microsoft.Compute/virtualMachines/v.", nil, "", nil, provider.Transient, provider.ScopeOffer, 0, 0, refNicInUse},
		{400, "NicReservedForAnotherVm", "Nic(s) in request is reserved for another Virtual Machine for 180 seconds. Please provide another nic(s) or retry after 180 seconds.", nil, "", nil, provider.Transient, provider.ScopeOffer, 0, 0, refNicRes},
		{400, "PublicIPAddressCannotBeDeleted", "Public IP address /subscriptions/s/resourceGroups/g/providers/Microsoft.Network/publicIPAddresses/ip can not be deleted since it is still allocated to resource /subscriptions/s/resourceGroups/g/providers/Microsoft.Network/networkInterfaces/n.", nil, "", nil, provider.Transient, provider.ScopeOffer, 0, 0, refIPInUse},
		{400, "InUseNetworkSecurityGroupCannotBeDeleted", "Network security group /subscriptions/s/.../networkSecurityGroups/nsg cannot be deleted because it is in use by the following resources: ...", nil, "", nil, provider.Transient, provider.ScopeOffer, 0, 0, refNSGInUse},
		// Credentials.
		{403, "AuthorizationFailed", "The client 'c' with object id 'o' does not have authorization to perform action 'Microsoft.Compute/virtualMachines/write' over scope '/subscriptions/s/resourceGroups/g'.", nil, "", nil, provider.Credentials, provider.ScopeProvider, 0, 0, refDeploy},
		{403, "LinkedAuthorizationFailed", "The client has permission to perform action 'Microsoft.Compute/virtualMachines/write' on scope 'v', however it does not have permission to perform action 'Microsoft.Network/networkInterfaces/join/action' on the linked scope(s) 'n'.", nil, "", nil, provider.Credentials, provider.ScopeProvider, 0, 0, refDeploy},
		{401, "InvalidAuthenticationToken", "The received access token is not valid: at least one of the claims 'puid' or 'altsecid' or 'oid' should be present.", nil, "", nil, provider.Credentials, provider.ScopeProvider, 0, 0, refToken},
		{401, "ExpiredAuthenticationToken", "The access token expiry UTC time is earlier than current UTC time.", nil, "", nil, provider.Credentials, provider.ScopeProvider, 0, 0, refExpired},
		{401, "InvalidAuthenticationTokenTenant", "The access token is from the wrong issuer.", nil, "", nil, provider.Credentials, provider.ScopeProvider, 0, 0, refDeploy},
		{401, "", "", nil, "", nil, provider.Credentials, provider.ScopeProvider, 0, 0, refToken},
		// Azure Policy: not viable here; the region for a location policy.
		{403, "RequestDisallowedByPolicy", "", nil, policyLocation, nil, provider.Unavailable, provider.ScopeRegion, 0, 0, refPolicy + " " + refPolicyLoc},
		{403, "RequestDisallowedByPolicy", "", nil, `{"error":{"code":"RequestDisallowedByPolicy","target":"azuretutjs20","message":"Resource 'azuretutjs20' was disallowed by policy. Policy identifiers: '[{\"policyAssignment\":{\"name\":\"Allowed locations\",\"id\":\"/subscriptions/s/providers/Microsoft.Authorization/policyAssignments/c0e6f7c631ce4f0a8a883e61\"},\"policyDefinition\":{\"name\":\"Allowed locations\",\"id\":\"/providers/Microsoft.Authorization/policyDefinitions/e56962a6-4747-49cd-b67b-bf8b01975c4c\"}}]'."}}`, nil, provider.Unavailable, provider.ScopeRegion, 0, 0, refPolicy + " " + refPolicyMsg},
		{403, "RequestDisallowedByPolicy", "", nil, policySize, nil, provider.Unavailable, provider.ScopeOffer, 0, 0, refPolicy},
		{403, "RequestDisallowedByPolicy", "", nil, `{"error":{"code":"RequestDisallowedByPolicy","target":"examplenic1207","message":"Resource 'examplenic1207' was disallowed by policy. Policy identifiers: '[{\"policyAssignment\":{\"name\":\"Network interfaces should not have public IPs\",\"id\":\"/subscriptions/s/providers/Microsoft.Authorization/policyAssignments/1111aa2222bb3333cc4444dd\"},\"policyDefinition\":{\"name\":\"Network interfaces should not have public IPs\",\"id\":\"/subscriptions/s/providers/Microsoft.Authorization/policyDefinitions/83a86a26-fd1f-447c-b59d-e51f44264114\"}}]'."}}`, nil, provider.Unavailable, provider.ScopeOffer, 0, 0, refPolicy},
		// A size the region does not have: the offer, for a day.
		{400, "InvalidParameter", "", nil, `{"error":{"code":"InvalidParameter","target":"vmSize","message":"The requested VM size Standard_NC24ads_A100_v4 is not available in the current region. The sizes available in the current region are: Standard_A0,Standard_A1,Standard_D1_v2.\r\nFind out more on the available VM sizes in each region at https://aka.ms/azure-regions."}}`, nil, provider.Unavailable, provider.ScopeOffer, day, 0, refVMSize},
		// The request or configuration is wrong everywhere.
		{400, "InvalidParameter", "The Admin Username specified is not allowed.", nil, "", nil, provider.InvalidRequest, provider.ScopeOffer, 0, 0, refDeploy},
		{400, "InvalidRequestContent", "The request content was invalid and could not be deserialized.", nil, "", nil, provider.InvalidRequest, provider.ScopeOffer, 0, 0, refDeploy},
		{409, "MissingSubscriptionRegistration", "The subscription is not registered to use namespace 'Microsoft.Compute'.", nil, "", nil, provider.InvalidRequest, provider.ScopeOffer, 0, 0, refRP},
		{404, "SubscriptionNotFound", "The subscription 's' could not be found.", nil, "", nil, provider.InvalidRequest, provider.ScopeOffer, 0, 0, refDeploy},
		// A configured group that is missing (the adapter's own is made
		// again: TestProvisionerRemakesADeletedResourceGroup).
		{404, "ResourceGroupNotFound", "Resource group 'g' could not be found.", nil, "", nil, provider.InvalidRequest, provider.ScopeOffer, 0, 0, refDeploy},
		// The region does not offer the resource type.
		{400, "LocationNotAvailableForResourceType", "The provided location 'x' is not available for resource type 'Microsoft.Compute/virtualMachines'.", nil, "", nil, provider.Unavailable, provider.ScopeRegion, 0, 0, refDeploy},
		{400, "NoRegisteredProviderFound", "No registered resource provider found for location 'x' and API version '2024-11-01' for type 'virtualMachines'.", nil, "", nil, provider.Unavailable, provider.ScopeRegion, 0, 0, refRP},
		// Failed: something exists and is not as asked; unknown codes.
		{409, "PropertyChangeNotAllowed", "Changing property 'osProfile.customData' is not allowed.", nil, "", nil, provider.Failed, provider.ScopeOffer, 0, 0, refDeploy},
		{404, "ResourceNotFound", "The Resource 'Microsoft.Compute/virtualMachines/v' under resource group 'g' was not found.", nil, "", nil, provider.Failed, provider.ScopeOffer, 0, 0, refDeploy},
		{400, "SomethingNew", "a code no reference lists", nil, "", nil, provider.Failed, provider.ScopeOffer, 0, 0, ""},
		{200, "OSProvisioningTimedOut", "OS Provisioning for VM 'v' did not finish in the allotted time.", nil, "", nil, provider.Failed, provider.ScopeOffer, 0, 0, ""},
	} {
		t.Run(fmt.Sprintf("%d_%s_%.24s", tc.status, tc.code, tc.message+tc.body), func(t *testing.T) {
			if tc.ref == "" && tc.code != "SomethingNew" && tc.code != "OSProvisioningTimedOut" {
				t.Fatal("a row without a reference")
			}
			answer := armAnswer(tc.status, tc.code, tc.message, tc.details, tc.header)
			if tc.body != "" {
				answer = armBody(tc.status, tc.body, tc.header)
			}
			pe := classifyError("azure", "create", answer)
			if pe.Kind != tc.kind || pe.Scope() != tc.scope || pe.BlockFor != tc.blockFor || pe.RetryAfter != tc.after {
				t.Fatalf("got %s/%s for %v, retry after %v; want %s/%s for %v, retry after %v (%s)", pe.Kind, pe.Scope(), pe.BlockFor,
					pe.RetryAfter, tc.kind, tc.scope, tc.blockFor, tc.after, tc.ref)
			}
			var re *azcore.ResponseError
			if !errors.As(pe, &re) || re.StatusCode != tc.status || !errors.Is(pe, tc.kind) {
				t.Fatalf("%v does not wrap the SDK's ResponseError", pe)
			}
			if tc.code != "" && !IsCode(pe, tc.code) {
				t.Fatalf("IsCode(%s) is false for %v", tc.code, pe)
			}
			if tc.message != "" && !strings.Contains(pe.Error(), tc.message[:20]) {
				t.Fatalf("the text %q lacks the message", pe.Error())
			}
		})
	}
	// Every code the classifier knows is a row above: no unreferenced code.
	rows := map[string]bool{"InternalExecutionError": true}
	for _, c := range []string{"AllocationFailed", "ZonalAllocationFailed", "OverconstrainedAllocationRequest", "OverconstrainedZonalAllocationRequest",
		"SkuNotAvailable", "OperationNotAllowed", "QuotaExceeded", "PublicIPCountLimitReached", "StaticPublicIPCountLimitReached",
		"InternalServerError", "AnotherOperationInProgress", "NicInUse",
		"NicReservedForAnotherVm", "PublicIPAddressCannotBeDeleted", "InUseNetworkSecurityGroupCannotBeDeleted", "AuthorizationFailed",
		"LinkedAuthorizationFailed", "InvalidAuthenticationToken", "ExpiredAuthenticationToken", "InvalidAuthenticationTokenTenant",
		"RequestDisallowedByPolicy", "InvalidParameter", "InvalidRequestContent", "MissingSubscriptionRegistration", "SubscriptionNotFound",
		"ResourceGroupNotFound", "LocationNotAvailableForResourceType", "NoRegisteredProviderFound", "PropertyChangeNotAllowed"} {
		rows[c] = true
	}
	for c := range codeKinds {
		if !rows[c] {
			t.Errorf("code %s is classified but has no row in the table", c)
		}
	}
}

func TestClassifyRetryAfter(t *testing.T) {
	for _, v := range []string{"17", time.Now().Add(17 * time.Second).UTC().Format(http.TimeFormat)} {
		pe := classifyError("azure", "observe", armAnswer(429, "", "", nil, http.Header{"Retry-After": {v}}))
		if pe.Kind != provider.Transient || pe.RetryAfter < 15*time.Second || pe.RetryAfter > 17*time.Second {
			t.Errorf("Retry-After %q: %s %s", v, pe.Kind, pe.RetryAfter)
		}
	}
}

func TestClassifyWithoutAnswer(t *testing.T) {
	for _, err := range []error{context.DeadlineExceeded, &net.OpError{Op: "dial", Err: errors.New("connection refused")},
		io.ErrUnexpectedEOF, fmt.Errorf("read tcp: connection reset by peer")} {
		if pe := classifyError("azure", "create", err); pe.Kind != provider.Transient {
			t.Errorf("%v: %s, want transient", err, pe.Kind)
		}
	}
	if pe := classifyError("azure", "create", errors.New("json: cannot unmarshal")); pe.Kind != provider.Failed {
		t.Errorf("an unclassified error is %s, want failed", pe.Kind)
	}
}

// A credential that cannot get a token is Credentials; a token service
// that answers 5xx or 429 is Transient.
func TestClassifyTokenErrors(t *testing.T) {
	if pe := classifyError("azure", "create", &tokenError{errors.New("DefaultAzureCredential: failed to acquire a token")}); pe.Kind != provider.Credentials {
		t.Errorf("no credential: %s", pe.Kind)
	}
	af := &azidentity.AuthenticationFailedError{RawResponse: &http.Response{StatusCode: 503, Request: &http.Request{URL: &url.URL{}}}}
	if pe := classifyError("azure", "create", &tokenError{af}); pe.Kind != provider.Transient {
		t.Errorf("token service 503: %s", pe.Kind)
	}
	af = &azidentity.AuthenticationFailedError{RawResponse: &http.Response{StatusCode: 400, Request: &http.Request{URL: &url.URL{}}}}
	if pe := classifyError("azure", "create", &tokenError{af}); pe.Kind != provider.Credentials {
		t.Errorf("token service 400 (bad secret): %s", pe.Kind)
	}
}
