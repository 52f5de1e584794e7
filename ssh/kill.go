package ssh

import (
	"fmt"
	"io"
	"strconv"
	"sync"

	gossh "golang.org/x/crypto/ssh"
)

// How a cancelled Run kills the remote command's process group.
//
// A signal request reaches only the login shell, and OpenSSH ignores it on
// root logins, so the group is killed by `kill` run on the VM. Opening a
// session for that costs a channel open plus the start of the login shell,
// which sources the user's start-up files (Debian's bash reads ~/.bashrc
// even for `bash -c` under sshd): hundreds of milliseconds on a loaded
// machine, too much to pay after TERM's grace when the group must be gone
// within a second. So the Client keeps a kill loop running in a session of
// its own, started in the background by the first Run, and a kill is one
// line written to the loop's stdin.

// killLoop is the remote loop: it reads "<signal> <pgid>" lines and sends
// the signal to the process group pgid, or to the process pgid alone if no
// such group exists (a server that did not make the shell a group leader).
// It ends at EOF, when the session or the connection closes.
const killLoop = `while read -r sig pgid; do kill -s "$sig" -- "-$pgid" 2>/dev/null || kill -s "$sig" "$pgid" 2>/dev/null; done`

// A killer is one kill loop on the Client's connection.
type killer struct {
	sudo  bool
	ready chan struct{} // closed once the loop has started, or failed to
	ended chan struct{} // closed when its session is gone, or never opened

	mu sync.Mutex     // one line at a time
	in io.WriteCloser // the loop's stdin once ready; nil if it failed to start
}

// killer returns the Client's kill loop, plain or through `sudo -n`,
// starting it in the background if there is none or the last one ended.
// It returns nil once Close has begun.
func (c *Client) killer(sudo bool) *killer {
	c.killMu.Lock()
	defer c.killMu.Unlock()
	i := 0
	if sudo {
		i = 1
	}
	if k := c.killers[i]; k != nil {
		select {
		case <-k.ended:
		default:
			return k
		}
	}
	k := &killer{sudo: sudo, ready: make(chan struct{}), ended: make(chan struct{})}
	if !c.spawn(func() { c.serveKiller(k) }) {
		return nil
	}
	c.killers[i] = k
	return k
}

// serveKiller runs k's loop until its session ends, at the latest when
// the transport does.
func (c *Client) serveKiller(k *killer) {
	defer close(k.ended)
	started := false
	defer func() {
		if !started {
			close(k.ready)
		}
	}()
	sess, err := c.conn.NewSession() // returns when the transport ends, at the latest
	if err != nil {
		c.log.Debug("ssh kill loop: no session", "sudo", k.sudo, "err", err)
		return
	}
	defer sess.Close() // usually closed already; nothing to report
	stderr := &capBuffer{limit: 512}
	sess.Stderr = stderr
	in, err := sess.StdinPipe()
	if err != nil {
		c.log.Debug("ssh kill loop: stdin", "sudo", k.sudo, "err", err)
		return
	}
	cmd := killLoop
	if k.sudo {
		cmd = "sudo -n -- sh -c " + Quote(killLoop)
	}
	if err := sess.Start(cmd); err != nil {
		c.log.Debug("ssh kill loop: start", "sudo", k.sudo, "err", err)
		return
	}
	k.in, started = in, true
	close(k.ready)
	err = sess.Wait()
	msg, _ := stderr.seal()
	c.log.Debug("ssh kill loop ended", "sudo", k.sudo, "err", err, "stderr", lastLines(msg, 3, 512))
}

// send writes one kill line to k's loop.
func (k *killer) send(sig gossh.Signal, pgid int) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.in == nil {
		return fmt.Errorf("the kill loop did not start")
	}
	_, err := io.WriteString(k.in, string(sig)+" "+strconv.Itoa(pgid)+"\n")
	return err
}

// killGroup sends sig to the process group g reports through k, once g is
// known and k has started; it sends nothing if the command has exited
// first, g's output ended without a report, or k could not start.
func (c *Client) killGroup(k *killer, g *groupReport, sig gossh.Signal, exited <-chan struct{}) {
	select {
	case <-g.known:
	case <-g.ended:
	case <-exited:
	case <-c.done:
	}
	pgid := g.group()
	if pgid == 0 {
		return // no report (a shell that is not POSIX), or the command is gone
	}
	select {
	case <-k.ready:
	case <-exited:
	case <-c.done:
	}
	select {
	case <-exited:
		return // nothing left to kill
	case <-c.done:
		return // no line can be sent
	default:
	}
	err := k.send(sig, pgid)
	c.log.Debug("ssh kill", "signal", sig, "pgid", pgid, "sudo", k.sudo, "err", err)
}
