package simserver

import (
	"embed"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Volume statuses, as the API reports them.
const (
	VolumeCreating  = "creating"
	VolumeAvailable = "available"
	VolumeAttached  = "attached"
)

// Volume sizes a create accepts, in GB.
const (
	MinVolumeGB = 1
	MaxVolumeGB = 16384
)

// Volume is a zonal persistent volume as the API returns it (GET
// volumes/{id}) and as Server.Volumes reports it. Values are copies.
type Volume struct {
	// ID is the cloud's id ("vol-", 8 digits, 4 hex digits).
	ID string `json:"id"`
	// Name is unique among a zone's volumes; gpuprov names its volumes
	// gpuprov--<name> (provider.VolumeResourceName) and labels them with
	// provider.LabelVM (the journal's name), provider.LabelInstallation
	// and provider.LabelVolume.
	Name   string            `json:"name"`
	Labels map[string]string `json:"labels"`
	Region string            `json:"region"`
	Zone   string            `json:"zone"`
	SizeGB int               `json:"size_gb"`
	// Status is one of the Volume constants: creating for Timing.VolumeTime
	// after the create, then available, or attached while AttachedTo is set.
	Status string `json:"status"`
	// AttachedTo is the instance the volume is attached to; Device is the
	// path at which that instance's sandbox sees it.
	AttachedTo string    `json:"attached_to,omitempty"`
	Device     string    `json:"device,omitempty"`
	CreatedAt  time.Time `json:"created_at"`
	UpdatedAt  time.Time `json:"updated_at"`
}

// volume is a volume with what the server keeps about it; it is persisted
// whole in the state file.
type volume struct {
	Volume
	Token   string    `json:"idempotency_token,omitempty"`
	ReadyAt time.Time `json:"ready_at"`
}

func (v *volume) view() Volume {
	out := v.Volume
	out.Labels = maps.Clone(v.Labels)
	return out
}

type volumeRequest struct {
	Name             string            `json:"name"`
	Zone             string            `json:"zone"`
	SizeGB           int               `json:"size_gb"`
	Labels           map[string]string `json:"labels"`
	IdempotencyToken string            `json:"idempotency_token"`
}

type attachRequest struct {
	InstanceID string `json:"instance_id"`
}

// The emulated block-device tools (blkid, mkfs.ext4, mount, umount,
// findmnt, mountpoint) written into every sandbox's bin.
//
//go:embed volemu
var volEmu embed.FS

// volumeTools are the scripts of volemu written into a sandbox's bin.
var volumeTools = []string{"blkid", "mkfs.ext4", "mount", "umount", "findmnt", "mountpoint"}

// writeVolumeTools writes the emulated block-device tools into sandbox dir:
// the scripts into bin, their library into .sim-vol.
func writeVolumeTools(dir string) error {
	lib := filepath.Join(dir, ".sim-vol")
	if err := os.MkdirAll(lib, 0o700); err != nil {
		return err
	}
	b, err := volEmu.ReadFile("volemu/lib.sh")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(lib, "lib.sh"), b, 0o600); err != nil {
		return err
	}
	for _, name := range volumeTools {
		b, err := volEmu.ReadFile("volemu/" + name)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, "bin", name), b, 0o755); err != nil {
			return err
		}
	}
	return nil
}

// volumeDir is where volume id of cloud keeps its data:
// <state dir>/volumes/<cloud>/<id>.
func (s *Server) volumeDir(cloud, id string) string {
	return filepath.Join(s.stateDir, "volumes", cloud, id)
}

// deviceOf is the path at which instance in's sandbox sees volume id.
func (s *Server) deviceOf(cloud string, in *instance, id string) string {
	return filepath.Join(s.sandboxDir(cloud, in.ID), ".sim-dev", id)
}

// newVolumeID returns the next volume id of c, sortable by creation; its
// suffix is a hash, not a draw, so volumes leave the seeded faults as they
// were.
func (c *cloud) newVolumeID(name string) string {
	c.volumeCounter++
	h := fnv.New32a()
	h.Write([]byte(c.cfg.Name + "/" + name + "/" + strconv.Itoa(c.volumeCounter)))
	return fmt.Sprintf("vol-%08d%04x", c.volumeCounter, h.Sum32()&0xffff)
}

// zoneRegion returns the region of zone, from c's offers.
func (c *cloud) zoneRegion(zone string) (string, bool) {
	for _, of := range c.cfg.Offers {
		if of.Zone == zone && zone != "" {
			return of.Region, true
		}
	}
	return "", false
}

// settleVolume applies what is due to v at now: the end of its creation,
// and the termination of the instance it is attached to (which detaches
// it). It reports whether v changed. The caller holds s.mu.
func (s *Server) settleVolume(c *cloud, v *volume, now time.Time) bool {
	changed := false
	if v.Status == VolumeCreating && !now.Before(v.ReadyAt) {
		v.Status, v.UpdatedAt = VolumeAvailable, v.ReadyAt
		changed = true
	}
	if v.AttachedTo != "" {
		// Settling the instance may terminate it, which detaches v.
		if in := s.lookup(c, v.AttachedTo); v.AttachedTo != "" && (in == nil || in.Status == StatusTerminated) {
			s.detach(c, v, in, now)
		}
		changed = changed || v.AttachedTo == ""
	}
	return changed
}

// volume settles and returns volume id of c, or nil.
func (s *Server) volume(c *cloud, id string, now time.Time) *volume {
	v := c.volumes[id]
	if v != nil && s.settleVolume(c, v, now) {
		s.save()
	}
	return v
}

// detach detaches v from in (nil: an instance already gone), removing its
// device from in's sandbox. The caller holds s.mu.
func (s *Server) detach(c *cloud, v *volume, in *instance, now time.Time) {
	if in != nil && !s.opts.DisableSSH {
		// A sandbox already removed has no device left: nothing to do.
		if err := os.Remove(s.deviceOf(c.cfg.Name, in, v.ID)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			s.log.Warn("simserver: remove volume device", "cloud", c.cfg.Name, "volume", v.ID, "instance", in.ID, "err", err)
		}
	}
	v.AttachedTo, v.Device, v.Status, v.UpdatedAt = "", "", VolumeAvailable, now
	if !v.ReadyAt.IsZero() && now.Before(v.ReadyAt) {
		v.Status = VolumeCreating // not expected: attach needs an available volume
	}
}

// detachAll detaches every volume attached to in: its instance terminated.
// The caller holds s.mu.
func (s *Server) detachAll(c *cloud, in *instance, at time.Time) {
	for _, v := range c.volumes {
		if v.AttachedTo == in.ID {
			s.detach(c, v, in, at)
		}
	}
}

func (s *Server) createVolume(c *cloud, _ *http.Request, body []byte, now time.Time) (int, any, *apiError) {
	var req volumeRequest
	if err := decode(body, &req); err != nil {
		return 0, nil, err
	}
	if tok := req.IdempotencyToken; tok != "" && !c.cfg.IgnoreIdempotencyToken {
		if v := s.volume(c, c.volumeTokens[tok], now); v != nil {
			c.stats.IdempotentReplays++
			return http.StatusOK, v.view(), nil
		}
	}
	if req.Name == "" || req.Zone == "" {
		return 0, nil, errorf(http.StatusBadRequest, CodeInvalidRequest, "name and zone are required")
	}
	for k := range req.Labels {
		if k == "" {
			return 0, nil, errorf(http.StatusBadRequest, CodeInvalidRequest, "empty label key")
		}
	}
	if req.SizeGB < MinVolumeGB || req.SizeGB > MaxVolumeGB {
		return 0, nil, errorf(http.StatusBadRequest, CodeInvalidRequest, "size_gb %d is not between %d and %d", req.SizeGB, MinVolumeGB, MaxVolumeGB)
	}
	region, ok := c.zoneRegion(req.Zone)
	if !ok {
		return 0, nil, errorf(http.StatusBadRequest, CodeInvalidRequest, "unknown zone %q", req.Zone)
	}
	for _, v := range c.volumes {
		if v.Name == req.Name && v.Zone == req.Zone {
			return 0, nil, errorf(http.StatusConflict, CodeConflict, "a volume named %q exists in zone %s (%s), created with another idempotency token", req.Name, req.Zone, v.ID)
		}
	}
	if matches(c.faults.VolumeStockoutZones, req.Zone) {
		return 0, nil, errorf(http.StatusConflict, CodeOutOfCapacity, "zone %s is out of volume capacity", req.Zone)
	}
	v := &volume{Volume: Volume{ID: c.newVolumeID(req.Name), Name: req.Name, Labels: maps.Clone(req.Labels),
		Region: region, Zone: req.Zone, SizeGB: req.SizeGB, Status: VolumeCreating, CreatedAt: now, UpdatedAt: now},
		ReadyAt: now.Add(c.cfg.Timing.VolumeTime.Std())}
	if v.Labels == nil {
		v.Labels = map[string]string{}
	}
	dir := s.volumeDir(c.cfg.Name, v.ID)
	err := os.MkdirAll(dir, 0o700)
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, "size_gb"), []byte(strconv.Itoa(v.SizeGB)+"\n"), 0o600)
	}
	if err != nil {
		return 0, nil, errorf(http.StatusInternalServerError, CodeInternal, "volume storage: %v", err)
	}
	if !c.cfg.IgnoreIdempotencyToken && req.IdempotencyToken != "" {
		v.Token = req.IdempotencyToken
		c.volumeTokens[v.Token] = v.ID
	}
	c.volumes[v.ID] = v
	s.settleVolume(c, v, now)
	s.save()
	return http.StatusCreated, v.view(), nil
}

func (s *Server) listVolumes(c *cloud, r *http.Request, _ []byte, now time.Time) (int, any, *apiError) {
	q := r.URL.Query()
	want, aerr := labelFilter(q["label"], "label")
	if aerr != nil {
		return 0, nil, aerr
	}
	anyOf := map[string][]string{}
	for _, l := range q["label_any"] {
		k, v, ok := strings.Cut(l, "=")
		if !ok || k == "" {
			return 0, nil, errorf(http.StatusBadRequest, CodeInvalidRequest, "label_any filter %q: want key=value", l)
		}
		anyOf[k] = append(anyOf[k], v)
	}
	out := []Volume{}
	changed := false
	for _, v := range c.volumes {
		if (q.Get("region") != "" && v.Region != q.Get("region")) || (q.Get("zone") != "" && v.Zone != q.Get("zone")) ||
			(q.Get("name") != "" && v.Name != q.Get("name")) || !labelsMatch(v.Labels, want, anyOf) {
			continue
		}
		if s.settleVolume(c, v, now) {
			changed = true
		}
		out = append(out, v.view())
	}
	if changed {
		s.save()
	}
	slices.SortFunc(out, func(a, b Volume) int { return strings.Compare(a.ID, b.ID) })
	return http.StatusOK, map[string][]Volume{"volumes": out}, nil
}

func (s *Server) getVolume(c *cloud, r *http.Request, _ []byte, now time.Time) (int, any, *apiError) {
	v := s.volume(c, r.PathValue("id"), now)
	if v == nil {
		return 0, nil, errorf(http.StatusNotFound, CodeNotFound, "no volume %q", r.PathValue("id"))
	}
	return http.StatusOK, v.view(), nil
}

// inUse is the error of a volume attached to in, another instance than
// the call's: volume_in_use while in lives, conflict (retry) while it is
// on its way out (the volume is detached when it terminates).
func inUse(v *volume, in *instance, what string) *apiError {
	if in != nil && (in.Status == StatusStopping || in.Status == StatusPreempted) {
		return errorf(http.StatusConflict, CodeConflict, "%s: volume %s is attached to instance %s, which is %s; it is detached when the instance terminates", what, v.ID, in.ID, in.Status)
	}
	return errorf(http.StatusConflict, CodeVolumeInUse, "%s: volume %s is attached to instance %s", what, v.ID, v.AttachedTo)
}

func (s *Server) attachVolume(c *cloud, r *http.Request, body []byte, now time.Time) (int, any, *apiError) {
	var req attachRequest
	if err := decode(body, &req); err != nil {
		return 0, nil, err
	}
	v := s.volume(c, r.PathValue("id"), now)
	if v == nil {
		return 0, nil, errorf(http.StatusNotFound, CodeNotFound, "no volume %q", r.PathValue("id"))
	}
	if req.InstanceID == "" {
		return 0, nil, errorf(http.StatusBadRequest, CodeInvalidRequest, "instance_id is required")
	}
	if v.AttachedTo == req.InstanceID {
		return http.StatusOK, v.view(), nil
	}
	in := s.lookup(c, req.InstanceID)
	switch {
	case in == nil:
		return 0, nil, errorf(http.StatusBadRequest, CodeInvalidRequest, "unknown instance_id %q", req.InstanceID)
	case in.Status != StatusRunning:
		return 0, nil, errorf(http.StatusBadRequest, CodeInvalidRequest, "instance %s is %s: a volume attaches to a running instance", in.ID, in.Status)
	case in.Zone != v.Zone:
		return 0, nil, errorf(http.StatusBadRequest, CodeInvalidRequest, "volume %s is in zone %s, instance %s in zone %s: a volume attaches in its own zone", v.ID, v.Zone, in.ID, in.Zone)
	case v.AttachedTo != "":
		return 0, nil, inUse(v, s.lookup(c, v.AttachedTo), "attach")
	case v.Status == VolumeCreating:
		return 0, nil, errorf(http.StatusConflict, CodeConflict, "volume %s is still creating; attach it once it is available", v.ID)
	}
	v.Device = s.deviceOf(c.cfg.Name, in, v.ID)
	if !s.opts.DisableSSH {
		if err := os.MkdirAll(filepath.Dir(v.Device), 0o700); err != nil {
			return 0, nil, errorf(http.StatusInternalServerError, CodeInternal, "attach: %v", err)
		}
		_ = os.Remove(v.Device) // a stale device of an earlier attach, if any; Symlink says if it stays
		if err := os.Symlink(s.volumeDir(c.cfg.Name, v.ID), v.Device); err != nil {
			v.Device = ""
			return 0, nil, errorf(http.StatusInternalServerError, CodeInternal, "attach: %v", err)
		}
	}
	v.AttachedTo, v.Status, v.UpdatedAt = in.ID, VolumeAttached, now
	s.save()
	return http.StatusOK, v.view(), nil
}

func (s *Server) detachVolume(c *cloud, r *http.Request, body []byte, now time.Time) (int, any, *apiError) {
	var req attachRequest
	if err := decode(body, &req); err != nil {
		return 0, nil, err
	}
	v := s.volume(c, r.PathValue("id"), now)
	if v == nil {
		return 0, nil, errorf(http.StatusNotFound, CodeNotFound, "no volume %q", r.PathValue("id"))
	}
	switch {
	case v.AttachedTo == "":
		return http.StatusOK, v.view(), nil // detached already: idempotent
	case req.InstanceID != "" && req.InstanceID != v.AttachedTo:
		return 0, nil, errorf(http.StatusConflict, CodeVolumeInUse, "detach: volume %s is attached to instance %s, not %s", v.ID, v.AttachedTo, req.InstanceID)
	}
	s.detach(c, v, c.instances[v.AttachedTo], now)
	s.save()
	return http.StatusOK, v.view(), nil
}

func (s *Server) deleteVolume(c *cloud, r *http.Request, _ []byte, now time.Time) (int, any, *apiError) {
	v := s.volume(c, r.PathValue("id"), now)
	if v == nil {
		return 0, nil, errorf(http.StatusNotFound, CodeNotFound, "no volume %q", r.PathValue("id"))
	}
	if v.AttachedTo != "" {
		return 0, nil, inUse(v, s.lookup(c, v.AttachedTo), "delete")
	}
	delete(c.volumes, v.ID)
	if v.Token != "" && c.volumeTokens[v.Token] == v.ID {
		delete(c.volumeTokens, v.Token)
	}
	if err := os.RemoveAll(s.volumeDir(c.cfg.Name, v.ID)); err != nil {
		s.log.Warn("simserver: remove volume data", "cloud", c.cfg.Name, "volume", v.ID, "err", err)
	}
	s.save()
	return http.StatusNoContent, nil, nil
}

// Volumes returns every volume of cloud, sorted by id.
func (s *Server) Volumes(cloudName string) ([]Volume, error) {
	s.mu.Lock()
	defer s.unlock()
	c, err := s.cloud(cloudName)
	if err != nil {
		return nil, err
	}
	now, changed := s.clock.Now(), false
	out := make([]Volume, 0, len(c.volumes))
	for _, v := range c.volumes {
		if s.settleVolume(c, v, now) {
			changed = true
		}
		out = append(out, v.view())
	}
	if changed {
		s.save()
	}
	slices.SortFunc(out, func(a, b Volume) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// VolumeDir returns the folder holding the data of volume id of cloud
// (<state dir>/volumes/<cloud>/<id>): size_gb, and once formatted its
// superblock and the file system's files under fs/.
func (s *Server) VolumeDir(cloudName, id string) string { return s.volumeDir(cloudName, id) }
