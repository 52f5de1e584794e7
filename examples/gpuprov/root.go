package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime/debug"
	"slices"

	"github.com/spf13/cobra"

	"github.com/org/gpuprov"
)

// version is set at build time with -ldflags "-X main.version=v1.2.3".
var version = ""

func newRoot(e *env) *cobra.Command {
	root := &cobra.Command{
		Use:   "gpuprov",
		Short: "Provision GPU VMs and k3s clusters across clouds",
		Long: `gpuprov gets GPU machines from many clouds: it plans offers across every
configured provider, cheapest first, fails over on stockouts, tears down what a
failed attempt started, and journals every step so that nothing leaks.

Start with the simulated cloud, which needs no account:
  gpuprov demo                 # the whole pipeline in one command
  gpuprov sim serve            # a simulated cloud to point the CLI at

Exit codes: 0 success, 1 provisioning failure, 2 usage or bad input
(flags, invalid request, config, journal directory), 3 interrupted.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRun: func(cmd *cobra.Command, _ []string) {
			if e.configPath == "" {
				e.configPath = defaultConfigPath()
			}
			e.stateDir = defaultStateDir()
		},
	}
	root.PersistentFlags().StringVar(&e.configPath, "config", "", "config file (default $XDG_CONFIG_HOME/gpuprov/config.toml)")
	root.PersistentFlags().BoolVarP(&e.verbose, "verbose", "v", false, "log the library's debug output to stderr")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageErrorf("%v", err) })

	root.AddCommand(
		newDemoCmd(e), newUpCmd(e), newDownCmd(e), newListCmd(e), newShowCmd(e),
		newOffersCmd(e), newHealthCmd(e), newRecoverCmd(e), newSweepCmd(e),
		newSSHCmd(e), newSimCmd(e), newCostCmd(e), newVolumesCmd(e), newVersionCmd(e),
	)
	return root
}

func newVersionCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			v, gover := version, ""
			if bi, ok := debug.ReadBuildInfo(); ok {
				gover = bi.GoVersion
				if v == "" {
					v = bi.Main.Version
				}
			}
			if v == "" || v == "(devel)" {
				v = "dev"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "gpuprov %s (%s)\n", v, gover)
		},
	}
}

// addOutputFlag adds -o/--output (table or json) to a read command.
func addOutputFlag(cmd *cobra.Command, out *string) {
	cmd.Flags().StringVarP(out, "output", "o", "table", "output format: table or json")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"table", "json"}, cobra.ShellCompDirectiveNoFileComp))
}

func checkOutput(out string) error {
	if out != "table" && out != "json" {
		return usageErrorf("--output %q: want table or json", out)
	}
	return nil
}

// validateNames checks VM names the way every command does (the library's
// gpuprov.ValidateName), before anything is opened: a name no command could
// have created is bad input, exit 2, whatever the command.
func validateNames(names []string) error {
	for _, n := range names {
		if err := gpuprov.ValidateName(n); err != nil {
			return err
		}
	}
	return nil
}

// getVM returns the VM named name. An unknown name is bad input (exit 2)
// said in one sentence, not the journal's chain of wrapped errors.
func getVM(ctx context.Context, p *gpuprov.Provisioner, name string) (*gpuprov.VM, error) {
	vm, err := p.Get(ctx, name)
	if errors.Is(err, gpuprov.ErrNotFound) {
		return nil, usageErrorf("no VM named %s in the journal (`gpuprov list -a` lists them)", name)
	}
	return vm, err
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// completeVMs completes VM names from the journal; any error completes
// nothing (completion must never print errors).
func completeVMs(e *env) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
		if e.configPath == "" {
			e.configPath = defaultConfigPath()
		}
		e.stateDir = defaultStateDir()
		s, err := e.open(cmd.Context(), sessionOptions{})
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		defer s.Close()
		vms, err := s.p.List(cmd.Context(), gpuprov.ListOptions{})
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var names []string
		for _, v := range vms {
			if !v.State.Terminal() && !slices.Contains(args, v.Name) {
				names = append(names, v.Name)
			}
		}
		return names, cobra.ShellCompDirectiveNoFileComp
	}
}
