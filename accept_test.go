package gpuprov_test

import (
	"context"
	"io/fs"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/gpu"
	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/ssh"
)

// probeOut is what gpu.Script prints on a machine with one healthy H100
// (the values of a real H100's row) and a readable, quiet kernel log.
const probeOut = `@@gpuprov query
0, GPU-5117a000-0000-4000-8000-000000000000, 1654922059871, NVIDIA H100 80GB HBM3, 00000000:18:00.0, 81559, 580.159.04, Enabled, 0, [N/A], No, No, 5, 5, 16, 16, 0x0000000000000001, 34
@@gpuprov rc 0
@@gpuprov xid
@@gpuprov rc 0
`

// probeNodes is a Connector whose machines answer the probe with their
// turn's output, in launch order; commands other than the probe answer
// with cmdErr.
type probeNodes struct {
	mu     sync.Mutex
	outs   []string
	cmdErr error
	ran    []string
}

type probeConn struct {
	n   *probeNodes
	out string
}

func (n *probeNodes) Connect(ctx context.Context, node gpuprov.Node) (gpuprov.Conn, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := ""
	if len(n.outs) > 0 {
		out, n.outs = n.outs[0], n.outs[1:]
	}
	return &probeConn{n: n, out: out}, nil
}

func (c *probeConn) Run(ctx context.Context, cmd string) ([]byte, []byte, error) {
	c.n.mu.Lock()
	defer c.n.mu.Unlock()
	c.n.ran = append(c.n.ran, cmd)
	if strings.Contains(cmd, "@@gpuprov") {
		return []byte(c.out), nil, nil
	}
	return []byte("epoch 1 loss nan\n"), nil, c.n.cmdErr
}
func (c *probeConn) WriteFile(context.Context, string, []byte, fs.FileMode) error { return nil }
func (c *probeConn) HostKey() string                                              { return "ssh-ed25519 AAAAfake" }
func (c *probeConn) Close() error                                                 { return nil }

func events(t *testing.T, j journal.Journal, vm, typ string) []string {
	t.Helper()
	evs, err := j.Events(context.Background(), journal.EventQuery{VM: vm})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, ev := range evs {
		if ev.Type == typ {
			out = append(out, ev.Message)
		}
	}
	return out
}

// TestAcceptanceThroughAConnector: WithAcceptance probes through a
// Connector of the caller's; a machine whose answer is not the probe's is
// not judged (next offer, nothing blocked); a healthy one is accepted with
// its summary; without WithAcceptance such a Connector is not probed.
func TestAcceptanceThroughAConnector(t *testing.T) {
	ctx := context.Background()
	nodes := &probeNodes{outs: []string{"Welcome to Ubuntu 24.04 LTS\n", probeOut}}
	e := newEnv(t, gpuprov.WithConnector(nodes), gpuprov.WithAcceptance(gpu.Options{}))
	vm, err := e.p.Launch(ctx, h100("vm"))
	if err != nil {
		t.Fatal(err)
	}
	as, _ := e.j.Attempts(ctx, "vm")
	if len(as) != 2 || as[0].ErrorKind != gpuprov.KindAccept || !strings.Contains(as[0].Error, "gpu probe: not the GPU probe's output") {
		t.Fatalf("attempts %+v", as)
	}
	if blocks, _ := e.j.Blocks(ctx, time.Time{}); len(blocks) != 0 {
		t.Errorf("a machine not judged was blocked: %+v", blocks)
	}
	if got := events(t, e.j, "vm", gpuprov.EvAccepted); len(got) != 1 || !strings.Contains(got[0], "H100-80GB healthy") || !strings.Contains(got[0], "580.159.04") {
		t.Errorf("accepted events %q", got)
	}
	if vm.State != gpuprov.StateReady {
		t.Errorf("state %s", vm.State)
	}

	plain := &probeNodes{}
	e2 := newEnv(t, gpuprov.WithConnector(plain))
	if _, err := e2.p.Launch(ctx, h100("vm")); err != nil {
		t.Fatal(err)
	}
	if len(plain.ran) != 0 {
		t.Errorf("a caller's Connector was probed without WithAcceptance: %q", plain.ran)
	}
}

// TestAcceptanceCommand: the request's own command runs after the probe
// and must exit 0; one that fails rejects the machine, with its last line.
func TestAcceptanceCommand(t *testing.T) {
	ctx := context.Background()
	nodes := &probeNodes{outs: []string{probeOut, probeOut}, cmdErr: &ssh.ExitError{Code: 1}}
	e := newEnv(t, gpuprov.WithConnector(nodes), gpuprov.WithAcceptance(gpu.Options{}))
	req := h100("vm")
	req.Acceptance.Command = "python3 /opt/smoke.py"
	req.MaxOffers = 2
	_, err := e.p.Launch(ctx, req)
	if err == nil {
		t.Fatal("launched although the command fails everywhere")
	}
	got := events(t, e.j, "vm", gpuprov.EvRejected)
	if len(got) != 2 || !strings.Contains(got[0], "the request's acceptance command failed") || !strings.Contains(got[0], "epoch 1 loss nan") {
		t.Errorf("rejected events %q", got)
	}
	if blocks, _ := e.j.Blocks(ctx, time.Time{}); len(blocks) != 2 || blocks[0].ErrorKind != gpuprov.KindAccept {
		t.Errorf("blocks %+v", blocks)
	}
}
