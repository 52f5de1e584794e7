package gpuprov_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/ssh"
)

func clientKey(t *testing.T) gossh.Signer {
	t.Helper()
	kp, err := ssh.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	return kp.Signer
}

// TestAnotherKeySaysSo: a process holding another client key than the one
// a VM was launched with (a key generated anew at each start) is told so,
// with both fingerprints, at once: Run before dialing, and Recover leaves a
// VM it finds mid-connect as it is (nothing torn down, its lease free) for
// a process with the key, which then finishes it.
func TestAnotherKeySaysSo(t *testing.T) {
	ctx := context.Background()
	fn := newFakeNodes()
	e := newEnv(t)
	k1, k2 := clientKey(t), clientKey(t)
	fp1, fp2 := gossh.FingerprintSHA256(k1.PublicKey()), gossh.FingerprintSHA256(k2.PublicKey())

	p1 := e.provisioner(e.j, gpuprov.WithConnector(fn), gpuprov.WithSSHKey(k1))
	if _, err := p1.Launch(ctx, h100("keyed")); err != nil {
		t.Fatal(err)
	}
	p1.Close()
	p2 := e.provisioner(e.j, gpuprov.WithConnector(fn), gpuprov.WithSSHKey(k2))
	defer p2.Close()
	_, err := p2.Run(ctx, "keyed", "true")
	if !errors.Is(err, gpuprov.ErrKeyMismatch) || !strings.Contains(err.Error(), "launched with key "+fp1) || !strings.Contains(err.Error(), "holds "+fp2) {
		t.Fatalf("Run with another key: %v; want ErrKeyMismatch naming %s and %s", err, fp1, fp2)
	}

	// A crash as the connect phase begins: the VM is left provisioning.
	cj := &crashJournal{Journal: e.j, left: 1 << 30}
	p3 := e.provisioner(cj, gpuprov.WithConnector(fn), gpuprov.WithSSHKey(k1), gpuprov.WithEvents(func(ev gpuprov.Event) {
		if ev.Type == gpuprov.EvPhase && ev.Message == gpuprov.PhaseConnect {
			cj.mu.Lock()
			cj.left = 0
			cj.mu.Unlock()
		}
	}))
	if _, err := p3.Launch(ctx, h100("midway")); !errors.Is(err, errCrash) {
		t.Fatalf("launch: %v; want the crash", err)
	}
	p3.Close()
	e.clk.Advance(2 * time.Minute)
	calls := e.cloudCalls()

	p4 := e.provisioner(e.j, gpuprov.WithConnector(fn), gpuprov.WithSSHKey(k2))
	rep, err := p4.Recover(ctx)
	p4.Close()
	if err != nil {
		t.Fatal(err)
	}
	if got := rep.Resumed["midway"]; !errors.Is(got, gpuprov.ErrKeyMismatch) {
		t.Fatalf("Recover with another key: %v; want ErrKeyMismatch", got)
	}
	row, _ := e.j.GetVM(ctx, "midway")
	if row.State != journal.StateProvisioning || row.Owner != "" {
		t.Fatalf("the VM is %s owned by %q; want provisioning with its lease free", row.State, row.Owner)
	}
	if n := e.cloudCalls(); n != calls {
		t.Errorf("%d cloud calls by the process with the wrong key", n-calls)
	}

	p5 := e.provisioner(e.j, gpuprov.WithConnector(fn), gpuprov.WithSSHKey(k1))
	defer p5.Close()
	if rep, err := p5.Recover(ctx); err != nil || rep.Resumed["midway"] != nil {
		t.Fatalf("Recover with the key: %v %v; want midway ready", err, rep.Resumed)
	}
	e.assertClean("midway")
}
