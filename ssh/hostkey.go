package ssh

import (
	"bytes"
	"fmt"
	"strings"
	"sync"

	gossh "golang.org/x/crypto/ssh"
)

// HostKeyPolicy decides whether a server's host key is accepted. Dial calls
// CheckHostKey once per handshake, with the address being dialled and the
// key the server presented; a nil error accepts the key. A policy must be
// safe for concurrent use: one policy usually serves every dial to a VM.
//
// A rejection is final: Dial returns the policy's error as is, and
// WaitReady returns it at once instead of retrying. Pinning policies
// reject a different key with a *[HostKeyMismatchError].
type HostKeyPolicy interface {
	CheckHostKey(addr string, key gossh.PublicKey) error
}

// AlgorithmHinter is an optional interface of a [HostKeyPolicy]: the
// host-key algorithms to ask the server for, most preferred first. A
// policy that pins one key implements it so that a server with several
// host keys (OpenSSH has RSA, ECDSA and ed25519) presents the pinned one.
// Nil means the library's default preference.
type AlgorithmHinter interface {
	HostKeyAlgorithms() []string
}

// HostKeyMismatchError is the error of a pinning policy that was presented
// another key. It satisfies errors.Is(err, ErrHostKeyMismatch).
type HostKeyMismatchError struct {
	Addr      string // the address dialled
	Expected  string // SHA256 fingerprint of the pinned key
	Presented string // SHA256 fingerprint of the key the server presented
}

// Error names the address and both fingerprints.
func (e *HostKeyMismatchError) Error() string {
	return fmt.Sprintf("ssh: host key of %s changed: expected %s, presented %s "+
		"(the VM was replaced, or the connection is intercepted)", e.Addr, e.Expected, e.Presented)
}

// Is reports whether target is ErrHostKeyMismatch.
func (e *HostKeyMismatchError) Is(target error) bool { return target == ErrHostKeyMismatch }

// FixedHostKey returns a policy that accepts only the given key, in
// authorized_keys form ("ssh-ed25519 AAAA... [comment]"): the host key
// gpuprov generated and injected through cloud-init, so there is no
// trust-on-first-use window. It returns an ErrInvalidConfig error if the
// key does not parse.
func FixedHostKey(authorizedKey string) (HostKeyPolicy, error) {
	key, err := parseAuthorizedKey(authorizedKey)
	if err != nil {
		return nil, err
	}
	return fixedKey{key}, nil
}

type fixedKey struct{ key gossh.PublicKey }

func (f fixedKey) CheckHostKey(addr string, key gossh.PublicKey) error {
	return checkPinned(addr, f.key, key)
}

func (f fixedKey) HostKeyAlgorithms() []string { return algorithmsFor(f.key) }

// TOFU returns a trust-on-first-use policy. With pinned == "" the first key
// presented is accepted and passed to pin (in authorized_keys form) to be
// stored, for instance in the journal under the instance id; if pin returns
// an error the dial fails with it and nothing is pinned, and WaitReady does
// not retry. From then on, and from the start when pinned != "", the
// policy behaves as [FixedHostKey]. A nil pin keeps the pin in memory only.
// A pinned value that does not parse fails every dial with ErrInvalidConfig.
func TOFU(pinned string, pin func(authorizedKey string) error) HostKeyPolicy {
	t := &tofu{pin: pin}
	if pinned != "" {
		t.key, t.err = parseAuthorizedKey(pinned)
	}
	return t
}

type tofu struct {
	pin func(string) error

	mu  sync.Mutex
	key gossh.PublicKey // nil until pinned
	err error           // a pinned value that did not parse
}

func (t *tofu) CheckHostKey(addr string, key gossh.PublicKey) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err != nil {
		return t.err
	}
	if t.key != nil {
		return checkPinned(addr, t.key, key)
	}
	if t.pin != nil {
		if err := t.pin(AuthorizedKey(key)); err != nil {
			return fmt.Errorf("ssh: pinning host key %s of %s: %w", gossh.FingerprintSHA256(key), addr, err)
		}
	}
	t.key = key
	return nil
}

func (t *tofu) HostKeyAlgorithms() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.key == nil {
		return nil
	}
	return algorithmsFor(t.key)
}

func checkPinned(addr string, want, got gossh.PublicKey) error {
	if bytes.Equal(want.Marshal(), got.Marshal()) {
		return nil
	}
	return &HostKeyMismatchError{
		Addr:      addr,
		Expected:  gossh.FingerprintSHA256(want),
		Presented: gossh.FingerprintSHA256(got),
	}
}

// algorithmsFor lists the signature algorithms that make a server present
// key: an RSA key signs with SHA-2 (or, last, SHA-1).
func algorithmsFor(key gossh.PublicKey) []string {
	if key.Type() == gossh.KeyAlgoRSA {
		return []string{gossh.KeyAlgoRSASHA512, gossh.KeyAlgoRSASHA256, gossh.KeyAlgoRSA}
	}
	return []string{key.Type()}
}

func parseAuthorizedKey(s string) (gossh.PublicKey, error) {
	key, _, _, _, err := gossh.ParseAuthorizedKey([]byte(s))
	if err != nil {
		return nil, fmt.Errorf("%w: host key %.40q is not in authorized_keys form: %v", ErrInvalidConfig, s, err)
	}
	return key, nil
}

// AuthorizedKey formats key the way authorized_keys and known_hosts hold
// it, without a trailing newline: "ssh-ed25519 AAAA...".
func AuthorizedKey(key gossh.PublicKey) string {
	return strings.TrimSpace(string(gossh.MarshalAuthorizedKey(key)))
}
