// Package ssh is how gpuprov reaches its VMs: dial until sshd answers,
// verify the host key, run commands, install files.
//
// [WaitReady] dials a booting VM until it answers, bounded by ctx (the boot
// budget): a TCP connect under ConnectTimeout, then the SSH handshake under
// its own HandshakeTimeout deadline. Refused or reset connections,
// timeouts, ports that do not speak SSH yet and authentication failures
// (cloud-init may not have installed the key) are retried with exponential
// backoff and full jitter; a rejected host key never is.
//
// Host keys are checked by a [HostKeyPolicy], which is required. Where the
// cloud takes user-data, gpuprov generates the VM's host key, injects it
// and verifies it with [FixedHostKey]; elsewhere [TOFU] pins the first key
// presented (the caller stores it by instance id) and refuses any other
// afterwards with [ErrHostKeyMismatch].
//
// [Client.Run] returns stdout, stderr and the exit status (a typed
// [*ExitError] when non-zero). On cancellation it kills the command's
// remote process group, TERM then KILL [DefaultKillGrace] later, through a
// kill loop the Client keeps running in a session of its own on the same
// connection, so that the group is gone within a second even where sshd
// ignores signal requests (OpenSSH on root logins); over a broken
// connection it can only close the session. [Client.WriteFile] streams a
// file through stdin and renames it into place after checking its sha256,
// under `sudo -n` when the login user is not root. Keepalives close a client whose peer
// went silent. Commands are built with [Command] and [Quote]; no secret
// ever goes on a command line or into a log.
//
// The smallest real use:
//
//	policy, err := ssh.FixedHostKey(hostKey.AuthorizedKey) // injected via cloud-init
//	if err != nil {
//		return err
//	}
//	client, err := ssh.WaitReady(ctx, ssh.Config{
//		Addr:    net.JoinHostPort(ip, "22"),
//		User:    "ubuntu",
//		Signer:  clientKey.Signer,
//		HostKey: policy,
//	})
//	if err != nil {
//		return err
//	}
//	defer client.Close()
//	if err := client.WriteFile(ctx, "/etc/rancher/k3s/config.yaml", cfg, 0o600); err != nil {
//		return err
//	}
//	res, err := client.Run(ctx, ssh.Command("k3s", "--version"))
package ssh
