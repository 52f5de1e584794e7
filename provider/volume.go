package provider

import (
	"context"
	"time"
)

// Persistent volumes (Request.Volumes in the core): storage with its own
// life, created once, attached to whichever VM of the installation uses it,
// kept after the VM unless asked. A provider that has them implements
// VolumeManager; one that does not refuses a request with volumes at plan
// time.

// VolumeStatus is where a volume is in its life, as the cloud says it.
type VolumeStatus string

const (
	VolumeCreating  VolumeStatus = "creating"
	VolumeAvailable VolumeStatus = "available" // made, attached to nothing
	VolumeAttached  VolumeStatus = "attached"
	VolumeDeleting  VolumeStatus = "deleting"
	VolumeFailed    VolumeStatus = "failed"
)

// VolumeSpec is what CreateVolume makes.
type VolumeSpec struct {
	// Name is the volume's name in the journal (the user's); the cloud
	// resource is named and labelled from it and the installation, as
	// every resource of gpuprov is: named VolumeResourceName(name)
	// (gpuprov--<name>, where the cloud names resources), labelled
	// LabelVM = name, LabelInstallation and LabelVolume = "true".
	Name         string
	Installation string
	// SizeGB is the volume's size.
	SizeGB int
	// Location is where it is made: the zone (block storage) or region
	// (network file systems) of the offer the first VM that uses it is
	// planned on; VolumeScope says which.
	Location Location
	// UserLabels are the request's labels, as on the VM's resources.
	UserLabels map[string]string
	// IdempotencyToken makes a create sent again return the volume the
	// first one made (or, where the cloud has no token, the adapter finds
	// it by name and labels).
	IdempotencyToken string
}

// Volume is a volume as the cloud has it.
type Volume struct {
	ID       string       `json:"id"`
	Name     string       `json:"name"` // the journal's name, read from the resource's labels
	Location Location     `json:"location"`
	SizeGB   int          `json:"size_gb"`
	Status   VolumeStatus `json:"status"`
	// AttachedTo is the instance it is attached to, if any.
	AttachedTo string    `json:"attached_to,omitempty"`
	Created    time.Time `json:"created,omitzero"`
}

// VolumeScope is what a volume can attach across.
type VolumeScope string

const (
	VolumeZonal    VolumeScope = "zone"   // block storage: EBS, GCP persistent disks, Azure managed disks
	VolumeRegional VolumeScope = "region" // a data center's network storage: RunPod network volumes, Lambda file systems
	VolumeCluster  VolumeScope = "cluster"
)

// VolumeLimits are what a cloud accepts of a volume.
type VolumeLimits struct {
	Scope VolumeScope
	// MinGB and MaxGB bound the size; MaxGB 0: no bound known.
	MinGB, MaxGB int
	// AttachAtCreate says a volume is attached by Create
	// (InstanceSpec.Volumes), not by AttachVolume on a running instance
	// (which such a provider implements as an error). The cloud mounts
	// it: at VolumeMount.MountPath, or, where the cloud chooses the path,
	// at FixedMount, which the core links MountPath to.
	AttachAtCreate bool
	// FixedMount, with AttachAtCreate, is where the cloud mounts a volume
	// whatever the create asks: a format with one %s, the volume's cloud
	// name (its VolumeResourceName); empty: at VolumeMount.MountPath.
	FixedMount string
	// MaxPerInstance is how many volumes one instance can have; 0: no
	// bound known.
	MaxPerInstance int
}

// VolumeMount is a volume an instance is created with
// (InstanceSpec.Volumes).
type VolumeMount struct {
	// ID is the cloud's id of the volume (Volume.ID); Name the journal's.
	ID, Name string
	// MountPath is where the machine should see it (absolute).
	MountPath string
}

// VolumeManager is implemented by providers with persistent volumes. Every
// call is idempotent: a create of a name that exists returns it, a delete
// of a volume that is gone succeeds, an attach of an attached volume to
// the same instance succeeds. Errors are *Error with the kinds of the
// contract (a volume attached elsewhere: InvalidRequest; a zone out of
// volume capacity: Capacity).
type VolumeManager interface {
	VolumeLimits() VolumeLimits
	CreateVolume(ctx context.Context, spec VolumeSpec) (Volume, error)
	// ObserveVolume returns the volume named name (the journal's name) in
	// loc, or nil when there is none.
	ObserveVolume(ctx context.Context, loc Location, name string) (*Volume, error)
	// AttachVolume attaches volume id to a running instance and returns
	// the device path the machine sees it at (a by-id path where the cloud
	// gives one).
	AttachVolume(ctx context.Context, loc Location, id, instanceID string) (device string, err error)
	DetachVolume(ctx context.Context, loc Location, id, instanceID string) error
	DeleteVolume(ctx context.Context, loc Location, id string) error
}

// VolumeChecker is implemented by a VolumeManager whose cloud has rules of
// its own for a volume on an offer: a name its resources cannot take, a
// mount path it cannot mount at, offers whose instances take no volume.
// CheckVolume is called at plan time, sends nothing, and returns an error
// saying why offer o cannot have the volume named name at mountPath; the
// plan leaves the offer out with that reason, before anything is created.
type VolumeChecker interface {
	CheckVolume(o *Offer, name, mountPath string) error
}

// VolumeLabels returns the labels of spec's volume: the caller's
// (UserLabels) and the volume's identity, which win — the journal's name
// under LabelVM, the installation (spec.Installation, else installation)
// under LabelInstallation, and LabelVolume "true", which tells a volume
// from a VM's own disks (they carry the VM's identity labels too).
func (s *VolumeSpec) VolumeLabels(installation string) map[string]string {
	m := make(map[string]string, len(s.UserLabels)+3)
	for k, v := range s.UserLabels {
		m[k] = v
	}
	if s.Installation != "" {
		installation = s.Installation
	}
	m[LabelVM], m[LabelInstallation], m[LabelVolume] = s.Name, installation, "true"
	return m
}

// IsVolumeOf reports whether a resource's labels mark it a gpuprov volume
// of installation (see VolumeLabels).
func IsVolumeOf(labels map[string]string, installation string) bool {
	return labels[LabelVolume] == "true" && labels[LabelInstallation] == installation && labels[LabelVM] != ""
}
