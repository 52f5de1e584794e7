// Command gpuprov provisions GPU VMs and k3s clusters across clouds with the
// gpuprov library. It imports public packages only (the library, its
// adapters and journal backends, and for demo and sim serve the simulated
// cloud's server, github.com/org/gpuprov/provider/sim/simserver): everything
// it does, a program in another module can do too.
//
// Try it with no account:
//
//	go run ./examples/gpuprov demo
//
// Commands (kubectl/gh style; `gpuprov help COMMAND` for flags):
//
//	demo                 the whole pipeline against an in-process simulated cloud
//	up                   launch one GPU VM, or a k3s cluster with --nodes N
//	down VM... | --all   delete VMs (every instance confirmed gone)
//	list                 VMs with state, provider, region, GPUs, price, cost so far, age
//	show VM              a VM's attempt history and events
//	offers --gpu GPU     the offers for a request across every provider, cheapest first
//	health [VM...]       diagnose instances
//	recover              finish what a crashed or interrupted command left
//	sweep [--delete]     find (and delete) instances no journaled VM owns
//	ssh VM [-- CMD]      run a command, or log in, with the pinned host key
//	sim serve            serve the simulated clouds on loopback (-o json: one JSON object)
//	version, completion  the version; shell completion scripts
//
// Read commands (list, show, offers, health) take -o json; so does sim serve,
// which then prints its endpoint, admin token and accounts as one JSON object.
//
// Files: the config is $XDG_CONFIG_HOME/gpuprov/config.toml (--config), TOML
// with one table per provider account; the journal defaults to
// sqlite:$XDG_STATE_HOME/gpuprov/journal.db (directory 0700, file 0600) and the
// CLI's SSH key is $XDG_STATE_HOME/gpuprov/id_ed25519 (0600).
//
// Exit codes: 0 success; 1 provisioning failure; 2 usage or bad input (flags,
// invalid request, config, journal directory); 3 interrupted. `ssh VM -- CMD`
// exits with the remote command's code.
//
// docs/cli.md is the full reference.
package main
