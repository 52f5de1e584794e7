package sim

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/org/gpuprov/provider"
)

// offerDetail is Offer.Detail: what Create needs.
type offerDetail struct {
	OfferID string `json:"offer_id"`
	// MaxRunSeconds makes the create a flex-start one (it queues).
	MaxRunSeconds int `json:"max_run_seconds,omitempty"`
	// ReservationID is the reservation the offer launches into.
	ReservationID string `json:"reservation_id,omitempty"`
}

// prepared is what Prepare returns and Create reads.
type prepared struct {
	Region   string `json:"region"`
	Firewall string `json:"firewall"`
	SSHKey   string `json:"ssh_key,omitempty"`
}

// Plan lists the catalog and returns the offers req accepts, in the
// configured regions when req names none, cheapest first.
func (p *Provider) Plan(ctx context.Context, req *provider.ResourceRequest) ([]provider.Offer, error) {
	var resp struct {
		Offers       []wireOffer       `json:"offers"`
		Reservations []wireReservation `json:"reservations"`
	}
	if err := p.do(ctx, call{op: "plan", method: http.MethodGet, path: "offers", out: &resp}); err != nil {
		return nil, err
	}
	r := *req
	if len(r.Regions) == 0 {
		r.Regions = p.cfg.Regions
	}
	offers := []provider.Offer{}
	byID := make(map[string]*provider.Offer, len(resp.Offers))
	for _, w := range resp.Offers {
		detail, err := json.Marshal(offerDetail{OfferID: w.ID})
		if err != nil {
			return nil, provider.Errorf(provider.Failed, p.name, "plan", "encode offer detail: %w", err)
		}
		o := provider.Offer{
			Provider: p.name, Location: provider.Location{Region: w.Region, Zone: w.Zone},
			InstanceType: w.InstanceType, GPU: w.GPU, GPUCount: w.GPUCount, GPUMemoryGB: w.GPUMemoryGB,
			VCPUs: w.VCPUs, MemoryGB: w.MemoryGB, PricePerHour: w.PricePerHour, Spot: w.Spot, Detail: detail,
			InStock: w.Availability != "" && w.Availability != "none", // the sim's stock
			DiskGB:  w.DiskGB, Host: w.Host,
		}
		if g, err := provider.CanonicalGPU(w.GPU); err == nil {
			o.GPU = g
		}
		byID[w.ID] = &o
		if req.FlexStart > 0 && w.FlexStart && !w.Spot {
			// The offer queued: its create waits in the cloud's queue
			// and runs for at most FlexStart.
			o.MaxRunDuration = req.FlexStart
			o.Detail, _ = json.Marshal(offerDetail{OfferID: w.ID, MaxRunSeconds: int(math.Ceil(req.FlexStart.Seconds()))}) // plain struct
		}
		if r.Accepts(&o) {
			offers = append(offers, o)
		}
	}
	if (req.Reserved != provider.ForbidReserved || req.Reservation != "") && req.FlexStart == 0 {
		reserved, err := p.reservedOffers(&r, resp.Reservations, byID)
		if err != nil {
			return nil, err
		}
		offers = append(offers, reserved...)
	}
	slices.SortStableFunc(offers, func(a, b provider.Offer) int { return cmp.Compare(a.MarginalPrice(), b.MarginalPrice()) })
	return offers, nil
}

// reservedOffers returns an offer for each of the account's reservations
// (listed with its catalog) that req accepts: its catalog offer with the
// reservation on it. A reservation req names that holds another shape, or
// lies outside the request's regions or zones, is an InvalidRequest error
// naming it; one that has ended is returned with its end, for the core to
// leave out and say so.
func (p *Provider) reservedOffers(req *provider.ResourceRequest, listed []wireReservation, catalog map[string]*provider.Offer) ([]provider.Offer, error) {
	var out []provider.Offer
	for _, w := range listed {
		base := catalog[w.OfferID]
		if base == nil {
			continue // not in the catalog it listed a moment ago
		}
		o := *base
		o.Reservation = &provider.Reservation{ID: w.ID, Targeted: w.Targeted, Total: w.Count, Free: max(w.Count-w.InUse, 0), Ends: w.EndsAt}
		if w.Reclaims != "" {
			if d, err := time.ParseDuration(w.Reclaims); err == nil {
				o.Reservation.Reclaims = d
			}
		}
		o.InStock = o.Reservation.Free > 0 && w.State == "active"
		detail, err := json.Marshal(offerDetail{OfferID: w.OfferID, ReservationID: w.ID})
		if err != nil {
			return nil, provider.Errorf(provider.Failed, p.name, "plan", "encode offer detail: %w", err)
		}
		o.Detail = detail
		if w.ID == req.Reservation {
			if why := mismatch(req, &o); why != "" {
				return nil, provider.Errorf(provider.InvalidRequest, p.name, "plan", "reservation %s holds %s (%s×%d) in %s, %s", w.ID, o.InstanceType, o.GPU, o.GPUCount, o.Location, why)
			}
		}
		if req.Accepts(&o) {
			out = append(out, o)
		}
	}
	return out, nil
}

// mismatch says why a reserved offer does not fit req's shape or place.
func mismatch(req *provider.ResourceRequest, o *provider.Offer) string {
	switch {
	case req.GPU != "" && req.GPU != o.GPU, req.GPUCount > 0 && req.GPUCount != o.GPUCount:
		return fmt.Sprintf("not %s×%d", req.GPU, req.GPUCount)
	case len(req.Regions) > 0 && !slices.Contains(req.Regions, o.Location.Region):
		return fmt.Sprintf("outside the regions asked for (%v)", req.Regions)
	case len(req.Zones) > 0 && !slices.Contains(req.Zones, o.Location.Zone):
		return fmt.Sprintf("outside the zones asked for (%v)", req.Zones)
	}
	return ""
}

// Quotas reads the account's GPU quotas in region (GET quotas): one
// limit per GPU model, or for every model, with what is in use.
func (p *Provider) Quotas(ctx context.Context, region string) ([]provider.QuotaLimit, error) {
	var resp struct {
		Quotas []wireQuota `json:"quotas"`
	}
	if err := p.do(ctx, call{op: "quotas", method: http.MethodGet, path: "quotas", query: url.Values{"region": {region}}, out: &resp}); err != nil {
		return nil, err
	}
	out := make([]provider.QuotaLimit, 0, len(resp.Quotas))
	for _, w := range resp.Quotas {
		q := provider.QuotaLimit{Name: w.Name, What: "GPUs", Region: w.Region, Unit: provider.QuotaGPUs,
			Limit: float64(w.Limit), Usage: float64(w.Usage), UsageKnown: true}
		if w.GPU != "" {
			g, err := provider.CanonicalGPU(w.GPU)
			if err != nil {
				g = w.GPU
			}
			q.GPUs, q.What = []string{g}, g+" GPUs"
		}
		out = append(out, q)
	}
	return out, nil
}

// Prepare puts the installation's shared firewall for the VM's ports (SSH
// plus spec.OpenPorts; see provider.SharedCleaner) and sources
// (provider.SourcesFor of spec.SourceRanges and Config.SourceRanges) in
// the offer's region, unless this adapter already did, and, when spec has
// authorized keys, the VM's SSH key. Both PUTs are idempotent, so a second
// Prepare adopts what the first made.
func (p *Provider) Prepare(ctx context.Context, offer *provider.Offer, spec *provider.InstanceSpec) (json.RawMessage, error) {
	name := provider.ResourceName(spec.VM)
	fw, err := p.sharedFirewall(ctx, offer.Location.Region, spec.OpenPorts, provider.SourcesFor(spec, p.cfg.SourceRanges))
	if err != nil {
		return nil, err
	}
	prep := prepared{Region: offer.Location.Region, Firewall: fw}
	if len(spec.AuthorizedKeys) > 0 {
		if err := p.do(ctx, call{op: "prepare", method: http.MethodPut, path: "ssh-keys/" + url.PathEscape(name),
			in: wireSSHKey{PublicKeys: spec.AuthorizedKeys, Labels: spec.Labels()}}); err != nil {
			return nil, err
		}
		prep.SSHKey = name
	}
	b, err := json.Marshal(prep)
	if err != nil {
		return nil, provider.Errorf(provider.Failed, p.name, "prepare", "encode: %w", err)
	}
	return b, nil
}

// Create sends one create request for offer, named and labelled with the
// VM identity, with the cloud-init user-data (host key, authorized keys)
// and the idempotency token. A lost answer, a timeout or a 5xx is Transient:
// the instance may have landed, and Observe finds it by its labels.
func (p *Provider) Create(ctx context.Context, offer *provider.Offer, prep json.RawMessage, spec *provider.InstanceSpec) (string, error) {
	var d offerDetail
	if err := json.Unmarshal(offer.Detail, &d); err != nil || d.OfferID == "" {
		return "", provider.Errorf(provider.InvalidRequest, p.name, "create", "offer has no sim offer id in its detail (%s)", offer.Detail)
	}
	var pr prepared
	if len(prep) > 0 {
		if err := json.Unmarshal(prep, &pr); err != nil {
			return "", provider.Errorf(provider.InvalidRequest, p.name, "create", "malformed prepared data: %w", err)
		}
	}
	req := wireCreate{
		OfferID: d.OfferID, Name: provider.ResourceName(spec.VM), Labels: spec.Labels(), DiskGB: offer.DiskGB,
		UserData: provider.CloudInit(spec), SSHUser: spec.SSHUser, SSHKey: pr.SSHKey, Firewall: pr.Firewall,
		PlacementGroup: spec.PlacementGroup, ReservationID: d.ReservationID, MaxRunSeconds: d.MaxRunSeconds,
	}
	if !p.cfg.NoIdempotencyToken {
		req.IdempotencyToken = spec.IdempotencyToken
	}
	var in wireInstance
	if err := p.do(ctx, call{op: "create", method: http.MethodPost, path: "instances", in: req, out: &in}); err != nil {
		if IsAPIError(err, "unknown_firewall") {
			p.forgetFirewall(pr.Region, pr.Firewall)
			return "", &provider.Error{Kind: provider.Transient, Provider: p.name, Op: "create",
				Err: fmt.Errorf("firewall %s in %s: %w: %w", pr.Firewall, pr.Region, provider.ErrSharedGone, apiError(err))}
		}
		return "", err
	}
	if in.ID == "" {
		return "", provider.Errorf(provider.Transient, p.name, "create", "answer carries no instance id")
	}
	p.log.Info("sim: created", "provider", p.name, "vm", spec.VM, "instance", in.ID, "offer", d.OfferID)
	return in.ID, nil
}

// Observe lists the instances in loc carrying both identity labels of vm,
// every page, and normalizes their status.
func (p *Provider) Observe(ctx context.Context, loc provider.Location, vm string) ([]provider.Observed, error) {
	q := url.Values{"label": {provider.LabelVM + "=" + vm, provider.LabelInstallation + "=" + p.installation}}
	ins, err := p.list(ctx, "observe", loc, q)
	if err != nil {
		return nil, err
	}
	out := make([]provider.Observed, 0, len(ins))
	for _, in := range ins {
		if in.Labels[provider.LabelVM] == vm && in.Labels[provider.LabelInstallation] == p.installation {
			out = append(out, observed(in))
		}
	}
	return out, nil
}

// list pages through GET instances with q in loc, Config.ListPageSize
// instances a page.
func (p *Provider) list(ctx context.Context, op string, loc provider.Location, q url.Values) ([]wireInstance, error) {
	q.Set("limit", strconv.Itoa(p.cfg.ListPageSize))
	if loc.Region != "" {
		q.Set("region", loc.Region)
	}
	if loc.Zone != "" {
		q.Set("zone", loc.Zone)
	}
	var all []wireInstance
	for {
		var page struct {
			Instances  []wireInstance `json:"instances"`
			NextCursor string         `json:"next_cursor"`
		}
		if err := p.do(ctx, call{op: op, method: http.MethodGet, path: "instances", query: q, out: &page}); err != nil {
			return nil, err
		}
		all = append(all, page.Instances...)
		if page.NextCursor == "" {
			return all, nil
		}
		q.Set("cursor", page.NextCursor)
	}
}

// observed normalizes a wire instance.
func observed(in wireInstance) provider.Observed {
	o := provider.Observed{
		ID: in.ID, VM: in.Labels[provider.LabelVM], Status: status(in.Status), PublicIP: in.PublicIP,
		Location: provider.Location{Region: in.Region, Zone: in.Zone}, InstanceType: in.InstanceType,
		Created: in.CreatedAt, VendorStatus: in.Status, Host: in.HostID, Queued: in.Status == "queued",
	}
	if o.Status == provider.StatusRunning && in.SSH != nil && in.SSH.Port > 0 {
		o.SSH = &provider.SSHEndpoint{Host: in.SSH.Host, Port: in.SSH.Port, User: in.SSH.User}
	}
	return o
}

// status maps a vendor status to the normalized one.
func status(vendor string) provider.InstanceStatus {
	switch vendor {
	case "queued", "provisioning", "booting":
		return provider.StatusPending
	case "running":
		return provider.StatusRunning
	case "failed", "preempted":
		return provider.StatusFailed
	case "stopping":
		return provider.StatusStopping
	case "terminated":
		return provider.StatusTerminated
	}
	return provider.StatusUnknown
}

// Delete requests the deletion of every id; an unknown id is success. It
// tries them all and returns the first error.
func (p *Provider) Delete(ctx context.Context, loc provider.Location, vm string, ids []string) error {
	var first error
	for _, id := range ids {
		err := p.do(ctx, call{op: "delete", method: http.MethodDelete, path: "instances/" + url.PathEscape(id)})
		if err != nil && !isNotFound(err) && first == nil {
			first = err
		}
	}
	return first
}

// Cleanup deletes the VM's SSH key; what is already gone is success. The
// firewall is the installation's, shared (see CleanupShared).
func (p *Provider) Cleanup(ctx context.Context, loc provider.Location, vm string) error {
	err := p.do(ctx, call{op: "cleanup", method: http.MethodDelete, path: "ssh-keys/" + url.PathEscape(provider.ResourceName(vm))})
	if err != nil && !isNotFound(err) {
		return err
	}
	return nil
}

// EnsurePlacementGroup puts the placement group name in loc's region; the
// PUT is idempotent, so a second call adopts the group.
func (p *Provider) EnsurePlacementGroup(ctx context.Context, loc provider.Location, name string, labels map[string]string) error {
	return p.do(ctx, call{op: "prepare", method: http.MethodPut, path: "placement-groups/" + url.PathEscape(name),
		query: url.Values{"region": {loc.Region}}, in: wirePlacementGroup{Labels: labels}})
}

// DeletePlacementGroup deletes the placement group name in loc's region: a
// group that is gone is success, one an instance still uses (409 conflict)
// matches provider.ErrInUse.
func (p *Provider) DeletePlacementGroup(ctx context.Context, loc provider.Location, name string) error {
	err := p.do(ctx, call{op: "cleanup", method: http.MethodDelete, path: "placement-groups/" + url.PathEscape(name),
		query: url.Values{"region": {loc.Region}}})
	switch {
	case err == nil || isNotFound(err):
		return nil
	case IsAPIError(err, "conflict"):
		return &provider.Error{Kind: provider.Transient, Provider: p.name, Op: "cleanup",
			Err: fmt.Errorf("placement group %s in %s: %w: %w", name, loc.Region, provider.ErrInUse, apiError(err))}
	}
	return err
}
