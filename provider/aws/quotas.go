package aws

import (
	"cmp"
	"context"
	"fmt"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/servicequotas"
	sqtypes "github.com/aws/aws-sdk-go-v2/service/servicequotas/types"

	"github.com/org/gpuprov/provider"
)

// gpuQuota is one EC2 vCPU quota that bounds the catalog's GPU offers: the
// Service Quotas code, the quota bucket (Offer.Family, quotaFamily) it
// counts, and its market.
type gpuQuota struct {
	code, family, what string
	spot               bool
}

// gpuQuotas are the vCPU quotas of the buckets the catalog's types fall
// in (P: p3, p4d, p4de, p5, p5e, p5en, p6-b200; G: g4dn, g5, g6, g6e), one
// per market, per region. The EC2 User Guide's "On-Demand Instance quotas"
// and "Spot Instance quotas" name them; the codes are those Service Quotas
// lists under service code ec2 (Running On-Demand P instances L-417A185B,
// Running On-Demand G and VT instances L-DB2E81BA, All P Spot Instance
// Requests L-7212CCBC, All G and VT Spot Instance Requests L-3819A6DF), as
// the AWS CLI examples of get-service-quota and the tools that read them
// spell them. Every one counts vCPUs of running (or, for Spot, requested)
// instances of its bucket in the region.
var gpuQuotas = []gpuQuota{
	{code: "L-417A185B", family: "P", what: "P instances"},
	{code: "L-DB2E81BA", family: "G", what: "G and VT instances"},
	{code: "L-7212CCBC", family: "P", what: "P Spot instances", spot: true},
	{code: "L-3819A6DF", family: "G", what: "G and VT Spot instances", spot: true},
}

// Quotas implements provider.QuotaReader: the vCPU quotas of the GPU
// buckets in region, read with Service Quotas GetServiceQuota (service
// code ec2), one call per quota, each paced and classified like every
// other call. Service Quotas gives the applied limit only: UsageKnown is
// false. A quota Service Quotas does not have in the region
// (NoSuchResourceException) is left out; any other error fails the whole
// answer (the core then leaves the region's offers in). Nothing is
// cached here: the core caches.
func (p *Provider) Quotas(ctx context.Context, region string) ([]provider.QuotaLimit, error) {
	if !regionRE.MatchString(region) {
		return nil, provider.Errorf(provider.InvalidRequest, p.name, "quotas", "%q is not an AWS region name (like us-east-1)", region)
	}
	var out []provider.QuotaLimit
	for _, q := range gpuQuotas {
		sq, err := p.serviceQuota(ctx, region, "ec2", q.code)
		if IsCode(err, "NoSuchResourceException") {
			p.log.Debug("aws: quota not known in region", "provider", p.name, "region", region, "quota", q.code)
			continue
		}
		if err != nil {
			return nil, err
		}
		if sq.Value == nil {
			// ErrorReason says why Service Quotas has no value (a
			// dependency denied or throttled): as good as not knowing.
			p.log.Debug("aws: quota without a value", "provider", p.name, "region", region, "quota", q.code)
			continue
		}
		name := awssdk.ToString(sq.QuotaName)
		if name == "" {
			name = q.what
		}
		out = append(out, provider.QuotaLimit{
			Name: fmt.Sprintf("%s (%s)", name, q.code), What: q.what, Region: region, Unit: provider.QuotaVCPUs,
			Limit: *sq.Value, Families: []string{q.family}, Spot: q.spot, OnDemand: !q.spot,
		})
	}
	return out, nil
}

// serviceQuota reads one quota's applied value in region.
func (p *Provider) serviceQuota(ctx context.Context, region, service, code string) (*sqtypes.ServiceQuota, error) {
	var q *sqtypes.ServiceQuota
	err := p.call(ctx, "quotas", func(ctx context.Context) error {
		out, err := p.quotasFor(region).GetServiceQuota(ctx, &servicequotas.GetServiceQuotaInput{
			ServiceCode: awssdk.String(service), QuotaCode: awssdk.String(code)})
		if err == nil {
			if q = out.Quota; q == nil {
				q = &sqtypes.ServiceQuota{}
			}
		}
		return err
	})
	return q, err
}

// quotasFor returns the Service Quotas client of region: one attempt per
// call, at Endpoint.QuotasURL (else URL) when the provider has an endpoint.
func (p *Provider) quotasFor(region string) *servicequotas.Client {
	return regional(p, p.sqs, region, func() *servicequotas.Client {
		if e := p.endpoint; e != nil {
			return servicequotas.New(servicequotas.Options{Region: region, BaseEndpoint: awssdk.String(cmp.Or(e.QuotasURL, e.URL)),
				HTTPClient: e.Client, Credentials: e.credentials(), RetryMaxAttempts: 1})
		}
		return servicequotas.NewFromConfig(p.awsCfg, func(o *servicequotas.Options) { o.Region = region; o.RetryMaxAttempts = 1 })
	})
}

var _ provider.QuotaReader = (*Provider)(nil)
