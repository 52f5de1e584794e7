//go:build unix

package sshd

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
)

// signals maps SSH signal names (RFC 4254 section 6.10) to local signals.
var signals = map[string]syscall.Signal{
	"ABRT": syscall.SIGABRT,
	"ALRM": syscall.SIGALRM,
	"FPE":  syscall.SIGFPE,
	"HUP":  syscall.SIGHUP,
	"ILL":  syscall.SIGILL,
	"INT":  syscall.SIGINT,
	"KILL": syscall.SIGKILL,
	"PIPE": syscall.SIGPIPE,
	"QUIT": syscall.SIGQUIT,
	"SEGV": syscall.SIGSEGV,
	"TERM": syscall.SIGTERM,
	"USR1": syscall.SIGUSR1,
	"USR2": syscall.SIGUSR2,
}

// setProcessGroup makes the command the leader of a new process group, so
// that signals reach its children too.
func setProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

func signalGroup(pid int, name string) error {
	sig, ok := signals[name]
	if !ok {
		return fmt.Errorf("sshd: unknown signal %q", name)
	}
	return syscall.Kill(-pid, sig)
}

func killGroup(p *os.Process) error {
	return syscall.Kill(-p.Pid, syscall.SIGKILL)
}

// exitStatus reports how the process ended: the SSH name of the signal
// that killed it, or else its exit code (128+n for a signal SSH has no name
// for, as shells do).
func exitStatus(st *os.ProcessState) (code int, signal string, coreDumped bool) {
	ws, ok := st.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() {
		return st.ExitCode(), "", false
	}
	for n, s := range signals {
		if s == ws.Signal() {
			return 128 + int(s), n, ws.CoreDump()
		}
	}
	return 128 + int(ws.Signal()), "", false
}
