//go:build unix

package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// buildFleet builds examples/fleet into dir.
func buildFleet(dir string) (string, error) {
	bin := filepath.Join(dir, "fleet")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/org/gpuprov/examples/fleet").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("building the fleet: %v\n%s", err, out)
	}
	return bin, nil
}

// actionLog is a trial's log of what the harness did, one line per action
// with the wall clock (to set beside the replicas' logs, the sim's events
// and the journal's rows) and the time since the trial started.
type actionLog struct {
	mu    sync.Mutex
	f     *os.File
	start time.Time
}

func newActionLog(path string) (*actionLog, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	return &actionLog{f: f, start: time.Now()}, nil
}

func (tl *actionLog) logf(format string, args ...any) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	now := time.Now()
	fmt.Fprintf(tl.f, "%s +%6.3fs %s\n", now.UTC().Format("15:04:05.000000"), now.Sub(tl.start).Seconds(), fmt.Sprintf(format, args...))
}

func (tl *actionLog) close() { tl.f.Close() }

// fleetReplica is one fleet process, supervised as a service manager would: a
// replica that exits is started again (after half a second), one the
// harness kills after the delay the kill names. Every start is a new
// generation with its own lease owner, r<i>g<gen>, which Recover treats
// as a process on another host (its leases lapse by their TTL, never by a
// liveness probe of its pid): the deployment the fleet's replicas are
// written for.
type fleetReplica struct {
	id   int
	bin  string
	args []string
	log  *os.File // stdout and stderr of every generation
	tl   *actionLog

	mu       sync.Mutex
	cmd      *exec.Cmd     // the running generation; nil between two
	gen      int           // generations started
	restart  time.Duration // after a kill by the harness: the delay before the next start
	killed   bool
	paused   bool // the running generation is SIGSTOPped
	stopping bool
	exits    int // exits the harness did not cause
	stop     chan struct{}
	done     chan struct{}
}

// startReplica starts replica id of bin with args, logging to dir/r<id>.log.
func startReplica(id int, bin string, args []string, dir string, tl *actionLog) (*fleetReplica, error) {
	log, err := os.Create(filepath.Join(dir, fmt.Sprintf("r%d.log", id)))
	if err != nil {
		return nil, err
	}
	r := &fleetReplica{id: id, bin: bin, args: args, log: log, tl: tl, stop: make(chan struct{}), done: make(chan struct{})}
	started := make(chan error, 1)
	go r.supervise(started)
	if err := <-started; err != nil {
		return nil, err
	}
	return r, nil
}

// owner is the lease owner of generation gen.
func (r *fleetReplica) owner(gen int) string { return fmt.Sprintf("r%dg%d", r.id, gen) }

// supervise runs generation after generation until Stop. The first start's
// error goes to started; a later start that fails is retried.
func (r *fleetReplica) supervise(started chan<- error) {
	defer close(r.done)
	defer r.log.Close()
	for {
		r.mu.Lock()
		if r.stopping {
			r.mu.Unlock()
			return
		}
		r.gen++
		gen := r.gen
		cmd := exec.Command(r.bin, append(append([]string(nil), r.args...), "-owner", r.owner(gen))...)
		cmd.Stdout, cmd.Stderr = r.log, r.log
		cmd.Env = append(os.Environ(), "GOTRACEBACK=all")
		fmt.Fprintf(r.log, "=== harness %s: generation %d (owner %s)\n", time.Now().UTC().Format("15:04:05.000000"), gen, r.owner(gen))
		err := cmd.Start()
		if err == nil {
			r.cmd = cmd
		}
		r.mu.Unlock()
		if started != nil {
			started <- err
			started = nil
			if err != nil {
				return
			}
		}
		if err != nil {
			r.tl.logf("r%d: start of generation %d failed: %v", r.id, gen, err)
			if !r.sleep(500 * time.Millisecond) {
				return
			}
			continue
		}
		r.tl.logf("r%d: generation %d started: pid %d, owner %s", r.id, gen, cmd.Process.Pid, r.owner(gen))
		err = cmd.Wait()
		r.mu.Lock()
		r.cmd = nil
		killed, delay, stopping := r.killed, r.restart, r.stopping
		r.killed = false
		if !killed && !stopping {
			r.exits++
		}
		r.mu.Unlock()
		fmt.Fprintf(r.log, "=== harness %s: generation %d ended: %v\n", time.Now().UTC().Format("15:04:05.000000"), gen, err)
		switch {
		case stopping:
			r.tl.logf("r%d: generation %d stopped: %v", r.id, gen, err)
			return
		case killed:
			r.tl.logf("r%d: generation %d killed; next start in %v", r.id, gen, delay.Round(time.Millisecond))
		default:
			delay = 500 * time.Millisecond
			r.tl.logf("r%d: generation %d exited by itself (%v); next start in %v", r.id, gen, err, delay)
		}
		if !r.sleep(delay) {
			return
		}
	}
}

// sleep waits d or until Stop; it reports whether to go on.
func (r *fleetReplica) sleep(d time.Duration) bool {
	select {
	case <-time.After(d):
		return true
	case <-r.stop:
		return false
	}
}

// free reports whether a generation is running and not paused.
func (r *fleetReplica) free() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cmd != nil && !r.paused && !r.stopping
}

// kill sends SIGKILL to the running generation and has the next one start
// after restart. It reports false when no generation was running, or it
// was paused.
func (r *fleetReplica) kill(restart time.Duration) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd == nil || r.paused || r.stopping {
		return false
	}
	r.killed, r.restart = true, restart
	r.tl.logf("r%d: SIGKILL generation %d (pid %d)", r.id, r.gen, r.cmd.Process.Pid)
	_ = r.cmd.Process.Signal(syscall.SIGKILL) // it may have exited meanwhile: Wait tells
	return true
}

// pause sends SIGSTOP to the running generation and returns the function
// that sends it SIGCONT; ok is false when no generation was running, or it
// was paused already.
func (r *fleetReplica) pause() (cont func(), ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd == nil || r.paused || r.stopping {
		return nil, false
	}
	p, gen := r.cmd.Process, r.gen
	r.tl.logf("r%d: SIGSTOP generation %d (pid %d)", r.id, gen, p.Pid)
	_ = p.Signal(syscall.SIGSTOP)
	r.paused = true
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.tl.logf("r%d: SIGCONT generation %d (pid %d)", r.id, gen, p.Pid)
		_ = p.Signal(syscall.SIGCONT) // Stop may have ended it: nothing to resume then
		r.paused = false
	}, true
}

// Stop ends the replica: SIGCONT (it may be paused), SIGTERM, and, if it
// has not exited within grace, SIGQUIT (the Go runtime writes every
// goroutine's stack to the replica's log and exits), then SIGKILL three
// seconds later. forced reports that SIGTERM did not end it.
func (r *fleetReplica) Stop(grace time.Duration) (forced bool) {
	r.mu.Lock()
	if !r.stopping {
		r.stopping = true
		close(r.stop)
	}
	cmd := r.cmd
	r.paused = false
	if cmd != nil {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Signal(syscall.SIGTERM)
	}
	r.mu.Unlock()
	select {
	case <-r.done:
		return false
	case <-time.After(grace):
	}
	r.mu.Lock()
	if r.cmd != nil {
		r.tl.logf("r%d: generation %d still running %v after SIGTERM: SIGQUIT (its goroutines go to r%d.log)", r.id, r.gen, grace, r.id)
		_ = r.cmd.Process.Signal(syscall.SIGQUIT)
	}
	r.mu.Unlock()
	select {
	case <-r.done:
		return true
	case <-time.After(3 * time.Second):
	}
	r.mu.Lock()
	if r.cmd != nil {
		r.tl.logf("r%d: generation %d still running after SIGQUIT: SIGKILL", r.id, r.gen)
		_ = r.cmd.Process.Signal(syscall.SIGKILL)
	}
	r.mu.Unlock()
	<-r.done
	return true
}

// generations returns how many generations were started, and how many
// exited without the harness's doing.
func (r *fleetReplica) generations() (gens, exits int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.gen, r.exits
}
