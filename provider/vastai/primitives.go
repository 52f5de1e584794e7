package vastai

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/org/gpuprov/internal/redact"
	"github.com/org/gpuprov/provider"
)

// offerDetail is Offer.Detail: the ask Create accepts and what Plan saw of it.
type offerDetail struct {
	AskID        int64   `json:"ask_id"`
	MachineID    int64   `json:"machine_id"`
	HostID       int64   `json:"host_id"`
	GPUName      string  `json:"gpu_name"`
	NumGPUs      int     `json:"num_gpus"`
	Geolocation  string  `json:"geolocation"`
	Reliability  float64 `json:"reliability"`
	Verification string  `json:"verification"`
}

// searchLimit is how many offers one search returns.
const searchLimit = 64

// Plan sends one POST /api/v0/bundles/ (searchOffers) for rentable,
// on-demand asks of exactly GPUCount GPUs named as Vast names req.GPU, with
// the configured reliability floor, verification, countries, price cap and
// disk, cheapest first (dph_total, which prices in the disk). Each ask is
// one offer: its country is the region, its machine the zone
// ("machine-<id>"), so a stockout blocks that machine only. Offers whose
// name and memory are not req.GPU (provider.CanonicalGPU and the family
// member nearest gpu_ram) are dropped, as are any the answer returns
// outside the filters. A GPU Vast has no name for, or a spot-only request, has no offers and
// sends no search.
func (p *Provider) Plan(ctx context.Context, req *provider.ResourceRequest) ([]provider.Offer, error) {
	offers := []provider.Offer{}
	names := searchNames[req.GPU]
	if req.GPU != "" && len(names) == 0 || req.Spot == provider.SpotOnly {
		return offers, nil // no Vast name for the GPU; interruptible bids are not offered
	}
	count := max(req.GPUCount, 1)
	r := *req
	if len(r.Regions) == 0 {
		r.Regions = p.cfg.Regions
	}
	disk := max(p.cfg.DiskGB, req.DiskGB)
	q := map[string]any{
		"rentable": filter{"eq": true}, "rented": filter{"eq": false}, "external": filter{"eq": false},
		"num_gpus": filter{"eq": count}, "reliability": filter{"gte": p.cfg.MinReliability},
		"disk_space": filter{"gte": disk}, "allocated_storage": disk, "limit": searchLimit,
		"order": [][]string{{"dph_total", "asc"}, {"reliability", "desc"}},
	}
	if *p.cfg.VerifiedOnly {
		// Left out, the search takes unverified machines too, as the CLI's
		// verified=any leaves it out (unconfirmed: the document gives
		// verified a default of {eq: true}).
		q["verified"] = filter{"eq": true}
	}
	if len(names) > 0 {
		q["gpu_name"] = filter{"in": names}
	}
	if len(r.Regions) > 0 {
		q["geolocation"] = filter{"in": r.Regions}
	}
	if req.MaxPricePerHour > 0 {
		q["dph_total"] = filter{"lte": req.MaxPricePerHour}
	}
	var out struct {
		Offers []wireOffer `json:"offers"`
	}
	if err := p.call(ctx, "plan", http.MethodPost, "/api/v0/bundles/", nil, q, &out); err != nil {
		return nil, err
	}
	for _, w := range out.Offers {
		o, ok := p.offer(w, disk)
		if ok && r.Accepts(&o) {
			offers = append(offers, o)
		}
	}
	slices.SortStableFunc(offers, func(a, b provider.Offer) int {
		return cmp.Or(cmp.Compare(a.PricePerHour, b.PricePerHour), -cmp.Compare(reliabilityOf(a), reliabilityOf(b)))
	})
	return offers, nil
}

// offer converts one ask, or reports false for one outside the configured
// filters or with no canonical GPU.
func (p *Provider) offer(w wireOffer, disk int) (provider.Offer, bool) {
	model, ok := canonical(w.GPUName, w.GPURAM)
	rel := cmp.Or(w.Reliability, w.Reliability2)
	// The search filtered on these; an answer that says otherwise is
	// dropped, one that leaves a field out is taken at the search's word.
	if !ok || w.ID == 0 || w.Rentable != nil && !*w.Rentable || w.IsBid || w.NumGPUs <= 0 || w.DPHTotal <= 0 ||
		rel > 0 && rel < p.cfg.MinReliability || *p.cfg.VerifiedOnly && w.Verification != "" && w.Verification != "verified" {
		return provider.Offer{}, false
	}
	detail, err := json.Marshal(offerDetail{AskID: w.ID, MachineID: w.MachineID, HostID: w.HostID, GPUName: w.GPUName,
		NumGPUs: w.NumGPUs, Geolocation: w.Geolocation, Reliability: rel, Verification: w.Verification})
	if err != nil {
		return provider.Offer{}, false // a struct of strings and numbers always encodes
	}
	memGB := w.CPURAM / 1024
	if w.GPUFrac > 0 && w.GPUFrac < 1 {
		memGB *= w.GPUFrac // RAM is allocated in proportion to the GPUs rented
	}
	return provider.Offer{
		Provider: p.base.Name, Location: provider.Location{Region: country(w.Geolocation), Zone: machineZone(w.MachineID)},
		InstanceType: fmt.Sprintf("%s x%d", w.GPUName, w.NumGPUs), GPU: model.Name, GPUCount: w.NumGPUs, GPUMemoryGB: model.MemoryGB,
		VCPUs: int(w.CPUCoresEffective), MemoryGB: math.Floor(memGB), PricePerHour: w.DPHTotal,
		DiskGB: disk, MaxDiskGB: int(w.DiskSpace), InStock: true, Host: idString(w.MachineID), Detail: detail,
	}, true
}

func reliabilityOf(o provider.Offer) float64 {
	var d offerDetail
	_ = json.Unmarshal(o.Detail, &d) // Plan wrote it; a zero detail sorts last, harmlessly
	return d.Reliability
}

// country is the region of a geolocation: its last comma-separated part,
// the two-letter code in an offer ("Texas, US" → US); "unknown" for none.
func country(geo string) string {
	i := strings.LastIndex(geo, ",")
	return cmp.Or(strings.TrimSpace(geo[i+1:]), "unknown")
}

// machineZone is the zone of a host machine.
func machineZone(id int64) string { return "machine-" + idString(id) }

// Prepare makes nothing: the keys travel in the onstart script, and the
// account's SSH keys are shared, so they are never touched. It checks, before
// any request, that there is a key to install, that the script and the
// label fit Vast's limits (InvalidRequest), and that the spec does not ask
// to restrict who connects, which Vast cannot do (Unavailable: another
// cloud may; the core plans no Vast offer for such a request anyway).
func (p *Provider) Prepare(ctx context.Context, offer *provider.Offer, spec *provider.InstanceSpec) (json.RawMessage, error) {
	if len(spec.SourceRanges) > 0 {
		return nil, provider.Errorf(provider.Unavailable, p.base.Name, "prepare",
			"source ranges %q: Vast cannot limit who connects to an instance's ports", spec.SourceRanges)
	}
	if len(spec.AuthorizedKeys) == 0 {
		return nil, provider.Errorf(provider.InvalidRequest, p.base.Name, "prepare", "the spec has no authorized key to install on the instance")
	}
	if _, err := p.label("prepare", spec.VM); err != nil {
		return nil, err
	}
	if _, err := onstart(spec, p.cfg.InjectHostKey); err != nil {
		return nil, provider.Errorf(provider.InvalidRequest, p.base.Name, "prepare", "%w", err)
	}
	return json.RawMessage(`{}`), nil
}

// label returns vm's label, or InvalidRequest when it is longer than the
// MaxLabel characters createInstance takes.
func (p *Provider) label(op, vm string) (string, error) {
	l := Label(vm, p.base.Installation)
	if n := utf8.RuneCountInString(l); n > MaxLabel {
		return "", provider.Errorf(provider.InvalidRequest, p.base.Name, op, "label %.40q… is %d characters; Vast takes at most %d", l, n, MaxLabel)
	}
	return l, nil
}

// Create first lists the instances labelled with the VM's identity on the
// offer's machine and adopts one that is not broken: Vast has no
// idempotency key, so a create whose answer was lost is found by its label
// rather than sent twice. Otherwise it sends one PUT /api/v0/asks/{ask}/
// with the image, the disk, the label gpuprov-<vm>.<installation>, the
// onstart script (authorized keys, and the host key with InjectHostKey),
// runtype ssh, target_state running and cancel_unavail, so that an ask
// that cannot start now answers instead of queueing. The answer's
// new_contract is the instance id. An ask another renter took since Plan
// answers no_such_ask: Capacity.
func (p *Provider) Create(ctx context.Context, offer *provider.Offer, _ json.RawMessage, spec *provider.InstanceSpec) (string, error) {
	var d offerDetail
	if err := json.Unmarshal(offer.Detail, &d); err != nil || d.AskID <= 0 {
		return "", provider.Errorf(provider.InvalidRequest, p.base.Name, "create", "offer has no Vast ask id in its detail (%s)", offer.Detail)
	}
	label, err := p.label("create", spec.VM)
	if err != nil {
		return "", err
	}
	script, err := onstart(spec, p.cfg.InjectHostKey)
	if err != nil {
		return "", provider.Errorf(provider.InvalidRequest, p.base.Name, "create", "%w", err)
	}
	obs, err := p.Observe(ctx, offer.Location, spec.VM)
	if err != nil {
		return "", err
	}
	for _, o := range obs {
		if o.Status == provider.StatusPending || o.Status == provider.StatusRunning {
			p.base.Log.Info("vastai: adopted existing instance", "provider", p.base.Name, "vm", spec.VM, "instance", o.ID)
			return o.ID, nil
		}
	}
	in := wireCreate{Image: cmp.Or(spec.Image, p.cfg.Image), Disk: float64(max(p.cfg.DiskGB, offer.DiskGB)), Label: label,
		Onstart: script, Runtype: "ssh", TargetState: "running", CancelUnavail: true}
	var out wireCreated
	if err := p.call(ctx, "create", http.MethodPut, "/api/v0/asks/"+strconv.FormatInt(d.AskID, 10)+"/", nil, in, &out); err != nil {
		return "", maskHostKey(err, spec)
	}
	if out.NewContract <= 0 {
		return "", provider.Errorf(provider.Transient, p.base.Name, "create", "create answer carries no new_contract (success %v)", out.Success)
	}
	id := idString(out.NewContract)
	p.base.Log.Info("vastai: created instance", "provider", p.base.Name, "vm", spec.VM, "instance", id, "ask", d.AskID, "machine", d.MachineID)
	return id, nil
}

// maskHostKey returns err, or, when its text holds a line of the private
// host key the onstart script carried (an answer echoing the request), err
// with those lines masked: the core journals error texts.
func maskHostKey(err error, spec *provider.InstanceSpec) error {
	var pe *provider.Error
	if spec.HostKey == nil || !errors.As(err, &pe) {
		return err
	}
	sec := redact.New(strings.Split(spec.HostKey.PrivatePEM, "\n")...)
	if !sec.Contains(pe.Error()) {
		return err
	}
	masked := *pe
	masked.Err = sec.Error(pe.Err)
	return &masked
}

// Observe lists the instances labelled gpuprov-<vm>.<installation> (GET
// /api/v1/instances/, select_filters {"label": {"eq": label}}, every page),
// on loc's machine when loc names one.
func (p *Provider) Observe(ctx context.Context, loc provider.Location, vm string) ([]provider.Observed, error) {
	label := Label(vm, p.base.Installation)
	insts, err := p.listInstances(ctx, "observe", map[string]filter{"label": {"eq": label}})
	if err != nil {
		return nil, err
	}
	out := []provider.Observed{}
	for _, in := range insts {
		if in.Label != label || !inZone(in, loc) {
			continue
		}
		if o := observed(in); o.Status != provider.StatusTerminated {
			out = append(out, o)
		}
	}
	return out, nil
}

// inZone reports whether in runs on loc's machine; a loc without a zone
// takes every machine (an instance's geolocation is not written the way an
// offer's is, so regions are not compared).
func inZone(in wireInstance, loc provider.Location) bool {
	return loc.Zone == "" || loc.Zone == machineZone(in.MachineID)
}

// sshEndpoint returns where the instance's sshd answers: the direct port
// (ports["22/tcp"] on public_ipaddr) when the host maps one, else Vast's
// SSH proxy (ssh_host:ssh_port), as the CLI's ssh-url does.
func sshEndpoint(in wireInstance) (string, int, bool) {
	if ip := strings.TrimSpace(in.PublicIPAddr); ip != "" {
		for _, b := range in.Ports["22/tcp"] {
			if port, err := strconv.Atoi(strings.TrimSpace(b.HostPort)); err == nil && port > 0 {
				return ip, port, true
			}
		}
	}
	if host := strings.TrimSpace(in.SSHHost); host != "" && in.SSHPort > 0 {
		return host, in.SSHPort, true
	}
	return "", 0, false
}

func observed(in wireInstance) provider.Observed {
	vm, _, _ := parseLabel(in.Label)
	o := provider.Observed{ID: idString(in.ID), VM: vm, Status: status(in), VendorStatus: vendorStatus(in),
		Location:     provider.Location{Region: country(in.Geolocation), Zone: machineZone(in.MachineID)},
		InstanceType: fmt.Sprintf("%s x%d", in.GPUName, in.NumGPUs), PublicIP: strings.TrimSpace(in.PublicIPAddr),
		Host: idString(in.MachineID)}
	if in.StartDate > 0 {
		o.Created = time.Unix(int64(in.StartDate), 0).UTC()
	}
	if host, port, ok := sshEndpoint(in); ok && o.Status == provider.StatusRunning {
		o.SSH = &provider.SSHEndpoint{Host: host, Port: port, User: "root"}
	}
	return o
}

func vendorStatus(in wireInstance) string {
	return cmp.Or(in.ActualStatus, "provisioning") + "/" + in.CurState
}

// status maps an instance to the normalized status, after Vast's table of
// actual_status (vast-ai/docs cli/reference/show-instances-v1.mdx): null,
// loading and rebooting are Pending, as is running before sshd has an
// address; exited, unknown (no heartbeat), offline (host disconnected),
// stopped and frozen never serve again on their own and are Failed. A
// contract whose cur_state is unloaded has been released: Terminated.
func status(in wireInstance) provider.InstanceStatus {
	if in.CurState == "unloaded" {
		return provider.StatusTerminated
	}
	switch in.ActualStatus {
	case "", "created", "loading", "rebooting":
		return provider.StatusPending
	case "running":
		if _, _, ok := sshEndpoint(in); ok {
			return provider.StatusRunning
		}
		return provider.StatusPending
	case "exited", "unknown", "offline", "stopped", "frozen":
		return provider.StatusFailed
	}
	return provider.StatusUnknown
}

// Delete sends DELETE /api/v0/instances/{id}/ (destroyInstance) for each
// id; a 404 is success, and so is an id that is no Vast instance id.
func (p *Provider) Delete(ctx context.Context, loc provider.Location, vm string, ids []string) error {
	var first error
	for _, s := range ids {
		id, ok := parseID(s)
		if !ok {
			continue // Vast never made an instance with this id
		}
		err := p.call(ctx, "delete", http.MethodDelete, "/api/v0/instances/"+url.PathEscape(idString(id))+"/", nil, nil, nil)
		if err != nil && !isGone(err) && first == nil {
			first = err
		}
	}
	return first
}

// Cleanup has nothing to delete: Prepare makes no per-VM resource on Vast
// (the keys live in the instance's onstart script, and the account's SSH
// keys, which every instance gets, are shared and left alone).
func (p *Provider) Cleanup(ctx context.Context, loc provider.Location, vm string) error { return nil }
