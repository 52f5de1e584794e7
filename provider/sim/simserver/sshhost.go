package simserver

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
	"golang.org/x/crypto/ssh"

	"github.com/org/gpuprov/internal/sshd"
)

// bootConfig is what an instance's SSH server is built from: the host key
// and the authorized keys, read from user-data as cloud-init would.
type bootConfig struct {
	hostKeyPEM     string
	hostKeyPublic  string
	authorizedKeys []string
}

// cloudConfig is the part of #cloud-config the simulator honours.
type cloudConfig struct {
	SSHKeys        map[string]string `yaml:"ssh_keys"`
	AuthorizedKeys []string          `yaml:"ssh_authorized_keys"`
}

// parseUserData reads the host key (ssh_keys.ed25519_private) and
// ssh_authorized_keys of a #cloud-config user-data, adds the public keys of
// the key resource (if any), and generates a host key when none was given.
// User-data that is not #cloud-config is accepted and ignored; malformed
// cloud-config or keys are an invalid_request (stricter than most clouds,
// which would boot an instance nobody can log in to).
func parseUserData(userData string, key *SSHKey) (*bootConfig, *apiError) {
	var cc cloudConfig
	if strings.HasPrefix(userData, "#cloud-config") {
		if err := yaml.Unmarshal([]byte(userData), &cc); err != nil {
			return nil, errorf(http.StatusBadRequest, CodeInvalidRequest, "user_data: malformed cloud-config: %v", err)
		}
	}
	b := &bootConfig{}
	if pemText := cc.SSHKeys["ed25519_private"]; pemText != "" {
		signer, err := ssh.ParsePrivateKey([]byte(pemText))
		if err != nil {
			return nil, errorf(http.StatusBadRequest, CodeInvalidRequest, "user_data: ssh_keys.ed25519_private: %v", err)
		}
		b.hostKeyPEM = pemText
		b.hostKeyPublic = strings.TrimSpace(string(ssh.MarshalAuthorizedKey(signer.PublicKey())))
	} else {
		_, priv, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			return nil, errorf(http.StatusInternalServerError, CodeInternal, "generate host key: %v", err)
		}
		block, err := ssh.MarshalPrivateKey(priv, "")
		if err != nil {
			return nil, errorf(http.StatusInternalServerError, CodeInternal, "generate host key: %v", err)
		}
		signer, err := ssh.NewSignerFromKey(priv)
		if err != nil {
			return nil, errorf(http.StatusInternalServerError, CodeInternal, "generate host key: %v", err)
		}
		b.hostKeyPEM = string(pem.EncodeToMemory(block))
		b.hostKeyPublic = strings.TrimSpace(string(ssh.MarshalAuthorizedKey(signer.PublicKey())))
	}
	keys := slices.Clone(cc.AuthorizedKeys)
	if key != nil {
		keys = append(keys, key.PublicKeys...)
	}
	for _, k := range keys {
		if _, err := parseAuthorizedKeys([]string{k}); err != nil {
			return nil, errorf(http.StatusBadRequest, CodeInvalidRequest, "%v", err)
		}
		if !slices.Contains(b.authorizedKeys, k) {
			b.authorizedKeys = append(b.authorizedKeys, k)
		}
	}
	return b, nil
}

func parseAuthorizedKeys(lines []string) ([]ssh.PublicKey, error) {
	out := make([]ssh.PublicKey, 0, len(lines))
	for _, l := range lines {
		k, _, _, _, err := ssh.ParseAuthorizedKey([]byte(l))
		if err != nil {
			return nil, fmt.Errorf("authorized key %.30q: %w", l, err)
		}
		out = append(out, k)
	}
	return out, nil
}

func (s *Server) sandboxDir(cloud, id string) string {
	return filepath.Join(s.stateDir, cloud, id)
}

// startSSH starts in's SSH server in its sandbox folder; a failure fails the
// instance. With DisableSSH it starts nothing and reports the placeholder
// endpoint. The caller holds s.mu.
func (s *Server) startSSH(c *cloud, in *instance, at time.Time) {
	in.SSH = nil
	if s.opts.DisableSSH {
		in.SSH = &SSHInfo{Host: "127.0.0.1", Port: DisabledSSHPort, User: in.SSHUser}
		return
	}
	srv, err := s.newSSH(c, in)
	if err != nil {
		s.log.Warn("simserver: start SSH", "cloud", c.cfg.Name, "instance", in.ID, "err", err)
		s.fail(c, in, at, "boot failed: SSH did not start: "+err.Error())
		return
	}
	in.ssh = srv
	in.SSH = &SSHInfo{Host: "127.0.0.1", Port: srv.Port(), User: in.SSHUser}
}

func (s *Server) newSSH(c *cloud, in *instance) (*sshd.Server, error) {
	signer, err := ssh.ParsePrivateKey([]byte(in.HostKeyPEM))
	if err != nil {
		return nil, fmt.Errorf("host key: %w", err)
	}
	keys, err := parseAuthorizedKeys(in.AuthorizedKeys)
	if err != nil {
		return nil, err
	}
	dir := s.sandboxDir(c.cfg.Name, in.ID)
	_, statErr := os.Stat(dir)
	fresh := errors.Is(statErr, fs.ErrNotExist)
	if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o700); err != nil {
		return nil, err
	}
	if fresh {
		if err := writeGPUs(dir, in, s.clock.Now()); err != nil {
			return nil, fmt.Errorf("emulated GPUs: %w", err)
		}
		if err := writeVolumeTools(dir); err != nil {
			return nil, fmt.Errorf("emulated block devices: %w", err)
		}
	}
	if fresh && s.opts.PrepareSandbox != nil {
		if err := s.opts.PrepareSandbox(dir, in.view()); err != nil {
			return nil, fmt.Errorf("prepare sandbox: %w", err)
		}
	}
	env := []string{
		"PATH=" + filepath.Join(dir, "bin") + string(os.PathListSeparator) + os.Getenv("PATH"),
		"HOME=" + dir,
		"USER=" + in.SSHUser,
		"GPUPROV_SIM_CLOUD=" + c.cfg.Name,
		"GPUPROV_SIM_INSTANCE=" + in.ID,
		"GPUPROV_SIM_METADATA=" + s.metadataURL(c.cfg.Name, in.ID),
		// The machine's root, under which gpuprov's commands write every
		// absolute path (a real machine's is empty); Options.SandboxEnv,
		// after it, may set another (the k3s emulation's ".").
		"GPUPROV_ROOT=" + dir,
	}
	return sshd.Start(sshd.Config{
		HostKey:        signer,
		AuthorizedKeys: keys,
		Dir:            dir,
		Env:            append(env, s.opts.SandboxEnv...),
		Logger:         s.log.With("cloud", c.cfg.Name, "instance", in.ID),
	})
}

// stopSSH queues in's SSH server for closing when s.mu is released.
func (s *Server) stopSSH(in *instance) {
	if in.ssh != nil {
		s.closing = append(s.closing, in.ssh)
		in.ssh = nil
	}
	in.SSH = nil
}
