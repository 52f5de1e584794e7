package main

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/org/gpuprov/provider/aws"
)

// testdata/getproducts.json has the shape of a GetProducts answer
// (FormatVersion aws_v1): PriceList holds product documents as strings.
func TestParseGetProducts(t *testing.T) {
	b, err := os.ReadFile("testdata/getproducts.json")
	if err != nil {
		t.Fatal(err)
	}
	var resp struct{ PriceList []string }
	if err := json.Unmarshal(b, &resp); err != nil {
		t.Fatal(err)
	}
	var got []product
	var rejected int
	for _, doc := range resp.PriceList {
		p, err := parseProduct(doc)
		if err != nil {
			rejected++
			continue
		}
		got = append(got, p)
	}
	want := []product{{"g5.xlarge", "us-east-1", 1.006}, {"g5.xlarge", "eu-west-1", 1.123}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] || rejected != 2 {
		t.Fatalf("parsed %+v (%d rejected), want %+v and the Windows and reserved-only documents rejected", got, rejected, want)
	}
	if _, err := parseProduct(`{"product":{"attributes":{}}}`); err == nil {
		t.Fatal("a document without instance type parsed")
	}
}

func TestTypeInfoAndBuild(t *testing.T) {
	gpu := func(name string, count, mib int32) *ec2types.GpuInfo {
		return &ec2types.GpuInfo{Gpus: []ec2types.GpuDeviceInfo{{Name: awssdk.String(name), Count: awssdk.Int32(count),
			MemoryInfo: &ec2types.GpuDeviceMemoryInfo{SizeInMiB: awssdk.Int32(mib)}}}}
	}
	in := []ec2types.InstanceTypeInfo{
		{InstanceType: "p4de.24xlarge", GpuInfo: gpu("A100", 8, 81920), VCpuInfo: &ec2types.VCpuInfo{DefaultVCpus: awssdk.Int32(96)},
			MemoryInfo: &ec2types.MemoryInfo{SizeInMiB: awssdk.Int64(1179648)}},
		{InstanceType: "g5.xlarge", GpuInfo: gpu("A10G", 1, 22888), VCpuInfo: &ec2types.VCpuInfo{DefaultVCpus: awssdk.Int32(4)},
			MemoryInfo: &ec2types.MemoryInfo{SizeInMiB: awssdk.Int64(16384)}},
		{InstanceType: "m5.large"},
	}
	var infos []aws.InstanceType
	for _, it := range in {
		if e, ok := typeInfo(it); ok {
			infos = append(infos, e)
		}
	}
	if len(infos) != 2 || infos[0].GPU != "A100-80GB" || infos[0].MemoryGiB != 1152 || infos[1].GPU != "A10G" || infos[1].VCPUs != 4 {
		t.Fatalf("type infos %+v", infos)
	}
	prices := map[string]map[string]float64{"g5.xlarge": {"us-east-1": 1.006, "eu-west-1": 1.123}, "p4de.24xlarge": {"us-east-1": 40.96575}}
	zones := map[string]map[string][]string{"us-east-1": {"g5.xlarge": {"use1-az2", "use1-az1"}}, "eu-west-1": {"g5.xlarge": {"euw1-az1"}}}
	c := build(infos, prices, zones, time.Date(2026, 5, 4, 0, 0, 0, 0, time.UTC))
	// p4de has a price but no zone: kept without regions (no on-demand
	// offer; a reservation of it can still be described), saying so.
	if c.AsOf != "2026-05-04" || len(c.InstanceTypes) != 2 {
		t.Fatalf("built %+v", c)
	}
	g5, _ := c.Lookup("g5.xlarge")
	p4de, _ := c.Lookup("p4de.24xlarge")
	if p4de.InstanceType != "p4de.24xlarge" || len(p4de.Regions) != 0 || !strings.Contains(p4de.Note, "no on-demand offers") {
		t.Fatalf("p4de.24xlarge without a zone: %+v", p4de)
	}
	if g5.Regions["us-east-1"].Price != 1.006 || g5.Regions["us-east-1"].Zones[0] != "use1-az1" || len(g5.Regions) != 2 {
		t.Fatalf("g5.xlarge entry %+v", g5)
	}
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := aws.ParseCatalog(b); err != nil {
		t.Fatalf("the generated catalog does not parse: %v", err)
	}
}
