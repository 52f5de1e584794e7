package ssh_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"time"

	"github.com/org/gpuprov/ssh"
)

// A VM whose host key gpuprov generated and injected: wait for it, install
// a file, run commands. It needs a VM at ip, so it is compiled but not run;
// TestWaitWriteRunOnAVMWithAnInjectedHostKey runs the same steps against an
// in-process server.
func Example() {
	hostKey, _ := ssh.GenerateKey()   // injected through cloud-init
	clientKey, _ := ssh.GenerateKey() // authorized through cloud-init
	ip := "203.0.113.10"              // the instance's address, from the cloud

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute) // the boot budget
	defer cancel()
	policy, err := ssh.FixedHostKey(hostKey.AuthorizedKey)
	if err != nil {
		log.Fatal(err)
	}
	client, err := ssh.WaitReady(ctx, ssh.Config{
		Addr:    net.JoinHostPort(ip, "22"),
		User:    "ubuntu",
		Signer:  clientKey.Signer,
		HostKey: policy,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	// Written under sudo -n, since ubuntu is not root.
	if err := client.WriteFile(ctx, "/etc/app.conf", []byte("token: never on a command line\n"), 0o600); err != nil {
		log.Fatal(err)
	}
	res, err := client.Run(ctx, ssh.Command("cat", "/etc/app.conf"), ssh.WithSudo())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s", res.Stdout)

	_, err = client.Run(ctx, ssh.Command("systemctl", "is-active", "app"))
	var exit *ssh.ExitError
	if errors.As(err, &exit) {
		fmt.Printf("exit %d: %s", exit.Code, exit.Stderr)
	}
}
