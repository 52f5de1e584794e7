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
)

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
// read from a failed operation's status document), the kind and blocking
// scope it gets, and where the code is documented or shown.
func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		status  int
		code    string
		message string
		details []string
		kind    provider.ErrorKind
		scope   provider.Scope
		ref     string
	}{
		// Capacity, reported by the VM PUT's operation.
		{200, "AllocationFailed", "Allocation failed. We do not have sufficient capacity for the requested VM size in this region.", nil, provider.Capacity, provider.ScopeOffer, refDeploy},
		{200, "ZonalAllocationFailed", "Allocation failed. We do not have sufficient capacity for the requested VM size in this zone.", nil, provider.Capacity, provider.ScopeZone, refAlloc},
		{200, "OverconstrainedAllocationRequest", "Allocation failed. VM(s) with the following constraints cannot be allocated, because the condition is too restrictive.", nil, provider.Capacity, provider.ScopeOffer, refKarpAC},
		{200, "OverconstrainedZonalAllocationRequest", "Allocation failed. VM(s) with the following constraints cannot be allocated, because the condition is too restrictive.", nil, provider.Capacity, provider.ScopeZone, refKarpAC},
		// A failed operation whose specific code is in details.
		{200, "InternalExecutionError", "An internal execution error occurred.", []string{"AllocationFailed"}, provider.Capacity, provider.ScopeOffer, refLRO},
		// SkuNotAvailable, refused by the PUT: zone scope when it names a zone.
		{409, "SkuNotAvailable", "The requested size for resource '/subscriptions/s/resourceGroups/g/providers/Microsoft.Compute/virtualMachines/v' is currently not available in location 'eastus' zones '' for subscription 's'. Please try another size or deploy to a different location or zones.", nil, provider.Capacity, provider.ScopeOffer, refSKU},
		{409, "SkuNotAvailable", "The requested size for resource '/subscriptions/s/resourceGroups/g/providers/Microsoft.Compute/virtualMachines/v' is currently not available in location 'eastus' zones '2' for subscription 's'.", nil, provider.Capacity, provider.ScopeZone, refSKU},
		// Quota.
		{409, "OperationNotAllowed", "Operation could not be completed as it results in exceeding approved standardNCADSA100v4Family Cores quota. Additional details - Deployment Model: Resource Manager, Location: eastus, Current Limit: 0, Current Usage: 0, Additional Required: 24, (Minimum) New Limit Required: 24.", nil, provider.Quota, provider.ScopeRegion, refFamily},
		{409, "OperationNotAllowed", "Operation could not be completed as it results in exceeding approved Total Regional Cores quota. Additional details - Deployment Model: Resource Manager, Location: centralus, Current Limit: 10, Current Usage: 8, Additional Required: 4, (Minimum) New Limit Required: 12.", nil, provider.Quota, provider.ScopeRegion, refRegional},
		{409, "OperationNotAllowed", "Operation results in exceeding quota limits of Core. Maximum allowed: 20, Current in use: 20, Additional requested: 2.", nil, provider.Quota, provider.ScopeRegion, refOldQuota},
		{400, "QuotaExceeded", "Operation results in exceeding quota limits of Core. Maximum allowed: 10, Current in use: 0, Additional requested: 12.", nil, provider.Quota, provider.ScopeRegion, refQuota},
		// OperationNotAllowed that is no quota: something exists and is not as asked.
		{409, "OperationNotAllowed", "Operation 'startTenantUpdate' is not allowed on VM 'v' since the VM is marked for deletion. You can only retry the Delete operation (or wait for an ongoing one to complete).", nil, provider.Failed, provider.ScopeOffer, refMarked},
		// Throttling: by status, Retry-After honoured (TestClassifyRetryAfter).
		{429, "", "", nil, provider.Transient, provider.ScopeOffer, refThrottle},
		{500, "InternalServerError", "An internal server error occurred.", nil, provider.Transient, provider.ScopeOffer, refDeploy},
		{200, "InternalServerError", "An internal server error occurred.", nil, provider.Transient, provider.ScopeOffer, refDeploy},
		{503, "", "", nil, provider.Transient, provider.ScopeOffer, refThrottle},
		{409, "AnotherOperationInProgress", "Operation 'delete' on VM 'v' is not allowed because another operation is in progress.", nil, provider.Transient, provider.ScopeOffer, refDeploy},
		// Still in use: a dependency being deleted (Cleanup retries).
		{400, "NicInUse", "Network Interface /subscriptions/s/resourceGroups/g/providers/Microsoft.Network/networkInterfaces/n is used by existing resource /subscriptions/s/resourceGroups/g/providers/Microsoft.Compute/virtualMachines/v.", nil, provider.Transient, provider.ScopeOffer, refNicInUse},
		{400, "NicReservedForAnotherVm", "Nic(s) in request is reserved for another Virtual Machine for 180 seconds. Please provide another nic(s) or retry after 180 seconds.", nil, provider.Transient, provider.ScopeOffer, refNicRes},
		{400, "PublicIPAddressCannotBeDeleted", "Public IP address /subscriptions/s/resourceGroups/g/providers/Microsoft.Network/publicIPAddresses/ip can not be deleted since it is still allocated to resource /subscriptions/s/resourceGroups/g/providers/Microsoft.Network/networkInterfaces/n.", nil, provider.Transient, provider.ScopeOffer, refIPInUse},
		{400, "InUseNetworkSecurityGroupCannotBeDeleted", "Network security group /subscriptions/s/.../networkSecurityGroups/nsg cannot be deleted because it is in use by the following resources: ...", nil, provider.Transient, provider.ScopeOffer, refNSGInUse},
		// Credentials.
		{403, "AuthorizationFailed", "The client 'c' with object id 'o' does not have authorization to perform action 'Microsoft.Compute/virtualMachines/write' over scope '/subscriptions/s/resourceGroups/g'.", nil, provider.Credentials, provider.ScopeProvider, refDeploy},
		{403, "LinkedAuthorizationFailed", "The client has permission to perform action 'Microsoft.Compute/virtualMachines/write' on scope 'v', however it does not have permission to perform action 'Microsoft.Network/networkInterfaces/join/action' on the linked scope(s) 'n'.", nil, provider.Credentials, provider.ScopeProvider, refDeploy},
		{401, "InvalidAuthenticationToken", "The received access token is not valid: at least one of the claims 'puid' or 'altsecid' or 'oid' should be present.", nil, provider.Credentials, provider.ScopeProvider, refToken},
		{401, "ExpiredAuthenticationToken", "The access token expiry UTC time is earlier than current UTC time.", nil, provider.Credentials, provider.ScopeProvider, refExpired},
		{401, "InvalidAuthenticationTokenTenant", "The access token is from the wrong issuer.", nil, provider.Credentials, provider.ScopeProvider, refDeploy},
		{401, "", "", nil, provider.Credentials, provider.ScopeProvider, refToken},
		// The request or configuration is wrong everywhere.
		{400, "InvalidParameter", "The Admin Username specified is not allowed.", nil, provider.InvalidRequest, provider.ScopeOffer, refDeploy},
		{400, "InvalidRequestContent", "The request content was invalid and could not be deserialized.", nil, provider.InvalidRequest, provider.ScopeOffer, refDeploy},
		{409, "MissingSubscriptionRegistration", "The subscription is not registered to use namespace 'Microsoft.Compute'.", nil, provider.InvalidRequest, provider.ScopeOffer, refRP},
		{404, "SubscriptionNotFound", "The subscription 's' could not be found.", nil, provider.InvalidRequest, provider.ScopeOffer, refDeploy},
		{404, "ResourceGroupNotFound", "Resource group 'g' could not be found.", nil, provider.InvalidRequest, provider.ScopeOffer, refDeploy},
		// The region does not offer the resource type.
		{400, "LocationNotAvailableForResourceType", "The provided location 'x' is not available for resource type 'Microsoft.Compute/virtualMachines'.", nil, provider.Unavailable, provider.ScopeRegion, refDeploy},
		{400, "NoRegisteredProviderFound", "No registered resource provider found for location 'x' and API version '2024-11-01' for type 'virtualMachines'.", nil, provider.Unavailable, provider.ScopeRegion, refRP},
		// Failed: something exists and is not as asked; unknown codes.
		{409, "PropertyChangeNotAllowed", "Changing property 'osProfile.customData' is not allowed.", nil, provider.Failed, provider.ScopeOffer, refDeploy},
		{404, "ResourceNotFound", "The Resource 'Microsoft.Compute/virtualMachines/v' under resource group 'g' was not found.", nil, provider.Failed, provider.ScopeOffer, refDeploy},
		{400, "SomethingNew", "a code no reference lists", nil, provider.Failed, provider.ScopeOffer, ""},
		{200, "OSProvisioningTimedOut", "OS Provisioning for VM 'v' did not finish in the allotted time.", nil, provider.Failed, provider.ScopeOffer, ""},
	} {
		t.Run(fmt.Sprintf("%d_%s_%.24s", tc.status, tc.code, tc.message), func(t *testing.T) {
			if tc.ref == "" && tc.code != "SomethingNew" && tc.code != "OSProvisioningTimedOut" {
				t.Fatal("a row without a reference")
			}
			pe := classifyError("azure", "create", armAnswer(tc.status, tc.code, tc.message, tc.details, nil))
			if pe.Kind != tc.kind || pe.Scope() != tc.scope {
				t.Fatalf("got %s/%s, want %s/%s (%s)", pe.Kind, pe.Scope(), tc.kind, tc.scope, tc.ref)
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
		"SkuNotAvailable", "OperationNotAllowed", "QuotaExceeded", "InternalServerError", "AnotherOperationInProgress", "NicInUse",
		"NicReservedForAnotherVm", "PublicIPAddressCannotBeDeleted", "InUseNetworkSecurityGroupCannotBeDeleted", "AuthorizationFailed",
		"LinkedAuthorizationFailed", "InvalidAuthenticationToken", "ExpiredAuthenticationToken", "InvalidAuthenticationTokenTenant",
		"InvalidParameter", "InvalidRequestContent", "MissingSubscriptionRegistration", "SubscriptionNotFound", "ResourceGroupNotFound",
		"LocationNotAvailableForResourceType", "NoRegisteredProviderFound", "PropertyChangeNotAllowed"} {
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
