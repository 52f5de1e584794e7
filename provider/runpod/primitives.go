package runpod

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/org/gpuprov/provider"
)

// offerDetail is Offer.Detail: RunPod's own ids for the create.
type offerDetail struct {
	GPUTypeID    string `json:"gpuTypeId"`
	Count        int    `json:"count"`
	Cloud        string `json:"cloud"`
	DataCenterID string `json:"dataCenterId"`
	Availability string `json:"availability"`
}

var availRank = map[string]int{"HIGH": 0, "MEDIUM": 1, "LOW": 2}

// Plan reads GET /catalog/gpus?include=AVAILABILITY&product=POD&count=N once
// per configured cloud tier, RunPod's live catalog with pod stock per data
// center, and returns one offer per (GPU type, cloud, data center) whose
// stock is not NONE. A data center is the offer's region. RunPod's prices
// are per GPU and multiplied by the count. Cheapest first; equal prices by
// stock. Listed stock does not guarantee placement: a create can still
// answer CapacityText.
func (p *Provider) Plan(ctx context.Context, req *provider.ResourceRequest) ([]provider.Offer, error) {
	count := max(req.GPUCount, 1)
	r := *req
	if len(r.Regions) == 0 {
		r.Regions = p.cfg.Regions
	}
	offers := []provider.Offer{}
	for _, cloud := range p.cfg.Clouds {
		q := url.Values{"include": {"AVAILABILITY"}, "product": {"POD"}, "count": {strconv.Itoa(count)}, "cloud": {cloud}}
		var out struct {
			GPUs []wireGPUType `json:"gpus"`
		}
		if err := p.call(ctx, "plan", http.MethodGet, "/catalog/gpus", q, nil, &out); err != nil {
			return nil, err
		}
		for _, g := range out.GPUs {
			model, ok := provider.LookupGPU(g.ID)
			if !ok {
				model, ok = provider.LookupGPU(g.Name)
			}
			if !ok {
				continue
			}
			price, maxCount, offered := g.Price.Secure, g.MaxCount.Secure, g.Secure
			if cloud == "COMMUNITY" {
				price, maxCount, offered = g.Price.Community, g.MaxCount.Community, g.Community
			}
			if !offered || price <= 0 || (maxCount > 0 && count > maxCount) {
				continue
			}
			for _, dc := range g.DataCenters {
				if dc.Availability == "NONE" || dc.Availability == "" {
					continue
				}
				detail, err := json.Marshal(offerDetail{GPUTypeID: g.ID, Count: count, Cloud: cloud, DataCenterID: dc.ID, Availability: dc.Availability})
				if err != nil {
					return nil, provider.Errorf(provider.Failed, p.base.Name, "plan", "encode offer detail: %w", err)
				}
				o := provider.Offer{
					Provider: p.base.Name, Location: provider.Location{Region: dc.ID},
					InstanceType: fmt.Sprintf("%s x%d %s", g.ID, count, strings.ToLower(cloud)),
					GPU:          model.Name, GPUCount: count, GPUMemoryGB: cmp.Or(g.Memory, model.MemoryGB),
					PricePerHour: price * float64(count), Detail: detail,
					DiskGB:  p.cfg.DiskGB, // the container disk ("disk", BaseContainerConfig); Create sizes it to the request's
					InStock: dc.Availability != "",
				}
				if r.Accepts(&o) {
					offers = append(offers, o)
				}
			}
		}
	}
	slices.SortStableFunc(offers, func(a, b provider.Offer) int {
		return cmp.Or(cmp.Compare(a.PricePerHour, b.PricePerHour), cmp.Compare(rankOf(a), rankOf(b)))
	})
	return offers, nil
}

func rankOf(o provider.Offer) int {
	var d offerDetail
	_ = json.Unmarshal(o.Detail, &d) // Plan wrote it; a zero detail ranks first, harmlessly
	return availRank[d.Availability]
}

// Prepare makes nothing: RunPod has no per-pod key registration (the
// account-wide key set is shared and never touched; keys reach the pod in
// its PUBLIC_KEY environment) and no per-pod firewall. It checks there is a
// key to install.
func (p *Provider) Prepare(ctx context.Context, offer *provider.Offer, spec *provider.InstanceSpec) (json.RawMessage, error) {
	if len(spec.AuthorizedKeys) == 0 {
		return nil, provider.Errorf(provider.InvalidRequest, p.base.Name, "prepare", "the spec has no authorized key to install on the pod")
	}
	return json.RawMessage(`{}`), nil
}

// Create first lists the pods and adopts one that already carries the VM's
// identity (RunPod has no idempotency key). Otherwise it sends one
// POST /pods named gpuprov-<vm>, with the identity and the authorized keys
// (PUBLIC_KEY) in its environment, 22/tcp exposed, the offer's GPU type,
// count, cloud and data center. The answer's pod id is returned.
//
// With a volume (InstanceSpec.Volumes, at most one) it first reads the
// network volume (GET /network-volumes/{id}) and the create carries
// mounts.network [{volumeId, path: the VolumeMount's MountPath}], placed in
// the volume's data center; volumes a pod cannot take (two, a Community
// Cloud offer) are refused before any request (checkMounts, volume.go).
func (p *Provider) Create(ctx context.Context, offer *provider.Offer, _ json.RawMessage, spec *provider.InstanceSpec) (string, error) {
	var d offerDetail
	if err := json.Unmarshal(offer.Detail, &d); err != nil || d.GPUTypeID == "" || d.Count == 0 {
		return "", provider.Errorf(provider.InvalidRequest, p.base.Name, "create", "offer has no RunPod GPU type in its detail (%s)", offer.Detail)
	}
	if err := p.checkMounts(d, spec); err != nil {
		return "", err
	}
	obs, err := p.Observe(ctx, offer.Location, spec.VM)
	if err != nil {
		return "", err
	}
	for _, o := range obs {
		if o.Status == provider.StatusPending || o.Status == provider.StatusRunning {
			p.base.Log.Info("runpod: adopted existing pod", "provider", p.base.Name, "vm", spec.VM, "pod", o.ID)
			return o.ID, nil
		}
	}
	in := wireCreate{
		Name: provider.ResourceName(spec.VM), Image: cmp.Or(spec.Image, p.cfg.Image),
		GPU: wireGPU{ID: d.GPUTypeID, Count: d.Count}, Cloud: d.Cloud, Ports: []string{"22/tcp"}, Disk: max(p.cfg.DiskGB, offer.DiskGB),
		Env: map[string]string{EnvVM: spec.VM, EnvInstallation: p.base.Installation, "PUBLIC_KEY": strings.Join(spec.AuthorizedKeys, "\n")},
	}
	if d.DataCenterID != "" {
		in.DataCenterIDs = []string{d.DataCenterID}
	}
	volume := ""
	if len(spec.Volumes) == 1 {
		mounts, dc, err := p.createMount(ctx, d, spec.Volumes[0])
		if err != nil {
			return "", err
		}
		in.Mounts, in.DataCenterIDs, volume = mounts, []string{dc}, spec.Volumes[0].ID
	}
	var out wirePod
	if err := p.call(ctx, "create", http.MethodPost, "/pods", nil, in, &out); err != nil {
		return "", err
	}
	if out.ID == "" {
		return "", provider.Errorf(provider.Transient, p.base.Name, "create", "create answer carries no pod id")
	}
	p.base.Log.Info("runpod: created pod", "provider", p.base.Name, "vm", spec.VM, "pod", out.ID, "gpu", d.GPUTypeID, "data_center", strings.Join(in.DataCenterIDs, ","), "volume", volume)
	return out.ID, nil
}

// Observe lists the pods (GET /pods) and returns those named gpuprov-<vm>
// whose environment carries vm and this installation, in loc's data center
// when the pod has one.
func (p *Provider) Observe(ctx context.Context, loc provider.Location, vm string) ([]provider.Observed, error) {
	pods, err := p.listPods(ctx, "observe")
	if err != nil {
		return nil, err
	}
	out := []provider.Observed{}
	for _, pod := range pods {
		if pod.Name != provider.ResourceName(vm) || pod.Env[EnvVM] != vm || pod.Env[EnvInstallation] != p.base.Installation {
			continue
		}
		if loc.Region != "" && pod.DataCenterID != "" && pod.DataCenterID != loc.Region {
			continue
		}
		if o := observed(pod); o.Status != provider.StatusTerminated {
			out = append(out, o)
		}
	}
	return out, nil
}

// sshPort returns the public address of the pod's 22/tcp, once mapped.
func sshPort(pod wirePod) (string, int, bool) {
	if pod.Runtime == nil {
		return "", 0, false
	}
	for _, pt := range pod.Runtime.Ports {
		if pt.Private == 22 && pt.Type == "tcp" && pt.Public != nil && *pt.Public > 0 && pt.IP != nil && *pt.IP != "" {
			return *pt.IP, *pt.Public, true
		}
	}
	return "", 0, false
}

func observed(pod wirePod) provider.Observed {
	o := provider.Observed{ID: pod.ID, VM: pod.Env[EnvVM], Status: status(pod), VendorStatus: pod.Status,
		Location: provider.Location{Region: pod.DataCenterID}}
	if pod.GPU != nil {
		o.InstanceType = fmt.Sprintf("%s x%d %s", pod.GPU.ID, pod.GPU.Count, strings.ToLower(pod.Cloud))
	}
	if t, err := time.Parse(time.RFC3339Nano, pod.CreatedAt); err == nil {
		o.Created = t
	}
	if host, port, ok := sshPort(pod); ok {
		o.PublicIP = host
		if o.Status == provider.StatusRunning {
			o.SSH = &provider.SSHEndpoint{Host: host, Port: port, User: "root"}
		}
	}
	return o
}

// status maps a pod to the normalized status: RUNNING before its 22/tcp has
// a public port is Pending; EXITED (stopped, or an interrupted pod) and
// ERROR are Failed.
func status(pod wirePod) provider.InstanceStatus {
	switch pod.Status {
	case "PROVISIONING", "STARTING":
		return provider.StatusPending
	case "RUNNING":
		if _, _, ok := sshPort(pod); ok {
			return provider.StatusRunning
		}
		return provider.StatusPending
	case "EXITED", "ERROR":
		return provider.StatusFailed
	case "TERMINATED":
		return provider.StatusTerminated
	}
	return provider.StatusUnknown
}

// Delete sends DELETE /pods/{id} for each id; a 404 is success.
func (p *Provider) Delete(ctx context.Context, loc provider.Location, vm string, ids []string) error {
	var first error
	for _, id := range ids {
		err := p.call(ctx, "delete", http.MethodDelete, "/pods/"+url.PathEscape(id), nil, nil, nil)
		if err != nil && !isGone(err) && first == nil {
			first = err
		}
	}
	return first
}

// Cleanup has nothing to delete: Prepare makes no side resources on RunPod.
func (p *Provider) Cleanup(ctx context.Context, loc provider.Location, vm string) error { return nil }
