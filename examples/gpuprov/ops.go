package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/journal"
)

func newDownCmd(e *env) *cobra.Command {
	var all bool
	cmd := &cobra.Command{
		Use:     "down VM... | --all",
		Aliases: []string{"delete", "rm"},
		Short:   "Delete VMs: every instance confirmed gone, side resources cleaned up",
		Long: `Delete VMs: every instance of every attempt deleted and confirmed gone, side
resources cleaned up. --all deletes every VM that is not deleted or failed,
then removes the installation's shared side resources that no instance uses,
in every region (what a process killed during their grace left).`,
		Example: `  gpuprov down train-1
  gpuprov down --all`,
		ValidArgsFunction: completeVMs(e),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			switch {
			case all && len(args) > 0:
				return usageErrorf("name VMs or use --all, not both")
			case !all && len(args) == 0:
				return usageErrorf("name the VMs to delete, or use --all")
			}
			if err := validateNames(args); err != nil {
				return err
			}
			return down(cmd.Context(), e, args, all)
		}),
	}
	cmd.Flags().BoolVar(&all, "all", false, "delete every VM that is not deleted or failed")
	return cmd
}

func down(ctx context.Context, e *env, names []string, all bool) error {
	pr := newProgress(e.stdout, isTTY(e.stdout))
	s, err := e.open(ctx, sessionOptions{events: []func(gpuprov.Event){pr.Sink}})
	if err != nil {
		return err
	}
	defer s.Close()
	if all {
		vms, err := s.p.List(ctx, gpuprov.ListOptions{})
		if err != nil {
			return err
		}
		for _, v := range vms {
			if !v.State.Terminal() {
				names = append(names, v.Name)
			}
		}
		if len(names) == 0 {
			pr.Stop()
			if err := s.p.CleanupShared(ctx); err != nil {
				return err
			}
			fmt.Fprintln(e.stdout, "nothing to delete")
			return nil
		}
	} else {
		for _, n := range names {
			if _, err := getVM(ctx, s.p, n); err != nil {
				pr.Stop()
				return err
			}
		}
	}
	ctx, intr := interruptible(ctx, pr, "interrupted: stopping; `gpuprov recover` or `gpuprov down` finishes the deletions")
	defer intr.stop()
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, n := range names {
		wg.Go(func() {
			if err := s.p.Delete(ctx, n); err != nil {
				errs[i] = fmt.Errorf("%s: %w", n, err)
			}
		})
	}
	wg.Wait()
	pr.Stop()
	if intr.happened() {
		return &exitError{code: exitInterrupted, err: errors.New("interrupted: deletions left unfinished; run `gpuprov recover`")}
	}
	if all {
		// What a process killed while the shared side resources waited
		// out their grace left, in regions none of these VMs was in.
		errs = append(errs, s.p.CleanupShared(ctx))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "deleted %s\n", strings.Join(names, ", "))
	return nil
}

func newRecoverCmd(e *env) *cobra.Command {
	var (
		retention time.Duration
		watch     bool
		interval  time.Duration
	)
	cmd := &cobra.Command{
		Use:   "recover [--retention DURATION] [--watch [--interval DURATION]]",
		Short: "Finish what crashed or interrupted commands left: resume launches, finish teardowns",
		Long: `Recover takes every VM the journal holds in an active state (pending,
provisioning, waiting, deleting) that no live process drives, and drives it to
an end from its last journaled step: a create is observed and adopted or sent
again, a boot is waited for, a wait for capacity goes on until its deadline, a
teardown is finished. Then it deletes the ready VMs whose --ttl or --max-cost
has expired. Last it prunes the journal: VMs deleted or failed more than
--retention ago lose their records (attempts and events too), and expired
blocks go. Run it after a crash or a second Ctrl-C, and from cron to keep
VMs on their leash and the journal small.

With --watch it then stays, until Ctrl-C: every --interval it deletes the
expired VMs, and it watches every ready spot VM for the cloud's interruption
notice (docs/interruptions.md), printing each notice and, for the VMs launched
with --on-interruption, replacing them on another offer before the cloud takes
them.`,
		Args: cobra.NoArgs,
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			if retention < 0 {
				return usageErrorf("--retention %v: want a duration of 0 or more (0 keeps everything)", retention)
			}
			if interval <= 0 {
				return usageErrorf("--interval %v: want a positive duration such as 30s", interval)
			}
			ctx := cmd.Context()
			pr := newProgress(e.stdout, isTTY(e.stdout))
			extra := []gpuprov.Option{gpuprov.WithRetention(retention)}
			watching := newWatchPrinter(e.stdout)
			if watch {
				extra = append(extra, gpuprov.WithReaper(interval), gpuprov.WithInterruptionHandler(watching.hook))
			}
			// Recovered clusters re-join their nodes: give it the joiner.
			// The recovery's progress lines, then the watch's.
			sink := func(ev gpuprov.Event) {
				if !watching.sink(ev) {
					pr.Sink(ev)
				}
			}
			s, err := e.open(ctx, sessionOptions{events: []func(gpuprov.Event){sink}, joiner: newK3sJoiner(k3sConfig()),
				extra: extra})
			if err != nil {
				return err
			}
			defer s.Close()
			ctx, intr := interruptible(ctx, pr, "interrupted: stopping; run `gpuprov recover` again to finish")
			defer intr.stop()
			rep, err := s.p.Recover(ctx)
			pr.Stop()
			if intr.happened() {
				return &exitError{code: exitInterrupted, err: errors.New("interrupted")}
			}
			if err != nil {
				return err
			}
			if len(rep.VMs) == 0 && len(rep.Reaped) == 0 {
				fmt.Fprintln(e.stdout, "nothing to recover")
			}
			var failed []error
			for _, r := range rep.Reaped {
				if r.Err != nil {
					fmt.Fprintf(e.stdout, "%-24s %-13s expired (%s), not deleted: %s\n", r.Name, "ready", r.Why, oneLine(r.Err.Error()))
					failed = append(failed, fmt.Errorf("%s: %w", r.Name, r.Err))
					continue
				}
				fmt.Fprintf(e.stdout, "%-24s %-13s expired (%s): deleted\n", r.Name, "ready", r.Why)
			}
			for _, v := range rep.VMs {
				from := string(v.State)
				if v.Phase != "" {
					from += "/" + v.Phase
				}
				switch v.Outcome {
				case gpuprov.OutcomeSkipped:
					fmt.Fprintf(e.stdout, "%-24s %-13s skipped: %s\n", v.Name, from, v.Reason)
				case gpuprov.OutcomeReady, gpuprov.OutcomeDeleted:
					fmt.Fprintf(e.stdout, "%-24s %-13s recovered: %s\n", v.Name, from, v.Outcome)
				default:
					fmt.Fprintf(e.stdout, "%-24s %-13s %s: %s\n", v.Name, from, v.Outcome, oneLine(v.Err.Error()))
					failed = append(failed, fmt.Errorf("%s: %w", v.Name, v.Err))
				}
			}
			if retention > 0 {
				before := time.Now().Add(-retention)
				res, err := s.p.Prune(ctx)
				if res != (journal.PruneResult{}) {
					count := func(n int, what string) string {
						if n == 1 {
							return "1 " + what
						}
						return fmt.Sprintf("%d %ss", n, what)
					}
					fmt.Fprintf(e.stdout, "pruned %s ended before %s (%s, %s), %s\n", count(res.VMs, "VM"),
						before.UTC().Format(time.RFC3339), count(res.Attempts, "attempt"), count(res.Events, "event"), count(res.Blocks, "expired block"))
				}
				if intr.happened() {
					return &exitError{code: exitInterrupted, err: errors.New("interrupted while pruning the journal")}
				}
				if err != nil {
					failed = append(failed, err)
				}
			}
			if err := errors.Join(failed...); err != nil || !watch {
				return err
			}
			fmt.Fprintf(e.stdout, "watching: expired VMs deleted and spot VMs watched for interruptions every %v; Ctrl-C stops\n", interval)
			watching.start()
			<-ctx.Done()
			return nil
		}),
	}
	cmd.Flags().DurationVar(&retention, "retention", gpuprov.DefaultRetention,
		"prune VMs that ended (deleted or failed) longer ago than this, with their history; 0 keeps everything")
	cmd.Flags().BoolVar(&watch, "watch", false, "then stay: reap expired VMs and watch spot VMs for interruptions until Ctrl-C")
	cmd.Flags().DurationVar(&interval, "interval", 30*time.Second, "with --watch: how often to reap and refresh the watched VMs")
	return cmd
}

// watchPrinter prints, once `recover --watch` watches, what the watch
// does: the interruptions, the replacements and how they end.
type watchPrinter struct {
	mu  sync.Mutex
	w   io.Writer
	on  bool
	out func(format string, args ...any)
}

func newWatchPrinter(w io.Writer) *watchPrinter {
	p := &watchPrinter{w: w}
	p.out = func(format string, args ...any) {
		p.mu.Lock()
		defer p.mu.Unlock()
		fmt.Fprintf(p.w, "%s "+format+"\n", append([]any{time.Now().UTC().Format(time.RFC3339)}, args...)...)
	}
	return p
}

func (p *watchPrinter) start() {
	p.mu.Lock()
	p.on = true
	p.mu.Unlock()
}

// sink prints the watch's events, once it watches, and says whether it
// took ev (the recovery before it has its own progress lines).
func (p *watchPrinter) sink(ev gpuprov.Event) bool {
	p.mu.Lock()
	on := p.on
	p.mu.Unlock()
	if !on {
		return false
	}
	switch ev.Type {
	case gpuprov.EvInterruption, gpuprov.EvReplacing, gpuprov.EvAttempt, gpuprov.EvFailure, gpuprov.EvRetired, gpuprov.EvReady,
		gpuprov.EvFailed, gpuprov.EvDeleting, gpuprov.EvDeleted, gpuprov.EvTeardownError:
		p.out("%-24s %-13s %s", ev.VM, ev.Type, oneLine(ev.Message))
	}
	return true
}

// hook is the interruption hook: it says how long the machine has.
func (p *watchPrinter) hook(_ context.Context, in gpuprov.Interruption) {
	what := "reclaimed"
	if in.Heard {
		what = fmt.Sprintf("%s notice, %v left", in.Notice.Kind, in.Left.Round(time.Second))
	}
	p.out("%-24s %-13s %s on %s", in.VM.Name, "hook", what, in.InstanceID)
}

func newSweepCmd(e *env) *cobra.Command {
	var del bool
	var grace time.Duration
	cmd := &cobra.Command{
		Use:   "sweep [--delete]",
		Short: "Find instances of this installation that no VM in the journal owns",
		Long: `Sweep lists every instance carrying this installation's identity on every
provider that can list, and reports those the journal does not own (orphans
from a lost journal, or a crash before the first journal write) older than the
grace period. With --delete it deletes them. It also finishes teardowns left
in state deleting.`,
		Args: cobra.NoArgs,
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			opts, err := sweepOptions(del, grace)
			if err != nil {
				return err
			}
			s, err := e.open(ctx, sessionOptions{})
			if err != nil {
				return err
			}
			defer s.Close()
			orphans, err := s.p.Sweep(ctx, opts)
			if len(orphans) == 0 && err == nil {
				fmt.Fprintln(e.stdout, "no orphans")
				return nil
			}
			tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "PROVIDER\tINSTANCE\tVM\tLOCATION\tSTATUS\tCREATED\tREASON\tACTION")
			for _, o := range orphans {
				action := "none (dry run; use --delete)"
				switch {
				case o.Err != nil:
					action = "delete failed: " + oneLine(o.Err.Error())
				case o.Deleted:
					action = "deleted"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", o.Provider, o.ID, dash(o.VM), o.Location, o.Status,
					o.Created.Format(time.RFC3339), o.Reason, action)
			}
			tw.Flush()
			return err
		}),
	}
	cmd.Flags().BoolVar(&del, "delete", false, "delete the orphans found (default: report only)")
	cmd.Flags().DurationVar(&grace, "grace", gpuprov.DefaultSweepGrace,
		"ignore instances younger than this (covers listing lag and launches in flight); 0: none, however young")
	return cmd
}

// sweepOptions turns the flags into the library's options: --grace 0 means
// no grace at all (gpuprov.NoGrace), as a user reads it, not the library's
// zero value (its default); a negative grace is refused.
func sweepOptions(del bool, grace time.Duration) (gpuprov.SweepOptions, error) {
	switch {
	case grace < 0:
		return gpuprov.SweepOptions{}, usageErrorf("--grace %v: want a duration of 0 or more", grace)
	case grace == 0:
		grace = gpuprov.NoGrace
	}
	return gpuprov.SweepOptions{Delete: del, Grace: grace}, nil
}
