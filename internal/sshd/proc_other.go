//go:build !unix

package sshd

import (
	"errors"
	"os"
	"os/exec"
)

// Without process groups, signals reach the shell only.

func setProcessGroup(*exec.Cmd) {}

func signalGroup(pid int, name string) error {
	if name != "KILL" && name != "TERM" {
		return errors.New("sshd: only KILL and TERM are supported on this system")
	}
	p, err := os.FindProcess(pid)
	if err != nil {
		return err
	}
	return p.Kill()
}

func killGroup(p *os.Process) error { return p.Kill() }

func exitStatus(st *os.ProcessState) (int, string, bool) { return st.ExitCode(), "", false }
