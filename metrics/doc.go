// Package metrics exports what a gpuprov Provisioner does as Prometheus
// metrics, for the service that embeds it: launches and their duration,
// attempts and their failures by provider and error kind, blocks, retries,
// recoveries, incomplete teardowns, and every cloud API call with its
// latency and rate limits.
//
// A Collector is fed by the engine: pass its Options to gpuprov.New (they
// are gpuprov.WithEvents(c.Event) and gpuprov.WithCallObserver(c.Call)) and
// register it with your registry:
//
//	mc := metrics.New(metrics.WithJournal(j))
//	reg.MustRegister(mc)
//	p, err := gpuprov.New(j, append(opts, mc.Options()...)...)
//
// # What the counters count
//
// Counters and the launch histogram count what this process saw, from its
// start: the events of the VMs it drives and the calls it makes. Several
// replicas on one journal each count their own, so sum them across
// instances. A launch whose launch event came before this process started
// (one that Recover resumed) is counted when it ends, but its duration is
// not observed: the start is unknown here.
//
// # What the gauges show
//
// The event stream cannot give absolute numbers: after a restart, the VMs
// that are ready were launched by an earlier process, and another replica's
// VMs are never seen at all. So the gauges of live VMs (gpuprov_vms) and of
// blocks in force (gpuprov_active_blocks) are read from the journal, the
// source of truth, at each scrape, when WithJournal gives one; without it
// they are not exported at all rather than exported wrong. They describe
// the whole journal: replicas sharing it report the same values, so
// aggregate them with max, not sum.
//
// # Cardinality
//
// Label values come only from bounded sets: provider ids (at most
// MaxProviders distinct values; more are reported as "other"), the names of
// gpuprov.ErrorKinds, the primitive ops of gpuprov.Call, VM states, block
// scopes and launch outcomes. A value outside its set is reported as
// "other". No label ever holds a VM, cluster or instance name, a zone or an
// error message.
//
// docs/observability.md lists every metric with a PromQL query per
// question an operator asks.
package metrics
