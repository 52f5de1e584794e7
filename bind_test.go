package gpuprov_test

import (
	"context"
	"strings"
	"testing"

	"github.com/org/gpuprov"
	pt "github.com/org/gpuprov/provider/providertest"
)

// A provider built without an installation id is bound to the journal's by
// New, so what it creates it also finds: a launch is ready, and Sweep finds
// an orphan of it.
func TestNewBindsAProviderBuiltWithoutInstallation(t *testing.T) {
	e := newEnv(t)
	f := pt.NewFake("bare", e.clk, pt.Offer("r", "r-1a", "h100.1", "H100-80GB", 1, 1.00))
	p, err := gpuprov.New(e.j, gpuprov.WithClock(e.clk), gpuprov.WithProvider(f))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if f.Installation != e.j.Installation() {
		t.Fatalf("provider installation %q after New, want the journal's %q", f.Installation, e.j.Installation())
	}
	vm, err := p.Launch(context.Background(), h100("bound"))
	if err != nil || vm.Provider != "bare" {
		t.Fatalf("launch on a bound provider: %v %+v", err, vm)
	}
}

// A provider built for another journal's installation is refused by New,
// with the fix in the message, before anything is created.
func TestNewRefusesAProviderOfAnotherInstallation(t *testing.T) {
	e := newEnv(t)
	f := pt.NewFake("other", e.clk, pt.Offer("r", "r-1a", "h100.1", "H100-80GB", 1, 1.00))
	f.Installation = "someone-else"
	_, err := gpuprov.New(e.j, gpuprov.WithClock(e.clk), gpuprov.WithProvider(f))
	if err == nil || !strings.Contains(err.Error(), `"someone-else"`) || !strings.Contains(err.Error(), "WithInstallation") {
		t.Fatalf("New with a provider of another installation: %v", err)
	}
	if f.Installation != "someone-else" || len(f.Calls()) != 0 {
		t.Fatalf("the refused provider was changed or called: %q %v", f.Installation, f.Calls())
	}
}
