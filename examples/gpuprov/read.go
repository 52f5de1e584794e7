package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/gpu"
	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/provider"
)

// listItem is a VM as `list -o json` prints it: the library's VM plus what
// the table shows.
type listItem struct {
	*gpuprov.VM
	CostUSD    float64 `json:"cost_usd"`
	AgeSeconds float64 `json:"age_seconds"`
	// LeftSeconds is the time until the VM's expiry (--ttl, --max-cost),
	// absent when it has none; 0 once it is due.
	LeftSeconds *float64 `json:"left_seconds,omitempty"`
}

func newListCmd(e *env) *cobra.Command {
	var out string
	var all bool
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List VMs: state, where, GPUs, price and cost so far",
		Args:    cobra.NoArgs,
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(out); err != nil {
				return err
			}
			s, err := e.open(cmd.Context(), sessionOptions{})
			if err != nil {
				return err
			}
			defer s.Close()
			vms, err := s.p.List(cmd.Context(), gpuprov.ListOptions{})
			if err != nil {
				return err
			}
			now := time.Now()
			items := []listItem{}
			for _, v := range vms {
				if all || !v.State.Terminal() {
					it := listItem{VM: v, CostUSD: v.Cost(now), AgeSeconds: now.Sub(v.CreatedAt).Seconds()}
					if !v.ExpiresAt.IsZero() && v.State == gpuprov.StateReady {
						left := max(0, v.ExpiresAt.Sub(now).Seconds())
						it.LeftSeconds = &left
					}
					items = append(items, it)
				}
			}
			if out == "json" {
				return writeJSON(e.stdout, items)
			}
			tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tSTATE\tPROVIDER\tREGION\tGPU\tPRICE/H\tSPOT\tCOST\tAGE\tLEFT")
			for _, it := range items {
				state := string(it.State)
				if it.Phase != "" {
					state += "/" + it.Phase
				}
				gpu := "-"
				if it.GPU != "" {
					gpu = fmt.Sprintf("%s×%d", it.GPU, it.GPUCount)
				} else if it.Request.GPU != "" || len(it.Request.GPUs) > 0 {
					gpu = choicesText(it.Request, ",") // not yet on an offer: what it asks for
				}
				// LEFT: the time to a ready VM's expiry (expired: due for
				// the next reaper), or a waiting VM's next try.
				left := "-"
				switch {
				case it.LeftSeconds != nil && *it.LeftSeconds == 0:
					left = "expired"
				case it.LeftSeconds != nil:
					left = age(time.Duration(*it.LeftSeconds * float64(time.Second)))
				case it.State == gpuprov.StateWaiting && !it.NextTry.IsZero():
					left = "retry in " + age(max(0, it.NextTry.Sub(now)))
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t$%.2f\t%s\t%s\n", it.Name, state, dash(it.Provider), dash(it.Location.String()),
					gpu, price(it.PricePerHour), spotText(it.VM), it.CostUSD, age(now.Sub(it.CreatedAt)), left)
			}
			return tw.Flush()
		}),
	}
	addOutputFlag(cmd, &out)
	cmd.Flags().BoolVarP(&all, "all", "a", false, "include deleted and failed VMs")
	return cmd
}

// spotText is list's SPOT column: whether the VM runs on spot capacity
// (a VM between machines: whether it asked for it), and how often it was
// interrupted.
func spotText(v *gpuprov.VM) string {
	spot := v.Spot
	if v.State != gpuprov.StateReady {
		spot = spot || v.Request.Spot == provider.SpotOnly
	}
	out := "no"
	if spot {
		out = "yes"
	}
	switch n := len(v.Interruptions); n {
	case 0:
	case 1:
		out += ", 1 interruption"
	default:
		out += fmt.Sprintf(", %d interruptions", n)
	}
	return out
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func price(p float64) string {
	if p == 0 {
		return "-"
	}
	return usd(p)
}

// usd prints a price as a user reads it: cents as usual ($2.50), and every
// digit a smaller or finer price has, up to a millionth ($0.0001), so that a
// cap never prints as "$0.00" (the library's errors print prices alike).
func usd(p float64) string {
	s := strconv.FormatFloat(math.Round(p*1e6)/1e6, 'f', -1, 64)
	whole, frac, _ := strings.Cut(s, ".")
	for len(frac) < 2 {
		frac += "0"
	}
	return "$" + whole + "." + frac
}

// age renders a duration the way kubectl does: 45s, 12m, 3h, 2d.
func age(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

// showOutput is `show -o json`.
type showOutput struct {
	VM       *gpuprov.VM       `json:"vm"`
	CostUSD  float64           `json:"cost_usd"`
	Attempts []journal.Attempt `json:"attempts"`
	Events   []gpuprov.Event   `json:"events"`
}

func newShowCmd(e *env) *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:               "show VM",
		Aliases:           []string{"describe"},
		Short:             "Show a VM with its attempt history and events",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeVMs(e),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(out); err != nil {
				return err
			}
			if err := validateNames(args); err != nil {
				return err
			}
			s, err := e.open(cmd.Context(), sessionOptions{})
			if err != nil {
				return err
			}
			defer s.Close()
			ctx := cmd.Context()
			vm, err := getVM(ctx, s.p, args[0])
			if err != nil {
				return err
			}
			atts, evs, err := s.p.History(ctx, args[0])
			if err != nil {
				return err
			}
			so := showOutput{VM: vm, CostUSD: vm.Cost(time.Now()), Attempts: atts, Events: evs}
			if so.Attempts == nil {
				so.Attempts = []journal.Attempt{}
			}
			if out == "json" {
				return writeJSON(e.stdout, so)
			}
			printShow(e, so)
			return nil
		}),
	}
	addOutputFlag(cmd, &out)
	return cmd
}

func printShow(e *env, so showOutput) {
	v, w := so.VM, e.stdout
	fmt.Fprintf(w, "Name:       %s\n", v.Name)
	if v.Cluster != "" {
		fmt.Fprintf(w, "Cluster:    %s\n", v.Cluster)
	}
	state := string(v.State)
	if v.Phase != "" {
		state += " (" + v.Phase + ")"
	}
	fmt.Fprintf(w, "State:      %s\n", state)
	fmt.Fprintf(w, "Request:    %s", choicesText(v.Request, " or "))
	if len(v.Request.GPUs) > 1 && v.Request.GPUOrder == gpuprov.GPUOrderGiven {
		fmt.Fprint(w, " (in that order)")
	}
	if v.Request.MaxPricePerHour > 0 {
		fmt.Fprintf(w, " under %s/h", usd(v.Request.MaxPricePerHour))
	}
	fmt.Fprintln(w)
	if v.Provider != "" {
		fmt.Fprintf(w, "Provider:   %s %s (%s)\n", v.Provider, v.Location, v.InstanceType)
		fmt.Fprintf(w, "Price:      %s/h, cost so far $%.2f\n", price(v.PricePerHour), so.CostUSD)
	}
	if v.Reservation != "" {
		fmt.Fprintf(w, "Reserved:   in %s (capacity the account already pays for: launching into it adds nothing; the price is its shape's list price)\n", v.Reservation)
	}
	if v.InstanceID != "" {
		fmt.Fprintf(w, "Instance:   %s\n", v.InstanceID)
	}
	if v.SSH != nil {
		fmt.Fprintf(w, "SSH:        %s@%s\n", v.SSH.User, v.SSH.Address())
	}
	fmt.Fprintf(w, "Created:    %s\n", v.CreatedAt.Format(time.RFC3339))
	if !v.ReadyAt.IsZero() {
		fmt.Fprintf(w, "Ready:      %s (after %s)\n", v.ReadyAt.Format(time.RFC3339), v.ReadyAt.Sub(v.CreatedAt).Round(time.Millisecond))
	}
	if !v.ExpiresAt.IsZero() {
		fmt.Fprintf(w, "Expires:    %s (deleted then by any process that reaps)\n", v.ExpiresAt.Format(time.RFC3339))
	}
	if v.Owner != "" {
		fmt.Fprintf(w, "Driven by:  %s (lease until %s)\n", v.Owner, v.LeaseExpiry.Format(time.RFC3339))
	}
	if v.LastError != "" {
		fmt.Fprintf(w, "Last error: %s (%s)\n", oneLine(v.LastError), v.LastErrorKind)
	}
	fmt.Fprintf(w, "\nAttempts:\n")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  #\tPROVIDER\tREGION\tSTATE\tPHASE\tINSTANCES\tERROR")
	for _, a := range so.Attempts {
		loc := provider.Location{Region: a.Region, Zone: a.Zone}
		errText := "-"
		if a.Error != "" {
			errText = a.ErrorKind + ": " + oneLine(a.Error)
		}
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\t%s\t%s\n", a.N, a.Provider, loc, a.State, dash(a.Phase),
			dash(strings.Join(a.InstanceIDs, ",")), errText)
	}
	tw.Flush()
	printAcceptance(w, so.Attempts)
	fmt.Fprintf(w, "\nEvents:\n")
	for _, ev := range so.Events {
		fmt.Fprintf(w, "  %s  %-16s %s\n", ev.Time.Format("15:04:05.000"), ev.Type, describe(ev))
	}
}

func newOffersCmd(e *env) *cobra.Command {
	var f upFlags
	var out string
	cmd := &cobra.Command{
		Use:   "offers --gpu GPU[,GPU...]",
		Short: "List the offers for a request across every provider, cheapest first",
		Long: `List the offers for a request across every provider, in the order up would
try them (cheapest first by default), with the blocks that cover some of them.
With alternatives (--gpu h100,a100-80gb:2) the offers of every alternative are
listed in one table, their GPU column saying which; an alternative that has no
offer is named on stderr with why.`,
		Args: cobra.NoArgs,
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(out); err != nil {
				return err
			}
			f.changed = cmd.Flags().Changed
			return offers(cmd.Context(), e, &f, out)
		}),
	}
	fl := cmd.Flags()
	fl.StringVar(&f.gpu, "gpu", "", "GPU model or alias, or alternatives h100,a100-80gb, each with an optional :COUNT (required)")
	fl.IntVar(&f.count, "count", 1, "GPUs per machine (with --gpu alternatives: for those without :COUNT)")
	fl.Float64Var(&f.maxPrice, "max-price", 0, "highest price per machine-hour in USD (default: no limit)")
	fl.StringVar(&f.spot, "spot", "no", "spot capacity: no, yes or any")
	fl.Lookup("spot").NoOptDefVal = "yes"
	fl.StringArrayVar(&f.providers, "provider", nil, "restrict to this provider (repeatable)")
	fl.StringArrayVar(&f.regions, "region", nil, "restrict to this region (repeatable)")
	addNeedsFlags(fl, &f)
	f.timeout = time.Minute
	addOutputFlag(cmd, &out)
	_ = cmd.RegisterFlagCompletionFunc("gpu", cobra.FixedCompletions(provider.GPUNames(), cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// offerItem is one row of `offers -o json`.
type offerItem struct {
	provider.Offer
	Blocked  *journal.Block       `json:"blocked,omitempty"`
	History  *journal.OfferStats  `json:"history,omitempty"`
	Expected *gpuprov.Expectation `json:"expected,omitempty"`
	// MarginalPrice is what the offer adds to the bill per hour: 0 in a
	// reservation, else its price.
	MarginalPrice float64 `json:"marginal_price_per_hour"`
	// LeftOut says why the plan leaves the offer out (a quota, an ended
	// reservation); such an offer is not tried.
	LeftOut string `json:"left_out,omitempty"`
}

func offers(ctx context.Context, e *env, f *upFlags, out string) error {
	cfg, err := loadConfig(e.configPath)
	if err != nil {
		return err
	}
	if err := cfg.requireProviders(e.configPath); err != nil {
		return err
	}
	f.name = "offers" // Plan validates a whole Request; the name is not used
	if f.block > 0 && f.blockFee == 0 {
		f.blockFee = math.MaxFloat64 // listing buys nothing: show every fee
	}
	req, err := f.request(cfg)
	if err != nil {
		return err
	}
	if err := cfg.check(); err != nil {
		return err
	}
	s, err := e.openChecked(ctx, cfg, sessionOptions{})
	if err != nil {
		return err
	}
	defer s.Close()
	res, err := s.p.Plan(ctx, req)
	if err != nil {
		return err
	}
	items := []offerItem{}
	for _, o := range res.Offers {
		it := offerItem{Offer: o}
		if b, ok := res.Blocked[o.Key()]; ok {
			it.Blocked = &b
		}
		if h, ok := res.History[o.Key()]; ok {
			it.History = &h
		}
		if x, ok := res.Expected[o.Key()]; ok {
			it.Expected = &x
		}
		it.MarginalPrice = o.MarginalPrice()
		items = append(items, it)
	}
	for _, sk := range res.Skipped {
		items = append(items, offerItem{Offer: sk.Offer, MarginalPrice: sk.Offer.MarginalPrice(), LeftOut: sk.Reason})
	}
	if out == "json" {
		return writeJSON(e.stdout, items)
	}
	if req.Block != nil {
		return blockTable(e, res, items)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PROVIDER\tLOCATION\tTYPE\tGPU\tVCPU\tMEM\tDISK\tPRICE/H\tSPOT\tHISTORY\tEXPECTED\tNOTE")
	for _, it := range items {
		var notes []string
		if it.Blocked != nil {
			notes = append(notes, fmt.Sprintf("blocked until %s (%s)", it.Blocked.Until.Local().Format("15:04"), it.Blocked.ErrorKind))
		}
		if it.LeftOut != "" {
			notes = append(notes, "left out: "+it.LeftOut)
		}
		if r := it.Reservation; r != nil {
			state := fmt.Sprintf("%d of %d free", r.Free, r.Total)
			if r.Full() {
				state = "full, tried last"
			}
			paid := "already paid"
			if r.Full() {
				paid = "counted at its list price"
			}
			list := usd(it.PricePerHour) + "/h list"
			if it.PricePerHour == 0 {
				list = "list price unknown"
			}
			notes = append(notes, fmt.Sprintf("reservation %s (%s), %s: %s", r.ID, state, paid, list))
		} else if it.InStock {
			notes = append(notes, "in stock")
		}
		disk := "-"
		if it.DiskGB > 0 {
			disk = fmt.Sprintf("%dG", it.DiskGB)
		}
		if it.Blocked != nil && it.Blocked.Scope == "host" {
			notes[0] = fmt.Sprintf("host %s blocked until %s (%s)", it.Host, it.Blocked.Until.Local().Format("Jan 2 15:04"), it.Blocked.ErrorKind)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s×%d\t%d\t%.0fG\t%s\t%s\t%v\t%s\t%s\t%s\n", it.Provider, it.Location, it.InstanceType,
			it.GPU, it.GPUCount, it.VCPUs, it.MemoryGB, disk, usd(it.MarginalPrice), it.Spot, historyText(it.History),
			expectedText(it.Expected), strings.Join(notes, "; "))
	}
	tw.Flush()
	for name, perr := range res.Errors {
		fmt.Fprintf(e.stderr, "warning: provider %s skipped: %s\n", name, oneLine(perr.Error()))
	}
	// With GPU alternatives, the explanation names those without an
	// offer even when the others have some.
	if why := res.Explanation; why != "" || len(res.Offers) == 0 {
		fmt.Fprintln(e.stderr, cmp.Or(why, "no offers match"))
	}
	return nil
}

// blockTable prints `offers --block`: the capacity blocks for sale.
func blockTable(e *env, res *gpuprov.PlanResult, items []offerItem) error {
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PROVIDER\tLOCATION\tTYPE\tGPU\tCOUNT\tSTART\tEND\tUPFRONT\tNOTE")
	for _, it := range items {
		b := it.Block
		note := ""
		if it.LeftOut != "" {
			note = "left out: " + it.LeftOut
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s×%d\t%d\t%s\t%s\t%s\t%s\n", it.Provider, it.Location, it.InstanceType, it.GPU, it.GPUCount,
			b.Count, b.Start.UTC().Format("2006-01-02 15:04Z"), b.End.UTC().Format("2006-01-02 15:04Z"), usd(b.UpfrontFee), note)
	}
	tw.Flush()
	for name, perr := range res.Errors {
		fmt.Fprintf(e.stderr, "warning: provider %s skipped: %s\n", name, oneLine(perr.Error()))
	}
	if len(items) == 0 {
		fmt.Fprintln(e.stderr, cmp.Or(res.Explanation, "no block offerings match"))
	}
	return nil
}

// healthItem is one entry of `health -o json`.
type healthItem struct {
	VM        string              `json:"vm"`
	Verdict   provider.Verdict    `json:"verdict"`
	Diagnosis *provider.Diagnosis `json:"diagnosis,omitempty"`
	Error     string              `json:"error,omitempty"`
}

func newHealthCmd(e *env) *cobra.Command {
	var out string
	var gpus bool
	cmd := &cobra.Command{
		Use:               "health [VM...]",
		Short:             "Diagnose VMs' instances (every ready VM when none is named)",
		ValidArgsFunction: completeVMs(e),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(out); err != nil {
				return err
			}
			if err := validateNames(args); err != nil {
				return err
			}
			s, err := e.open(cmd.Context(), sessionOptions{})
			if err != nil {
				return err
			}
			defer s.Close()
			var opts []gpuprov.HealthOption
			if gpus {
				opts = append(opts, gpuprov.HealthGPU())
			}
			items, err := health(cmd.Context(), s.p, args, opts...)
			if err != nil {
				return err
			}
			if out == "json" {
				if err := writeJSON(e.stdout, items); err != nil {
					return err
				}
			} else {
				printHealth(e, items)
			}
			for _, it := range items {
				if it.Verdict != provider.Healthy {
					return &exitError{code: exitFailure, err: fmt.Errorf("%s is %s", it.VM, dash(string(it.Verdict))), silent: out == "json"}
				}
			}
			return nil
		}),
	}
	cmd.Flags().BoolVar(&gpus, "gpu", false, "also ask the machine about its GPUs over SSH: Xid errors since the last check, ECC, row remaps, slowdown, a GPU gone, the fabric manager")
	addOutputFlag(cmd, &out)
	return cmd
}

// health diagnoses the named VMs, or every ready VM.
func health(ctx context.Context, p *gpuprov.Provisioner, names []string, opts ...gpuprov.HealthOption) ([]healthItem, error) {
	if len(names) == 0 {
		vms, err := p.List(ctx, gpuprov.ListOptions{States: []gpuprov.State{gpuprov.StateReady}})
		if err != nil {
			return nil, err
		}
		for _, v := range vms {
			names = append(names, v.Name)
		}
	}
	items := []healthItem{}
	for _, name := range names {
		if _, err := getVM(ctx, p, name); err != nil {
			return nil, err
		}
		d, err := p.Health(ctx, name, opts...)
		if err != nil {
			items = append(items, healthItem{VM: name, Error: oneLine(err.Error())})
			continue
		}
		items = append(items, healthItem{VM: name, Verdict: d.Verdict(), Diagnosis: &d})
	}
	return items, nil
}

func printHealth(e *env, items []healthItem) {
	if len(items) == 0 {
		fmt.Fprintln(e.stdout, "no ready VMs")
		return
	}
	for _, it := range items {
		if it.Error != "" {
			fmt.Fprintf(e.stdout, "%-24s error: %s\n", it.VM, it.Error)
			continue
		}
		d := it.Diagnosis
		fmt.Fprintf(e.stdout, "%-24s %-10s %s %s\n", it.VM, it.Verdict, dash(d.InstanceID), dash(string(d.Status)))
		for _, f := range d.Findings {
			fmt.Fprintf(e.stdout, "    %-8s %s: %s\n", f.Severity, f.Code, oneLine(f.Message))
		}
	}
}

// printAcceptance prints each attempt's GPU acceptance result: the verdict
// in one line, then per GPU what it is and what failed, then what could
// not be checked.
func printAcceptance(w io.Writer, atts []journal.Attempt) {
	first := true
	for _, a := range atts {
		if len(a.Acceptance) == 0 {
			continue
		}
		var r gpu.Report
		if err := json.Unmarshal(a.Acceptance, &r); err != nil {
			continue
		}
		if first {
			fmt.Fprintf(w, "\nGPU acceptance:\n")
			first = false
		}
		verdict := "accepted"
		if !r.OK {
			verdict = "rejected"
		}
		host := ""
		if a.Host != "" {
			host = ", host " + a.Host
		}
		fmt.Fprintf(w, "  attempt %d (%s %s%s): %s: %s\n", a.N, a.Provider, provider.Location{Region: a.Region, Zone: a.Zone}, host, verdict, r.Summary)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "    GPU\tBUS\tNAME\tUUID\tSERIAL\tFAILED")
		for _, g := range r.GPUs {
			fmt.Fprintf(tw, "    %d\t%s\t%s\t%s\t%s\t%s\n", g.Index, dash(g.BusID), dash(g.Name), dash(g.UUID), dash(g.Serial), dash(strings.Join(g.Failed, ",")))
		}
		tw.Flush()
		for _, f := range r.Findings {
			fmt.Fprintf(w, "    %-8s %s: %s\n", f.Severity, f.Check, oneLine(f.Message))
		}
		for _, s := range r.Skipped {
			fmt.Fprintf(w, "    %-8s %s: not checked: %s\n", "skipped", s.Check, oneLine(s.Why))
		}
	}
}

// historyText says an offer's history in a few words: "3/4 ready, 1 rejected,
// p50 1m20s"; "-" for none.
func historyText(h *journal.OfferStats) string {
	if h == nil || h.Created == 0 {
		return "-"
	}
	s := fmt.Sprintf("%d/%d ready", h.Ready, h.Created)
	if h.AcceptanceFailed > 0 {
		s += fmt.Sprintf(", %d rejected", h.AcceptanceFailed)
	}
	if h.Stockouts > 0 {
		s += fmt.Sprintf(", %d stockouts", h.Stockouts)
	}
	if h.Preempted > 0 {
		s += fmt.Sprintf(", %d preempted", h.Preempted)
	}
	if h.Ready > 0 {
		s += ", p50 " + h.ReadyP50.Round(time.Second).String()
	}
	return s
}

// expectedText is an offer's expected time to a usable machine and its
// expected cost over the ranking horizon; "-" without history.
func expectedText(x *gpuprov.Expectation) string {
	if x == nil || !x.Known {
		return "-"
	}
	return fmt.Sprintf("%s to usable, %s", x.TimeToReady.Round(time.Second), usd(x.CostUSD))
}
