package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/org/gpuprov"
)

// costGroup is one line of `cost --by`: what a provider, a VM or a UTC day
// billed.
type costGroup struct {
	Key      string  `json:"key"`
	Attempts int     `json:"attempts"`
	Failed   int     `json:"failed_attempts"`
	USD      float64 `json:"usd"`
}

func newCostCmd(e *env) *cobra.Command {
	var (
		out   string
		since time.Duration
		by    string
	)
	cmd := &cobra.Command{
		Use:   "cost [--since DURATION] [--by provider|vm|day] [-o json]",
		Short: "What the VMs billed, every attempt included, as the clouds count it",
		Long: `Cost reports the bill from the journal: every attempt whose create made an
instance counts, from the create's acceptance until its teardown confirmed the
instance gone (now, while it runs), in its cloud's billing increments and
minimum, at its offer's price. A machine that booted and then failed its
acceptance, or was torn down after a boot timeout, billed: it is in the report.
Without --by, one line per attempt; --by provider, vm or day sums them (a
window across midnight UTC is split by time). --since counts only what billed
in the last DURATION. docs/cost.md says how each cloud bills.`,
		Args: cobra.NoArgs,
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(out); err != nil {
				return err
			}
			if since < 0 {
				return usageErrorf("--since %v: want a positive duration such as 24h (leave the flag out for everything)", since)
			}
			switch by {
			case "", "provider", "vm", "day":
			default:
				return usageErrorf("--by %q: want provider, vm or day", by)
			}
			s, err := e.open(cmd.Context(), sessionOptions{})
			if err != nil {
				return err
			}
			defer s.Close()
			var opts gpuprov.CostOptions
			if since > 0 {
				opts.Since = time.Now().Add(-since)
			}
			costs, err := s.p.Costs(cmd.Context(), opts)
			if err != nil {
				return err
			}
			if by != "" {
				groups := groupCosts(costs, by, opts.Since)
				if out == "json" {
					return writeJSON(e.stdout, groups)
				}
				tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintf(tw, "%s\tATTEMPTS\tFAILED\tUSD\n", strings.ToUpper(by))
				total := 0.0
				for _, g := range groups {
					fmt.Fprintf(tw, "%s\t%d\t%d\t$%.2f\n", g.Key, g.Attempts, g.Failed, g.USD)
					total += g.USD
				}
				fmt.Fprintf(tw, "total\t\t\t$%.2f\n", total)
				return tw.Flush()
			}
			if out == "json" {
				if costs == nil {
					costs = []gpuprov.AttemptCost{}
				}
				return writeJSON(e.stdout, costs)
			}
			tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "VM\tATTEMPT\tPROVIDER\tLOCATION\tTYPE\tOUTCOME\tFROM\tBILLED\tPRICE/H\tUSD")
			total := 0.0
			for _, c := range costs {
				billed := c.Billed.String()
				if c.Running {
					billed += " (running)"
				}
				fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t$%.4f\n", c.VM, c.Attempt, c.Provider, c.Location,
					dash(c.InstanceType), c.Outcome, c.From.UTC().Format(time.RFC3339), billed, usd(c.PricePerHour), c.USD)
				total += c.USD
			}
			fmt.Fprintf(tw, "total\t\t\t\t\t\t\t\t\t$%.4f\n", total)
			return tw.Flush()
		}),
	}
	addOutputFlag(cmd, &out)
	cmd.Flags().DurationVar(&since, "since", 0, "count only what billed in the last DURATION (24h, 168h)")
	cmd.Flags().StringVar(&by, "by", "", "sum by provider, vm or day (UTC)")
	_ = cmd.RegisterFlagCompletionFunc("by", cobra.FixedCompletions([]string{"provider", "vm", "day"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// groupCosts sums costs by provider, VM or UTC day; a window across
// midnight is split in proportion to its time on each day (its rounding and
// minimum spread the same way). since, when set, starts the first day's
// share.
func groupCosts(costs []gpuprov.AttemptCost, by string, since time.Time) []costGroup {
	sums := map[string]*costGroup{}
	add := func(key string, c gpuprov.AttemptCost, usd float64, count bool) {
		g := sums[key]
		if g == nil {
			g = &costGroup{Key: key}
			sums[key] = g
		}
		g.USD += usd
		if count {
			g.Attempts++
			if strings.HasPrefix(c.Outcome, "failed") {
				g.Failed++
			}
		}
	}
	for _, c := range costs {
		switch by {
		case "provider":
			add(c.Provider, c, c.USD, true)
		case "vm":
			add(c.VM, c, c.USD, true)
		case "day":
			from := c.From
			if !since.IsZero() && from.Before(since) {
				from = since
			}
			span := c.To.Sub(from)
			if span <= 0 {
				add(from.UTC().Format(time.DateOnly), c, c.USD, true)
				continue
			}
			for d, first := from.UTC(), true; d.Before(c.To); first = false {
				next := time.Date(d.Year(), d.Month(), d.Day()+1, 0, 0, 0, 0, time.UTC)
				end := next
				if c.To.Before(end) {
					end = c.To
				}
				add(d.Format(time.DateOnly), c, c.USD*float64(end.Sub(d))/float64(span), first)
				d = next
			}
		}
	}
	keys := slices.Sorted(maps.Keys(sums))
	out := make([]costGroup, 0, len(keys))
	for _, k := range keys {
		out = append(out, *sums[k])
	}
	return out
}
