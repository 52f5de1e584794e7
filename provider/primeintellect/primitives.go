package primeintellect

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/org/gpuprov/provider"
)

// offerDetail is Offer.Detail: Prime's own ids for the pod create.
type offerDetail struct {
	CloudID      string `json:"cloudId"`
	GPUType      string `json:"gpuType"`
	Socket       string `json:"socket"`
	GPUCount     int    `json:"gpuCount"`
	Provider     string `json:"provider"`
	DataCenterID string `json:"dataCenterId,omitempty"`
	Country      string `json:"country,omitempty"`
	Security     string `json:"security,omitempty"`
	Image        string `json:"image"`
	Stock        string `json:"stockStatus"`
}

// prepared is what Prepare returns and Create reads.
type prepared struct {
	SSHKeyID string `json:"sshKeyId"`
}

// stockRank orders equal prices by stock, best first.
var stockRank = map[string]int{"High": 0, "Medium": 1, "Available": 2, "Low": 3}

// Plan pages through GET /availability/gpus?gpu_count=N, Prime's live
// marketplace, and returns one offer per item whose GPU is canonical, whose
// stock is not "Unavailable", whose images include the image (the request's,
// else the configured one) and whose security and region are allowed. A
// request image outside pod.image's enum gets no offer and an Unavailable
// error naming the allowed values, before any request. Prices are per GPU-hour in the
// catalog and multiplied by the count. Cheapest first; equal prices by stock.
func (p *Provider) Plan(ctx context.Context, req *provider.ResourceRequest) ([]provider.Offer, error) {
	image := cmp.Or(req.Image, p.cfg.Image)
	if req.Image != "" {
		if err := checkImage(req.Image); err != nil {
			return nil, provider.Errorf(provider.Unavailable, p.base.Name, "plan", "image %w", err)
		}
	}
	items, err := p.availability(ctx, req.GPUCount)
	if err != nil {
		return nil, err
	}
	r := *req
	if len(r.Regions) == 0 {
		r.Regions = p.cfg.Regions
	}
	offers := []provider.Offer{}
	stock := map[string]string{}
	for _, it := range items {
		g, ok := provider.LookupGPU(it.GPUType)
		if !ok || it.StockStatus == "Unavailable" || it.GPUCount <= 0 {
			continue
		}
		if p.cfg.Security != "" && it.Security != p.cfg.Security {
			continue
		}
		if it.PrepaidTime != nil && *it.PrepaidTime > 0 {
			// Creating it charges PrepaidTime hours at once, used or not
			// ("pre-charged for the total number of hours ... regardless
			// of actual usage"): a purchase gpuprov makes only behind an
			// opt-in with a price cap (a capacity block), which this
			// adapter does not offer. Planning it at its hourly price
			// would hide that charge.
			continue
		}
		if !slices.Contains(it.Images, image) {
			continue
		}
		price := it.Prices.OnDemand
		if it.Security == "community_cloud" && it.Prices.CommunityPrice != nil {
			price = it.Prices.CommunityPrice
		}
		if price == nil {
			price = it.Prices.CommunityPrice
		}
		if price == nil || (it.Prices.Currency != "" && it.Prices.Currency != "USD") {
			continue
		}
		region := cmp.Or(it.Region, strings.ToLower(it.Country), "global")
		d := offerDetail{CloudID: it.CloudID, GPUType: it.GPUType, Socket: it.Socket, GPUCount: it.GPUCount,
			Provider: it.Provider, DataCenterID: it.DataCenter, Country: it.Country, Security: it.Security,
			Image: image, Stock: it.StockStatus}
		detail, err := json.Marshal(d)
		if err != nil {
			return nil, provider.Errorf(provider.Failed, p.base.Name, "plan", "encode offer detail: %w", err)
		}
		o := provider.Offer{
			Provider: p.base.Name, Location: provider.Location{Region: region, Zone: it.DataCenter},
			InstanceType: fmt.Sprintf("%s_x%d_%s_%s_%s", it.GPUType, it.GPUCount, it.Socket, it.Provider, it.CloudID),
			GPU:          g.Name, GPUCount: it.GPUCount, GPUMemoryGB: cmp.Or(it.GPUMemory, g.MemoryGB),
			VCPUs: it.VCPU.DefaultCount, MemoryGB: float64(it.Memory.DefaultCount),
			PricePerHour: *price * float64(it.GPUCount), Spot: it.IsSpot, Detail: detail,
			DiskGB: max(it.Disk.DefaultCount, p.cfg.DiskGB), MaxDiskGB: it.Disk.MaxCount, // GpuAvailability.disk, in GB
			InStock: it.StockStatus != "" && it.StockStatus != "Unavailable",
		}
		if r.Accepts(&o) {
			offers = append(offers, o)
			stock[o.InstanceType] = it.StockStatus
		}
	}
	slices.SortStableFunc(offers, func(a, b provider.Offer) int {
		return cmp.Or(cmp.Compare(a.PricePerHour, b.PricePerHour),
			cmp.Compare(stockRank[stock[a.InstanceType]], stockRank[stock[b.InstanceType]]))
	})
	return offers, nil
}

func (p *Provider) availability(ctx context.Context, count int) ([]wireAvailability, error) {
	var all []wireAvailability
	for page := 1; page <= 100; page++ {
		q := url.Values{"page": {strconv.Itoa(page)}, "page_size": {strconv.Itoa(pageSize)}}
		if count > 0 {
			q.Set("gpu_count", strconv.Itoa(count))
		}
		var out struct {
			Items      []wireAvailability `json:"items"`
			TotalCount int                `json:"totalCount"`
		}
		if err := p.call(ctx, "plan", http.MethodGet, "/availability/gpus", q, nil, &out); err != nil {
			return nil, err
		}
		all = append(all, out.Items...)
		if len(out.Items) == 0 || len(all) >= out.TotalCount {
			break
		}
	}
	return all, nil
}

// Prepare registers the VM's SSH key (the first authorized key: a pod takes
// one sshKeyId) as gpuprov-<vm>-<installation tag>, adopting a key of that
// name and content. Prime has no per-pod firewall.
func (p *Provider) Prepare(ctx context.Context, offer *provider.Offer, spec *provider.InstanceSpec) (json.RawMessage, error) {
	if len(spec.AuthorizedKeys) == 0 {
		return nil, provider.Errorf(provider.InvalidRequest, p.base.Name, "prepare", "the spec has no authorized key to install on the pod")
	}
	// The request's image reaches the adapter only here (Plan does not see
	// it). One Prime cannot take is Unavailable: this cloud is not viable
	// for the request, another may be (a container image suits RunPod), and
	// nothing has been created yet.
	if spec.Image != "" {
		if err := checkImage(spec.Image); err != nil {
			return nil, provider.Errorf(provider.Unavailable, p.base.Name, "prepare", "image %w", err)
		}
	}
	name := PodName(spec.VM, p.base.Installation)
	public := strings.TrimSpace(spec.AuthorizedKeys[0])
	keys, err := p.listKeys(ctx, "prepare")
	if err != nil {
		return nil, err
	}
	var id string
	for _, k := range keys {
		if k.Name != name {
			continue
		}
		if strings.TrimSpace(k.PublicKey) == public {
			id = k.ID
			break
		}
		if err := p.call(ctx, "prepare", http.MethodDelete, "/ssh_keys/"+url.PathEscape(k.ID), nil, nil, nil); err != nil && !isGone(err) {
			return nil, err
		}
	}
	if id == "" {
		var out wireSSHKey
		if err := p.call(ctx, "prepare", http.MethodPost, "/ssh_keys/", nil, map[string]string{"name": name, "publicKey": public}, &out); err != nil {
			return nil, err
		}
		id = out.ID
		p.base.Log.Info("primeintellect: registered ssh key", "provider", p.base.Name, "key", name)
	}
	b, err := json.Marshal(prepared{SSHKeyID: id})
	if err != nil {
		return nil, provider.Errorf(provider.Failed, p.base.Name, "prepare", "encode: %w", err)
	}
	return b, nil
}

// Create first lists the pods and adopts one already named for the VM in
// this installation (Prime has no idempotency key). Otherwise it sends one
// POST /pods/ with the offer's cloudId, GPU type, socket, count, data center
// and provider, the VM's SSH key and the identity as the pod name (and as
// envVars, for someone reading the pod). The answer's pod id is returned.
func (p *Provider) Create(ctx context.Context, offer *provider.Offer, prep json.RawMessage, spec *provider.InstanceSpec) (string, error) {
	var d offerDetail
	if err := json.Unmarshal(offer.Detail, &d); err != nil || d.CloudID == "" || d.GPUType == "" {
		return "", provider.Errorf(provider.InvalidRequest, p.base.Name, "create", "offer has no Prime cloudId and GPU type in its detail (%s)", offer.Detail)
	}
	var pr prepared
	if err := json.Unmarshal(prep, &pr); err != nil || pr.SSHKeyID == "" {
		return "", provider.Errorf(provider.InvalidRequest, p.base.Name, "create", "prepared data names no SSH key (%s)", prep)
	}
	obs, err := p.Observe(ctx, offer.Location, spec.VM)
	if err != nil {
		return "", err
	}
	for _, o := range obs {
		if o.Status == provider.StatusPending || o.Status == provider.StatusRunning {
			p.base.Log.Info("primeintellect: adopted existing pod", "provider", p.base.Name, "vm", spec.VM, "pod", o.ID)
			return o.ID, nil
		}
	}
	pod := map[string]any{
		"name": PodName(spec.VM, p.base.Installation), "cloudId": d.CloudID, "gpuType": d.GPUType, "socket": d.Socket,
		"gpuCount": d.GPUCount, "image": cmp.Or(spec.Image, d.Image), "sshKeyId": pr.SSHKeyID,
		"envVars": []map[string]string{{"key": "GPUPROV_VM", "value": spec.VM}, {"key": "GPUPROV_INSTALLATION", "value": p.base.Installation}},
	}
	if d.DataCenterID != "" {
		pod["dataCenterId"] = d.DataCenterID
	}
	if d.Country != "" {
		pod["country"] = d.Country
	}
	if d.Security != "" {
		pod["security"] = d.Security
	}
	if disk := max(p.cfg.DiskGB, offer.DiskGB); disk > 0 {
		pod["diskSize"] = disk // the configured disk_gb, or the request's (Offer.DiskGB)
	}
	body := map[string]any{"pod": pod, "provider": map[string]string{"type": d.Provider}}
	if p.cfg.TeamID != "" {
		body["team"] = map[string]string{"teamId": p.cfg.TeamID}
	}
	var out wirePod
	if err := p.call(ctx, "create", http.MethodPost, "/pods/", nil, body, &out); err != nil {
		return "", err
	}
	if out.ID == "" {
		return "", provider.Errorf(provider.Transient, p.base.Name, "create", "create answer carries no pod id")
	}
	p.base.Log.Info("primeintellect: created pod", "provider", p.base.Name, "vm", spec.VM, "pod", out.ID, "cloud_id", d.CloudID)
	return out.ID, nil
}

// Observe pages through GET /pods/ and returns the pods named for vm in
// this installation. Pods carry no location the API reports, so loc does
// not filter.
func (p *Provider) Observe(ctx context.Context, loc provider.Location, vm string) ([]provider.Observed, error) {
	pods, err := p.listPods(ctx, "observe")
	if err != nil {
		return nil, err
	}
	out := []provider.Observed{}
	for _, pod := range pods {
		if pod.Name != PodName(vm, p.base.Installation) {
			continue
		}
		if o := observed(pod, vm); o.Status != provider.StatusTerminated {
			out = append(out, o)
		}
	}
	return out, nil
}

func observed(pod wirePod, vm string) provider.Observed {
	o := provider.Observed{ID: pod.ID, VM: vm, Status: status(pod.Status, pod.InstallationStatus),
		InstanceType: fmt.Sprintf("%s_x%d", pod.GPUName, pod.GPUCount), VendorStatus: pod.Status + "/" + pod.InstallationStatus}
	if t, err := time.Parse(time.RFC3339Nano, pod.CreatedAt); err == nil {
		o.Created = t
	}
	o.PublicIP = firstString(pod.IP)
	if o.Status == provider.StatusRunning {
		if ep, ok := parseSSH(firstString(pod.SSHConnection)); ok {
			o.SSH = &ep
		}
	}
	return o
}

// status maps a pod's status and installation status to the normalized
// status: an ACTIVE pod still installing is Pending.
func status(pod, install string) provider.InstanceStatus {
	if install == "ERROR" {
		return provider.StatusFailed
	}
	switch pod {
	case "PROVISIONING", "PENDING":
		return provider.StatusPending
	case "ACTIVE":
		if install == "FINISHED" {
			return provider.StatusRunning
		}
		return provider.StatusPending
	case "STOPPED", "ERROR":
		return provider.StatusFailed
	case "DELETING":
		return provider.StatusStopping
	case "TERMINATED":
		return provider.StatusTerminated
	}
	return provider.StatusUnknown
}

// firstString reads a JSON string, or the first non-null string of a list.
func firstString(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var list []*string
	if json.Unmarshal(raw, &list) == nil {
		for _, v := range list {
			if v != nil && *v != "" {
				return *v
			}
		}
	}
	return ""
}

var sshRE = regexp.MustCompile(`^(?:ssh\s+)?(?:([^@\s]+)@)?([^\s@]+)(?:\s+-p\s+(\d+))?`)

// parseSSH reads an sshConnection such as "root@1.2.3.4 -p 22".
func parseSSH(conn string) (provider.SSHEndpoint, bool) {
	m := sshRE.FindStringSubmatch(strings.TrimSpace(conn))
	if m == nil || m[2] == "" {
		return provider.SSHEndpoint{}, false
	}
	ep := provider.SSHEndpoint{User: cmp.Or(m[1], "root"), Host: m[2], Port: 22}
	if m[3] != "" {
		port, err := strconv.Atoi(m[3])
		if err != nil || port <= 0 || port > 65535 {
			return provider.SSHEndpoint{}, false
		}
		ep.Port = port
	}
	return ep, true
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

// Cleanup deletes the VM's SSH key (DELETE /ssh_keys/{id}); a key already
// gone is success. Nothing else is per-VM on Prime.
func (p *Provider) Cleanup(ctx context.Context, loc provider.Location, vm string) error {
	keys, err := p.listKeys(ctx, "cleanup")
	if err != nil {
		return err
	}
	for _, k := range keys {
		if k.Name != PodName(vm, p.base.Installation) {
			continue
		}
		if err := p.call(ctx, "cleanup", http.MethodDelete, "/ssh_keys/"+url.PathEscape(k.ID), nil, nil, nil); err != nil && !isGone(err) {
			return err
		}
	}
	return nil
}
