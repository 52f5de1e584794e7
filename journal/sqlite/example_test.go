package sqlite_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/org/gpuprov/journal"
	_ "github.com/org/gpuprov/journal/sqlite"
)

// A process creates a VM it drives, writes a step ahead of a cloud call, and
// a second process is refused the lease until the first one's expires.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "gpuprov-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	j, err := journal.Open(ctx, "sqlite:"+filepath.Join(dir, "journal.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer j.Close()

	now := time.Date(2031, 1, 1, 12, 0, 0, 0, time.UTC)
	vm := journal.VM{Name: "trainer-0", ID: "01J", State: journal.StatePending, Owner: "host-a/4242",
		LeaseExpiry: now.Add(time.Minute), CreatedAt: now, UpdatedAt: now}
	if err := j.Commit(ctx, &journal.Step{Create: &vm}); err != nil {
		log.Fatal(err)
	}

	vm.State, vm.Phase, vm.Attempt = journal.StateProvisioning, "create", 1
	step := &journal.Step{
		Update:   &vm,
		Attempts: []journal.Attempt{{VM: vm.Name, N: 1, Provider: "sim", State: journal.AttemptActive, Phase: "create", StartedAt: now}},
		Events:   []journal.Event{{Time: now, VM: vm.Name, Attempt: 1, Type: "create-intent"}},
	}
	if err := j.Commit(ctx, step); err != nil {
		log.Fatal(err)
	}
	fmt.Println("version", vm.Version, "event seq", step.Events[0].Seq)

	_, err = j.Acquire(ctx, vm.Name, "host-b/77", now.Add(30*time.Second), now.Add(2*time.Minute))
	fmt.Println("leased:", errors.Is(err, journal.ErrLeased))
	got, err := j.Acquire(ctx, vm.Name, "host-b/77", now.Add(time.Minute), now.Add(2*time.Minute))
	fmt.Println("after expiry:", got.Owner, err)
	// Output:
	// version 2 event seq 1
	// leased: true
	// after expiry: host-b/77 <nil>
}
