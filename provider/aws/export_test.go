package aws

import "context"

// ServiceQuotaValue reads one quota's value through the provider's own
// Service Quotas client (endpoint, signing, pacing), for tests that check
// that client against an emulator with a quota the emulator holds.
func (p *Provider) ServiceQuotaValue(ctx context.Context, region, service, code string) (float64, error) {
	q, err := p.serviceQuota(ctx, region, service, code)
	if err != nil || q.Value == nil {
		return 0, err
	}
	return *q.Value, nil
}
