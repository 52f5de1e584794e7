package sshd

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"

	"golang.org/x/crypto/ssh"
)

const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

func baseEnv(cfg Config) []string {
	path := os.Getenv("PATH")
	if path == "" {
		path = defaultPath
	}
	env := []string{"PATH=" + path, "HOME=" + cfg.Dir}
	return append(env, cfg.Env...)
}

// session serves one "session" channel: env, exec and signal requests.
type session struct {
	s    *Server
	conn net.Conn
	ch   ssh.Channel
	log  *slog.Logger
	env  []string

	mu      sync.Mutex
	pid     int  // the command's pid and process group; 0 before exec
	running bool // between Start and the end of Wait
	// replying is held by a signal request from the signal until its
	// reply is sent, and by run while it reports the exit and closes the
	// channel: a command the signal kills at once must not close the
	// channel ahead of the reply (the client would read EOF, not "ok").
	replying sync.Mutex
}

// session returns when the client closes the channel or the connection
// dies, after the command (if any) has been killed and reaped.
func (s *Server) session(conn net.Conn, ch ssh.Channel, reqs <-chan *ssh.Request, log *slog.Logger) {
	ctx, cancel := context.WithCancel(s.ctx)
	ss := &session{s: s, conn: conn, ch: ch, log: log, env: s.env}
	var wg sync.WaitGroup
	started := false
	for req := range reqs {
		switch req.Type {
		case "env":
			var msg struct{ Name, Value string }
			ok := ssh.Unmarshal(req.Payload, &msg) == nil && !started &&
				msg.Name != "" && !strings.ContainsAny(msg.Name, "=\x00") && !strings.ContainsRune(msg.Value, 0)
			if ok {
				ss.env = append(ss.env[:len(ss.env):len(ss.env)], msg.Name+"="+msg.Value)
			}
			_ = req.Reply(ok, nil) // a failed reply means the channel is gone
		case "exec":
			var msg struct{ Command string }
			if started || ssh.Unmarshal(req.Payload, &msg) != nil {
				_ = req.Reply(false, nil)
				continue
			}
			serve, err := ss.start(ctx, msg.Command)
			if err != nil {
				log.Debug("exec failed", "cmd", msg.Command, "err", err)
				_ = req.Reply(false, nil)
				continue
			}
			started = true
			// Acknowledge before serving: a quick command must not send
			// its exit status and close the channel ahead of the reply.
			_ = req.Reply(true, nil)
			serve(&wg)
			if s.Faults().DropMidCommand {
				log.Debug("fault: dropping connection mid-command")
				_ = conn.Close() // the fault: the client must notice the drop
			}
		case "signal":
			var msg struct{ Signal string }
			ss.replying.Lock()
			ok := ssh.Unmarshal(req.Payload, &msg) == nil && !s.Faults().IgnoreSignals && ss.signal(msg.Signal) == nil
			_ = req.Reply(ok, nil)
			ss.replying.Unlock()
		case "keepalive@openssh.com":
			_ = req.Reply(true, nil)
		default: // shell, pty-req, subsystem, x11-req, ...
			_ = req.Reply(false, nil)
		}
	}
	// The channel is closed: kill what still runs, then wait for it.
	cancel()
	wg.Wait()
	_ = ch.Close() // already closed by the peer or by run; the error is expected
}

// start starts command. The returned serve function hands it to
// goroutines in wg that feed its stdin, forward its output, report its
// exit and close the channel.
func (ss *session) start(ctx context.Context, command string) (serve func(wg *sync.WaitGroup), err error) {
	cmd := exec.CommandContext(ctx, "sh", "-c", command)
	cmd.Dir = ss.s.cfg.Dir
	cmd.Env = ss.env
	setProcessGroup(cmd)
	cmd.Cancel = func() error { return killGroup(cmd.Process) }

	// Our own pipes, so that Wait returns when the process exits and we
	// decide how long to drain its output.
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		closeAll(outR, outW)
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = outW, errW
	err = cmd.Start()
	closeAll(outW, errW) // the child holds its own copies
	if err != nil {
		closeAll(outR, errR)
		return nil, err
	}
	ss.mu.Lock()
	ss.pid, ss.running = cmd.Process.Pid, true
	ss.mu.Unlock()
	ss.log.Debug("exec", "cmd", command, "pid", cmd.Process.Pid)

	return func(wg *sync.WaitGroup) {
		wg.Go(func() {
			// Ends when the client sends EOF, or when run closes the channel.
			_, _ = io.Copy(stdin, ss.ch)
			_ = stdin.Close()
		})
		wg.Go(func() { ss.run(ctx, cmd, outR, errR) })
	}, nil
}

// run waits for the command and its output, then sends exit-status (or
// exit-signal) and closes the channel.
func (ss *session) run(ctx context.Context, cmd *exec.Cmd, outR, errR *os.File) {
	var copies sync.WaitGroup
	copies.Go(func() { _, _ = io.Copy(ss.ch, outR) })
	copies.Go(func() { _, _ = io.Copy(ss.ch.Stderr(), errR) })
	drained := make(chan struct{})
	go func() { copies.Wait(); close(drained) }()

	waitErr := cmd.Wait()
	ss.mu.Lock()
	ss.running = false
	ss.mu.Unlock()

	// Like OpenSSH, wait for EOF on the output, which a background child
	// may hold open; but not past the end of the channel or the server.
	select {
	case <-drained:
	case <-ctx.Done():
		closeAll(outR, errR) // unblocks the copies
		<-drained
	}
	closeAll(outR, errR)

	ss.replying.Lock() // a signal's reply goes first (see replying)
	defer ss.replying.Unlock()
	st := cmd.ProcessState
	if st == nil {
		ss.log.Debug("wait failed", "err", waitErr)
		_ = ss.ch.Close()
		return
	}
	_ = ss.ch.CloseWrite() // errors below mean the client is gone; nothing to do
	code, sig, core := exitStatus(st)
	if sig != "" {
		ss.log.Debug("killed", "pid", st.Pid(), "signal", sig)
		_, _ = ss.ch.SendRequest("exit-signal", false, ssh.Marshal(struct {
			Signal     string
			CoreDumped bool
			Error      string
			Lang       string
		}{sig, core, "", ""}))
	} else {
		ss.log.Debug("exited", "pid", st.Pid(), "code", code)
		_, _ = ss.ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Status uint32 }{uint32(code)}))
	}
	_ = ss.ch.Close()
}

// signal forwards an SSH signal name ("TERM", "KILL", ...) to the
// command's process group.
func (ss *session) signal(name string) error {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if !ss.running {
		return errors.New("sshd: no command running")
	}
	return signalGroup(ss.pid, name)
}

func closeAll(files ...*os.File) {
	for _, f := range files {
		_ = f.Close() // pipe ends; a second close is harmless
	}
}
