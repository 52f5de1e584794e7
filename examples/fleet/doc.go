// Command fleet keeps N GPU machines of one kind alive, the way a custom
// scheduler embeds gpuprov: it launches to the target, health-checks ready
// machines on an interval, replaces the ones that are gone, preempted or
// unhealthy (at most -max-replace at once), runs Recover periodically so
// replicas take over each other's work, and exports Prometheus metrics on
// /metrics. Several replicas can share one PostgreSQL journal:
//
//	fleet -journal postgres://gpuprov@db.internal/gpuprov -config clouds.toml -target 8 -gpu H100
//	fleet -journal sqlite:/var/lib/fleet/journal.db -sim-endpoint http://127.0.0.1:7070 -sim-key "$KEY"
//
// Machines are named <prefix>-0 … <prefix>-<target-1>: the slots. A replica
// claims a slot by launching it; the journal's Create fails with
// journal.ErrExists when another replica has the slot already, so two
// replicas never both launch slot k. Every VM is driven by one replica at a
// time (the lease); when a replica dies, the others' Recover finishes its
// VMs once its leases lapse (-lease-ttl).
//
// Metrics: the engine's, from gpuprov's metrics package (launch duration,
// attempts and failures by provider and error kind, launch outcomes,
// blocks, retries, recoveries, incomplete teardowns, live VMs by provider
// and state read from the journal, and cloud API calls; see
// docs/observability.md), and the fleet's own: fleet_replacements_total (by
// reason), fleet_target and fleet_orphans (Sweep dry run, by provider). See
// docs/journal.md.
//
// Traces: with OTEL_EXPORTER_OTLP_ENDPOINT (or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) set, the Provisioners' spans are
// exported over OTLP/HTTP, with the standard OTEL_EXPORTER_OTLP_* settings
// and service.name fleet unless OTEL_SERVICE_NAME says otherwise; see
// docs/observability.md, "Traces".
package main
