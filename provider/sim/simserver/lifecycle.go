package simserver

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"time"

	"github.com/org/gpuprov/internal/sshd"
)

// instance is an instance with what the server keeps about it. Exported
// fields are persisted in the state file; the private ones are runtime only.
type instance struct {
	Instance
	// HostKeyPEM is the private host key (from user-data, else generated),
	// kept so that a restarted server presents the same key.
	HostKeyPEM     string   `json:"host_key_pem,omitempty"`
	AuthorizedKeys []string `json:"authorized_keys,omitempty"`
	Token          string   `json:"idempotency_token,omitempty"`
	SSHUser        string   `json:"ssh_user"`
	// GPUFaultsAt is when each of Instance.GPUFaults was applied (zero:
	// drawn at create, shown during boot), for its kernel log's times.
	GPUFaultsAt []time.Time `json:"gpu_faults_at,omitempty"`
	// BootFails is drawn at create: the instance ends "failed".
	BootFails bool `json:"boot_fails,omitempty"`
	// The schedule, in the server's clock. Zero times are not scheduled.
	BootingAt time.Time `json:"booting_at"`
	ReadyAt   time.Time `json:"ready_at"`
	PreemptAt time.Time `json:"preempt_at,omitzero"`
	// NoticeAt is when the preemption at PreemptAt is announced on the
	// instance's metadata endpoint (Faults.PreemptNotice, PreemptIn).
	NoticeAt    time.Time `json:"notice_at,omitzero"`
	TerminateAt time.Time `json:"terminate_at,omitzero"`
	PurgeAt     time.Time `json:"purge_at,omitzero"`
	// QueuedUntil is when a flex-start create leaves the queue; RunEndsAt
	// when the cloud deletes a flex-start instance that runs.
	QueuedUntil time.Time `json:"queued_until,omitzero"`
	RunEndsAt   time.Time `json:"run_ends_at,omitzero"`
	VisibleAt   time.Time `json:"visible_at"`

	ssh    *sshd.Server
	cancel func() // the pending timer
}

// view returns a copy of the public part, safe to hand out.
func (in *instance) view() Instance {
	v := in.Instance
	v.Labels = maps.Clone(in.Labels)
	v.Events = slices.Clone(in.Events)
	v.GPUFaults = slices.Clone(in.GPUFaults)
	if in.SSH != nil {
		ssh := *in.SSH
		v.SSH = &ssh
	}
	return v
}

func (in *instance) event(at time.Time, typ, msg string) {
	in.Events = append(in.Events, Event{At: at, Type: typ, Message: msg})
	in.UpdatedAt = at
}

// lookup settles and returns instance id of c, or nil.
func (s *Server) lookup(c *cloud, id string) *instance {
	in := c.instances[id]
	if in == nil {
		return nil
	}
	if s.settle(c, in, s.clock.Now()) {
		s.save()
	}
	return c.instances[id] // settle may have purged it
}

// settleAll settles every instance of c.
func (s *Server) settleAll(c *cloud) {
	now, changed := s.clock.Now(), false
	for _, in := range c.instances {
		if s.settle(c, in, now) {
			changed = true
		}
	}
	if changed {
		s.save()
	}
}

// settle applies every transition of in that is due at now and re-arms its
// timer. Reads call it too, so a fake clock's Advance shows at once. It
// reports whether anything changed. The caller holds s.mu.
func (s *Server) settle(c *cloud, in *instance, now time.Time) bool {
	changed := false
	for {
		switch {
		case in.Status == StatusQueued && !now.Before(in.QueuedUntil):
			in.Status = StatusProvisioning
			in.event(in.QueuedUntil, EventDequeued, "capacity found")
		case in.Status == StatusRunning && !in.RunEndsAt.IsZero() && !now.Before(in.RunEndsAt):
			at := in.RunEndsAt
			in.RunEndsAt = time.Time{}
			s.requestDelete(c, in, at)
			in.StatusMessage = "deleted by the cloud: its run ended (max run duration, or its reservation's end)"
			in.event(at, EventRunEnded, in.StatusMessage)
		case in.Status == StatusProvisioning && !now.Before(in.BootingAt):
			in.Status = StatusBooting
			in.event(in.BootingAt, EventBooting, "")
		case in.Status == StatusBooting && !now.Before(in.ReadyAt):
			s.finishBoot(c, in, in.ReadyAt)
		case in.Status == StatusRunning && !in.PreemptAt.IsZero() && !now.Before(in.PreemptAt):
			s.preempt(c, in, in.PreemptAt, "instance preempted: spot capacity was reclaimed by the provider")
		case (in.Status == StatusStopping || in.Status == StatusPreempted) && !now.Before(in.TerminateAt):
			s.terminate(c, in, in.TerminateAt)
		case in.Status == StatusTerminated && !now.Before(in.PurgeAt):
			s.purge(c, in)
			return true
		default:
			if changed {
				s.arm(c, in, now)
			}
			return changed
		}
		changed = true
	}
}

// due returns when in's next transition is due, or zero for none.
func (in *instance) due() time.Time {
	switch in.Status {
	case StatusQueued:
		return in.QueuedUntil
	case StatusProvisioning:
		return in.BootingAt
	case StatusBooting:
		return in.ReadyAt
	case StatusRunning:
		if in.PreemptAt.IsZero() || !in.RunEndsAt.IsZero() && in.RunEndsAt.Before(in.PreemptAt) {
			return in.RunEndsAt
		}
		return in.PreemptAt
	case StatusStopping, StatusPreempted:
		return in.TerminateAt
	case StatusTerminated:
		return in.PurgeAt
	}
	return time.Time{}
}

// arm (re)schedules in's timer for its next transition.
func (s *Server) arm(c *cloud, in *instance, now time.Time) {
	if in.cancel != nil {
		in.cancel()
		in.cancel = nil
	}
	due := in.due()
	if due.IsZero() {
		return
	}
	in.cancel = s.after(due.Sub(now), func() {
		if c.instances[in.ID] != in {
			return
		}
		if s.settle(c, in, s.clock.Now()) {
			s.save()
		}
	})
}

// resume brings in back after a load: it restarts its SSH server if it was
// running, then settles it.
func (s *Server) resume(c *cloud, in *instance, now time.Time) {
	if in.Status == StatusRunning {
		s.startSSH(c, in, now)
	}
	s.settle(c, in, now)
	s.arm(c, in, now)
}

// finishBoot turns a booting instance running (with its SSH server) or
// failed.
func (s *Server) finishBoot(c *cloud, in *instance, at time.Time) {
	if in.BootFails {
		s.fail(c, in, at, "boot failed: the instance did not pass its boot health check (simulated hardware fault)")
		return
	}
	in.Status = StatusRunning
	in.event(at, EventRunning, "")
	if in.MaxRunSeconds > 0 {
		in.RunEndsAt = at.Add(time.Duration(in.MaxRunSeconds) * time.Second)
	}
	if !in.RunEndsAt.IsZero() && !at.Before(in.RunEndsAt) {
		in.RunEndsAt = at // reclaimed at once: it started after its reservation's reclaim time
	}
	s.startSSH(c, in, at)
}

// fail marks in failed with msg.
func (s *Server) fail(c *cloud, in *instance, at time.Time, msg string) {
	s.stopSSH(in)
	in.Status, in.StatusMessage = StatusFailed, msg
	in.event(at, EventBootFailed, msg)
	c.stats.BootFailures++
}

// preempt reclaims in at the given time.
func (s *Server) preempt(c *cloud, in *instance, at time.Time, msg string) {
	s.stopSSH(in)
	in.Status, in.StatusMessage = StatusPreempted, msg
	in.PreemptAt = time.Time{}
	in.TerminateAt = at.Add(c.cfg.Timing.DeleteTime.Std())
	in.event(at, EventPreempted, msg)
	c.stats.Preemptions++
	s.arm(c, in, s.clock.Now())
}

// requestDelete starts deleting in; it reports false when in is already on
// its way out.
func (s *Server) requestDelete(c *cloud, in *instance, now time.Time) bool {
	switch in.Status {
	case StatusStopping, StatusPreempted, StatusTerminated:
		return false
	}
	s.stopSSH(in)
	in.Status = StatusStopping
	in.TerminateAt = now.Add(c.cfg.Timing.DeleteTime.Std() + c.faults.SlowDelete.Std())
	in.event(now, EventDeleteRequested, "")
	c.stats.Deletes++
	s.arm(c, in, now)
	return true
}

// terminate ends in; it stays readable until PurgeAt.
func (s *Server) terminate(c *cloud, in *instance, at time.Time) {
	s.stopSSH(in)
	msg := "instance deleted by request"
	if in.Status == StatusPreempted {
		msg = in.StatusMessage
	}
	in.Status, in.StatusMessage = StatusTerminated, msg
	in.TerminatedAt = at
	in.PurgeAt = at.Add(s.opts.Retention.Std())
	in.event(at, EventTerminated, msg)
	s.detachAll(c, in, at)
}

// purge forgets in, its idempotency token and its sandbox.
func (s *Server) purge(c *cloud, in *instance) {
	if in.cancel != nil {
		in.cancel()
	}
	delete(c.instances, in.ID)
	c.unindex(in)
	if in.Token != "" && c.tokens[in.Token] == in.ID {
		delete(c.tokens, in.Token)
	}
	if err := os.RemoveAll(s.sandboxDir(c.cfg.Name, in.ID)); err != nil {
		s.log.Warn("simserver: remove sandbox", "cloud", c.cfg.Name, "instance", in.ID, "err", err)
	}
}

// newID returns the next instance id of c: sortable by creation.
func (c *cloud) newID() string {
	c.counter++
	return fmt.Sprintf("i-%08d%04x", c.counter, c.rnd.Uint32()&0xffff)
}

// newInstance creates an instance of offer from req at now and schedules
// its boot. The caller holds s.mu and has validated req.
func (s *Server) newInstance(c *cloud, of *Offer, req *createRequest, boot *bootConfig, now time.Time) *instance {
	t, f := c.cfg.Timing, &c.faults
	bootTime := t.BootTime.Std()
	if j := t.BootJitter.Std(); j > 0 {
		bootTime += time.Duration(c.rnd.Int64N(int64(2*j)+1)) - j
	}
	bootTime = max(bootTime, 0)
	start := now // provisioning starts; a flex-start create queues first
	if req.MaxRunSeconds > 0 {
		start = now.Add(t.FlexQueue.Std())
	}
	user := req.SSHUser
	if user == "" {
		user = c.cfg.SSHUser
	}
	in := &instance{
		Instance: Instance{
			ID: c.newID(), Name: req.Name, Labels: maps.Clone(req.Labels), OfferID: of.ID,
			Region: of.Region, Zone: of.Zone, InstanceType: of.InstanceType, GPU: of.GPU,
			GPUCount: of.GPUCount, GPUMemoryGB: of.GPUMemoryGB, VCPUs: of.VCPUs, MemoryGB: of.MemoryGB,
			PricePerHour: of.PricePerHour, Spot: of.Spot, DiskGB: diskOf(of, req), Status: StatusProvisioning,
			PublicIP: "127.0.0.1", HostKey: boot.hostKeyPublic, SSHKey: req.SSHKey, Firewall: req.Firewall,
			PlacementGroup: req.PlacementGroup, ReservationID: req.ReservationID,
			CreatedAt: now,
		},
		HostKeyPEM: boot.hostKeyPEM, AuthorizedKeys: boot.authorizedKeys, SSHUser: user,
		BootingAt: start.Add(bootTime / 3), ReadyAt: start.Add(bootTime),
		VisibleAt: now.Add(f.ListingLag.Std()),
	}
	if in.Labels == nil {
		in.Labels = map[string]string{}
	}
	if !c.cfg.IgnoreIdempotencyToken {
		in.Token = req.IdempotencyToken
	}
	in.HostID = hostOf(of, in.ID)
	in.GPUFaults = c.gpuFaultsAt(of.ID, in.HostID)
	in.BootFails = matches(f.BootFailOffers, of.ID) || matches(f.BootFailRegions, of.Region) || c.chance(f.BootFailureRate)
	if !in.BootFails && c.chance(f.PreemptionRate) {
		within := orDefault(f.PreemptWithin, 10*time.Second)
		in.PreemptAt = in.ReadyAt.Add(time.Duration(c.rnd.Int64N(int64(within))) + 1)
		if n := f.PreemptNotice.Std(); n > 0 {
			in.NoticeAt = in.PreemptAt.Add(-n)
		}
	}
	in.event(now, EventCreated, "")
	if r := c.reservation(req.ReservationID); r != nil && !r.EndsAt.IsZero() && r.Reclaims > 0 {
		in.RunEndsAt = r.EndsAt.Add(-r.Reclaims.Std())
	}
	if req.MaxRunSeconds > 0 {
		in.Status, in.QueuedUntil, in.MaxRunSeconds = StatusQueued, start, req.MaxRunSeconds
		in.event(now, EventQueued, fmt.Sprintf("flex-start: waiting for capacity, at most %ds of run", req.MaxRunSeconds))
	}
	c.instances[in.ID] = in
	c.index(in)
	if in.Token != "" {
		c.tokens[in.Token] = in.ID
	}
	c.stats.Creates++
	s.arm(c, in, now)
	return in
}

// DefaultDiskGB is an offer's boot disk when its catalog entry sets none;
// MaxDiskGB the largest a create may ask for.
const (
	DefaultDiskGB = 100
	MaxDiskGB     = 16384
)

// diskOf is the boot disk size of an instance of of created by req.
func diskOf(of *Offer, req *createRequest) int {
	d := of.DiskGB
	if d == 0 {
		d = DefaultDiskGB
	}
	return max(d, req.DiskGB)
}
