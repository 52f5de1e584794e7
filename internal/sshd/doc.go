// Package sshd is a small in-process SSH server for tests and for the
// simulated cloud, where every simulated VM is one of these.
//
// It speaks real SSH (golang.org/x/crypto/ssh), accepts public-key
// authentication only, and serves "session" channels whose "exec" requests
// run `sh -c CMD` on the local machine, as the user of the current process,
// in [Config.Dir]. Stdin, stdout and stderr are piped through the channel;
// the server replies with "exit-status", or "exit-signal" when the command
// was killed by a signal. "signal" requests are forwarded to the command's
// process group, and the group is killed when the channel or the server
// closes. It answers keepalive@openssh.com global requests with success and
// politely refuses everything else (shells, ptys, subsystems, port
// forwarding). Every user name is accepted; the key decides.
//
// It listens on 127.0.0.1 only, on a port the kernel picks, and [Faults]
// make it misbehave the way a booting or failing VM does: a TCP port that
// never sends the SSH banner, a slow banner, an authorized key that is not
// installed yet, a connection that drops while a command runs, a peer that
// goes silent without closing the connection.
//
// The smallest real use:
//
//	hostKey, _ := ssh.NewSignerFromKey(hostPriv) // an ed25519.PrivateKey
//	srv, err := sshd.Start(sshd.Config{
//		HostKey:        hostKey,
//		AuthorizedKeys: []ssh.PublicKey{userSigner.PublicKey()},
//		Dir:            t.TempDir(),
//	})
//	if err != nil {
//		t.Fatal(err)
//	}
//	defer srv.Close()
//	// dial srv.Addr() with any SSH client, pinning hostKey.PublicKey()
//	srv.SetFaults(sshd.Faults{RejectAuth: true}) // cloud-init has not run yet
//
// Close stops the listener, closes every live connection, kills the
// commands still running and waits for all of the server's goroutines.
package sshd
