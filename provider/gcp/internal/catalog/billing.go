package catalog

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// ComputeEngineService is the Cloud Billing Catalog API service id of
// Compute Engine: its SKUs are listed at services/6F81-5844-456A/skus.
const ComputeEngineService = "6F81-5844-456A"

// SKUPage is one page of the Cloud Billing Catalog API's
// services.skus.list answer, as far as repricing needs it.
type SKUPage struct {
	SKUs          []SKU  `json:"skus"`
	NextPageToken string `json:"nextPageToken"`
}

// SKU is one billable item ("Nvidia Tesla T4 GPU running in Americas").
type SKU struct {
	Name           string        `json:"name"`
	SKUID          string        `json:"skuId"`
	Description    string        `json:"description"`
	Category       SKUCategory   `json:"category"`
	ServiceRegions []string      `json:"serviceRegions"`
	PricingInfo    []PricingInfo `json:"pricingInfo"`
}

// SKUCategory classifies a SKU; UsageType is "OnDemand", "Preemptible"
// (Spot), "Commit1Yr", ...
type SKUCategory struct {
	ServiceDisplayName string `json:"serviceDisplayName"`
	ResourceFamily     string `json:"resourceFamily"`
	ResourceGroup      string `json:"resourceGroup"`
	UsageType          string `json:"usageType"`
}

// PricingInfo is a SKU's price from EffectiveTime on.
type PricingInfo struct {
	EffectiveTime     string            `json:"effectiveTime"`
	PricingExpression PricingExpression `json:"pricingExpression"`
}

// PricingExpression holds the tiered rates per UsageUnit ("h", "GiBy.h").
type PricingExpression struct {
	UsageUnit   string       `json:"usageUnit"`
	TieredRates []TieredRate `json:"tieredRates"`
}

// TieredRate is the unit price from StartUsageAmount on.
type TieredRate struct {
	StartUsageAmount float64 `json:"startUsageAmount"`
	UnitPrice        Money   `json:"unitPrice"`
}

// Money is google.type.Money: Units is an int64 rendered as a JSON string.
type Money struct {
	CurrencyCode string `json:"currencyCode"`
	Units        string `json:"units"`
	Nanos        int64  `json:"nanos"`
}

// Value returns the amount as a float.
func (m Money) Value() (float64, error) {
	u := int64(0)
	if m.Units != "" {
		var err error
		if u, err = strconv.ParseInt(m.Units, 10, 64); err != nil {
			return 0, fmt.Errorf("units %q: %w", m.Units, err)
		}
	}
	return float64(u) + float64(m.Nanos)/1e9, nil
}

// ParseSKUPage decodes one page of services.skus.list.
func ParseSKUPage(b []byte) (*SKUPage, error) {
	var p SKUPage
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("sku page: %w", err)
	}
	return &p, nil
}

// excluded marks SKUs that are not the list price of an on-demand or Spot
// VM: commitments, reservations, DWS / Flex-start and calendar-mode
// capacity, sole tenancy, custom shapes. Mixing them in is how a catalog
// ends up with an H100 at half its price.
var excluded = []string{"commit", "reserved", "reservation", "dws", "flex", "calendar", "sole tenancy",
	"custom", "extended", "dynamic workload"}

// prefixes stripped from Spot SKU descriptions before matching.
var spotPrefixes = []string{"spot preemptible ", "preemptible "}

type priceKey struct {
	desc, usage, region string
}

// PriceBook is the hourly unit price of each SKU description, usage type
// and region.
type PriceBook map[priceKey]float64

// NewPriceBook indexes skus: the first tier of the latest pricing info, in
// USD, per region the SKU serves.
func NewPriceBook(skus []SKU) (PriceBook, error) {
	pb := PriceBook{}
	for _, s := range skus {
		usage := s.Category.UsageType
		if usage != "OnDemand" && usage != "Preemptible" {
			continue
		}
		desc := normalizeDescription(s.Description)
		if skip(desc) || len(s.PricingInfo) == 0 {
			continue
		}
		pi := s.PricingInfo[len(s.PricingInfo)-1]
		rates := pi.PricingExpression.TieredRates
		if len(rates) == 0 {
			continue
		}
		// The list price is the last tier that starts at zero usage.
		var rate *TieredRate
		for i := range rates {
			if rates[i].StartUsageAmount == 0 {
				rate = &rates[i]
			}
		}
		if rate == nil {
			continue
		}
		if c := rate.UnitPrice.CurrencyCode; c != "" && c != "USD" {
			return nil, fmt.Errorf("sku %s: price in %s, want USD", s.SKUID, c)
		}
		v, err := rate.UnitPrice.Value()
		if err != nil {
			return nil, fmt.Errorf("sku %s: %w", s.SKUID, err)
		}
		for _, r := range s.ServiceRegions {
			pb[priceKey{desc, usage, r}] = v
		}
	}
	return pb, nil
}

// normalizeDescription lowercases d and drops the " running in <place>"
// suffix and Spot prefixes.
func normalizeDescription(d string) string {
	d = strings.ToLower(strings.TrimSpace(d))
	if i := strings.Index(d, " running in "); i >= 0 {
		d = d[:i]
	}
	for _, p := range spotPrefixes {
		d = strings.TrimPrefix(d, p)
	}
	return d
}

func skip(desc string) bool {
	for _, x := range excluded {
		if strings.Contains(desc, x) {
			return true
		}
	}
	return false
}

func (pb PriceBook) get(prefix, usage, region string) (float64, bool) {
	v, ok := pb[priceKey{strings.ToLower(prefix), usage, region}]
	return v, ok
}

// price returns vCPUs × core + GiB × RAM + GPUs × GPU for one usage type.
func (pb PriceBook) price(m *MachineType, usage, region string) (float64, bool) {
	core, ok1 := pb.get(m.SKU.Core, usage, region)
	ram, ok2 := pb.get(m.SKU.RAM, usage, region)
	gpu, ok3 := pb.get(m.SKU.GPU, usage, region)
	if !ok1 || !ok2 || !ok3 {
		return 0, false
	}
	v := float64(m.VCPUs)*core + m.MemoryGB*ram + float64(m.GPUCount)*gpu
	return math.Round(v*1e5) / 1e5, true
}

// Reprice returns a copy of c with every region's prices recomputed from
// pb, dated retrieved. A region whose on-demand price cannot be computed is
// dropped and named in the returned warnings; a missing Spot price is 0
// (no Spot offer). Shapes and zones are kept: the billing catalog knows
// regions, not zones.
func Reprice(c *Catalog, pb PriceBook, source, retrieved string) (*Catalog, []string) {
	out := &Catalog{Source: source, Retrieved: retrieved, Note: c.Note}
	var warnings []string
	for _, m := range c.MachineTypes {
		nm := m
		nm.Regions = nil
		for _, r := range m.Regions {
			od, ok := pb.price(&m, "OnDemand", r.Region)
			if !ok {
				warnings = append(warnings, fmt.Sprintf("%s in %s: no on-demand SKU for %q/%q/%q; region dropped",
					m.InstanceType(), r.Region, m.SKU.Core, m.SKU.RAM, m.SKU.GPU))
				continue
			}
			spot, _ := pb.price(&m, "Preemptible", r.Region)
			nm.Regions = append(nm.Regions, RegionPrice{Region: r.Region, Zones: r.Zones, OnDemand: od, Spot: spot})
		}
		// A reserved-only shape has no price to recompute; it is kept for
		// the reservations Plan finds.
		if len(nm.Regions) > 0 || m.ReservedOnly != "" {
			out.MachineTypes = append(out.MachineTypes, nm)
		}
	}
	sort.Strings(warnings)
	return out, warnings
}
