package gpuprov

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"

	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/ssh"
)

// Event types of persistent volumes (Request.Volumes).
const (
	// EvVolume: a volume was created, claimed, attached, mounted,
	// released or deleted; the message says which.
	EvVolume = "volume"
)

// volumeJournal is the journal's volume store, or an error saying the
// journal keeps none.
func (p *Provisioner) volumeJournal() (journal.Volumes, error) {
	vj, ok := p.j.(journal.Volumes)
	if !ok {
		return nil, &RequestError{"volumes", "this journal does not keep volumes (the sqlite and postgres journals do)"}
	}
	return vj, nil
}

// checkVolumes refuses, before anything is created, a request whose
// volumes cannot be had: a journal without volumes, no SSH to mount them,
// a volume another live VM holds, a size that differs from the existing
// volume's.
func (p *Provisioner) checkVolumes(ctx context.Context, req *Request) error {
	if len(req.Volumes) == 0 {
		return nil
	}
	vj, err := p.volumeJournal()
	if err != nil {
		return err
	}
	if p.connector == nil {
		return &RequestError{"volumes", "volumes are mounted over SSH: build the Provisioner WithSSH or WithSSHKey"}
	}
	for i, v := range req.Volumes {
		row, err := vj.GetVolume(ctx, v.Name)
		if errors.Is(err, journal.ErrNotFound) || err == nil && row.State == journal.VolumeDeleted {
			if v.SizeGB == 0 {
				return &RequestError{fmt.Sprintf("volumes[%d].size_gb", i), fmt.Sprintf("volume %q does not exist yet: give its size", v.Name)}
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("gpuprov: reading volume %s: %w", v.Name, err)
		}
		if row.VM != "" && row.VM != req.Name {
			if holder, err := p.j.GetVM(ctx, row.VM); err == nil && !holder.State.Terminal() {
				return &RequestError{fmt.Sprintf("volumes[%d]", i), fmt.Sprintf("volume %q is attached to VM %s (%s)", v.Name, row.VM, holder.State)}
			}
		}
		if v.SizeGB != 0 && v.SizeGB != row.SizeGB {
			return &RequestError{fmt.Sprintf("volumes[%d].size_gb", i), fmt.Sprintf("%d: volume %q exists with %d GB", v.SizeGB, v.Name, row.SizeGB)}
		}
	}
	return nil
}

// placeVolumes leaves out of offers those that cannot take the request's
// volumes: a provider without volumes, a size its volumes do not come in,
// and, for a volume that exists, any other provider and zone (region, for
// a provider whose volumes are regional).
func (p *Provisioner) placeVolumes(ctx context.Context, req *Request, offers []provider.Offer) ([]provider.Offer, []Skipped, error) {
	if len(req.Volumes) == 0 {
		return offers, nil, nil
	}
	vj, err := p.volumeJournal()
	if err != nil {
		return nil, nil, err
	}
	existing := map[string]journal.Volume{}
	for _, v := range req.Volumes {
		row, err := vj.GetVolume(ctx, v.Name)
		if err == nil && row.State != journal.VolumeDeleted && row.Provider != "" {
			existing[v.Name] = row
		} else if err != nil && !errors.Is(err, journal.ErrNotFound) {
			return nil, nil, fmt.Errorf("gpuprov: reading volume %s: %w", v.Name, err)
		}
	}
	var kept []provider.Offer
	var skipped []Skipped
	for _, o := range offers {
		if why := p.volumeMisfit(req, &o, existing); why != "" {
			skipped = append(skipped, Skipped{Offer: o, Reason: why})
			continue
		}
		kept = append(kept, o)
	}
	return kept, skipped, nil
}

// volumeMisfit says why offer o cannot take req's volumes ("" if it can).
func (p *Provisioner) volumeMisfit(req *Request, o *provider.Offer, existing map[string]journal.Volume) string {
	pp := p.providers[o.Provider]
	vm, ok := pp.CloudProvider.(provider.VolumeManager)
	if !ok {
		return "no persistent volumes on " + o.Provider
	}
	lim := vm.VolumeLimits()
	if lim.MaxPerInstance > 0 && len(req.Volumes) > lim.MaxPerInstance {
		return fmt.Sprintf("%d volumes asked; an instance of %s takes at most %d", len(req.Volumes), o.Provider, lim.MaxPerInstance)
	}
	if lim.Scope == provider.VolumeZonal && o.Location.Zone == "" {
		// A zonal volume is made in the offer's zone: an offer of a
		// region (a provider configured without zones) names none.
		return fmt.Sprintf("%s's volumes are zonal and the offer names no zone (configure zones)", o.Provider)
	}
	for _, v := range req.Volumes {
		if vc, ok := vm.(provider.VolumeChecker); ok {
			if err := vc.CheckVolume(o, v.Name, v.MountPath); err != nil {
				return fmt.Sprintf("volume %s: %v", v.Name, err)
			}
		}
		if row, ok := existing[v.Name]; ok {
			if row.Provider != o.Provider || row.Region != o.Location.Region || lim.Scope == provider.VolumeZonal && row.Zone != o.Location.Zone {
				where := row.Provider + " " + row.Region
				if row.Zone != "" {
					where += "/" + row.Zone
				}
				return fmt.Sprintf("volume %s is in %s", v.Name, where)
			}
			continue
		}
		if v.SizeGB < lim.MinGB || lim.MaxGB > 0 && v.SizeGB > lim.MaxGB {
			return fmt.Sprintf("volume %s: %d GB is outside %s's %d to %d GB", v.Name, v.SizeGB, o.Provider, lim.MinGB, lim.MaxGB)
		}
	}
	return ""
}

// volumeRow returns the journal's row of volume name (the zero Volume and
// false when there is none, or only a deleted one).
func (d *driver) volumeRow(ctx context.Context, vj journal.Volumes, name string) (journal.Volume, bool, error) {
	rctx, cancel := journalCall(ctx)
	defer cancel()
	row, err := vj.GetVolume(rctx, name)
	if errors.Is(err, journal.ErrNotFound) || err == nil && row.State == journal.VolumeDeleted {
		return journal.Volume{}, false, nil
	}
	if err != nil {
		return journal.Volume{}, false, &journalError{err}
	}
	return row, true, nil
}

// writeVolume commits one write of a volume (with an event) and returns
// the volume as stored.
func (d *driver) writeVolume(ctx context.Context, v journal.Volume, create bool, msg string) (journal.Volume, error) {
	v.UpdatedAt = d.now()
	if create {
		v.CreatedAt = v.UpdatedAt
	}
	st := &journal.Step{Volumes: []journal.VolumeWrite{{Volume: v, Create: create}},
		Events: []journal.Event{{Type: EvVolume, Provider: v.Provider, Region: v.Region, Zone: v.Zone, Message: msg}}}
	if err := d.commit(ctx, st); err != nil {
		var je *journalError
		if errors.As(err, &je) && errors.Is(err, journal.ErrConflict) {
			return v, provider.Errorf(provider.InvalidRequest, v.Provider, "volume", "volume %s was claimed by another VM meanwhile: %v", v.Name, err)
		}
		return v, err
	}
	return st.Volumes[0].Volume, nil
}

// ensureVolumes makes the request's volumes exist in offer o's location
// and claims each for the VM, before the create (phase prepare): a volume
// the journal does not have is written first (creating, with its token),
// then created and waited for; one it has is claimed (a volume is never
// claimed by two VMs). A resumed launch finds what it wrote and goes on.
func (d *driver) ensureVolumes(ctx context.Context, pp *paced, o *provider.Offer, a *journal.Attempt) error {
	if len(d.req.Volumes) == 0 {
		return nil
	}
	vj, err := d.p.volumeJournal()
	if err != nil {
		return err
	}
	vm, ok := pp.CloudProvider.(provider.VolumeManager)
	if !ok {
		return provider.Errorf(provider.InvalidRequest, pp.Name(), "volume", "no persistent volumes on %s", pp.Name())
	}
	for _, vr := range d.req.Volumes {
		row, ok, err := d.volumeRow(ctx, vj, vr.Name)
		if err != nil {
			return err
		}
		if !ok {
			id := newID()
			row, err = d.writeVolume(ctx, journal.Volume{Name: vr.Name, ID: id, Provider: o.Provider, Region: o.Location.Region,
				Zone: o.Location.Zone, SizeGB: vr.SizeGB, MountPath: vr.MountPath, Keep: !vr.DeleteWithVM,
				State: journal.VolumeCreating, VM: d.row.Name, Token: tokenFor(d.p.j.Installation(), id, 0)}, true,
				fmt.Sprintf("creating %s: %d GB in %s", vr.Name, vr.SizeGB, o.Location))
			if err != nil {
				return err
			}
		}
		if row.VM != d.row.Name || row.MountPath != vr.MountPath {
			row.VM, row.MountPath, row.Keep = d.row.Name, vr.MountPath, !vr.DeleteWithVM
			if row, err = d.writeVolume(ctx, row, false, "claimed "+vr.Name); err != nil {
				return err
			}
		}
		if row.State != journal.VolumeCreating {
			continue
		}
		loc := provider.Location{Region: row.Region, Zone: row.Zone}
		var got provider.Volume
		err = d.retry(ctx, pp, a, "create volume", func(ctx context.Context) (err error) {
			got, err = vm.CreateVolume(ctx, provider.VolumeSpec{Name: row.Name, Installation: d.p.j.Installation(), SizeGB: row.SizeGB,
				Location: loc, UserLabels: maps.Clone(d.req.Labels), IdempotencyToken: row.Token})
			return err
		})
		if err != nil {
			if provider.KindOf(err) != provider.Transient {
				// Refused (out of capacity in the zone, say): nothing was
				// made, and the next attempt may make it elsewhere.
				row.State, row.VM, row.EndedAt, row.LastError = journal.VolumeDeleted, "", d.now(), err.Error()
				if _, werr := d.writeVolume(ctx, row, false, fmt.Sprintf("volume %s not created: %v", row.Name, err)); werr != nil {
					return errors.Join(err, werr)
				}
			}
			return err
		}
		for got.Status == provider.VolumeCreating {
			if err := d.p.clock.Sleep(ctx, pp.caps.PollInterval); err != nil {
				return err
			}
			var seen *provider.Volume
			if err := d.retry(ctx, pp, a, "observe volume", func(ctx context.Context) (err error) {
				seen, err = vm.ObserveVolume(ctx, loc, row.Name)
				return err
			}); err != nil {
				return err
			}
			if seen == nil {
				return provider.Errorf(provider.Failed, pp.Name(), "volume", "volume %s vanished while it was being created", row.Name)
			}
			got = *seen
		}
		if got.Status == provider.VolumeFailed {
			return provider.Errorf(provider.Failed, pp.Name(), "volume", "volume %s failed to create", row.Name)
		}
		row.CloudID, row.State = got.ID, journal.VolumeAvailable
		if _, err := d.writeVolume(ctx, row, false, fmt.Sprintf("created %s: %s", row.Name, got.ID)); err != nil {
			return err
		}
	}
	return nil
}

// attachesAtCreate reports whether pp's volumes are attached by its
// Create (provider.VolumeLimits.AttachAtCreate), and its limits.
func attachesAtCreate(pp *paced) (provider.VolumeLimits, bool) {
	vm, ok := pp.CloudProvider.(provider.VolumeManager)
	if !ok {
		return provider.VolumeLimits{}, false
	}
	lim := vm.VolumeLimits()
	return lim, lim.AttachAtCreate
}

// createMounts returns the volumes the create on pp attaches: the VM's
// volumes, as the journal has them, on a provider whose volumes attach at
// create; none elsewhere. Each was made and claimed by ensureVolumes.
func (d *driver) createMounts(ctx context.Context, pp *paced) ([]provider.VolumeMount, error) {
	if _, at := attachesAtCreate(pp); !at || len(d.req.Volumes) == 0 {
		return nil, nil
	}
	vj, err := d.p.volumeJournal()
	if err != nil {
		return nil, err
	}
	var mounts []provider.VolumeMount
	for _, vr := range d.req.Volumes {
		row, ok, err := d.volumeRow(ctx, vj, vr.Name)
		if err != nil {
			return nil, err
		}
		if !ok || row.VM != d.row.Name || row.CloudID == "" {
			return nil, provider.Errorf(provider.InvalidRequest, pp.Name(), "volume", "volume %s is not this VM's (held by %q)", vr.Name, row.VM)
		}
		mounts = append(mounts, provider.VolumeMount{ID: row.CloudID, Name: row.Name, MountPath: row.MountPath})
	}
	return mounts, nil
}

// mountVolumes attaches the VM's volumes to its instance and mounts them
// over conn: a volume is formatted only when the machine's blkid says it
// holds no file system (exit 2), never by assumption. Each step is
// idempotent, so a resumed launch runs it again.
func (d *driver) mountVolumes(ctx context.Context, a *journal.Attempt) error {
	if len(d.req.Volumes) == 0 {
		return nil
	}
	vj, err := d.p.volumeJournal()
	if err != nil {
		return err
	}
	pp := d.p.providers[a.Provider]
	vm, ok := pp.CloudProvider.(provider.VolumeManager)
	if !ok {
		return provider.Errorf(provider.InvalidRequest, pp.Name(), "volume", "no persistent volumes on %s", pp.Name())
	}
	for _, vr := range d.req.Volumes {
		row, ok, err := d.volumeRow(ctx, vj, vr.Name)
		if err != nil {
			return err
		}
		if !ok || row.VM != d.row.Name || row.CloudID == "" {
			return provider.Errorf(provider.InvalidRequest, pp.Name(), "volume", "volume %s is not this VM's (held by %q)", vr.Name, row.VM)
		}
		loc := provider.Location{Region: row.Region, Zone: row.Zone}
		cmd := ""
		if lim, at := attachesAtCreate(pp); at {
			// The create attached it and the cloud mounts it: the machine
			// is asked to show it at its path.
			fixed := ""
			if lim.FixedMount != "" {
				fixed = fmt.Sprintf(lim.FixedMount, provider.VolumeResourceName(row.Name))
			}
			if row.State != journal.VolumeAttached {
				row.State, row.Device = journal.VolumeAttached, fixed
				if row, err = d.writeVolume(ctx, row, false, fmt.Sprintf("attached %s to %s at its create", row.Name, d.row.InstanceID)); err != nil {
					return err
				}
			}
			cmd = mountedCommand(fixed, row.MountPath)
		} else {
			var dev string
			if err := d.retry(ctx, pp, a, "attach volume", func(ctx context.Context) (err error) {
				dev, err = vm.AttachVolume(ctx, loc, row.CloudID, d.row.InstanceID)
				return err
			}); err != nil {
				return err
			}
			if row.State != journal.VolumeAttached || row.Device != dev {
				row.State, row.Device = journal.VolumeAttached, dev
				if row, err = d.writeVolume(ctx, row, false, fmt.Sprintf("attached %s to %s as %s", row.Name, d.row.InstanceID, dev)); err != nil {
					return err
				}
			}
			cmd = mountCommand(row.Device, row.MountPath)
		}
		out, stderr, err := d.conn.Run(ctx, cmd)
		if err != nil {
			return &phaseError{PhaseBootstrap, fmt.Errorf("mounting volume %s at %s: %w: %s", row.Name, row.MountPath, err, strings.TrimSpace(string(stderr)))}
		}
		if msg := strings.TrimSpace(string(out)); msg != "" {
			ev := d.event(EvVolume, a, row.Name+": "+strings.ReplaceAll(msg, "\n", "; "))
			if err := d.commit(ctx, &journal.Step{Events: []journal.Event{ev}}); err != nil {
				return err
			}
		}
	}
	return nil
}

// deviceWait is how many seconds mountCommand waits for a device to appear.
const deviceWait = 60

// mountCommand formats dev only when blank (blkid exit 2: no file system),
// and mounts it at path. Paths are taken under GPUPROV_ROOT, which is
// empty on a real machine (the simulated cloud's sandboxes set it).
//
// It first waits for dev to appear (up to deviceWait): a cloud may say a
// volume is attached before the machine's udev has made its by-id link,
// and blkid of a path that does not exist exits 2 as for a blank device —
// were the link to appear between blkid and mkfs, a volume holding data
// would be formatted.
func mountCommand(dev, mountPath string) string {
	q := ssh.Quote
	return "set -e; s=; [ \"$(id -u)\" = 0 ] || s='sudo -n'; d=" + q(dev) + "; m=\"${GPUPROV_ROOT:-}\"" + q(mountPath) + "\n" +
		fmt.Sprintf("i=0; while [ ! -e \"$d\" ]; do i=$((i+1)); if [ $i -gt %d ]; then echo \"device $d did not appear in %d s\" >&2; exit 1; fi; sleep 1; done\n", deviceWait, deviceWait) +
		"if $s blkid \"$d\" >/dev/null 2>&1; then :; else rc=$?; if [ $rc -eq 2 ]; then $s mkfs.ext4 -q \"$d\"; echo formatted; " +
		"else echo \"blkid $d: exit $rc\" >&2; exit 1; fi; fi\n" +
		"$s mkdir -p \"$m\"\n" +
		"if ! $s mountpoint -q \"$m\"; then $s mount \"$d\" \"$m\"; echo \"mounted at $m\"; fi"
}

// mountedCommand checks that a volume the cloud mounted at create is at
// mountPath: with fixed (the cloud's own path) it waits for fixed to be a
// mount point and links mountPath to it; otherwise it waits for mountPath
// to be one. Both up to deviceWait. Paths are taken under GPUPROV_ROOT, as
// in mountCommand.
func mountedCommand(fixed, mountPath string) string {
	q := ssh.Quote
	wait := func(path string) string {
		return fmt.Sprintf("i=0; while ! $s mountpoint -q %s; do i=$((i+1)); if [ $i -gt %d ]; then echo \"%s is not mounted after %d s\" >&2; exit 1; fi; sleep 1; done\n",
			path, deviceWait, strings.ReplaceAll(path, `"`, ""), deviceWait)
	}
	cmd := "set -e; s=; [ \"$(id -u)\" = 0 ] || s='sudo -n'; r=\"${GPUPROV_ROOT:-}\"; m=\"$r\"" + q(mountPath) + "\n"
	if fixed == "" {
		return cmd + wait(`"$m"`) + "echo \"mounted at $m\""
	}
	return cmd + "f=\"$r\"" + q(fixed) + "\n" + wait(`"$f"`) +
		"if [ \"$(readlink \"$m\" 2>/dev/null)\" != \"$f\" ]; then\n" +
		"  if [ -e \"$m\" ] && [ ! -L \"$m\" ]; then $s rmdir \"$m\" 2>/dev/null || { echo \"$m exists and is not an empty directory\" >&2; exit 1; }; fi\n" +
		"  $s mkdir -p \"$(dirname \"$m\")\"; $s ln -sfn \"$f\" \"$m\"; echo \"linked $m to $f\"\nfi"
}

// releaseVolumes lets go of the VM's volumes once its instances are gone
// (deleted: the VM is deleted; else its launch failed): a kept volume
// becomes available to the next VM; one asked deleted with the VM
// (DeleteWithVM), or one this launch created and never used, is deleted,
// its intent journaled first.
func (d *driver) releaseVolumes(ctx context.Context, deleted bool) error {
	if len(d.jr.Volumes) == 0 {
		return nil
	}
	vj, err := d.p.volumeJournal()
	if err != nil {
		return err
	}
	for _, vr := range d.jr.Volumes {
		row, ok, err := d.volumeRow(ctx, vj, vr.Name)
		if err != nil {
			return err
		}
		if !ok || row.VM != d.row.Name {
			continue // never claimed by this VM, or another's now
		}
		drop := vr.DeleteWithVM || row.CloudID == "" && row.State == journal.VolumeCreating && !deleted
		if !drop {
			row.State, row.VM, row.Device = journal.VolumeAvailable, "", ""
			if row.CloudID == "" {
				row.State = journal.VolumeCreating // a create that may have landed: the next launch finds it
			}
			if _, err := d.writeVolume(ctx, row, false, "kept "+row.Name+" for the next VM"); err != nil {
				return err
			}
			continue
		}
		if err := d.deleteVolume(ctx, row); err != nil {
			return err
		}
	}
	return nil
}

// deleteVolume deletes volume row at its cloud, the intent journaled first.
func (d *driver) deleteVolume(ctx context.Context, row journal.Volume) error {
	pp, ok := d.p.providers[row.Provider]
	if !ok {
		return fmt.Errorf("gpuprov: volume %s: provider %q is not configured", row.Name, row.Provider)
	}
	vm, _ := pp.CloudProvider.(provider.VolumeManager)
	if vm == nil {
		return fmt.Errorf("gpuprov: volume %s: %s has no volumes", row.Name, row.Provider)
	}
	row.State = journal.VolumeDeleting
	row, err := d.writeVolume(ctx, row, false, "deleting "+row.Name)
	if err != nil {
		return err
	}
	loc := provider.Location{Region: row.Region, Zone: row.Zone}
	if row.CloudID == "" {
		// A create that may have landed: find it by name first.
		var seen *provider.Volume
		if err := pp.call(ctx, "observe volume", loc, func(ctx context.Context) (err error) {
			seen, err = vm.ObserveVolume(ctx, loc, row.Name)
			return err
		}); err != nil {
			return err
		}
		if seen != nil {
			row.CloudID = seen.ID
		}
	}
	if row.CloudID != "" {
		dctx, cancel := detached(ctx, d.p, pp.caps.DeleteTimeout)
		defer cancel()
		for {
			err := pp.call(dctx, "delete volume", loc, func(ctx context.Context) error { return vm.DeleteVolume(ctx, loc, row.CloudID) })
			if err == nil {
				break
			}
			// Attached still: the instance's termination detaches it soon.
			if !errors.Is(err, provider.ErrInUse) && provider.KindOf(err) != provider.Transient {
				return fmt.Errorf("gpuprov: deleting volume %s: %w", row.Name, err)
			}
			if serr := d.p.clock.Sleep(dctx, pp.caps.PollInterval); serr != nil {
				return fmt.Errorf("gpuprov: deleting volume %s: %w (last: %w)", row.Name, serr, err)
			}
		}
	}
	row.State, row.VM, row.Device, row.EndedAt = journal.VolumeDeleted, "", "", d.now()
	_, err = d.writeVolume(ctx, row, false, "deleted "+row.Name)
	return err
}

// Volumes returns the journal's persistent volumes that are not deleted
// (all: deleted ones too), by name.
func (p *Provisioner) Volumes(ctx context.Context, all bool) ([]journal.Volume, error) {
	vj, err := p.volumeJournal()
	if err != nil {
		return nil, err
	}
	return vj.ListVolumes(ctx, journal.VolumeListOptions{Live: !all})
}
