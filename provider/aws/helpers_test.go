package aws_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/crypto/ssh"

	"github.com/org/gpuprov/clock"
	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/aws"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(motoMain{m}) }

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

const installation = "inst-aws-1"

// env is a fake EC2 on a fake clock and a provider talking to it.
type env struct {
	f   *fakeEC2
	clk *clock.Fake
	p   *aws.Provider
}

// newEnv returns a provider for cfg (regions us-east-1 and us-west-2 when
// cfg names none) on a fresh fake.
func newEnv(t *testing.T, cfg aws.Config) *env {
	t.Helper()
	clk := clock.NewFake(t0)
	f := newFakeEC2(t, clk)
	if cfg.Regions == nil {
		cfg.Regions = []string{"us-east-1", "us-west-2"}
	}
	p, err := aws.New(cfg, aws.WithName("aws"), aws.WithInstallation(installation), aws.WithEndpoint(f.endpoint()), aws.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	return &env{f: f, clk: clk, p: p}
}

// newSpec returns a spec for vm with a fresh host key and user key.
func newSpec(t *testing.T, vm string) *provider.InstanceSpec {
	t.Helper()
	_, hostPriv, _ := ed25519.GenerateKey(rand.Reader)
	block, err := ssh.MarshalPrivateKey(hostPriv, "")
	if err != nil {
		t.Fatal(err)
	}
	hostSigner, _ := ssh.NewSignerFromKey(hostPriv)
	_, userPriv, _ := ed25519.GenerateKey(rand.Reader)
	userSigner, _ := ssh.NewSignerFromKey(userPriv)
	return &provider.InstanceSpec{
		VM: vm, Installation: installation, Attempt: 1, IdempotencyToken: installation + "-" + vm + "-1",
		SSHUser:        "ubuntu",
		AuthorizedKeys: []string{strings.TrimSpace(string(ssh.MarshalAuthorizedKey(userSigner.PublicKey())))},
		HostKey: &provider.HostKey{PrivatePEM: string(pem.EncodeToMemory(block)),
			Public: strings.TrimSpace(string(ssh.MarshalAuthorizedKey(hostSigner.PublicKey())))},
		OpenPorts: []provider.Port{{Number: 6443, Protocol: "tcp"}},
	}
}

// offer plans req and returns the first offer.
func (e *env) offer(t *testing.T, req provider.ResourceRequest) provider.Offer {
	t.Helper()
	offers, err := e.p.Plan(context.Background(), &req)
	if err != nil || len(offers) == 0 {
		t.Fatalf("plan %+v: %d offers, err %v", req, len(offers), err)
	}
	return offers[0]
}

// launch prepares and creates spec's VM on the first offer of req.
func (e *env) launch(t *testing.T, req provider.ResourceRequest, spec *provider.InstanceSpec) (provider.Offer, string) {
	t.Helper()
	ctx := context.Background()
	o := e.offer(t, req)
	prep, err := e.p.Prepare(ctx, &o, spec)
	if err != nil {
		t.Fatalf("prepare: %v", err)
	}
	id, err := e.p.Create(ctx, &o, prep, spec)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	return o, id
}

var l4 = provider.ResourceRequest{GPU: "L4", GPUCount: 1}

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

// awsConfig is the config most tests use: two regions, no refinement.
func awsConfig() aws.Config { return aws.Config{Regions: []string{"us-east-1", "us-west-2"}} }
