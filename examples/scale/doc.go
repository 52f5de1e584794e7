// Command scale proves gpuprov at scale against the simulated cloud: the
// scenarios of docs/benchmarks.md, each runnable on its own, with reduced
// versions run as tests.
//
//	go run ./examples/scale s1 [-vms 1000] [-runs 3]   # 1,000 VMs at once under API rate limits
//	go run ./examples/scale s2 [-vms 50]  [-runs 3]   # failover latency, capacity answer → next create
//	go run ./examples/scale s3 [-vms 1000] [-runs 3]  # SIGKILL mid-boot, recovery by a new process
//	go run ./examples/scale s5 [-vms 1000] [-replicas 3] [-rate 50] [-share=false]  # replicas sharing one account's rate
//	go run ./examples/scale s6 [-launches 50] [-arms price,expected-cost] [-offer-blocks 1ms,30m]  # rank by expected cost against price
//	go test ./examples/scale -run Chaos -chaos.trials=500 -timeout 2h   # gpuprov up killed at random
//	go test ./examples/scale -run FleetReplicas -replicas.trials=100 -timeout 1h   # fleet replicas killed, paused, cut off
//
// S1 runs the sim server, the journal and the Provisioner in this process:
// two sim accounts, each limited to 50 requests/s (the server answers 429
// beyond; the sim adapter and the core pace themselves at the same rate),
// 20ms API latency, boot 3s±1s, 10% of the offers stocked out (the cheapest
// of the first cloud among them, so half the VMs fail over once), 2% of the
// calls answering 5xx, 1% of the creates losing their answer, SSH off. It
// reports the wall time to all ready against the floor the rate limit
// sets, the API calls per VM by kind (the sim's Stats), 429s, failed VMs,
// CPU time, peak RSS and live heap per in-flight VM.
//
// S2 stocks out all but one offer of a zero-latency sim and times, in an
// http.RoundTripper under the adapter, each out_of_capacity answer to a
// create and the same VM's next create request, and, in a journal wrapper,
// the commits (one fsync each) each failover waited for: how many, how
// long, and what is left of the failover without them.
//
// S3 runs three processes: the sim (this program re-executed in the serve
// role, with a state file), the launcher (the launch role), killed with
// SIGKILL once the journal shows every VM in phase boot, and the recovering
// process (the recover role) on the same SQLite journal. It reports when
// each VM was re-owned (its recovered event) and became ready, and checks
// that the sim holds exactly the journal's instances. The roles are chosen
// with the GPUPROV_SCALE_ROLE environment variable, so the test binary can
// play them too.
//
// S5 runs the sim server (one account limited to -rate requests/s, 429
// beyond, no faults; API 20ms, boot 3s±1s), a PostgreSQL journal (a
// private server, or a schema of its own on -journal's) and -replicas
// Provisioners on it, each with its own sim adapter (so its own pacer) and
// owner, as separate processes would have. Each launches its share of the
// VMs at once. With journal.Members the replicas pace the account's rate
// between them; -share=false hides it (each paces the whole rate). It
// reports the wall time to all ready against the floor one process would
// have at the account's rate for the requests answered, and, from an
// http.RoundTripper under the adapters, the requests and 429s of every
// second and replica.
//
// S6 runs two sim accounts with SSH and GPU acceptance on, one offer each:
// the cheapest ($2.00, boot 2s) whose machines fail acceptance with
// probability -fail-rate (uncorrectable ECC errors), and one dearer ($2.10,
// boot 0.6s) that always passes. -launches launches run one after another
// on one journal, each deleted once ready, for each ranking (-arms) and
// each block length of a refused offer (-offer-blocks: 1ms keeps no memory
// beyond the launch, 30m is gpuprov's default). It reports the time to a
// usable machine (Launch called → ready: mean, p50, p90), the attempts, the
// machines refused and the time billed on them. The sim runs about 100 times
// faster than a cloud, so -horizon (Request.RankHorizon) is 36s for an
// hour's run.
//
// The chaos test (chaos_test.go) starts `gpuprov sim serve` with faults on
// and drives the gpuprov CLI as separate processes: `up` (one VM or a
// 3-node cluster) killed at a uniformly drawn moment, `recover`, the leak
// and duplicate checks, `down --all` and the check that nothing is left.
//
// The replica chaos test (replicas_test.go) runs three examples/fleet
// processes on one private PostgreSQL journal against the sim server and,
// at random moments, SIGKILLs one (started again later), SIGSTOPs one for
// one to three lease TTLs, stops PostgreSQL (fast or immediate) for a while
// and has the sim preempt instances; after each trial the fleet must be at
// its target with one live instance per ready VM, nothing duplicated,
// leaked or stuck, and nothing left after the fleet is taken down.
package main
