package gpuprov_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/clock"
	"github.com/org/gpuprov/journal"
	_ "github.com/org/gpuprov/journal/sqlite"
	"github.com/org/gpuprov/provider"
	pt "github.com/org/gpuprov/provider/providertest"
)

// Launch a VM on the cheapest of two clouds; the cheapest offer is out of
// stock, so the launch fails over to the next one.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "gpuprov-example")
	defer os.RemoveAll(dir)

	j, err := journal.Open(ctx, "sqlite:"+filepath.Join(dir, "journal.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer j.Close()

	// Two in-memory clouds stand in for real ones here.
	cheap := pt.NewFake("cheap", clock.Real, pt.Offer("us-east", "us-east-1a", "h100x1", "H100-80GB", 1, 1.99))
	cheap.Script(&pt.Rule{Op: pt.OpCreate, Err: provider.Errorf(provider.Capacity, "cheap", "create", "out of stock")})
	other := pt.NewFake("other", clock.Real, pt.Offer("eu-west", "", "gpu-h100", "H100-80GB", 1, 2.49))

	p, err := gpuprov.New(j, gpuprov.WithProvider(cheap, other))
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()

	vm, err := p.Launch(ctx, gpuprov.Request{Name: "train-1", GPU: "h100", MaxPricePerHour: 3})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(vm.Name, vm.State, vm.Provider, vm.Location, vm.PricePerHour)

	if err := p.Delete(ctx, "train-1"); err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(cheap.Live())+len(other.Live()), "instances left")
	// Output:
	// train-1 ready other eu-west 2.49
	// 0 instances left
}
