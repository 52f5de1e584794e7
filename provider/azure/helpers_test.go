package azure_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"strings"
	"testing"

	"go.uber.org/goleak"
	"golang.org/x/crypto/ssh"

	"github.com/org/gpuprov/internal/mototest"
	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/azure"
)

// TestMain stops the moto server TestFailoverAWSToAzureToVastAI starts.
func TestMain(m *testing.M) { goleak.VerifyTestMain(mototest.Main{M: m}) }

var (
	t4   = provider.ResourceRequest{GPU: "T4", GPUCount: 1}
	a100 = provider.ResourceRequest{GPU: "A100-80GB", GPUCount: 1}
)

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
		VM: vm, Installation: installation, Attempt: 1, IdempotencyToken: "tok-" + vm, SSHUser: "gpuprov",
		AuthorizedKeys: []string{strings.TrimSpace(string(ssh.MarshalAuthorizedKey(userSigner.PublicKey())))},
		HostKey: &provider.HostKey{PrivatePEM: string(pem.EncodeToMemory(block)),
			Public: strings.TrimSpace(string(ssh.MarshalAuthorizedKey(hostSigner.PublicKey())))},
		OpenPorts: []provider.Port{{Number: 6443, Protocol: "tcp"}, {Number: 51820, Protocol: "udp"}},
	}
}

// offerIn is the offer of req in loc's region (and zone), on demand or Spot.
func offerIn(t *testing.T, p *azure.Provider, req provider.ResourceRequest, loc provider.Location, spot bool) provider.Offer {
	t.Helper()
	offers, err := p.Plan(context.Background(), &req)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range offers {
		if o.Location == loc && o.Spot == spot {
			return o
		}
	}
	t.Fatalf("no offer in %s (spot %v) among %d", loc, spot, len(offers))
	return provider.Offer{}
}

func kindOf(t *testing.T, err error, want provider.ErrorKind) *provider.Error {
	t.Helper()
	var pe *provider.Error
	if !errors.As(err, &pe) || pe.Kind != want {
		t.Fatalf("err %v, want kind %s", err, want)
	}
	return pe
}

// launch prepares and creates spec's VM on offer o.
func launch(t *testing.T, p *azure.Provider, o provider.Offer, spec *provider.InstanceSpec) string {
	t.Helper()
	ctx := context.Background()
	prep, err := p.Prepare(ctx, &o, spec)
	if err != nil {
		t.Fatal(err)
	}
	id, err := p.Create(ctx, &o, prep, spec)
	if err != nil {
		t.Fatal(err)
	}
	return id
}
