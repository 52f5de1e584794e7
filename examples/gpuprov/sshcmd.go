package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/ssh"
)

func newSSHCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "ssh VM [-- COMMAND...]",
		Short: "Run a command on a VM, or log in, with its pinned host key",
		Long: `With a command, run it on the VM over SSH with the CLI's key and the host key
pinned in the journal, print its output and exit with its exit code.

Without one, start the system ssh client with the CLI's key and a temporary
known_hosts file holding only the pinned host key (StrictHostKeyChecking=yes):
host-key checking is never turned off.`,
		Example: `  gpuprov ssh train-1
  gpuprov ssh train-1 -- nvidia-smi -L`,
		Args:              cobra.MinimumNArgs(1),
		ValidArgsFunction: completeVMs(e),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			name, remote := args[0], args[1:]
			if err := gpuprov.ValidateName(name); err != nil {
				return err
			}
			s, err := e.open(ctx, sessionOptions{})
			if err != nil {
				return err
			}
			vm, err := getVM(ctx, s.p, name)
			s.Close() // the journal is not needed any more; the key is in s
			if err != nil {
				return err
			}
			if vm.State != gpuprov.StateReady || vm.SSH == nil {
				return fmt.Errorf("%s is %s, not ready: nothing to connect to", name, vm.State)
			}
			if vm.HostKey == "" {
				return fmt.Errorf("%s has no pinned host key: refusing to connect without one", name)
			}
			if len(remote) == 0 {
				return interactiveSSH(e, vm)
			}
			return runRemote(ctx, e, s, vm, strings.Join(remote, " "))
		}),
	}
}

func sshAddr(vm *gpuprov.VM) string { return vm.SSH.Address() }

// runRemote runs cmd on vm and passes its exit code on.
func runRemote(ctx context.Context, e *env, s *session, vm *gpuprov.VM, cmd string) error {
	policy, err := ssh.FixedHostKey(vm.HostKey)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt)
	defer stop()
	c, err := ssh.Dial(ctx, ssh.Config{Addr: sshAddr(vm), User: vm.SSH.User, Signer: s.signer(), HostKey: policy})
	if err != nil {
		return fmt.Errorf("ssh %s: %w", vm.Name, err)
	}
	defer c.Close()
	res, err := c.Run(ctx, cmd, ssh.WithOutput(e.stdout, e.stderr))
	var xe *ssh.ExitError
	switch {
	case errors.As(err, &xe):
		return &exitError{code: res.ExitCode, err: err, silent: true}
	case ctx.Err() != nil:
		return &exitError{code: exitInterrupted, err: errors.New("interrupted")}
	case err != nil:
		return fmt.Errorf("ssh %s: %w", vm.Name, err)
	}
	return nil
}

// interactiveSSH runs the system ssh client against vm with the pinned host
// key as the only known host.
func interactiveSSH(e *env, vm *gpuprov.VM) error {
	line := ssh.KnownHostsLine(sshAddr(vm), vm.HostKey)
	if line == "" {
		return fmt.Errorf("%s: the pinned host key does not parse", vm.Name)
	}
	kh, err := os.CreateTemp("", "gpuprov-known-hosts-*")
	if err != nil {
		return err
	}
	defer os.Remove(kh.Name())
	if _, err := kh.WriteString(line + "\n"); err != nil {
		kh.Close()
		return err
	}
	if err := kh.Close(); err != nil {
		return err
	}
	bin, err := exec.LookPath("ssh")
	if err != nil {
		return fmt.Errorf("no ssh client on PATH; run a command instead: gpuprov ssh %s -- COMMAND", vm.Name)
	}
	cmd := exec.Command(bin,
		"-i", e.keyPath(), "-o", "IdentitiesOnly=yes",
		"-o", "UserKnownHostsFile="+kh.Name(), "-o", "GlobalKnownHostsFile=/dev/null",
		"-o", "StrictHostKeyChecking=yes",
		"-p", strconv.Itoa(vm.SSH.Port), vm.SSH.User+"@"+vm.SSH.Host)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, e.stdout, e.stderr
	// ssh handles Ctrl-C itself; keep it from killing us (and leaving the
	// temporary file behind) without ignoring it in the child.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt)
	defer signal.Stop(sigs)
	err = cmd.Run()
	var xe *exec.ExitError
	if errors.As(err, &xe) {
		return &exitError{code: xe.ExitCode(), err: err, silent: true}
	}
	return err
}
