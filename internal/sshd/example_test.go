package sshd_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"os"

	"golang.org/x/crypto/ssh"

	"github.com/org/gpuprov/internal/sshd"
)

func Example() {
	_, hostPriv, _ := ed25519.GenerateKey(rand.Reader)
	_, userPriv, _ := ed25519.GenerateKey(rand.Reader)
	hostKey, _ := ssh.NewSignerFromKey(hostPriv)
	userKey, _ := ssh.NewSignerFromKey(userPriv)
	dir, _ := os.MkdirTemp("", "vm")
	defer os.RemoveAll(dir)

	srv, err := sshd.Start(sshd.Config{
		HostKey:        hostKey,
		AuthorizedKeys: []ssh.PublicKey{userKey.PublicKey()},
		Dir:            dir,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close()

	client, err := ssh.Dial("tcp", srv.Addr(), &ssh.ClientConfig{
		User:            "ubuntu",
		Auth:            []ssh.AuthMethod{ssh.PublicKeys(userKey)},
		HostKeyCallback: ssh.FixedHostKey(hostKey.PublicKey()),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer client.Close()
	session, _ := client.NewSession()
	defer session.Close()
	out, err := session.Output("echo hello from the VM")
	fmt.Printf("%s%v\n", out, err)
	// Output:
	// hello from the VM
	// <nil>
}
