package ssh

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	gossh "golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// ErrKeyExists is returned by WritePrivateKey when the file already holds
// a different key (or something that is not a key): it is never replaced.
var ErrKeyExists = errors.New("ssh: a different key already exists")

// KeyPair is an ed25519 key: gpuprov's client key, or a host key it
// injects into a VM. Its String, GoString and LogValue show only the
// public half, so printing or logging a KeyPair never leaks PrivatePEM.
type KeyPair struct {
	Signer        gossh.Signer
	PrivatePEM    []byte // OpenSSH private key format, unencrypted: a secret
	AuthorizedKey string // "ssh-ed25519 AAAA...", no trailing newline
}

// String returns the public key's fingerprint.
func (k KeyPair) String() string {
	if k.Signer == nil {
		return "KeyPair(empty)"
	}
	return "KeyPair(" + gossh.FingerprintSHA256(k.Signer.PublicKey()) + ")"
}

// GoString is String, so %#v does not print PrivatePEM either.
func (k KeyPair) GoString() string { return k.String() }

// LogValue logs the public key only.
func (k KeyPair) LogValue() slog.Value { return slog.StringValue(k.String()) }

// GenerateKey returns a new ed25519 key pair.
func GenerateKey() (KeyPair, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return KeyPair{}, fmt.Errorf("ssh: generate ed25519 key: %w", err)
	}
	signer, err := gossh.NewSignerFromKey(priv)
	if err != nil {
		return KeyPair{}, fmt.Errorf("ssh: generate ed25519 key: %w", err)
	}
	block, err := gossh.MarshalPrivateKey(priv, "")
	if err != nil {
		return KeyPair{}, fmt.Errorf("ssh: encode ed25519 key: %w", err)
	}
	return KeyPair{
		Signer:        signer,
		PrivatePEM:    pem.EncodeToMemory(block),
		AuthorizedKey: AuthorizedKey(signer.PublicKey()),
	}, nil
}

// ParsePrivateKey parses an unencrypted private key in OpenSSH or PEM
// format. The error never quotes the key.
func ParsePrivateKey(pemBytes []byte) (gossh.Signer, error) {
	signer, err := gossh.ParsePrivateKey(pemBytes)
	if err != nil {
		var missing *gossh.PassphraseMissingError
		if errors.As(err, &missing) {
			return nil, errors.New("ssh: private key is encrypted; gpuprov needs an unencrypted key")
		}
		return nil, fmt.Errorf("ssh: parse private key: %w", err)
	}
	return signer, nil
}

// LoadOrCreateKey returns the client key kept at path, generating an
// ed25519 key and writing it there (0600, atomically) the first time. A
// service calls it at every start, so that after a restart it still logs
// in to the machines it launched: a key generated anew at each start was
// never installed on them. Two processes starting at once end up with the
// same key (the one written first).
func LoadOrCreateKey(path string) (gossh.Signer, error) {
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		return ParsePrivateKey(b)
	case !errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("ssh: read key %s: %w", path, err)
	}
	kp, err := GenerateKey()
	if err != nil {
		return nil, err
	}
	if err := WritePrivateKey(path, kp); err != nil {
		if errors.Is(err, ErrKeyExists) { // another process wrote its own first
			if b, rerr := os.ReadFile(path); rerr == nil {
				return ParsePrivateKey(b)
			}
		}
		return nil, err
	}
	return kp.Signer, nil
}

// WritePrivateKey stores kp.PrivatePEM at path with mode 0600, creating
// the file atomically (a crash leaves no partial key). If path already
// holds the same key it returns nil (and tightens its mode to 0600); if it
// holds anything else it returns an error wrapping ErrKeyExists and leaves
// the file alone.
func WritePrivateKey(path string, kp KeyPair) error {
	if kp.Signer == nil || len(kp.PrivatePEM) == 0 {
		return fmt.Errorf("%w: empty KeyPair", ErrInvalidConfig)
	}
	if existing, err := os.ReadFile(path); err == nil {
		return sameKey(path, existing, kp)
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("ssh: read existing key %s: %w", path, err)
	}

	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*") // created 0600
	if err != nil {
		return fmt.Errorf("ssh: write key %s: %w", path, err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // after the link below this removes only the temporary name
	_, err = f.Write(kp.PrivatePEM)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("ssh: write key %s: %w", path, err)
	}
	// A hard link, unlike rename, fails if path appeared in the meantime.
	if err := os.Link(tmp, path); err != nil {
		if errors.Is(err, os.ErrExist) {
			if existing, rerr := os.ReadFile(path); rerr == nil {
				return sameKey(path, existing, kp)
			}
		}
		return fmt.Errorf("ssh: write key %s: %w", path, err)
	}
	return nil
}

func sameKey(path string, existing []byte, kp KeyPair) error {
	if !bytes.Equal(existing, kp.PrivatePEM) {
		signer, err := gossh.ParsePrivateKey(existing)
		if err != nil || !bytes.Equal(signer.PublicKey().Marshal(), kp.Signer.PublicKey().Marshal()) {
			return fmt.Errorf("%w: %s; remove it deliberately to replace it", ErrKeyExists, path)
		}
	}
	if err := os.Chmod(path, 0o600); err != nil {
		return fmt.Errorf("ssh: chmod key %s: %w", path, err)
	}
	return nil
}

// KnownHostsLine returns a known_hosts line for the server at addr
// ("host:port" or "host") with the given host key in authorized_keys form,
// so that `ssh -o UserKnownHostsFile=FILE` accepts the server without
// asking. It returns "" if authorizedKey does not parse — written to a
// known_hosts file, that matches no server, so nothing is trusted.
func KnownHostsLine(addr string, authorizedKey string) string {
	key, _, _, _, err := gossh.ParseAuthorizedKey([]byte(authorizedKey))
	if err != nil {
		return ""
	}
	return knownhosts.Line([]string{knownhosts.Normalize(addr)}, key)
}
