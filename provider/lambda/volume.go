package lambda

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/org/gpuprov/provider"
)

// Persistent volumes (provider.VolumeManager) are Lambda Cloud filesystems:
// network storage of one region, made by POST /filesystems, listed by GET
// /file-systems, deleted by DELETE /filesystems/{id}, and given to an
// instance only by the launch that creates it (file_system_names and
// file_system_mounts of POST /instance-operations/launch). No operation
// mounts a filesystem on a running instance or takes it off one, so the
// adapter is an attach-at-create provider: the core hands the VM's volumes
// to Create in InstanceSpec.Volumes, and a volume is released when its
// instance is terminated.
//
// The launch mounts each filesystem where it is asked
// (RequestedFilesystemMountEntry.mount_point), so the volume is mounted at
// VolumeMount.MountPath and VolumeLimits.FixedMount is empty. Lambda takes
// only mount points under /home, /lambda/nfs or /data, of letters, digits,
// "-" and "/" (the entry's pattern): Create refuses any other MountPath
// before any request.
//
// A filesystem has no size (Lambda bills what it holds), no labels and no
// tags: the installation lives in its name, as it does in the names of the
// adapter's SSH keys and rulesets. A volume's filesystem is
// FilesystemName(volume, installation), gpuprov--<volume>-<5 characters
// derived from the installation>: a filesystem of another installation, or
// one gpuprov did not make, has another name and is never adopted, listed
// as this installation's, or deleted.
//
// Sources: the Lambda Cloud API's OpenAPI document 1.8.3 (errors.go;
// testdata/README.md): listFilesystems, createFilesystem, filesystemDelete
// (https://docs.lambda.ai/api/cloud#listFilesystems,
// https://docs.lambda.ai/api/cloud#createFilesystem,
// https://docs.lambda.ai/api/cloud#filesystemDelete), the Filesystem,
// FilesystemCreateRequest and RequestedFilesystemMountEntry schemas and the
// launch's InstanceLaunchRequest (https://docs.lambda.ai/api/cloud#launchInstance).

const (
	opCreateVolume  = "create volume"
	opObserveVolume = "observe volume"
	opAttachVolume  = "attach volume"
	opDetachVolume  = "detach volume"
	opDeleteVolume  = "delete volume"
)

// filesystemNameRE and maxFilesystemName are FilesystemCreateRequest.name's
// pattern and maxLength.
var filesystemNameRE = regexp.MustCompile(`^[a-zA-Z]+[0-9a-zA-Z-]*$`)

const maxFilesystemName = 60

// mountPointRE and maxMountPoint are RequestedFilesystemMountEntry.mount_point's
// pattern and maxLength: where a launch can mount a filesystem.
var mountPointRE = regexp.MustCompile(`^(/home|/lambda/nfs|/data)[//a-zA-Z0-9-]*$`)

const maxMountPoint = 256

// FilesystemName is the name of the filesystem of volume in installation:
// provider.VolumeResourceName(volume), then "-" and the 5 characters
// derived from the installation that SideName ends with. At most 60
// characters (Lambda's limit), so a volume's name on Lambda is at most 45
// characters; CreateVolume refuses a longer one before any request.
func FilesystemName(volume, installation string) string {
	return provider.VolumeResourceName(volume) + "-" + installationTag(installation)
}

// VolumeLimits implements provider.VolumeManager: filesystems of one
// region, with no size (MinGB and MaxGB 0: Lambda bills what a filesystem
// holds, and a volume's SizeGB is not sent), attached by Create and
// mounted by Lambda at the mount point the launch names (no FixedMount).
// Lambda's reference states no bound on the filesystems of one launch
// (MaxPerInstance 0).
func (p *Provider) VolumeLimits() provider.VolumeLimits {
	return provider.VolumeLimits{Scope: provider.VolumeRegional, AttachAtCreate: true}
}

// volumeInstallation is the installation of a volume call: spec's (for a
// create; "" otherwise), else the provider's. None, or one the provider is
// not bound to, is InvalidRequest: ObserveVolume and DeleteVolume find a
// volume by the provider's installation.
func (p *Provider) volumeInstallation(op, spec string) (string, error) {
	inst := cmp.Or(spec, p.base.Installation)
	switch {
	case inst == "":
		return "", provider.Errorf(provider.InvalidRequest, p.base.Name, op, "no installation: a volume's filesystem is named for one")
	case p.base.Installation != "" && inst != p.base.Installation:
		return "", provider.Errorf(provider.InvalidRequest, p.base.Name, op,
			"volume of installation %q asked of a provider bound to %q", inst, p.base.Installation)
	}
	return inst, nil
}

// filesystemName returns the filesystem name of volume in installation, or
// InvalidRequest when the volume has no name or the filesystem's would
// break Lambda's pattern or length.
func (p *Provider) filesystemName(op, volume, installation string) (string, error) {
	name := FilesystemName(volume, installation)
	switch {
	case volume == "":
		return "", provider.Errorf(provider.InvalidRequest, p.base.Name, op, "a volume needs a name")
	case len(name) > maxFilesystemName:
		return "", provider.Errorf(provider.InvalidRequest, p.base.Name, op,
			"volume %q: its filesystem name %s is %d characters; Lambda allows %d (volume names of at most %d characters)",
			volume, name, len(name), maxFilesystemName, maxFilesystemName-len(FilesystemName("", installation)))
	case !filesystemNameRE.MatchString(name):
		return "", provider.Errorf(provider.InvalidRequest, p.base.Name, op,
			"volume %q: filesystem name %s is not letters, then letters, digits and -", volume, name)
	}
	return name, nil
}

// volumeRegion refuses, before any request, a location that names no
// region: filesystems are regional.
func (p *Provider) volumeRegion(op string, loc provider.Location) error {
	if loc.Region == "" {
		return provider.Errorf(provider.InvalidRequest, p.base.Name, op,
			"location %q names no region: Lambda filesystems are made in a region", loc.String())
	}
	return nil
}

// ownVolume returns the volume name of filesystem fs when fs is one of
// this installation's (FilesystemName of a volume and the installation).
func (p *Provider) ownVolume(fs wireFilesystem) (string, bool) {
	if p.base.Installation == "" {
		return "", false
	}
	rest, ok := strings.CutPrefix(fs.Name, provider.VolumeResourceName(""))
	if !ok {
		return "", false
	}
	volume, ok := strings.CutSuffix(rest, "-"+installationTag(p.base.Installation))
	return volume, ok && volume != "" && FilesystemName(volume, p.base.Installation) == fs.Name
}

// listFilesystems returns every filesystem of the account (GET
// /file-systems; the API does not paginate it).
func (p *Provider) listFilesystems(ctx context.Context, op string) ([]wireFilesystem, error) {
	var out struct {
		Data []wireFilesystem `json:"data"`
	}
	if err := p.call(ctx, op, http.MethodGet, "/file-systems", nil, nil, &out); err != nil {
		return nil, err
	}
	return out.Data, nil
}

// filesystemNamed returns the filesystem name in region from a listing.
func filesystemNamed(list []wireFilesystem, name, region string) (wireFilesystem, bool) {
	i := slices.IndexFunc(list, func(fs wireFilesystem) bool { return fs.Name == name && fs.Region.Name == region })
	if i < 0 {
		return wireFilesystem{}, false
	}
	return list[i], true
}

// mounts reports whether instance in mounts filesystem fs (by id among its
// mounts, or by name).
func mounts(in wireInstance, fs wireFilesystem) bool {
	return slices.ContainsFunc(in.FileSystemMounts, func(m wireMount) bool { return m.FileSystemID == fs.ID }) ||
		slices.Contains(in.FileSystemNames, fs.Name)
}

// holders returns the instances not terminated that mount fs, by id.
func (p *Provider) holders(ctx context.Context, op string, fs wireFilesystem) ([]wireInstance, error) {
	ins, err := p.listInstances(ctx, op)
	if err != nil {
		return nil, err
	}
	var out []wireInstance
	for _, in := range ins {
		if in.Status != "terminated" && mounts(in, fs) {
			out = append(out, in)
		}
	}
	slices.SortFunc(out, func(a, b wireInstance) int { return cmp.Compare(a.ID, b.ID) })
	return out, nil
}

// volume normalizes filesystem fs of volume name: available, or attached
// when Lambda says an instance mounts it (is_in_use), to the first
// instance a listing shows mounting it (one GET /instances, made only
// then). A filesystem is made by its create's answer: never creating. Its
// SizeGB is 0: a filesystem has no size.
func (p *Provider) volume(ctx context.Context, op, name string, fs wireFilesystem) (provider.Volume, error) {
	v := provider.Volume{ID: fs.ID, Name: name, Location: provider.Location{Region: fs.Region.Name}, Status: provider.VolumeAvailable}
	if t, err := time.Parse(time.RFC3339, fs.Created); err == nil {
		v.Created = t
	}
	if !fs.IsInUse {
		return v, nil
	}
	v.Status = provider.VolumeAttached
	hs, err := p.holders(ctx, op, fs)
	if err != nil {
		return provider.Volume{}, err
	}
	if len(hs) > 0 {
		v.AttachedTo = hs[0].ID
	}
	return v, nil
}

// CreateVolume implements provider.VolumeManager: GET /file-systems, and
// the filesystem FilesystemName(spec.Name, installation) in
// spec.Location.Region is returned when it exists (Lambda has no
// idempotency token: a create sent again finds what the first one made);
// else one POST /filesystems {name, region}, whose answer is the
// filesystem, made. spec.SizeGB is not sent: a filesystem has no size.
//
// A name whose filesystem name would break Lambda's pattern or 60
// characters (a volume name of more than 45), a location without a
// region, or an installation the provider is not bound to is
// InvalidRequest before any request. A filesystem of that name that an
// instance of another installation, or one gpuprov did not launch, mounts
// is InvalidRequest. A create answered global/duplicate (another process
// made it between the listing and the create) lists again and returns the
// filesystem when it is in the region; when the name is taken in another
// region, InvalidRequest. global/quota-exceeded is Quota, blocking the
// offer; other errors are classified as every call's (errors.go).
func (p *Provider) CreateVolume(ctx context.Context, spec provider.VolumeSpec) (provider.Volume, error) {
	inst, err := p.volumeInstallation(opCreateVolume, spec.Installation)
	if err != nil {
		return provider.Volume{}, err
	}
	name, err := p.filesystemName(opCreateVolume, spec.Name, inst)
	if err != nil {
		return provider.Volume{}, err
	}
	if err := p.volumeRegion(opCreateVolume, spec.Location); err != nil {
		return provider.Volume{}, err
	}
	region := spec.Location.Region
	list, err := p.listFilesystems(ctx, opCreateVolume)
	if err != nil {
		return provider.Volume{}, err
	}
	if fs, ok := filesystemNamed(list, name, region); ok {
		return p.adoptVolume(ctx, spec.Name, inst, fs)
	}
	var out struct {
		Data wireFilesystem `json:"data"`
	}
	err = p.call(ctx, opCreateVolume, http.MethodPost, "/filesystems", nil, map[string]string{"name": name, "region": region}, &out)
	if err != nil && IsAPIError(err, CodeDuplicate) {
		return p.duplicateVolume(ctx, spec.Name, inst, name, region, err)
	}
	if err != nil {
		return provider.Volume{}, err
	}
	if out.Data.ID == "" {
		return provider.Volume{}, provider.Errorf(provider.Transient, p.base.Name, opCreateVolume, "the create's answer carries no filesystem id")
	}
	p.base.Log.Info("lambda: created filesystem", "provider", p.base.Name, "volume", spec.Name, "filesystem", name,
		"id", out.Data.ID, "region", region)
	return p.volume(ctx, opCreateVolume, spec.Name, out.Data)
}

// duplicateVolume answers a create refused global/duplicate: the name
// exists after all. Listed in the region, it is adopted; elsewhere (or
// not listed), the refusal stands as InvalidRequest.
func (p *Provider) duplicateVolume(ctx context.Context, volume, inst, name, region string, refused error) (provider.Volume, error) {
	list, err := p.listFilesystems(ctx, opCreateVolume)
	if err != nil {
		return provider.Volume{}, err
	}
	if fs, ok := filesystemNamed(list, name, region); ok {
		return p.adoptVolume(ctx, volume, inst, fs)
	}
	where := "no region the listing shows"
	if i := slices.IndexFunc(list, func(fs wireFilesystem) bool { return fs.Name == name }); i >= 0 {
		where = list[i].Region.Name
	}
	var ae *APIError
	errors.As(refused, &ae)
	return provider.Volume{}, &provider.Error{Kind: provider.InvalidRequest, Op: opCreateVolume, Provider: p.base.Name,
		Err: fmt.Errorf("volume %s: the account has filesystem %s in %s, not %s: %w", volume, name, where, region, ae)}
}

// adoptVolume returns fs, the filesystem of volume, unless an instance
// that is not one of inst's gpuprov instances mounts it.
func (p *Provider) adoptVolume(ctx context.Context, volume, inst string, fs wireFilesystem) (provider.Volume, error) {
	if fs.IsInUse {
		hs, err := p.holders(ctx, opCreateVolume, fs)
		if err != nil {
			return provider.Volume{}, err
		}
		for _, in := range hs {
			vm := in.tag(provider.LabelVM)
			if vm == "" || in.Name != InstanceName(vm) || in.tag(provider.LabelInstallation) != inst {
				return provider.Volume{}, provider.Errorf(provider.InvalidRequest, p.base.Name, opCreateVolume,
					"volume %s: filesystem %s (%s) is mounted by instance %s, which is not gpuprov's of installation %s",
					volume, fs.Name, fs.ID, in.ID, inst)
			}
		}
	}
	p.base.Log.Info("lambda: filesystem exists; adopted", "provider", p.base.Name, "volume", volume, "filesystem", fs.Name,
		"id", fs.ID, "region", fs.Region.Name)
	return p.volume(ctx, opCreateVolume, volume, fs)
}

// ObserveVolume implements provider.VolumeManager: GET /file-systems, and
// the filesystem FilesystemName(name, installation) in loc's region, or
// nil when there is none (another installation's is named otherwise). A
// filesystem an instance mounts costs one GET /instances more, for
// AttachedTo. A location without a region, or a name that makes no
// filesystem name, is InvalidRequest before any request.
func (p *Provider) ObserveVolume(ctx context.Context, loc provider.Location, name string) (*provider.Volume, error) {
	inst, err := p.volumeInstallation(opObserveVolume, "")
	if err != nil {
		return nil, err
	}
	fsName, err := p.filesystemName(opObserveVolume, name, inst)
	if err != nil {
		return nil, err
	}
	if err := p.volumeRegion(opObserveVolume, loc); err != nil {
		return nil, err
	}
	list, err := p.listFilesystems(ctx, opObserveVolume)
	if err != nil {
		return nil, err
	}
	fs, ok := filesystemNamed(list, fsName, loc.Region)
	if !ok {
		return nil, nil
	}
	v, err := p.volume(ctx, opObserveVolume, name, fs)
	if err != nil {
		return nil, err
	}
	return &v, nil
}

// AttachVolume implements provider.VolumeManager with an error: a Lambda
// filesystem is mounted by the launch of the instance
// (VolumeLimits.AttachAtCreate, InstanceSpec.Volumes), and no operation
// mounts one on a running instance. It is InvalidRequest, and sends
// nothing.
func (p *Provider) AttachVolume(ctx context.Context, loc provider.Location, id, instanceID string) (string, error) {
	return "", provider.Errorf(provider.InvalidRequest, p.base.Name, opAttachVolume,
		"filesystem %s: Lambda volumes attach when an instance is launched (InstanceSpec.Volumes); none attaches to running instance %s",
		id, instanceID)
}

// DetachVolume implements provider.VolumeManager: GET /instances/{id}, and
// success when the instance is gone or terminated or does not mount
// filesystem id (by id among its mounts, or, with one GET /file-systems,
// by name); a filesystem that is gone is success too. When the instance
// mounts it, InvalidRequest: no operation takes a filesystem off an
// instance, and Lambda releases it when the instance is terminated. An id
// or instance id that is empty is InvalidRequest before any request; the
// location is not needed (ids are the account's).
func (p *Provider) DetachVolume(ctx context.Context, loc provider.Location, id, instanceID string) error {
	if id == "" || instanceID == "" {
		return provider.Errorf(provider.InvalidRequest, p.base.Name, opDetachVolume, "a detach names a filesystem and an instance (%q, %q)", id, instanceID)
	}
	var out struct {
		Data wireInstance `json:"data"`
	}
	err := p.call(ctx, opDetachVolume, http.MethodGet, "/instances/"+url.PathEscape(instanceID), nil, nil, &out)
	switch {
	case isGone(err):
		return nil
	case err != nil:
		return err
	case out.Data.Status == "terminated":
		return nil
	}
	in := out.Data
	fs := wireFilesystem{ID: id}
	if !mounts(in, fs) {
		if len(in.FileSystemNames) == 0 {
			return nil
		}
		list, err := p.listFilesystems(ctx, opDetachVolume)
		if err != nil {
			return err
		}
		i := slices.IndexFunc(list, func(f wireFilesystem) bool { return f.ID == id })
		if i < 0 || !mounts(in, list[i]) {
			return nil
		}
		fs = list[i]
	}
	return provider.Errorf(provider.InvalidRequest, p.base.Name, opDetachVolume,
		"filesystem %s is mounted by instance %s since its launch: Lambda releases it when the instance is terminated, and no operation detaches it",
		cmp.Or(fs.Name, id), instanceID)
}

// DeleteVolume implements provider.VolumeManager: GET /file-systems, and,
// when filesystem id is this installation's and no instance mounts it,
// DELETE /filesystems/{id}. A filesystem that is gone (not listed, or 404)
// is success. One an instance mounts (is_in_use, or the delete refused 400
// filesystems/filesystem-in-use) is an error matching provider.ErrInUse,
// found out with one GET /instances: Transient when every instance that
// mounts it is terminating (its end releases the filesystem),
// InvalidRequest while one is booting, active or otherwise alive. A
// filesystem of another installation, or one gpuprov did not make, is left
// in place and is InvalidRequest. An empty id is InvalidRequest before any
// request; the location is not needed (ids are the account's).
func (p *Provider) DeleteVolume(ctx context.Context, loc provider.Location, id string) error {
	if id == "" {
		return provider.Errorf(provider.InvalidRequest, p.base.Name, opDeleteVolume, "a delete names a filesystem")
	}
	list, err := p.listFilesystems(ctx, opDeleteVolume)
	if err != nil {
		return err
	}
	i := slices.IndexFunc(list, func(fs wireFilesystem) bool { return fs.ID == id })
	if i < 0 {
		return nil
	}
	fs := list[i]
	volume, ok := p.ownVolume(fs)
	if !ok {
		return provider.Errorf(provider.InvalidRequest, p.base.Name, opDeleteVolume,
			"filesystem %s (%s) in %s is not a volume of installation %s; left alone", fs.Name, fs.ID, fs.Region.Name, p.base.Installation)
	}
	if fs.IsInUse {
		return p.filesystemInUse(ctx, fs, nil)
	}
	err = p.call(ctx, opDeleteVolume, http.MethodDelete, "/filesystems/"+url.PathEscape(id), nil, nil, nil)
	switch {
	case isGone(err):
		return nil
	case IsAPIError(err, CodeFilesystemInUse):
		return p.filesystemInUse(ctx, fs, err)
	case err != nil:
		return err
	}
	p.base.Log.Info("lambda: deleted filesystem", "provider", p.base.Name, "volume", volume, "filesystem", fs.Name,
		"id", fs.ID, "region", fs.Region.Name)
	return nil
}

// filesystemInUse is the error of filesystem fs that instances mount: it
// matches provider.ErrInUse, and is Transient when every instance a
// listing shows mounting it is terminating (or none is listed any more:
// the release lags the end), InvalidRequest while one is alive or when
// the listing fails. cause is Lambda's refusal, if any.
func (p *Provider) filesystemInUse(ctx context.Context, fs wireFilesystem, cause error) error {
	kind := provider.Transient
	var who []string
	hs, err := p.holders(ctx, opDeleteVolume, fs)
	if err != nil {
		kind, who = provider.InvalidRequest, []string{"(the instances could not be listed)"}
	}
	for _, in := range hs {
		who = append(who, in.ID+" ("+in.Status+")")
		if in.Status != "terminating" {
			kind = provider.InvalidRequest
		}
	}
	if len(who) == 0 {
		who = []string{"(none listed any more)"}
	}
	inUse := fmt.Errorf("filesystem %s (%s) is %w by instance %s", fs.Name, fs.ID, provider.ErrInUse, strings.Join(who, ", "))
	var ae *APIError
	if errors.As(cause, &ae) {
		inUse = fmt.Errorf("%w: %w", inUse, ae)
	}
	return &provider.Error{Kind: kind, Op: opDeleteVolume, Provider: p.base.Name, Err: inUse}
}

// launchVolumes returns what a launch carries for spec's volumes: their
// filesystem names (file_system_names) and, for each, the mount point
// (file_system_mounts: the volume's MountPath, where Lambda mounts it
// rather than at its default /lambda/nfs/<name>). A volume without an id,
// a name that makes no filesystem name, or a MountPath Lambda does not
// take (outside /home, /lambda/nfs and /data, a character other than
// letters, digits, "-" and "/", more than 256 characters) is
// InvalidRequest; so is /home or /home/ubuntu, which would hide the login
// user's authorized keys.
func (p *Provider) launchVolumes(spec *provider.InstanceSpec) ([]string, []wireMount, error) {
	if len(spec.Volumes) == 0 {
		return nil, nil, nil
	}
	inst, err := p.volumeInstallation("create", "")
	if err != nil {
		return nil, nil, err
	}
	var names []string
	var ms []wireMount
	for _, v := range spec.Volumes {
		name, err := p.filesystemName("create", v.Name, inst)
		if err != nil {
			return nil, nil, err
		}
		if v.ID == "" {
			return nil, nil, provider.Errorf(provider.InvalidRequest, p.base.Name, "create", "volume %s has no filesystem id", v.Name)
		}
		if err := p.checkMountPoint("create", v.Name, v.MountPath); err != nil {
			return nil, nil, err
		}
		names = append(names, name)
		ms = append(ms, wireMount{MountPoint: v.MountPath, FileSystemID: v.ID})
	}
	return names, ms, nil
}

// checkMountPoint refuses a mount path Lambda cannot mount a filesystem
// at (InvalidRequest, nothing sent).
func (p *Provider) checkMountPoint(op, volume, at string) error {
	switch {
	case len(at) > maxMountPoint || !mountPointRE.MatchString(at):
		return provider.Errorf(provider.InvalidRequest, p.base.Name, op,
			"volume %s: Lambda mounts a filesystem only under /home, /lambda/nfs or /data, at a path of letters, digits, - and / (at most %d characters), not %q",
			volume, maxMountPoint, at)
	case at == "/home" || at == "/home/"+SSHUser:
		return provider.Errorf(provider.InvalidRequest, p.base.Name, op,
			"volume %s: mounted at %s it would hide /home/%s/.ssh, which logins need", volume, at, SSHUser)
	}
	return nil
}

// CheckVolume implements provider.VolumeChecker: at plan time, the
// volume's filesystem name must fit Lambda's (the installation's mark
// makes it longer than the core's names may be) and its mount path must be
// one Lambda mounts at; nothing is sent.
func (p *Provider) CheckVolume(o *provider.Offer, name, mountPath string) error {
	inst, err := p.volumeInstallation("plan", "")
	if err != nil {
		return err
	}
	if _, err := p.filesystemName("plan", name, inst); err != nil {
		return err
	}
	return p.checkMountPoint("plan", name, mountPath)
}

var (
	_ provider.VolumeManager = (*Provider)(nil)
	_ provider.VolumeChecker = (*Provider)(nil)
)
