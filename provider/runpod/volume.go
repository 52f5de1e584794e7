package runpod

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strings"

	"github.com/org/gpuprov/provider"
)

// Persistent volumes (provider.VolumeManager) are RunPod network volumes:
// storage of one data center, made by POST /v2/network-volumes and given
// to a pod only in the pod's create request (CreatePodRequest.mounts.network,
// one volume, at the path the create names). A pod can neither be given a
// volume later nor lose it ("Network volumes must be attached during Pod
// deployment. They cannot be attached or detached later without deleting
// the Pod", https://docs.runpod.io/storage/network-volumes), so the
// adapter is an attach-at-create provider: the core hands the VM's volume
// to Create in InstanceSpec.Volumes, and the volume is released when the
// pod is deleted.
//
// A volume is named gpuprov--<volume>-<installation mark> (VolumeName).
// RunPod keeps no labels on a network volume and its names need not be
// unique, so the name is the only mark: it carries the installation's, so
// that another installation's volume of the same name is never taken for
// this one's, and a volume of the name in the data center is this
// installation's unless a pod that mounts it proves otherwise (one gpuprov
// did not make).
//
// Sources: RunPod REST API v2 OpenAPI 2.0.0 (runpod/docs
// api-reference-v2/openapi.json, testdata/README.md): createNetworkVolume,
// listNetworkVolumes, getNetworkVolume, deleteNetworkVolume
// (https://docs.runpod.io/api-reference-v2/network-volumes/create-a-network-volume),
// getDataCenter (https://docs.runpod.io/api-reference-v2/catalog/get-a-data-center),
// the Mounts and NetworkMount schemas of createPod
// (https://docs.runpod.io/api-reference-v2/pods/create-a-pod).

const (
	opCreateVolume  = "create volume"
	opObserveVolume = "observe volume"
	opAttachVolume  = "attach volume"
	opDetachVolume  = "detach volume"
	opDeleteVolume  = "delete volume"
)

// Volume sizes in GB: CreateNetworkVolumeRequest.size has minimum 10 and
// maximum 4096 ("For volumes beyond 4 TB, contact support",
// https://docs.runpod.io/storage/network-volumes).
const (
	minVolumeGB = 10
	maxVolumeGB = 4096
)

// VolumeLimits implements provider.VolumeManager: network volumes of one
// data center (the offers' region), 10 to 4,096 GB, attached by Create
// and mounted by RunPod at the path the create names (NetworkMount.path:
// "Custom paths are honored at runtime on both GPU and CPU pods"), one per
// pod (Mounts.network has maxItems 1).
func (p *Provider) VolumeLimits() provider.VolumeLimits {
	return provider.VolumeLimits{Scope: provider.VolumeRegional, MinGB: minVolumeGB, MaxGB: maxVolumeGB,
		AttachAtCreate: true, MaxPerInstance: 1}
}

// VolumeName is the name of the network volume of gpuprov volume volume
// of installation: provider.VolumeResourceName with the installation's
// mark (provider.InstallationMark).
func VolumeName(volume, installation string) string {
	return provider.VolumeResourceName(volume) + "-" + provider.InstallationMark(installation)
}

// volumeInstallation is the installation spec's volume belongs to.
func (p *Provider) volumeInstallation(spec *provider.VolumeSpec) string {
	if spec.Installation != "" {
		return spec.Installation
	}
	return p.base.Installation
}

// namedVolume is a network volume of gpuprov's name and the pods that
// mount it.
type namedVolume struct {
	v    wireVolume
	pods []wirePod
}

// volumesNamed lists the network volumes named VolumeName(name, installation) in data
// center dc and splits them: ours are those no pod proves to be another's;
// foreign those mounted by a pod that is not one of installation's. The
// pods are listed only when there is such a volume.
func (p *Provider) volumesNamed(ctx context.Context, op, dc, name, installation string) (ours, foreign []namedVolume, err error) {
	vols, err := p.listVolumes(ctx, op)
	if err != nil {
		return nil, nil, err
	}
	vols = slices.DeleteFunc(vols, func(v wireVolume) bool {
		return v.Name != VolumeName(name, installation) || v.DataCenter != dc
	})
	if len(vols) == 0 {
		return nil, nil, nil
	}
	pods, err := p.allPods(ctx, op)
	if err != nil {
		return nil, nil, err
	}
	for _, v := range vols {
		n := namedVolume{v: v, pods: mountedBy(pods, v.ID)}
		if slices.ContainsFunc(n.pods, func(pod wirePod) bool { return !podOf(pod, installation) }) {
			foreign = append(foreign, n)
		} else {
			ours = append(ours, n)
		}
	}
	return ours, foreign, nil
}

// podOf reports whether pod is a pod gpuprov made for installation: named
// gpuprov-<vm> with that vm and installation in its environment.
func podOf(pod wirePod, installation string) bool {
	vm := pod.Env[EnvVM]
	return vm != "" && pod.Name == provider.ResourceName(vm) && pod.Env[EnvInstallation] == installation
}

// mountedBy returns the pods whose network mount is volume id.
func mountedBy(pods []wirePod, id string) []wirePod {
	var out []wirePod
	for _, pod := range pods {
		if mounts(pod, id) {
			out = append(out, pod)
		}
	}
	return out
}

func mounts(pod wirePod, id string) bool {
	return pod.Mounts != nil && slices.ContainsFunc(pod.Mounts.Network, func(m wireNetworkMount) bool { return m.VolumeID == id })
}

func podIDs(pods []wirePod) string {
	ids := make([]string, len(pods))
	for i, pod := range pods {
		ids[i] = pod.ID
	}
	return strings.Join(ids, ", ")
}

// volumeOf is n as gpuprov sees it: attached to the first pod that mounts
// it and is not terminated, available otherwise (RunPod gives a network
// volume no status: it is usable once the create has answered).
func volumeOf(n namedVolume, name string) provider.Volume {
	v := provider.Volume{ID: n.v.ID, Name: name, Location: provider.Location{Region: n.v.DataCenter},
		SizeGB: n.v.Size, Status: provider.VolumeAvailable}
	for _, pod := range n.pods {
		if pod.Status != "TERMINATED" {
			v.Status, v.AttachedTo = provider.VolumeAttached, pod.ID
			break
		}
	}
	return v
}

// listVolumes reads GET /network-volumes: every network volume of the
// account (not paginated in the v2 document).
func (p *Provider) listVolumes(ctx context.Context, op string) ([]wireVolume, error) {
	var out struct {
		NetworkVolumes []wireVolume `json:"networkVolumes"`
	}
	if err := p.call(ctx, op, http.MethodGet, "/network-volumes", nil, nil, &out); err != nil {
		return nil, err
	}
	return out.NetworkVolumes, nil
}

// allPods reads GET /pods?includeClusterPods=true: every pod of the
// account, cluster members too, since a cluster's pods may mount a
// network volume.
func (p *Provider) allPods(ctx context.Context, op string) ([]wirePod, error) {
	var out struct {
		Pods []wirePod `json:"pods"`
	}
	q := url.Values{"includeClusterPods": {"true"}}
	if err := p.call(ctx, op, http.MethodGet, "/pods", q, nil, &out); err != nil {
		return nil, err
	}
	return out.Pods, nil
}

// checkVolumeDataCenter refuses, as Unavailable, a data center that takes
// no network volume: GET /catalog/datacenters/{dc}, whose
// networkVolumeTypes lists the tiers it supports ("Empty = none"). Not
// every data center has network storage. An unknown data center (404) is
// Unavailable too: nothing was made, and another offer may do.
func (p *Provider) checkVolumeDataCenter(ctx context.Context, dc string) error {
	var out wireDataCenter
	err := p.call(ctx, opCreateVolume, http.MethodGet, "/catalog/datacenters/"+url.PathEscape(dc), nil, nil, &out)
	switch {
	case isGone(err):
		return provider.Errorf(provider.Unavailable, p.base.Name, opCreateVolume, "data center %s is not in RunPod's catalog: %w", dc, err)
	case err != nil:
		return err
	case len(out.NetworkVolumeTypes) == 0:
		return provider.Errorf(provider.Unavailable, p.base.Name, opCreateVolume, "data center %s has no network volumes (its networkVolumeTypes is empty)", dc)
	}
	return nil
}

// CreateVolume implements provider.VolumeManager. RunPod has no
// idempotency token, so it first lists the network volumes
// (GET /network-volumes) and returns the one named gpuprov--<spec.Name> in
// the data center spec.Location.Region, when no pod that mounts it is
// another's; a create sent again after its answer was lost finds the
// first. Otherwise it checks the data center has network volumes
// (GET /catalog/datacenters/{dc}) and sends one
// POST /network-volumes {name, size, dataCenter} in the data center's
// default tier. The volume is available at once: RunPod gives it no
// status to wait for.
//
// A missing name, a size outside 10 to 4,096 GB or a location without a
// data center (its region) is InvalidRequest before any request. A volume
// of that name mounted by a pod of another installation, or by a pod
// gpuprov did not make, is InvalidRequest; so are two volumes of the name
// that nothing tells apart. A data center without network volumes, or a
// create it refuses (400), is Unavailable; other answers are classified as
// every call's (errors.go).
func (p *Provider) CreateVolume(ctx context.Context, spec provider.VolumeSpec) (provider.Volume, error) {
	dc := spec.Location.Region
	switch {
	case spec.Name == "":
		return provider.Volume{}, provider.Errorf(provider.InvalidRequest, p.base.Name, opCreateVolume, "the volume has no name")
	case spec.SizeGB < minVolumeGB || spec.SizeGB > maxVolumeGB:
		return provider.Volume{}, provider.Errorf(provider.InvalidRequest, p.base.Name, opCreateVolume,
			"volume %s: size %d GB is not between %d and %d (RunPod network volume sizes)", spec.Name, spec.SizeGB, minVolumeGB, maxVolumeGB)
	case dc == "":
		return provider.Volume{}, provider.Errorf(provider.InvalidRequest, p.base.Name, opCreateVolume,
			"volume %s: location %s names no data center: a network volume is made in one (the offer's region)", spec.Name, spec.Location)
	}
	installation := p.volumeInstallation(&spec)
	ours, foreign, err := p.volumesNamed(ctx, opCreateVolume, dc, spec.Name, installation)
	if err != nil {
		return provider.Volume{}, err
	}
	switch {
	case len(ours) == 1:
		p.base.Log.Info("runpod: network volume exists; adopted", "provider", p.base.Name, "volume", spec.Name, "data_center", dc, "id", ours[0].v.ID)
		return volumeOf(ours[0], spec.Name), nil
	case len(ours) > 1:
		return provider.Volume{}, provider.Errorf(provider.InvalidRequest, p.base.Name, opCreateVolume,
			"volume %s: %d network volumes named %s in %s and nothing tells which is this installation's", spec.Name, len(ours),
			VolumeName(spec.Name, installation), dc)
	case len(foreign) > 0:
		return provider.Volume{}, provider.Errorf(provider.InvalidRequest, p.base.Name, opCreateVolume,
			"volume %s: network volume %s (%s) in %s is mounted by pod %s, which is not gpuprov's of installation %s (another installation's volume, or one gpuprov did not make)",
			spec.Name, VolumeName(spec.Name, installation), foreign[0].v.ID, dc, podIDs(foreign[0].pods), installation)
	}
	if err := p.checkVolumeDataCenter(ctx, dc); err != nil {
		return provider.Volume{}, err
	}
	var out wireVolume
	in := wireCreateVolume{Name: VolumeName(spec.Name, installation), Size: spec.SizeGB, DataCenter: dc}
	if err := p.call(ctx, opCreateVolume, http.MethodPost, "/network-volumes", nil, in, &out); err != nil {
		return provider.Volume{}, err
	}
	if out.ID == "" {
		// The create may have landed: the core sends it again, which finds
		// it by name.
		return provider.Volume{}, provider.Errorf(provider.Transient, p.base.Name, opCreateVolume, "create answer carries no network volume id")
	}
	p.base.Log.Info("runpod: created network volume", "provider", p.base.Name, "volume", spec.Name, "data_center", dc, "id", out.ID, "size_gb", out.Size)
	return volumeOf(namedVolume{v: out}, spec.Name), nil
}

// ObserveVolume implements provider.VolumeManager: GET /network-volumes,
// the volume named VolumeName(name) in loc's data center that no pod proves
// to be another's (GET /pods, as CreateVolume), nil when there is none.
// It is attached when a pod that is not terminated mounts it.
func (p *Provider) ObserveVolume(ctx context.Context, loc provider.Location, name string) (*provider.Volume, error) {
	if name == "" || loc.Region == "" {
		return nil, provider.Errorf(provider.InvalidRequest, p.base.Name, opObserveVolume,
			"volume %q in %s: a network volume is found by its name in its data center (the region)", name, loc)
	}
	ours, _, err := p.volumesNamed(ctx, opObserveVolume, loc.Region, name, p.base.Installation)
	switch {
	case err != nil:
		return nil, err
	case len(ours) == 0:
		return nil, nil
	case len(ours) > 1:
		return nil, provider.Errorf(provider.InvalidRequest, p.base.Name, opObserveVolume,
			"volume %s: %d network volumes named %s in %s and nothing tells which is this installation's", name, len(ours),
			VolumeName(name, p.base.Installation), loc.Region)
	}
	v := volumeOf(ours[0], name)
	return &v, nil
}

// AttachVolume implements provider.VolumeManager by refusing: a RunPod
// pod takes its network volume in its create request (VolumeLimits
// AttachAtCreate) and cannot be given one later. The core never calls it
// for this provider. No request is sent.
func (p *Provider) AttachVolume(ctx context.Context, loc provider.Location, id, instanceID string) (string, error) {
	return "", provider.Errorf(provider.InvalidRequest, p.base.Name, opAttachVolume,
		"volume %s: network volumes attach at create (InstanceSpec.Volumes); pod %s cannot be given one after its create", id, instanceID)
}

// DetachVolume implements provider.VolumeManager: RunPod cannot take a
// network volume from a pod; it is released when the pod is deleted. It
// reads the pod (GET /pods/{id}) and succeeds when the pod is gone,
// terminated or does not mount volume id, and is InvalidRequest when it
// does. The core never calls it for this provider.
func (p *Provider) DetachVolume(ctx context.Context, loc provider.Location, id, instanceID string) error {
	if id == "" || instanceID == "" {
		return provider.Errorf(provider.InvalidRequest, p.base.Name, opDetachVolume, "detach needs a volume id and a pod id (got %q, %q)", id, instanceID)
	}
	var pod wirePod
	err := p.call(ctx, opDetachVolume, http.MethodGet, "/pods/"+url.PathEscape(instanceID), nil, nil, &pod)
	switch {
	case isGone(err):
		return nil
	case err != nil:
		return err
	case pod.Status != "TERMINATED" && mounts(pod, id):
		return provider.Errorf(provider.InvalidRequest, p.base.Name, opDetachVolume,
			"network volume %s was attached by pod %s's create and cannot be detached: it is released when the pod is deleted", id, instanceID)
	}
	return nil
}

// DeleteVolume implements provider.VolumeManager: it lists the pods
// (GET /pods?includeClusterPods=true) and, when none that is not
// terminated mounts volume id, sends DELETE /network-volumes/{id}; 204 and
// 404 (gone) are success. A volume a pod mounts is an error matching
// provider.ErrInUse, InvalidRequest, before the delete is sent; RunPod's
// refusal of a volume still held (InUseText: a serverless worker, say,
// which GET /pods does not list) matches ErrInUse too, Transient when a
// terminated pod that mounted it is still listed (RunPod is releasing it).
// The volume is released when its pod is deleted, which the core waits
// for.
func (p *Provider) DeleteVolume(ctx context.Context, loc provider.Location, id string) error {
	if id == "" {
		return provider.Errorf(provider.InvalidRequest, p.base.Name, opDeleteVolume, "no network volume id")
	}
	pods, err := p.allPods(ctx, opDeleteVolume)
	if err != nil {
		return err
	}
	users := mountedBy(pods, id)
	live := slices.DeleteFunc(slices.Clone(users), func(pod wirePod) bool { return pod.Status == "TERMINATED" })
	if len(live) > 0 {
		return provider.Errorf(provider.InvalidRequest, p.base.Name, opDeleteVolume,
			"network volume %s is mounted by pod %s: %w (it is released when the pod is deleted)", id, podIDs(live), provider.ErrInUse)
	}
	err = p.call(ctx, opDeleteVolume, http.MethodDelete, "/network-volumes/"+url.PathEscape(id), nil, nil, nil)
	var pe *provider.Error
	switch {
	case err == nil || isGone(err):
		p.base.Log.Info("runpod: deleted network volume", "provider", p.base.Name, "id", id)
		return nil
	case errors.Is(err, provider.ErrInUse) && len(users) > 0 && errors.As(err, &pe):
		pe.Kind = provider.Transient // a terminated pod still holds it for a moment
	}
	return err
}

// createMount returns the mounts of a create with volume m: it reads the
// volume (GET /network-volumes/{id}) and returns its data center, which the
// pod must be placed in ("ID of an existing NetworkVolume in the same data
// center as the pod", NetworkMount.volumeId). A volume that is gone, or in
// another data center than the offer's, is InvalidRequest: the core plans
// only offers in a volume's data center.
func (p *Provider) createMount(ctx context.Context, d offerDetail, m provider.VolumeMount) (*wireMounts, string, error) {
	var v wireVolume
	err := p.call(ctx, "create", http.MethodGet, "/network-volumes/"+url.PathEscape(m.ID), nil, nil, &v)
	switch {
	case isGone(err):
		return nil, "", provider.Errorf(provider.InvalidRequest, p.base.Name, "create", "volume %s: network volume %s is gone", m.Name, m.ID)
	case err != nil:
		return nil, "", err
	case d.DataCenterID != "" && v.DataCenter != d.DataCenterID:
		return nil, "", provider.Errorf(provider.InvalidRequest, p.base.Name, "create",
			"volume %s: network volume %s is in %s and the offer in %s: a pod must be in its volume's data center", m.Name, m.ID, v.DataCenter, d.DataCenterID)
	}
	return &wireMounts{Network: []wireNetworkMount{{VolumeID: m.ID, Path: m.MountPath}}}, v.DataCenter, nil
}

// checkMounts refuses, before any request, volumes a pod of offer detail d
// cannot be created with: more than one (Mounts.network has maxItems 1), a
// volume without an id or an absolute mount path (InvalidRequest), or a
// Community Cloud offer ("Network volumes are only available for Pods in
// the Secure Cloud", https://docs.runpod.io/storage/network-volumes):
// Unavailable, so the core tries the next offer.
func (p *Provider) checkMounts(d offerDetail, spec *provider.InstanceSpec) error {
	switch {
	case len(spec.Volumes) == 0:
		return nil
	case len(spec.Volumes) > 1:
		return provider.Errorf(provider.InvalidRequest, p.base.Name, "create", "%d volumes: a RunPod pod takes one network volume", len(spec.Volumes))
	case spec.Volumes[0].ID == "" || !path.IsAbs(spec.Volumes[0].MountPath):
		return provider.Errorf(provider.InvalidRequest, p.base.Name, "create", "volume %s: id %q and mount path %q: both are needed, the path absolute",
			spec.Volumes[0].Name, spec.Volumes[0].ID, spec.Volumes[0].MountPath)
	case d.Cloud != "" && d.Cloud != "SECURE":
		return provider.Errorf(provider.Unavailable, p.base.Name, "create", "volume %s: network volumes attach only to Secure Cloud pods, and the offer is %s",
			spec.Volumes[0].Name, d.Cloud)
	}
	return nil
}

// CheckVolume implements provider.VolumeChecker: at plan time, an offer
// of a Community Cloud pod cannot have a network volume (RunPod attaches
// them only to Secure Cloud pods), and the mount path must be absolute;
// nothing is sent.
func (p *Provider) CheckVolume(o *provider.Offer, name, mountPath string) error {
	var d offerDetail
	if len(o.Detail) > 0 {
		if err := json.Unmarshal(o.Detail, &d); err != nil {
			return provider.Errorf(provider.InvalidRequest, p.base.Name, "plan", "offer detail does not parse: %v", err)
		}
	}
	spec := &provider.InstanceSpec{Volumes: []provider.VolumeMount{{ID: "-", Name: name, MountPath: mountPath}}}
	return p.checkMounts(d, spec)
}

var (
	_ provider.VolumeManager = (*Provider)(nil)
	_ provider.VolumeChecker = (*Provider)(nil)
)
