package simserver_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/journal"
	_ "github.com/org/gpuprov/journal/sqlite"
	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/sim"
	"github.com/org/gpuprov/provider/sim/simserver"
)

// Launch a VM on a simulated cloud served in-process, then read what the
// cloud holds through the server's admin view. In a test,
// simserver.NewServer(t, simserver.WithTiming(simserver.Timing{})) replaces
// the Start and Close lines.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "simserver-example")
	defer os.RemoveAll(dir)

	opts := simserver.DefaultOptions()                                         // clouds sim-a and sim-b
	opts.Timing = &simserver.Timing{BootTime: simserver.Duration(time.Second)} // other steps instant
	srv, err := simserver.Start(opts)
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()

	p, err := sim.New(sim.Config{Endpoint: srv.URL(), Cloud: "sim-a", APIKey: srv.APIKey("sim-a"),
		PollInterval: 100 * time.Millisecond}, sim.WithName("sim-a"))
	if err != nil {
		log.Fatal(err)
	}
	j, err := journal.Open(ctx, "sqlite:"+filepath.Join(dir, "journal.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer j.Close()
	prov, err := gpuprov.New(j, gpuprov.WithProvider(p))
	if err != nil {
		log.Fatal(err)
	}
	defer prov.Close()

	vm, err := prov.Launch(ctx, gpuprov.Request{Name: "train-1", GPU: "h100"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(vm.Name, vm.State, vm.Provider, vm.PricePerHour)

	insts, _ := srv.Instances("sim-a") // "sim-a" is served: no error
	for _, in := range insts {
		fmt.Println(in.OfferID, in.Status, in.Labels[provider.LabelVM])
	}

	if err := prov.Delete(ctx, "train-1"); err != nil {
		log.Fatal(err)
	}
	insts, _ = srv.Instances("sim-a")
	fmt.Println(insts[0].Status)
	// Output:
	// train-1 ready sim-a 2.49
	// a-h100x1-use1a running train-1
	// terminated
}
