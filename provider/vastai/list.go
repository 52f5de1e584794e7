package vastai

import (
	"context"
	"slices"

	"github.com/org/gpuprov/provider"
)

// List returns every instance of this installation (label
// gpuprov-<vm>.<installation>), on loc's machine when loc names one: every
// page of GET /api/v1/instances/, the labels read client-side. The
// listing's filter operators (eq, neq, gt, gte, lt, lte, in, notin) cannot
// select a label by its suffix, and a prefix range would lean on a string
// order the document does not give, so the whole account is listed: a
// listing longer than the page cap fails (ErrListCap) instead of leaving
// the newest instances out. The core polls with ListNamed, which the
// server filters.
func (p *Provider) List(ctx context.Context, loc provider.Location) ([]provider.Observed, error) {
	insts, err := p.listInstances(ctx, "list", map[string]filter{})
	if err != nil {
		return nil, err
	}
	out := []provider.Observed{}
	for _, in := range insts {
		if _, inst, ok := parseLabel(in.Label); !ok || inst != p.base.Installation || !inZone(in, loc) {
			continue
		}
		if o := observed(in); o.Status != provider.StatusTerminated {
			out = append(out, o)
		}
	}
	return out, nil
}

// labelsPerList is the most labels one ListNamed request filters on, so
// that its query (about 90 characters a label, URL-encoded) stays near
// 2 KB: the listing takes its filters in the URL.
const labelsPerList = 25

// ListNamed implements provider.NameLister: what List returns, less the
// instances of VMs not in vms, filtered by Vast: GET /api/v1/instances/
// with select_filters {"label": {"in": [labels]}} (an operator the
// listing documents, and the CLI's show instances --label), every page, at
// most labelsPerList labels a request. Labels are matched again here.
func (p *Provider) ListNamed(ctx context.Context, loc provider.Location, vms []string) ([]provider.Observed, error) {
	out := []provider.Observed{}
	for names := range slices.Chunk(vms, labelsPerList) {
		labels := make([]string, len(names))
		for i, vm := range names {
			labels[i] = Label(vm, p.base.Installation)
		}
		insts, err := p.listInstances(ctx, "list", map[string]filter{"label": {"in": labels}})
		if err != nil {
			return nil, err
		}
		for _, in := range insts {
			if !slices.Contains(labels, in.Label) || !inZone(in, loc) {
				continue
			}
			if o := observed(in); o.Status != provider.StatusTerminated {
				out = append(out, o)
			}
		}
	}
	return out, nil
}
