package main

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/org/gpuprov/journal"
)

func newVolumesCmd(e *env) *cobra.Command {
	var (
		out string
		all bool
	)
	cmd := &cobra.Command{
		Use:   "volumes [-a] [-o json]",
		Short: "List persistent volumes: where each is, its size, the VM it is attached to",
		Long: `Volumes lists the journal's persistent volumes (up --volume): name, state
(creating, available, attached, deleting), provider and zone, size, mount path,
the VM that holds it, whether it is kept when that VM is deleted, and its age.
-a includes deleted ones. A volume is made by the first launch that names it,
in that launch's zone; later launches naming it are planned where it is.`,
		Args: cobra.NoArgs,
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(out); err != nil {
				return err
			}
			s, err := e.open(cmd.Context(), sessionOptions{})
			if err != nil {
				return err
			}
			defer s.Close()
			vols, err := s.p.Volumes(cmd.Context(), all)
			if err != nil {
				return err
			}
			if out == "json" {
				if vols == nil {
					vols = []journal.Volume{}
				}
				return writeJSON(e.stdout, vols)
			}
			tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tSTATE\tPROVIDER\tZONE\tSIZE\tMOUNT\tVM\tKEEP\tAGE")
			now := time.Now()
			for _, v := range vols {
				keep := "yes"
				if !v.Keep {
					keep = "no"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d GB\t%s\t%s\t%s\t%s\n", v.Name, v.State, dash(v.Provider), dash(v.Zone), v.SizeGB,
					dash(v.MountPath), dash(v.VM), keep, age(now.Sub(v.CreatedAt)))
			}
			return tw.Flush()
		}),
	}
	addOutputFlag(cmd, &out)
	cmd.Flags().BoolVarP(&all, "all", "a", false, "include deleted volumes")
	return cmd
}
