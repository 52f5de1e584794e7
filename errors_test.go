package gpuprov_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/provider"
	pt "github.com/org/gpuprov/provider/providertest"
)

// Every error a caller reads starts with "gpuprov: " once and is one
// sentence; the sentinels still match.
func TestErrorTextsHaveOnePrefix(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	once := func(t *testing.T, err error, sentinel error, want string) {
		t.Helper()
		if !errors.Is(err, sentinel) {
			t.Fatalf("%v does not match %v", err, sentinel)
		}
		if n := strings.Count(err.Error(), "gpuprov: "); n != 1 || !strings.HasPrefix(err.Error(), "gpuprov: ") {
			t.Fatalf("%q: want one leading \"gpuprov: \", found %d", err, n)
		}
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("%q does not say %q", err, want)
		}
	}
	_, err := e.p.Get(ctx, "nosuch")
	once(t, err, gpuprov.ErrNotFound, "no VM named nosuch in the journal")
	if strings.Contains(err.Error(), e.path) {
		t.Fatalf("an unknown VM's error names the journal file: %q", err)
	}
	once(t, e.p.Delete(ctx, "nosuch"), gpuprov.ErrNotFound, "no VM named nosuch")

	req := h100("dear")
	req.MaxPricePerHour = 0.0001
	_, err = e.p.Launch(ctx, req)
	once(t, err, gpuprov.ErrNoOffers, "launch dear failed: no offers")
	if strings.Contains(err.Error(), "torn down") {
		t.Fatalf("a launch that started nothing says it tore something down: %q", err)
	}
	var launchMsg string
	for _, ev := range e.events {
		if ev.VM == "dear" && ev.Type == gpuprov.EvLaunch {
			launchMsg = ev.Message
		}
	}
	if !strings.Contains(launchMsg, "under $0.0001/h") {
		t.Fatalf("launch event %q does not show the real cap", launchMsg)
	}

	if _, err := e.p.Launch(ctx, h100("twice")); err != nil {
		t.Fatal(err)
	}
	_, err = e.p.Launch(ctx, h100("twice"))
	once(t, err, gpuprov.ErrExists, "a VM named twice exists")

	if _, err := e.p.Launch(ctx, h100("stuck")); err != nil {
		t.Fatal(err)
	}
	e.fake("a").Script(&pt.Rule{Op: pt.OpDelete, Err: pe(provider.Transient, "HTTP 503")})
	once(t, e.p.Delete(ctx, "stuck"), gpuprov.ErrTeardownIncomplete, "VM stuck: teardown incomplete")
}
