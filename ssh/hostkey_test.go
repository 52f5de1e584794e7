package ssh

import (
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	gossh "golang.org/x/crypto/ssh"
)

func TestFixedHostKey(t *testing.T) {
	a, b := mustKey(t), mustKey(t)
	if _, err := FixedHostKey("not a key"); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("FixedHostKey(garbage) = %v, want ErrInvalidConfig", err)
	}
	p, err := FixedHostKey(a.AuthorizedKey + " comment\n")
	if err != nil {
		t.Fatal(err)
	}
	if err := p.CheckHostKey("10.0.0.1:22", a.Signer.PublicKey()); err != nil {
		t.Errorf("pinned key refused: %v", err)
	}
	err = p.CheckHostKey("10.0.0.1:22", b.Signer.PublicKey())
	var mm *HostKeyMismatchError
	if !errors.Is(err, ErrHostKeyMismatch) || !errors.As(err, &mm) {
		t.Fatalf("other key: %v, want a *HostKeyMismatchError", err)
	}
	wantExp, wantPres := gossh.FingerprintSHA256(a.Signer.PublicKey()), gossh.FingerprintSHA256(b.Signer.PublicKey())
	if mm.Expected != wantExp || mm.Presented != wantPres || mm.Addr != "10.0.0.1:22" {
		t.Errorf("mismatch %+v", mm)
	}
	for _, want := range []string{wantExp, wantPres, "10.0.0.1:22"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message %q lacks %s", err, want)
		}
	}
	if got := p.(AlgorithmHinter).HostKeyAlgorithms(); !slices.Equal(got, []string{gossh.KeyAlgoED25519}) {
		t.Errorf("algorithms %v", got)
	}
}

func TestFixedHostKeyRSAAsksForSHA2(t *testing.T) {
	priv, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := gossh.NewPublicKey(&priv.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	p, err := FixedHostKey(AuthorizedKey(pub))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{gossh.KeyAlgoRSASHA512, gossh.KeyAlgoRSASHA256, gossh.KeyAlgoRSA}
	if got := p.(AlgorithmHinter).HostKeyAlgorithms(); !slices.Equal(got, want) {
		t.Errorf("algorithms %v, want %v", got, want)
	}
}

func TestTOFUPinsOnceUnderConcurrency(t *testing.T) {
	a, b := mustKey(t), mustKey(t)
	var mu sync.Mutex
	var pins []string
	p := TOFU("", func(k string) error {
		mu.Lock()
		defer mu.Unlock()
		pins = append(pins, k)
		return nil
	})
	if got := p.(AlgorithmHinter).HostKeyAlgorithms(); got != nil {
		t.Errorf("unpinned algorithms %v, want the default (nil)", got)
	}
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			if err := p.CheckHostKey("h:22", a.Signer.PublicKey()); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if len(pins) != 1 || pins[0] != a.AuthorizedKey {
		t.Fatalf("pins %q, want one of %q", pins, a.AuthorizedKey)
	}
	if err := p.CheckHostKey("h:22", b.Signer.PublicKey()); !errors.Is(err, ErrHostKeyMismatch) {
		t.Fatalf("changed key: %v", err)
	}
	if got := p.(AlgorithmHinter).HostKeyAlgorithms(); !slices.Equal(got, []string{gossh.KeyAlgoED25519}) {
		t.Errorf("pinned algorithms %v", got)
	}
}

func TestTOFUPinFailureLeavesNothingPinned(t *testing.T) {
	a, b := mustKey(t), mustKey(t)
	fail := true
	p := TOFU("", func(string) error {
		if fail {
			return errors.New("journal unavailable")
		}
		return nil
	})
	if err := p.CheckHostKey("h:22", a.Signer.PublicKey()); err == nil || !strings.Contains(err.Error(), "journal unavailable") {
		t.Fatalf("pin failure: %v", err)
	}
	fail = false
	if err := p.CheckHostKey("h:22", b.Signer.PublicKey()); err != nil {
		t.Fatalf("after a failed pin, the next key should be pinned: %v", err)
	}
}

func TestTOFUWithPinAndBadPin(t *testing.T) {
	a, b := mustKey(t), mustKey(t)
	p := TOFU(a.AuthorizedKey, nil)
	if err := p.CheckHostKey("h:22", a.Signer.PublicKey()); err != nil {
		t.Error(err)
	}
	if err := p.CheckHostKey("h:22", b.Signer.PublicKey()); !errors.Is(err, ErrHostKeyMismatch) {
		t.Errorf("other key: %v", err)
	}
	if err := TOFU("garbage", nil).CheckHostKey("h:22", a.Signer.PublicKey()); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("unparsable pin: %v", err)
	}
	// nil pin: remembered in memory only.
	mem := TOFU("", nil)
	if err := mem.CheckHostKey("h:22", a.Signer.PublicKey()); err != nil {
		t.Error(err)
	}
	if err := mem.CheckHostKey("h:22", b.Signer.PublicKey()); !errors.Is(err, ErrHostKeyMismatch) {
		t.Errorf("in-memory pin not enforced: %v", err)
	}
}
