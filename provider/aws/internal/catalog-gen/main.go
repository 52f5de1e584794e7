// Command catalog-gen refreshes provider/aws/catalog.json, the offline
// catalog the AWS adapter plans from. It needs AWS credentials (the SDK's
// default chain; -profile picks a shared-config profile) with the
// pricing:GetProducts, ec2:DescribeInstanceTypes and
// ec2:DescribeInstanceTypeOfferings permissions, and is run by
//
//	go generate ./provider/aws
//
// For every instance type and region (by default those of the current
// catalog) it reads the on-demand Linux price from the Price List API
// (served from us-east-1), the GPU model, count and memory, vCPUs and RAM
// from DescribeInstanceTypes, and the zone ids that sell the type from
// DescribeInstanceTypeOfferings, and writes the catalog with today's date.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"log"
	"os"
	"slices"
	"strings"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/aws-sdk-go-v2/service/pricing"
	pricingtypes "github.com/aws/aws-sdk-go-v2/service/pricing/types"

	"github.com/org/gpuprov/provider/aws"
)

func main() {
	out := flag.String("out", "catalog.json", "catalog file to write (and to read the default types and regions from)")
	typesFlag := flag.String("types", "", "comma-separated instance types (default: those of the current catalog)")
	regionsFlag := flag.String("regions", "", "comma-separated regions (default: those of the current catalog)")
	profile := flag.String("profile", "", "AWS shared-config profile")
	flag.Parse()
	if err := run(context.Background(), *out, split(*typesFlag), split(*regionsFlag), *profile); err != nil {
		log.Fatalf("catalog-gen: %v", err)
	}
}

func split(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func run(ctx context.Context, out string, types, regions []string, profile string) error {
	fillTypes := len(types) == 0
	if fillTypes || len(regions) == 0 {
		b, err := os.ReadFile(out)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		if err == nil {
			cur, err := aws.ParseCatalog(b)
			if err != nil {
				return err
			}
			for _, t := range cur.InstanceTypes {
				if fillTypes {
					types = append(types, t.InstanceType)
				}
			}
			if len(regions) == 0 {
				regions = cur.Regions()
			}
		}
	}
	if len(types) == 0 || len(regions) == 0 {
		return fmt.Errorf("no instance types or regions: pass -types and -regions")
	}
	loaders := []func(*config.LoadOptions) error{config.WithRegion("us-east-1")}
	if profile != "" {
		loaders = append(loaders, config.WithSharedConfigProfile(profile))
	}
	cfg, err := config.LoadDefaultConfig(ctx, loaders...)
	if err != nil {
		return err
	}
	prices, err := fetchPrices(ctx, pricing.NewFromConfig(cfg), types, regions)
	if err != nil {
		return err
	}
	var infos []aws.InstanceType
	zones := map[string]map[string][]string{}
	for i, region := range regions {
		c := ec2.NewFromConfig(cfg, func(o *ec2.Options) { o.Region = region })
		if i == 0 {
			if infos, err = fetchTypes(ctx, c, types); err != nil {
				return err
			}
		}
		if zones[region], err = fetchZones(ctx, c, types); err != nil {
			return fmt.Errorf("%s: %w", region, err)
		}
	}
	b, err := json.MarshalIndent(build(infos, prices, zones, time.Now()), "", " ")
	if err != nil {
		return err
	}
	return os.WriteFile(out, append(b, '\n'), 0o644)
}

// fetchPrices returns type → region → on-demand price.
func fetchPrices(ctx context.Context, c *pricing.Client, types, regions []string) (map[string]map[string]float64, error) {
	prices := map[string]map[string]float64{}
	term := func(field, value string) pricingtypes.Filter {
		return pricingtypes.Filter{Field: awssdk.String(field), Type: pricingtypes.FilterTypeTermMatch, Value: awssdk.String(value)}
	}
	for _, t := range types {
		in := &pricing.GetProductsInput{ServiceCode: awssdk.String("AmazonEC2"), FormatVersion: awssdk.String("aws_v1"),
			Filters: []pricingtypes.Filter{term("instanceType", t), term("operatingSystem", "Linux"), term("tenancy", "Shared"),
				term("preInstalledSw", "NA"), term("capacitystatus", "Used")}}
		pg := pricing.NewGetProductsPaginator(c, in)
		for pg.HasMorePages() {
			page, err := pg.NextPage(ctx)
			if err != nil {
				return nil, fmt.Errorf("GetProducts %s: %w", t, err)
			}
			for _, doc := range page.PriceList {
				p, err := parseProduct(doc)
				if err != nil || !slices.Contains(regions, p.RegionCode) {
					continue // another region, or a product that is not a plain Linux instance hour
				}
				if prices[t] == nil {
					prices[t] = map[string]float64{}
				}
				prices[t][p.RegionCode] = p.Price
			}
		}
	}
	return prices, nil
}

func fetchTypes(ctx context.Context, c *ec2.Client, types []string) ([]aws.InstanceType, error) {
	var its []ec2types.InstanceType
	for _, t := range types {
		its = append(its, ec2types.InstanceType(t))
	}
	var out []aws.InstanceType
	pg := ec2.NewDescribeInstanceTypesPaginator(c, &ec2.DescribeInstanceTypesInput{InstanceTypes: its})
	for pg.HasMorePages() {
		page, err := pg.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("DescribeInstanceTypes: %w", err)
		}
		for _, it := range page.InstanceTypes {
			if e, ok := typeInfo(it); ok {
				out = append(out, e)
			} else {
				log.Printf("catalog-gen: %s has no GPU gpuprov knows; skipped", it.InstanceType)
			}
		}
	}
	return out, nil
}

func fetchZones(ctx context.Context, c *ec2.Client, types []string) (map[string][]string, error) {
	zones := map[string][]string{}
	pg := ec2.NewDescribeInstanceTypeOfferingsPaginator(c, &ec2.DescribeInstanceTypeOfferingsInput{
		LocationType: ec2types.LocationTypeAvailabilityZoneId,
		Filters:      []ec2types.Filter{{Name: awssdk.String("instance-type"), Values: types}}})
	for pg.HasMorePages() {
		page, err := pg.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("DescribeInstanceTypeOfferings: %w", err)
		}
		for _, o := range page.InstanceTypeOfferings {
			t := string(o.InstanceType)
			zones[t] = append(zones[t], awssdk.ToString(o.Location))
		}
	}
	return zones, nil
}
