package sim_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/crypto/ssh"

	"github.com/org/gpuprov/clock"
	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/sim"
	"github.com/org/gpuprov/provider/sim/simserver"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

const (
	cloudName    = "sim-a"
	installation = "inst-1"
	bootTime     = 3 * time.Second
	deleteTime   = time.Second
)

// env is an in-process sim server on a fake clock and an adapter for it.
type env struct {
	srv *simserver.Server
	clk *clock.Fake
	p   *sim.Provider
	tr  *http.Transport
}

// newEnv starts a server with one cloud "sim-a" (catalog A, instant API,
// boot 3s, delete 1s, no jitter) after mutate has adjusted its options.
func newEnv(t *testing.T, mutate func(*simserver.Options)) *env {
	t.Helper()
	clk := clock.NewFake(t0)
	timing := simserver.Timing{BootTime: simserver.Duration(bootTime), DeleteTime: simserver.Duration(deleteTime)}
	opts := simserver.Options{
		Clock:  clk,
		Clouds: []simserver.CloudConfig{{Name: cloudName, Timing: &timing}},
	}
	if mutate != nil {
		mutate(&opts)
	}
	srv, err := simserver.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	e := &env{srv: srv, clk: clk}
	e.p, e.tr = newProvider(t, srv, sim.Config{})
	return e
}

// newProvider builds an adapter for srv's sim-a with cfg's extra settings.
func newProvider(t *testing.T, srv *simserver.Server, cfg sim.Config) (*sim.Provider, *http.Transport) {
	t.Helper()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	cfg.Endpoint, cfg.Cloud = srv.URL(), cloudName
	if cfg.APIKey == "" {
		cfg.APIKey = srv.APIKey(cloudName)
	}
	if cfg.RequestTimeout == 0 {
		cfg.RequestTimeout = 5 * time.Second
	}
	p, err := sim.New(cfg, sim.WithName(cloudName), sim.WithInstallation(installation),
		sim.WithHTTPClient(&http.Client{Transport: tr}))
	if err != nil {
		t.Fatal(err)
	}
	return p, tr
}

func (e *env) setFaults(t *testing.T, f simserver.Faults) {
	t.Helper()
	if err := e.srv.SetFaults(cloudName, f); err != nil {
		t.Fatal(err)
	}
}

// keys are the client key and the VM's host key of a spec.
type keys struct {
	user ssh.Signer
	host ssh.PublicKey
}

// newSpec returns a spec for vm with a fresh host key and user key.
func newSpec(t *testing.T, vm string) (*provider.InstanceSpec, keys) {
	t.Helper()
	_, hostPriv, _ := ed25519.GenerateKey(rand.Reader)
	block, err := ssh.MarshalPrivateKey(hostPriv, "")
	if err != nil {
		t.Fatal(err)
	}
	hostSigner, _ := ssh.NewSignerFromKey(hostPriv)
	_, userPriv, _ := ed25519.GenerateKey(rand.Reader)
	userSigner, _ := ssh.NewSignerFromKey(userPriv)
	spec := &provider.InstanceSpec{
		VM: vm, Installation: installation, Attempt: 1, IdempotencyToken: installation + "-" + vm + "-1",
		SSHUser:        "gpuprov",
		AuthorizedKeys: []string{strings.TrimSpace(string(ssh.MarshalAuthorizedKey(userSigner.PublicKey())))},
		HostKey: &provider.HostKey{PrivatePEM: string(pem.EncodeToMemory(block)),
			Public: strings.TrimSpace(string(ssh.MarshalAuthorizedKey(hostSigner.PublicKey())))},
		OpenPorts: []provider.Port{{Number: 6443, Protocol: "tcp"}},
	}
	return spec, keys{user: userSigner, host: hostSigner.PublicKey()}
}

// offer plans req and returns the first offer, failing when there is none.
func (e *env) offer(t *testing.T, req provider.ResourceRequest) provider.Offer {
	t.Helper()
	offers, err := e.p.Plan(context.Background(), &req)
	if err != nil || len(offers) == 0 {
		t.Fatalf("plan %+v: %v offers, err %v", req, len(offers), err)
	}
	return offers[0]
}

var h100 = provider.ResourceRequest{GPU: "H100-80GB", GPUCount: 1}

// launch prepares and creates vm on the cheapest H100 and returns the
// offer and the instance id.
func (e *env) launch(t *testing.T, spec *provider.InstanceSpec) (provider.Offer, string) {
	t.Helper()
	ctx := context.Background()
	of := e.offer(t, h100)
	prep, err := e.p.Prepare(ctx, &of, spec)
	if err != nil {
		t.Fatalf("prepare: %v", err)
	}
	id, err := e.p.Create(ctx, &of, prep, spec)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	return of, id
}

// observe returns the instances of vm in loc, failing on error.
func (e *env) observe(t *testing.T, loc provider.Location, vm string) []provider.Observed {
	t.Helper()
	obs, err := e.p.Observe(context.Background(), loc, vm)
	if err != nil {
		t.Fatalf("observe: %v", err)
	}
	return obs
}

// one returns the single observed instance, failing otherwise.
func one(t *testing.T, obs []provider.Observed) provider.Observed {
	t.Helper()
	if len(obs) != 1 {
		t.Fatalf("observed %d instances, want 1: %+v", len(obs), obs)
	}
	return obs[0]
}

// errKind asserts err's kind.
func errKind(t *testing.T, err error, want provider.ErrorKind) *provider.Error {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want %s", want)
	}
	if got := provider.KindOf(err); got != want {
		t.Fatalf("kind %s, want %s (err: %v)", got, want, err)
	}
	pe, _ := err.(*provider.Error)
	return pe
}
