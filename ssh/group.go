package ssh

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"io"
	"strconv"
	"sync"
)

// How Run finds the remote command's process group to kill it on cancel.
//
// sshd starts the login shell of every session in a session and process
// group of its own (OpenSSH and Dropbear call setsid(2) in the child before
// executing the shell), so the shell's pid, $$, is the group's id. Run
// prefixes the command with one that prints $$ on stderr after a token
// fresh for each Run, and groupReport takes that line out of stderr again.

// groupScanLimit is how many bytes of stderr are held back while looking
// for the group report (shell start-up files may print before it); past
// it, or at the end of the output, they are passed on untouched and the
// group is unknown.
const groupScanLimit = 64 << 10

// groupReport is a writer that removes the line "<token> <pgid>\n" from
// the stream it forwards to next, and remembers the pgid.
type groupReport struct {
	token []byte        // "gpuprov-pgid-<random hex> "
	known chan struct{} // closed when the pgid is found
	ended chan struct{} // closed by finish: if not known by then, never

	mu   sync.Mutex
	next io.Writer
	held []byte // stream not yet passed on while looking for the line
	done bool   // found, or given up
	pgid int
}

func newGroupReport(next io.Writer) *groupReport {
	var nonce [8]byte
	_, _ = rand.Read(nonce[:]) // crypto/rand.Read never fails
	return &groupReport{
		token: []byte("gpuprov-pgid-" + hex.EncodeToString(nonce[:]) + " "),
		known: make(chan struct{}),
		ended: make(chan struct{}),
		next:  next,
	}
}

// wrap returns cmd with the report in front, on a line of its own so that
// cmd is parsed as if it came alone. The exit status is cmd's, and the
// process tree is unchanged: bash still runs a last simple command in
// place of itself, and dash, which never does, forks it with or without
// the report line.
func (g *groupReport) wrap(cmd string) string {
	return "echo " + string(g.token) + "$$ >&2\n" + cmd
}

func (g *groupReport) Write(p []byte) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.done {
		_, _ = g.next.Write(p) // a capBuffer never fails
		return len(p), nil
	}
	g.held = append(g.held, p...)
	i := bytes.Index(g.held, g.token)
	if i < 0 {
		if len(g.held) > groupScanLimit {
			g.flush()
		}
		return len(p), nil
	}
	end := bytes.IndexByte(g.held[i:], '\n')
	if end < 0 {
		if len(g.held) > groupScanLimit {
			g.flush()
		}
		return len(p), nil // the rest of the line is on its way
	}
	end += i
	pgid, err := strconv.Atoi(string(g.held[i+len(g.token) : end]))
	if err != nil || pgid <= 1 {
		g.flush() // not our line after all; leave the stream alone
		return len(p), nil
	}
	g.pgid = pgid
	close(g.known)
	rest := append(g.held[:i:i], g.held[end+1:]...)
	g.held, g.done = nil, true
	if len(rest) > 0 {
		_, _ = g.next.Write(rest)
	}
	return len(p), nil
}

// finish passes on what is still held, at the end of the output. Call it
// once.
func (g *groupReport) finish() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.done {
		g.flush()
	}
	close(g.ended)
}

// flush gives up looking. g.mu is held.
func (g *groupReport) flush() {
	g.done = true
	if len(g.held) > 0 {
		_, _ = g.next.Write(g.held)
	}
	g.held = nil
}

// group returns the reported pgid, once known.
func (g *groupReport) group() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.pgid
}
