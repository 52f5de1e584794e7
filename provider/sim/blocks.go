package sim

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/org/gpuprov/provider"
)

// LabelAttempt labels a bought block with the attempt that bought it, so
// that FindBlock tells one attempt's purchase from another's.
const LabelAttempt = "gpuprov-attempt"

// wireBlockOffering is an offering of GET block-offerings.
type wireBlockOffering struct {
	ID         string    `json:"id"`
	OfferID    string    `json:"offer_id"`
	Count      int       `json:"count"`
	Start      time.Time `json:"start"`
	End        time.Time `json:"end"`
	UpfrontFee float64   `json:"upfront_fee"`
	Reclaims   string    `json:"reclaims"`
}

// blockDetail is a block offer's Detail: what PurchaseBlock and Create need.
type blockDetail struct {
	OfferID    string `json:"offer_id"`
	OfferingID string `json:"offering_id"`
	// ReservationID, once bought, is the block's reservation.
	ReservationID string `json:"reservation_id,omitempty"`
	Reclaims      string `json:"reclaims,omitempty"`
}

// BlockOfferings lists the cloud's block offerings of q's duration and
// count that start before q.StartBefore (GET block-offerings) and returns
// those req accepts, each as its catalog offer with the block on it.
func (p *Provider) BlockOfferings(ctx context.Context, req *provider.ResourceRequest, q provider.BlockQuery) ([]provider.Offer, error) {
	catalog, err := p.Plan(ctx, &provider.ResourceRequest{GPU: req.GPU, GPUCount: req.GPUCount, Regions: req.Regions, Zones: req.Zones, Reserved: provider.ForbidReserved})
	if err != nil {
		return nil, err
	}
	byType := map[string]provider.Offer{}
	for _, o := range catalog {
		var d offerDetail
		if json.Unmarshal(o.Detail, &d) == nil {
			byType[d.OfferID] = o
		}
	}
	query := url.Values{"duration": {q.Duration.String()}, "count": {strconv.Itoa(max(q.Count, 1))}}
	if !q.StartBefore.IsZero() {
		query.Set("start_before", q.StartBefore.UTC().Format(time.RFC3339))
	}
	var resp struct {
		Offerings []wireBlockOffering `json:"block_offerings"`
	}
	if err := p.do(ctx, call{op: "plan", method: http.MethodGet, path: "block-offerings", query: query, out: &resp}); err != nil {
		return nil, err
	}
	var out []provider.Offer
	for _, w := range resp.Offerings {
		o, ok := byType[w.OfferID]
		if !ok {
			continue // another shape or place than req's
		}
		o.Block = &provider.Block{Offering: w.ID, Count: w.Count, Start: w.Start, End: w.End, UpfrontFee: w.UpfrontFee}
		o.InStock = true
		o.Detail, _ = json.Marshal(blockDetail{OfferID: w.OfferID, OfferingID: w.ID, Reclaims: w.Reclaims}) // plain struct
		if req.Accepts(&o) {
			out = append(out, o)
		}
	}
	return out, nil
}

// PurchaseBlock buys offer's block (POST block-purchases), labelled with
// spec's identity and attempt, and returns the offer that launches into it.
func (p *Provider) PurchaseBlock(ctx context.Context, offer *provider.Offer, spec *provider.InstanceSpec) (provider.Offer, error) {
	var d blockDetail
	if err := json.Unmarshal(offer.Detail, &d); err != nil || d.OfferingID == "" || offer.Block == nil {
		return provider.Offer{}, provider.Errorf(provider.InvalidRequest, p.name, "purchase", "offer carries no sim block offering (%s)", offer.Detail)
	}
	var w wireReservation
	body := map[string]any{"offering_id": d.OfferingID, "labels": blockLabels(spec)}
	if err := p.do(ctx, call{op: "purchase", method: http.MethodPost, path: "block-purchases", in: body, out: &w}); err != nil {
		return provider.Offer{}, err
	}
	if w.ID == "" {
		return provider.Offer{}, provider.Errorf(provider.Transient, p.name, "purchase", "answer carries no reservation id")
	}
	p.log.Info("sim: bought block", "provider", p.name, "vm", spec.VM, "reservation", w.ID, "offering", d.OfferingID,
		"upfront_fee", offer.Block.UpfrontFee)
	return bought(offer, d, w), nil
}

// FindBlock looks for the block bought for spec's VM and attempt (GET
// reservations by its labels).
func (p *Provider) FindBlock(ctx context.Context, offer *provider.Offer, spec *provider.InstanceSpec) (*provider.Offer, error) {
	var d blockDetail
	if err := json.Unmarshal(offer.Detail, &d); err != nil || d.OfferingID == "" {
		return nil, provider.Errorf(provider.InvalidRequest, p.name, "purchase", "offer carries no sim block offering (%s)", offer.Detail)
	}
	q := url.Values{"region": {offer.Location.Region}}
	for _, k := range []string{provider.LabelVM, provider.LabelInstallation, LabelAttempt} {
		q.Add("label", k+"="+blockLabels(spec)[k])
	}
	var resp struct {
		Reservations []wireReservation `json:"reservations"`
	}
	if err := p.do(ctx, call{op: "purchase", method: http.MethodGet, path: "reservations", query: q, out: &resp}); err != nil {
		return nil, err
	}
	if len(resp.Reservations) == 0 {
		return nil, nil
	}
	o := bought(offer, d, resp.Reservations[0])
	return &o, nil
}

func blockLabels(spec *provider.InstanceSpec) map[string]string {
	l := spec.Labels()
	l[LabelAttempt] = strconv.Itoa(spec.Attempt)
	return l
}

// bought is offer once its block is bought as reservation w.
func bought(offer *provider.Offer, d blockDetail, w wireReservation) provider.Offer {
	o := *offer
	b := *offer.Block
	o.Block = &b
	o.Reservation = &provider.Reservation{ID: w.ID, Targeted: true, Total: w.Count, Free: max(w.Count-w.InUse, 0), Ends: w.EndsAt}
	if r, err := time.ParseDuration(w.Reclaims); err == nil {
		o.Reservation.Reclaims = r
	}
	o.Detail, _ = json.Marshal(offerDetail{OfferID: d.OfferID, ReservationID: w.ID}) // plain struct
	return o
}
