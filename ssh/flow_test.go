package ssh_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/org/gpuprov/internal/sshd"
	"github.com/org/gpuprov/ssh"
)

// TestWaitWriteRunOnAVMWithAnInjectedHostKey runs Example's steps against
// an in-process server standing in for the VM: wait for it with the
// injected host key pinned, install a file, read it back, see a failing
// command's exit status and stderr.
func TestWaitWriteRunOnAVMWithAnInjectedHostKey(t *testing.T) {
	hostKey, err := ssh.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	clientKey, err := ssh.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	vm, err := sshd.Start(sshd.Config{
		HostKey:        hostKey.Signer,
		AuthorizedKeys: []gossh.PublicKey{clientKey.Signer.PublicKey()},
		Dir:            dir,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer vm.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second) // a guard, not a wait
	defer cancel()
	policy, err := ssh.FixedHostKey(hostKey.AuthorizedKey)
	if err != nil {
		t.Fatal(err)
	}
	client, err := ssh.WaitReady(ctx, ssh.Config{Addr: vm.Addr(), User: "ubuntu", Signer: clientKey.Signer, HostKey: policy})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()

	path := filepath.Join(dir, "etc", "app.conf")
	const content = "token: never on a command line\n"
	if err := client.WriteFile(ctx, path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	res, err := client.Run(ctx, ssh.Command("cat", path))
	if err != nil || string(res.Stdout) != content {
		t.Fatalf("cat: %q, %v; want %q", res.Stdout, err, content)
	}

	_, err = client.Run(ctx, "echo 'no such unit' >&2; exit 3")
	var exit *ssh.ExitError
	if !errors.As(err, &exit) || exit.Code != 3 || string(exit.Stderr) != "no such unit\n" {
		t.Fatalf("failing command: %v (%+v), want exit 3 with its stderr", err, exit)
	}
}
