package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// This file holds what the chaos tests share: `gpuprov sim serve` as a
// child process, the CLI's config for it, and the checks made once
// nothing runs any more (the journal against the sim's own view).

// simServe is `gpuprov sim serve -o json` running as a child process.
type simServe struct {
	Endpoint   string `json:"endpoint"`
	AdminToken string `json:"admin_token"`
	Accounts   []struct {
		Name   string `json:"name"`
		APIKey string `json:"api_key"`
	} `json:"accounts"`

	cmd      *exec.Cmd
	stderr   *os.File
	done     chan error
	stopOnce sync.Once
}

// startSimServe starts `gpuprov sim serve` with the simulator options conf,
// its state and its stderr in dir, and waits (bounded) for the line that
// says it is ready. Stop ends it; t's cleanup does too, if nothing did.
func startSimServe(t *testing.T, c *cli, dir, conf string) *simServe {
	t.Helper()
	cfgPath := filepath.Join(dir, "sim.toml")
	if err := os.WriteFile(cfgPath, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	stderr, err := os.Create(filepath.Join(dir, "sim.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := c.command("sim", "serve", "-o", "json", "--addr", "127.0.0.1:0", "--state", filepath.Join(dir, "state.json"), "--config", cfgPath)
	cmd.Stderr = stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &simServe{cmd: cmd, stderr: stderr, done: make(chan error, 1)}
	line := make(chan []byte, 1)
	go func() {
		r := bufio.NewReader(stdout)
		b, _ := r.ReadBytes('\n') // an early exit shows as an empty line
		line <- b
		_, _ = io.Copy(io.Discard, r)
		s.done <- cmd.Wait()
	}()
	t.Cleanup(s.Stop)
	select {
	case b := <-line:
		if err := json.Unmarshal(b, s); err != nil {
			s.Stop()
			log, _ := os.ReadFile(stderr.Name())
			t.Fatalf("sim serve: %q: %v\n%s", b, err, log)
		}
	case <-time.After(30 * time.Second):
		s.Stop()
		log, _ := os.ReadFile(stderr.Name())
		t.Fatalf("sim serve printed nothing in 30s:\n%s", log)
	}
	return s
}

// Stop ends the server with SIGTERM (it saves its state) and waits.
func (s *simServe) Stop() {
	s.stopOnce.Do(func() {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.done:
		case <-time.After(10 * time.Second):
			_ = s.cmd.Process.Kill()
			<-s.done
		}
		s.stderr.Close()
	})
}

// key returns the API key of cloud.
func (s *simServe) key(cloud string) string {
	for _, a := range s.Accounts {
		if a.Name == cloud {
			return a.APIKey
		}
	}
	return ""
}

// providerTables returns the CLI config's provider tables for the sim: one
// per cloud of cloudNames, fast polls and a short consistency window.
func (s *simServe) providerTables() string {
	var b strings.Builder
	for _, name := range cloudNames {
		fmt.Fprintf(&b, "[%s]\ntype = \"sim\"\nendpoint = %q\napi_key = %q\npoll_interval = \"100ms\"\nconsistency_window = \"1s\"\nboot_timeout = \"30s\"\ndelete_timeout = \"30s\"\n\n",
			name, s.Endpoint, s.key(name))
	}
	return b.String()
}

// writeConfig writes the CLI's config for the sim, with the journal at
// journalURL ("" for the CLI's default), where the CLI of c reads it, and
// returns its path.
func (c *cli) writeConfig(s *simServe, journalURL string) string {
	c.t.Helper()
	var b strings.Builder
	if journalURL != "" {
		fmt.Fprintf(&b, "journal = %q\n\n", journalURL)
	}
	b.WriteString(s.providerTables())
	dir := filepath.Join(c.home, "config", "gpuprov")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		c.t.Fatal(err)
	}
	path := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		c.t.Fatal(err)
	}
	return path
}

// journalVM is a VM as `gpuprov list -o json` shows it.
type journalVM struct {
	Name       string `json:"name"`
	State      string `json:"state"`
	Provider   string `json:"provider"`
	InstanceID string `json:"instance_id"`
	Owner      string `json:"owner"` // the lease holder, while one drives it
}

// listVMs runs `gpuprov list --all -o json`: every VM of the journal, and
// the raw output.
func listVMs(c *cli) ([]journalVM, string, error) {
	code, out := c.run("list", "--all", "-o", "json")
	if code != 0 {
		return nil, out, fmt.Errorf("gpuprov list exited %d:\n%s", code, out)
	}
	var vms []journalVM
	if err := json.Unmarshal([]byte(out), &vms); err != nil {
		return nil, out, fmt.Errorf("list -o json: %v\n%s", err, out)
	}
	return vms, out, nil
}

// restView is the journal checked against the sim once nothing drives a
// VM any more (after `gpuprov recover`).
type restView struct {
	// leaks are the live instances (not terminated) that no ready VM of
	// the journal owns: none of them is the instance of a ready VM of the
	// name its label carries.
	leaks []string
	// duplicates are the VM names that label more than one live instance.
	duplicates []string
	// stuck are the VMs neither ready nor ended (deleted, failed).
	stuck []string
	// vanished are the ready VMs whose instance is not live: "vm
	// cloud/id". (Not counted by failed: a preemption makes them too.)
	vanished []string
	// ready are the ready VMs; states counts the VMs by state.
	ready  []string
	states map[string]int
	// vmsJSON is the journal's listing as the CLI printed it.
	vmsJSON string
}

func (v restView) failed() bool { return len(v.leaks)+len(v.duplicates)+len(v.stuck) > 0 }

// viewAtRest compares the journal's VMs whose names start with prefix
// (gpuprov list --all) with every live instance of the sim at url (its
// admin API).
func viewAtRest(t *testing.T, c *cli, url, admin, prefix string) restView {
	t.Helper()
	vms, out, err := listVMs(c)
	if err != nil {
		t.Fatal(err)
	}
	v := restView{states: map[string]int{}, vmsJSON: out}
	owner := map[string]string{} // cloud/instance id → ready VM
	for _, vm := range vms {
		if !strings.HasPrefix(vm.Name, prefix) {
			continue
		}
		v.states[vm.State]++
		switch vm.State {
		case "ready":
			owner[vm.Provider+"/"+vm.InstanceID] = vm.Name
			v.ready = append(v.ready, vm.Name)
		case "deleted", "failed":
		default:
			v.stuck = append(v.stuck, vm.Name+" "+vm.State)
		}
	}
	perVM := map[string]int{}
	isLive := map[string]bool{} // cloud/instance id
	for _, cloud := range cloudNames {
		live, err := liveInstances(url, admin, cloud)
		if err != nil {
			t.Fatal(err)
		}
		for _, in := range live {
			isLive[cloud+"/"+in.ID] = true
			vm := in.Labels["gpuprov"]
			perVM[vm]++
			if owner[cloud+"/"+in.ID] != vm {
				v.leaks = append(v.leaks, fmt.Sprintf("%s/%s (vm %q, %s)", cloud, in.ID, vm, in.Status))
			}
		}
	}
	for vm, n := range perVM {
		if n > 1 {
			v.duplicates = append(v.duplicates, fmt.Sprintf("%s×%d", vm, n))
		}
	}
	for inst, vm := range owner {
		if !isLive[inst] {
			v.vanished = append(v.vanished, vm+" "+inst)
		}
	}
	sort.Strings(v.leaks)
	sort.Strings(v.duplicates)
	sort.Strings(v.vanished)
	return v
}

// downAll runs `gpuprov down --all` and returns how many instances and
// side resources the sim still holds after it, and what down printed.
func downAll(t *testing.T, c *cli, url, admin string) (int, string) {
	t.Helper()
	code, out := c.run("down", "--all")
	if code != 0 {
		t.Errorf("gpuprov down --all exited %d:\n%s", code, out)
	}
	left := 0
	for _, cloud := range cloudNames {
		live, err := liveInstances(url, admin, cloud)
		if err != nil {
			t.Fatal(err)
		}
		side, err := sideResources(url, admin, cloud)
		if err != nil {
			t.Fatal(err)
		}
		left += len(live) + side
	}
	return left, out
}
