package ssh_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/org/gpuprov/internal/sshd"
	"github.com/org/gpuprov/ssh"
)

// A VM whose host key gpuprov generated and injected: wait for it, install
// a file, run commands.
func Example() {
	hostKey, _ := ssh.GenerateKey()   // injected through cloud-init
	clientKey, _ := ssh.GenerateKey() // authorized through cloud-init
	dir, _ := os.MkdirTemp("", "vm")
	defer os.RemoveAll(dir)
	vm, err := sshd.Start(sshd.Config{ // stands in for the VM
		HostKey:        hostKey.Signer,
		AuthorizedKeys: []gossh.PublicKey{clientKey.Signer.PublicKey()},
		Dir:            dir,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer vm.Close()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // the boot budget
	defer cancel()
	policy, err := ssh.FixedHostKey(hostKey.AuthorizedKey)
	if err != nil {
		fmt.Println(err)
		return
	}
	client, err := ssh.WaitReady(ctx, ssh.Config{
		Addr:    vm.Addr(),
		User:    "ubuntu",
		Signer:  clientKey.Signer,
		HostKey: policy,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer client.Close()

	path := filepath.Join(dir, "etc", "app.conf")
	if err := client.WriteFile(ctx, path, []byte("token: never on a command line\n"), 0o600); err != nil {
		fmt.Println(err)
		return
	}
	res, err := client.Run(ctx, ssh.Command("cat", path))
	fmt.Printf("%s%v\n", res.Stdout, err)

	_, err = client.Run(ctx, "echo 'no such unit' >&2; exit 3")
	var exit *ssh.ExitError
	if errors.As(err, &exit) {
		fmt.Printf("exit %d: %s", exit.Code, exit.Stderr)
	}
	// Output:
	// token: never on a command line
	// <nil>
	// exit 3: no such unit
}
