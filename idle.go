package gpuprov

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/ssh"
)

// idleWatch is the idle detection of the ready VMs whose request has an
// IdleTimeout (Request.IdleTimeout), which the reaper keeps: one kept SSH
// connection per VM, one sample command per VM per reaper interval.
type idleWatch struct {
	mu  sync.Mutex
	vms map[string]*idleVM // by VM name
	wg  sync.WaitGroup
}

// idleVM is what the samples of one VM's instance found.
type idleVM struct {
	instance string
	c        *ssh.Client // kept between samples; nil until the first
	// since is when the samples of this process first found the machine
	// idle without a busy one since; zero: the last sample was busy.
	since    time.Time
	sampling bool
}

// idleSample is what one sample says.
type idleSample struct {
	utils []int // per GPU, percent
	busy  bool  // the request's BusyCommand exited 0
	err   error // the GPUs could not be read: not idle, not busy
}

// idleCommand is the sample's one command: every GPU's utilization, then
// the request's busy command, if any, with its exit status.
func idleCommand(busy string) string {
	cmd := "nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits; echo \"rc $?\""
	if busy != "" {
		// A subshell: an exit in the busy command ends it alone.
		cmd += "; ( " + busy + "\n) </dev/null >/dev/null 2>&1; echo \"busy $?\""
	}
	return cmd
}

// parseIdle reads idleCommand's output.
func parseIdle(out []byte, hasBusy bool) idleSample {
	var s idleSample
	rc, gotBusy := -1, false
	for line := range strings.Lines(string(out)) {
		line = strings.TrimSpace(line)
		switch {
		case line == "":
		case strings.HasPrefix(line, "rc "):
			rc, _ = strconv.Atoi(strings.TrimPrefix(line, "rc "))
		case strings.HasPrefix(line, "busy "):
			gotBusy = true
			s.busy = strings.TrimPrefix(line, "busy ") == "0"
		default:
			n, err := strconv.Atoi(line)
			if err != nil {
				s.err = fmt.Errorf("nvidia-smi answered %q, not a utilization", line)
				return s
			}
			s.utils = append(s.utils, n)
		}
	}
	switch {
	case rc != 0:
		s.err = fmt.Errorf("nvidia-smi exited %d", rc)
	case len(s.utils) == 0:
		s.err = errors.New("nvidia-smi listed no GPU")
	case hasBusy && !gotBusy:
		s.err = errors.New("the busy command's status is missing")
	}
	return s
}

// idle reports whether the sample says the machine is idle: every GPU
// under below percent and not busy by the request's command.
func (s idleSample) idle(below int) bool {
	if s.err != nil || s.busy {
		return false
	}
	for _, u := range s.utils {
		if u >= below {
			return false
		}
	}
	return true
}

// sampleIdle takes, for each ready VM of rows with an IdleTimeout, one
// sample in the background (one at a time per VM), and forgets the VMs
// that are not ready on the same instance any more.
func (p *Provisioner) sampleIdle(ctx context.Context, rows []journal.VM) {
	w := &p.idle
	w.mu.Lock()
	defer w.mu.Unlock()
	keep := map[string]bool{}
	for _, row := range rows {
		var jr journaledRequest
		if row.State != journal.StateReady || row.InstanceID == "" || json.Unmarshal(row.Request, &jr) != nil || jr.IdleTimeout <= 0 {
			continue
		}
		keep[row.Name] = true
		v := w.vms[row.Name]
		if v != nil && v.instance != row.InstanceID {
			v.close()
			v = nil
		}
		if v == nil {
			v = &idleVM{instance: row.InstanceID}
			w.vms[row.Name] = v
		}
		if v.sampling {
			continue
		}
		v.sampling = true
		w.wg.Go(func() { p.sampleOne(ctx, row, jr.Request, v) })
	}
	for name, v := range w.vms {
		if !keep[name] && !v.sampling {
			v.close()
			delete(w.vms, name)
		}
	}
}

// close ends v's connection; the caller holds the idleWatch's lock.
func (v *idleVM) close() {
	if v.c != nil {
		v.c.Close()
		v.c = nil
	}
}

// stopIdle closes every kept connection once the samples under way end.
func (p *Provisioner) stopIdle() {
	w := &p.idle
	w.wg.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	for name, v := range w.vms {
		v.close()
		delete(w.vms, name)
	}
}

// sampleOne takes one sample of row's machine and, when its GPUs have
// been idle for the request's IdleTimeout, deletes the VM (if it is still
// ready on the same instance once its lease is held).
func (p *Provisioner) sampleOne(ctx context.Context, row journal.VM, req Request, v *idleVM) {
	w := &p.idle
	defer func() {
		w.mu.Lock()
		v.sampling = false
		w.mu.Unlock()
	}()
	w.mu.Lock()
	c := v.c
	w.mu.Unlock()
	if c == nil {
		var err error
		if c, err = p.SSH(ctx, row.Name); err != nil {
			p.log.Debug("idle: connecting", "vm", row.Name, "err", err)
			return
		}
		w.mu.Lock()
		v.c = c
		w.mu.Unlock()
	}
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	res, err := c.Run(sctx, idleCommand(req.BusyCommand), ssh.WithOutputLimit(64<<10))
	cancel()
	var exit *ssh.ExitError
	if err != nil && !errors.As(err, &exit) {
		p.log.Debug("idle: sampling", "vm", row.Name, "err", err)
		w.mu.Lock()
		v.close() // the next sample connects again
		w.mu.Unlock()
		return
	}
	s := parseIdle(res.Stdout, req.BusyCommand != "")
	now := p.clock.Now()
	below := req.IdleBelow
	if below == 0 {
		below = DefaultIdleBelow
	}
	w.mu.Lock()
	if !s.idle(below) {
		v.since = time.Time{}
	} else if v.since.IsZero() {
		v.since = now
	}
	since := v.since
	w.mu.Unlock()
	if s.err != nil {
		p.log.Warn("idle: the GPUs could not be read; the machine counts as busy", "vm", row.Name, "err", s.err)
	}
	if since.IsZero() || now.Sub(since) < req.IdleTimeout {
		return
	}
	why := fmt.Sprintf("idle: every GPU under %d%% utilization", below)
	if req.BusyCommand != "" {
		why += " and the busy command failing"
	}
	why += fmt.Sprintf(" since %s, for its idle timeout of %v", since.UTC().Format(time.RFC3339), req.IdleTimeout)
	err = p.deleteIf(ctx, row.Name, func(cur journal.VM) (string, bool) {
		return why, cur.State == journal.StateReady && cur.InstanceID == row.InstanceID
	})
	switch {
	case err == nil:
		p.log.Info("idle: deleted", "vm", row.Name, "why", why)
	case errors.Is(err, errSkipped), errors.Is(err, ErrBusy):
	default:
		p.log.Warn("idle: deleting", "vm", row.Name, "err", err)
	}
}
