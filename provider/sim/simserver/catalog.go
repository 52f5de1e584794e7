package simserver

// DefaultCatalog returns the demo catalog of a cloud: "sim-b" gets catalog
// B, every other name catalog A. GPU names are canonical (provider.GPUNames).
// The cheapest on-demand single H100-80GB is on A ($2.49/h in us-east), the
// next on B ($2.69/h in us-central). A's on-demand H100 offers can also be
// had through its flex-start queue.
func DefaultCatalog(cloud string) []Offer {
	if cloud == "sim-b" {
		return catalogB()
	}
	return catalogA()
}

func catalogA() []Offer {
	return []Offer{
		{ID: "a-h100x1-use1a", Region: "us-east", Zone: "us-east-1a", InstanceType: "gpu.h100.1x", GPU: "H100-80GB", GPUCount: 1, GPUMemoryGB: 80, VCPUs: 26, MemoryGB: 200, PricePerHour: 2.49, Availability: "low", FlexStart: true},
		{ID: "a-h100x1-euw1b", Region: "eu-west", Zone: "eu-west-1b", InstanceType: "gpu.h100.1x", GPU: "H100-80GB", GPUCount: 1, GPUMemoryGB: 80, VCPUs: 26, MemoryGB: 200, PricePerHour: 2.89, Availability: "medium", FlexStart: true},
		{ID: "a-h100x8-use1a", Region: "us-east", Zone: "us-east-1a", InstanceType: "gpu.h100.8x", GPU: "H100-80GB", GPUCount: 8, GPUMemoryGB: 80, VCPUs: 208, MemoryGB: 1800, PricePerHour: 19.92, Availability: "low", FlexStart: true},
		{ID: "a-h100x1-use1a-spot", Region: "us-east", Zone: "us-east-1a", InstanceType: "gpu.h100.1x", GPU: "H100-80GB", GPUCount: 1, GPUMemoryGB: 80, VCPUs: 26, MemoryGB: 200, PricePerHour: 1.39, Spot: true, Availability: "medium"},
		{ID: "a-a100x1-use1b", Region: "us-east", Zone: "us-east-1b", InstanceType: "gpu.a100.1x", GPU: "A100-80GB", GPUCount: 1, GPUMemoryGB: 80, VCPUs: 30, MemoryGB: 200, PricePerHour: 1.79, Availability: "high"},
		{ID: "a-a100x2-euw1b", Region: "eu-west", Zone: "eu-west-1b", InstanceType: "gpu.a100.2x", GPU: "A100-80GB", GPUCount: 2, GPUMemoryGB: 80, VCPUs: 60, MemoryGB: 400, PricePerHour: 3.58, Availability: "medium"},
		{ID: "a-l4x1-use1a", Region: "us-east", Zone: "us-east-1a", InstanceType: "gpu.l4.1x", GPU: "L4", GPUCount: 1, GPUMemoryGB: 24, VCPUs: 8, MemoryGB: 32, PricePerHour: 0.71, Availability: "high"},
		{ID: "a-t4x1-euw1b", Region: "eu-west", Zone: "eu-west-1b", InstanceType: "gpu.t4.1x", GPU: "T4", GPUCount: 1, GPUMemoryGB: 16, VCPUs: 4, MemoryGB: 16, PricePerHour: 0.35, Availability: "high"},
		{ID: "a-t4x1-euw1b-spot", Region: "eu-west", Zone: "eu-west-1b", InstanceType: "gpu.t4.1x", GPU: "T4", GPUCount: 1, GPUMemoryGB: 16, VCPUs: 4, MemoryGB: 16, PricePerHour: 0.12, Spot: true, Availability: "high"},
	}
}

func catalogB() []Offer {
	return []Offer{
		{ID: "b-h100-sxm-1", Region: "us-central", Zone: "us-central-2", InstanceType: "h100-sxm.1", GPU: "H100-80GB", GPUCount: 1, GPUMemoryGB: 80, VCPUs: 24, MemoryGB: 240, PricePerHour: 2.69, Availability: "medium"},
		{ID: "b-h100-sxm-1-ap", Region: "ap-south", Zone: "ap-south-1", InstanceType: "h100-sxm.1", GPU: "H100-80GB", GPUCount: 1, GPUMemoryGB: 80, VCPUs: 24, MemoryGB: 240, PricePerHour: 2.99, Availability: "high"},
		{ID: "b-h100-sxm-8", Region: "us-central", Zone: "us-central-2", InstanceType: "h100-sxm.8", GPU: "H100-80GB", GPUCount: 8, GPUMemoryGB: 80, VCPUs: 192, MemoryGB: 1920, PricePerHour: 21.52, Availability: "low"},
		{ID: "b-a100-80-1", Region: "us-central", Zone: "us-central-1", InstanceType: "a100-80.1", GPU: "A100-80GB", GPUCount: 1, GPUMemoryGB: 80, VCPUs: 16, MemoryGB: 120, PricePerHour: 1.64, Availability: "high"},
		{ID: "b-a100-80-1-spot", Region: "us-central", Zone: "us-central-1", InstanceType: "a100-80.1", GPU: "A100-80GB", GPUCount: 1, GPUMemoryGB: 80, VCPUs: 16, MemoryGB: 120, PricePerHour: 0.89, Spot: true, Availability: "medium"},
		{ID: "b-l4-1-ap", Region: "ap-south", Zone: "ap-south-1", InstanceType: "l4.1", GPU: "L4", GPUCount: 1, GPUMemoryGB: 24, VCPUs: 12, MemoryGB: 48, PricePerHour: 0.79, Availability: "high"},
		{ID: "b-t4-1", Region: "us-central", Zone: "us-central-1", InstanceType: "t4.1", GPU: "T4", GPUCount: 1, GPUMemoryGB: 16, VCPUs: 8, MemoryGB: 30, PricePerHour: 0.40, Availability: "high"},
	}
}
