package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// self re-executes this program in role with args.
func self(role string, args ...string) (*exec.Cmd, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), roleEnv+"="+role)
	return cmd, nil
}

// simProc is the serve role running in its own process.
type simProc struct {
	info   serveInfo
	cmd    *exec.Cmd
	stderr bytes.Buffer
	done   chan error
}

// startSimProc starts the serve role with the options written to path and
// waits (bounded) for its JSON line.
func startSimProc(path string) (*simProc, error) {
	cmd, err := self("serve", "-options", path)
	if err != nil {
		return nil, err
	}
	s := &simProc{cmd: cmd, done: make(chan error, 1)}
	cmd.Stderr = &s.stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	line := make(chan []byte, 1)
	go func() {
		r := bufio.NewReader(out)
		b, _ := r.ReadBytes('\n') // an early exit shows as an empty line
		line <- b
		_, _ = io.Copy(io.Discard, r)
		s.done <- cmd.Wait()
	}()
	select {
	case b := <-line:
		if err := json.Unmarshal(b, &s.info); err != nil {
			s.Stop()
			return nil, fmt.Errorf("sim process: %q: %w (stderr: %s)", b, err, s.stderr.String())
		}
	case <-time.After(30 * time.Second):
		s.Stop()
		return nil, fmt.Errorf("sim process printed nothing in 30s (stderr: %s)", s.stderr.String())
	}
	return s, nil
}

// InfoJSON is the serve line, for the -sim flag of the other roles.
func (s *simProc) InfoJSON() string {
	b, _ := json.Marshal(s.info) // a struct of strings always marshals
	return string(b)
}

// Stop ends the server with SIGTERM (it saves its state) and waits.
func (s *simProc) Stop() {
	if s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(15 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

// adminInstance is an instance as the admin API lists it.
type adminInstance struct {
	ID     string            `json:"id"`
	Status string            `json:"status"`
	Labels map[string]string `json:"labels"`
	Events []struct {
		At   time.Time `json:"at"`
		Type string    `json:"type"`
	} `json:"events"`
}

// adminGet reads an admin API path of a sim at url into v.
func adminGet(url, token, path string, v any) error {
	req, err := http.NewRequest(http.MethodGet, url+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %s", path, resp.Status, b)
	}
	return json.Unmarshal(b, v)
}

// liveInstances returns the instances of cloud that are not terminated.
func liveInstances(url, token, cloud string) ([]adminInstance, error) {
	var out struct {
		Instances []adminInstance `json:"instances"`
	}
	if err := adminGet(url, token, "/admin/clouds/"+cloud+"/instances", &out); err != nil {
		return nil, err
	}
	live := out.Instances[:0]
	for _, in := range out.Instances {
		if in.Status != "terminated" {
			live = append(live, in)
		}
	}
	return live, nil
}

// sideResources counts cloud's firewalls and SSH keys.
func sideResources(url, token, cloud string) (int, error) {
	var res struct {
		Firewalls []json.RawMessage `json:"firewalls"`
		SSHKeys   []json.RawMessage `json:"ssh_keys"`
	}
	if err := adminGet(url, token, "/admin/clouds/"+cloud+"/resources", &res); err != nil {
		return 0, err
	}
	return len(res.Firewalls) + len(res.SSHKeys), nil
}
