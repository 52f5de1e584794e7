package sim

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/org/gpuprov/provider"
)

// Volume sizes the sim accepts, in GB (simserver.MinVolumeGB, MaxVolumeGB).
const (
	minVolumeGB = 1
	maxVolumeGB = 16384
)

type wireVolume struct {
	ID         string            `json:"id"`
	Name       string            `json:"name"`
	Labels     map[string]string `json:"labels"`
	Region     string            `json:"region"`
	Zone       string            `json:"zone"`
	SizeGB     int               `json:"size_gb"`
	Status     string            `json:"status"`
	AttachedTo string            `json:"attached_to"`
	Device     string            `json:"device"`
	CreatedAt  time.Time         `json:"created_at"`
}

type wireVolumeCreate struct {
	Name             string            `json:"name"`
	Zone             string            `json:"zone"`
	SizeGB           int               `json:"size_gb"`
	Labels           map[string]string `json:"labels"`
	IdempotencyToken string            `json:"idempotency_token,omitempty"`
}

type wireAttach struct {
	InstanceID string `json:"instance_id"`
}

// VolumeLimits implements provider.VolumeManager: zonal block storage of
// 1 to 16384 GB, attached to a running instance by AttachVolume.
func (p *Provider) VolumeLimits() provider.VolumeLimits {
	return provider.VolumeLimits{Scope: provider.VolumeZonal, MinGB: minVolumeGB, MaxGB: maxVolumeGB}
}

func (p *Provider) volumeInstallation(spec *provider.VolumeSpec) string {
	if spec.Installation != "" {
		return spec.Installation
	}
	return p.installation
}

// CreateVolume creates spec's volume in spec.Location.Zone, named
// provider.VolumeResourceName(spec.Name), with the idempotency token (unless
// NoIdempotencyToken). A size outside VolumeLimits, or a location without
// a zone, is InvalidRequest before any call. A volume of that name that
// exists (the server's 409 conflict: another token, or a create whose
// answer was lost on a cloud without tokens) is returned when it carries
// this installation's labels, and is InvalidRequest otherwise. A zone out
// of volume capacity is Capacity.
func (p *Provider) CreateVolume(ctx context.Context, spec provider.VolumeSpec) (provider.Volume, error) {
	switch {
	case spec.Name == "":
		return provider.Volume{}, provider.Errorf(provider.InvalidRequest, p.name, "create volume", "the volume has no name")
	case spec.SizeGB < minVolumeGB || spec.SizeGB > maxVolumeGB:
		return provider.Volume{}, provider.Errorf(provider.InvalidRequest, p.name, "create volume", "volume %s: size %d GB is not between %d and %d", spec.Name, spec.SizeGB, minVolumeGB, maxVolumeGB)
	case spec.Location.Zone == "":
		return provider.Volume{}, provider.Errorf(provider.InvalidRequest, p.name, "create volume", "volume %s: the sim's volumes are zonal and location %s names no zone", spec.Name, spec.Location)
	}
	req := wireVolumeCreate{Name: provider.VolumeResourceName(spec.Name), Zone: spec.Location.Zone, SizeGB: spec.SizeGB, Labels: spec.VolumeLabels(p.installation)}
	if !p.cfg.NoIdempotencyToken {
		req.IdempotencyToken = spec.IdempotencyToken
	}
	var w wireVolume
	err := p.do(ctx, call{op: "create volume", method: http.MethodPost, path: "volumes", in: req, out: &w})
	if IsAPIError(err, "conflict") {
		v, oerr := p.findVolume(ctx, "create volume", spec.Location, spec.Name, p.volumeInstallation(&spec))
		switch {
		case oerr != nil:
			return provider.Volume{}, oerr
		case v != nil:
			return *v, nil
		}
		return provider.Volume{}, &provider.Error{Kind: provider.InvalidRequest, Provider: p.name, Op: "create volume",
			Err: fmt.Errorf("volume %s in %s: the name is another installation's: %w", req.Name, spec.Location.Zone, apiError(err))}
	}
	if err != nil {
		return provider.Volume{}, err
	}
	p.log.Info("sim: created volume", "provider", p.name, "volume", spec.Name, "id", w.ID, "zone", w.Zone)
	return volumeOf(w), nil
}

// ObserveVolume implements provider.VolumeManager: the volume of this
// installation named name (the journal's name) in loc, or nil.
func (p *Provider) ObserveVolume(ctx context.Context, loc provider.Location, name string) (*provider.Volume, error) {
	return p.findVolume(ctx, "observe volume", loc, name, p.installation)
}

// findVolume lists the volumes in loc labelled with name and installation.
func (p *Provider) findVolume(ctx context.Context, op string, loc provider.Location, name, installation string) (*provider.Volume, error) {
	q := url.Values{"label": {provider.LabelVM + "=" + name, provider.LabelInstallation + "=" + installation}}
	if loc.Region != "" {
		q.Set("region", loc.Region)
	}
	if loc.Zone != "" {
		q.Set("zone", loc.Zone)
	}
	var resp struct {
		Volumes []wireVolume `json:"volumes"`
	}
	if err := p.do(ctx, call{op: op, method: http.MethodGet, path: "volumes", query: q, out: &resp}); err != nil {
		return nil, err
	}
	for _, w := range resp.Volumes {
		if w.Labels[provider.LabelVM] == name && w.Labels[provider.LabelInstallation] == installation {
			v := volumeOf(w)
			return &v, nil
		}
	}
	return nil, nil
}

// AttachVolume implements provider.VolumeManager: it attaches volume id to
// the running instance instanceID and returns the device path its machine
// sees, a path in the instance's sandbox. Attaching it where it is
// attached already succeeds. A volume attached to another instance is
// InvalidRequest matching provider.ErrInUse; an instance in another zone,
// or not running, is InvalidRequest; a volume still creating, or attached
// to an instance that is being deleted, is Transient.
func (p *Provider) AttachVolume(ctx context.Context, loc provider.Location, id, instanceID string) (string, error) {
	var w wireVolume
	err := p.do(ctx, call{op: "attach volume", method: http.MethodPost, path: "volumes/" + url.PathEscape(id) + "/attach",
		in: wireAttach{InstanceID: instanceID}, out: &w})
	if IsAPIError(err, "volume_in_use") {
		return "", &provider.Error{Kind: provider.InvalidRequest, Provider: p.name, Op: "attach volume",
			Err: fmt.Errorf("volume %s: %w: %w", id, provider.ErrInUse, apiError(err))}
	}
	if err != nil {
		return "", err
	}
	if w.Device == "" {
		return "", provider.Errorf(provider.Transient, p.name, "attach volume", "volume %s: the answer carries no device", id)
	}
	return w.Device, nil
}

// DetachVolume implements provider.VolumeManager. A volume that is gone,
// detached already, or attached to another instance than instanceID is
// success: it is not attached to instanceID, which is what a detach asks.
func (p *Provider) DetachVolume(ctx context.Context, loc provider.Location, id, instanceID string) error {
	err := p.do(ctx, call{op: "detach volume", method: http.MethodPost, path: "volumes/" + url.PathEscape(id) + "/detach",
		in: wireAttach{InstanceID: instanceID}})
	if err == nil || isNotFound(err) || IsAPIError(err, "volume_in_use") {
		return nil
	}
	return err
}

// DeleteVolume implements provider.VolumeManager. A volume that is gone is
// success; one attached to an instance is an error matching
// provider.ErrInUse: InvalidRequest while that instance lives, Transient
// while it is being deleted (the volume is detached when it terminates).
func (p *Provider) DeleteVolume(ctx context.Context, loc provider.Location, id string) error {
	err := p.do(ctx, call{op: "delete volume", method: http.MethodDelete, path: "volumes/" + url.PathEscape(id)})
	switch {
	case err == nil || isNotFound(err):
		return nil
	case IsAPIError(err, "volume_in_use"):
		return &provider.Error{Kind: provider.InvalidRequest, Provider: p.name, Op: "delete volume",
			Err: fmt.Errorf("volume %s: %w: %w", id, provider.ErrInUse, apiError(err))}
	case IsAPIError(err, "conflict"):
		return &provider.Error{Kind: provider.Transient, Provider: p.name, Op: "delete volume",
			Err: fmt.Errorf("volume %s: %w: %w", id, provider.ErrInUse, apiError(err))}
	}
	return err
}

// volumeOf normalizes a wire volume.
func volumeOf(w wireVolume) provider.Volume {
	return provider.Volume{
		ID: w.ID, Name: w.Labels[provider.LabelVM], Location: provider.Location{Region: w.Region, Zone: w.Zone},
		SizeGB: w.SizeGB, Status: provider.VolumeStatus(w.Status), AttachedTo: w.AttachedTo, Created: w.CreatedAt,
	}
}

var _ provider.VolumeManager = (*Provider)(nil)
