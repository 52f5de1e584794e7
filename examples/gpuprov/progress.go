package main

import (
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mattn/go-isatty"

	"github.com/org/gpuprov"
)

// isTTY reports whether w is a terminal.
func isTTY(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && (isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd()))
}

// progress shows a long wait from the engine's events. On a terminal it keeps
// one status line per VM, redrawn in place (phase, provider, region, elapsed,
// attempt); elsewhere it prints one timestamped line per event. Its Sink is
// safe for concurrent use and does not wait on anything but the writer.
type progress struct {
	w   io.Writer
	tty bool
	now func() time.Time

	mu    sync.Mutex
	vms   map[string]*vmStatus
	order []string
	drawn int // lines drawn last time (tty)
	stop  chan struct{}
	done  chan struct{}
}

type vmStatus struct {
	name, state, phase, provider, region, last string
	attempt                                    int
	start                                      time.Time
	end                                        time.Time
	// While waiting for capacity: what is blocked, and when the next try
	// is, for a countdown.
	waiting string
	nextTry time.Time
}

// resendWithToken begins the message of the create-sent event of a create
// sent again with its idempotency token after its answer was lost (the
// demo's test fails if it stops matching).
const resendWithToken = "resend with the same token"

// waitingRE reads the engine's waiting event: "waiting for capacity: <what
// is blocked>, next try at <RFC3339>: <why>".
var waitingRE = regexp.MustCompile(`^waiting for capacity: (.*), next try at (\S+): `)

func newProgress(w io.Writer, tty bool) *progress {
	pr := &progress{w: w, tty: tty, now: time.Now, vms: map[string]*vmStatus{}}
	if tty {
		pr.stop, pr.done = make(chan struct{}), make(chan struct{})
		go pr.tick()
	}
	return pr
}

// tick redraws every half second so elapsed times move between events.
func (pr *progress) tick() {
	defer close(pr.done)
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-pr.stop:
			return
		case <-t.C:
			pr.mu.Lock()
			pr.redraw()
			pr.mu.Unlock()
		}
	}
}

// Stop ends the redraws, leaving the last status on screen.
func (pr *progress) Stop() {
	if pr.stop == nil {
		return
	}
	close(pr.stop)
	<-pr.done
	pr.stop = nil
	pr.mu.Lock()
	pr.redraw()
	pr.drawn = 0
	pr.mu.Unlock()
}

// Printf prints a message above the status lines.
func (pr *progress) Printf(format string, args ...any) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	pr.clear()
	fmt.Fprintf(pr.w, format, args...)
	pr.redraw()
}

// Sink is the gpuprov.WithEvents sink.
func (pr *progress) Sink(e gpuprov.Event) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if e.Time.IsZero() {
		e.Time = pr.now() // events that are not journaled (retries) may come without one
	}
	if e.VM == "" {
		// Not attributable to a VM line (the library emits retries without
		// their VM): print it and move on.
		if pr.tty {
			pr.clear()
			fmt.Fprintf(pr.w, "  %s\n", describe(e))
			pr.redraw()
		} else {
			fmt.Fprintln(pr.w, plainLine(e))
		}
		return
	}
	st := pr.vms[e.VM]
	if st == nil {
		st = &vmStatus{name: e.VM, state: "pending", start: pr.now()}
		pr.vms[e.VM] = st
		pr.order = append(pr.order, e.VM)
		slices.Sort(pr.order)
	}
	st.update(e)
	if !pr.tty {
		fmt.Fprintln(pr.w, plainLine(e))
		return
	}
	switch e.Type {
	case gpuprov.EvFailure, gpuprov.EvAdopted, gpuprov.EvBlocked, gpuprov.EvFailed, gpuprov.EvTeardownError, gpuprov.EvRecovered, gpuprov.EvDuplicate:
		// Worth keeping once the status line has moved on.
		pr.clear()
		fmt.Fprintf(pr.w, "  %s: %s\n", e.VM, describe(e))
	}
	pr.redraw()
}

func (st *vmStatus) update(e gpuprov.Event) {
	if e.Attempt > 0 {
		st.attempt = e.Attempt
	}
	if e.Provider != "" {
		st.provider, st.region = e.Provider, e.Region
	}
	if e.Type == gpuprov.EvPhase || e.Type == gpuprov.EvAttempt {
		st.phase = e.Phase // other events carry the phase they were journaled in
	}
	st.waiting, st.nextTry = "", time.Time{}
	switch e.Type {
	case gpuprov.EvWaiting:
		st.state, st.phase = "waiting", ""
		if m := waitingRE.FindStringSubmatch(e.Message); m != nil {
			if t, err := time.Parse(time.RFC3339, m[2]); err == nil {
				st.waiting, st.nextTry = m[1], t
			}
		}
	case gpuprov.EvLaunch, gpuprov.EvPlan, gpuprov.EvAttempt, gpuprov.EvPhase, gpuprov.EvRecovered:
		st.state = "provisioning"
	case gpuprov.EvReady:
		st.state, st.phase, st.end = "ready", "", time.Now()
	case gpuprov.EvFailed:
		st.state, st.phase, st.end = "failed", "", time.Now()
	case gpuprov.EvDeleting, gpuprov.EvTeardown:
		if e.Type == gpuprov.EvDeleting {
			st.state, st.phase = "deleting", ""
		}
	case gpuprov.EvDeleted:
		st.state, st.phase, st.end = "deleted", "", time.Now()
	}
	st.last = describe(e)
}

// clear erases the status lines drawn last (tty).
func (pr *progress) clear() {
	if !pr.tty || pr.drawn == 0 {
		return
	}
	fmt.Fprintf(pr.w, "\x1b[%dA\x1b[J", pr.drawn)
	pr.drawn = 0
}

func (pr *progress) redraw() {
	if !pr.tty {
		return
	}
	pr.clear()
	var b strings.Builder
	for _, name := range pr.order {
		st := pr.vms[name]
		end := st.end
		if end.IsZero() {
			end = pr.now()
		}
		where := st.provider
		if st.region != "" {
			where += " " + st.region
		}
		state := st.state
		if st.phase != "" && state == "provisioning" {
			state += "/" + st.phase
		}
		last := st.last
		if !st.nextTry.IsZero() {
			// The countdown first: the line is cut at 140 characters.
			last = fmt.Sprintf("for capacity, next try in %s (%s)", max(0, st.nextTry.Sub(pr.now())).Round(time.Second), st.waiting)
		}
		att := ""
		if st.attempt > 0 {
			att = fmt.Sprintf("attempt %d", st.attempt)
		}
		line := fmt.Sprintf("%-20s %-24s %-22s %6s  %-10s %s", name, state, where,
			formatElapsed(end.Sub(st.start)), att, last)
		if r := []rune(line); len(r) > 160 {
			line = string(r[:159]) + "…"
		}
		b.WriteString(line + "\n")
	}
	fmt.Fprint(pr.w, b.String())
	pr.drawn = len(pr.order)
}

func formatElapsed(d time.Duration) string {
	d = d.Round(time.Second)
	return fmt.Sprintf("%d:%02d", int(d.Minutes()), int(d.Seconds())%60)
}

// plainLine is one event as a log line: RFC3339 time, VM, event type and the
// details.
func plainLine(e gpuprov.Event) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s %s", e.Time.UTC().Format(time.RFC3339), dash(e.VM), e.Type)
	if e.Attempt > 0 {
		fmt.Fprintf(&b, " attempt=%d", e.Attempt)
	}
	if e.Provider != "" {
		fmt.Fprintf(&b, " provider=%s", e.Provider)
	}
	if e.Region != "" {
		fmt.Fprintf(&b, " region=%s", e.Region)
	}
	if e.Phase != "" {
		fmt.Fprintf(&b, " phase=%s", e.Phase)
	}
	if e.InstanceID != "" {
		fmt.Fprintf(&b, " instance=%s", e.InstanceID)
	}
	if e.ErrorKind != "" {
		fmt.Fprintf(&b, " kind=%s", e.ErrorKind)
	}
	if e.Message != "" && e.Message != e.Phase && e.Message != e.InstanceID && e.Type != gpuprov.EvHostKeyPinned {
		fmt.Fprintf(&b, " %s", oneLine(e.Message))
	}
	return b.String()
}

// describe says what an event means, for people.
func describe(e gpuprov.Event) string {
	msg := oneLine(e.Message)
	where := strings.TrimSpace(e.Provider + " " + e.Region)
	switch e.Type {
	case gpuprov.EvLaunch:
		return "launch requested: " + msg
	case gpuprov.EvPlan:
		return "planned offers: " + msg
	case gpuprov.EvPlanError:
		return fmt.Sprintf("provider %s could not plan (skipped): %s", e.Provider, msg)
	case gpuprov.EvAttempt:
		return fmt.Sprintf("attempt %d: trying %s on %s", e.Attempt, msg, e.Provider)
	case gpuprov.EvPhase:
		return "phase " + e.Phase
	case gpuprov.EvRetry:
		return "transient error, retrying: " + msg
	case gpuprov.EvCreateSent:
		if strings.HasPrefix(e.Message, resendWithToken) {
			return "create request sent again to " + where + " with the same idempotency token: the cloud answers a replay with what the first one made"
		}
		return "create request sent to " + where
	case gpuprov.EvCreated:
		return "instance " + e.InstanceID + " created"
	case gpuprov.EvAdopted:
		return fmt.Sprintf("the create's answer was lost, but instance %s landed: found by its labels and adopted (no duplicate)", e.InstanceID)
	case gpuprov.EvDuplicate:
		return "a duplicate instance was found and is being deleted: " + msg
	case gpuprov.EvHostKeyPinned:
		return "SSH host key pinned"
	case gpuprov.EvAccepted:
		return "GPUs accepted: " + msg
	case gpuprov.EvRejected:
		return "GPUs REFUSED, the machine goes: " + msg
	case gpuprov.EvFailure:
		return fmt.Sprintf("attempt %d on %s failed (%s): %s", e.Attempt, where, e.ErrorKind, msg)
	case gpuprov.EvBlocked:
		return "blocked for a while: " + msg
	case gpuprov.EvTeardown:
		return fmt.Sprintf("tearing down attempt %d", e.Attempt)
	case gpuprov.EvTornDown:
		return fmt.Sprintf("attempt %d torn down: %s", e.Attempt, msg)
	case gpuprov.EvTeardownError:
		return "TEARDOWN INCOMPLETE (run `gpuprov recover`): " + msg
	case gpuprov.EvReady:
		return "ready: " + msg
	case gpuprov.EvFailed:
		return "failed: " + msg
	case gpuprov.EvDeleting:
		if msg != "" {
			return "deleting: " + msg
		}
		return "deleting"
	case gpuprov.EvWaiting:
		return msg
	case gpuprov.EvDeleted:
		return "deleted"
	case gpuprov.EvRecovered:
		return "taken over by this process to finish it: " + msg
	case gpuprov.EvClusterServer:
		return "became the k3s server: " + msg
	}
	return strings.TrimSpace(e.Type + " " + msg)
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
