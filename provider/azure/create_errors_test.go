package azure_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/azure"
)

// Errors of the VM PUT and of its operation reach the core as their kinds,
// with the scope, block length and Retry-After the offer calls for. The
// answers are those of TestClassify's rows (errors_test.go), whose
// references they follow.
func TestCreateErrors(t *testing.T) {
	day := 23 * time.Hour // Karpenter's SKUNotAvailableOnDemandTTL (commonerrorhandlers.go)
	eastus1 := provider.Location{Region: "eastus", Zone: "eastus-1"}
	for _, tc := range []struct {
		name     string
		cfg      azure.Config
		req      provider.ResourceRequest
		loc      provider.Location
		spot     bool
		fault    fault
		kind     provider.ErrorKind
		scope    provider.Scope
		blockFor time.Duration
		after    time.Duration
	}{
		// Allocation failures (Microsoft Learn: allocation failure; Karpenter's
		// handlers block the size in the zone, not the zone).
		{"async allocation failure", azure.Config{}, t4, eastus, false,
			fault{Async: true, Code: "AllocationFailed", Message: "Allocation failed. We do not have sufficient capacity for the requested VM size in this region."},
			provider.Capacity, provider.ScopeOffer, 0, 0},
		{"async zonal allocation failure", azure.Config{Zones: []string{"1"}}, t4, eastus1, false,
			fault{Async: true, Code: "ZonalAllocationFailed", Message: "Allocation failed. We do not have sufficient capacity for the requested VM size in this zone."},
			provider.Capacity, provider.ScopeOffer, 0, 0},
		// SkuNotAvailable (aka.ms/azureskunotavailable): on demand, the
		// subscription's restriction, a day; Spot, no Spot capacity.
		{"sku not available on demand", azure.Config{}, t4, eastus, false,
			fault{Status: 409, Code: "SkuNotAvailable", Message: "The requested size for resource 'x' is currently not available in location 'eastus' zones '' for subscription 's'. Please try another size or deploy to a different location or zones. See https://aka.ms/azureskunotavailable for details."},
			provider.Unavailable, provider.ScopeOffer, day, 0},
		{"sku not available in a zone on demand", azure.Config{Zones: []string{"1"}}, t4, eastus1, false,
			fault{Status: 409, Code: "SkuNotAvailable", Message: "The requested size for resource 'x' is currently not available in location 'eastus' zones '1' for subscription 's'. Please try another size or deploy to a different location or zones. See https://aka.ms/azureskunotavailable for details."},
			provider.Unavailable, provider.ScopeOffer, day, 0},
		{"sku not available for Spot", azure.Config{Spot: true}, anySpot(t4), eastus, true,
			fault{Status: 409, Code: "SkuNotAvailable", Message: "The requested size for resource 'x' is currently not available in location 'eastus' zones '' for subscription 's'. Please try another size or deploy to a different location or zones. See https://aka.ms/azureskunotavailable for details."},
			provider.Capacity, provider.ScopeOffer, 0, 0},
		// Quotas (refFamily, refT4Family, refLowPrio in errors_test.go; the T4 family as known_skus.yaml spells it).
		{"the offer's family quota", azure.Config{}, t4, eastus, false,
			fault{Status: 409, Code: "OperationNotAllowed", Message: "Operation could not be completed as it results in exceeding approved Standard NCASv3_T4 Family Cores quota. Additional details - Deployment Model: Resource Manager, Location: eastus, Current Limit: 0, Current Usage: 0, Additional Required: 4, (Minimum) New Limit Required: 4."},
			provider.Quota, provider.ScopeFamily, 0, 0},
		{"another family's quota", azure.Config{}, t4, eastus, false,
			fault{Status: 409, Code: "OperationNotAllowed", Message: "Operation could not be completed as it results in exceeding approved standardDASv5Family Cores quota. Additional details - Deployment Model: Resource Manager, Location: eastus, Current Limit: 100, Current Usage: 96, Additional Required: 64, (Minimum) New Limit Required: 160."},
			provider.Quota, provider.ScopeOffer, 0, 0},
		{"Spot quota", azure.Config{Spot: true}, anySpot(t4), eastus, true,
			fault{Status: 409, Code: "OperationNotAllowed", Message: "Operation could not be completed as it results in exceeding approved LowPriorityCores quota. Additional details - Deployment Model: Resource Manager, Location: eastus, Current Limit: 100, Current Usage: 100, Additional Required: 8, (Minimum) New Limit Required: 108."},
			provider.Quota, provider.ScopeSpot, 0, 0},
		// Compute's throttling answer ("Troubleshooting API throttling errors").
		{"throttled", azure.Config{}, t4, eastus, false,
			fault{Status: 429, Code: "OperationNotAllowed", Body: azure.ThrottledBody, RetryAfter: "1200"},
			provider.Transient, provider.ScopeOffer, 0, 1200 * time.Second},
		{"size not in the region", azure.Config{}, a100, eastus, false,
			fault{Status: 400, Code: "InvalidParameter", Body: `{"error":{"code":"InvalidParameter","target":"vmSize","message":"The requested VM size Standard_NC24ads_A100_v4 is not available in the current region. The sizes available in the current region are: Standard_A0,Standard_A1."}}`},
			provider.Unavailable, provider.ScopeOffer, day, 0},
		{"policy on the size", azure.Config{}, a100, eastus, false,
			fault{Status: 403, Code: "RequestDisallowedByPolicy", Body: azure.PolicySizeBody},
			provider.Unavailable, provider.ScopeOffer, 0, 0},
		{"forbidden", azure.Config{}, t4, eastus, false,
			fault{Status: 403, Code: "AuthorizationFailed", Message: "The client 'c' does not have authorization to perform action 'Microsoft.Compute/virtualMachines/write'."},
			provider.Credentials, provider.ScopeProvider, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, mt := newCloud(t)
			p := c.provider(t, mt, tc.cfg)
			spec := newSpec(t, "err")
			o := offerIn(t, p, tc.req, tc.loc, tc.spot)
			prep, err := p.Prepare(context.Background(), &o, spec)
			if err != nil {
				t.Fatal(err)
			}
			if tc.fault.Async {
				c.createFaults["eastus"] = []fault{tc.fault}
			} else {
				c.syncFaults["PUT /virtualMachines/"] = []fault{tc.fault}
			}
			id, err := p.Create(context.Background(), &o, prep, spec)
			pe := kindOf(t, err, tc.kind)
			if pe.Scope() != tc.scope || pe.BlockFor != tc.blockFor || pe.RetryAfter != tc.after || id != "" || !azure.IsCode(err, tc.fault.Code) {
				t.Fatalf("scope %s for %v retry-after %s id %q: %v", pe.Scope(), pe.BlockFor, pe.RetryAfter, id, err)
			}
			// One try: the SDK's own retries are off.
			if n := len(c.calls("PUT", "/virtualMachines/")); n != 1 {
				t.Fatalf("%d VM PUTs, want 1", n)
			}
			if tc.fault.Async {
				// The failed VM object is listed as Failed, so the core deletes it.
				obs, err := p.Observe(context.Background(), tc.loc, "err")
				if err != nil || len(obs) != 1 || obs[0].Status != provider.StatusFailed ||
					!strings.Contains(obs[0].VendorStatus, "ProvisioningState/failed/"+tc.fault.Code) {
					t.Fatalf("observe: %+v, %v", obs, err)
				}
			}
		})
	}
}

// anySpot is req accepting Spot.
func anySpot(req provider.ResourceRequest) provider.ResourceRequest {
	req.Spot = provider.SpotOrOnDemand
	return req
}
