package lambda

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/org/gpuprov/provider"
)

// offerDetail is Offer.Detail: Lambda's own ids for the launch.
type offerDetail struct {
	InstanceType string `json:"instance_type"`
	Region       string `json:"region"`
}

// prepared is what Prepare returns and Create reads.
type prepared struct {
	Region    string `json:"region"`
	SSHKey    string `json:"ssh_key"`
	SSHKeyID  string `json:"ssh_key_id"`
	RulesetID string `json:"firewall_ruleset_id,omitempty"`
	// RulesetName is the shared ruleset's name (provider.SharedName); empty
	// in what a Prepare made before rulesets were shared, whose RulesetID
	// is the VM's own ruleset, SideName.
	RulesetName string `json:"firewall_ruleset_name,omitempty"`
}

// Plan reads GET /instance-types, Lambda's live catalog, and returns one
// offer per (instance type, region with capacity available): a region
// without capacity is no offer at all. Offers are cheapest first.
func (p *Provider) Plan(ctx context.Context, req *provider.ResourceRequest) ([]provider.Offer, error) {
	var out struct {
		Data map[string]wireInstanceTypeItem `json:"data"`
	}
	if err := p.call(ctx, "plan", http.MethodGet, "/instance-types", nil, nil, &out); err != nil {
		return nil, err
	}
	r := *req
	if len(r.Regions) == 0 {
		r.Regions = p.cfg.Regions
	}
	offers := []provider.Offer{}
	for _, it := range out.Data {
		t := it.InstanceType
		g, ok := gpuOf(t)
		if !ok || t.Specs.GPUs == 0 {
			continue
		}
		for _, reg := range it.RegionsWithCapacityAvailable {
			detail, err := json.Marshal(offerDetail{InstanceType: t.Name, Region: reg.Name})
			if err != nil {
				return nil, provider.Errorf(provider.Failed, p.base.Name, "plan", "encode offer detail: %w", err)
			}
			o := provider.Offer{
				Provider: p.base.Name, Location: provider.Location{Region: reg.Name}, InstanceType: t.Name,
				GPU: g.Name, GPUCount: t.Specs.GPUs, GPUMemoryGB: g.MemoryGB, VCPUs: t.Specs.VCPUs,
				MemoryGB: float64(t.Specs.MemoryGiB), PricePerHour: float64(t.PriceCentsPerHour) / 100, Detail: detail,
				DiskGB: t.Specs.StorageGiB, // fixed per instance type: Lambda does not size disks
			}
			if r.Accepts(&o) {
				offers = append(offers, o)
			}
		}
	}
	slices.SortStableFunc(offers, func(a, b provider.Offer) int {
		return cmp.Or(cmp.Compare(a.PricePerHour, b.PricePerHour), cmp.Compare(a.InstanceType, b.InstanceType),
			cmp.Compare(a.Location.Region, b.Location.Region))
	})
	return offers, nil
}

var (
	descRE = regexp.MustCompile(`^\s*([A-Za-z0-9 ]+?)\s*\((\d+)\s*GB`)
	nameRE = regexp.MustCompile(`^gpu_\d+x_(.+)$`)
)

// gpuOf names the canonical GPU of an instance type: from its GPU
// description ("H100 (80 GB SXM5)" → H100_80GB), else from its name
// ("gpu_8x_h100_sxm5" → h100_sxm5).
func gpuOf(t wireInstanceType) (provider.GPUModel, bool) {
	if m := descRE.FindStringSubmatch(t.GPUDescription); m != nil {
		if g, ok := provider.LookupGPU(m[1] + "_" + m[2] + "GB"); ok {
			return g, true
		}
	}
	if m := nameRE.FindStringSubmatch(t.Name); m != nil {
		return provider.LookupGPU(m[1])
	}
	return provider.GPUModel{}, false
}

// Prepare registers the VM's SSH key (the first authorized key; Lambda
// launches take exactly one) and, unless NoFirewall, makes or adopts the
// installation's shared firewall ruleset for spec.OpenPorts in the offer's
// region (shared.go), which admits the VM's sources (provider.SourcesFor
// of spec.SourceRanges and Config.SourceRanges; sources.go) to SSH and
// those ports. Sources Lambda cannot apply are InvalidRequest before any
// request. The key is found by name first, so a second Prepare adopts it;
// the ruleset's id is remembered, so that a Prepare in a region whose
// ruleset for those ports and sources this provider made or adopted
// before sends no firewall request.
func (p *Provider) Prepare(ctx context.Context, offer *provider.Offer, spec *provider.InstanceSpec) (json.RawMessage, error) {
	if len(spec.AuthorizedKeys) == 0 {
		return nil, provider.Errorf(provider.InvalidRequest, p.base.Name, "prepare", "Lambda launches need an SSH key and the spec has no authorized key")
	}
	sources, err := p.sourcesFor(spec) // refused before any request
	if err != nil {
		return nil, err
	}
	name := SideName(spec.VM, p.base.Installation)
	key, err := p.ensureKey(ctx, name, strings.TrimSpace(spec.AuthorizedKeys[0]))
	if err != nil {
		return nil, err
	}
	prep := prepared{Region: offer.Location.Region, SSHKey: key.Name, SSHKeyID: key.ID}
	if !p.cfg.NoFirewall {
		id, rsName, err := p.sharedRuleset(ctx, offer.Location.Region, spec.OpenPorts, sources)
		if err != nil {
			return nil, err
		}
		prep.RulesetID, prep.RulesetName = id, rsName
	}
	b, err := json.Marshal(prep)
	if err != nil {
		return nil, provider.Errorf(provider.Failed, p.base.Name, "prepare", "encode: %w", err)
	}
	return b, nil
}

func (p *Provider) ensureKey(ctx context.Context, name, public string) (wireSSHKey, error) {
	var list struct {
		Data []wireSSHKey `json:"data"`
	}
	if err := p.call(ctx, "prepare", http.MethodGet, "/ssh-keys", nil, nil, &list); err != nil {
		return wireSSHKey{}, err
	}
	for _, k := range list.Data {
		if k.Name != name {
			continue
		}
		if strings.TrimSpace(k.PublicKey) == public {
			return k, nil
		}
		// Ours by name but stale key material: replace it.
		if err := p.call(ctx, "prepare", http.MethodDelete, "/ssh-keys/"+url.PathEscape(k.ID), nil, nil, nil); err != nil && !isKeyGone(err) {
			return wireSSHKey{}, err
		}
	}
	var out struct {
		Data wireSSHKey `json:"data"`
	}
	in := wireSSHKey{Name: name, PublicKey: public}
	if err := p.call(ctx, "prepare", http.MethodPost, "/ssh-keys", nil, in, &out); err != nil {
		return wireSSHKey{}, err
	}
	p.base.Log.Info("lambda: registered ssh key", "provider", p.base.Name, "key", name)
	return out.Data, nil
}

// Create first lists the instances and adopts one that already carries the
// VM's identity in the offer's region (Lambda has no idempotency key, so a
// replayed create must not launch a second machine). Otherwise it sends one
// POST /instance-operations/launch named gpuprov-<vm>, tagged with the
// identity, with the cloud-init user-data (host key, authorized keys), the
// registered key, the shared ruleset and the VM's volumes
// (spec.Volumes: file_system_names, and file_system_mounts at each
// volume's MountPath; volume.go, launchVolumes, refuses a MountPath Lambda
// cannot mount at before any request). Launches are paced at
// Config.LaunchInterval: a create that comes too early sends nothing and is
// Transient with RetryAfter set to the time left. A launch refused because
// the shared ruleset is gone (another process's CleanupShared removed it
// after this VM's Prepare) is Transient and matches provider.ErrSharedGone
// (sharedGone); the ruleset is forgotten, so the next Prepare makes it.
func (p *Provider) Create(ctx context.Context, offer *provider.Offer, prep json.RawMessage, spec *provider.InstanceSpec) (string, error) {
	var d offerDetail
	if err := json.Unmarshal(offer.Detail, &d); err != nil || d.InstanceType == "" || d.Region == "" {
		return "", provider.Errorf(provider.InvalidRequest, p.base.Name, "create", "offer has no Lambda instance type and region in its detail (%s)", offer.Detail)
	}
	var pr prepared
	if err := json.Unmarshal(prep, &pr); err != nil || pr.SSHKey == "" {
		return "", provider.Errorf(provider.InvalidRequest, p.base.Name, "create", "prepared data names no SSH key (%s)", prep)
	}
	fsNames, fsMounts, err := p.launchVolumes(spec) // refused before any request
	if err != nil {
		return "", err
	}
	obs, err := p.Observe(ctx, provider.Location{Region: d.Region}, spec.VM)
	if err != nil {
		return "", err
	}
	for _, o := range obs {
		if o.Status == provider.StatusPending || o.Status == provider.StatusRunning {
			p.base.Log.Info("lambda: adopted existing instance", "provider", p.base.Name, "vm", spec.VM, "instance", o.ID)
			return o.ID, nil
		}
	}
	if wait := p.launchSlot(); wait > 0 {
		return "", &provider.Error{Kind: provider.Transient, Op: "create", Provider: p.base.Name, RetryAfter: wait,
			Err: fmt.Errorf("launch paced: Lambda allows one launch per %s; next in %s", p.cfg.LaunchInterval, wait)}
	}
	in := wireLaunch{
		RegionName: d.Region, InstanceTypeName: d.InstanceType, SSHKeyNames: []string{pr.SSHKey},
		Name: InstanceName(spec.VM), UserData: provider.CloudInit(spec),
		Tags: tags(spec, p.base.Installation), FileSystemNames: fsNames, FileSystemMounts: fsMounts,
	}
	if pr.RulesetID != "" {
		in.FirewallRulesets = []wireRulesetRef{{ID: pr.RulesetID}}
	}
	if img := cmp.Or(spec.Image, p.cfg.ImageFamily); img != "" {
		in.Image = &wireImageSpec{Family: img}
	}
	var out struct {
		Data struct {
			InstanceIDs []string `json:"instance_ids"`
		} `json:"data"`
	}
	if err := p.call(ctx, "create", http.MethodPost, "/instance-operations/launch", nil, in, &out); err != nil {
		if pr.RulesetName != "" && IsAPIError(err, CodeObjectDoesNotExist) {
			return "", p.sharedGone(ctx, pr, err)
		}
		return "", err
	}
	if len(out.Data.InstanceIDs) == 0 {
		return "", provider.Errorf(provider.Transient, p.base.Name, "create", "launch answer carries no instance id")
	}
	id := out.Data.InstanceIDs[0]
	p.base.Log.Info("lambda: launched", "provider", p.base.Name, "vm", spec.VM, "instance", id, "type", d.InstanceType, "region", d.Region)
	return id, nil
}

// launchSlot reserves the next launch if LaunchInterval has passed since the
// last one and returns 0, else returns how long is left.
func (p *Provider) launchSlot() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	if !p.lastLaunch.IsZero() {
		if left := p.lastLaunch.Add(p.cfg.LaunchInterval).Sub(now); left > 0 {
			return left
		}
	}
	p.lastLaunch = now
	return 0
}

// Observe lists the instances (GET /instances) and returns those named
// gpuprov-<vm> whose tags carry vm and this installation, in loc's region
// when loc names one.
func (p *Provider) Observe(ctx context.Context, loc provider.Location, vm string) ([]provider.Observed, error) {
	ins, err := p.listInstances(ctx, "observe")
	if err != nil {
		return nil, err
	}
	out := []provider.Observed{}
	for _, in := range ins {
		if in.Name != InstanceName(vm) || in.tag(provider.LabelVM) != vm || in.tag(provider.LabelInstallation) != p.base.Installation {
			continue
		}
		if loc.Region != "" && in.Region.Name != loc.Region {
			continue
		}
		if o := observed(in); o.Status != provider.StatusTerminated {
			out = append(out, o)
		}
	}
	return out, nil
}

// SSHUser is the login user of Lambda's images.
const SSHUser = "ubuntu"

func observed(in wireInstance) provider.Observed {
	o := provider.Observed{
		ID: in.ID, VM: in.tag(provider.LabelVM), Status: status(in.Status), PublicIP: in.IP, PrivateIP: in.PrivateIP,
		Location: provider.Location{Region: in.Region.Name}, InstanceType: in.InstanceType.Name, VendorStatus: in.Status,
	}
	if o.Status == provider.StatusRunning && in.IP != "" {
		o.SSH = &provider.SSHEndpoint{Host: in.IP, Port: 22, User: SSHUser}
	}
	return o
}

// status maps Lambda's instance status to the normalized one.
func status(vendor string) provider.InstanceStatus {
	switch vendor {
	case "booting":
		return provider.StatusPending
	case "active":
		return provider.StatusRunning
	case "unhealthy", "preempted":
		return provider.StatusFailed
	case "terminating":
		return provider.StatusStopping
	case "terminated":
		return provider.StatusTerminated
	}
	return provider.StatusUnknown
}

// Delete terminates each id with its own POST /instance-operations/terminate
// (one unknown id would fail a request naming several); a 404 is success.
// It tries every id and returns the first error.
func (p *Provider) Delete(ctx context.Context, loc provider.Location, vm string, ids []string) error {
	var first error
	for _, id := range ids {
		err := p.call(ctx, "delete", http.MethodPost, "/instance-operations/terminate", nil,
			map[string][]string{"instance_ids": {id}}, nil)
		if err != nil && !isGone(err) && first == nil {
			first = err
		}
		if err == nil {
			p.base.Log.Info("lambda: terminate requested", "provider", p.base.Name, "vm", vm, "instance", id)
		}
	}
	return first
}

// Cleanup deletes the VM's SSH key and, in loc, a firewall ruleset of the
// VM's own (SideName) that a Prepare made before rulesets were shared;
// what is gone already is success. It never touches the shared ruleset
// (CleanupShared does). A per-VM ruleset still held by a terminating
// instance is answered firewall-rulesets/firewall-ruleset-in-use, which is
// Transient.
func (p *Provider) Cleanup(ctx context.Context, loc provider.Location, vm string) error {
	name := SideName(vm, p.base.Installation)
	rulesets, err := p.listRulesets(ctx, "cleanup")
	if err != nil {
		return err
	}
	for _, r := range rulesets {
		if r.Name != name || (loc.Region != "" && r.Region.Name != loc.Region) {
			continue
		}
		if err := p.call(ctx, "cleanup", http.MethodDelete, "/firewall-rulesets/"+url.PathEscape(r.ID), nil, nil, nil); err != nil && !isGone(err) {
			return err
		}
	}
	var keys struct {
		Data []wireSSHKey `json:"data"`
	}
	if err := p.call(ctx, "cleanup", http.MethodGet, "/ssh-keys", nil, nil, &keys); err != nil {
		return err
	}
	for _, k := range keys.Data {
		if k.Name != name {
			continue
		}
		if err := p.call(ctx, "cleanup", http.MethodDelete, "/ssh-keys/"+url.PathEscape(k.ID), nil, nil, nil); err != nil && !isKeyGone(err) {
			return err
		}
	}
	return nil
}

// UnknownID returns an id shaped like Lambda's that no instance has, for
// the conformance kit.
func (p *Provider) UnknownID() string { return "0000000000000000000000000000dead" }

// tags are the launch's tags: the caller's labels, then gpuprov's identity
// (RequestedTagEntry: keys ^[a-z][a-z0-9-:]+$, which the core's label rules
// keep to).
func tags(spec *provider.InstanceSpec, installation string) []wireTag {
	var out []wireTag
	for _, k := range slices.Sorted(maps.Keys(spec.UserLabels)) {
		out = append(out, wireTag{Key: k, Value: spec.UserLabels[k]})
	}
	return append(out, wireTag{Key: provider.LabelVM, Value: spec.VM}, wireTag{Key: provider.LabelInstallation, Value: installation})
}
