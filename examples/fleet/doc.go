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
// Metrics: gpuprov_launch_duration_seconds (histogram, by provider),
// gpuprov_attempts_total and gpuprov_attempt_failures_total (by provider
// and error kind), gpuprov_launches_total (by outcome),
// gpuprov_recovered_total, gpuprov_live_vms (by provider),
// gpuprov_orphans (Sweep dry run, by provider), fleet_replacements_total
// (by reason) and fleet_target. See docs/journal.md.
package main
