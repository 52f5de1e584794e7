package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"

	toml "github.com/pelletier/go-toml/v2"
	"github.com/spf13/cobra"

	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/sim/simserver"
	"github.com/org/gpuprov/provider/sim/simserver/k3semu"
)

func newSimCmd(e *env) *cobra.Command {
	sim := &cobra.Command{
		Use:   "sim",
		Short: "The simulated GPU cloud (no account, no network)",
	}
	var addr, state, config, output string
	var faults []string
	serve := &cobra.Command{
		Use:   "serve [--addr 127.0.0.1:PORT] [--state FILE] [--config sim.toml|sim.json] [-o json]",
		Short: "Serve simulated clouds (sim-a, sim-b) on loopback until Ctrl-C",
		Long: `Serve the simulated clouds on a loopback address until SIGINT or SIGTERM, and
print (on stdout) the endpoint, each cloud's API key and a config.toml snippet
to paste into the CLI's config. With -o json it prints instead, once the server
is ready, one JSON object on one line (endpoint, admin_token, state, accounts:
[{name, api_key, url}]) and nothing else on stdout, for scripts and tests.
Every running instance is a real SSH server on loopback. The state (instances, keys) is kept in --state and survives a
restart; instances that were running come back (on new SSH ports).

Faults are injected per cloud with --fault (repeatable), with the
[clouds.faults] table of --config, or at run time through the admin API:

  gpuprov sim serve --fault sim-a.stockout_offers='["a-h100x1-use1a"]' --fault '*.error_rate=0.02'


  curl -X PUT -H "Authorization: Bearer $ADMIN_TOKEN" \
       -d '{"stockout_offers":["*"]}' $ENDPOINT/admin/clouds/sim-a/faults

See docs/cli.md for the file format and the list of faults.`,
		Args: cobra.NoArgs,
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			if state == "" {
				state = filepath.Join(e.stateDir, "sim", "state.json")
			}
			return simServe(cmd.Context(), e, output == "json", addr, state, config, faults, cmd.Flags().Changed("addr"))
		}),
	}
	addOutputFlag(serve, &output)
	serve.Flags().StringVar(&addr, "addr", "127.0.0.1:7070", "listen address (loopback only; port 0 picks a free one)")
	serve.Flags().StringVar(&state, "state", "", "state file (default $XDG_STATE_HOME/gpuprov/sim/state.json)")
	serve.Flags().StringVar(&config, "config", "", "simulator options file (TOML, or JSON with a .json name): clouds, catalogs, timing, faults")
	serve.Flags().StringArrayVar(&faults, "fault", nil, "CLOUD.KEY=VALUE: set one fault of a cloud (* for every cloud); VALUE is TOML, e.g. 0.05, \"2s\", [\"us-east\"]")
	sim.AddCommand(serve)
	return sim
}

// checkLoopback refuses any listen address that is not on loopback.
func checkLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return usageErrorf("--addr %q: %v", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return usageErrorf("--addr %q: only loopback addresses (127.0.0.1, ::1, localhost) are served", addr)
}

func simServe(ctx context.Context, e *env, asJSON bool, addr, state, config string, faults []string, addrSet bool) error {
	opts := simserver.DefaultOptions()
	if config != "" {
		o, err := simserver.LoadOptions(config)
		if err != nil {
			return &configError{err.Error()}
		}
		opts = o
	}
	for _, f := range faults {
		if err := applyFault(&opts, f); err != nil {
			return err
		}
	}
	if addrSet || opts.Addr == "" {
		opts.Addr = addr
	}
	if err := checkLoopback(opts.Addr); err != nil {
		return err
	}
	if opts.StateFile == "" {
		opts.StateFile = state
	}
	if _, err := ensureDir("simulator state directory", filepath.Dir(opts.StateFile)); err != nil {
		return err
	}
	attachK3s(&opts, opts.StateFile+".k3s")
	srv, err := simserver.Start(opts)
	if err != nil {
		return err
	}
	defer srv.Close()
	// Listen for signals before saying the server is ready, so that a
	// script that reads the announcement and then stops the server never
	// kills it with the default SIGTERM action (which would skip Close).
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	bye := e.stdout
	if asJSON {
		if err := json.NewEncoder(e.stdout).Encode(simServeInfo{Endpoint: srv.URL(), AdminToken: srv.AdminToken(),
			State: opts.StateFile, Accounts: srv.Accounts()}); err != nil {
			return err
		}
		bye = e.stderr // stdout holds the one JSON object
	} else {
		printSimConfig(e.stdout, srv, opts.StateFile)
	}

	<-ctx.Done()
	fmt.Fprintf(bye, "# stopping; state kept in %s\n", opts.StateFile)
	return nil
}

// simServeInfo is what `sim serve -o json` prints once the server is ready.
type simServeInfo struct {
	// Endpoint is the server's base URL: provider/sim's endpoint.
	Endpoint string `json:"endpoint"`
	// AdminToken is the bearer token of the /admin API.
	AdminToken string `json:"admin_token"`
	// State is the state file.
	State string `json:"state"`
	// Accounts are the clouds served: name, api_key and url (the cloud's
	// API base).
	Accounts []simserver.Account `json:"accounts"`
}

// attachK3s wires the k3s emulation into every sandbox, so that
// `gpuprov up --nodes N` forms a (simulated) cluster. The nodes of one
// cluster are told apart by installation and cluster name (NAME-i).
func attachK3s(opts *simserver.Options, dir string) {
	k3semu.Attach(opts, func(inst simserver.Instance) k3semu.Options {
		key := clusterOf(inst.Labels[provider.LabelVM])
		if in := inst.Labels[provider.LabelInstallation]; in != "" {
			key = in + "-" + key
		}
		return k3semu.Options{ClusterDir: filepath.Join(dir, key), GPUs: inst.GPUCount}
	})
}

var nodeSuffix = regexp.MustCompile(`-[0-9]+$`)

// clusterOf guesses the cluster of a node VM named CLUSTER-i.
func clusterOf(vm string) string {
	if vm == "" {
		return "unlabelled"
	}
	return nodeSuffix.ReplaceAllString(vm, "")
}

// printSimConfig prints, as TOML that can be pasted as is, the endpoint,
// the admin token and one provider table per cloud.
func printSimConfig(w io.Writer, srv *simserver.Server, state string) {
	fmt.Fprintf(w, "# gpuprov sim serve: simulated clouds at %s (state: %s)\n", srv.URL(), state)
	fmt.Fprintf(w, "# endpoint: %s\n", srv.URL())
	fmt.Fprintf(w, "# admin token: %s\n", srv.AdminToken())
	fmt.Fprintf(w, "# inject faults: curl -X PUT -H 'Authorization: Bearer %s' -d '{\"stockout_offers\":[\"*\"]}' %s/admin/clouds/CLOUD/faults\n",
		srv.AdminToken(), srv.URL())
	fmt.Fprintf(w, "# paste the rest into %s:\n\n", defaultConfigPath())
	for _, c := range srv.Clouds() {
		fmt.Fprintf(w, "[%s]\ntype = \"sim\"\nendpoint = %q\napi_key = %q\npoll_interval = \"250ms\"\n\n", c, srv.URL(), srv.APIKey(c))
	}
}

// applyFault sets one fault, "CLOUD.KEY=VALUE" with a TOML value, on the
// named cloud or, for "*", on every cloud. Unknown clouds and keys are usage
// errors naming them.
func applyFault(opts *simserver.Options, spec string) error {
	target, value, ok := strings.Cut(spec, "=")
	cloud, key, ok2 := strings.Cut(target, ".")
	if !ok || !ok2 || cloud == "" || key == "" {
		return usageErrorf("--fault %q: want CLOUD.KEY=VALUE, e.g. sim-a.error_rate=0.02", spec)
	}
	matched := false
	for i := range opts.Clouds {
		c := &opts.Clouds[i]
		if cloud != "*" && cloud != c.Name {
			continue
		}
		matched = true
		dec := toml.NewDecoder(strings.NewReader(key + " = " + value))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&c.Faults); err != nil {
			return usageErrorf("--fault %q: %v", spec, err)
		}
	}
	if !matched {
		var names []string
		for _, c := range opts.Clouds {
			names = append(names, c.Name)
		}
		return usageErrorf("--fault %q: no cloud %q (clouds: %s)", spec, cloud, strings.Join(names, ", "))
	}
	return nil
}
