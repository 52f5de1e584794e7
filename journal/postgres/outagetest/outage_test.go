package outagetest

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/journal/postgres"
	"github.com/org/gpuprov/journal/postgres/pgtest"
	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/sim"
	"github.com/org/gpuprov/provider/sim/simserver"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

var outage = flag.Duration("outage", 60*time.Second, "how long PostgreSQL stays stopped in the middle of the launches")

const (
	cloud    = "sim-a"
	leaseTTL = 4 * time.Second
	replicas = 3
	perOwner = 12
)

func vmName(i int) string { return fmt.Sprintf("vm-%03d", i) }

// Three replicas launch 36 VMs on one PostgreSQL journal; once a third of
// the instances are made, PostgreSQL stops for -outage (60 s) and starts
// again. Every launch either goes on to ready or ends with an error that
// says the journal is unreachable; no cloud call goes out without its
// journaled intent, so after the replicas' Recover every VM is ready on
// exactly one instance, the journaled one, and the cloud holds nothing
// else. The outage is real time: the server is a real process.
func TestPostgresOutageMidLaunch(t *testing.T) {
	pg := pgtest.Require(t)
	srv, err := simserver.Start(simserver.Options{
		DisableSSH: true,
		Clouds: []simserver.CloudConfig{{Name: cloud, Offers: simserver.DefaultCatalog(cloud), Timing: &simserver.Timing{
			APILatency: simserver.Duration(time.Millisecond),
			BootTime:   simserver.Duration(3 * time.Second), BootJitter: simserver.Duration(2 * time.Second),
			DeleteTime: simserver.Duration(200 * time.Millisecond),
		}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	url := pg.NewSchema(t)

	var created atomic.Int32
	mid := make(chan struct{})
	var midOnce sync.Once
	sink := func(e gpuprov.Event) {
		if e.Type == gpuprov.EvCreated && created.Add(1) >= replicas*perOwner/3 {
			midOnce.Do(func() { close(mid) })
		}
	}
	type replica struct {
		db *postgres.DB
		p  *gpuprov.Provisioner
	}
	rs := make([]replica, replicas)
	for i := range rs {
		db, err := postgres.Open(context.Background(), url)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		tr := &http.Transport{MaxIdleConnsPerHost: 64}
		defer tr.CloseIdleConnections()
		sp, err := sim.New(sim.Config{
			Endpoint: srv.URL(), Cloud: cloud, APIKey: srv.APIKey(cloud),
			PollInterval: 200 * time.Millisecond, BootTimeout: 5 * time.Minute, DeleteTimeout: time.Minute,
			ConsistencyWindow: 300 * time.Millisecond, RequestTimeout: 10 * time.Second,
		}, sim.WithName(cloud), sim.WithInstallation(db.Installation()), sim.WithHTTPClient(&http.Client{Transport: tr}))
		if err != nil {
			t.Fatal(err)
		}
		p, err := gpuprov.New(db, gpuprov.WithProvider(sp), gpuprov.WithOwner(fmt.Sprintf("replica-%d", i)),
			gpuprov.WithLeaseTTL(leaseTTL), gpuprov.WithBackoff(50*time.Millisecond, time.Second, 1),
			gpuprov.WithEvents(sink))
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		rs[i] = replica{db, p}
	}

	n := replicas * perOwner
	ctx, cancel := context.WithTimeout(context.Background(), *outage+3*time.Minute)
	defer cancel()
	errs := make([]error, n)
	var launches sync.WaitGroup
	for i := range n {
		r := rs[i%replicas]
		launches.Go(func() {
			_, errs[i] = r.p.Launch(ctx, gpuprov.Request{Name: vmName(i), GPU: "H100", Providers: []string{cloud}, Timeout: *outage + 2*time.Minute})
		})
	}
	select {
	case <-mid:
	case <-ctx.Done():
		t.Fatal("a third of the instances were never made")
	}
	if err := pg.Shutdown("fast"); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	timer := time.NewTimer(*outage)
	<-timer.C
	if err := pg.StartAgain(); err != nil {
		t.Fatal(err)
	}
	t.Logf("PostgreSQL stopped for %.1fs, %d instances made before", time.Since(stopped).Seconds(), replicas*perOwner/3)
	launches.Wait()

	ended := 0
	for i, err := range errs {
		switch {
		case err == nil:
		case errors.Is(err, journal.ErrUnreachable):
			ended++
		default:
			t.Errorf("launch of %s: %v; want ready or an error that says the journal is unreachable", vmName(i), err)
		}
	}
	t.Logf("%d launches ended with the journal unreachable, %d went on to ready", ended, n-ended)

	// The replicas' Recover (a fleet runs it periodically) finishes the
	// rest once their leases lapse. A VM whose first write never reached
	// the journal does not exist: its launch ended before anything was
	// sent for it.
	var vms []journal.VM
	for deadline := time.Now().Add(2 * time.Minute); ; {
		for _, r := range rs {
			if _, err := r.p.Recover(ctx); err != nil {
				t.Logf("recover: %v", err)
			}
		}
		vms, err = rs[0].db.ListVMs(ctx, journal.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		unfinished := 0
		for _, v := range vms {
			if v.State != journal.StateReady {
				unfinished++
			}
		}
		if unfinished == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d journaled VMs not ready 2 minutes after the outage", unfinished, len(vms))
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("%d VMs journaled, all ready; %d launches ended before their VM was journaled", len(vms), n-len(vms))

	all, err := srv.Instances(cloud)
	if err != nil {
		t.Fatal(err)
	}
	byVM := map[string][]simserver.Instance{}
	for _, in := range all {
		byVM[in.Labels[provider.LabelVM]] = append(byVM[in.Labels[provider.LabelVM]], in)
	}
	for _, v := range vms {
		var live []simserver.Instance
		for _, in := range byVM[v.Name] {
			if in.Status != simserver.StatusTerminated {
				live = append(live, in)
			}
		}
		switch {
		case len(live) != 1:
			t.Errorf("%s: the cloud holds %d live instances, want 1: %+v", v.Name, len(live), byVM[v.Name])
		case live[0].ID != v.InstanceID:
			t.Errorf("%s: the journal says %q, the cloud runs %q", v.Name, v.InstanceID, live[0].ID)
		}
		delete(byVM, v.Name)
	}
	if len(byVM) > 0 {
		t.Errorf("instances of VMs the journal does not hold: %v", byVM)
	}
}
