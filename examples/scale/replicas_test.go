//go:build unix

package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/org/gpuprov/journal"
	_ "github.com/org/gpuprov/journal/postgres"
	"github.com/org/gpuprov/journal/postgres/pgtest"
)

var (
	replicaTrials = flag.Int("replicas.trials", 2, "replica chaos trials: 3 fleet replicas on one PostgreSQL journal, killed, paused and cut off from it at random moments")
	replicaSeed   = flag.Uint64("replicas.seed", 0, "seed of the replica chaos events (0: time-based, printed)")
	replicaKeep   = flag.Bool("replicas.keep", false, "keep every trial's folder with its evidence, not only the failed ones'")
)

const (
	// replicaCount fleet processes share each trial's journal.
	replicaCount = 3
	// replicaTTL is the replicas' lease TTL: a paused replica's leases lapse
	// this long after its last heartbeat.
	replicaTTL = 2 * time.Second
	// chaosWindow is the stretch of each trial in which the events start.
	chaosWindow = 10 * time.Second
	// restBound bounds the wait, after the last event, for the fleet to
	// be at its target with no VM in flight.
	restBound = 45 * time.Second
	// fleetPrefix names the fleet's slots: fleet-0 … fleet-<target-1>.
	fleetPrefix = "fleet"
)

// The kinds of chaos event.
const (
	eventKill     = "kill"     // SIGKILL a replica; it is started again after length
	eventPause    = "pause"    // SIGSTOP a replica for length (1–3 lease TTLs), then SIGCONT
	eventPostgres = "postgres" // stop PostgreSQL (mode fast or immediate) for length
	eventPreempt  = "preempt"  // the sim preempts a running instance: the fleet replaces it
)

// chaosEvent is one planned event of a trial.
type chaosEvent struct {
	at      time.Duration // after the replicas started
	kind    string
	replica int           // kill, pause: the replica planned, then the one hit
	length  time.Duration // kill: down time; pause, postgres: how long
	mode    string        // postgres: pg_ctl's shutdown mode
	// targeted (kill, pause): hit instead a replica that holds the lease
	// of a VM in flight at that moment, if one does and is free; driving
	// names that VM once it did.
	targeted bool
	driving  string
}

func (e chaosEvent) String() string {
	at := e.at.Round(100 * time.Millisecond)
	who := fmt.Sprintf("r%d", e.replica)
	if e.driving != "" {
		who += " (driving " + e.driving + ")"
	}
	switch e.kind {
	case eventKill:
		return fmt.Sprintf("kill %s at %v (back after %v)", who, at, e.length.Round(100*time.Millisecond))
	case eventPause:
		return fmt.Sprintf("pause %s at %v for %v", who, at, e.length.Round(100*time.Millisecond))
	case eventPostgres:
		return fmt.Sprintf("postgres %s stop at %v for %v", e.mode, at, e.length.Round(100*time.Millisecond))
	}
	return fmt.Sprintf("%s at %v", e.kind, at)
}

// planEvents draws a trial's events: one of each kind, then zero to three
// more of any kind, at uniform
// moments of the chaos window. A replica has one event at a time, and
// PostgreSQL one outage at a time; an event that finds no free moment in
// twenty draws is dropped. Half the kills and pauses are targeted: at
// their moment they hit, instead of the replica drawn, one that is
// driving a VM then (see runEvents), and each of them comes 0.3–1.2s
// after a preemption of its own, so that there is such work.
func planEvents(rnd *rand.Rand) []chaosEvent {
	kinds := []string{eventKill, eventPause, eventPreempt, eventPostgres}
	all := slices.Clone(kinds)
	for range rnd.IntN(4) {
		kinds = append(kinds, all[rnd.IntN(len(all))])
	}
	type span struct{ from, to time.Duration }
	busy := map[int][]span{} // replica (0: PostgreSQL) → when it is taken
	free := func(who int, s span) bool {
		for _, b := range busy[who] {
			if s.from < b.to && b.from < s.to {
				return false
			}
		}
		return true
	}
	var out []chaosEvent
	for _, kind := range kinds {
		for range 20 {
			e := chaosEvent{at: time.Duration(rnd.Int64N(int64(chaosWindow))), kind: kind}
			who, s := -1, span{}
			switch kind {
			case eventKill:
				e.replica, e.targeted = 1+rnd.IntN(replicaCount), rnd.IntN(2) == 0
				e.length = time.Duration(rnd.Int64N(int64(1500 * time.Millisecond)))
				who, s = e.replica, span{e.at, e.at + e.length + time.Second}
			case eventPause:
				e.replica, e.targeted = 1+rnd.IntN(replicaCount), rnd.IntN(2) == 0
				e.length = replicaTTL + time.Duration(rnd.Int64N(int64(2*replicaTTL)))
				who, s = e.replica, span{e.at, e.at + e.length + 500*time.Millisecond}
			case eventPostgres:
				e.mode = []string{"fast", "immediate"}[rnd.IntN(2)]
				e.length = time.Second + time.Duration(rnd.Int64N(int64(3*time.Second)))
				who, s = 0, span{e.at, e.at + e.length + 1500*time.Millisecond}
			}
			if who >= 0 && !free(who, s) {
				continue
			}
			if who >= 0 {
				busy[who] = append(busy[who], s)
			}
			out = append(out, e)
			if lead := 300*time.Millisecond + time.Duration(rnd.Int64N(int64(900*time.Millisecond))); e.targeted && e.at >= lead {
				// Work for it to hit: a replacement, which the replicas'
				// health checks (every 500ms) start.
				out = append(out, chaosEvent{at: e.at - lead, kind: eventPreempt})
			}
			break
		}
	}
	sort.Slice(out, func(i, k int) bool { return out[i].at < out[k].at })
	return out
}

// replicaOutcome is what one replica trial did and found.
type replicaOutcome struct {
	target int
	events []chaosEvent

	// What was done: kills and pauses (hits: of a replica driving a VM),
	// PostgreSQL restarts, preemptions (the instances in preempted,
	// cloud/id), and events skipped (no replica free, no instance
	// running).
	kills, pauses, hits, pgRestarts, preempts, skip int

	preempted map[string]bool

	// exits are the replica exits the harness did not cause; forced, the
	// replicas SIGTERM did not end within 15s (then SIGQUIT, SIGKILL).
	exits, forced int
	// rest is how long after the events the fleet was at rest; -1: not
	// within restBound.
	rest time.Duration

	// What was found: view, and view.vanished less the instances the
	// harness had preempted; left, what the sim held after down --all.
	view     restView
	vanished []string
	left     int

	dir  string // the trial's folder
	took time.Duration
}

func (o replicaOutcome) failed() bool { return o.view.failed() || len(o.vanished) > 0 || o.left > 0 }

// TestFleetReplicas is the replica chaos test: per trial, a fresh schema
// on a private PostgreSQL server, `gpuprov sim serve` with chaosSim's
// faults, and three examples/fleet processes (lease TTL 2s, health checks
// every 500ms, Recover every second) keeping 4–6 machines on that journal,
// supervised (restarted when they exit). At random moments of a 10s
// window: a replica is SIGKILLed (and started again 0–1.5s later), one is
// SIGSTOPped for 1–3 lease TTLs, PostgreSQL is stopped (fast or
// immediate) for 1–4s, and the sim preempts a machine, which the fleet
// replaces; half the kills and pauses hit a replica that is driving a VM
// at that moment. Then the fleet is left to come to rest (target ready,
// nothing in flight; at most 45s), the replicas are stopped with SIGTERM,
// `gpuprov recover` runs on the journal, and the journal is checked
// against the sim's admin view: no leak (a live instance that is not the
// instance of a ready VM of its name), no duplicate (two live instances
// of one VM), nothing stuck (a VM neither ready nor ended), nothing
// vanished (a ready VM whose instance is gone, the harness's preemptions
// aside); after `gpuprov down --all` the sim holds nothing. A failed trial
// keeps its folder (printed): the harness's actions (harness.log), the
// replicas' logs (r1.log …), the sim's (sim.log), the sim's instances
// with their histories, the journal's rows, `gpuprov show` of each VM
// named.
func TestFleetReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("replica chaos trials run fleet processes for tens of seconds")
	}
	pg, err := pgtest.Start()
	if err != nil {
		// The trials stop and start the server, so one named by
		// GPUPROV_TEST_POSTGRES cannot serve; where it is set, the server
		// binaries may rightly be missing.
		if os.Getenv("CI") != "" && os.Getenv(pgtest.EnvURL) == "" {
			t.Fatalf("no private PostgreSQL server (CI is set, so this fails instead of skipping): %v", err)
		}
		t.Skipf("no private PostgreSQL server (the trials stop and start it: %s cannot serve): %v", pgtest.EnvURL, err)
	}
	t.Cleanup(func() {
		if err := pg.Stop(); err != nil {
			t.Errorf("stopping PostgreSQL: %v", err)
		}
	})
	gp := gpuprovCLI(t)
	fleet, err := buildFleet(t.TempDir()) // after the CLI: from a cold cache, it builds little more
	if err != nil {
		t.Fatal(err)
	}
	seed := *replicaSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("replica chaos seed %d (-replicas.seed to replay the events)", seed)

	var tot replicaOutcome
	var notAtRest int
	states := map[string]int{}
	start := time.Now()
	for i := range *replicaTrials {
		rnd := rand.New(rand.NewPCG(seed, uint64(i)))
		o := replicaTrial(t, pg, gp, fleet, rnd)
		var evs []string
		for _, e := range o.events {
			evs = append(evs, e.String())
		}
		rest := fmt.Sprintf("at rest %v after", o.rest.Round(100*time.Millisecond))
		if o.rest < 0 {
			rest = fmt.Sprintf("NOT at rest within %v", restBound)
			notAtRest++
		}
		t.Logf("trial %d: target %d; %s; %s; leaks %d, duplicates %d, stuck %d, vanished %d, left after down %d; replica exits %d [%v]",
			i, o.target, strings.Join(evs, ", "), rest, len(o.view.leaks), len(o.view.duplicates), len(o.view.stuck), len(o.vanished), o.left, o.exits, o.took.Round(100*time.Millisecond))
		if o.failed() {
			t.Errorf("trial %d: leaks %v, duplicates %v, stuck %v, vanished %v, left after down %d; evidence kept in %s",
				i, o.view.leaks, o.view.duplicates, o.view.stuck, o.vanished, o.left, o.dir)
		}
		tot.kills += o.kills
		tot.pauses += o.pauses
		tot.pgRestarts += o.pgRestarts
		tot.preempts += o.preempts
		tot.skip += o.skip
		tot.hits += o.hits
		tot.exits += o.exits
		tot.forced += o.forced
		tot.view.leaks = append(tot.view.leaks, o.view.leaks...)
		tot.view.duplicates = append(tot.view.duplicates, o.view.duplicates...)
		tot.view.stuck = append(tot.view.stuck, o.view.stuck...)
		tot.vanished = append(tot.vanished, o.vanished...)
		tot.left += o.left
		for s, n := range o.view.states {
			states[s] += n
		}
	}
	t.Logf("replica chaos: %d trials in %v (seed %d): kills %d, pauses %d (%d of them of a replica driving a VM), PostgreSQL restarts %d, preemptions %d (events skipped %d; replica exits by themselves %d, replicas SIGTERM did not end %d); leaks %d, duplicates %d, stuck %d, vanished %d, left after down %d; not at rest within %v: %d; VM end states after recover %v",
		*replicaTrials, time.Since(start).Round(time.Second), seed, tot.kills, tot.pauses, tot.hits, tot.pgRestarts, tot.preempts, tot.skip, tot.exits, tot.forced,
		len(tot.view.leaks), len(tot.view.duplicates), len(tot.view.stuck), len(tot.vanished), tot.left, restBound, notAtRest, states)
}

// replicaTrial runs one trial in a folder of its own, which it removes
// unless the trial failed.
func replicaTrial(t *testing.T, pg *pgtest.Server, gp, fleetBin string, rnd *rand.Rand) replicaOutcome {
	t.Helper()
	o := replicaOutcome{target: 4 + rnd.IntN(3), events: planEvents(rnd), rest: -1, preempted: map[string]bool{}}
	start := time.Now()
	dir, err := os.MkdirTemp("", "gpuprov-replicas-*")
	if err != nil {
		t.Fatal(err)
	}
	o.dir = dir
	tl, err := newActionLog(filepath.Join(dir, "harness.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer tl.close()
	c := &cli{t: t, bin: gp, home: filepath.Join(dir, "home")}
	if err := os.Mkdir(c.home, 0o700); err != nil {
		t.Fatal(err)
	}
	sim := startSimServe(t, c, dir, chaosSim)
	defer sim.Stop()
	journalURL := pg.NewSchema(t)
	cfg := c.writeConfig(sim, journalURL)
	tl.logf("sim at %s; target %d; events: %v", sim.Endpoint, o.target, o.events)

	args := []string{"-config", cfg, "-target", fmt.Sprint(o.target), "-prefix", fleetPrefix, "-gpu", "H100",
		"-listen", "127.0.0.1:0", "-lease-ttl", replicaTTL.String(), "-health-interval", "500ms",
		"-recover-interval", "1s", "-sweep-interval", "1h", "-launch-timeout", "60s"}
	var reps []*fleetReplica
	for id := 1; id <= replicaCount; id++ {
		r, err := startReplica(id, fleetBin, args, dir, tl)
		if err != nil {
			t.Fatalf("starting replica %d: %v", id, err)
		}
		t.Cleanup(func() { r.Stop(5 * time.Second) })
		reps = append(reps, r)
	}

	peek := &journalPeek{url: journalURL}
	o.runEvents(t, tl, peek, pg, sim, reps, rnd)
	peek.close()
	calm := time.Now()
	tl.logf("events over; waiting (at most %v) for %d ready and nothing in flight", restBound, o.target)
	for time.Since(calm) < restBound {
		if vms, _, err := listVMs(c); err == nil && atRest(vms, o.target) {
			o.rest = time.Since(calm)
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	tl.logf("at rest: %v; stopping the replicas", o.rest >= 0)

	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, r := range reps {
		wg.Go(func() {
			forced := r.Stop(15 * time.Second)
			gens, exits := r.generations()
			mu.Lock()
			defer mu.Unlock()
			o.exits += exits
			if forced {
				o.forced++
			}
			tl.logf("r%d: %d generations, %d exits by itself; SIGTERM did not end it: %v", r.id, gens, exits, forced)
		})
	}
	wg.Wait()
	if o.forced > 0 {
		// Their leases are held by owners Recover deems alive: let them lapse.
		time.Sleep(replicaTTL + 500*time.Millisecond)
	}

	code, out := c.run("recover")
	tl.logf("gpuprov recover exited %d:\n%s", code, out)
	if code != 0 && code != 1 {
		t.Errorf("gpuprov recover exited %d:\n%s", code, out)
	}
	o.view = viewAtRest(t, c, sim.Endpoint, sim.AdminToken, fleetPrefix+"-")
	for _, s := range o.view.vanished {
		if _, inst, _ := strings.Cut(s, " "); !o.preempted[inst] {
			o.vanished = append(o.vanished, s)
		}
	}
	if o.failed() || o.forced > 0 || o.rest < 0 || *replicaKeep {
		keepEvidence(t, c, sim, journalURL, dir, o.view)
	}
	left, downOut := downAll(t, c, sim.Endpoint, sim.AdminToken)
	tl.logf("gpuprov down --all: %d left:\n%s", left, downOut)
	o.left = left
	o.took = time.Since(start)
	switch {
	case o.failed():
	case o.forced > 0 || o.rest < 0:
		t.Logf("replicas that SIGTERM did not end %d, at rest %v: evidence kept in %s", o.forced, o.rest >= 0, dir)
	case !*replicaKeep:
		os.RemoveAll(dir)
	}
	return o
}

// runEvents carries out o.events, in order, each at its moment after now,
// and the ends of the pauses and outages.
func (o *replicaOutcome) runEvents(t *testing.T, tl *actionLog, peek *journalPeek, pg *pgtest.Server, sim *simServe, reps []*fleetReplica, rnd *rand.Rand) {
	t.Helper()
	type step struct {
		at time.Duration
		do func()
	}
	var steps []step
	pgDown := false
	pgUp := func() {
		if !pgDown {
			return
		}
		if err := pg.StartAgain(); err != nil {
			t.Fatalf("starting PostgreSQL again: %v", err)
		}
		pgDown = false
		o.pgRestarts++
		tl.logf("postgres: started again")
	}
	defer pgUp() // a fatal step must not leave the later trials without a server
	// target is the replica event i hits: a free one driving a VM when
	// the event is targeted and one is, else the one planned.
	target := func(i int) *fleetReplica {
		e := &o.events[i]
		if e.targeted {
			if id, vm := peek.driving(reps, rnd); id > 0 {
				e.replica, e.driving = id, vm
			}
		}
		return reps[e.replica-1]
	}
	for i, e := range o.events {
		switch e.kind {
		case eventKill:
			steps = append(steps, step{e.at, func() {
				r := target(i)
				if r.kill(e.length) {
					o.kills++
					o.hit(i)
				} else {
					o.skip++
					tl.logf("r%d: not running, or paused: kill skipped", r.id)
				}
			}})
		case eventPause:
			var cont func()
			steps = append(steps, step{e.at, func() {
				r := target(i)
				var ok bool
				if cont, ok = r.pause(); ok {
					o.pauses++
					o.hit(i)
				} else {
					o.skip++
					tl.logf("r%d: not running, or paused: pause skipped", r.id)
				}
			}}, step{e.at + e.length, func() {
				if cont != nil {
					cont()
				}
			}})
		case eventPostgres:
			steps = append(steps, step{e.at, func() {
				tl.logf("postgres: stop (%s)", e.mode)
				if err := pg.Shutdown(e.mode); err != nil {
					t.Fatalf("stopping PostgreSQL: %v", err)
				}
				pgDown = true
				tl.logf("postgres: stopped")
			}}, step{e.at + e.length, pgUp})
		case eventPreempt:
			steps = append(steps, step{e.at, func() {
				if inst := preemptOne(tl, sim, rnd); inst != "" {
					o.preempted[inst] = true
					o.preempts++
				} else {
					o.skip++
				}
			}})
		}
	}
	sort.SliceStable(steps, func(i, k int) bool { return steps[i].at < steps[k].at })
	start := time.Now()
	for _, s := range steps {
		time.Sleep(time.Until(start.Add(s.at)))
		s.do()
	}
}

// journalPeek reads the trial's journal, for the targeted events, through
// the library's journal API; it opens the journal at its first use, once
// the replicas have set it up.
type journalPeek struct {
	url string
	j   journal.Journal
}

// driving returns a free replica that holds the lease of a VM in flight,
// drawn with rnd, and that VM; 0 when the journal shows none (or cannot be
// read: PostgreSQL may be down).
func (p *journalPeek) driving(reps []*fleetReplica, rnd *rand.Rand) (int, string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if p.j == nil {
		j, err := journal.Open(ctx, p.url)
		if err != nil {
			return 0, ""
		}
		p.j = j
	}
	vms, err := p.j.ListVMs(ctx, journal.ListOptions{States: []journal.VMState{
		journal.StatePending, journal.StateProvisioning, journal.StateWaiting, journal.StateDeleting}})
	if err != nil {
		return 0, ""
	}
	type hit struct {
		id int
		vm string
	}
	var hits []hit
	for _, v := range vms {
		var id, gen int
		if _, err := fmt.Sscanf(v.Owner, "r%dg%d", &id, &gen); err != nil || id < 1 || id > len(reps) || !reps[id-1].free() {
			continue
		}
		hits = append(hits, hit{id, v.Name})
	}
	if len(hits) == 0 {
		return 0, ""
	}
	h := hits[rnd.IntN(len(hits))]
	return h.id, h.vm
}

func (p *journalPeek) close() {
	if p.j != nil {
		p.j.Close()
	}
}

// hit counts event i if it hit a replica driving a VM.
func (o *replicaOutcome) hit(i int) {
	if o.events[i].driving != "" {
		o.hits++
	}
}

// preemptOne has the sim preempt one of its running instances, drawn with
// rnd, and returns it (cloud/id); "" when none runs.
func preemptOne(tl *actionLog, sim *simServe, rnd *rand.Rand) string {
	var running []string // cloud/id
	for _, cloud := range cloudNames {
		live, err := liveInstances(sim.Endpoint, sim.AdminToken, cloud)
		if err != nil {
			tl.logf("preempt: listing %s: %v", cloud, err)
			return ""
		}
		for _, in := range live {
			if in.Status == "running" {
				running = append(running, cloud+"/"+in.ID)
			}
		}
	}
	if len(running) == 0 {
		tl.logf("preempt: no running instance: skipped")
		return ""
	}
	sort.Strings(running)
	pick := running[rnd.IntN(len(running))]
	cloud, id, _ := strings.Cut(pick, "/")
	req, err := http.NewRequest(http.MethodPost, sim.Endpoint+"/admin/clouds/"+cloud+"/instances/"+id+"/preempt", nil)
	if err != nil {
		tl.logf("preempt %s: %v", pick, err)
		return ""
	}
	req.Header.Set("Authorization", "Bearer "+sim.AdminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tl.logf("preempt %s: %v", pick, err)
		return ""
	}
	resp.Body.Close()
	tl.logf("preempt %s: %s", pick, resp.Status)
	if resp.StatusCode != http.StatusOK {
		return ""
	}
	return pick
}

// atRest reports whether the journal holds target ready slots and no slot
// VM in flight.
func atRest(vms []journalVM, target int) bool {
	ready := 0
	for _, v := range vms {
		if !strings.HasPrefix(v.Name, fleetPrefix+"-") {
			continue
		}
		switch v.State {
		case "ready":
			ready++
		case "deleted", "failed":
		default:
			return false
		}
	}
	return ready == target
}

// keepEvidence writes, into dir, the sim's instances (every one, with its
// events), the journal's listing and its tables' rows, and `gpuprov show`
// of every VM the checks named.
func keepEvidence(t *testing.T, c *cli, sim *simServe, journalURL, dir string, v restView) {
	t.Helper()
	write := func(name string, b []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Errorf("evidence %s: %v", name, err)
		}
	}
	insts := map[string]json.RawMessage{}
	for _, cloud := range cloudNames {
		var raw json.RawMessage
		if err := adminGet(sim.Endpoint, sim.AdminToken, "/admin/clouds/"+cloud+"/instances", &raw); err != nil {
			t.Errorf("evidence: the sim's instances of %s: %v", cloud, err)
		}
		insts[cloud] = raw
	}
	b, _ := json.MarshalIndent(insts, "", "  ") // raw JSON always marshals
	write("sim-instances.json", b)
	write("journal-list.json", []byte(v.vmsJSON))
	rows, err := journalRows(context.Background(), journalURL)
	if err != nil {
		t.Errorf("evidence: the journal's rows: %v", err)
	}
	b, _ = json.MarshalIndent(rows, "", "  ")
	write("journal-rows.json", b)
	named := map[string]bool{}
	for _, s := range slices.Concat(v.leaks, v.duplicates, v.stuck, v.vanished) {
		// "cloud/id (vm "fleet-1", running)", "fleet-1×2", "fleet-1 deleting",
		// "fleet-1 cloud/id"
		if _, after, ok := strings.Cut(s, `(vm "`); ok {
			s = after
		}
		if i := strings.IndexAny(s, `"× `); i >= 0 {
			s = s[:i]
		}
		if s != "" {
			named[s] = true
		}
	}
	for _, vm := range slices.Sorted(maps.Keys(named)) {
		_, out := c.run("show", vm, "-o", "json")
		write("show-"+vm+".json", []byte(out))
	}
}

// journalRows returns every row of every table of the journal at url (its
// schema), as JSON per table.
func journalRows(ctx context.Context, url string) (map[string]json.RawMessage, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() ORDER BY 1")
	if err != nil {
		return nil, err
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	out := map[string]json.RawMessage{}
	for _, tb := range tables {
		var b []byte
		q := fmt.Sprintf("SELECT coalesce(json_agg(t), '[]'::json) FROM %s t", pgx.Identifier{tb}.Sanitize())
		if err := conn.QueryRow(ctx, q).Scan(&b); err != nil {
			return out, fmt.Errorf("%s: %w", tb, err)
		}
		out[tb] = b
	}
	return out, nil
}
