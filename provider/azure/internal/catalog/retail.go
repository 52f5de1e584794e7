package catalog

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// RetailEndpoint is the Azure Retail Prices API. It needs no
// authentication; the generator pages through it.
const RetailEndpoint = "https://prices.azure.com/api/retail/prices"

// RetailAPIVersion is the API version the generator asks for.
const RetailAPIVersion = "2023-01-01-preview"

// RetailItem is one meter of a Retail Prices API page, the fields the
// repricing reads (https://learn.microsoft.com/en-us/rest/api/cost-management/retail-prices/azure-retail-prices).
type RetailItem struct {
	CurrencyCode  string  `json:"currencyCode"`
	RetailPrice   float64 `json:"retailPrice"`
	ARMRegionName string  `json:"armRegionName"`
	ARMSKUName    string  `json:"armSkuName"`
	SKUName       string  `json:"skuName"`     // "NC24ads A100 v4", "NC24ads A100 v4 Spot", "... Low Priority"
	ProductName   string  `json:"productName"` // "Virtual Machines NCadsA100v4 Series" (Linux) or "... Series Windows"
	ServiceName   string  `json:"serviceName"`
	UnitOfMeasure string  `json:"unitOfMeasure"`
	Type          string  `json:"type"` // "Consumption", "Reservation", "DevTestConsumption"
}

// RetailPage is one page of the API's answer.
type RetailPage struct {
	Items        []RetailItem `json:"Items"`
	NextPageLink string       `json:"NextPageLink"`
}

// ParseRetailPage decodes one page.
func ParseRetailPage(b []byte) (*RetailPage, error) {
	var p RetailPage
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("retail prices page: %w", err)
	}
	return &p, nil
}

// RetailFilter is the OData $filter that selects the meters of one VM size.
func RetailFilter(size string) string {
	return fmt.Sprintf("serviceName eq 'Virtual Machines' and armSkuName eq '%s' and priceType eq 'Consumption'", size)
}

// Prices are the Linux pay-as-you-go and Spot hourly prices of one size,
// per region, as read from Retail Prices API items.
type Prices map[string]RegionPrice

// LinuxPrices picks from items the hourly USD Consumption meters of size
// that are Linux (the product name does not end in "Windows"): the plain
// meter is the on-demand price, the one whose skuName ends in " Spot" the
// Spot price. Low Priority meters (the retired predecessor of Spot), other
// currencies and other units are ignored. A region with a Spot price but no
// on-demand one is left out.
func LinuxPrices(size string, items []RetailItem) Prices {
	out := Prices{}
	for _, it := range items {
		if it.ARMSKUName != size || it.CurrencyCode != "USD" || it.Type != "Consumption" ||
			it.UnitOfMeasure != "1 Hour" || it.ServiceName != "Virtual Machines" ||
			strings.HasSuffix(it.ProductName, "Windows") || strings.HasSuffix(it.SKUName, "Low Priority") ||
			it.RetailPrice <= 0 || it.ARMRegionName == "" {
			continue
		}
		rp := out[it.ARMRegionName]
		rp.Region = it.ARMRegionName
		if strings.HasSuffix(it.SKUName, " Spot") {
			rp.Spot = it.RetailPrice
		} else {
			rp.OnDemand = it.RetailPrice
		}
		out[it.ARMRegionName] = rp
	}
	for r, rp := range out {
		if rp.OnDemand <= 0 {
			delete(out, r)
		}
	}
	return out
}

// Reprice returns a copy of c whose sizes carry the prices found (sizes
// keep their shape; their regions become exactly those priced), dated
// retrieved and attributed to source. A size no region prices keeps its old
// regions and is reported in the warnings, so a failed lookup never empties
// the catalog. A Spot price at or above the on-demand price is not a Spot
// discount the catalog can vouch for and is dropped with a warning.
func Reprice(c *Catalog, prices map[string]Prices, source, retrieved string) (*Catalog, []string) {
	out := *c
	out.Source, out.Retrieved = source, retrieved
	out.Sizes = slices.Clone(c.Sizes)
	var warnings []string
	for i := range out.Sizes {
		s := &out.Sizes[i]
		p := prices[s.Name]
		if len(p) == 0 {
			warnings = append(warnings, fmt.Sprintf("%s: no Linux Consumption price found; kept the old regions", s.Name))
			continue
		}
		regions := make([]RegionPrice, 0, len(p))
		for _, rp := range p {
			if rp.Spot >= rp.OnDemand {
				warnings = append(warnings, fmt.Sprintf("%s in %s: Spot $%g is not below on-demand $%g; dropped", s.Name, rp.Region, rp.Spot, rp.OnDemand))
				rp.Spot = 0
			}
			regions = append(regions, rp)
		}
		slices.SortFunc(regions, func(a, b RegionPrice) int { return strings.Compare(a.Region, b.Region) })
		s.Regions = regions
	}
	return &out, warnings
}
