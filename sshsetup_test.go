package gpuprov_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/internal/sshd"
	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/ssh"
)

func newSigner(t *testing.T) gossh.Signer {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := gossh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// keyRecorder is a provider that records the keys each create installs.
type keyRecorder struct {
	provider.CloudProvider
	mu    sync.Mutex
	keys  [][]string
	users []string
}

func (k *keyRecorder) Create(ctx context.Context, o *provider.Offer, prep json.RawMessage, s *provider.InstanceSpec) (string, error) {
	k.mu.Lock()
	k.keys = append(k.keys, s.AuthorizedKeys)
	k.users = append(k.users, s.SSHUser)
	k.mu.Unlock()
	return k.CloudProvider.Create(ctx, o, prep, s)
}

// SSH settings that cannot log in are refused at New, with the fix named.
func TestNewRefusesIncoherentSSH(t *testing.T) {
	e := newEnv(t)
	key, other := newSigner(t), newSigner(t)
	otherLine := strings.TrimSpace(string(gossh.MarshalAuthorizedKey(other.PublicKey())))
	for _, tc := range []struct {
		name string
		opts []gpuprov.Option
		want string
	}{
		{"connector without any key installed", []gpuprov.Option{gpuprov.WithConnector(&gpuprov.SSHConnector{Signer: key})},
			gossh.FingerprintSHA256(key.PublicKey())},
		{"connector key not among the installed ones", []gpuprov.Option{gpuprov.WithConnector(&gpuprov.SSHConnector{Signer: key}),
			gpuprov.WithSSH("ubuntu", []string{otherLine}, true)}, "not installed on the VMs"},
		{"connector without a signer", []gpuprov.Option{gpuprov.WithConnector(&gpuprov.SSHConnector{})}, "no Signer"},
		{"connector key other than WithSSHKey's", []gpuprov.Option{gpuprov.WithSSHKey(other), gpuprov.WithConnector(&gpuprov.SSHConnector{Signer: key})},
			"not installed on the VMs"},
		{"connector login other than WithSSH's", []gpuprov.Option{gpuprov.WithConnector(&gpuprov.SSHConnector{Signer: key, User: "ubuntu"}),
			gpuprov.WithSSH("admin", []string{strings.TrimSpace(string(gossh.MarshalAuthorizedKey(key.PublicKey())))}, true)},
			`logs in as "ubuntu", but WithSSH installs the keys for "admin"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := gpuprov.New(e.j, append([]gpuprov.Option{gpuprov.WithProvider(e.fake("a"))}, tc.opts...)...)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "WithSSHKey") {
				t.Fatalf("New: %v; want an error saying %q and naming WithSSHKey", err, tc.want)
			}
		})
	}
}

// WithSSHKey installs the key it connects with: given once, it reaches both
// the VMs' authorized keys and the connector.
func TestWithSSHKeyInstallsTheKeyItConnectsWith(t *testing.T) {
	e := newEnv(t)
	key := newSigner(t)
	rec := &keyRecorder{CloudProvider: e.fake("a")}
	conn := &gpuprov.SSHConnector{}
	p, err := gpuprov.New(e.j, gpuprov.WithClock(e.clk), gpuprov.WithProvider(rec), gpuprov.WithSSHKey(key), gpuprov.WithConnector(conn))
	if err != nil {
		t.Fatal(err)
	}
	p.Close()
	if conn.Signer != key {
		t.Fatal("the SSHConnector given without a Signer did not get WithSSHKey's")
	}
	fn := newFakeNodes()
	p, err = gpuprov.New(e.j, gpuprov.WithClock(e.clk), gpuprov.WithProvider(rec), gpuprov.WithSSHKey(key), gpuprov.WithConnector(fn))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.Launch(context.Background(), h100("keyed")); err != nil {
		t.Fatal(err)
	}
	want := strings.TrimSpace(string(gossh.MarshalAuthorizedKey(key.PublicKey())))
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.keys) == 0 || len(rec.keys[0]) != 1 || rec.keys[0][0] != want {
		t.Fatalf("keys installed %v, want [%s]", rec.keys, want)
	}
}

// A launch that fails because the SSH login is refused says so in its
// error, not only in its events.
func TestLaunchErrorCarriesTheLastCause(t *testing.T) {
	fn := newFakeNodes()
	refused := "ssh: handshake failed: ssh: unable to authenticate, attempted methods [none publickey]: refused key SHA256:abc"
	fn.failConnErr = errors.New(refused)
	fn.failConn["locked"] = 100
	e := newEnv(t, gpuprov.WithConnector(fn))
	req := h100("locked")
	req.MaxOffers = 1
	_, err := e.p.Launch(context.Background(), req)
	if !errors.Is(err, gpuprov.ErrOffersExhausted) || !strings.Contains(err.Error(), "refused key SHA256:abc") {
		t.Fatalf("launch error %v; want offers exhausted with the refused key", err)
	}
	e.assertClean("locked")
}

// A launch whose node refuses the Provisioner's key over real SSH (an
// in-process sshd that authorizes another key) fails naming the refusal
// and the key refused, in its error and not only in its events.
func TestLaunchErrorNamesARealSSHAuthFailure(t *testing.T) {
	key, other := newSigner(t), newSigner(t)
	srv, err := sshd.Start(sshd.Config{HostKey: newSigner(t), AuthorizedKeys: []gossh.PublicKey{other.PublicKey()}, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	e := newEnv(t)
	for _, f := range e.fakes {
		f.SSHPort = srv.Port()
		// The test sshd has its own host key: pinned on first contact.
		f.Caps.Unsupported = []provider.Feature{provider.FeatureUserData}
	}
	// The connector's waits and the connect budget run on the fake clock:
	// the minute of retries takes a few real handshakes.
	p := e.provisioner(e.j, gpuprov.WithSSHKey(key), gpuprov.WithConnector(&gpuprov.SSHConnector{Sleep: e.clk.Sleep}),
		gpuprov.WithPhaseTimeouts(time.Minute, time.Minute))
	req := h100("refused")
	req.MaxOffers = 1
	_, err = p.Launch(context.Background(), req)
	if err == nil {
		t.Fatal("launch on a node that refuses the key succeeded")
	}
	fp := gossh.FingerprintSHA256(key.PublicKey())
	for _, want := range []string{"unable to authenticate", "refused key " + fp} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("launch error %q does not say %q", err, want)
		}
	}
	if !errors.Is(err, gpuprov.ErrOffersExhausted) || !errors.Is(err, ssh.ErrAuthFailed) {
		t.Errorf("launch error %v: want errors.Is ErrOffersExhausted and ssh.ErrAuthFailed", err)
	}
	e.assertClean("refused")
}

// SSHConnector.User given with WithSSHKey is where the keys go too: the
// login is named once.
func TestConnectorUserIsTheLoginTheKeysGoTo(t *testing.T) {
	e := newEnv(t)
	key := newSigner(t)
	rec := &keyRecorder{CloudProvider: e.fake("a")}
	// The fake's instances take no SSH: the create shows the login, and
	// the launch is cancelled once it is sent.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p, err := gpuprov.New(e.j, gpuprov.WithClock(e.clk), gpuprov.WithProvider(rec), gpuprov.WithSSHKey(key),
		gpuprov.WithConnector(&gpuprov.SSHConnector{Signer: key, User: "ubuntu"}),
		gpuprov.WithEvents(func(ev gpuprov.Event) {
			if ev.Type == gpuprov.EvCreated {
				cancel()
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	p.Launch(ctx, h100("login-1"))
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.users) == 0 || rec.users[0] != "ubuntu" {
		t.Fatalf("creates asked for logins %v; want ubuntu, the connector's", rec.users)
	}
}
