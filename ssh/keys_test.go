package ssh

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	gossh "golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

func TestGenerateAndParseKey(t *testing.T) {
	kp := mustKey(t)
	if !bytes.HasPrefix(kp.PrivatePEM, []byte("-----BEGIN OPENSSH PRIVATE KEY-----")) {
		t.Errorf("PrivatePEM is not in OpenSSH format: %.40q", kp.PrivatePEM)
	}
	signer, err := ParsePrivateKey(kp.PrivatePEM)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(signer.PublicKey().Marshal(), kp.Signer.PublicKey().Marshal()) {
		t.Error("parsed key differs from the generated one")
	}
	pub, _, _, _, err := gossh.ParseAuthorizedKey([]byte(kp.AuthorizedKey))
	if err != nil || pub.Type() != gossh.KeyAlgoED25519 || strings.HasSuffix(kp.AuthorizedKey, "\n") {
		t.Errorf("AuthorizedKey %q: %v", kp.AuthorizedKey, err)
	}
	if _, err := ParsePrivateKey([]byte("garbage")); err == nil {
		t.Error("garbage parsed")
	}
}

func TestParsePrivateKeyEncrypted(t *testing.T) {
	// ssh-keygen is much faster at bcrypt than the race-instrumented Go.
	keygen, err := exec.LookPath("ssh-keygen")
	if err != nil {
		t.Skipf("no ssh-keygen: %v", err)
	}
	file := filepath.Join(t.TempDir(), "key")
	if out, err := exec.Command(keygen, "-q", "-t", "ed25519", "-N", "pw", "-f", file).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v: %s", err, out)
	}
	pemBytes, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	_, err = ParsePrivateKey(pemBytes)
	if err == nil || !strings.Contains(err.Error(), "encrypted") {
		t.Fatalf("encrypted key: %v", err)
	}
}

func TestKeyPairNeverPrintsPrivateKey(t *testing.T) {
	kp := mustKey(t)
	var logged bytes.Buffer
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("key", "kp", kp)
	printed := fmt.Sprintf("%v %+v %#v %s", kp, kp, kp, kp) + logged.String()
	secret := strings.Split(string(kp.PrivatePEM), "\n")[1][:20]
	if strings.Contains(printed, secret) || strings.Contains(printed, "PRIVATE") {
		t.Fatalf("private key leaked: %s", printed)
	}
	if !strings.Contains(printed, gossh.FingerprintSHA256(kp.Signer.PublicKey())) {
		t.Errorf("fingerprint missing: %s", printed)
	}
}

func TestWritePrivateKey(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "id_ed25519")
	kp := mustKey(t)
	if err := WritePrivateKey(path, kp); err != nil {
		t.Fatal(err)
	}
	assertFile(t, path, kp.PrivatePEM, 0o600)

	// Same key again: fine, and the mode is tightened.
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WritePrivateKey(path, kp); err != nil {
		t.Fatalf("rewriting the same key: %v", err)
	}
	assertFile(t, path, kp.PrivatePEM, 0o600)

	// A different key, or garbage, is never replaced.
	if err := WritePrivateKey(path, mustKey(t)); !errors.Is(err, ErrKeyExists) {
		t.Fatalf("different key: %v, want ErrKeyExists", err)
	}
	assertFile(t, path, kp.PrivatePEM, 0o600)
	garbage := filepath.Join(dir, "garbage")
	if err := os.WriteFile(garbage, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := WritePrivateKey(garbage, kp); !errors.Is(err, ErrKeyExists) {
		t.Fatalf("garbage file: %v, want ErrKeyExists", err)
	}
	if err := WritePrivateKey(filepath.Join(dir, "x"), KeyPair{}); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("empty KeyPair: %v", err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Errorf("temporary files left behind: %v", entries)
	}
}

func assertFile(t *testing.T, path string, want []byte, mode os.FileMode) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("%s: content differs (%v)", path, err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != mode {
		t.Fatalf("%s: mode %v, want %v (%v)", path, fi.Mode().Perm(), mode, err)
	}
}

func TestKnownHostsLine(t *testing.T) {
	kp := mustKey(t)
	if got := KnownHostsLine("10.0.0.1:22", "garbage"); got != "" {
		t.Errorf("garbage key gave %q", got)
	}
	tests := []struct{ addr, prefix string }{
		{"10.0.0.1:22", "10.0.0.1 "},
		{"10.0.0.1:2222", "[10.0.0.1]:2222 "},
		{"example.test", "example.test "},
	}
	for _, tt := range tests {
		line := KnownHostsLine(tt.addr, kp.AuthorizedKey)
		if !strings.HasPrefix(line, tt.prefix) {
			t.Errorf("KnownHostsLine(%s) = %q", tt.addr, line)
		}
	}
	// The line verifies with the knownhosts package too.
	file := filepath.Join(t.TempDir(), "known_hosts")
	if err := os.WriteFile(file, []byte(KnownHostsLine("10.0.0.1:2222", kp.AuthorizedKey)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cb, err := knownhosts.New(file)
	if err != nil {
		t.Fatal(err)
	}
	remote := &net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 2222}
	if err := cb("10.0.0.1:2222", remote, kp.Signer.PublicKey()); err != nil {
		t.Errorf("knownhosts refused its own line: %v", err)
	}
	if err := cb("10.0.0.1:2222", remote, mustKey(t).Signer.PublicKey()); err == nil {
		t.Error("knownhosts accepted another key")
	}
}

// TestLoadOrCreateKey: the first call writes a 0600 key, every later call
// (a restart) returns that same key, and a file that is not a key is an
// error, not a new key over it.
func TestLoadOrCreateKey(t *testing.T) {
	path := filepath.Join(t.TempDir(), "id_ed25519")
	first, err := LoadOrCreateKey(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v, mode %v; want 0600", err, fi.Mode())
	}
	again, err := LoadOrCreateKey(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(first.PublicKey().Marshal(), again.PublicKey().Marshal()) {
		t.Error("a second LoadOrCreateKey returned another key: a restart would not log in")
	}
	bad := filepath.Join(t.TempDir(), "not-a-key")
	if err := os.WriteFile(bad, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreateKey(bad); err == nil {
		t.Error("LoadOrCreateKey of a file that is no key succeeded")
	}
	if b, _ := os.ReadFile(bad); string(b) != "hello" {
		t.Error("LoadOrCreateKey overwrote a file that is no key")
	}
}
