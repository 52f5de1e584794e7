package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/ssh"
	gossh "golang.org/x/crypto/ssh"
)

// A restart logs in to the VM an earlier run launched with the key it
// keeps in its state folder; a run holding another key is told at once,
// with both fingerprints, and the machine itself refuses that key.
func TestRestartUsesThePersistedKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := fastSim(t)
	cfg := config(t, srv)
	cfg.VMs, cfg.Hold = 1, true
	keyPath := filepath.Join(cfg.State, keyFile)
	run := func() (string, time.Duration, error) {
		var out bytes.Buffer
		begin := time.Now()
		err := Run(ctx, cfg, &out)
		return out.String(), time.Since(begin), err
	}

	if out, _, err := run(); err != nil || !strings.Contains(out, "job-0 ready on sim-a") {
		t.Fatalf("first run: %v\n%s", err, out)
	}
	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		t.Fatalf("the first run kept no key: %v", err)
	}
	if fi, err := os.Stat(keyPath); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("key file mode %v (%v); want 0600", fi.Mode().Perm(), err)
	}
	launched := fingerprint(t, keyPEM)

	// The restart logs in with the same key and runs the job on job-0.
	out, _, err := run()
	if err != nil || !strings.Contains(out, "job-0 ready on sim-a") || !strings.Contains(out, "running on") {
		t.Fatalf("restart: %v; want job-0's command run over SSH\n%s", err, out)
	}
	if all, _ := srv.Instances("sim-a"); len(all) != 1 {
		t.Fatalf("%d instances after the restart; want job-0's one", len(all))
	}

	// A run whose key file was lost makes and holds another key.
	if err := os.Remove(keyPath); err != nil {
		t.Fatal(err)
	}
	out, took, err := run()
	if !errors.Is(err, gpuprov.ErrKeyMismatch) {
		t.Fatalf("run with another key: %v; want ErrKeyMismatch\n%s", err, out)
	}
	otherPEM, rerr := os.ReadFile(keyPath)
	if rerr != nil {
		t.Fatal(rerr)
	}
	other := fingerprint(t, otherPEM)
	for _, fp := range []string{launched, other} {
		if !strings.Contains(err.Error(), fp) {
			t.Errorf("the error does not name %s: %v", fp, err)
		}
	}
	if took > 5*time.Second {
		t.Errorf("the mismatch took %v to show; want at once, not an SSH timeout", took)
	}
	t.Logf("after %v: %v", took, err)

	// Provisioner.Run says so at once too, and the machine itself refuses
	// that key and takes the one it was launched with.
	p, closeAll, err := open(ctx, cfg, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	if _, err := p.Run(ctx, "job-0", "true"); !errors.Is(err, gpuprov.ErrKeyMismatch) {
		t.Errorf("Provisioner.Run with another key: %v; want ErrKeyMismatch", err)
	}
	if took := time.Since(begin); took > time.Second {
		t.Errorf("Provisioner.Run took %v to refuse another key; want at once", took)
	}
	vm, err := p.Get(ctx, "job-0")
	closeAll()
	if err != nil {
		t.Fatal(err)
	}
	if err := dial(ctx, vm, otherPEM); !errors.Is(err, ssh.ErrAuthFailed) {
		t.Errorf("dialing job-0 with the other key: %v; want ssh.ErrAuthFailed", err)
	}
	if err := dial(ctx, vm, keyPEM); err != nil {
		t.Errorf("dialing job-0 with its key: %v", err)
	}

	// With the key back, a run gets job-0 and deletes it.
	if err := os.WriteFile(keyPath, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.Hold = false
	if out, _, err := run(); err != nil || !strings.Contains(out, "job-0 deleted") {
		t.Fatalf("last run: %v\n%s", err, out)
	}
	if left := running(t, srv); len(left) != 0 {
		t.Fatalf("instances left: %v", left)
	}
}

func fingerprint(t *testing.T, keyPEM []byte) string {
	t.Helper()
	s, err := ssh.ParsePrivateKey(keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return gossh.FingerprintSHA256(s.PublicKey())
}

// dial logs in to vm once with the key, checking its pinned host key.
func dial(ctx context.Context, vm *gpuprov.VM, keyPEM []byte) error {
	signer, err := ssh.ParsePrivateKey(keyPEM)
	if err != nil {
		return err
	}
	hostKey, err := ssh.FixedHostKey(vm.HostKey)
	if err != nil {
		return err
	}
	c, err := ssh.Dial(ctx, ssh.Config{Addr: vm.SSH.Address(), User: vm.SSH.User, Signer: signer, HostKey: hostKey})
	if err != nil {
		return err
	}
	return c.Close()
}
