package gpuprov_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/internal/sshd"
	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/provider"
	gossh "golang.org/x/crypto/ssh"
)

// Provisioner.Run logs in to a ready VM by name with the key WithSSHKey
// installed and the host key pinned at launch, and refuses a host that
// presents another key.
func TestRunOnAVMByName(t *testing.T) {
	key, hostKey := newSigner(t), newSigner(t)
	srv, err := sshd.Start(sshd.Config{HostKey: hostKey, AuthorizedKeys: []gossh.PublicKey{key.PublicKey()}, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	e := newEnv(t)
	for _, f := range e.fakes {
		f.SSHPort = srv.Port()
		// The test sshd has its own host key: pinned on first contact.
		f.Caps.Unsupported = []provider.Feature{provider.FeatureUserData}
	}
	p := e.provisioner(e.j, gpuprov.WithSSHKey(key))
	ctx := context.Background()
	req := h100("box")
	req.Acceptance.Skip = true // the loopback sshd is no GPU machine (acceptance: provider/sim's tests)
	if _, err := p.Launch(ctx, req); err != nil {
		t.Fatal(err)
	}
	res, err := p.Run(ctx, "box", "echo hello from $0")
	if err != nil || !strings.HasPrefix(string(res.Stdout), "hello from") {
		t.Fatalf("Run: %q, %v", res.Stdout, err)
	}
	if _, err := p.Run(ctx, "nosuch", "true"); !errors.Is(err, gpuprov.ErrNotFound) {
		t.Fatalf("Run on an unknown VM: %v", err)
	}

	// The same address now presents another host key: refused.
	srv.Close()
	srv2, err := sshd.Start(sshd.Config{HostKey: newSigner(t), AuthorizedKeys: []gossh.PublicKey{key.PublicKey()}, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv2.Close()
	row, _ := e.j.GetVM(ctx, "box")
	row.SSHPort = srv2.Port()
	if err := updateVM(e, row); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Run(ctx, "box", "true"); err == nil || !strings.Contains(err.Error(), "host key") {
		t.Fatalf("Run against a changed host key: %v", err)
	}
}

// updateVM rewrites a VM row as a test fixture.
func updateVM(e *env, row journal.VM) error {
	return e.j.Commit(context.Background(), &journal.Step{Update: &row})
}
