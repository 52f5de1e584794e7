package main

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/org/gpuprov/provider/aws"
)

// product is what the generator keeps of one Price List product document
// (one element of GetProducts' PriceList).
type product struct {
	InstanceType string
	RegionCode   string
	Price        float64 // USD per hour, on demand
}

// priceDoc is the part of a Price List product document the generator
// reads: product.attributes and terms.OnDemand.*.priceDimensions.*.
type priceDoc struct {
	Product struct {
		Attributes map[string]string `json:"attributes"`
	} `json:"product"`
	Terms struct {
		OnDemand map[string]struct {
			PriceDimensions map[string]struct {
				Unit         string            `json:"unit"`
				PricePerUnit map[string]string `json:"pricePerUnit"`
			} `json:"priceDimensions"`
		} `json:"OnDemand"`
	} `json:"terms"`
}

// parseProduct reads one PriceList element: the instance type, the region
// and the hourly on-demand USD price. Products that are not a Linux,
// shared-tenancy, no-extra-software, used-capacity instance hour are
// rejected with an error naming why, as are zero prices.
func parseProduct(doc string) (product, error) {
	var d priceDoc
	if err := json.Unmarshal([]byte(doc), &d); err != nil {
		return product{}, fmt.Errorf("price list document: %w", err)
	}
	a := d.Product.Attributes
	p := product{InstanceType: a["instanceType"], RegionCode: a["regionCode"]}
	if p.InstanceType == "" || p.RegionCode == "" {
		return p, fmt.Errorf("price list document without instanceType or regionCode")
	}
	for attr, want := range map[string]string{"operatingSystem": "Linux", "tenancy": "Shared", "preInstalledSw": "NA", "capacitystatus": "Used"} {
		if got, ok := a[attr]; ok && got != want {
			return p, fmt.Errorf("%s %s: %s is %q, not %q", p.InstanceType, p.RegionCode, attr, got, want)
		}
	}
	for _, term := range d.Terms.OnDemand {
		for _, dim := range term.PriceDimensions {
			if !strings.EqualFold(dim.Unit, "Hrs") {
				continue
			}
			v, err := strconv.ParseFloat(dim.PricePerUnit["USD"], 64)
			if err != nil {
				return p, fmt.Errorf("%s %s: price %q: %w", p.InstanceType, p.RegionCode, dim.PricePerUnit["USD"], err)
			}
			if v > 0 {
				p.Price = v
				return p, nil
			}
		}
	}
	return p, fmt.Errorf("%s %s: no hourly on-demand USD price", p.InstanceType, p.RegionCode)
}

// typeInfo turns DescribeInstanceTypes' answer for one type into a catalog
// entry without regions; ok is false for a type without a known GPU.
func typeInfo(it ec2types.InstanceTypeInfo) (aws.InstanceType, bool) {
	e := aws.InstanceType{InstanceType: string(it.InstanceType)}
	if it.GpuInfo == nil || len(it.GpuInfo.Gpus) == 0 {
		return e, false
	}
	g := it.GpuInfo.Gpus[0]
	e.GPUCount = int(awssdk.ToInt32(g.Count))
	if g.MemoryInfo != nil {
		e.GPUMemoryMiB = int(awssdk.ToInt32(g.MemoryInfo.SizeInMiB))
	}
	name, ok := aws.CanonicalGPU(awssdk.ToString(g.Name), e.GPUMemoryMiB)
	if !ok || e.GPUCount <= 0 {
		return e, false
	}
	e.GPU = name
	if it.VCpuInfo != nil {
		e.VCPUs = int(awssdk.ToInt32(it.VCpuInfo.DefaultVCpus))
	}
	if it.MemoryInfo != nil {
		e.MemoryGiB = float64(awssdk.ToInt64(it.MemoryInfo.SizeInMiB)) / 1024
	}
	return e, true
}

// build assembles the catalog: a type is listed in a region only when it
// has both a price there and at least one zone that sells it.
func build(types []aws.InstanceType, prices map[string]map[string]float64, zones map[string]map[string][]string, now time.Time) *aws.Catalog {
	c := &aws.Catalog{
		Source: "AWS Price List API (pricing.GetProducts, AmazonEC2, OnDemand, Linux, Shared tenancy, no pre-installed software, " +
			"capacitystatus Used); EC2 DescribeInstanceTypes (GpuInfo) and DescribeInstanceTypeOfferings (availability-zone-id)",
		AsOf:  now.UTC().Format("2006-01-02"),
		Zones: "availability-zone ids (use1-az1), which name the same physical zone in every account; zone names (us-east-1a) are shuffled per account",
	}
	for _, t := range types {
		t.Regions = map[string]aws.RegionOffer{}
		for region, price := range prices[t.InstanceType] {
			z := slices.Clone(zones[region][t.InstanceType])
			if len(z) == 0 || price <= 0 {
				continue
			}
			slices.Sort(z)
			t.Regions[region] = aws.RegionOffer{Price: price, Zones: z}
		}
		if len(t.Regions) == 0 {
			// Kept without regions: Plan offers it nowhere on demand, but
			// describes a capacity reservation or Capacity Block of it
			// (p5e and p6-b200 are sold mostly that way).
			t.Note = "No on-demand Linux price with a zone in the Price List for the regions read: no on-demand offers; " +
				"kept so that Plan can describe a capacity reservation of the type."
		}
		c.InstanceTypes = append(c.InstanceTypes, t)
	}
	slices.SortFunc(c.InstanceTypes, func(a, b aws.InstanceType) int {
		if a.GPU != b.GPU {
			return strings.Compare(a.GPU, b.GPU)
		}
		if a.GPUCount != b.GPUCount {
			return a.GPUCount - b.GPUCount
		}
		return strings.Compare(a.InstanceType, b.InstanceType)
	})
	return c
}
